#include "performer/adamw_step.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <type_traits>

namespace slimfit::performer {
namespace {

// Elements per parallel block: large enough that a block streams several pages of each array.
constexpr int64_t kGrain = int64_t{1} << 15;

// The scalars of one step, each rounded to T as LibTorch rounds a Scalar for a T kernel.
template <typename T>
struct StepScalars {
  T decay, beta1, one_minus_beta1, beta2, one_minus_beta2, sqrt_bias_correction2, epsilon, neg_step_size,
      scale;
  bool decays, scales;
};

template <typename T>
inline void StepRange(T* p, const T* g, T* m, T* v, int64_t begin, int64_t end, const StepScalars<T>& s) {
  for (int64_t i = begin; i < end; ++i) {
    T grad = g[i];
    if (s.scales) grad = grad * s.scale;
    T param = p[i];
    if (s.decays) param = param * s.decay;
    const T exp_avg = m[i] * s.beta1 + s.one_minus_beta1 * grad;
    const T exp_avg_sq = v[i] * s.beta2 + s.one_minus_beta2 * grad * grad;
    const T denom = std::sqrt(exp_avg_sq) / s.sqrt_bias_correction2 + s.epsilon;
    m[i] = exp_avg;
    v[i] = exp_avg_sq;
    p[i] = param + s.neg_step_size * exp_avg / denom;
  }
}

// The loop compiled for AVX-512 and AVX2 besides the baseline, the version chosen by the CPU at
// load time (GCC's function multi-versioning), as LibTorch's own kernels do; with
// -ffp-contract=off every version rounds alike.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define SLIMFIT_ADAMW_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define SLIMFIT_ADAMW_CLONES
#endif

SLIMFIT_ADAMW_CLONES void StepRangeFloat(float* p, const float* g, float* m, float* v, int64_t begin,
                                         int64_t end, const StepScalars<float>& s) {
  StepRange(p, g, m, v, begin, end, s);
}

SLIMFIT_ADAMW_CLONES void StepRangeDouble(double* p, const double* g, double* m, double* v, int64_t begin,
                                          int64_t end, const StepScalars<double>& s) {
  StepRange(p, g, m, v, begin, end, s);
}

template <typename T>
void StepOf(T* p, const T* g, T* m, T* v, int64_t n, const StepScalars<T>& s) {
  at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    if constexpr (std::is_same_v<T, float>) {
      StepRangeFloat(p, g, m, v, begin, end, s);
    } else {
      StepRangeDouble(p, g, m, v, begin, end, s);
    }
  });
}

template <typename T>
void Run(at::Tensor& parameter, const at::Tensor& gradient, at::Tensor& exp_avg, at::Tensor& exp_avg_sq,
         int64_t step, const AdamWHyperparameters& h, double gradient_scale) {
  const double bias_correction1 = 1 - std::pow(h.beta1, static_cast<double>(step));
  const double bias_correction2 = 1 - std::pow(h.beta2, static_cast<double>(step));
  StepScalars<T> s;
  s.decays = h.weight_decay != 0;
  s.decay = static_cast<T>(1 - h.learning_rate * h.weight_decay);
  s.beta1 = static_cast<T>(h.beta1);
  s.one_minus_beta1 = static_cast<T>(1 - h.beta1);
  s.beta2 = static_cast<T>(h.beta2);
  s.one_minus_beta2 = static_cast<T>(1 - h.beta2);
  s.sqrt_bias_correction2 = static_cast<T>(std::sqrt(bias_correction2));
  s.epsilon = static_cast<T>(h.epsilon);
  s.neg_step_size = static_cast<T>(-(h.learning_rate / bias_correction1));
  s.scales = gradient_scale != 1.0;
  s.scale = static_cast<T>(gradient_scale);
  StepOf<T>(parameter.data_ptr<T>(), gradient.data_ptr<T>(), exp_avg.data_ptr<T>(), exp_avg_sq.data_ptr<T>(),
            parameter.numel(), s);
}

}  // namespace

bool AdamWStepApplies(const at::Tensor& parameter, const at::Tensor& gradient, const at::Tensor& exp_avg,
                      const at::Tensor& exp_avg_sq) {
  const at::ScalarType dtype = parameter.scalar_type();
  if (dtype != at::kFloat && dtype != at::kDouble) return false;
  for (const at::Tensor* x : {&parameter, &gradient, &exp_avg, &exp_avg_sq}) {
    if (!x->defined() || !x->device().is_cpu() || x->scalar_type() != dtype || !x->is_contiguous() ||
        x->numel() != parameter.numel()) {
      return false;
    }
  }
  return true;
}

void AdamWStep(at::Tensor& parameter, const at::Tensor& gradient, at::Tensor& exp_avg, at::Tensor& exp_avg_sq,
               int64_t step, const AdamWHyperparameters& hyper, double gradient_scale) {
  TORCH_CHECK(AdamWStepApplies(parameter, gradient, exp_avg, exp_avg_sq),
              "AdamWStep: needs contiguous CPU float32 or float64 tensors of one dtype and size");
  TORCH_CHECK(step >= 1, "AdamWStep: step must be ≥ 1, got ", step);
  if (parameter.scalar_type() == at::kFloat) {
    Run<float>(parameter, gradient, exp_avg, exp_avg_sq, step, hyper, gradient_scale);
  } else {
    Run<double>(parameter, gradient, exp_avg, exp_avg_sq, step, hyper, gradient_scale);
  }
}

}  // namespace slimfit::performer
