#include "performer/tensor_norms.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>

namespace slimfit::performer {
namespace {

constexpr int64_t kGrain = int64_t{1} << 16;

template <typename T>
double SquaredNormOf(const T* data, int64_t n) {
  return at::parallel_reduce(
      0, n, kGrain, 0.0,
      [data](int64_t begin, int64_t end, double partial) {
        for (int64_t i = begin; i < end; ++i)
          partial += static_cast<double>(data[i]) * static_cast<double>(data[i]);
        return partial;
      },
      std::plus<double>());
}

// NaN wins over everything (std::max would drop it depending on the order).
double MaxNaN(double a, double b) { return std::isnan(a) || a > b ? a : b; }

template <typename T>
double MaxMagnitudeOf(const T* data, int64_t n) {
  return at::parallel_reduce(
      0, n, kGrain, 0.0,
      [data](int64_t begin, int64_t end, double partial) {
        for (int64_t i = begin; i < end; ++i)
          partial = MaxNaN(partial, std::fabs(static_cast<double>(data[i])));
        return partial;
      },
      MaxNaN);
}

bool InPlace(const at::Tensor& x) { return x.device().is_cpu() && x.is_contiguous(); }

}  // namespace

double SquaredNorm(const at::Tensor& x) {
  if (InPlace(x) && x.scalar_type() == at::kFloat) return SquaredNormOf(x.data_ptr<float>(), x.numel());
  if (InPlace(x) && x.scalar_type() == at::kDouble) return SquaredNormOf(x.data_ptr<double>(), x.numel());
  return x.to(at::kDouble).pow(2).sum().item<double>();
}

double MaxMagnitude(const at::Tensor& x) {
  if (x.numel() == 0) return 0.0;
  if (InPlace(x) && x.scalar_type() == at::kFloat) return MaxMagnitudeOf(x.data_ptr<float>(), x.numel());
  if (InPlace(x) && x.scalar_type() == at::kDouble) return MaxMagnitudeOf(x.data_ptr<double>(), x.numel());
  return x.abs().max().item<double>();
}

}  // namespace slimfit::performer
