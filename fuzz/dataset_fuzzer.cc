// Fuzz target: dataset uploads as the coordinator parses them, rpc::ParseDataset (text or
// pre-tokenised ids, documents cut at a separator), and the job data cut from the result
// (server/job_data.h).
//
// Input: byte 0 chooses the content type (bits 0-1: text/plain, application/x-slimfit-tokens or
// an unknown type) and the token encoding (bits 2-4: its enum value, unknown ones included);
// byte 1 the separator's length (0: none, else 1..8 bytes, which follow); the rest is the upload.
// Invariants of an accepted upload:
//   - document starts begin at 0, increase strictly and lie inside the token stream; a token
//     fits its encoding;
//   - the documents joined by one separator (no leading or trailing one) parse to the same stream;
//   - JobData::Create over it with a small L refuses with INVALID_ARGUMENT or
//     FAILED_PRECONDITION, or gives round and held-out sequences inside the stream whose gathered
//     document starts are valid.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "data_formats/dataset_format.h"
#include "data_formats/token_codec.h"
#include "fuzz/fuzz_support.h"
#include "server/job_data.h"

namespace slimfit::fuzz {
namespace {

void CheckJobData(const rpc::TokenStream& stream, const uint8_t* data, size_t size) {
  // Sequence length, tokens per round and held-out share from the input's last bytes.
  const int64_t length = 2 + (size > 0 ? data[size - 1] % 31 : 0);
  const int64_t per_round = length * (1 + (size > 1 ? data[size - 2] % 4 : 0));
  const double held_out = size > 2 ? (data[size - 3] % 5) / 10.0 : 0;  // 0, 0.1, ..., 0.4
  absl::StatusOr<server::JobData> job =
      server::JobData::Create(stream, 1 << 16, length, per_round, held_out, 7);
  if (!job.ok()) {
    SLIMFIT_FUZZ_CHECK(absl::IsInvalidArgument(job.status()) || absl::IsFailedPrecondition(job.status()),
                       job.status().ToString());
    return;
  }
  const int64_t total = static_cast<int64_t>(stream.tokens.size());
  SLIMFIT_FUZZ_CHECK(job->training_sequences() >= 1, "no training sequence");
  SLIMFIT_FUZZ_CHECK((job->training_sequences() + job->held_out_sequences()) * length <= total,
                     "sequences past the stream");
  for (const std::vector<server::SequenceRef>& sequences :
       {job->RoundSequences(1), job->RoundSequences(3), job->HeldOutSequences()}) {
    std::vector<int64_t> tokens;
    std::vector<int64_t> starts;
    job->Gather(sequences, &tokens, &starts);
    SLIMFIT_FUZZ_CHECK(static_cast<int64_t>(tokens.size()) == static_cast<int64_t>(sequences.size()) * length,
                       "gathered ", tokens.size(), " tokens of ", sequences.size(), " sequences");
    for (size_t i = 0; i < starts.size(); ++i) {
      SLIMFIT_FUZZ_CHECK(starts[i] >= 0 && starts[i] < static_cast<int64_t>(tokens.size()) &&
                             (i == 0 || starts[i] > starts[i - 1]),
                         "gathered document start ", i, " = ", starts[i]);
    }
    SLIMFIT_FUZZ_CHECK(job->PredictedTokens(sequences) <= static_cast<int64_t>(tokens.size()),
                       "predicted tokens");
  }
}

}  // namespace
}  // namespace slimfit::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace slimfit;  // NOLINT
  if (size < 2) return 0;
  static constexpr const char* kTypes[] = {"text/plain", "application/x-slimfit-tokens",
                                           "application/x-slimfit-tokens", "application/json"};
  const std::string content_type = kTypes[data[0] & 3];
  const auto encoding = static_cast<v1::TokenEncoding>((data[0] >> 2) & 7);
  const size_t separator_length = data[1] % 9;
  if (size < 2 + separator_length) return 0;
  std::optional<std::string> separator;
  if (separator_length > 0) separator.emplace(reinterpret_cast<const char*>(data + 2), separator_length);
  const absl::string_view bytes(reinterpret_cast<const char*>(data + 2 + separator_length),
                                size - 2 - separator_length);

  absl::StatusOr<rpc::TokenStream> stream = rpc::ParseDataset(bytes, content_type, encoding, separator);
  if (!stream.ok()) {
    SLIMFIT_FUZZ_CHECK(absl::IsInvalidArgument(stream.status()), stream.status().ToString());
    return 0;
  }
  const int width = content_type == "text/plain" ? 1 : rpc::TokenWidth(encoding);
  SLIMFIT_FUZZ_CHECK(width > 0, "accepted an unknown encoding ", encoding);
  const int64_t count = static_cast<int64_t>(stream->tokens.size());
  SLIMFIT_FUZZ_CHECK(count <= static_cast<int64_t>(bytes.size()) / width, count, " tokens from ",
                     bytes.size(), " bytes");
  SLIMFIT_FUZZ_CHECK(stream->doc_starts.empty() == (count == 0), count, " tokens, ",
                     stream->doc_starts.size(), " documents");
  for (size_t i = 0; i < stream->doc_starts.size(); ++i) {
    const int64_t start = stream->doc_starts[i];
    SLIMFIT_FUZZ_CHECK(i == 0 ? start == 0 : start > stream->doc_starts[i - 1], "document start ", i, " = ",
                       start);
    SLIMFIT_FUZZ_CHECK(start < count, "document start ", i, " = ", start, " of ", count, " tokens");
  }
  const uint64_t limit = width == 4 ? uint64_t{1} << 32 : uint64_t{1} << (8 * width);
  for (int32_t token : stream->tokens) {
    SLIMFIT_FUZZ_CHECK(static_cast<uint32_t>(token) < limit, "token ", token, " does not fit ", width,
                       " bytes");
  }

  SLIMFIT_FUZZ_CHECK(separator.has_value() || stream->doc_starts.size() <= 1, stream->doc_starts.size(),
                     " documents without a separator");
  // Documents joined by one separator parse to the same stream.
  std::string joined;
  for (size_t d = 0; d < stream->doc_starts.size(); ++d) {
    if (d > 0) joined += *separator;
    const int64_t end = d + 1 < stream->doc_starts.size() ? stream->doc_starts[d + 1] : count;
    for (int64_t t = stream->doc_starts[d]; t < end; ++t) {
      const auto value = static_cast<uint32_t>(stream->tokens[t]);
      for (int b = 0; b < width; ++b) joined.push_back(static_cast<char>((value >> (8 * b)) & 0xff));
    }
  }
  absl::StatusOr<rpc::TokenStream> again = rpc::ParseDataset(joined, content_type, encoding, separator);
  SLIMFIT_FUZZ_CHECK(again.ok() && again->tokens == stream->tokens && again->doc_starts == stream->doc_starts,
                     "re-joined documents parse differently");

  fuzz::CheckJobData(*stream, data, size);
  return 0;
}
