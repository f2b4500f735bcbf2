// linear_products_bench: the three matrix products of one linear map — forward (bias + x·Wᵀ),
// input gradient (g·W) and weight-gradient accumulation (sink += xᵀ·g) — at the row counts of
// slices, the way the engine runs them (performer/matrix_products.h) against LibTorch's own
// products (OpenBLAS on Debian), each with the threads on the pool that runs it
// (performer/cpu_runtime.h). W is the parameter's [out, in] storage; "forward copy" multiplies
// by a contiguous [in, out] copy of it, as the engine does where oneDNN runs the products.
//
//   bazel-bin/bench/linear_products_bench --rows=16,64,256,4096 --in=256 --out=1024 --threads=2
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "performer/cpu_runtime.h"
#include "performer/matrix_products.h"

ABSL_FLAG(std::string, rows, "16,64,256,4096", "rows of x (tokens of a slice), comma-separated");
ABSL_FLAG(int64_t, in, 256, "input width of the map");
ABSL_FLAG(int64_t, out, 1024, "output width of the map");
ABSL_FLAG(int, threads, 2, "compute threads");
ABSL_FLAG(double, seconds, 0.2, "time spent per measurement");

namespace {

// GFLOP/s of `op` (2·rows·in·out FLOPs per call), run for about --seconds after a warm-up.
double Rate(const std::function<void()>& op, int64_t rows) {
  op();
  int64_t calls = 0;
  const absl::Time start = absl::Now();
  double elapsed = 0;
  while (elapsed < absl::GetFlag(FLAGS_seconds)) {
    op();
    ++calls;
    elapsed = absl::ToDoubleSeconds(absl::Now() - start);
  }
  return 2.0 * rows * absl::GetFlag(FLAGS_in) * absl::GetFlag(FLAGS_out) * calls / elapsed / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  namespace p = slimfit::performer;
  absl::ParseCommandLine(argc, argv);
  const int64_t in = absl::GetFlag(FLAGS_in), out = absl::GetFlag(FLAGS_out);
  const int threads = absl::GetFlag(FLAGS_threads);
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_rows), ',', absl::SkipEmpty())) {
    int64_t rows = 0;
    if (!absl::SimpleAtoi(part, &rows) || rows <= 0 || in <= 0 || out <= 0) {
      std::fprintf(stderr, "linear_products_bench: --rows, --in and --out must be positive integers\n");
      return 1;
    }
    const at::Tensor x = at::randn({rows, in}), g = at::randn({rows, out}), bias = at::randn({out});
    const at::Tensor w = at::randn({out, in});     // the parameter, [out, in]
    const at::Tensor w_copy = w.t().contiguous();  // the forward copy, [in, out]
    at::Tensor sink = at::zeros({in, out});
    struct Variant {
      const char* name;
      bool engine;
      const at::Tensor* forward_weight;
    };
    for (const Variant& v :
         {Variant{"libtorch", false, nullptr}, Variant{"engine, one layout", true, nullptr},
          Variant{"engine, forward copy", true, &w_copy}}) {
      if (v.engine && !p::OneDnnProducts()) continue;
      // LibTorch's products run in OpenBLAS: give it the threads, as the engine did before oneDNN.
      if (absl::Status s = p::ConfigureCpuThreads(threads, v.engine ? at::kFloat : at::kDouble); !s.ok()) {
        std::fprintf(stderr, "linear_products_bench: %s\n", s.ToString().c_str());
        return 1;
      }
      const at::Tensor weight_t = v.forward_weight != nullptr ? *v.forward_weight : w.t();
      const double forward = Rate(
          [&] { v.engine ? (void)p::AddBiasProduct(bias, x, weight_t) : (void)at::addmm(bias, x, weight_t); },
          rows);
      const double input = Rate([&] { v.engine ? (void)p::Product(g, w) : (void)at::mm(g, w); }, rows);
      const double weight =
          Rate([&] { v.engine ? p::AccumulateProduct(sink, x.t(), g) : (void)sink.addmm_(x.t(), g); }, rows);
      std::printf(
          "{\"rows\": %lld, \"in\": %lld, \"out\": %lld, \"variant\": \"%s\", \"threads\": %d, "
          "\"forward_gflops\": %.1f, \"input_grad_gflops\": %.1f, \"weight_grad_gflops\": %.1f}\n",
          static_cast<long long>(rows), static_cast<long long>(in), static_cast<long long>(out), v.name,
          threads, forward, input, weight);
    }
  }
  return 0;
}
