#include "bench/op_counter.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <thread>

namespace slimfit::bench {
namespace {

TEST(OpCounterTest, CountsTopLevelCallsAndTellsViewsFromCompute) {
  const at::Tensor a = at::ones({4, 3});
  OpCounts counts;
  {
    OpCounter counter;
    at::Tensor b = a.t();              // a view
    at::Tensor c = b.mul(2.0);         // arithmetic
    c.add_(1.0);                       // arithmetic, in place
    at::Tensor d = c.to(at::kDouble);  // a copy made inside `to`: one top-level call
    counts = counter.Counts();
    EXPECT_EQ(d.sum().item<double>(), 36.0);  // after Counts(): not counted above
  }
  EXPECT_EQ(counts.by_name["aten::t"], 1);
  EXPECT_EQ(counts.by_name["aten::mul"], 1);
  EXPECT_EQ(counts.by_name["aten::add_"], 1);
  EXPECT_EQ(counts.by_name["aten::to"], 1);
  EXPECT_EQ(counts.by_name.count("aten::_to_copy"), 0u);  // nested in `to`
  EXPECT_EQ(counts.by_name.count("aten::copy_"), 0u);
  EXPECT_EQ(counts.calls, 4);
  EXPECT_EQ(counts.compute, 3);
}

TEST(OpCounterTest, LeavesNoCallbackAndCountsNoOtherThread) {
  EXPECT_FALSE(at::hasThreadLocalCallbacks());
  { OpCounter counter; }
  EXPECT_FALSE(at::hasThreadLocalCallbacks());
  const at::Tensor a = at::ones({2});
  OpCounter counter;
  EXPECT_TRUE(at::hasThreadLocalCallbacks());
  std::thread([&] { (void)a.mul(3.0); }).join();
  EXPECT_EQ(counter.Counts().calls, 0);
  (void)a.mul(3.0);
  EXPECT_EQ(counter.Counts().calls, 1);
}

// A call that throws still leaves the counter at the top level: the next call counts.
TEST(OpCounterTest, ACallThatThrowsLeavesTheNextOneCounted) {
  const at::Tensor a = at::ones({2, 3});
  OpCounter counter;
  EXPECT_THROW((void)at::mm(a, a), c10::Error);
  (void)a.mul(2.0);
  const OpCounts counts = counter.Counts();
  EXPECT_EQ(counts.by_name.at("aten::mm"), 1);
  EXPECT_EQ(counts.by_name.at("aten::mul"), 1);
}

TEST(OpCounterTest, NestedCountersCountInTurn) {
  const at::Tensor a = at::ones({2});
  OpCounter outer;
  (void)a.mul(2.0);
  {
    OpCounter inner;
    (void)a.add(1.0);
    EXPECT_EQ(inner.Counts().calls, 1);
  }
  (void)a.sub(1.0);
  const OpCounts counts = outer.Counts();
  EXPECT_EQ(counts.calls, 2);
  EXPECT_EQ(counts.by_name.count("aten::add"), 0u);
}

TEST(OpCounterTest, ViewsAndAllocationsAreTheMetadataOperators) {
  EXPECT_TRUE(IsViewOrAllocation("aten::view"));
  EXPECT_TRUE(IsViewOrAllocation("aten::empty"));
  EXPECT_TRUE(IsViewOrAllocation("aten::narrow"));
  EXPECT_FALSE(IsViewOrAllocation("aten::copy_"));
  EXPECT_FALSE(IsViewOrAllocation("aten::bmm"));
  EXPECT_FALSE(IsViewOrAllocation("aten::contiguous"));  // copies when it must
  EXPECT_FALSE(IsViewOrAllocation("aten::reshape"));     // so does reshape
}

}  // namespace
}  // namespace slimfit::bench
