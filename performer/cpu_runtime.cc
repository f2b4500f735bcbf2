#include "performer/cpu_runtime.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>

#include "absl/strings/str_cat.h"
#include "performer/matrix_products.h"

namespace slimfit::performer {
namespace {

using SetThreadsFn = void (*)(int);
using GetThreadsFn = int (*)();

// OpenBLAS is loaded by LibTorch; look its controls up at run time so other BLAS builds still link.
SetThreadsFn OpenBlasSetThreads() {
  return reinterpret_cast<SetThreadsFn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
}
GetThreadsFn OpenBlasGetThreads() {
  return reinterpret_cast<GetThreadsFn>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
}

}  // namespace

absl::Status ConfigureCpuThreads(int threads, at::ScalarType products) {
  if (threads < 1)
    return absl::InvalidArgumentError(absl::StrCat("threads must be at least 1, got ", threads));
  SetThreadsFn set_blas = OpenBlasSetThreads();
  const bool openmp_products = set_blas == nullptr || (products == at::kFloat && OneDnnProducts());
  if (set_blas != nullptr) set_blas(openmp_products ? 1 : threads);
  at::set_num_threads(openmp_products ? threads : 1);
  return absl::OkStatus();
}

int BlasThreads() {
  GetThreadsFn get = OpenBlasGetThreads();
  return get == nullptr ? -1 : get();
}

std::string BlasName() { return OpenBlasGetThreads() == nullptr ? "unknown" : "openblas"; }

}  // namespace slimfit::performer
