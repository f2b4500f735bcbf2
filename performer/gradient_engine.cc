#include "performer/gradient_engine.h"

#include <c10/util/Exception.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "performer/batched_weight_gradients.h"
#include "performer/cpu_runtime.h"
#include "performer/explicit_backprop.h"
#include "performer/memory_tracker.h"
#include "performer/prefix_attention.h"
#include "performer/slice_graphs.h"
#include "performer/slice_runner.h"
#include "performer/sliced_gradient.h"

namespace slimfit::performer {
namespace {

using internal::Context;
using internal::ModelFront;
using internal::SliceRunner;
using internal::Stretch;

absl::Status ValidateProjections(const ModelConfig& config, const std::vector<at::Tensor>& projections) {
  if (projections.empty()) return absl::OkStatus();
  if (config.feature_map != FeatureMap::kFavor) {
    return absl::InvalidArgumentError(absl::StrCat("FAVOR+ projections were given for a model with the ",
                                                   FeatureMapName(config.feature_map), " feature map"));
  }
  if (static_cast<int64_t>(projections.size()) != config.layers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected ", config.layers, " FAVOR+ projections (one per layer), got ", projections.size()));
  }
  const std::vector<int64_t> shape = {config.heads, config.head_dim(), config.features_per_head()};
  for (size_t r = 0; r < projections.size(); ++r) {
    if (!projections[r].defined() || projections[r].sizes() != at::IntArrayRef(shape)) {
      return absl::InvalidArgumentError(absl::StrCat("FAVOR+ projection of layer ", r, " must have shape [",
                                                     shape[0], ", ", shape[1], ", ", shape[2], "]"));
    }
  }
  return absl::OkStatus();
}

// The dp schedule for `plan` over a stream of `length` tokens, from options.dp_schedule, checked
// against the plan.
absl::StatusOr<Schedule> CheckedSchedule(const Plan& plan, int64_t length, const GradientOptions& options) {
  const int64_t slices = (length + plan.slice - 1) / plan.slice;
  if (!options.dp_schedule) {
    return absl::FailedPreconditionError(
        "a dp plan needs GradientOptions::dp_schedule, the schedule to run (planner::ScheduleForPlan)");
  }
  absl::StatusOr<Schedule> schedule = options.dp_schedule(plan, slices);
  if (!schedule.ok()) {
    return absl::Status(schedule.status().code(),
                        absl::StrCat("dp schedule for ", slices, " slices: ", schedule.status().message()));
  }
  if (schedule->kind != plan.schedule || schedule->steps != slices || schedule->slots > plan.slots ||
      (plan.schedule == ScheduleKind::kMsm &&
       (schedule->alpha != plan.alpha || schedule->beta != plan.beta))) {
    return absl::InvalidArgumentError(
        absl::StrCat("the dp schedule given is for ", ScheduleKindName(schedule->kind), " over ",
                     schedule->steps, " slices in ", schedule->slots, " slots; the plan needs ",
                     ScheduleKindName(plan.schedule), " over ", slices, " slices in at most ", plan.slots));
  }
  if (absl::StatusOr<ScheduleStats> stats = SimulateSchedule(*schedule, slices, plan.slots); !stats.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the dp schedule given cannot run: ", stats.status().message()));
  }
  return schedule;
}

// Ordinary back-propagation over the whole stream: the reference gradient, by hand when `by_hand`
// (explicit_backprop.h; the caller has checked that it applies), through autograd otherwise.
double FullGradient(const Context& ctx, const PackedBatch& batch, const at::Device& device,
                    const at::TensorOptions& options, int64_t normalizer, bool by_hand,
                    int64_t* slice_forwards) {
  const Stretch stretch = internal::MakeStretch(batch, 0, batch.size(), device);
  const ModelConfig& c = ctx.config;
  const Front zero = ZeroFront(c.heads, c.features_per_head(), c.head_dim(), options);
  ModelFront exit;
  const internal::EntryFn no_front = [&](int64_t, const AttentionInputs&) { return zero; };
  const at::Tensor scale = at::full({}, 1.0 / static_cast<double>(normalizer), options);
  *slice_forwards = 1;
  if (by_hand) {
    internal::SliceTape tape;
    const at::Tensor loss = internal::ExplicitForward(ctx, stretch, zero, no_front, &exit, &tape);
    internal::ExplicitBackward(ctx, stretch, zero, tape, scale, /*exit_grad=*/{}, /*reads_entry=*/false);
    return loss.item<double>();
  }
  const at::Tensor x = internal::RunStretch(ctx, stretch, no_front, &exit, /*need_output=*/true);
  const at::Tensor loss = CrossEntropySum(ctx.weights, x, stretch.target_rows, stretch.targets);
  torch::autograd::backward({loss}, {scale});
  return loss.item<double>();
}

}  // namespace

absl::StatusOr<GradientResult> ComputeGradient(const PerformerModel& model, const PackedBatch& batch,
                                               const Plan& plan, const GradientOptions& options) {
  const ModelConfig& config = model.config();
  if (absl::Status s = ValidatePackedBatch(batch, config.vocab); !s.ok()) return s;
  if (absl::Status s = plan.Validate(batch.size()); !s.ok()) return s;
  if (plan.dtype != model.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat("plan dtype ", DTypeName(plan.dtype),
                                                   " differs from the model's ", DTypeName(model.dtype())));
  }
  if (absl::Status s = ValidateProjections(config, options.favor_projections); !s.ok()) return s;
  std::optional<Schedule> schedule;
  if (plan.slice > 0 && plan.front_policy == FrontPolicy::kDp) {
    absl::StatusOr<Schedule> checked = CheckedSchedule(plan, batch.size(), options);
    if (!checked.ok()) return checked.status();
    schedule = *std::move(checked);
  }
  const int64_t token_count = PredictedTokenCount(batch);
  const int64_t normalizer =
      options.loss_normalizer > 0 ? options.loss_normalizer : std::max<int64_t>(token_count, 1);

  const absl::Time start = absl::Now();
  const at::Device device = model.device();
  MemoryScope memory(device);
  absl::StatusOr<MemoryStats> start_memory = GetMemoryStats(device);
  GradientResult result;
  result.token_count = token_count;
  result.normalizer = normalizer;
  try {
    if (plan.threads > 0 && device.is_cpu()) {
      if (absl::Status s = ConfigureCpuThreads(plan.threads, ToScalarType(plan.dtype)); !s.ok()) return s;
    }
    at::AutoGradMode enable_grad(true);
    const at::TensorOptions tensor_options = model.parameters().front().options();

    // Leaves sharing the model's storage, in compute layout: gradients accumulate in their .grad
    // and the model is untouched.
    std::vector<at::Tensor> leaves;
    for (const at::Tensor& p : ToComputeLayout(model.names(), model.parameters())) {
      leaves.push_back(p.detach().requires_grad_(true));
    }
    // The linear maps and the embedding add their gradients straight into these buffers (see
    // LayerWeights::gradient_sink): no temporary weight gradient per slice, no extra pass to add it.
    // q, k and v run as one matrix product per layer (PrepareForwardLayouts); their gradient
    // buffers are views of one fused buffer per layer, so no per-parameter copy is needed.
    std::vector<at::Tensor> sink_tensors(leaves.size());
    std::vector<at::Tensor> fused_weight_sinks, fused_bias_sinks;
    for (int64_t r = 0; r < config.layers; ++r) {
      fused_weight_sinks.push_back(at::zeros({config.d_model, 3 * config.d_model}, tensor_options));
      fused_bias_sinks.push_back(at::zeros({3 * config.d_model}, tensor_options));
      const size_t first =
          FirstAttentionParameter(r);  // q weight, q bias, k weight, k bias, v weight, v bias
      for (int64_t j = 0; j < 3; ++j) {
        sink_tensors[first + 2 * j] = fused_weight_sinks[r].narrow(1, j * config.d_model, config.d_model);
        sink_tensors[first + 2 * j + 1] = fused_bias_sinks[r].narrow(0, j * config.d_model, config.d_model);
      }
    }
    for (size_t i = 0; i < leaves.size(); ++i) {
      if (!sink_tensors[i].defined()) sink_tensors[i] = at::zeros(leaves[i].sizes(), leaves[i].options());
    }
    ModelWeights sink = BindWeights(config, sink_tensors);
    for (int64_t r = 0; r < config.layers; ++r) {
      sink.layers[r].qkv_weight_t = fused_weight_sinks[r];
      sink.layers[r].qkv_bias = fused_bias_sinks[r];
    }
    Context ctx{config, BindWeights(config, leaves),
                options.favor_projections.empty()
                    ? SampleFavorProjections(config, options.feature_seed, tensor_options)
                    : options.favor_projections,
                plan.prefix_mode, plan.block};
    for (at::Tensor& projection : ctx.projections) projection = projection.to(tensor_options);
    PrepareForwardLayouts(&ctx.weights, CopiesForwardLayouts(device, plan.dtype) && plan.copy_forward_weights,
                          plan.bf16_products ? at::kBFloat16 : at::ScalarType::Undefined);
    ctx.weights.gradient_sink = &sink;
    for (size_t r = 0; r < ctx.weights.layers.size(); ++r)
      ctx.weights.layers[r].gradient_sink = &sink.layers[r];

    if (token_count == 0) {
      // Nothing is predicted (every document is one token long): the loss and its gradient are 0.
      result.loss_sum = 0;
    } else if (plan.slice == 0) {
      result.explicit_backprop =
          internal::ExplicitBackpropApplies(options.explicit_backprop, ctx, LayerRecompute::kNone);
      result.loss_sum = FullGradient(ctx, batch, device, tensor_options, normalizer, result.explicit_backprop,
                                     &result.slice_forwards);
    } else {
      // Small CPU slices add their weight gradients a few slices at a time (the hand-written backward
      // only; flushed below, before the sinks are read).
      std::optional<BatchedWeightGradients> batched;
      if (device.is_cpu() && BatchesWeightGradients(plan)) {
        batched.emplace(kBatchedWeightGradientRows);
        ctx.weight_gradients = &*batched;
      }
      SliceRunner runner(ctx, batch, plan.slice, plan.recompute, leaves, device, tensor_options, normalizer,
                         options.explicit_backprop);
      std::optional<internal::SliceGraphs> graphs;
      if (std::optional<ReplayableWork::Mode> mode = internal::SliceGraphs::ModeFor(
              options.slice_replay, device, runner.slices(), plan.slice, &result.replay_fallback)) {
        graphs.emplace(runner, *mode, device);
      }
      internal::SliceGraphs* replay = graphs ? &*graphs : nullptr;
      if (plan.front_policy == FrontPolicy::kDp) {
        if (absl::Status s =
                internal::ScheduledGradient(runner, replay, *schedule, &result.stored_fronts_peak);
            !s.ok()) {
          return s;
        }
      } else {
        internal::ConditioningCounts conditioning;
        internal::SweepGradient(runner, replay, plan, config, &result.stored_fronts_peak, &conditioning);
        result.conditioning_fronts = conditioning.kept;
        result.conditioning_fronts_recomputed = conditioning.recomputed;
        result.conditioning_forwards = conditioning.forwards;
      }
      if (batched) {
        batched->Flush();
        result.batched_weight_gradient_bytes = batched->allocated_bytes();
        ctx.weight_gradients = nullptr;
      }
      result.loss_sum = runner.loss_sum();
      result.slice_forwards = runner.forwards();
      result.explicit_backprop = runner.explicit_backprop();
      if (graphs) {
        result.replayed_slices = graphs->replayed_slices();
        result.graph_pool_bytes = graphs->pool_bytes();
        result.replay_fallback = graphs->fallback_reason();
      }
    }
    // Parameters without a sink (the LayerNorms, through autograd) accumulated in .grad as usual.
    for (size_t i = 0; i < leaves.size(); ++i) {
      at::Tensor grad = sink_tensors[i];
      if (leaves[i].grad().defined()) grad.add_(leaves[i].grad());
      result.gradients.push_back(IsLinearWeight(model.names()[i]) ? grad.t() : grad);
    }
    // CUDA kernels run asynchronously: wait for the last backward so `seconds` and the peak
    // cover the whole computation.
    if (device.is_cuda()) torch::cuda::synchronize(device.has_index() ? device.index() : -1);
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    if (absl::StrContains(what, "can't allocate memory") || absl::StrContains(what, "out of memory")) {
      return absl::ResourceExhaustedError(
          absl::StrCat("out of memory computing a gradient with plan {", plan.DebugString(), "}: ", what));
    }
    return absl::InternalError(absl::StrCat("gradient with plan {", plan.DebugString(), "} failed: ", what));
  }
  absl::StatusOr<int64_t> peak = memory.PeakBytes();
  result.peak_bytes = peak.ok() ? *peak + result.graph_pool_bytes : -1;
  result.start_bytes = start_memory.ok() ? start_memory->current_bytes : -1;
  result.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return result;
}

double RelativeDiscrepancy(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want) {
  TORCH_CHECK(got.size() == want.size(), "RelativeDiscrepancy: ", got.size(), " tensors against ",
              want.size());
  double difference_squared = 0;
  double want_squared = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    TORCH_CHECK(got[i].sizes() == want[i].sizes(), "RelativeDiscrepancy: tensor ", i, " has shape ",
                got[i].sizes(), " against ", want[i].sizes());
    const at::Tensor w = want[i].to(at::kDouble);
    difference_squared += (got[i].to(w.device(), at::kDouble) - w).pow(2).sum().item<double>();
    want_squared += w.pow(2).sum().item<double>();
  }
  return std::sqrt(difference_squared) / std::sqrt(want_squared);
}

}  // namespace slimfit::performer
