#include "server/gradient_stream.h"

namespace slimfit::server {

GradientStream ReadGradientStream(grpc::ClientReaderInterface<v1::ComputeGradientResponse>* reader,
                                  grpc::ClientContext* context, performer::TensorAssembler* assembler,
                                  bool evaluate_only, const std::function<void()>& before_first_chunk) {
  GradientStream stream;
  bool first_chunk = true;
  v1::ComputeGradientResponse response;
  while (reader->Read(&response)) {
    stream.bytes += static_cast<int64_t>(response.ByteSizeLong());
    if (!stream.error.ok()) continue;
    if (response.has_chunk()) {
      if (evaluate_only || stream.summary.has_value()) {
        stream.error = absl::InvalidArgumentError("unexpected gradient chunk");
      } else {
        if (first_chunk && before_first_chunk) before_first_chunk();
        first_chunk = false;
        stream.error = assembler->Add(response.chunk());
      }
      if (!stream.error.ok()) context->TryCancel();
    } else if (response.has_summary()) {
      stream.summary = response.summary();
    }
  }
  return stream;
}

}  // namespace slimfit::server
