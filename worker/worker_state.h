// The worker's state directory (--state_dir): what a slimfit-worker keeps across restarts.
//
//   <dir>/worker_id          the id the coordinator assigned at the first registration, one line;
//                            sent back on every later start so the worker keeps its identity
//   <dir>/credential         the secret the coordinator issued with that id (mode 0600): the
//                            bearer of every later call to the coordinator
//   <dir>/profile.textproto  the calibrated DeviceProfile as a text-format slimfit.v1.DeviceProfile,
//                            preceded by comment lines naming the key it was calibrated for
//                            (device, threads, dtype) and when; a start with another key
//                            (e.g. a different --threads) recalibrates instead of using it
//
// Every file is written atomically (temporary file beside it, flushed, renamed over it), so a
// crash leaves the old file or the new one, never a part.
//
// Example:
//   absl::StatusOr<StateDir> state = StateDir::Open("/var/lib/slimfit-worker");
//   absl::StatusOr<std::string> id = state->ReadWorkerId();     // "" on the first start
//   absl::StatusOr<std::optional<CachedProfile>> cached = state->LoadProfile(key);
//
// Thread safety: a StateDir is an immutable path; its methods touch the file system and may be
// called concurrently (concurrent writers of one file leave one complete file: the last rename
// wins). Two processes sharing one directory would share one identity: don't.
#ifndef SLIMFIT_WORKER_WORKER_STATE_H_
#define SLIMFIT_WORKER_WORKER_STATE_H_

#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "performer/engine_revision.h"
#include "performer/plan.h"
#include "planner/device_profile.h"

namespace slimfit::worker {

// Files are written with slimfit::WriteFileAtomically (proto/atomic_file.h).

// What a calibrated profile depends on: a profile measured with other settings is not reused.
struct ProfileKey {
  std::string device;  // "cpu", "cuda:0"
  int threads = 1;
  performer::DType dtype = performer::DType::kFloat32;
  bool cuda_graphs = true;  // --cuda_graphs: calibration measures slices as the worker runs them
  // The engine the profile was measured against (performer/engine_revision.h): a cache from an
  // earlier engine is not reused, so a worker calibrates again once after an upgrade.
  int engine_revision = performer::kEngineRevision;

  // "device=cpu threads=2 dtype=float32 engine_revision=6", with " cuda_graphs=false" before the
  // revision when off: how the key is written in the cache file. Revision 1 is not written (the
  // spelling of caches from before the field existed).
  std::string ToString() const;
  bool operator==(const ProfileKey& other) const {
    return device == other.device && threads == other.threads && dtype == other.dtype &&
           cuda_graphs == other.cuda_graphs && engine_revision == other.engine_revision;
  }
};

struct CachedProfile {
  planner::DeviceProfile profile;
  absl::Time calibrated_at;
};

class StateDir {
 public:
  static constexpr char kWorkerIdFile[] = "worker_id";
  static constexpr char kCredentialFile[] = "credential";
  static constexpr char kProfileFile[] = "profile.textproto";

  // Opens `path`, creating it and its missing parents (mode 0755 less the umask).
  // INVALID_ARGUMENT for an empty path or one that exists but is not a directory;
  // PERMISSION_DENIED when it cannot be created or written; messages name the path.
  [[nodiscard]] static absl::StatusOr<StateDir> Open(const std::string& path);

  const std::string& path() const { return path_; }

  // The stored worker id; "" when none is stored yet (first start).
  // INVALID_ARGUMENT (naming the file) for a file that holds no valid id (empty, several lines,
  // whitespace inside, longer than LIMIT_MAX_NAME_BYTES); I/O errors as their errno's code.
  [[nodiscard]] absl::StatusOr<std::string> ReadWorkerId() const;
  // Stores `id` atomically. INVALID_ARGUMENT for an id ReadWorkerId would refuse.
  [[nodiscard]] absl::Status WriteWorkerId(absl::string_view id) const;

  // The stored credential; "" when none. INVALID_ARGUMENT (naming the file) for a malformed file.
  [[nodiscard]] absl::StatusOr<std::string> ReadCredential() const;
  // Stores `credential` atomically, readable by this user only (0600).
  [[nodiscard]] absl::Status WriteCredential(absl::string_view credential) const;
  // Removes the credential (the coordinator no longer knows this worker). OK when there is none.
  [[nodiscard]] absl::Status ClearCredential() const;

  // The cached profile if one is stored for exactly `key`; nullopt when none is stored or the
  // stored one was calibrated for another key (a calibration is due). INVALID_ARGUMENT naming
  // the file when it is corrupt (the caller may recalibrate and overwrite it).
  [[nodiscard]] absl::StatusOr<std::optional<CachedProfile>> LoadProfile(const ProfileKey& key) const;
  // Stores `profile` for `key`, calibrated at `calibrated_at`, atomically. INVALID_ARGUMENT for a
  // profile that fails DeviceProfile::Validate().
  [[nodiscard]] absl::Status StoreProfile(const ProfileKey& key, const planner::DeviceProfile& profile,
                                          absl::Time calibrated_at) const;

 private:
  explicit StateDir(std::string path) : path_(std::move(path)) {}
  std::string FilePath(absl::string_view name) const;

  std::string path_;
};

}  // namespace slimfit::worker

#endif  // SLIMFIT_WORKER_WORKER_STATE_H_
