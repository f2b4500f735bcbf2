// main() of a fuzz target built without libFuzzer: runs every file named on the command line, and
// every file under each directory named (recursively, in name order), through
// LLVMFuzzerTestOneInput once. The //fuzz:*_corpus_test targets run it over the checked-in corpus,
// so each decoder sees every corpus input in the ordinary (gcc) test suite too.
//
// Exit status: 0 when every input ran; 1 when an argument does not exist or no input was found
// (an empty corpus is a configuration error); a crash or an invariant failure aborts, after
// printing the input's path to stderr.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

// The input being run, for the fatal-signal handler (set before each input).
char current_input[4096];

void ReportInputAndDie(int signal_number) {
  const char prefix[] = "\ncorpus replay: fatal signal while running ";
  (void)!write(STDERR_FILENO, prefix, sizeof(prefix) - 1);
  (void)!write(STDERR_FILENO, current_input, strnlen(current_input, sizeof(current_input)));
  (void)!write(STDERR_FILENO, "\n", 1);
  signal(signal_number, SIG_DFL);
  raise(signal_number);
}

bool CollectInputs(const std::filesystem::path& root, std::vector<std::filesystem::path>* inputs) {
  std::error_code error;
  if (std::filesystem::is_regular_file(root, error)) {
    inputs->push_back(root);
    return true;
  }
  if (!std::filesystem::is_directory(root, error)) return false;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root, error)) {
    if (entry.is_regular_file()) inputs->push_back(entry.path());
  }
  return !error;
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  std::vector<std::filesystem::path> inputs;
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] == '-') continue;  // libFuzzer-style flags are accepted and ignored
    if (!CollectInputs(argv[i], &inputs)) {
      std::fprintf(stderr, "corpus replay: %s is neither a file nor a readable directory\n", argv[i]);
      return 1;
    }
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "corpus replay: no inputs (usage: %s FILE_OR_DIR...)\n", argv[0]);
    return 1;
  }
  std::sort(inputs.begin(), inputs.end());
  for (int s : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) signal(s, ReportInputAndDie);
  for (const std::filesystem::path& path : inputs) {
    std::snprintf(current_input, sizeof(current_input), "%s", path.c_str());
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      std::fprintf(stderr, "corpus replay: cannot read %s\n", path.c_str());
      return 1;
    }
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("corpus replay: %zu inputs ran\n", inputs.size());
  return 0;
}
