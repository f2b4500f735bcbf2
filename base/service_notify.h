// Tells the service manager how a daemon is doing, for systemd units of Type=notify (sd_notify(3)):
// READY once it serves, RELOADING while it re-reads its configuration (SIGHUP), STOPPING when it
// shuts down, and a one-line STATUS that `systemctl status` shows. Under anything else — no
// $NOTIFY_SOCKET in the environment — every call does nothing and returns OK.
//
// Thread safety: thread-safe (each call is one datagram).
#ifndef SLIMFIT_BASE_SERVICE_NOTIFY_H_
#define SLIMFIT_BASE_SERVICE_NOTIFY_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace slimfit::base {

// "READY=1" (and "STATUS=<status>" when given): start-up is complete.
absl::Status NotifyReady(absl::string_view status = "");
// "RELOADING=1": a reload started; call NotifyReady when it is done.
absl::Status NotifyReloading();
// "STOPPING=1" (and the status): shutdown started.
absl::Status NotifyStopping(absl::string_view status = "");
// "STATUS=<status>".
absl::Status NotifyStatus(absl::string_view status);

// The message as sent, for tests: the lines joined by '\n'; a status's newlines become spaces.
std::string NotifyMessage(absl::string_view state, absl::string_view status);

}  // namespace slimfit::base

#endif  // SLIMFIT_BASE_SERVICE_NOTIFY_H_
