#include "performer/slice_graphs.h"

#include <c10/util/Exception.h>

#include <exception>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"

namespace slimfit::performer::internal {
namespace {

ModelFront EmptyLike(const ModelFront& like) {
  ModelFront out;
  for (const Front& f : like)
    out.push_back(Front{at::empty_like(f.numerator), at::empty_like(f.denominator)});
  return out;
}

void CopyInto(ModelFront& to, const ModelFront& from) {
  TORCH_CHECK(to.size() == from.size(), "SliceGraphs: ", from.size(), " fronts for ", to.size(), " layers");
  for (size_t r = 0; r < to.size(); ++r) {
    to[r].numerator.copy_(from[r].numerator);
    to[r].denominator.copy_(from[r].denominator);
  }
}

ModelFront Clone(const ModelFront& fronts) {
  ModelFront out;
  for (const Front& f : fronts) out.push_back(Front{f.numerator.clone(), f.denominator.clone()});
  return out;
}

// The same layout and shapes as `like`, in buffers of its own.
Stretch StaticStretchLike(const Stretch& like) {
  Stretch s;
  s.layout = like.layout;
  s.all = at::empty_like(like.all);
  BindStretchViews(&s, like.tokens.size(0), like.targets.size(0));
  return s;
}

std::mutex& DisabledMutex() {
  static std::mutex* mutex = new std::mutex();
  return *mutex;
}

std::optional<std::string>& DisabledBecause() {  // guarded by DisabledMutex()
  static std::optional<std::string>* reason = new std::optional<std::string>();
  return *reason;
}

}  // namespace

std::optional<ReplayableWork::Mode> SliceGraphs::ModeFor(SliceReplay replay, const at::Device& device,
                                                         int64_t slices, int64_t slice,
                                                         std::string* why_not) {
  switch (replay) {
    case SliceReplay::kOff:
      return std::nullopt;
    case SliceReplay::kRerun:
      return ReplayableWork::Mode::kRerun;
    case SliceReplay::kAuto:
      break;
  }
  if (!device.is_cuda() || !ReplayableWork::CudaGraphsBuilt() || !AutoReplaysSlices(slices, slice)) {
    return std::nullopt;
  }
  if (std::optional<std::string> disabled = CapturesDisabledBecause()) {
    *why_not = absl::StrCat("CUDA graphs are off in this process since a capture failed: ", *disabled);
    return std::nullopt;
  }
  return ReplayableWork::Mode::kCudaGraph;
}

std::optional<std::string> SliceGraphs::CapturesDisabledBecause() {
  const std::lock_guard<std::mutex> lock(DisabledMutex());
  return DisabledBecause();
}

struct SliceGraphs::Shape {
  Stretch stretch;            // static: `all` refilled before each run; the layout is the shape's
  ModelFront in_front;        // U(n−1), or U(n) to subtract from, or the advance's entry
  ModelFront in_exit_grad;    // G(n) (steps)
  ModelFront out_front;       // U(n−1) (steps), the outgoing front (advances)
  ModelFront out_entry_grad;  // G(n−1) (steps)
  std::function<void()> body;
  std::unique_ptr<ReplayableWork> work;
};

SliceGraphs::SliceGraphs(SliceRunner& runner, ReplayableWork::Mode mode, const at::Device& device)
    : runner_(runner), mode_(mode), device_(device) {}

SliceGraphs::~SliceGraphs() = default;

bool SliceGraphs::Replayable(const Stretch& stretch) const {
  return on_ && stretch.layout.reversible && stretch.tokens.size(0) <= kMaxRows;
}

int64_t SliceGraphs::pool_bytes() const {
  int64_t bytes = 0;
  for (const auto& [key, shape] : shapes_) bytes += shape->work->pool_bytes();
  return bytes;
}

SliceGraphs::Shape* SliceGraphs::ShapeFor(Kind kind, const Stretch& stretch) {
  const Key key{kind, stretch.tokens.size(0), stretch.targets.size(0)};
  if (auto it = shapes_.find(key); it != shapes_.end()) return it->second.get();
  if (static_cast<int>(shapes_.size()) >= kMaxShapes) return nullptr;
  auto shape = std::make_unique<Shape>();
  Shape* s = shape.get();
  s->stretch = StaticStretchLike(stretch);
  const ModelFront zero = runner_.ZeroModelFront();
  s->in_front = EmptyLike(zero);
  s->out_front = EmptyLike(zero);
  if (kind == Kind::kAdvance) {
    s->body = [this, s] { CopyInto(s->out_front, runner_.Advance(s->stretch, s->in_front)); };
  } else {
    s->in_exit_grad = EmptyLike(zero);
    s->out_entry_grad = EmptyLike(zero);
    const bool subtract = kind == Kind::kStepSubtract;
    s->body = [this, s, subtract] {
      // Slice "1": any n > 0 reads its incoming front, which a stretch that continues it does.
      SliceRunner::Graph graph =
          runner_.Build(1, s->stretch, [s, subtract](int64_t r, const AttentionInputs& in) {
            return subtract ? FrontBefore(s->in_front[r], in) : s->in_front[r];
          });
      CopyInto(s->out_front, graph.entry);
      CopyInto(s->out_entry_grad, runner_.Backpropagate(graph, s->in_exit_grad));
    };
  }
  s->work = std::make_unique<ReplayableWork>(mode_, device_, pool_owner_);
  if (pool_owner_ == nullptr && mode_ == ReplayableWork::Mode::kCudaGraph) pool_owner_ = s->work.get();
  shapes_.emplace(key, std::move(shape));
  return s;
}

void SliceGraphs::Run(Shape& shape, int64_t slices_covered) {
  // Build and Advance count forwards in host code, which a replay does not run.
  const int64_t forwards = runner_.forwards();
  const ReplayableWork::Phase phase = shape.work->next_phase();
  try {
    shape.work->Run(shape.body);
  } catch (const std::exception& e) {
    if (phase != ReplayableWork::Phase::kCapture) throw;  // a real failure of the work itself
    // The capture ran nothing on the device: turn replays off and run the slice directly.
    const auto* error = dynamic_cast<const c10::Error*>(&e);
    fallback_reason_ = error != nullptr ? error->what_without_backtrace() : e.what();
    on_ = false;
    if (mode_ == ReplayableWork::Mode::kCudaGraph) {
      const std::lock_guard<std::mutex> lock(DisabledMutex());
      if (!DisabledBecause().has_value()) DisabledBecause() = fallback_reason_;
    }
    shape.body();
    runner_.set_forwards(forwards + slices_covered);
    return;
  }
  if (phase != ReplayableWork::Phase::kWarmUp) replayed_slices_ += slices_covered;
  runner_.set_forwards(forwards + slices_covered);
}

SliceGraphs::StepResult SliceGraphs::Step(int64_t n, const Stretch& stretch, const ModelFront& front,
                                          bool subtract, const ModelFront& exit_grad) {
  Shape* shape = ShapeFor(subtract ? Kind::kStepSubtract : Kind::kStepGiven, stretch);
  if (shape == nullptr) {  // every shape slot is taken: the slice runs directly
    SliceRunner::Graph graph = runner_.Build(n, stretch, [&](int64_t r, const AttentionInputs& in) {
      return subtract ? FrontBefore(front[r], in) : front[r];
    });
    StepResult result;
    result.entry = graph.entry;
    result.entry_grad = runner_.Backpropagate(graph, exit_grad);
    return result;
  }
  shape->stretch.all.copy_(stretch.all);
  CopyInto(shape->in_front, front);
  CopyInto(shape->in_exit_grad, exit_grad);
  Run(*shape, 1);
  return StepResult{Clone(shape->out_front), Clone(shape->out_entry_grad)};
}

ModelFront SliceGraphs::Advance(const Stretch& stretch, const ModelFront& entry, int64_t slices_covered) {
  Shape* shape = ShapeFor(Kind::kAdvance, stretch);
  if (shape == nullptr) return runner_.Advance(stretch, entry, slices_covered);
  shape->stretch.all.copy_(stretch.all);
  CopyInto(shape->in_front, entry);
  Run(*shape, slices_covered);
  return Clone(shape->out_front);
}

}  // namespace slimfit::performer::internal
