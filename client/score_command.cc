#include "client/score_command.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/files.h"
#include "base/flags.h"
#include "base/human_format.h"
#include "client/dataset_upload.h"
#include "client/local_model.h"
#include "data_formats/dataset_format.h"
#include "nlohmann/json.hpp"
#include "performer/packed_batch.h"
#include "performer/recurrent_model.h"

namespace slimfit::client {
namespace {

struct ScoreOptions {
  std::string data;
  std::string data_type = "text";
  std::string separator;
  int64_t sequence_length = 0;
  int64_t stretch = 512;
  bool json = false;
};

// The stream as the batches that are scored: one, or one per sequence of L tokens (document starts
// inside a sequence kept, and a start at every sequence's beginning).
std::vector<performer::PackedBatch> Batches(const rpc::TokenStream& stream, int64_t sequence_length) {
  const int64_t size = static_cast<int64_t>(stream.tokens.size());
  const int64_t length = sequence_length > 0 ? sequence_length : size;
  std::vector<performer::PackedBatch> batches;
  size_t next_start = 0;
  for (int64_t begin = 0; begin < size; begin += length) {
    const int64_t end = std::min(size, begin + length);
    performer::PackedBatch batch;
    batch.tokens.assign(stream.tokens.begin() + begin, stream.tokens.begin() + end);
    batch.doc_starts.push_back(0);
    while (next_start < stream.doc_starts.size() && stream.doc_starts[next_start] < end) {
      if (stream.doc_starts[next_start] > begin)
        batch.doc_starts.push_back(stream.doc_starts[next_start] - begin);
      ++next_start;
    }
    batches.push_back(std::move(batch));
  }
  return batches;
}

}  // namespace

absl::Status RunScoreCommand(absl::Span<const std::string> args, std::ostream& out) {
  ScoreOptions options;
  base::FlagSet flags(
      "score", "slimfit score --model=FILE --data=FILE [--separator=S] [flags]",
      "How well a model predicts a file: its cross-entropy in bits per byte (bits per token for\n"
      "a pre-tokenised file), run forward in stretches of --stretch tokens that carry the\n"
      "Performer's prefix-sum state, so memory does not grow with the file.");
  LocalModelFlags model_flags(flags);
  flags.String("data", &options.data, "the file to score", base::FlagSet::kRequired);
  flags.String("data_type", &options.data_type,
               "text (every byte a token), or uint8, uint16, uint32 (pre-tokenised little-endian ids)");
  flags.String(
      "separator", &options.separator,
      "bytes between documents, with C escapes, e.g. '\\n\\n' (default: none, the file is one document)",
      base::FlagSet::kOptionalNoDefault);
  flags.Int("sequence_length", &options.sequence_length,
            "0: each document whole; L: cut the stream into sequences of L tokens as a training job does");
  flags.Int("stretch", &options.stretch, "tokens run at once (memory grows with it, not with the file)");
  flags.Bool("json", &options.json, "print JSON instead of a line");
  if (absl::Status s = flags.Parse(args); !s.ok()) return s;
  if (flags.help_requested()) {
    out << flags.Help();
    return absl::OkStatus();
  }
  if (options.sequence_length < 0 || options.sequence_length == 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--sequence_length=", options.sequence_length, ": expected 0 (whole documents) or ≥ 2"));
  }
  if (options.stretch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--stretch=", options.stretch, ": expected 1 or more"));
  }
  absl::StatusOr<UploadSource> source = DatasetSource(options.data, options.data_type, options.separator);
  if (!source.ok()) return source.status();
  absl::StatusOr<std::string> bytes = base::ReadFileToString(options.data);
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<rpc::TokenStream> stream =
      rpc::ParseDataset(*bytes, source->content_type, source->token_encoding, source->document_separator);
  if (!stream.ok())
    return absl::InvalidArgumentError(absl::StrCat(options.data, ": ", stream.status().message()));
  if (stream->tokens.empty())
    return absl::InvalidArgumentError(absl::StrCat(options.data, ": holds no tokens"));

  absl::StatusOr<LocalModel> loaded = model_flags.Load();
  if (!loaded.ok()) return loaded.status();
  const int64_t vocab = loaded->model.config().vocab;
  for (size_t i = 0; i < stream->tokens.size(); ++i) {
    if (stream->tokens[i] < 0 || stream->tokens[i] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat(options.data, ": token ", i, " = ",
                                                     static_cast<uint32_t>(stream->tokens[i]),
                                                     " is outside the model's vocabulary [0, ", vocab, ")"));
    }
  }
  performer::ForwardOptions forward;
  forward.stretch = options.stretch;
  forward.feature_seed = loaded->feature_seed;
  performer::ScoreResult total;
  for (const performer::PackedBatch& batch : Batches(*stream, options.sequence_length)) {
    if (performer::PredictedTokenCount(batch) == 0) continue;
    absl::StatusOr<performer::ScoreResult> score = performer::ScoreTokens(loaded->model, batch, forward);
    if (!score.ok())
      return absl::Status(score.status().code(), absl::StrCat(options.data, ": ", score.status().message()));
    total.loss_sum += score->loss_sum;
    total.predicted_tokens += score->predicted_tokens;
    total.seconds += score->seconds;
  }
  if (total.predicted_tokens == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.data, ": predicts nothing (every document or sequence is one token long)"));
  }
  const bool text = source->content_type == kTextContentType;
  if (options.json) {
    nlohmann::ordered_json json;
    json["model"] = loaded->path;
    json["data"] = options.data;
    json["documents"] = stream->doc_starts.size();
    json["tokens"] = stream->tokens.size();
    json["predicted_tokens"] = total.predicted_tokens;
    json["loss_sum_nats"] = total.loss_sum;
    json["nats_per_token"] = total.nats_per_token();
    json["bits_per_token"] = total.bits_per_token();
    if (text) {
      json["bits_per_byte"] = total.bits_per_token();
    } else {
      json["bits_per_byte"] = nullptr;
    }
    json["sequence_length"] = options.sequence_length;
    json["stretch"] = options.stretch;
    json["seconds"] = total.seconds;
    out << json.dump(2) << "\n";
    return absl::OkStatus();
  }
  out << absl::StrFormat("%s: %.4f bits per %s over %s predicted %s (%.4f nats; %.1f s)\n", options.data,
                         total.bits_per_token(), text ? "byte" : "token",
                         base::FormatCount(total.predicted_tokens), text ? "bytes" : "tokens",
                         total.nats_per_token(), total.seconds);
  return absl::OkStatus();
}

}  // namespace slimfit::client
