// prefix_kernel_bench: the chunked causal prefix sums, forward and backward, in their fused CPU
// kernels (prefix_attention_cpu.h) against the LibTorch form, at the shapes one layer of a slice
// or of a full sequence hands them, each form with the threads on the pool that runs its products.
// Prints one JSON object per row count.
//
//   bazel-bin/bench/prefix_kernel_bench --rows=16,64,256,4096 --heads=4 --features=64 --dim=64 --block=64
//   --threads=2
#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "performer/cpu_runtime.h"
#include "performer/prefix_attention.h"
#include "performer/prefix_attention_cpu.h"

ABSL_FLAG(std::string, rows, "16,64,256,4096", "rows S of one call, comma-separated");
ABSL_FLAG(int64_t, heads, 4, "heads k");
ABSL_FLAG(int64_t, features, 64, "features per head M");
ABSL_FLAG(int64_t, dim, 64, "head dimension d");
ABSL_FLAG(int64_t, block, 64, "block size b of the chunked prefix sums");
ABSL_FLAG(int, threads, 2, "compute threads (performer/cpu_runtime.h)");
ABSL_FLAG(int, repeats, 50, "timed forward+backward passes per configuration (median reported)");

namespace {

using slimfit::performer::CausalPrefixAttention;
using slimfit::performer::Front;
using slimfit::performer::PrefixAttentionResult;
using slimfit::performer::PrefixMode;
using slimfit::performer::Segment;

absl::StatusOr<double> MedianSeconds(int64_t rows, bool fused) {
  slimfit::performer::EnableFusedPrefixKernels(fused);
  // Each form with the threads where its products run: the fused kernels on the OpenMP team, the
  // LibTorch form's batched products in OpenBLAS (the engine's float64 split, and the float32 one
  // before oneDNN).
  if (absl::Status s = slimfit::performer::ConfigureCpuThreads(absl::GetFlag(FLAGS_threads),
                                                               fused ? at::kFloat : at::kDouble);
      !s.ok()) {
    return s;
  }
  const int64_t k = absl::GetFlag(FLAGS_heads), m = absl::GetFlag(FLAGS_features),
                d = absl::GetFlag(FLAGS_dim);
  const at::Tensor q = at::rand({k, rows, m}).requires_grad_(true);
  const at::Tensor key = at::rand({k, rows, m}).requires_grad_(true);
  const at::Tensor v = at::randn({k, rows, d}).requires_grad_(true);
  const Front start{at::rand({k, m, d}).requires_grad_(true), at::rand({k, m}).requires_grad_(true)};
  const at::Tensor gn = at::randn({k, rows, d}), gd = at::randn({k, rows});
  const at::Tensor gr = at::randn({k, m, d}), gz = at::randn({k, m});
  const std::vector<Segment> one = {Segment{0, rows, true}};
  std::vector<double> seconds;
  for (int i = 0; i <= absl::GetFlag(FLAGS_repeats); ++i) {  // pass 0 warms up
    const absl::Time begin = absl::Now();
    PrefixAttentionResult out =
        CausalPrefixAttention(q, key, v, start, one, PrefixMode::kChunked, absl::GetFlag(FLAGS_block));
    torch::autograd::grad({out.numerator, out.denominator, out.end.numerator, out.end.denominator},
                          {q, key, v, start.numerator, start.denominator}, {gn, gd, gr, gz});
    if (i > 0) seconds.push_back(absl::ToDoubleSeconds(absl::Now() - begin));
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_rows), ',', absl::SkipEmpty())) {
    int64_t rows = 0;
    if (!absl::SimpleAtoi(part, &rows) || rows <= 0) {
      std::fprintf(stderr, "prefix_kernel_bench: --rows: '%s' is not a positive integer\n",
                   std::string(part).c_str());
      return 1;
    }
    const absl::StatusOr<double> libtorch = MedianSeconds(rows, false);
    const absl::StatusOr<double> fused = MedianSeconds(rows, true);
    if (!libtorch.ok() || !fused.ok()) {
      std::fprintf(stderr, "prefix_kernel_bench: %s\n",
                   (libtorch.ok() ? fused.status() : libtorch.status()).ToString().c_str());
      return 1;
    }
    std::printf(
        "{\"rows\": %lld, \"block\": %lld, \"libtorch_us\": %.1f, \"fused_us\": %.1f, \"speedup\": %.2f}\n",
        static_cast<long long>(rows), static_cast<long long>(absl::GetFlag(FLAGS_block)), *libtorch * 1e6,
        *fused * 1e6, *libtorch / *fused);
  }
  return 0;
}
