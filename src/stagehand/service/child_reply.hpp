// A daemon child's last word to its parent: the result as its message, or the failure; the
// child's exit code to go with it (0, or 1 for a failure).
#pragma once

#include "stagehand/ipc/child.hpp"
#include "stagehand/proto/child_messages.hpp"

namespace stagehand::service {

template <class T>
int reply_to_parent(int sock, const Result<T>& r)
{
  (void)ipc::send_message(sock, r ? proto::child_message(*r) : proto::child_failure(r.error()));
  return r ? 0 : 1;
}

} // namespace stagehand::service
