#include "client/job_history.h"

#include <memory>

namespace slimfit::client {

absl::StatusOr<std::vector<v1::JobEvent>> ReadJobHistory(const CoordinatorClient& client,
                                                         const std::string& job_id) {
  std::unique_ptr<grpc::ClientContext> context = client.StreamContext();
  v1::WatchJobRequest request;
  request.set_job_id(job_id);
  request.set_from_start(true);
  std::unique_ptr<grpc::ClientReaderInterface<v1::JobEvent>> reader =
      client.stub().WatchJob(context.get(), request);
  std::vector<v1::JobEvent> history;
  int64_t last = -1;  // the snapshot's sequence, once seen
  v1::JobEvent event;
  bool complete = false;
  while (reader->Read(&event)) {
    if (history.empty()) {
      if (!event.has_snapshot()) {
        context->TryCancel();
        reader->Finish();
        return absl::InternalError("WatchJob: the stream did not start with a snapshot");
      }
      last = event.sequence();
      history.push_back(event);
      if (last > 0) continue;  // the events it includes follow
      complete = true;
      break;
    }
    if (event.sequence() <= last) history.push_back(event);
    if (event.sequence() >= last) {
      complete = true;
      break;
    }
  }
  if (complete) context->TryCancel();
  const grpc::Status status = reader->Finish();
  if (complete) return history;
  if (!status.ok()) return client.Convert(status, "WatchJob", context.get());
  if (history.empty()) return absl::InternalError("WatchJob: the stream ended without a snapshot");
  return history;  // a finished job's stream ends by itself after its last event
}

}  // namespace slimfit::client
