#include "bench/op_counter.h"

#include <set>

namespace slimfit::bench {
namespace {

thread_local OpCounter* active = nullptr;

}  // namespace

bool IsViewOrAllocation(const std::string& name) {
  // Not aten::reshape, aten::contiguous, aten::to: they copy when they must (the copy is nested in
  // them, so it is counted only through them).
  static const std::set<std::string> kNames = {"aten::alias",
                                               "aten::as_strided",
                                               "aten::chunk",
                                               "aten::detach",
                                               "aten::empty",
                                               "aten::empty_like",
                                               "aten::empty_strided",
                                               "aten::expand",
                                               "aten::expand_as",
                                               "aten::narrow",
                                               "aten::permute",
                                               "aten::_reshape_alias",
                                               "aten::resize_",
                                               "aten::resolve_conj",
                                               "aten::resolve_neg",
                                               "aten::select",
                                               "aten::slice",
                                               "aten::split",
                                               "aten::split_with_sizes",
                                               "aten::squeeze",
                                               "aten::t",
                                               "aten::transpose",
                                               "aten::unbind",
                                               "aten::unsqueeze",
                                               "aten::_unsafe_view",
                                               "aten::view",
                                               "aten::view_as",
                                               "detach"};
  return kNames.count(name) > 0;
}

OpCounter::OpCounter() : previous_(active) {
  active = this;
  at::enableRecordFunction(true);
  handle_ = at::addThreadLocalCallback(
      at::RecordFunctionCallback(&OpCounter::Enter, &OpCounter::Exit).scopes({at::RecordScope::FUNCTION}));
}

OpCounter::~OpCounter() {
  at::removeCallback(handle_);
  active = previous_;
}

std::unique_ptr<at::ObserverContext> OpCounter::Enter(const at::RecordFunction& fn) {
  OpCounter* self = active;
  if (self == nullptr) return nullptr;
  if (self->depth_++ == 0) {
    const std::string name = fn.name();
    ++self->counts_.calls;
    if (!IsViewOrAllocation(name)) ++self->counts_.compute;
    ++self->counts_.by_name[name];
  }
  return nullptr;
}

void OpCounter::Exit(const at::RecordFunction&, at::ObserverContext*) {
  if (active != nullptr && active->depth_ > 0) --active->depth_;
}

}  // namespace slimfit::bench
