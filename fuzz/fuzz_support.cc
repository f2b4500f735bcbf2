#include "fuzz/fuzz_support.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "google/protobuf/stubs/logging.h"

namespace slimfit::fuzz {
namespace {

// Inputs protobuf refuses (a string field that is not UTF-8) make it log an error line each, which
// only slows fuzzing down: here they are expected, so its logs are discarded.
const bool kProtobufLogsDiscarded = [] {
  google::protobuf::SetLogHandler(nullptr);
  return true;
}();

std::string* scratch_dir = nullptr;

void RemoveScratchDir() {
  std::error_code ignored;
  std::filesystem::remove_all(*scratch_dir, ignored);
}

std::string ScratchRoot() {
  if (const char* dir = std::getenv("SLIMFIT_FUZZ_SCRATCH"); dir != nullptr && *dir != '\0') return dir;
  struct stat st;
  if (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0) return "/dev/shm";
  if (const char* dir = std::getenv("TMPDIR"); dir != nullptr && *dir != '\0') return dir;
  return "/tmp";
}

const std::string& ScratchDir() {
  static std::once_flag once;
  std::call_once(once, [] {
    scratch_dir = new std::string(absl::StrCat(ScratchRoot(), "/slimfit-fuzz.", getpid()));
    std::error_code error;
    std::filesystem::create_directories(*scratch_dir, error);
    if (error) {
      std::fprintf(stderr, "fuzz: cannot create scratch directory %s: %s\n", scratch_dir->c_str(),
                   error.message().c_str());
      std::abort();
    }
    std::atexit(RemoveScratchDir);
  });
  return *scratch_dir;
}

}  // namespace

void FailInvariant(const char* file, int line, const char* condition, const std::string& details) {
  std::fprintf(stderr, "fuzz invariant failed at %s:%d: %s%s%s\n", file, line, condition,
               details.empty() ? "" : ": ", details.c_str());
  std::fflush(stderr);
  std::abort();
}

std::string ScratchPath(absl::string_view name) { return absl::StrCat(ScratchDir(), "/", name); }

std::string WriteScratchFile(absl::string_view name, absl::string_view bytes) {
  const std::string path = ScratchPath(name);
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  bool ok = fd >= 0;
  for (size_t done = 0; ok && done < bytes.size();) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<size_t>(n);
  }
  if (fd >= 0 && close(fd) != 0) ok = false;
  if (!ok) {
    std::fprintf(stderr, "fuzz: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    std::abort();
  }
  return path;
}

}  // namespace slimfit::fuzz
