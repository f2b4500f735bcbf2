#include "worker/worker_state.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/files.h"
#include "planner/device_profile_io.h"
#include "proto/slimfit.pb.h"

namespace slimfit::worker {
namespace {

constexpr absl::string_view kKeyPrefix = "# key: ";
constexpr absl::string_view kCalibratedAtPrefix = "# calibrated_at: ";

absl::Status ReadFile(const std::string& path, std::string* contents) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  contents->clear();
  char buffer[4096];
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error_number = errno;
      close(fd);
      return absl::ErrnoToStatus(error_number, absl::StrCat("cannot read ", path));
    }
    if (n == 0) break;
    contents->append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return absl::OkStatus();
}

absl::Status ValidateWorkerId(absl::string_view id, absl::string_view where) {
  if (id.empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": the worker id is empty"));
  if (static_cast<int64_t>(id.size()) > v1::LIMIT_MAX_NAME_BYTES) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": the worker id has ", id.size(), " bytes; at most ", v1::LIMIT_MAX_NAME_BYTES));
  }
  for (const char c : id) {
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": the worker id \"", absl::CHexEscape(id),
                                                     "\" contains whitespace or a control character"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string ProfileKey::ToString() const {
  return absl::StrCat("device=", device, " threads=", threads, " dtype=", performer::DTypeName(dtype),
                      cuda_graphs ? "" : " cuda_graphs=false",
                      engine_revision == 1 ? "" : absl::StrCat(" engine_revision=", engine_revision));
}

absl::StatusOr<StateDir> StateDir::Open(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("--state_dir is empty; expected a directory");
  // mkdir -p: every prefix ending before a '/', then the path itself.
  std::vector<std::string> prefixes;
  for (size_t i = 1; i < path.size(); ++i) {
    if (path[i] == '/' && path[i - 1] != '/') prefixes.push_back(path.substr(0, i));
  }
  prefixes.push_back(path);
  for (const std::string& prefix : prefixes) {
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::ErrnoToStatus(errno, absl::StrCat("state directory ", path, ": cannot create ", prefix));
    }
  }
  struct stat info;
  if (stat(path.c_str(), &info) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("state directory ", path));
  }
  if (!S_ISDIR(info.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("state directory ", path, " exists but is not a directory"));
  }
  if (access(path.c_str(), W_OK | X_OK) != 0) {
    return absl::PermissionDeniedError(absl::StrCat("state directory ", path, " is not writable"));
  }
  std::string clean = path;
  while (clean.size() > 1 && clean.back() == '/') clean.pop_back();
  return StateDir(std::move(clean));
}

std::string StateDir::FilePath(absl::string_view name) const {
  return path_ == "/" ? absl::StrCat("/", name) : absl::StrCat(path_, "/", name);
}

absl::StatusOr<std::string> StateDir::ReadWorkerId() const {
  const std::string file = FilePath(kWorkerIdFile);
  std::string contents;
  if (absl::Status s = ReadFile(file, &contents); !s.ok()) {
    if (absl::IsNotFound(s)) return std::string();
    return s;
  }
  absl::string_view id = contents;
  absl::ConsumeSuffix(&id, "\n");
  if (absl::Status s = ValidateWorkerId(id, file); !s.ok()) return s;
  return std::string(id);
}

absl::Status StateDir::WriteWorkerId(absl::string_view id) const {
  const std::string file = FilePath(kWorkerIdFile);
  if (absl::Status s = ValidateWorkerId(id, file); !s.ok()) return s;
  return base::WriteFileAtomically(file, absl::StrCat(id, "\n"));
}

absl::StatusOr<std::string> StateDir::ReadCredential() const {
  const std::string file = FilePath(kCredentialFile);
  std::string contents;
  if (absl::Status s = ReadFile(file, &contents); !s.ok()) {
    if (absl::IsNotFound(s)) return std::string();
    return s;
  }
  absl::string_view credential = contents;
  absl::ConsumeSuffix(&credential, "\n");
  if (credential.empty() || credential.size() > 256 ||
      credential.find_first_of(" \t\r\n") != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": not a credential (one line, no white space)"));
  }
  return std::string(credential);
}

absl::Status StateDir::WriteCredential(absl::string_view credential) const {
  absl::StatusOr<base::AtomicFileWriter> writer =
      base::AtomicFileWriter::Create(FilePath(kCredentialFile), 0600);
  if (!writer.ok()) return writer.status();
  if (absl::Status s = writer->Append(absl::StrCat(credential, "\n")); !s.ok()) return s;
  return writer->Commit();
}

absl::Status StateDir::ClearCredential() const {
  const std::string file = FilePath(kCredentialFile);
  if (unlink(file.c_str()) != 0 && errno != ENOENT) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot remove ", file));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<CachedProfile>> StateDir::LoadProfile(const ProfileKey& key) const {
  const std::string file = FilePath(kProfileFile);
  std::string contents;
  if (absl::Status s = ReadFile(file, &contents); !s.ok()) {
    if (absl::IsNotFound(s)) return std::optional<CachedProfile>();
    return s;
  }
  std::optional<std::string> stored_key;
  std::optional<absl::Time> calibrated_at;
  for (absl::string_view line : absl::StrSplit(contents, '\n')) {
    if (absl::ConsumePrefix(&line, kKeyPrefix)) {
      stored_key = std::string(line);
    } else if (absl::ConsumePrefix(&line, kCalibratedAtPrefix)) {
      absl::Time time;
      std::string error;
      if (!absl::ParseTime(absl::RFC3339_full, line, &time, &error)) {
        return absl::InvalidArgumentError(
            absl::StrCat(file, ": calibrated_at \"", line, "\" is not an RFC 3339 time: ", error));
      }
      calibrated_at = time;
    }
  }
  if (!stored_key.has_value() || !calibrated_at.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": missing the \"# key:\" or \"# calibrated_at:\" header line"));
  }
  if (*stored_key != key.ToString()) return std::optional<CachedProfile>();
  absl::StatusOr<planner::DeviceProfile> profile = planner::ParseDeviceProfileText(contents);
  if (!profile.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", profile.status().message()));
  }
  return std::optional<CachedProfile>(CachedProfile{*std::move(profile), *calibrated_at});
}

absl::Status StateDir::StoreProfile(const ProfileKey& key, const planner::DeviceProfile& profile,
                                    absl::Time calibrated_at) const {
  const std::string file = FilePath(kProfileFile);
  if (absl::Status s = profile.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": refusing to store an invalid profile: ", s.message()));
  }
  const std::string text =
      absl::StrCat("# slimfit-worker: calibrated device profile, reused while the key matches\n", kKeyPrefix,
                   key.ToString(), "\n", kCalibratedAtPrefix,
                   absl::FormatTime(absl::RFC3339_full, calibrated_at, absl::UTCTimeZone()), "\n",
                   planner::DeviceProfileToText(profile));
  return base::WriteFileAtomically(file, text);
}

}  // namespace slimfit::worker
