// gradient_bench: time and peak memory of one gradient of a causal Performer LM, full
// back-propagation against the sliced engine, one JSON object per configuration on stdout.
//
//   bazel run -c opt //bench:gradient_bench -- --seq_len=4096 --slice=0,1024,256,64,16 --check_full
//
// --seq_len and --slice take comma-separated lists; every (seq_len, slice) pair is one
// configuration (pairs with slice > seq_len are skipped). Tokens are random bytes from --seed
// unless --tokens names a file whose raw bytes are the sequence. --check_full also runs the full
// gradient and reports the relative discrepancy ‖g_C − g_full‖ / ‖g_full‖. Times are medians over
// --repeats runs after one warm-up run.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/process_memory.h"
#include "bench/op_counter.h"
#include "performer/cpu_runtime.h"
#include "performer/fused_cuda_kernels.h"
#include "performer/gradient_engine.h"
#include "performer/matrix_products.h"
#include "performer/model_checkpoint.h"
#include "performer/performer_model.h"
#include "performer/prefix_attention_blocks.h"
#include "performer/prefix_attention_cpu.h"
#include "planner/bptt_schedule.h"

ABSL_FLAG(std::string, seq_len, "4096", "sequence lengths L, comma-separated");
ABSL_FLAG(int64_t, d_model, 256, "model width");
ABSL_FLAG(int64_t, layers, 2, "layers");
ABSL_FLAG(int64_t, heads, 4, "attention heads");
ABSL_FLAG(int64_t, d_ff, 1024, "feed-forward width");
ABSL_FLAG(int64_t, vocab, 256, "vocabulary size");
ABSL_FLAG(std::string, features, "sqr", "feature map: relu, elu+1, sqr, favor+");
ABSL_FLAG(int64_t, feature_multiplier, 1, "favor+ features per head, in multiples of head_dim");
ABSL_FLAG(std::string, ln, "post", "LayerNorm placement: post or pre");
ABSL_FLAG(std::string, slice, "0", "slice sizes C, comma-separated; 0 = full back-propagation");
ABSL_FLAG(std::string, prefix_mode, "chunked", "cumsum or chunked");
ABSL_FLAG(int64_t, block, 64, "block size of the chunked prefix mode");
ABSL_FLAG(std::string, front_policy, "reverse", "reverse, store, resync or dp");
ABSL_FLAG(int64_t, resync_every, 0, "resync: keep every r-th front");
ABSL_FLAG(std::string, recompute, "none", "none, or layers: keep only each layer's input in a slice graph");
ABSL_FLAG(std::string, schedule, "hsm", "dp: program of Gruslys et al.: hsm, ism or msm");
ABSL_FLAG(int64_t, slots, 0, "dp: memory budget in fronts");
ABSL_FLAG(double, alpha, 0, "dp msm: slice-graph size with its input front, in fronts");
ABSL_FLAG(double, beta, 0, "dp msm: slice-graph size when its input front is held anyway, in fronts");
ABSL_FLAG(std::string, dtype, "float32", "float32 or float64");
ABSL_FLAG(int, threads, 2, "compute threads (given to the BLAS; see performer/cpu_runtime.h)");
ABSL_FLAG(int, torch_threads, 0,
          "override LibTorch's intra-op threads after the split of --threads (0 = keep the split); "
          "for measuring the thread-pool contention documented in BENCHMARKS.md");
ABSL_FLAG(int, repeats, 3, "timed runs per configuration (median reported)");
ABSL_FLAG(std::string, device, "cpu", "cpu or cuda:N");
ABSL_FLAG(uint64_t, seed, 1, "seed for the model, the tokens and the FAVOR+ features");
ABSL_FLAG(bool, check_full, false, "also compute the full gradient and report the discrepancy");
ABSL_FLAG(std::string, init, "",
          "initial model: .safetensors (its config from its metadata, else from the shape flags) or a "
          "torch.save state dict (.pt, with the shape flags)");
ABSL_FLAG(std::string, tokens, "", "file whose raw bytes are the token sequence");
ABSL_FLAG(std::string, format, "json", "json (one object per configuration) or table (for people)");
ABSL_FLAG(bool, forward_copies, true,
          "keep contiguous forward copies of the FFN and output weights (Plan::copy_forward_weights)");
ABSL_FLAG(bool, parallel_prefix, true,
          "on devices other than the CPU, compute the chunked prefix sums' blocks a group at a time "
          "(prefix_attention_blocks.h); false walks them one by one, as the CPU does");
ABSL_FLAG(bool, fused_prefix, true,
          "run the chunked prefix sums in the fused CPU kernels (float32 on a CPU, builds with oneDNN)");
ABSL_FLAG(bool, fused_cuda_kernels, false,
          "on a CUDA device, run slimfit's own CUDA kernels (fused_cuda_kernels.h): the prefix sums of "
          "segments of at most two blocks and the reverse policy's entry fronts, one kernel each, and a "
          "layer's head split, attention normalisation and their gradients (CUDA builds with nvcc only; "
          "off by default until their tests have passed on a GPU)");
ABSL_FLAG(bool, emulate_cuda_kernels, false,
          "with --fused_cuda_kernels: run those kernels' bodies on emulated threads on the CPU "
          "(fused_cuda_kernels.h). With --dtype=float64 a CPU then makes the GPU path's calls with the "
          "kernels, for --count_ops; far too slow to time");
ABSL_FLAG(std::string, slice_replay, "auto",
          "auto (CUDA graphs for repeated slices on a GPU, in builds that have them), off, or rerun "
          "(the replay path without capture)");
ABSL_FLAG(bool, bf16_products, false,
          "mixed precision: the linear maps' matrix products in bfloat16, the rest in float32 "
          "(Plan::bf16_products; needs --dtype=float32); --check_full then compares with the "
          "float32 gradient");
ABSL_FLAG(
    bool, explicit_backprop, true,
    "run slices' forward and backward by hand where the engine can (GradientOptions::explicit_backprop); "
    "false: autograd. --check_full's reference is always autograd's full back-propagation");
ABSL_FLAG(bool, count_ops, false,
          "after the timed runs, run once more counting the LibTorch calls the calling thread makes (on a "
          "GPU about "
          "its kernel launches; count with --slice_replay=off, replays make none): ops_per_slice, "
          "compute_ops_per_slice (without views and allocations) and fused_kernel_runs_per_slice (slimfit's "
          "own kernels, --fused_cuda_kernels) in the JSON, the calls by operator on stderr");
ABSL_FLAG(std::string, dump_grad, "", "write the (last) gradient as safetensors under the parameter names");

namespace slimfit::performer {
namespace {

// Whether the command line names the model's shape (then --init must match it, or supplies it to
// a file that carries none). Set by main before the flags are parsed.
bool shape_flags_given = false;

bool NamesShapeFlag(absl::string_view arg) {
  for (absl::string_view name :
       {"vocab", "d_model", "layers", "heads", "d_ff", "features", "feature_multiplier", "ln"}) {
    for (absl::string_view dashes : {"--", "-"}) {
      const std::string flag = absl::StrCat(dashes, name);
      if (arg == flag || absl::StartsWith(arg, absl::StrCat(flag, "="))) return true;
    }
  }
  return false;
}

absl::StatusOr<std::vector<int64_t>> ParseList(const std::string& flag, const std::string& text) {
  std::vector<int64_t> values;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t value = 0;
    if (!absl::SimpleAtoi(part, &value)) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": '", part, "' is not an integer"));
    }
    values.push_back(value);
  }
  if (values.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, " is empty"));
  return values;
}

absl::StatusOr<PackedBatch> MakeTokens(int64_t length, int64_t vocab, uint64_t seed) {
  PackedBatch batch;
  const std::string path = absl::GetFlag(FLAGS_tokens);
  if (!path.empty()) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot open --tokens file ", path));
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (static_cast<int64_t>(bytes.size()) < length) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--tokens file %s holds %d bytes; --seq_len needs %d", path, bytes.size(), length));
    }
    for (int64_t i = 0; i < length; ++i) batch.tokens.push_back(static_cast<unsigned char>(bytes[i]));
    return batch;
  }
  std::mt19937_64 generator(seed);
  for (int64_t i = 0; i < length; ++i) batch.tokens.push_back(static_cast<int64_t>(generator() % vocab));
  return batch;
}

// Floating-point operations of one full gradient (forward + backward ≈ 3× forward) counting the
// matrix products: dense layers and logits 2·L·(params), attention per the chunked mode.
double GradientFlops(const ModelConfig& c, int64_t length, int64_t block) {
  const double dense =
      static_cast<double>(c.layers) * (3.0 * c.d_model * c.d_model + 2.0 * c.d_model * c.d_ff) +
      static_cast<double>(c.d_model) * c.vocab;
  const double m = static_cast<double>(c.features_per_head());
  const double d = static_cast<double>(c.head_dim());
  const double b = static_cast<double>(std::min(block, length));
  // Per token and head: scores b·M, scores·V b·d, Q·R M·d, front update M·d (each 2 flops / MAC).
  const double attention = static_cast<double>(c.layers) * c.heads * (b * m + b * d + 2 * m * d);
  return 3.0 * 2.0 * static_cast<double>(length) * (dense + attention);
}

absl::Status Run() {
  ModelConfig config;
  config.vocab = absl::GetFlag(FLAGS_vocab);
  config.d_model = absl::GetFlag(FLAGS_d_model);
  config.layers = absl::GetFlag(FLAGS_layers);
  config.heads = absl::GetFlag(FLAGS_heads);
  config.d_ff = absl::GetFlag(FLAGS_d_ff);
  config.feature_multiplier = absl::GetFlag(FLAGS_feature_multiplier);
  absl::StatusOr<FeatureMap> map = ParseFeatureMap(absl::GetFlag(FLAGS_features));
  if (!map.ok()) return map.status();
  config.feature_map = *map;
  absl::StatusOr<LayerNormPlacement> ln = ParseLayerNormPlacement(absl::GetFlag(FLAGS_ln));
  if (!ln.ok()) return ln.status();
  config.layernorm = *ln;

  Plan base;
  absl::StatusOr<PrefixMode> mode = ParsePrefixMode(absl::GetFlag(FLAGS_prefix_mode));
  if (!mode.ok()) return mode.status();
  base.prefix_mode = *mode;
  base.block = absl::GetFlag(FLAGS_block);
  base.bf16_products = absl::GetFlag(FLAGS_bf16_products);
  absl::StatusOr<FrontPolicy> policy = ParseFrontPolicy(absl::GetFlag(FLAGS_front_policy));
  if (!policy.ok()) return policy.status();
  base.front_policy = *policy;
  base.resync_every = absl::GetFlag(FLAGS_resync_every);
  absl::StatusOr<performer::ScheduleKind> schedule =
      performer::ParseScheduleKind(absl::GetFlag(FLAGS_schedule));
  if (!schedule.ok()) return schedule.status();
  base.schedule = *schedule;
  base.slots = absl::GetFlag(FLAGS_slots);
  absl::StatusOr<LayerRecompute> recompute = ParseLayerRecompute(absl::GetFlag(FLAGS_recompute));
  if (!recompute.ok()) return recompute.status();
  base.recompute = *recompute;
  base.alpha = absl::GetFlag(FLAGS_alpha);
  base.beta = absl::GetFlag(FLAGS_beta);
  absl::StatusOr<DType> dtype = ParseDType(absl::GetFlag(FLAGS_dtype));
  if (!dtype.ok()) return dtype.status();
  base.dtype = *dtype;
  base.threads = absl::GetFlag(FLAGS_threads);
  base.copy_forward_weights = absl::GetFlag(FLAGS_forward_copies);
  performer::EnableFusedPrefixKernels(absl::GetFlag(FLAGS_fused_prefix));
  performer::EnableBlockParallelPrefix(absl::GetFlag(FLAGS_parallel_prefix));
  performer::EmulateFusedCudaKernelsOnCpu(absl::GetFlag(FLAGS_emulate_cuda_kernels));
  if (absl::GetFlag(FLAGS_fused_cuda_kernels) && !performer::FusedCudaKernelsBuilt() &&
      !absl::GetFlag(FLAGS_emulate_cuda_kernels)) {
    return absl::InvalidArgumentError(
        "--fused_cuda_kernels: this build has no fused CUDA kernels (only the CUDA build compiles them, "
        "--emulate_cuda_kernels runs their bodies on the CPU; "
        "scripts/cuda/CMakeLists.txt, where it finds nvcc)");
  }
  performer::EnableFusedCudaKernels(absl::GetFlag(FLAGS_fused_cuda_kernels));
  base::RetainFreedHeapMemory();
  if (absl::Status s = ConfigureCpuThreads(base.threads, performer::ToScalarType(base.dtype)); !s.ok())
    return s;
  if (absl::GetFlag(FLAGS_torch_threads) > 0) at::set_num_threads(absl::GetFlag(FLAGS_torch_threads));
  base.threads = 0;  // configured here once; the engine leaves the process setting alone

  at::Device device(at::kCPU);
  try {
    device = at::Device(absl::GetFlag(FLAGS_device));
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(absl::StrCat("--device: ", e.what_without_backtrace()));
  }
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  absl::StatusOr<PerformerModel> model =
      absl::GetFlag(FLAGS_init).empty()
          ? PerformerModel::Create(config, base.dtype, device, seed)
          : LoadModel(absl::GetFlag(FLAGS_init), base.dtype, device,
                      shape_flags_given ? std::optional<ModelConfig>(config) : std::nullopt);
  if (!model.ok()) return model.status();
  config = model->config();

  absl::StatusOr<std::vector<int64_t>> lengths = ParseList("seq_len", absl::GetFlag(FLAGS_seq_len));
  if (!lengths.ok()) return lengths.status();
  absl::StatusOr<std::vector<int64_t>> slices = ParseList("slice", absl::GetFlag(FLAGS_slice));
  if (!slices.ok()) return slices.status();
  const int repeats = std::max(1, absl::GetFlag(FLAGS_repeats));
  const std::string format = absl::GetFlag(FLAGS_format);
  if (format != "json" && format != "table") {
    return absl::InvalidArgumentError(absl::StrCat("--format must be json or table, got '", format, "'"));
  }
  if (format == "table") {
    std::cout << absl::StrFormat("%-8s %-8s %10s %8s %11s %13s %10s %12s\n", "L", "C", "time_s", "x_full",
                                 "peak_MiB", "working_MiB", "fronts", "discrepancy");
  }
  GradientOptions options;
  options.feature_seed = seed;
  options.dp_schedule = planner::ScheduleForPlan;
  options.explicit_backprop = absl::GetFlag(FLAGS_explicit_backprop);
  const std::string replay = absl::GetFlag(FLAGS_slice_replay);
  if (replay == "auto") {
    options.slice_replay = SliceReplay::kAuto;
  } else if (replay == "off") {
    options.slice_replay = SliceReplay::kOff;
  } else if (replay == "rerun") {
    options.slice_replay = SliceReplay::kRerun;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--slice_replay must be auto, off or rerun, got '", replay, "'"));
  }

  int configurations = 0;
  for (int64_t length : *lengths) {
    absl::StatusOr<PackedBatch> batch = MakeTokens(length, config.vocab, seed);
    if (!batch.ok()) return batch.status();
    std::vector<at::Tensor> full_gradient;
    double full_time = 0;
    if (absl::GetFlag(FLAGS_check_full)) {
      Plan full = base;
      full.slice = 0;
      full.recompute = LayerRecompute::kNone;
      full.bf16_products = false;  // the float32 gradient: what bfloat16 products approximate
      GradientOptions autograd = options;
      autograd.explicit_backprop = false;
      absl::StatusOr<GradientResult> reference = ComputeGradient(*model, *batch, full, autograd);
      if (!reference.ok()) return reference.status();
      full_gradient = reference->gradients;
    }
    for (int64_t slice : *slices) {
      if (slice > length) continue;
      ++configurations;
      Plan plan = base;
      plan.slice = slice;
      if (slice == 0) plan.recompute = LayerRecompute::kNone;  // full back-propagation keeps every activation
      std::vector<double> times;
      GradientResult last;
      for (int run = 0; run <= repeats; ++run) {  // run 0 warms up
        last = GradientResult();                  // release the previous gradient before measuring the next
        absl::StatusOr<GradientResult> result = ComputeGradient(*model, *batch, plan, options);
        if (!result.ok()) return result.status();
        if (run > 0) times.push_back(result->seconds);
        last = *std::move(result);
      }
      std::optional<bench::OpCounts> ops;
      int64_t kernel_runs = 0;  // slimfit's own kernels in the counted run (fused_cuda_kernels.h)
      if (absl::GetFlag(FLAGS_count_ops)) {
        const int64_t runs_before = performer::FusedKernelRunsTotal();
        bench::OpCounter counter;
        absl::StatusOr<GradientResult> counted = ComputeGradient(*model, *batch, plan, options);
        if (!counted.ok()) return counted.status();
        ops = counter.Counts();
        kernel_runs = performer::FusedKernelRunsTotal() - runs_before;
      }
      std::sort(times.begin(), times.end());
      const double median = times[times.size() / 2];
      if (slice == 0) full_time = median;
      const int64_t param_bytes = model->parameter_bytes();
      std::string json = absl::StrFormat(
          R"({"seq_len": %d, "slice": %d, "prefix_mode": "%s", "block": %d, "front_policy": "%s", "recompute": "%s", )"
          R"("dtype": "%s", "threads": %d, "blas_threads": %d, "d_model": %d, "layers": %d, "heads": %d, "d_ff": %d, )"
          R"("features": "%s", "ln": "%s", "time_s": %.6f, "time_min_s": %.6f, "peak_bytes": %d, )"
          R"("start_bytes": %d, "param_bytes": %d, "grad_bytes": %d, "working_bytes": %d, "loss": %.9g, "tokens": %d, )"
          R"("slice_forwards": %d, "stored_fronts": %d, "gflops": %.2f, "products": "%s", "forward_copies": %s, )"
          R"("fused_prefix": %s, "slice_replay": "%s", "replayed_slices": %d, "graph_pool_bytes": %d, )"
          R"("explicit_backprop": %s, "bf16_products": %s, "parallel_prefix": %s, "fused_cuda_kernels": %s)",
          length, slice, PrefixModeName(plan.prefix_mode), plan.block, FrontPolicyName(plan.front_policy),
          LayerRecomputeName(plan.recompute), DTypeName(plan.dtype), at::get_num_threads(), BlasThreads(),
          config.d_model, config.layers, config.heads, config.d_ff, FeatureMapName(config.feature_map),
          LayerNormPlacementName(config.layernorm), median, times.front(), last.peak_bytes, last.start_bytes,
          param_bytes, param_bytes, last.peak_bytes - last.start_bytes - param_bytes, last.loss(),
          last.token_count, last.slice_forwards, last.stored_fronts_peak,
          GradientFlops(config, length, plan.block) / median / 1e9,
          plan.bf16_products                                                                ? "bf16"
          : device.is_cpu() && plan.dtype == DType::kFloat32 && performer::OneDnnProducts() ? "onednn"
                                                                                            : "libtorch",
          CopiesForwardLayouts(device, plan.dtype) && plan.copy_forward_weights ? "true" : "false",
          absl::GetFlag(FLAGS_fused_prefix) && performer::OneDnnProducts() ? "true" : "false", replay,
          last.replayed_slices, last.graph_pool_bytes, last.explicit_backprop ? "true" : "false",
          plan.bf16_products ? "true" : "false",
          !device.is_cpu() && performer::BlockParallelPrefixEnabled() ? "true" : "false",
          !performer::FusedCudaKernelsEnabled()                      ? "false"
          : device.is_cuda() && performer::FusedCudaKernelsBuilt()   ? "true"
          : device.is_cpu() && performer::FusedCudaKernelsEmulated() ? "\"emulated\""
                                                                     : "false");
      if (!last.replay_fallback.empty()) {
        absl::StrAppend(&json, R"(, "replay_fallback": )", nlohmann::json(last.replay_fallback).dump());
      }
      absl::StrAppend(&json, R"(, "conditioning_fronts": )", last.conditioning_fronts,
                      R"(, "conditioning_fronts_recomputed": )", last.conditioning_fronts_recomputed,
                      R"(, "conditioning_forwards": )", last.conditioning_forwards);
      if (ops.has_value()) {
        const double slices = slice == 0 ? 1.0 : static_cast<double>((length + slice - 1) / slice);
        absl::StrAppendFormat(&json,
                              R"(, "ops_per_slice": %.1f, "compute_ops_per_slice": %.1f, )"
                              R"("fused_kernel_runs_per_slice": %.1f)",
                              ops->calls / slices, ops->compute / slices, kernel_runs / slices);
        std::vector<std::pair<int64_t, std::string>> by_count;
        for (const auto& [name, count] : ops->by_name) by_count.emplace_back(count, name);
        std::sort(by_count.rbegin(), by_count.rend());
        std::cerr << "L=" << length << " C=" << slice << ": LibTorch calls per slice by operator\n";
        for (const auto& [count, name] : by_count) {
          std::cerr << absl::StrFormat("  %-36s %8.2f%s\n", name, count / slices,
                                       bench::IsViewOrAllocation(name) ? "  (view or allocation)" : "");
        }
      }
      const double discrepancy =
          full_gradient.empty() ? -1 : RelativeDiscrepancy(last.gradients, full_gradient);
      if (discrepancy >= 0) absl::StrAppendFormat(&json, R"(, "rel_discrepancy": %.3e)", discrepancy);
      if (format == "table") {
        constexpr double kMiB = 1024.0 * 1024.0;
        std::cout << absl::StrFormat("%-8d %-8s %10.3f %8s %11.1f %13.2f %10d %12s", length,
                                     slice == 0 ? "full" : absl::StrCat(slice), median,
                                     full_time > 0 ? absl::StrFormat("%.2f", median / full_time) : "-",
                                     last.peak_bytes / kMiB,
                                     (last.peak_bytes - last.start_bytes - param_bytes) / kMiB,
                                     last.stored_fronts_peak,
                                     discrepancy < 0 ? "-" : absl::StrFormat("%.1e", discrepancy))
                  << std::endl;
      } else {
        std::cout << json << "}" << std::endl;
      }
      if (!absl::GetFlag(FLAGS_dump_grad).empty()) {
        if (absl::Status s = SaveNamedTensors(absl::GetFlag(FLAGS_dump_grad), model->names(), last.gradients,
                                              ConfigToMetadata(config));
            !s.ok()) {
          return s;
        }
      }
    }
  }
  if (configurations == 0) {
    return absl::InvalidArgumentError("nothing to run: every --slice exceeds every --seq_len");
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace slimfit::performer

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Times one exact gradient of a causal Performer LM for several slice sizes.");
  for (int i = 1; i < argc; ++i) {
    if (absl::string_view(argv[i]) == "--") break;
    slimfit::performer::shape_flags_given |= slimfit::performer::NamesShapeFlag(argv[i]);
  }
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = slimfit::performer::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "gradient_bench: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
