// The slimfit.v1 contract's promises that code can check: every request message survives a
// serialise/parse round trip with its fields (explicit presence included), the services generate,
// and the messages that carry chunks stay within the sizes the .proto states — 1 MiB of payload
// (LIMIT_MAX_CHUNK_BYTES) in under 1.1 MiB, a maximal shard request under 2 MiB — far below gRPC's
// 4 MiB default receive limit.
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "proto/slimfit.grpc.pb.h"
#include "proto/slimfit.pb.h"

namespace slimfit::v1 {
namespace {

using ::google::protobuf::Message;
using ::google::protobuf::util::MessageDifferencer;

constexpr int64_t kChunkBytes = LIMIT_MAX_CHUNK_BYTES;
constexpr size_t kChunkMessageLimit = kChunkBytes + kChunkBytes / 10;  // 1.1 MiB
constexpr size_t kGrpcDefaultLimit = 4 << 20;

// Serialises `message`, parses it into a fresh instance and expects the two to be equal.
template <typename M>
void ExpectRoundTrip(const M& message) {
  std::string wire;
  ASSERT_TRUE(message.SerializeToString(&wire)) << message.GetTypeName();
  M parsed;
  ASSERT_TRUE(parsed.ParseFromString(wire)) << message.GetTypeName();
  std::string differences;
  MessageDifferencer differencer;
  differencer.ReportDifferencesToString(&differences);
  EXPECT_TRUE(differencer.Compare(message, parsed)) << message.GetTypeName() << ": " << differences;
  EXPECT_LT(wire.size(), kGrpcDefaultLimit) << message.GetTypeName();
}

std::string Sha256Hex() { return std::string(64, 'a'); }

ModelConfig SmallModel() {
  ModelConfig config;
  config.set_vocab(256);
  config.set_d_model(64);
  config.set_layers(2);
  config.set_heads(4);
  config.set_d_ff(256);
  config.set_feature_map(FEATURE_MAP_FAVOR);
  config.set_feature_multiplier(2);
  config.set_layernorm(LAYER_NORM_PLACEMENT_PRE);
  return config;
}

Plan DpPlan() {
  Plan plan;
  plan.set_slice(256);
  plan.set_prefix_mode(PREFIX_MODE_CHUNKED);
  plan.set_block(64);
  plan.set_front_policy(FRONT_POLICY_DP);
  plan.set_schedule(SCHEDULE_KIND_MSM);
  plan.set_slots(6);
  plan.set_alpha(3.5);
  plan.set_beta(2.5);
  plan.set_recompute(LAYER_RECOMPUTE_LAYERS);
  plan.set_dtype(DTYPE_FLOAT32);
  plan.set_threads(2);
  plan.set_predicted_peak_bytes(30 << 20);
  plan.set_predicted_time_seconds(1.25);
  plan.set_reason("fastest plan under 28.8 MiB");
  return plan;
}

DeviceProfile Profile() {
  DeviceProfile profile;
  profile.set_device("cpu");
  profile.set_threads(2);
  profile.set_flops_per_second(4.1e10);
  profile.set_activation_scale(1.08);
  return profile;
}

TEST(SlimfitProtoTest, UploadDatasetRequestRoundTrips) {
  UploadDatasetRequest first;
  UploadMetadata* metadata = first.mutable_metadata();
  metadata->set_name("corpus.txt");
  metadata->set_content_type("text/plain");
  metadata->set_total_bytes(3 << 20);
  metadata->set_sha256(Sha256Hex());
  metadata->set_document_separator("\n\n");
  ExpectRoundTrip(first);

  UploadDatasetRequest chunk;
  chunk.set_chunk(std::string(1000, 'x'));
  ExpectRoundTrip(chunk);
}

TEST(SlimfitProtoTest, SubmitJobRequestRoundTrips) {
  SubmitJobRequest request;
  request.set_request_id("3f0c9a1e-7d7b-4a0e-9a51-2f9d61a8c0de");
  JobSpec* spec = request.mutable_spec();
  spec->set_name("fine-tune");
  *spec->mutable_model()->mutable_config() = SmallModel();
  spec->add_dataset_ids("ds-1");
  spec->add_dataset_ids("ds-2");
  spec->set_sequence_length(1024);
  spec->set_tokens_per_round(8192);
  spec->set_rounds(200);
  Optimizer* optimizer = spec->mutable_optimizer();
  optimizer->mutable_adamw()->set_beta2(0.95);
  optimizer->set_learning_rate(3e-4);
  optimizer->set_warmup_steps(20);
  optimizer->set_weight_decay(0.01);
  optimizer->set_gradient_clip_norm(1.0);
  spec->set_held_out_fraction(0.05);
  spec->set_eval_interval_rounds(25);
  spec->set_checkpoint_interval_rounds(50);
  spec->set_seed(7);
  spec->set_min_workers(3);
  spec->mutable_constraints()->set_min_memory_bytes(16 << 20);
  spec->mutable_constraints()->add_device_kinds("cpu");
  spec->set_dtype(DTYPE_FLOAT32);
  ExpectRoundTrip(request);

  // A checkpoint source instead of a config.
  CheckpointRef* checkpoint = spec->mutable_model()->mutable_checkpoint();
  checkpoint->set_job_id("job-000003");
  checkpoint->set_round(0);
  EXPECT_FALSE(spec->model().has_config());
  ExpectRoundTrip(request);
}

TEST(SlimfitProtoTest, OptionalFieldsKeepPresence) {
  ModelConfig config;
  config.set_layers(0);  // explicitly zero: present, and invalid
  std::string wire;
  ASSERT_TRUE(config.SerializeToString(&wire));
  ModelConfig parsed;
  ASSERT_TRUE(parsed.ParseFromString(wire));
  EXPECT_TRUE(parsed.has_layers());
  EXPECT_EQ(parsed.layers(), 0);
  EXPECT_FALSE(parsed.has_vocab());  // absent: the reader applies the default, 256
}

TEST(SlimfitProtoTest, JobQueriesRoundTrip) {
  GetJobRequest get;
  get.set_job_id("job-000017");
  ExpectRoundTrip(get);

  ListJobsRequest list;
  list.set_page_size(50);
  list.set_page_token("opaque");
  list.add_states(JOB_STATE_RUNNING);
  list.add_states(JOB_STATE_QUEUED);
  ExpectRoundTrip(list);

  WatchJobRequest watch;
  watch.set_job_id("job-000017");
  watch.set_after_sequence(41);
  ExpectRoundTrip(watch);

  CancelJobRequest cancel;
  cancel.set_job_id("job-000017");
  cancel.set_reason("wrong data");
  ExpectRoundTrip(cancel);

  ExportModelRequest export_request;
  export_request.set_job_id("job-000017");
  export_request.set_round(200);
  ExpectRoundTrip(export_request);
}

TEST(SlimfitProtoTest, WorkerQueriesRoundTrip) {
  ListWorkersRequest list;
  list.set_page_size(100);
  list.set_include_gone(true);
  ExpectRoundTrip(list);

  GetMemoryPlanRequest for_job;
  for_job.set_worker_id("w-3f2a");
  for_job.set_job_id("job-000017");
  for_job.set_objective(OBJECTIVE_MEMORY);
  for_job.set_safety_margin(0.1);
  ExpectRoundTrip(for_job);

  GetMemoryPlanRequest for_spec;
  for_spec.set_all_workers(true);
  WorkloadSpec* spec = for_spec.mutable_spec();
  *spec->mutable_model()->mutable_config() = SmallModel();
  spec->set_sequence_length(4096);
  spec->set_documents(3);
  for_spec.set_include_frontier(false);
  for_spec.set_page_size(20);
  ExpectRoundTrip(for_spec);
}

TEST(SlimfitProtoTest, WorkerLifecycleRequestsRoundTrip) {
  RegisterWorkerRequest reg;
  reg.set_worker_id("w-3f2a");
  *reg.mutable_profile() = Profile();
  reg.set_memory_budget_bytes(int64_t{32} << 20);
  reg.set_device("cpu");
  reg.set_advertise_address("127.0.0.1:50071");
  reg.set_threads(2);
  reg.set_version("0.1.0");
  ExpectRoundTrip(reg);

  HeartbeatRequest heartbeat;
  heartbeat.set_worker_id("w-3f2a");
  heartbeat.set_incarnation(4);
  heartbeat.set_state(WORKER_STATE_BUSY);
  CurrentWork* work = heartbeat.mutable_current_work();
  work->set_job_id("job-000017");
  work->set_round(12);
  work->set_shard_id(2);
  work->set_attempt(1);
  work->set_parameter_version(12);
  work->set_tokens(4096);
  work->mutable_started_at()->set_seconds(1700000000);
  heartbeat.set_measured_peak_bytes(int64_t{29} << 20);
  (*heartbeat.mutable_cached_parameter_versions())["job-000017"] = 12;
  ExpectRoundTrip(heartbeat);

  DeregisterWorkerRequest leave;
  leave.set_worker_id("w-3f2a");
  leave.set_incarnation(4);
  leave.set_reason("SIGTERM");
  ExpectRoundTrip(leave);

  FetchParametersRequest fetch;
  fetch.set_job_id("job-000017");
  fetch.set_parameter_version(12);
  ExpectRoundTrip(fetch);
}

TEST(SlimfitProtoTest, WorkerServiceRequestsRoundTrip) {
  ComputeGradientRequest gradient;
  gradient.set_job_id("job-000017");
  gradient.set_round(12);
  gradient.set_shard_id(2);
  gradient.set_attempt(2);
  gradient.set_parameter_version(12);
  *gradient.mutable_plan() = DpPlan();
  gradient.set_sequence_length(1024);
  gradient.set_token_encoding(TOKEN_ENCODING_UINT8);
  gradient.set_tokens(std::string(2048, 'a'));
  gradient.add_doc_starts(0);
  gradient.add_doc_starts(700);
  gradient.set_loss_normalizer(8000);
  gradient.set_feature_seed(99);
  ExpectRoundTrip(gradient);

  ExpectRoundTrip(GetProfileRequest());

  PlanRequest plan;
  *plan.mutable_model() = SmallModel();
  plan.set_sequence_length(4096);
  plan.set_documents(2);
  plan.set_memory_budget_bytes(int64_t{64} << 20);
  plan.set_objective(OBJECTIVE_TIME);
  plan.set_dtype(DTYPE_FLOAT64);
  plan.set_safety_margin(0.2);
  plan.set_include_frontier(true);
  ExpectRoundTrip(plan);
}

// A chunk with every bounded field at its maximum: a LIMIT_MAX_NAME_BYTES name, a shape of
// LIMIT_MAX_TENSOR_RANK ten-byte varints, the largest offset, LIMIT_MAX_CHUNK_BYTES of data.
TensorChunk MaximalChunk() {
  TensorChunk chunk;
  chunk.set_name(std::string(LIMIT_MAX_NAME_BYTES, 'n'));
  chunk.set_dtype(DTYPE_FLOAT64);
  for (int i = 0; i < LIMIT_MAX_TENSOR_RANK; ++i) chunk.add_shape(INT64_MAX);
  chunk.set_offset(INT64_MAX);
  chunk.set_data(std::string(kChunkBytes, '\xff'));
  return chunk;
}

TEST(SlimfitProtoTest, MaximalGradientChunkStaysUnderLimit) {
  ComputeGradientResponse response;
  *response.mutable_chunk() = MaximalChunk();
  EXPECT_LT(response.ByteSizeLong(), kChunkMessageLimit);
  ExpectRoundTrip(response);
}

TEST(SlimfitProtoTest, MaximalParameterAndFileChunksStayUnderLimit) {
  FetchParametersResponse parameters;
  *parameters.mutable_chunk() = MaximalChunk();
  EXPECT_LT(parameters.ByteSizeLong(), kChunkMessageLimit);

  UploadDatasetRequest upload;
  upload.set_chunk(std::string(kChunkBytes, 'u'));
  EXPECT_LT(upload.ByteSizeLong(), kChunkMessageLimit);

  ExportModelResponse exported;
  exported.set_chunk(std::string(kChunkBytes, 'e'));
  EXPECT_LT(exported.ByteSizeLong(), kChunkMessageLimit);
}

// The largest compressed chunk: LIMIT_MAX_CHUNK_BYTES int8 elements (one byte each) carry one
// float32 scale per LIMIT_INT8_BLOCK_ELEMENTS of them (4096 scales, 16 KiB packed) on top of
// MaximalChunk's fields.
TensorChunk MaximalInt8Chunk() {
  TensorChunk chunk = MaximalChunk();
  chunk.set_compression(COMPRESSION_INT8);
  for (int64_t i = 0; i < kChunkBytes / LIMIT_INT8_BLOCK_ELEMENTS; ++i) chunk.add_scales(3.4028235e38f);
  return chunk;
}

TEST(SlimfitProtoTest, MaximalInt8ChunkStaysUnderLimit) {
  const TensorChunk chunk = MaximalInt8Chunk();
  ASSERT_EQ(chunk.scales_size(), 4096);
  EXPECT_LT(chunk.ByteSizeLong(), kChunkMessageLimit);
  // Beyond MaximalChunk: 4 bytes a scale, the packed field's tag and length (1 + 3 bytes) and the
  // compression field (2 bytes).
  EXPECT_EQ(chunk.ByteSizeLong(), MaximalChunk().ByteSizeLong() + 4 * 4096 + 4 + 2);

  ComputeGradientResponse gradient;
  *gradient.mutable_chunk() = chunk;
  EXPECT_LT(gradient.ByteSizeLong(), kChunkMessageLimit);
  ExpectRoundTrip(gradient);

  FetchParametersResponse parameters;
  *parameters.mutable_chunk() = chunk;
  EXPECT_LT(parameters.ByteSizeLong(), kChunkMessageLimit);
  ExpectRoundTrip(parameters);
}

TEST(SlimfitProtoTest, MaximalShardRequestStaysUnderTwoMiB) {
  ComputeGradientRequest request;
  request.set_job_id(std::string(LIMIT_MAX_NAME_BYTES, 'j'));
  request.set_round(INT64_MAX);
  request.set_shard_id(INT64_MAX);
  request.set_attempt(INT32_MAX);
  request.set_parameter_version(UINT64_MAX);
  Plan plan = DpPlan();
  plan.set_reason(std::string(1024, 'r'));
  *request.mutable_plan() = plan;
  request.set_sequence_length(kChunkBytes);
  request.set_token_encoding(TOKEN_ENCODING_UINT8);
  request.set_tokens(std::string(kChunkBytes, 't'));
  // The most document starts, at the largest offsets a 1 MiB shard can have.
  for (int64_t i = 0; i < LIMIT_MAX_SHARD_DOC_STARTS; ++i) {
    request.add_doc_starts(kChunkBytes - LIMIT_MAX_SHARD_DOC_STARTS + i);
  }
  request.set_loss_normalizer(INT64_MAX);
  request.set_feature_seed(UINT64_MAX);
  EXPECT_LT(request.ByteSizeLong(), size_t{2} << 20);
  ExpectRoundTrip(request);
}

TEST(SlimfitProtoTest, ServicesGenerate) {
  // The generated service bases construct, and both stubs exist for clients.
  Coordinator::Service coordinator;
  Worker::Service worker;
  EXPECT_NE(&coordinator, nullptr);
  EXPECT_NE(&worker, nullptr);
  EXPECT_EQ(Coordinator::service_full_name(), std::string("slimfit.v1.Coordinator"));
  EXPECT_EQ(Worker::service_full_name(), std::string("slimfit.v1.Worker"));
}

}  // namespace
}  // namespace slimfit::v1
