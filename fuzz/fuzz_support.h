// What every slimfit fuzz target (//fuzz) shares: an invariant check that stops the run with a
// message, and a scratch directory for decoders that take a path.
//
// A fuzz target is a file defining
//
//   extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
//
// that feeds `data` to one decoder of outside bytes and checks what comes back. Built with
// --config=fuzz it links libFuzzer's main (coverage-guided fuzzing, scripts/fuzz.sh); otherwise it
// links corpus_replay_main.cc, which runs every file of the checked-in corpus through it (the
// //fuzz:*_corpus_test regression tests).
//
// Example:
//   absl::StatusOr<DeviceProfile> parsed = ParseDeviceProfileText(text);
//   if (!parsed.ok()) {
//     SLIMFIT_FUZZ_CHECK(absl::IsInvalidArgument(parsed.status()), parsed.status().ToString());
//     return 0;
//   }
//
// Thread safety: ScratchPath may be called from any thread; targets run one input at a time.
#ifndef SLIMFIT_FUZZ_FUZZ_SUPPORT_H_
#define SLIMFIT_FUZZ_FUZZ_SUPPORT_H_

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace slimfit::fuzz {

// Prints "fuzz invariant failed at FILE:LINE: CONDITION: DETAILS" to stderr and aborts, which
// libFuzzer reports as a crash (saving the input) and the corpus tests as a failure.
[[noreturn]] void FailInvariant(const char* file, int line, const char* condition,
                                const std::string& details);

// A path named `name` inside this process's scratch directory ($SLIMFIT_FUZZ_SCRATCH, else
// /dev/shm when it exists, else $TMPDIR or /tmp; in a subdirectory "slimfit-fuzz.<pid>" created
// on first use and removed at exit). Nothing else is created.
std::string ScratchPath(absl::string_view name);

// Writes `bytes` to ScratchPath(name), replacing it, and returns the path. Aborts (an environment
// failure, not a finding) when the write fails.
std::string WriteScratchFile(absl::string_view name, absl::string_view bytes);

}  // namespace slimfit::fuzz

// Checks an invariant of the decoder under test. The details are absl::StrCat arguments (pass a
// status as status.ToString()); they are only evaluated when the check fails.
#define SLIMFIT_FUZZ_CHECK(condition, ...)                                             \
  do {                                                                                 \
    if (!(condition)) {                                                                \
      ::slimfit::fuzz::FailInvariant(__FILE__, __LINE__, #condition,                   \
                                     ::slimfit::fuzz::internal::Details(__VA_ARGS__)); \
    }                                                                                  \
  } while (false)

namespace slimfit::fuzz::internal {
inline std::string Details() { return ""; }
template <typename... Args>
std::string Details(const Args&... args) {
  return absl::StrCat(args...);
}
}  // namespace slimfit::fuzz::internal

#endif  // SLIMFIT_FUZZ_FUZZ_SUPPORT_H_
