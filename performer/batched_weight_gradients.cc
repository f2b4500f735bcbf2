#include "performer/batched_weight_gradients.h"

#include <c10/util/Exception.h>

#include <algorithm>

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
    allocated_bytes_ += pending.x.nbytes() + pending.g.nbytes();
  }
  TORCH_CHECK(
      pending.gradient.is_same(gradient) && pending.x.size(1) == x.size(1) && pending.g.size(1) == g.size(1),
      "BatchedWeightGradients::Add: another gradient, or other widths, at the same address");
  // Every product but a call's last has exactly rows_ inner rows: a slice's rows that do not fit
  // go into the next batch.
  for (int64_t done = 0; done < r;) {
    const int64_t take = std::min(r - done, rows_ - pending.filled);
    pending.x.narrow(0, pending.filled, take).copy_(x.narrow(0, done, take));
    pending.g.narrow(0, pending.filled, take).copy_(g.narrow(0, done, take));
    pending.filled += take;
    done += take;
    if (pending.filled == rows_) FlushOne(pending);
  }
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
