// The client side of the daemon socket: one request per connection, every wait bounded.
#pragma once

#include "stagehand/proto/messages.hpp"
#include "stagehand/util/result.hpp"

#include <chrono>
#include <functional>
#include <string>

namespace stagehand::ipc {

struct CallOptions
{
  std::chrono::milliseconds connect_deadline{1000}; // connect and send the request
  std::chrono::milliseconds idle_deadline{60000};   // longest silence between reply frames
};

using ProgressSink = std::function<void(const proto::Progress&)>;

// Sends `request` to the daemon at `socket_path` and waits for its result frame, passing progress
// frames to `progress`. Transport failures (no socket, refused, timeout, the daemon died) are io
// errors; the daemon's own refusal comes back inside the frame.
Result<proto::ReplyFrame> call(const std::string& socket_path, const proto::Request& request,
                               const CallOptions& options = {}, const ProgressSink& progress = nullptr);

} // namespace stagehand::ipc
