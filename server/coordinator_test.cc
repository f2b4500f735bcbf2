// The Coordinator in-process, each test on a fresh state directory with no worker unless it
// registers one (workers registered here never heartbeat, so they are kept live for an hour):
// submission (validation, request-id deduplication), listings and their page tokens, GetJob,
// CancelJob, WatchJob's stream and GetMemoryPlan's validation. Jobs train the tiny model of
// test_job_spec.h and, with no eligible worker, wait in QUEUED; nothing here waits on the clock.
#include "server/coordinator.h"

#include <atomic>
#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/rpc_util.h"
#include "server/test_job_spec.h"
#include "server/test_worker_request.h"

namespace slimfit::server {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// INVALID_ARGUMENT whose message starts with "<field>: " and whose ErrorDetail names `field`.
void ExpectInvalidField(const absl::Status& status, const std::string& field) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << field << ": " << status;
  EXPECT_THAT(std::string(status.message()), StartsWith(field + ": ")) << status;
  std::optional<v1::ErrorDetail> detail = rpc::ErrorDetailOf(status);
  ASSERT_TRUE(detail.has_value()) << status;
  EXPECT_EQ(detail->field(), field) << status;
}

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_dir_ = testing_util::TempPath(
        absl::StrCat("coordinator_", ::testing::UnitTest::GetInstance()->current_test_info()->name()));
    ASSERT_NO_FATAL_FAILURE(Start());
    ASSERT_NO_FATAL_FAILURE(UploadCorpus());
  }

  void Start() {
    CoordinatorOptions options;
    options.state_dir = state_dir_;
    options.registry.lost_after = absl::Hours(1);
    absl::StatusOr<std::unique_ptr<Coordinator>> coordinator = Coordinator::Create(options);
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = *std::move(coordinator);
  }

  void UploadCorpus() {
    const std::string corpus = TestCorpus();
    std::optional<v1::DatasetInfo> existing;
    absl::StatusOr<std::unique_ptr<UploadSink>> sink =
        coordinator_->BeginUpload(TestCorpusMetadata(corpus), &existing);
    ASSERT_TRUE(sink.ok()) << sink.status();
    ASSERT_FALSE(existing.has_value());
    ASSERT_TRUE((*sink)->Write(corpus).ok());
    absl::StatusOr<v1::DatasetInfo> info = (*sink)->Finish();
    ASSERT_TRUE(info.ok()) << info.status();
    dataset_id_ = info->dataset_id();
  }

  v1::SubmitJobRequest Request(const std::string& request_id = "") const {
    v1::SubmitJobRequest request;
    *request.mutable_spec() = TestJobSpec(dataset_id_);
    request.set_request_id(request_id);
    return request;
  }

  // Submits the test job; fails the test unless it is accepted.
  v1::Job Submit(const std::string& request_id = "") {
    absl::StatusOr<v1::Job> job = coordinator_->SubmitJob(Request(request_id));
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : v1::Job();
  }

  absl::StatusOr<v1::Job> Cancel(const std::string& job_id, const std::string& reason = "") {
    v1::CancelJobRequest request;
    request.set_job_id(job_id);
    request.set_reason(reason);
    return coordinator_->CancelJob(request);
  }

  // Everything a WatchJob stream of `request` yields, the status it ends with in *status.
  std::vector<v1::JobEvent> Watch(const v1::WatchJobRequest& request, absl::Status* status) {
    std::vector<v1::JobEvent> events;
    *status = coordinator_->WatchJob(
        request,
        [&](const v1::JobEvent& event) {
          events.push_back(event);
          return true;
        },
        [] { return false; });
    return events;
  }

  // Cancels `job_id` while a WatchJob stream of it runs from the snapshot on; returns what the
  // stream yielded once it ended by itself, the status it ended with in *watched.
  std::vector<v1::JobEvent> CancelWhileWatching(const std::string& job_id, const std::string& reason,
                                                absl::Status* watched) {
    absl::Notification snapshot_sent;
    std::vector<v1::JobEvent> events;
    std::thread watcher([&] {
      v1::WatchJobRequest request;
      request.set_job_id(job_id);
      *watched = coordinator_->WatchJob(
          request,
          [&](const v1::JobEvent& event) {
            events.push_back(event);
            if (!snapshot_sent.HasBeenNotified()) snapshot_sent.Notify();
            return true;
          },
          [] { return false; });
      if (!snapshot_sent.HasBeenNotified()) snapshot_sent.Notify();  // it ended before any
    });
    snapshot_sent.WaitForNotification();
    absl::StatusOr<v1::Job> cancelled = Cancel(job_id, reason);
    watcher.join();
    EXPECT_TRUE(cancelled.ok()) << cancelled.status();
    EXPECT_EQ(cancelled.value_or(v1::Job()).state(), v1::JOB_STATE_CANCELLED);
    return events;
  }

  std::string RegisterWorker() {
    absl::StatusOr<v1::RegisterWorkerResponse> registered =
        coordinator_->registry().Register(TestWorkerRequest(), std::nullopt);
    EXPECT_TRUE(registered.ok()) << registered.status();
    return registered.ok() ? registered->worker_id() : "";
  }

  std::string state_dir_;
  std::unique_ptr<Coordinator> coordinator_;
  std::string dataset_id_;
};

TEST_F(CoordinatorTest, SubmitRefusesInvalidSpecsNamingTheFieldAndCreatesNothing) {
  struct Case {
    std::string field;
    std::function<void(v1::SubmitJobRequest*)> corrupt;
  };
  const std::vector<Case> cases = {
      {"request_id", [](auto* r) { r->set_request_id(std::string(257, 'r')); }},
      {"spec.rounds", [](auto* r) { r->mutable_spec()->set_rounds(0); }},
      {"spec.sequence_length", [](auto* r) { r->mutable_spec()->set_sequence_length(1); }},
      {"spec.tokens_per_round", [](auto* r) { r->mutable_spec()->set_tokens_per_round(15); }},
      {"spec.min_workers", [](auto* r) { r->mutable_spec()->set_min_workers(0); }},
      {"spec.dataset_ids", [](auto* r) { r->mutable_spec()->clear_dataset_ids(); }},
      {"spec.constraints.device_kinds",
       [](auto* r) { r->mutable_spec()->mutable_constraints()->add_device_kinds("tpu"); }},
      {"spec.name", [](auto* r) { r->mutable_spec()->set_name(std::string(257, 'n')); }},
  };
  for (const Case& c : cases) {
    v1::SubmitJobRequest request = Request("invalid-" + c.field);
    c.corrupt(&request);
    ExpectInvalidField(coordinator_->SubmitJob(request).status(), c.field);
  }
  // An unknown dataset is NOT_FOUND naming it; too little data for one sequence FAILED_PRECONDITION.
  v1::SubmitJobRequest unknown = Request();
  unknown.mutable_spec()->set_dataset_ids(0, "ds-0000000000000000");
  const absl::Status not_found = coordinator_->SubmitJob(unknown).status();
  EXPECT_EQ(not_found.code(), absl::StatusCode::kNotFound) << not_found;
  std::optional<v1::ErrorDetail> detail = rpc::ErrorDetailOf(not_found);
  ASSERT_TRUE(detail.has_value()) << not_found;
  EXPECT_EQ(detail->resource_kind(), "dataset");
  EXPECT_EQ(detail->resource_id(), "ds-0000000000000000");
  v1::SubmitJobRequest too_long = Request();
  too_long.mutable_spec()->set_sequence_length(4096);
  too_long.mutable_spec()->set_tokens_per_round(4096);
  EXPECT_EQ(coordinator_->SubmitJob(too_long).status().code(), absl::StatusCode::kFailedPrecondition);

  absl::StatusOr<v1::ListJobsResponse> jobs = coordinator_->ListJobs(v1::ListJobsRequest());
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(jobs->jobs_size(), 0) << "a refused submission leaves no job";
}

TEST_F(CoordinatorTest, ARetriedSubmissionReturnsItsJob) {
  const v1::Job first = Submit("retry-me");
  ASSERT_FALSE(first.job_id().empty());
  EXPECT_EQ(first.state(), v1::JOB_STATE_QUEUED);
  // The retry gets the same job, even when its spec has changed since.
  v1::SubmitJobRequest retry = Request("retry-me");
  retry.mutable_spec()->set_rounds(5);
  absl::StatusOr<v1::Job> again = coordinator_->SubmitJob(retry);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->job_id(), first.job_id());
  EXPECT_EQ(again->spec().rounds(), 1);
  // Another request id, or none, is another job.
  const v1::Job other = Submit("another");
  const v1::Job anonymous = Submit();
  EXPECT_NE(other.job_id(), first.job_id());
  EXPECT_NE(anonymous.job_id(), first.job_id());
  EXPECT_NE(anonymous.job_id(), other.job_id());
  absl::StatusOr<v1::ListJobsResponse> jobs = coordinator_->ListJobs(v1::ListJobsRequest());
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(jobs->jobs_size(), 3);
}

TEST_F(CoordinatorTest, ConcurrentDuplicateSubmissionsCreateOneJob) {
  constexpr int kCallers = 6;
  std::vector<absl::StatusOr<v1::Job>> results(kCallers, absl::UnknownError("not called"));
  absl::Notification go;
  std::vector<std::thread> callers;
  for (int i = 0; i < kCallers; ++i) {
    callers.emplace_back([&, i] {
      go.WaitForNotification();
      results[i] = coordinator_->SubmitJob(Request("same-request"));
    });
  }
  go.Notify();
  for (std::thread& caller : callers) caller.join();
  std::set<std::string> ids;
  for (const absl::StatusOr<v1::Job>& result : results) {
    ASSERT_TRUE(result.ok()) << result.status();
    ids.insert(result->job_id());
  }
  EXPECT_EQ(ids.size(), 1u);
  absl::StatusOr<v1::ListJobsResponse> jobs = coordinator_->ListJobs(v1::ListJobsRequest());
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(jobs->jobs_size(), 1);
}

TEST_F(CoordinatorTest, ListJobsPagesNewestFirstAndRefusesAForeignToken) {
  std::vector<std::string> submitted;
  for (int i = 0; i < 5; ++i) submitted.push_back(Submit().job_id());
  std::vector<std::string> listed;
  v1::ListJobsRequest request;
  request.set_page_size(2);
  std::vector<int> page_sizes;
  do {
    absl::StatusOr<v1::ListJobsResponse> page = coordinator_->ListJobs(request);
    ASSERT_TRUE(page.ok()) << page.status();
    page_sizes.push_back(page->jobs_size());
    for (const v1::Job& job : page->jobs()) listed.push_back(job.job_id());
    request.set_page_token(page->next_page_token());
  } while (!request.page_token().empty() && page_sizes.size() < 10);
  EXPECT_EQ(page_sizes, (std::vector<int>{2, 2, 1}));
  EXPECT_EQ(listed, std::vector<std::string>(submitted.rbegin(), submitted.rend()));

  v1::ListJobsRequest queued;
  queued.add_states(v1::JOB_STATE_QUEUED);
  EXPECT_EQ(coordinator_->ListJobs(queued)->jobs_size(), 5);
  v1::ListJobsRequest succeeded;
  succeeded.add_states(v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(coordinator_->ListJobs(succeeded)->jobs_size(), 0);

  for (const char* token : {"workers:2", "plans:2", "jobs:two", "2"}) {
    v1::ListJobsRequest foreign;
    foreign.set_page_token(token);
    EXPECT_EQ(coordinator_->ListJobs(foreign).status().code(), absl::StatusCode::kOutOfRange) << token;
  }
  for (const int size : {-1, v1::LIMIT_MAX_PAGE_SIZE + 1}) {
    v1::ListJobsRequest wrong;
    wrong.set_page_size(size);
    ExpectInvalidField(coordinator_->ListJobs(wrong).status(), "page_size");
  }
}

TEST_F(CoordinatorTest, ListWorkersPagesAndRefusesAForeignToken) {
  std::set<std::string> registered;
  for (int i = 0; i < 3; ++i) registered.insert(RegisterWorker());
  v1::ListWorkersRequest request;
  request.set_page_size(2);
  absl::StatusOr<v1::ListWorkersResponse> first = coordinator_->ListWorkers(request);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->workers_size(), 2);
  ASSERT_FALSE(first->next_page_token().empty());
  request.set_page_token(first->next_page_token());
  absl::StatusOr<v1::ListWorkersResponse> second = coordinator_->ListWorkers(request);
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_EQ(second->workers_size(), 1);
  EXPECT_TRUE(second->next_page_token().empty());
  std::set<std::string> listed;
  for (const auto* page : {&*first, &*second}) {
    for (const v1::WorkerInfo& worker : page->workers()) listed.insert(worker.worker_id());
  }
  EXPECT_EQ(listed, registered);

  for (const char* token : {"jobs:1", "workers:", "workers:-1"}) {
    v1::ListWorkersRequest foreign;
    foreign.set_page_token(token);
    EXPECT_EQ(coordinator_->ListWorkers(foreign).status().code(), absl::StatusCode::kOutOfRange) << token;
  }
  v1::ListWorkersRequest wrong;
  wrong.set_page_size(-1);
  ExpectInvalidField(coordinator_->ListWorkers(wrong).status(), "page_size");
}

TEST_F(CoordinatorTest, GetJobOfAnUnknownIdIsNotFound) {
  const absl::Status status = coordinator_->GetJob("job-999999").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  std::optional<v1::ErrorDetail> detail = rpc::ErrorDetailOf(status);
  ASSERT_TRUE(detail.has_value()) << status;
  EXPECT_EQ(detail->resource_kind(), "job");
  EXPECT_EQ(detail->resource_id(), "job-999999");
  const v1::Job job = Submit();
  absl::StatusOr<v1::Job> got = coordinator_->GetJob(job.job_id());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->spec().dataset_ids(0), dataset_id_);
}

TEST_F(CoordinatorTest, CancellingAQueuedJobWithNoWorkersCancelsIt) {
  const v1::Job job = Submit();
  absl::StatusOr<v1::Job> cancelled = Cancel(job.job_id(), "changed my mind");
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->state(), v1::JOB_STATE_CANCELLED);
  EXPECT_THAT(cancelled->state_reason(), HasSubstr("cancelled by client: changed my mind"));
  EXPECT_EQ(coordinator_->GetJob(job.job_id())->state(), v1::JOB_STATE_CANCELLED);
  // Idempotent.
  absl::StatusOr<v1::Job> again = Cancel(job.job_id());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->state(), v1::JOB_STATE_CANCELLED);

  EXPECT_EQ(Cancel("job-999999").status().code(), absl::StatusCode::kNotFound);
  ExpectInvalidField(Cancel(job.job_id(), std::string(1025, 'x')).status(), "reason");
}

TEST_F(CoordinatorTest, CancellingAFailedJobIsAFailedPrecondition) {
  const v1::Job job = Submit();
  coordinator_.reset();  // the job stays QUEUED in the store
  // Its dataset's file is gone when the coordinator starts again: the job cannot resume and fails.
  ASSERT_TRUE(std::filesystem::remove(absl::StrCat(state_dir_, "/uploads/", dataset_id_)));
  ASSERT_NO_FATAL_FAILURE(Start());
  absl::StatusOr<v1::Job> failed = coordinator_->GetJob(job.job_id());
  ASSERT_TRUE(failed.ok()) << failed.status();
  ASSERT_EQ(failed->state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(failed->state_reason(), HasSubstr("could not resume after a restart"));

  const absl::Status refused = Cancel(job.job_id()).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_THAT(std::string(refused.message()), HasSubstr("JOB_STATE_FAILED"));
  EXPECT_EQ(coordinator_->GetJob(job.job_id())->state(), v1::JOB_STATE_FAILED);
}

TEST_F(CoordinatorTest, WatchStreamsTheSnapshotThenEveryEventInOrderAndEndsAfterTheTerminalOne) {
  const v1::Job job = Submit();
  absl::Status watched;
  const std::vector<v1::JobEvent> events = CancelWhileWatching(job.job_id(), "watch me", &watched);
  EXPECT_TRUE(watched.ok()) << watched;

  ASSERT_GE(events.size(), 2u);
  ASSERT_TRUE(events.front().has_snapshot());
  EXPECT_EQ(events.front().job_id(), job.job_id());
  EXPECT_EQ(events.front().snapshot().state(), v1::JOB_STATE_QUEUED);
  for (size_t i = 1; i < events.size(); ++i) {
    EXPECT_FALSE(events[i].has_snapshot());
    EXPECT_EQ(events[i].job_id(), job.job_id());
    EXPECT_EQ(events[i].sequence(), events[i - 1].sequence() + 1) << "event " << i;
    if (i + 1 < events.size() && events[i].has_state_changed()) {
      EXPECT_NE(events[i].state_changed().state(), v1::JOB_STATE_CANCELLED) << "event " << i;
    }
  }
  const v1::JobEvent& last = events.back();
  ASSERT_TRUE(last.has_state_changed());
  EXPECT_EQ(last.state_changed().state(), v1::JOB_STATE_CANCELLED);
  EXPECT_THAT(last.state_changed().reason(), HasSubstr("watch me"));
}

TEST_F(CoordinatorTest, WatchOfAFinishedJobReplaysRetainedEventsAndEnds) {
  const v1::Job job = Submit();
  absl::Status status;
  CancelWhileWatching(job.job_id(), "", &status);  // returns once the terminal event is stored
  ASSERT_TRUE(status.ok()) << status;
  v1::WatchJobRequest request;
  request.set_job_id(job.job_id());
  request.set_from_start(true);
  const std::vector<v1::JobEvent> all = Watch(request, &status);
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_GE(all.size(), 3u);  // the snapshot, submitted, ..., cancelled
  EXPECT_EQ(all[0].snapshot().state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(all[0].sequence(), all.back().sequence()) << "the snapshot includes every event";
  for (size_t i = 1; i < all.size(); ++i) EXPECT_EQ(all[i].sequence(), static_cast<int64_t>(i));
  ASSERT_TRUE(all[1].has_state_changed());
  EXPECT_EQ(all[1].state_changed().state(), v1::JOB_STATE_QUEUED);
  ASSERT_TRUE(all.back().has_state_changed());
  EXPECT_EQ(all.back().state_changed().state(), v1::JOB_STATE_CANCELLED);

  // A reconnect after sequence 1 gets the rest; with no position, only the snapshot.
  request.set_from_start(false);
  request.set_after_sequence(1);
  const std::vector<v1::JobEvent> rest = Watch(request, &status);
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_EQ(rest.size(), all.size() - 1);
  for (size_t i = 1; i < rest.size(); ++i) EXPECT_EQ(rest[i].sequence(), all[i + 1].sequence());
  request.set_after_sequence(0);
  EXPECT_EQ(Watch(request, &status).size(), 1u);
  EXPECT_TRUE(status.ok()) << status;

  request.set_after_sequence(-1);
  EXPECT_TRUE(Watch(request, &status).empty());
  ExpectInvalidField(status, "after_sequence");
  request.set_after_sequence(0);
  request.set_job_id("job-999999");
  EXPECT_TRUE(Watch(request, &status).empty());
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
}

TEST_F(CoordinatorTest, WatchEndsUnavailableWhenTheCoordinatorShutsDown) {
  const v1::Job job = Submit();
  absl::Notification snapshot_sent;
  absl::Status watched = absl::UnknownError("not watched");
  std::thread watcher([&] {
    v1::WatchJobRequest request;
    request.set_job_id(job.job_id());
    watched = coordinator_->WatchJob(
        request,
        [&](const v1::JobEvent&) {
          if (!snapshot_sent.HasBeenNotified()) snapshot_sent.Notify();
          return true;
        },
        [] { return false; });
    if (!snapshot_sent.HasBeenNotified()) snapshot_sent.Notify();  // it ended before any
  });
  snapshot_sent.WaitForNotification();
  coordinator_->Shutdown();
  watcher.join();
  EXPECT_EQ(watched.code(), absl::StatusCode::kUnavailable) << watched;
}

// CancelJob never answers OK for a job that has not stopped: past its deadline it is
// DEADLINE_EXCEEDED (the cancellation goes on), and a second call waits again.
TEST_F(CoordinatorTest, CancelAnswersDeadlineExceededUntilTheJobHasStoppedAndIsIdempotent) {
  const v1::Job job = Submit();
  v1::CancelJobRequest request;
  request.set_job_id(job.job_id());
  request.set_reason("too slow");
  // A deadline already passed: the runner, waiting for workers, has not stopped at this instant.
  const absl::StatusOr<v1::Job> early = coordinator_->CancelJob(request, absl::Now());
  EXPECT_EQ(early.status().code(), absl::StatusCode::kDeadlineExceeded) << early.status();
  EXPECT_THAT(std::string(early.status().message()), HasSubstr("cancellation requested and in progress"));
  const absl::StatusOr<v1::Job> waited = coordinator_->CancelJob(request, absl::Now() + absl::Minutes(5));
  ASSERT_TRUE(waited.ok()) << waited.status();
  EXPECT_EQ(waited->state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(waited->state_reason(), "cancelled by client: too slow");
  const absl::StatusOr<v1::Job> again = coordinator_->CancelJob(request, absl::InfinitePast());
  ASSERT_TRUE(again.ok()) << again.status();  // stopped: answered whatever the deadline
  EXPECT_EQ(again->state(), v1::JOB_STATE_CANCELLED);
}

// A WatchJob stream wakes for its own job's changes (and the shutdown) only: another job's events
// do not wake it. Each wake asks `cancelled` once; with an hour between checks on the client, every
// wake here is a signal.
TEST_F(CoordinatorTest, AWatchWakesOnlyForItsOwnJob) {
  coordinator_.reset();
  CoordinatorOptions options;
  options.state_dir = state_dir_;
  options.registry.lost_after = absl::Hours(1);
  options.watch_check_interval = absl::Hours(1);
  absl::StatusOr<std::unique_ptr<Coordinator>> restarted = Coordinator::Create(options);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  coordinator_ = *std::move(restarted);
  const v1::Job watched_job = Submit();
  auto settled = [&](const std::string& job_id) {
    absl::StatusOr<v1::Job> job = coordinator_->GetJob(job_id);
    return job.ok() && absl::StrContains(job->state_reason(), " live)");
  };
  // Until the watched job's runner has recorded its round-0 checkpoint (CheckpointWritten) and
  // settled to waiting for workers ("... (0 live)"), it changes on its own: a stream that ends
  // once it has.
  v1::WatchJobRequest request;
  request.set_job_id(watched_job.job_id());
  request.set_from_start(true);
  bool checkpointed = false;
  absl::Status settling = coordinator_->WatchJob(
      request,
      [&](const v1::JobEvent& event) {
        checkpointed = checkpointed || event.has_checkpoint_written();
        return true;
      },
      [&] { return checkpointed && settled(watched_job.job_id()); });
  request.set_from_start(false);
  ASSERT_EQ(settling.code(), absl::StatusCode::kCancelled) << settling;

  std::atomic<int> wakes{0};
  absl::Notification waiting;
  absl::Status ended;
  std::thread watcher([&] {
    ended = coordinator_->WatchJob(
        request, [](const v1::JobEvent&) { return true; },
        [&] {
          if (++wakes == 1) waiting.Notify();
          return false;
        });
  });
  waiting.WaitForNotification();
  // Other jobs start, checkpoint, wait and are cancelled: a dozen changes of their own, each
  // signalled well before the cancellation is stored and answered. A watcher woken by them would
  // count several wakes by the end; its own job, waiting for workers, may change once at most.
  for (int i = 0; i < 3; ++i) {
    const v1::Job other_job = Submit();
    absl::StatusOr<v1::Job> cancelled = Cancel(other_job.job_id(), "not this one");
    ASSERT_TRUE(cancelled.ok()) << cancelled.status();
    EXPECT_EQ(cancelled->state(), v1::JOB_STATE_CANCELLED);
  }
  EXPECT_LE(wakes.load(), 2) << "the watcher woke for other jobs' changes";
  // Shutdown stops the watched job's runner and wakes every watcher: the stream ends.
  coordinator_->Shutdown();
  watcher.join();
  EXPECT_EQ(ended.code(), absl::StatusCode::kUnavailable) << ended;
  EXPECT_GE(wakes.load(), 2);
}

TEST_F(CoordinatorTest, GetMemoryPlanAnswersForAWorkerAndValidatesTheRequest) {
  const std::string worker = RegisterWorker();
  v1::GetMemoryPlanRequest good;
  good.set_worker_id(worker);
  v1::WorkloadSpec* workload = good.mutable_spec();
  *workload->mutable_model() = TestJobSpec(dataset_id_).model();
  workload->set_sequence_length(64);
  absl::StatusOr<v1::GetMemoryPlanResponse> plans = coordinator_->GetMemoryPlan(good);
  ASSERT_TRUE(plans.ok()) << plans.status();
  ASSERT_EQ(plans->plans_size(), 1);
  EXPECT_EQ(plans->plans(0).worker_id(), worker);

  // For a job: the job's workload; the cpu worker is not eligible for it, so it stays QUEUED.
  v1::SubmitJobRequest cuda_only = Request();
  cuda_only.mutable_spec()->mutable_constraints()->add_device_kinds("cuda");
  absl::StatusOr<v1::Job> job = coordinator_->SubmitJob(cuda_only);
  ASSERT_TRUE(job.ok()) << job.status();
  v1::GetMemoryPlanRequest for_job;
  for_job.set_worker_id(worker);
  for_job.set_job_id(job->job_id());
  ASSERT_TRUE(coordinator_->GetMemoryPlan(for_job).ok()) << coordinator_->GetMemoryPlan(for_job).status();

  struct Case {
    std::string field;
    std::function<void(v1::GetMemoryPlanRequest*)> corrupt;
  };
  const std::vector<Case> cases = {
      {"workload", [](auto* r) { r->clear_spec(); }},
      {"target", [](auto* r) { r->clear_worker_id(); }},
      {"target", [](auto* r) { r->set_all_workers(false); }},
      {"spec.sequence_length", [](auto* r) { r->mutable_spec()->set_sequence_length(0); }},
      {"spec.documents", [](auto* r) { r->mutable_spec()->set_documents(0); }},
      {"spec.documents", [](auto* r) { r->mutable_spec()->set_documents(65); }},
      {"safety_margin", [](auto* r) { r->set_safety_margin(1); }},
      {"safety_margin", [](auto* r) { r->set_safety_margin(-0.01); }},
      {"bf16_products",
       [](auto* r) {
         r->set_dtype(v1::DTYPE_FLOAT64);
         r->set_bf16_products(true);
       }},
      {"page_size",
       [](auto* r) {
         r->set_all_workers(true);
         r->set_page_size(51);
       }},
  };
  for (const Case& c : cases) {
    v1::GetMemoryPlanRequest request = good;
    c.corrupt(&request);
    ExpectInvalidField(coordinator_->GetMemoryPlan(request).status(), c.field);
  }
  v1::GetMemoryPlanRequest wrong_dtype = for_job;
  wrong_dtype.set_dtype(v1::DTYPE_FLOAT64);
  ExpectInvalidField(coordinator_->GetMemoryPlan(wrong_dtype).status(), "dtype");
  v1::GetMemoryPlanRequest wrong_products = for_job;
  wrong_products.set_bf16_products(true);
  ExpectInvalidField(coordinator_->GetMemoryPlan(wrong_products).status(), "bf16_products");

  v1::GetMemoryPlanRequest unknown_worker = good;
  unknown_worker.set_worker_id("w-unknown");
  const absl::Status no_worker = coordinator_->GetMemoryPlan(unknown_worker).status();
  EXPECT_EQ(no_worker.code(), absl::StatusCode::kNotFound) << no_worker;
  EXPECT_EQ(rpc::ErrorDetailOf(no_worker).value_or(v1::ErrorDetail()).resource_kind(), "worker");
  v1::GetMemoryPlanRequest unknown_job = for_job;
  unknown_job.set_job_id("job-999999");
  EXPECT_EQ(coordinator_->GetMemoryPlan(unknown_job).status().code(), absl::StatusCode::kNotFound);
}

// GetMemoryPlan for a job searches what the job's worker planner does (planner::
// JobPlanSearchRequest; worker_planner_test pins the planner's side), the coordinator's
// --max_sequences_per_shard included: it once counted a running gradient sum that one-sequence
// shards never keep.
TEST_F(CoordinatorTest, GetMemoryPlanForAJobHonoursTheShardCap) {
  // Two sequences a round; QUEUED, as the cpu worker is not eligible for it.
  v1::SubmitJobRequest cuda_only = Request();
  cuda_only.mutable_spec()->mutable_constraints()->add_device_kinds("cuda");
  ASSERT_GT(cuda_only.spec().tokens_per_round() / cuda_only.spec().sequence_length(), 1);
  absl::StatusOr<v1::Job> job = coordinator_->SubmitJob(cuda_only);
  ASSERT_TRUE(job.ok()) << job.status();
  auto gradient_bytes = [&](int64_t* bytes) {
    v1::GetMemoryPlanRequest for_job;
    for_job.set_worker_id(RegisterWorker());
    for_job.set_job_id(job->job_id());
    absl::StatusOr<v1::GetMemoryPlanResponse> plans = coordinator_->GetMemoryPlan(for_job);
    ASSERT_TRUE(plans.ok()) << plans.status();
    ASSERT_EQ(plans->plans_size(), 1);
    *bytes = plans->plans(0).chosen().prediction().gradient_bytes();
  };
  int64_t uncapped = 0, capped = 0;
  ASSERT_NO_FATAL_FAILURE(gradient_bytes(&uncapped));
  coordinator_.reset();
  CoordinatorOptions options;
  options.state_dir = state_dir_;
  options.registry.lost_after = absl::Hours(1);
  options.runner.max_sequences_per_shard = 1;
  absl::StatusOr<std::unique_ptr<Coordinator>> restarted = Coordinator::Create(options);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  coordinator_ = *std::move(restarted);
  ASSERT_NO_FATAL_FAILURE(gradient_bytes(&capped));
  EXPECT_GT(capped, 0);
  EXPECT_LT(capped, uncapped);  // no running gradient sum beside the call's own
}

// The submission's check that some live worker can run the job searches plans as the job's worker
// planner will: a local-steps job's inner optimizer (held beside the plan on every worker) counts,
// so a budget that fits the synchronous job refuses its local-steps variant at submission instead
// of accepting a job no worker can run.
TEST_F(CoordinatorTest, SubmissionCountsALocalStepsJobsInnerOptimizer) {
  // What the least plan needs (ErrorDetail.required_bytes of a refusal on a tiny worker).
  absl::StatusOr<v1::RegisterWorkerResponse> tiny =
      coordinator_->registry().Register(TestWorkerRequest(/*budget_bytes=*/4096), std::nullopt);
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  const absl::Status refused = coordinator_->SubmitJob(Request()).status();
  ASSERT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  const std::optional<v1::ErrorDetail> detail = rpc::ErrorDetailOf(refused);
  ASSERT_TRUE(detail.has_value());
  const int64_t least_peak = detail->required_bytes();
  ASSERT_GT(least_peak, 0);
  v1::DeregisterWorkerRequest leave;
  leave.set_worker_id(tiny->worker_id());
  leave.set_incarnation(tiny->incarnation());
  ASSERT_TRUE(coordinator_->registry().Deregister(leave).ok());

  // A budget whose usable 90% holds the least plan, with less than the inner AdamW's
  // 4 × parameter bytes to spare.
  const int64_t budget = static_cast<int64_t>(std::ceil(static_cast<double>(least_peak) / 0.9)) + 1024;
  ASSERT_TRUE(coordinator_->registry().Register(TestWorkerRequest(budget), std::nullopt).ok());
  EXPECT_TRUE(coordinator_->SubmitJob(Request()).ok());

  v1::SubmitJobRequest local = Request();
  local.mutable_spec()->set_local_steps(2);
  local.mutable_spec()->set_verify_fraction(0);
  const absl::Status local_refused = coordinator_->SubmitJob(local).status();
  EXPECT_EQ(local_refused.code(), absl::StatusCode::kResourceExhausted) << local_refused;
  EXPECT_THAT(std::string(local_refused.message()), HasSubstr("for the local steps' inner optimizer"));
}

TEST_F(CoordinatorTest, GetMemoryPlanPagesOverEveryLiveWorker) {
  std::set<std::string> registered;
  for (int i = 0; i < 3; ++i) registered.insert(RegisterWorker());
  v1::GetMemoryPlanRequest request;
  request.set_all_workers(true);
  request.set_page_size(2);
  *request.mutable_spec()->mutable_model() = TestJobSpec(dataset_id_).model();
  request.mutable_spec()->set_sequence_length(64);
  absl::StatusOr<v1::GetMemoryPlanResponse> first = coordinator_->GetMemoryPlan(request);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->plans_size(), 2);
  ASSERT_FALSE(first->next_page_token().empty());
  request.set_page_token(first->next_page_token());
  absl::StatusOr<v1::GetMemoryPlanResponse> second = coordinator_->GetMemoryPlan(request);
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_EQ(second->plans_size(), 1);
  EXPECT_TRUE(second->next_page_token().empty());
  std::set<std::string> planned;
  for (const auto* page : {&*first, &*second}) {
    for (const v1::MemoryPlan& plan : page->plans()) planned.insert(plan.worker_id());
  }
  EXPECT_EQ(planned, registered);
  request.set_page_token("workers:2");
  EXPECT_EQ(coordinator_->GetMemoryPlan(request).status().code(), absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace slimfit::server
