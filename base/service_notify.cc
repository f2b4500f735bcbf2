#include "base/service_notify.h"

#include <systemd/sd-daemon.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace slimfit::base {
namespace {

absl::Status Send(absl::string_view state, absl::string_view status) {
  const std::string message = NotifyMessage(state, status);
  const int sent = sd_notify(0, message.c_str());
  if (sent >= 0) return absl::OkStatus();  // 0: not under a service manager
  return absl::UnavailableError(
      absl::StrCat("cannot notify the service manager ($NOTIFY_SOCKET): ", std::strerror(-sent)));
}

}  // namespace

std::string NotifyMessage(absl::string_view state, absl::string_view status) {
  std::string message(state);
  if (!status.empty()) {
    absl::StrAppend(&message, message.empty() ? "" : "\n",
                    "STATUS=", absl::StrReplaceAll(status, {{"\n", " "}}));
  }
  return message;
}

absl::Status NotifyReady(absl::string_view status) { return Send("READY=1", status); }
absl::Status NotifyReloading() { return Send("RELOADING=1", ""); }
absl::Status NotifyStopping(absl::string_view status) { return Send("STOPPING=1", status); }
absl::Status NotifyStatus(absl::string_view status) { return Send("", status); }

}  // namespace slimfit::base
