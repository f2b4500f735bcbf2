#include "tests/cluster.h"

#include <signal.h>

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/files.h"
#include "base/sha256.h"
#include "base/test_util.h"
#include "rpc/rpc_util.h"
#include "rpc/transport_security.h"

namespace slimfit::testing_util {

Cluster::Cluster(std::string name, ClusterOptions options) : options_(options), root_(TempPath(name)) {
  std::filesystem::remove_all(root_);
  std::filesystem::create_directories(root_ + "/certs");
  if (options_.tls) {
    absl::StatusOr<base::KeyAndCertificate> ca =
        base::MakeCertificateAuthority("cluster CA", absl::Now() - absl::Hours(1), absl::Hours(24));
    if (ca.ok()) ca_ = *std::move(ca);
  }
}

std::vector<std::string> Cluster::TlsFlags(const std::string& name,
                                           const base::KeyAndCertificate& pair) const {
  const std::string base = absl::StrCat(root_, "/certs/", name);
  (void)base::WriteFileAtomically(base + ".pem", pair.cert_pem);
  (void)base::WriteFileAtomically(base + ".key", pair.key_pem);
  (void)base::WriteFileAtomically(root_ + "/certs/ca.pem", ca_.cert_pem);
  return {absl::StrCat("--tls_cert=", base, ".pem"), absl::StrCat("--tls_key=", base, ".key"),
          absl::StrCat("--tls_ca=", root_, "/certs/ca.pem")};
}

// A certificate of the cluster's CA naming the loopback address.
static base::KeyAndCertificate LoopbackCertificate(const base::KeyAndCertificate& ca,
                                                   const std::string& name) {
  base::CertificateRequest request;
  request.common_name = name;
  request.dns_names = {"localhost"};
  request.ip_addresses = {"127.0.0.1"};
  absl::StatusOr<base::KeyAndCertificate> issued = base::IssueCertificate(ca, request);
  return issued.ok() ? *issued : base::KeyAndCertificate{};
}

std::shared_ptr<grpc::ChannelCredentials> Cluster::ClientCredentials() const {
  if (!options_.tls) return nullptr;
  return rpc::ChannelCredentials(rpc::TlsMaterial{"", "", ca_.cert_pem});
}

std::string Cluster::worker_state_dir(int index) const {
  return absl::StrCat(root_, "/worker", index, "/state");
}
std::string Cluster::coordinator_state_dir() const { return absl::StrCat(root_, "/coordinator"); }

Cluster::~Cluster() {
  for (auto& worker : workers_) worker->Signal(SIGKILL);
  if (coordinator_ != nullptr) coordinator_->Signal(SIGKILL);
}

absl::Status Cluster::StartCoordinator(const std::vector<std::string>& extra_flags_given) {
  std::vector<std::string> extra_flags = extra_flags_given;
  if (options_.tls) {
    const std::vector<std::string> tls = TlsFlags("coordinator", LoopbackCertificate(ca_, "coordinator"));
    extra_flags.insert(extra_flags.begin(), tls.begin(), tls.end());
  }
  const std::string port_file = absl::StrCat(root_, "/coordinator.port");
  std::filesystem::remove(port_file);
  // Restarts reuse the first address so workers find the coordinator again.
  const std::string listen = address_.empty() ? "127.0.0.1:0" : address_;
  const std::string log = absl::StrCat(root_, "/coordinator.log");
  std::vector<std::string> flags = {absl::StrCat("--state_dir=", coordinator_state_dir()),
                                    absl::StrCat("--listen=", listen),
                                    absl::StrCat("--token=", kClientToken),
                                    absl::StrCat("--worker_token=", kWorkerToken),
                                    "--heartbeat_interval_ms=200",
                                    "--lost_after_ms=1500",
                                    "--shard_timeout_seconds=60",
                                    absl::StrCat("--port_file=", port_file)};
  flags.insert(flags.end(), extra_flags.begin(), extra_flags.end());
  absl::StatusOr<DaemonProcess> process =
      DaemonProcess::Start(RunfilePath("server/slimfit-coordinator"), flags, log);
  if (!process.ok()) return process.status();
  coordinator_ = std::make_unique<DaemonProcess>(*std::move(process));
  if (logs_.empty() || logs_.front() != log) logs_.insert(logs_.begin(), log);
  absl::StatusOr<std::string> address = coordinator_->WaitForAddress(port_file, absl::Seconds(30));
  if (!address.ok()) return address.status();
  address_ = *address;
  return absl::OkStatus();
}

absl::StatusOr<int> Cluster::StartWorker(const std::string& budget, const WorkerOptions& options) {
  const int index = static_cast<int>(workers_.size());
  if (absl::Status started = LaunchWorker(index, budget, options); !started.ok()) return started;
  return index;
}

absl::Status Cluster::RestartWorker(int index, const WorkerOptions& options) {
  workers_.at(index)->Signal(SIGKILL);
  (void)workers_.at(index)->Wait(absl::Seconds(10));
  return LaunchWorker(index, budgets_.at(index), options);
}

absl::Status Cluster::LaunchWorker(int index, const std::string& budget, const WorkerOptions& options) {
  const std::string dir = absl::StrCat(root_, "/worker", index);
  std::filesystem::create_directories(dir);
  const std::string port_file = absl::StrCat(dir, "/port");
  std::filesystem::remove(port_file);
  const std::string log = absl::StrCat(root_, "/worker", index, ".log");
  std::vector<std::string> flags = {
      absl::StrCat("--coordinator=", address_),
      "--listen=127.0.0.1:0",
      "--device=cpu",
      absl::StrCat("--memory_budget=", budget),
      "--threads=1",
      absl::StrCat("--state_dir=", worker_state_dir(index)),
      absl::StrCat("--token=", kWorkerToken),
      absl::StrCat("--profile=", RunfilePath("client/testdata/tiny_cpu.profile")),
      absl::StrCat("--port_file=", port_file)};
  if (options_.tls) {
    const base::KeyAndCertificate certificate = options.certificate.cert_pem.empty()
                                                    ? LoopbackCertificate(ca_, absl::StrCat("worker", index))
                                                    : options.certificate;
    const std::vector<std::string> tls = TlsFlags(absl::StrCat("worker", index), certificate);
    flags.insert(flags.end(), tls.begin(), tls.end());
  }
  flags.insert(flags.end(), options.extra_flags.begin(), options.extra_flags.end());
  absl::StatusOr<DaemonProcess> process =
      DaemonProcess::Start(RunfilePath("worker/slimfit-worker"), flags, log);
  if (!process.ok()) return process.status();
  if (index == static_cast<int>(workers_.size())) {
    workers_.push_back(std::make_unique<DaemonProcess>(*std::move(process)));
    worker_addresses_.push_back("");
    budgets_.push_back(budget);
    logs_.push_back(log);
  } else {
    workers_.at(index) = std::make_unique<DaemonProcess>(*std::move(process));
  }
  if (!options.wait_until_serving) return absl::OkStatus();
  absl::StatusOr<std::string> address = workers_.at(index)->WaitForAddress(port_file, absl::Seconds(60));
  if (!address.ok()) return address.status();
  worker_addresses_.at(index) = *address;
  return absl::OkStatus();
}

absl::Status Cluster::WaitForLiveWorkers(int count, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  int live = 0;
  while (absl::Now() < deadline) {
    auto context = rpc::MakeClientContext(kClientToken, std::chrono::seconds(5));
    v1::ListWorkersRequest request;
    v1::ListWorkersResponse response;
    if (Stub()->ListWorkers(context.get(), request, &response).ok()) {
      live = 0;
      for (const v1::WorkerInfo& w : response.workers()) {
        live += w.state() == v1::WORKER_STATE_IDLE || w.state() == v1::WORKER_STATE_BUSY ? 1 : 0;
      }
      if (live >= count) return absl::OkStatus();
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  return absl::DeadlineExceededError(absl::StrCat(live, " of ", count, " workers live"));
}

std::unique_ptr<v1::Coordinator::Stub> Cluster::Stub() const {
  return v1::Coordinator::NewStub(rpc::MakeChannel(address_, ClientCredentials()));
}

absl::StatusOr<std::string> Cluster::UploadText(const std::string& content,
                                                const std::optional<std::string>& separator) {
  auto context = rpc::MakeClientContext(kClientToken, std::chrono::seconds(30));
  v1::DatasetInfo info;
  std::unique_ptr<v1::Coordinator::Stub> stub = Stub();
  auto writer = stub->UploadDataset(context.get(), &info);
  v1::UploadDatasetRequest request;
  v1::UploadMetadata* metadata = request.mutable_metadata();
  metadata->set_name("corpus.txt");
  metadata->set_content_type("text/plain");
  metadata->set_total_bytes(static_cast<int64_t>(content.size()));
  metadata->set_sha256(base::Sha256Hex(content));
  if (separator.has_value()) metadata->set_document_separator(*separator);
  if (writer->Write(request)) {
    for (size_t offset = 0; offset < content.size(); offset += v1::LIMIT_MAX_CHUNK_BYTES) {
      request.Clear();
      request.set_chunk(content.substr(offset, v1::LIMIT_MAX_CHUNK_BYTES));
      if (!writer->Write(request)) break;
    }
    writer->WritesDone();
  }
  grpc::Status status = writer->Finish();
  if (!status.ok()) return rpc::FromGrpcStatus(status, "UploadDataset", context.get());
  return info.dataset_id();
}

absl::StatusOr<v1::Job> Cluster::Submit(const v1::JobSpec& spec, const std::string& token) {
  auto context = rpc::MakeClientContext(token, std::chrono::seconds(60));
  v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  v1::Job job;
  grpc::Status status = Stub()->SubmitJob(context.get(), request, &job);
  if (!status.ok()) return rpc::FromGrpcStatus(status, "SubmitJob", context.get());
  return job;
}

absl::StatusOr<v1::Job> Cluster::GetJob(const std::string& job_id) {
  auto context = rpc::MakeClientContext(kClientToken, std::chrono::seconds(10));
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  v1::Job job;
  grpc::Status status = Stub()->GetJob(context.get(), request, &job);
  if (!status.ok()) return rpc::FromGrpcStatus(status, "GetJob", context.get());
  return job;
}

absl::StatusOr<v1::Job> Cluster::WaitForJob(const std::string& job_id, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<v1::Job> job = absl::UnknownError("not polled");
  while (absl::Now() < deadline) {
    job = GetJob(job_id);
    if (job.ok() && (job->state() == v1::JOB_STATE_SUCCEEDED || job->state() == v1::JOB_STATE_FAILED ||
                     job->state() == v1::JOB_STATE_CANCELLED)) {
      return job;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "job ", job_id, " not finished: ", job.ok() ? job->DebugString() : job.status().ToString()));
}

absl::StatusOr<performer::TensorFile> Cluster::Export(const std::string& job_id) {
  auto context = rpc::MakeClientContext(kClientToken, std::chrono::seconds(60));
  v1::ExportModelRequest request;
  request.set_job_id(job_id);
  auto reader = Stub()->ExportModel(context.get(), request);
  v1::ExportModelResponse response;
  std::string bytes;
  std::string sha;
  while (reader->Read(&response)) {
    if (response.has_chunk()) bytes += response.chunk();
    if (response.has_trailer()) sha = response.trailer().sha256();
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) return rpc::FromGrpcStatus(status, "ExportModel", context.get());
  if (sha != base::Sha256Hex(bytes)) return absl::DataLossError("export digest mismatch");
  return performer::ParseSafetensors(bytes);
}

std::string Cluster::Logs() const {
  std::string all;
  for (const std::string& log : logs_) {
    absl::StatusOr<std::string> text = base::ReadFileToString(log);
    absl::StrAppend(&all, "==== ", log, "\n", text.ok() ? *text : text.status().ToString(), "\n");
  }
  return all;
}

}  // namespace slimfit::testing_util
