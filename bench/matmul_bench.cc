// matmul_bench: the machine's float32 matrix-multiply throughput, through LibTorch's own product
// (the BLAS it links: OpenBLAS on Debian) and through the engine's (performer/matrix_products.h:
// oneDNN where the build has it); the faster is the yardstick BENCHMARKS.md compares the
// gradient's FLOP rate against.
//
//   bazel run -c opt //bench:matmul_bench -- --threads=2 --sizes=512,1024,2048
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "performer/matrix_products.h"

ABSL_FLAG(int, threads, 2, "intra-op threads");
ABSL_FLAG(std::string, sizes, "512,1024,2048", "square matrix sizes n, comma-separated");
ABSL_FLAG(int, repeats, 5, "timed products per size (median reported)");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  at::set_num_threads(absl::GetFlag(FLAGS_threads));  // OpenBLAS keeps its own default: one per core
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_sizes), ',', absl::SkipEmpty())) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(part, &n) || n <= 0) {
      std::fprintf(stderr, "matmul_bench: --sizes: '%s' is not a positive integer\n",
                   std::string(part).c_str());
      return 1;
    }
    const at::Tensor a = at::randn({n, n});
    const at::Tensor b = at::randn({n, n});
    // LibTorch's own product (OpenBLAS here), and the engine's (oneDNN where the build has it).
    for (const bool engine : {false, true}) {
      if (engine && !slimfit::performer::OneDnnProducts()) continue;
      auto product = [&] { return engine ? slimfit::performer::Product(a, b) : at::mm(a, b); };
      at::Tensor c = product();  // warm-up
      std::vector<double> seconds;
      for (int i = 0; i < absl::GetFlag(FLAGS_repeats); ++i) {
        const absl::Time start = absl::Now();
        c = product();
        seconds.push_back(absl::ToDoubleSeconds(absl::Now() - start));
      }
      std::sort(seconds.begin(), seconds.end());
      const double median = seconds[seconds.size() / 2];
      std::printf("{\"n\": %lld, \"library\": \"%s\", \"threads\": %d, \"time_s\": %.6f, \"gflops\": %.2f}\n",
                  static_cast<long long>(n), engine ? "onednn" : "libtorch", at::get_num_threads(), median,
                  2.0 * n * n * n / median / 1e9);
    }
  }
  return 0;
}
