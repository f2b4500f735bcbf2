#include "performer/batched_weight_gradients.h"

#include <c10/util/Exception.h>

#include "performer/matrix_products.h"

namespace slimfit::performer {

void BatchedWeightGradients::Add(at::Tensor& gradient, const at::Tensor& x, const at::Tensor& g) {
  TORCH_CHECK(x.dim() == 2 && g.dim() == 2 && x.size(0) == g.size(0), "BatchedWeightGradients::Add: x ",
              x.sizes(), " and g ", g.sizes(), " must be [r, m] and [r, n]");
  const int64_t r = x.size(0);
  if (r == 0) return;
  if (r >= rows_) {
    AccumulateProduct(gradient, x.t(), g);
    return;
  }
  Pending& pending = pending_[gradient.data_ptr()];
  if (!pending.x.defined()) {
    pending.gradient = gradient;
    pending.x = at::empty({rows_, x.size(1)}, x.options());
    pending.g = at::empty({rows_, g.size(1)}, g.options());
  }
  if (pending.filled + r > rows_) FlushOne(pending);
  pending.x.narrow(0, pending.filled, r).copy_(x);
  pending.g.narrow(0, pending.filled, r).copy_(g);
  pending.filled += r;
}

void BatchedWeightGradients::FlushOne(Pending& pending) {
  if (pending.filled == 0) return;
  AccumulateProduct(pending.gradient, pending.x.narrow(0, 0, pending.filled).t(),
                    pending.g.narrow(0, 0, pending.filled));
  pending.filled = 0;
}

void BatchedWeightGradients::Flush() {
  for (auto& [data, pending] : pending_) FlushOne(pending);
}

}  // namespace slimfit::performer
