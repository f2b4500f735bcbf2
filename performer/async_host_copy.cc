#include "performer/async_host_copy.h"

#include <c10/core/impl/VirtualGuardImpl.h>

#include <thread>

namespace slimfit::performer {

AsyncHostCopy::AsyncHostCopy(const at::Tensor& value) {
  if (!value.device().is_cuda()) {
    // A copy, never a view: Read() gives the value as it was, whatever the caller writes later.
    host_ = value.to(at::kCPU, value.scalar_type(), /*non_blocking=*/false, /*copy=*/true).contiguous();
    return;
  }
  host_ = at::empty(value.sizes(), value.options().device(at::kCPU).pinned_memory(true));
  host_.copy_(value, /*non_blocking=*/true);
  const c10::impl::VirtualGuardImpl guard(value.device().type());
  copied_.emplace(value.device().type());
  copied_->record(guard.getStream(value.device()));
}

at::Tensor AsyncHostCopy::Read() {
  if (copied_) {
    // c10::Event has no blocking wait in every LibTorch this builds against (Debian's has query()
    // only); the host has nothing else to do meanwhile, as in CUDA's default spinning wait.
    while (!copied_->query()) std::this_thread::yield();
    copied_.reset();
  }
  return host_;
}

}  // namespace slimfit::performer
