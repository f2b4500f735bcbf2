#include "bench/op_counter.h"

#include <set>

namespace slimfit::bench {
namespace {

thread_local OpCounter* active = nullptr;

}  // namespace

bool IsViewOrAllocation(const std::string& name) {
  static const std::set<std::string> kNames = {
      "aten::alias",       "aten::as_strided",  "aten::detach",      "aten::empty",     "aten::empty_like",
      "aten::empty_strided", "aten::expand",    "aten::narrow",      "aten::permute",   "aten::reshape",
      "aten::_reshape_alias", "aten::resize_",  "aten::resolve_conj", "aten::resolve_neg", "aten::select",
      "aten::slice",       "aten::squeeze",     "aten::t",           "aten::transpose", "aten::unsqueeze",
      "aten::view",        "detach"};
  return kNames.count(name) > 0;
}

OpCounter::OpCounter() {
  active = this;
  at::enableRecordFunction(true);
  handle_ = at::addThreadLocalCallback(at::RecordFunctionCallback(&OpCounter::Enter, &OpCounter::Exit)
                                           .scopes({at::RecordScope::FUNCTION}));
}

OpCounter::~OpCounter() {
  at::removeCallback(handle_);
  active = nullptr;
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
