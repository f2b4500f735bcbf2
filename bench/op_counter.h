// OpCounter: counts the LibTorch operator calls made on the calling thread while it is alive —
// what a slice costs in calls, and on a GPU roughly in kernel launches (each call that computes is
// a kernel or more), which is what bounds small slices there (BENCHMARKS.md, "What does a small slice
// call?"). Counted through a thread-local RecordFunction callback: calls made by other threads
// (LibTorch's intra-op pool, the autograd engine's device threads) are not counted; the
// hand-written path makes every call on the caller's thread.
//
// Top-level calls only (a call made inside another, such as the copy inside `to`, belongs to its
// caller), split into views and allocations (metadata and memory only: no kernel) and the rest.
//
// Example:
//   OpCounter counter;
//   ComputeGradient(model, batch, plan, options);
//   OpCounts counts = counter.Counts();
//
// Thread safety: a counter counts its own thread's calls only. Counters on one thread nest: the
// newest counts, and the one before it counts again once it is gone (not the calls made meanwhile).
#ifndef SLIMFIT_BENCH_OP_COUNTER_H_
#define SLIMFIT_BENCH_OP_COUNTER_H_

#include <ATen/record_function.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace slimfit::bench {

struct OpCounts {
  int64_t calls = 0;                       // every top-level call
  int64_t compute = 0;                     // of which not views or allocations
  std::map<std::string, int64_t> by_name;  // top-level calls by operator name ("aten::add_")
};

// Whether a call of this operator only makes a view or an allocation (no arithmetic, no copy).
bool IsViewOrAllocation(const std::string& name);

class OpCounter {
 public:
  OpCounter();
  ~OpCounter();
  OpCounter(const OpCounter&) = delete;
  OpCounter& operator=(const OpCounter&) = delete;

  OpCounts Counts() const { return counts_; }

 private:
  static std::unique_ptr<at::ObserverContext> Enter(const at::RecordFunction& fn);
  static void Exit(const at::RecordFunction& fn, at::ObserverContext* context);

  OpCounter* const previous_;  // the thread's counter before this one (null: none)
  OpCounts counts_;
  int depth_ = 0;
  at::CallbackHandle handle_;
};

}  // namespace slimfit::bench

#endif  // SLIMFIT_BENCH_OP_COUNTER_H_
