// Test-only: a small job a coordinator accepts, for tests of the coordinator, its service and its
// job runner — the tiny model they train (as the wire and the engine describe it), a text corpus to upload
// (40 documents, about 2,400 bytes, "\n\n" between them) and the spec of a tiny fresh byte-level model (vocab
// 256, d_model 8, one layer: 3,856 parameters) trained on it for one round of two 16-token sequences.
//
// Example:
//   const std::string corpus = TestCorpus();
//   ... upload TestCorpusMetadata(corpus), then the bytes, get a dataset id ...
//   absl::StatusOr<v1::Job> job = coordinator->SubmitJob(request with TestJobSpec(dataset_id));
#ifndef SLIMFIT_SERVER_TEST_JOB_SPEC_H_
#define SLIMFIT_SERVER_TEST_JOB_SPEC_H_

#include <string>

#include "absl/strings/str_cat.h"
#include "base/sha256.h"
#include "performer/model_config.h"
#include "proto/slimfit.pb.h"

namespace slimfit::server {

inline std::string TestCorpus() {
  std::string text;
  for (int i = 0; i < 40; ++i) {
    absl::StrAppend(&text, "Document ", i, ": the quick brown fox jumps over the lazy dog.\n\n");
  }
  return text;
}

// Metadata of `corpus` uploaded as a text/plain dataset with "\n\n" between documents.
inline v1::UploadMetadata TestCorpusMetadata(const std::string& corpus) {
  v1::UploadMetadata metadata;
  metadata.set_name("corpus.txt");
  metadata.set_content_type("text/plain");
  metadata.set_total_bytes(static_cast<int64_t>(corpus.size()));
  metadata.set_sha256(base::Sha256Hex(corpus));
  metadata.set_document_separator("\n\n");
  return metadata;
}

// The tiny byte-level model: vocab 256, d_model 8, one layer of 2 heads, d_ff 16.
inline performer::ModelConfig TestModelConfig() {
  performer::ModelConfig config;
  config.vocab = 256;
  config.d_model = 8;
  config.layers = 1;
  config.heads = 2;
  config.d_ff = 16;
  return config;
}

// TestModelConfig as a job spec names it.
inline v1::ModelConfig TestModelConfigProto() {
  const performer::ModelConfig config = TestModelConfig();
  v1::ModelConfig proto;
  proto.set_vocab(config.vocab);
  proto.set_d_model(config.d_model);
  proto.set_layers(config.layers);
  proto.set_heads(config.heads);
  proto.set_d_ff(config.d_ff);
  return proto;
}

inline v1::JobSpec TestJobSpec(const std::string& dataset_id) {
  v1::JobSpec spec;
  *spec.mutable_model()->mutable_config() = TestModelConfigProto();
  spec.add_dataset_ids(dataset_id);
  spec.set_sequence_length(16);
  spec.set_tokens_per_round(32);
  spec.set_rounds(1);
  spec.set_seed(7);
  spec.mutable_optimizer()->mutable_adamw();
  spec.mutable_optimizer()->set_learning_rate(1e-3);
  return spec;
}

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_TEST_JOB_SPEC_H_
