// How fast the coordinator takes in gradients: CLIENTS synthetic workers on loopback (gRPC
// servers in this process, each answering ComputeGradient with the same prepared gradient of
// PARAMETERS float32 values in 1 MiB chunks, as a real worker streams it) and, per round, one call
// to each at once, read by the coordinator's own receive path (server::ReadGradientStream into a
// performer::TensorAssembler) and, with --aggregate, summed by server::GradientAggregator in
// float32 as the coordinator does for a float32 job (--sum_dtype=float64: in float64); with
// --stream_into_sum, summed chunk by chunk as it arrives instead (server::RoundCollector's
// StreamedShard: what the coordinator does for shards of at least --stream_into_sum_bytes).
// Prints, per round and overall, the gradient bytes taken in per second, and the process's peak
// resident memory (BENCHMARKS.md, "Where do a 100M model's round time and coordinator memory go?").
// The synthetic workers serialise on the same cores, so on a small machine the rate is a lower
// bound of the coordinator's.
//
//   bazel-bin/bench/gradient_ingest --clients=3 --parameters=100000000 --rounds=3
#include <ATen/ATen.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/process_usage.h"
#include "proto/slimfit.grpc.pb.h"
#include "server/gradient_aggregator.h"
#include "server/gradient_stream.h"
#include "server/round_collector.h"
#include "wire/tensor_chunks.h"

ABSL_FLAG(int, clients, 3, "synthetic workers streaming at once");
ABSL_FLAG(int64_t, parameters, 100000000, "float32 values in each gradient");
ABSL_FLAG(int64_t, tensor_elements, int64_t{4} << 20, "elements per gradient tensor (the last is smaller)");
ABSL_FLAG(int, rounds, 3, "rounds; each takes one gradient from every client");
ABSL_FLAG(bool, aggregate, true, "sum the gradients (the coordinator's aggregation)");
ABSL_FLAG(bool, stream_into_sum, false,
          "sum each chunk as it arrives (no gradient assembled); needs --aggregate");
ABSL_FLAG(std::string, sum_dtype, "float32",
          "the sum's dtype: float32 (the coordinator's, for float32 jobs) or float64");

namespace slimfit::bench {
namespace {

// Answers every ComputeGradient with the prepared chunks and a summary echoing the request.
class SyntheticWorker final : public v1::Worker::Service {
 public:
  SyntheticWorker(const std::vector<v1::TensorChunk>* chunks, int64_t tokens)
      : chunks_(chunks), tokens_(tokens) {}

  grpc::Status ComputeGradient(grpc::ServerContext*, const v1::ComputeGradientRequest* request,
                               grpc::ServerWriter<v1::ComputeGradientResponse>* writer) override {
    v1::ComputeGradientResponse response;
    for (const v1::TensorChunk& chunk : *chunks_) {
      *response.mutable_chunk() = chunk;
      if (!writer->Write(response)) return grpc::Status(grpc::StatusCode::CANCELLED, "the reader went away");
    }
    v1::GradientSummary& summary = *response.mutable_summary();
    summary.set_job_id(request->job_id());
    summary.set_round(request->round());
    summary.set_shard_id(request->shard_id());
    summary.set_attempt(request->attempt());
    summary.set_parameter_version(request->parameter_version());
    summary.set_loss_sum(1.0);
    summary.set_token_count(tokens_);
    writer->Write(response);
    return grpc::Status::OK;
  }

 private:
  const std::vector<v1::TensorChunk>* chunks_;
  const int64_t tokens_;
};

int Run() {
  const int clients = absl::GetFlag(FLAGS_clients);
  const int64_t parameters = absl::GetFlag(FLAGS_parameters);
  const int64_t per_tensor = absl::GetFlag(FLAGS_tensor_elements);
  const int rounds = absl::GetFlag(FLAGS_rounds);
  if (clients < 1 || parameters < 1 || per_tensor < 1 || rounds < 1) {
    std::fprintf(stderr,
                 "gradient_ingest: --clients, --parameters, --tensor_elements and --rounds must be ≥ 1\n");
    return 2;
  }
  const std::string sum_name = absl::GetFlag(FLAGS_sum_dtype);
  if (sum_name != "float32" && sum_name != "float64") {
    std::fprintf(stderr, "gradient_ingest: --sum_dtype must be float32 or float64, not '%s'\n",
                 sum_name.c_str());
    return 2;
  }
  const at::ScalarType sum_dtype = sum_name == "float32" ? at::kFloat : at::kDouble;
  // The gradient: tensors of per_tensor elements, values that survive float32 exactly.
  std::vector<std::string> names;
  std::vector<at::Tensor> tensors;
  std::vector<performer::TensorSpec> specs;
  std::vector<std::vector<int64_t>> shapes;
  for (int64_t done = 0, i = 0; done < parameters; ++i) {
    const int64_t n = std::min(per_tensor, parameters - done);
    names.push_back(absl::StrCat("layers.", i, ".weight"));
    tensors.push_back(at::arange(n, at::kFloat).remainder_(7).sub_(3).mul_(0.125));
    specs.push_back({names.back(), {n}});
    shapes.push_back({n});
    done += n;
  }
  std::vector<v1::TensorChunk> chunks;
  if (absl::Status s = performer::ChunkTensors(names, tensors, performer::DType::kFloat32,
                                               [&](const v1::TensorChunk& chunk) {
                                                 chunks.push_back(chunk);
                                                 return true;
                                               });
      !s.ok()) {
    std::fprintf(stderr, "gradient_ingest: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  tensors.clear();

  constexpr int64_t kTokens = 1000;
  SyntheticWorker service(&chunks, kTokens);
  std::vector<std::unique_ptr<grpc::Server>> servers;
  std::vector<std::unique_ptr<v1::Worker::Stub>> stubs;
  for (int c = 0; c < clients; ++c) {
    int port = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    servers.push_back(builder.BuildAndStart());
    if (servers.back() == nullptr || port == 0) {
      std::fprintf(stderr, "gradient_ingest: cannot listen on loopback\n");
      return 1;
    }
    grpc::ChannelArguments arguments;
    arguments.SetMaxReceiveMessageSize(-1);
    stubs.push_back(v1::Worker::NewStub(grpc::CreateCustomChannel(
        absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials(), arguments)));
  }

  const bool stream_into_sum = absl::GetFlag(FLAGS_stream_into_sum);
  if (stream_into_sum && !absl::GetFlag(FLAGS_aggregate)) {
    std::fprintf(stderr, "gradient_ingest: --stream_into_sum sums as it receives; it needs --aggregate\n");
    return 2;
  }
  std::printf("%d clients, %lld float32 parameters in %zu tensors (%.1f MB per gradient), aggregate %s%s\n",
              clients, static_cast<long long>(parameters), names.size(), parameters * 4 / 1e6,
              absl::GetFlag(FLAGS_aggregate) ? absl::GetFlag(FLAGS_sum_dtype).c_str() : "off",
              stream_into_sum ? ", streamed into the sum" : "");
  double total_bytes = 0, total_seconds = 0;
  for (int round = 1; round <= rounds; ++round) {
    // One sum: the collector's when summing as the chunks arrive (--stream_into_sum), else the
    // aggregator's, which takes assembled gradients.
    std::optional<server::GradientAggregator> aggregator;
    std::optional<server::RoundCollector> collector;
    if (stream_into_sum) {
      collector.emplace(round, /*parameter_version=*/round, std::vector<int64_t>(clients, kTokens), shapes,
                        /*evaluate_only=*/false, /*normalizer=*/kTokens, /*screen=*/nullptr, /*tolerance=*/0,
                        sum_dtype);
    } else if (absl::GetFlag(FLAGS_aggregate)) {
      aggregator.emplace(round, /*parameter_version=*/round, std::vector<int64_t>(clients, kTokens), shapes,
                         /*evaluate_only=*/false, sum_dtype);
    }
    std::atomic<int64_t> bytes{0};
    std::atomic<int> failures{0};
    std::atomic<int64_t> stream_us{0}, finish_us{0}, aggregate_us{0};  // summed over clients
    const absl::Time start = absl::Now();
    std::vector<std::thread> threads;
    for (int c = 0; c < clients; ++c) {
      threads.emplace_back([&, c] {
        v1::ComputeGradientRequest request;
        request.set_job_id("ingest");
        request.set_round(round);
        request.set_shard_id(c);
        request.set_attempt(1);
        request.set_parameter_version(round);
        grpc::ClientContext context;
        std::unique_ptr<grpc::ClientReaderInterface<v1::ComputeGradientResponse>> reader =
            stubs[c]->ComputeGradient(&context, request);
        std::optional<server::RoundCollector::StreamedShard> summing;
        if (stream_into_sum) summing.emplace(&*collector, absl::StrCat("client ", c), c);
        performer::TensorAssembler assembler =
            stream_into_sum
                ? performer::TensorAssembler(
                      specs, performer::DType::kFloat32, absl::StrCat("client ", c), v1::COMPRESSION_NONE,
                      [&summing](size_t tensor, int64_t first, const at::Tensor& values) {
                        return summing->Add(tensor, first, values);
                      })
                : performer::TensorAssembler(specs, performer::DType::kFloat32, absl::StrCat("client ", c));
        server::GradientStream stream = server::ReadGradientStream(reader.get(), &context, &assembler, false);
        const grpc::Status finished = reader->Finish();
        bytes += stream.bytes;
        const absl::Time streamed = absl::Now();
        absl::StatusOr<std::vector<at::Tensor>> gradient = assembler.Finish();
        const absl::Time assembled = absl::Now();
        stream_us += absl::ToInt64Microseconds(streamed - start);
        finish_us += absl::ToInt64Microseconds(assembled - streamed);
        if (!stream.error.ok() || !finished.ok() || !stream.summary.has_value() || !gradient.ok()) {
          ++failures;
          return;
        }
        if (stream_into_sum) {
          if (!summing->Finish(*stream.summary).ok()) ++failures;
        } else if (absl::GetFlag(FLAGS_aggregate)) {
          server::ShardResult result{*stream.summary, *std::move(gradient)};
          if (!aggregator->Add(std::move(result)).ok()) ++failures;
          aggregate_us += absl::ToInt64Microseconds(absl::Now() - assembled);
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    if (failures > 0) {
      std::fprintf(stderr, "gradient_ingest: %d of %d streams failed in round %d\n", failures.load(), clients,
                   round);
      return 1;
    }
    total_bytes += static_cast<double>(bytes);
    total_seconds += seconds;
    std::printf(
        "round %d: %.1f MB in %.3f s = %.2f GB/s (per client: streamed by %.3f s, assembled %.3f s, "
        "aggregated %.3f s)\n",
        round, bytes / 1e6, seconds, bytes / seconds / 1e9, stream_us / 1e6 / clients,
        finish_us / 1e6 / clients, aggregate_us / 1e6 / clients);
  }
  absl::StatusOr<ProcessUsage> usage = ReadProcessUsage(getpid());
  const double peak = usage.ok() ? static_cast<double>(usage->peak_rss_bytes) : 0;
  std::printf("overall: %.2f GB/s; peak resident %.0f MiB (%.1f× one gradient)\n",
              total_bytes / total_seconds / 1e9, peak / 1048576.0, peak / (parameters * 4.0));
  for (auto& server : servers) server->Shutdown();
  return 0;
}

}  // namespace
}  // namespace slimfit::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Streams synthetic gradients from several clients into the coordinator's receive path.");
  absl::ParseCommandLine(argc, argv);
  return slimfit::bench::Run();
}
