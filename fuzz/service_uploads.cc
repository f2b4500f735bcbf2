#include "fuzz/service_uploads.h"

#include <cstdio>
#include <cstdlib>

#include "base/files.h"
#include "base/sha256.h"
#include "fuzz/fuzz_support.h"
#include "performer/model_checkpoint.h"
#include "performer/performer_model.h"

namespace slimfit::fuzz {
namespace {

std::string Upload(const BeginUploadFunction& begin, const std::string& name, const std::string& content_type,
                   const std::string& bytes, v1::TokenEncoding encoding,
                   const std::optional<std::string>& separator) {
  v1::UploadMetadata metadata;
  metadata.set_name(name);
  metadata.set_content_type(content_type);
  metadata.set_total_bytes(static_cast<int64_t>(bytes.size()));
  metadata.set_sha256(base::Sha256Hex(bytes));
  metadata.set_token_encoding(encoding);
  if (separator.has_value()) metadata.set_document_separator(*separator);
  std::optional<v1::DatasetInfo> existing;
  absl::StatusOr<std::unique_ptr<server::UploadSink>> sink = begin(metadata, &existing);
  SLIMFIT_FUZZ_CHECK(sink.ok(), "seed upload ", name, ": ", sink.status().ToString());
  if (existing.has_value()) return existing->dataset_id();
  absl::Status written = (*sink)->Write(bytes);
  SLIMFIT_FUZZ_CHECK(written.ok(), "seed upload ", name, ": ", written.ToString());
  absl::StatusOr<v1::DatasetInfo> info = (*sink)->Finish();
  SLIMFIT_FUZZ_CHECK(info.ok(), "seed upload ", name, ": ", info.status().ToString());
  return info->dataset_id();
}

std::string TextCorpus() {
  std::string text;
  for (int i = 0; i < 40; ++i) {
    absl::StrAppend(&text, "Document ", i, ": the quick brown fox jumps over the lazy dog.\n\n");
  }
  return text;
}

std::string TokenCorpus() {
  std::string bytes;
  for (int i = 0; i < 2000; ++i) {
    const int id = i % 97 == 96 ? 0 : 1 + (i * 37) % 299;  // a 0 separator now and then
    bytes.push_back(static_cast<char>(id & 0xff));
    bytes.push_back(static_cast<char>(id >> 8));
  }
  return bytes;
}

}  // namespace

SeedUploads UploadSeeds(const BeginUploadFunction& begin, const std::string& uploads_dir) {
  SeedUploads uploads;
  const std::string text = TextCorpus();
  uploads.text_dataset_id =
      Upload(begin, "text.txt", "text/plain", text, v1::TOKEN_ENCODING_UNSPECIFIED, "\n\n");
  uploads.plain_dataset_id =
      Upload(begin, "plain.txt", "text/plain", text, v1::TOKEN_ENCODING_UNSPECIFIED, std::nullopt);
  uploads.tokens_dataset_id = Upload(begin, "tokens.u16", "application/x-slimfit-tokens", TokenCorpus(),
                                     v1::TOKEN_ENCODING_UINT16_LE, std::string(2, '\0'));

  performer::ModelConfig config;
  config.d_model = 8;
  config.layers = 1;
  config.heads = 2;
  config.d_ff = 16;
  absl::StatusOr<performer::PerformerModel> model =
      performer::PerformerModel::Create(config, performer::DType::kFloat32, at::kCPU, /*seed=*/3);
  SLIMFIT_FUZZ_CHECK(model.ok(), model.status().ToString());
  const std::string saved = ScratchPath("seed-checkpoint.safetensors");
  const absl::Status written = performer::SaveModel(saved, *model);
  SLIMFIT_FUZZ_CHECK(written.ok(), written.ToString());
  absl::StatusOr<std::string> bytes = base::ReadFileToString(saved);
  SLIMFIT_FUZZ_CHECK(bytes.ok(), bytes.status().ToString());
  uploads.checkpoint_id = Upload(begin, "model.safetensors", "application/x-safetensors", *bytes,
                                 v1::TOKEN_ENCODING_UNSPECIFIED, std::nullopt);
  uploads.checkpoint_path = absl::StrCat(uploads_dir, "/", uploads.checkpoint_id, ".safetensors");
  return uploads;
}

void PrintSeedUploads(const SeedUploads& uploads) {
  static bool printed = false;
  if (printed || std::getenv("SLIMFIT_FUZZ_PRINT_SEEDS") == nullptr) return;
  printed = true;
  std::fprintf(stderr, "seed uploads: text %s, plain %s, tokens %s, checkpoint %s\n",
               uploads.text_dataset_id.c_str(), uploads.plain_dataset_id.c_str(),
               uploads.tokens_dataset_id.c_str(), uploads.checkpoint_id.c_str());
}

}  // namespace slimfit::fuzz
