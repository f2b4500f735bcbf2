// A device tensor copied to the host without waiting for it.
//
// Reading a GPU value on the host (`.cpu()`, `.item()`) waits until the device has run everything
// queued before it: the device then idles while the host issues the next work. Where the host can
// read a value later — after queueing more work — an AsyncHostCopy starts the copy behind the work
// already queued and waits only at Read(), while the device runs what was queued since. The front
// guard of the sliced gradient (sliced_gradient.h) reads each stretch's denominator totals this
// way, one stretch late.
//
// On a CUDA device the copy goes to pinned host memory on the current stream, followed by an event
// that Read() waits for: until the stream reaches the copy (the work queued before it, not the
// work queued since), spinning on the event as CUDA's default wait does (not every LibTorch this
// builds against can block on a c10::Event). On any other device the copy is made at once. Either
// way Read() gives the value as it was when the copy was queued, whatever is written to it later.
//
// Ownership: the object holds the host tensor (and the event); moving it moves both.
// Thread safety: one thread; Read() on the thread whose current stream the copy was queued on, or
// after that stream's work is known done.
#ifndef SLIMFIT_PERFORMER_ASYNC_HOST_COPY_H_
#define SLIMFIT_PERFORMER_ASYNC_HOST_COPY_H_

#include <ATen/ATen.h>
#include <c10/core/Event.h>

#include <optional>

namespace slimfit::performer {

class AsyncHostCopy {
 public:
  // Nothing to read: Read() returns an undefined tensor.
  AsyncHostCopy() = default;
  // Queues the copy of `value` (any device, any dtype) on the current stream of its device.
  explicit AsyncHostCopy(const at::Tensor& value);

  AsyncHostCopy(AsyncHostCopy&&) = default;
  AsyncHostCopy& operator=(AsyncHostCopy&&) = default;

  // `value` on the host, contiguous, once the copy is done.
  at::Tensor Read();

 private:
  at::Tensor host_;
  std::optional<c10::Event> copied_;  // on CUDA: recorded after the copy
};

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_ASYNC_HOST_COPY_H_
