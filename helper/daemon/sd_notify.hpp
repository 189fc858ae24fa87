// systemd's readiness protocol without libsystemd: one datagram to $NOTIFY_SOCKET.
#pragma once

#include <string>

namespace stagehand::daemon {

// Sends `state` ("READY=1", ...) when started by systemd with Type=notify; otherwise does nothing.
void sd_notify(const std::string& state);

} // namespace stagehand::daemon
