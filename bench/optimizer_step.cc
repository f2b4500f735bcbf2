// optimizer_step: the coordinator's optimizer step at real model sizes — performer::Trainer::Step
// with AdamW on a model's float32 parameters, in one pass per tensor (performer/adamw_step.h, the
// default) or through torch::optim::AdamW (--fused=false). Prints the median step time and the
// step's transient memory: the peak resident set during the timed steps above the resident set
// before them (the AdamW state exists by then: one warm-up step creates it). With
// --offload_dir the moments are kept in files there (Trainer::KeepOptimizerStateIn), as
// slimfit-coordinator --offload_dir keeps them.
//
//   bazel-bin/bench/optimizer_step --fused=true  --threads=2     # the 100M model of round_data_path.sh
//   bazel-bin/bench/optimizer_step --fused=false --threads=2
//   bazel-bin/bench/optimizer_step --threads=2 --offload_dir=/var/tmp
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/clock.h"
#include "bench/process_usage.h"
#include "performer/performer_model.h"
#include "performer/trainer.h"

ABSL_FLAG(int, d_model, 1024, "model width");
ABSL_FLAG(int, layers, 8, "layers");
ABSL_FLAG(int, heads, 16, "attention heads");
ABSL_FLAG(int, d_ff, 4096, "feed-forward width");
ABSL_FLAG(int, threads, 2, "intra-op threads");
ABSL_FLAG(int, repeats, 5, "timed steps (median reported)");
ABSL_FLAG(bool, fused, true, "one pass per tensor (true) or torch::optim::AdamW (false)");
ABSL_FLAG(double, clip, 1.0, "gradient_clip_norm (0: no clipping)");
ABSL_FLAG(std::string, offload_dir, "", "keep AdamW's moments in files in this directory (empty: memory)");

namespace slimfit::bench {
namespace {

int Run() {
  at::set_num_threads(absl::GetFlag(FLAGS_threads));
  performer::ModelConfig config;
  config.vocab = 256;
  config.d_model = absl::GetFlag(FLAGS_d_model);
  config.layers = absl::GetFlag(FLAGS_layers);
  config.heads = absl::GetFlag(FLAGS_heads);
  config.d_ff = absl::GetFlag(FLAGS_d_ff);
  absl::StatusOr<performer::PerformerModel> model =
      performer::PerformerModel::Create(config, performer::DType::kFloat32, at::kCPU, /*seed=*/1);
  if (!model.ok()) {
    std::fprintf(stderr, "optimizer_step: %s\n", std::string(model.status().message()).c_str());
    return 1;
  }
  performer::OptimizerSettings spec = performer::OptimizerSettings::AdamW(1e-4);
  spec.weight_decay = 0.01;
  if (absl::GetFlag(FLAGS_clip) > 0) spec.gradient_clip_norm = absl::GetFlag(FLAGS_clip);
  absl::StatusOr<std::unique_ptr<performer::Trainer>> trainer =
      performer::Trainer::Create(config, performer::DType::kFloat32, model->parameters(), spec);
  if (!trainer.ok()) {
    std::fprintf(stderr, "optimizer_step: %s\n", std::string(trainer.status().message()).c_str());
    return 1;
  }
  model = absl::CancelledError();  // the trainer holds its own copy
  (*trainer)->set_fused_steps(absl::GetFlag(FLAGS_fused));
  const std::string state_dir = absl::GetFlag(FLAGS_offload_dir);
  if (!state_dir.empty()) {
    if (absl::Status kept = (*trainer)->KeepOptimizerStateIn(state_dir); !kept.ok()) {
      std::fprintf(stderr, "optimizer_step: %s\n", std::string(kept.message()).c_str());
      return 1;
    }
  }
  int64_t parameters = 0;
  // The round's sum, reused every step as the coordinator's is. With --fused=false and clipping,
  // LibTorch's path scales it in place, so it shrinks step after step: the time is the same.
  std::vector<at::Tensor> gradient;
  for (const at::Tensor& p : (*trainer)->parameters()) {
    parameters += p.numel();
    gradient.push_back(at::randn_like(p.detach()));
  }
  auto step = [&]() -> bool {
    absl::StatusOr<performer::StepResult> result = (*trainer)->Step(gradient);
    if (!result.ok())
      std::fprintf(stderr, "optimizer_step: %s\n", std::string(result.status().message()).c_str());
    return result.ok();
  };
  if (!step()) return 1;                          // creates AdamW's state
  std::ofstream("/proc/self/clear_refs") << "5";  // resets the peak resident set (VmHWM) to now
  absl::StatusOr<ProcessUsage> before = ReadProcessUsage(0);
  std::vector<double> seconds;
  for (int i = 0; i < absl::GetFlag(FLAGS_repeats); ++i) {
    const absl::Time start = absl::Now();
    if (!step()) return 1;
    seconds.push_back(absl::ToDoubleSeconds(absl::Now() - start));
  }
  absl::StatusOr<ProcessUsage> after = ReadProcessUsage(0);
  if (!before.ok() || !after.ok()) {
    std::fprintf(stderr, "optimizer_step: reading /proc: %s\n",
                 std::string((before.ok() ? after : before).status().message()).c_str());
    return 1;
  }
  std::sort(seconds.begin(), seconds.end());
  const double bytes = 4.0 * static_cast<double>(parameters);
  std::printf(
      "{\"fused\": %s, \"moments_on_disk\": %s, \"parameters\": %lld, \"threads\": %d, \"step_s_median\": "
      "%.4f, \"step_s_min\": %.4f, "
      "\"transient_mib\": %.1f, \"rss_mib\": %.1f, \"rss_over_parameter_bytes\": %.2f}\n",
      absl::GetFlag(FLAGS_fused) ? "true" : "false", state_dir.empty() ? "false" : "true",
      static_cast<long long>(parameters), at::get_num_threads(), seconds[seconds.size() / 2], seconds.front(),
      static_cast<double>(after->peak_rss_bytes - before->rss_bytes) / (1 << 20),
      static_cast<double>(before->rss_bytes) / (1 << 20), static_cast<double>(before->rss_bytes) / bytes);
  return 0;
}

}  // namespace
}  // namespace slimfit::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return slimfit::bench::Run();
}
