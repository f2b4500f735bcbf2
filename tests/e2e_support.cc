#include "tests/e2e_support.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/files.h"
#include "data_formats/dataset_format.h"
#include "gtest/gtest.h"
#include "performer/gradient_engine.h"
#include "performer/packed_batch.h"
#include "performer/parameter_selection.h"
#include "performer/performer_model.h"
#include "performer/safetensors.h"
#include "performer/trainer.h"
#include "planner/plan_proto.h"
#include "rpc/rpc_util.h"
#include "server/job_data.h"
#include "server/job_defaults.h"
#include "wire/engine_settings.h"

namespace slimfit::testing_util {

std::string Corpus(size_t bytes) {
  absl::StatusOr<std::string> text = base::ReadFileToString("/usr/share/common-licenses/GPL-3");
  EXPECT_TRUE(text.ok()) << text.status();
  return text->substr(0, bytes);
}

std::vector<at::Tensor> TrainLocally(const v1::JobSpec& submitted, const std::string& text,
                                     const std::optional<std::string>& separator) {
  const v1::JobSpec spec = server::WithJobDefaults(submitted);  // as the coordinator resolves it
  absl::StatusOr<performer::ModelConfig> config =
      planner::ModelConfigFromProto(spec.model().config(), "model");
  EXPECT_TRUE(config.ok());
  absl::StatusOr<rpc::TokenStream> stream =
      rpc::ParseDataset(text, "text/plain", v1::TOKEN_ENCODING_UNSPECIFIED, separator);
  absl::StatusOr<server::JobData> data =
      server::JobData::Create(*stream, config->vocab, spec.sequence_length(), spec.tokens_per_round(),
                              spec.held_out_fraction(), spec.seed());
  EXPECT_TRUE(data.ok()) << data.status();
  absl::StatusOr<performer::PerformerModel> initial =
      performer::PerformerModel::Create(*config, performer::DType::kFloat32, at::kCPU, spec.seed(),
                                        performer::InitOptions{spec.model().init_readout_scale()});
  absl::StatusOr<std::vector<int>> trainable =
      spec.trainable().empty()
          ? std::vector<int>{}
          : performer::SelectParameters(performer::ParameterNames(*config), spec.trainable());
  EXPECT_TRUE(trainable.ok()) << trainable.status();
  auto trainer = performer::Trainer::Create(*config, performer::DType::kFloat32, initial->parameters(),
                                            wire::OptimizerSettingsOf(spec.optimizer()), *trainable);
  EXPECT_TRUE(trainer.ok());
  for (int64_t round = 1; round <= spec.rounds(); ++round) {
    std::vector<server::SequenceRef> sequences = data->RoundSequences(round);
    const int64_t normalizer = data->PredictedTokens(sequences);
    std::map<std::string, at::Tensor> named;
    for (size_t i = 0; i < (*trainer)->names().size(); ++i)
      named[(*trainer)->names()[i]] = (*trainer)->parameters()[i].detach();
    absl::StatusOr<performer::PerformerModel> model =
        performer::PerformerModel::FromTensors(*config, named, performer::DType::kFloat32, at::kCPU);
    std::vector<at::Tensor> sum;
    for (const server::SequenceRef& sequence : sequences) {
      performer::PackedBatch batch;
      data->Gather({sequence}, &batch.tokens, &batch.doc_starts);
      performer::GradientOptions options;
      options.loss_normalizer = normalizer;
      options.feature_seed = spec.seed();
      performer::Plan plan;  // full back-propagation, with the job's products
      plan.bf16_products = spec.bf16_products();
      absl::StatusOr<performer::GradientResult> result =
          performer::ComputeGradient(*model, batch, plan, options);
      EXPECT_TRUE(result.ok()) << result.status();
      for (size_t i = 0; i < result->gradients.size(); ++i) {
        at::Tensor g = result->gradients[i].to(at::kDouble);
        if (sum.size() <= i)
          sum.push_back(g);
        else
          sum[i] += g;
      }
    }
    for (at::Tensor& g : sum) g = g.to(at::kFloat);
    EXPECT_TRUE((*trainer)->Step(sum).ok());
  }
  return (*trainer)->parameters();
}

std::vector<v1::JobEvent> AllEvents(Cluster& cluster, const std::string& job_id) {
  auto context = rpc::MakeClientContext(testing_util::kClientToken, std::chrono::seconds(30));
  v1::WatchJobRequest request;
  request.set_job_id(job_id);
  request.set_from_start(true);
  auto reader = cluster.Stub()->WatchJob(context.get(), request);
  std::vector<v1::JobEvent> events;
  v1::JobEvent event;
  while (reader->Read(&event)) events.push_back(event);
  grpc::Status status = reader->Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  return events;
}

v1::Job RunToSuccess(Cluster& cluster, const v1::JobSpec& spec) {
  absl::StatusOr<v1::Job> job = cluster.Submit(spec);
  EXPECT_TRUE(job.ok()) << job.status() << cluster.Logs();
  if (!job.ok()) return v1::Job();
  absl::StatusOr<v1::Job> done = cluster.WaitForJob(job->job_id(), absl::Seconds(180));
  EXPECT_TRUE(done.ok()) << done.status() << cluster.Logs();
  if (!done.ok()) return v1::Job();
  EXPECT_EQ(done->state(), v1::JOB_STATE_SUCCEEDED) << done->state_reason() << cluster.Logs();
  EXPECT_EQ(done->progress().rounds_completed(), spec.rounds());
  return *std::move(done);
}

std::vector<at::Tensor> ExportedParameters(Cluster& cluster, const std::string& job_id,
                                           const v1::JobSpec& spec) {
  absl::StatusOr<performer::TensorFile> exported = cluster.Export(job_id);
  EXPECT_TRUE(exported.ok()) << exported.status();
  absl::StatusOr<performer::ModelConfig> config = planner::ModelConfigFromProto(spec.model().config(), "m");
  EXPECT_TRUE(config.ok()) << config.status();
  std::vector<at::Tensor> got;
  if (!exported.ok() || !config.ok()) return got;
  for (const std::string& name : performer::ParameterNames(*config))
    got.push_back(exported->tensors.at(name));
  return got;
}

double DistanceFromSingleProcess(Cluster& cluster, const std::string& job_id, const v1::JobSpec& spec,
                                 const std::string& text, const std::optional<std::string>& separator) {
  const std::vector<at::Tensor> got = ExportedParameters(cluster, job_id, spec);
  if (got.empty()) return 1.0;
  return performer::RelativeDiscrepancy(got, TrainLocally(spec, text, separator));
}

v1::JobSpec Spec(const std::string& dataset, int64_t d_model, int64_t d_ff, int64_t seq_len,
                 int64_t sequences_per_round, int64_t rounds) {
  v1::JobSpec spec;
  spec.set_name("e2e");
  v1::ModelConfig* model = spec.mutable_model()->mutable_config();
  model->set_d_model(d_model);
  model->set_layers(2);
  model->set_heads(2);
  model->set_d_ff(d_ff);
  spec.add_dataset_ids(dataset);
  spec.set_sequence_length(seq_len);
  spec.set_tokens_per_round(seq_len * sequences_per_round);
  spec.set_rounds(rounds);
  spec.mutable_optimizer()->mutable_adamw();
  spec.mutable_optimizer()->set_learning_rate(3e-3);
  spec.mutable_optimizer()->set_weight_decay(0.01);
  spec.mutable_optimizer()->set_gradient_clip_norm(1.0);
  spec.set_held_out_fraction(0.1);
  spec.set_eval_interval_rounds(2);
  spec.set_checkpoint_interval_rounds(1);
  spec.set_seed(11);
  return spec;
}

int CountReassigned(Cluster& cluster, const std::string& job_id) {
  int reassigned = 0;
  for (const v1::JobEvent& event : AllEvents(cluster, job_id))
    reassigned += event.has_shard_reassigned() ? 1 : 0;
  return reassigned;
}

absl::StatusOr<std::string> BusyWorkerAddress(Cluster& cluster, const std::string& job_id, int64_t round,
                                              absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    auto context = rpc::MakeClientContext(testing_util::kClientToken, std::chrono::seconds(5));
    v1::ListWorkersResponse response;
    if (cluster.Stub()->ListWorkers(context.get(), v1::ListWorkersRequest(), &response).ok()) {
      for (const v1::WorkerInfo& worker : response.workers()) {
        if (worker.state() == v1::WORKER_STATE_BUSY && worker.current_work().job_id() == job_id &&
            worker.current_work().round() >= round) {
          return worker.advertise_address();
        }
      }
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError("no worker became busy");
}

void StartJobAndFindBusyWorker(Cluster& cluster, int64_t rounds, BusyJob* busy_job,
                               const std::vector<std::string>& coordinator_flags) {
  ASSERT_TRUE(cluster.StartCoordinator(coordinator_flags).ok()) << cluster.Logs();
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(cluster.StartWorker("64MiB").ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForLiveWorkers(2, absl::Seconds(30)).ok()) << cluster.Logs();
  busy_job->text = Corpus(60000);
  absl::StatusOr<std::string> dataset = cluster.UploadText(busy_job->text, std::nullopt);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  busy_job->spec = Spec(*dataset, 64, 256, 512, 48, rounds);
  absl::StatusOr<v1::Job> job = cluster.Submit(busy_job->spec);
  ASSERT_TRUE(job.ok()) << job.status();
  busy_job->job_id = job->job_id();
  absl::StatusOr<std::string> busy = BusyWorkerAddress(cluster, job->job_id(), 2, absl::Seconds(60));
  ASSERT_TRUE(busy.ok()) << busy.status() << cluster.Logs();
  for (int i = 0; i < 2; ++i) {
    if (cluster.worker_address(i) == *busy) busy_job->busy_worker = i;
  }
  ASSERT_GE(busy_job->busy_worker, 0) << "no worker serves on " << *busy;
}

}  // namespace slimfit::testing_util
