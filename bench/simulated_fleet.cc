#include "bench/simulated_fleet.h"

#include <grpcpp/grpcpp.h>

#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "planner/device_profile_io.h"
#include "proto/slimfit.grpc.pb.h"
#include "rpc/transport_security.h"
#include "worker/coordinator_link.h"
#include "worker/parameter_cache.h"
#include "worker/worker_identity.h"
#include "worker/worker_service.h"
#include "worker/worker_state.h"

namespace slimfit::bench {
namespace {

// The fleet's single compute turn: one shard at a time across every simulated worker.
struct ComputeTurn {
  absl::Mutex mutex;
  bool taken ABSL_GUARDED_BY(mutex) = false;
};

// The Worker service a simulated worker serves: the real WorkerService, entered one shard at a
// time across the fleet, with the worker's parameters forgotten after each shard (see the header).
class TurnTakingService final : public v1::Worker::Service {
 public:
  TurnTakingService(worker::WorkerService* service, worker::ParameterCache* cache,
                    std::shared_ptr<ComputeTurn> turn, std::shared_ptr<SimulatedFleet::Counters> counters)
      : service_(service), cache_(cache), turn_(std::move(turn)), counters_(std::move(counters)) {}

  grpc::Status ComputeGradient(grpc::ServerContext* context, const v1::ComputeGradientRequest* request,
                               grpc::ServerWriter<v1::ComputeGradientResponse>* writer) override {
    {
      absl::MutexLock lock(&turn_->mutex);
      auto free = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(turn_->mutex) { return !turn_->taken; };
      while (!free()) {
        if (context->IsCancelled())
          return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled while queued");
        turn_->mutex.AwaitWithTimeout(absl::Condition(&free), absl::Milliseconds(50));
      }
      turn_->taken = true;
    }
    grpc::Status status = service_->ComputeGradient(context, request, writer);
    cache_->Drop(request->job_id());
    {
      absl::MutexLock lock(&turn_->mutex);
      turn_->taken = false;
    }
    ++counters_->calls;
    if (status.ok()) {
      ++counters_->ok;
    } else {
      absl::MutexLock lock(&counters_->mutex);
      ++counters_->failures[absl::StrCat(
          absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())), ": ",
          status.error_message().substr(0, 100))];
    }
    return status;
  }
  grpc::Status GetProfile(grpc::ServerContext* context, const v1::GetProfileRequest* request,
                          v1::GetProfileResponse* response) override {
    return service_->GetProfile(context, request, response);
  }
  grpc::Status Plan(grpc::ServerContext* context, const v1::PlanRequest* request,
                    v1::MemoryPlan* response) override {
    return service_->Plan(context, request, response);
  }

 private:
  worker::WorkerService* const service_;
  worker::ParameterCache* const cache_;
  const std::shared_ptr<ComputeTurn> turn_;
  const std::shared_ptr<SimulatedFleet::Counters> counters_;
};

}  // namespace

// Declared in the order they are built; destroyed in reverse (the link before what it uses).
struct SimulatedFleet::Worker {
  std::unique_ptr<worker::StateDir> state;
  std::unique_ptr<worker::WorkerIdentity> identity;
  std::unique_ptr<worker::ParameterCache> cache;
  std::unique_ptr<worker::WorkerService> service;
  std::unique_ptr<TurnTakingService> turn_taking;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<worker::CoordinatorLink> link;
  bool registered = false;  // Register() succeeded: it deregisters when the fleet stops
};

absl::StatusOr<std::unique_ptr<SimulatedFleet>> SimulatedFleet::Start(FleetOptions options) {
  if (options.coordinator.empty() || options.join_token.empty() || options.state_root.empty() ||
      options.latencies == nullptr || options.workers < 1 || options.memory_budget_bytes <= 0) {
    return absl::InvalidArgumentError(
        "a fleet needs a coordinator, a join token, a state root, a latency recorder, ≥ 1 worker and a "
        "budget");
  }
  std::unique_ptr<SimulatedFleet> fleet(new SimulatedFleet());
  auto turn = std::make_shared<ComputeTurn>();
  for (int i = 0; i < options.workers; ++i) {
    auto w = std::make_unique<Worker>();
    absl::StatusOr<worker::StateDir> state =
        worker::StateDir::Open(absl::StrCat(options.state_root, "/worker-", i));
    if (!state.ok()) return state.status();
    w->state = std::make_unique<worker::StateDir>(*std::move(state));
    absl::StatusOr<std::string> credential = w->state->ReadCredential();
    if (!credential.ok()) return credential.status();
    w->identity = std::make_unique<worker::WorkerIdentity>(options.join_token, *credential);
    // Its own connection to the coordinator, as a separate process would have.
    std::shared_ptr<v1::Coordinator::StubInterface> coordinator =
        v1::Coordinator::NewStub(MakeTimedChannel(options.coordinator, options.latencies));
    worker::ParameterCache::Options cache_options;
    cache_options.coordinator = coordinator;
    cache_options.identity = w->identity.get();
    w->cache = std::make_unique<worker::ParameterCache>(cache_options);
    worker::WorkerService::Options service_options;
    service_options.identity = w->identity.get();
    service_options.profile = options.profile;
    service_options.memory_budget_bytes = options.memory_budget_bytes;
    service_options.cache = w->cache.get();
    w->service = std::make_unique<worker::WorkerService>(service_options);
    w->turn_taking =
        std::make_unique<TurnTakingService>(w->service.get(), w->cache.get(), turn, fleet->counters_);

    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(w->turn_taking.get());
    rpc::ConfigureServerKeepalive(&builder);
    // An idle simulated worker needs one polling thread, not one per core.
    builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::NUM_CQS, 1);
    builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 1);
    builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 1);
    w->server = builder.BuildAndStart();
    if (w->server == nullptr || port == 0) {
      return absl::UnavailableError(absl::StrCat("simulated worker ", i, " cannot listen on 127.0.0.1"));
    }

    worker::CoordinatorLink::Options link_options;
    link_options.coordinator = coordinator;
    link_options.coordinator_address = options.coordinator;
    link_options.identity = w->identity.get();
    v1::RegisterWorkerRequest& registration = link_options.registration;
    *registration.mutable_profile() = planner::DeviceProfileToProto(options.profile);
    registration.set_memory_budget_bytes(options.memory_budget_bytes);
    registration.set_device("cpu");
    registration.set_advertise_address(absl::StrCat("127.0.0.1:", port));
    registration.set_threads(1);
    registration.set_version(worker::kWorkerVersion);
    link_options.state = w->state.get();
    link_options.service = w->service.get();
    link_options.cache = w->cache.get();
    link_options.on_stop = [counters = fleet->counters_](const absl::Status&) { ++counters->stopped; };
    w->link = std::make_unique<worker::CoordinatorLink>(link_options);
    fleet->workers_.push_back(std::move(w));
  }

  // Every worker registers at once; a watchdog stops the stragglers at the timeout.
  std::vector<absl::Status> registered(fleet->workers_.size());
  std::vector<std::thread> registrars;
  for (size_t i = 0; i < fleet->workers_.size(); ++i) {
    registrars.emplace_back([&, i] {
      // As a worker process does: heartbeats start the moment its own registration is answered.
      registered[i] = fleet->workers_[i]->link->Register();
      if (registered[i].ok()) fleet->workers_[i]->link->StartHeartbeats();
    });
  }
  absl::Notification all_done;
  std::thread watchdog([&] {
    if (!all_done.WaitForNotificationWithTimeout(options.register_timeout)) {
      for (auto& w : fleet->workers_) w->link->Stop();
    }
  });
  for (std::thread& registrar : registrars) registrar.join();
  all_done.Notify();
  watchdog.join();
  int succeeded = 0;
  absl::Status first_error;
  for (size_t i = 0; i < registered.size(); ++i) {
    const absl::Status& status = registered[i];
    fleet->workers_[i]->registered = status.ok();
    if (status.ok())
      ++succeeded;
    else if (first_error.ok() && !absl::IsCancelled(status))
      first_error = status;
  }
  if (succeeded < options.workers) {
    fleet->Stop();
    if (!first_error.ok()) return first_error;
    return absl::DeadlineExceededError(absl::StrCat(succeeded, " of ", options.workers,
                                                    " workers registered within ",
                                                    absl::FormatDuration(options.register_timeout)));
  }
  return fleet;
}

std::map<std::string, int64_t> SimulatedFleet::shard_failures() const {
  absl::MutexLock lock(&counters_->mutex);
  return counters_->failures;
}

SimulatedFleet::~SimulatedFleet() { Stop(); }

void SimulatedFleet::Stop() {
  if (stopped_) return;
  stopped_ = true;
  std::vector<std::thread> leaving;
  for (auto& w : workers_) {
    leaving.emplace_back([&w] {
      w->service->StartDraining();
      w->service->CancelCurrentShard();
      w->link->Stop();
      if (w->registered) (void)w->link->Deregister("load test over", absl::Seconds(5));
    });
  }
  for (std::thread& thread : leaving) thread.join();
  for (auto& w : workers_) w->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

}  // namespace slimfit::bench
