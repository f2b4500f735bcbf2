// The token data of a job: its uploaded datasets parsed into one packed document stream, and the
// datasets that stay on workers (JobSpec.local_datasets) known only by their layout — each its own
// stream, cut into sequences of L tokens (padding-free: a sequence may span documents; positions
// and prefix state restart at every document start and at every sequence start), the last whole
// sequences of each held out for evaluation, and a deterministic, seeded order of training
// sequences per round.
//
//   JobData        the uploaded stream (parsed by rpc::ParseDataset) and the local datasets'
//                  layouts → training / held-out sequences, round batches.
//
// Sources: 0 is the uploaded stream (no sequences when the job names no uploads), k ≥ 1 the k-th
// local dataset. Training sequences are numbered source by source (0 first), and round r (1-based)
// trains on sequences_per_round = floor(tokens_per_round / L) of them: positions (r−1)·S … r·S−1 of
// an endless sequence of epochs, each epoch a Fisher–Yates permutation of all training sequences
// drawn from a generator seeded with (seed, epoch). The same spec, data and seed give the same
// batches on every machine; a job of uploads alone batches as it did before local datasets existed.
//
// Thread safety: immutable after construction; safe to share.
#ifndef SLIMFIT_SERVER_JOB_DATA_H_
#define SLIMFIT_SERVER_JOB_DATA_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data_formats/dataset_format.h"
#include "proto/slimfit.pb.h"

namespace slimfit::server {

// One sequence: `length` tokens of its source's stream from `begin`.
struct SequenceRef {
  int64_t begin = 0;
  int64_t length = 0;
  int source = 0;  // 0: the uploaded stream; k ≥ 1: JobData::local_sources()[k − 1]
};

// A dataset that stays on the workers that hold it: what the coordinator knows of it.
struct LocalSource {
  std::string sha256;  // LocalDataset.sha256: how requests and workers name it
  std::string name;    // the name a worker announced it under (messages only)
  // Documents in each whole sequence of L tokens (LocalDataLayout.documents), ≥ 1 each.
  std::vector<int64_t> documents;
};

class JobData {
 public:
  // FAILED_PRECONDITION "datasets hold N training tokens; sequence_length is L" when fewer than one
  // training sequence remains after the held-out split; INVALID_ARGUMENT naming the field for a bad
  // L, tokens per round or fraction, or a token ≥ vocab ("dataset token 17 = 300 ≥ vocab 256").
  static absl::StatusOr<JobData> Create(rpc::TokenStream stream, int64_t vocab, int64_t sequence_length,
                                        int64_t tokens_per_round, double held_out_fraction, uint64_t seed);
  // With local datasets too (their tokens checked against vocab by whoever resolved them); the
  // stream may then be empty. FAILED_PRECONDITION "spec.local_datasets[i]: ..." for one without a
  // training sequence after its held-out split, as for the uploaded stream.
  static absl::StatusOr<JobData> Create(rpc::TokenStream stream, std::vector<LocalSource> local,
                                        int64_t vocab, int64_t sequence_length, int64_t tokens_per_round,
                                        double held_out_fraction, uint64_t seed);

  int64_t sequence_length() const { return sequence_length_; }
  int64_t sequences_per_round() const { return sequences_per_round_; }
  int64_t training_sequences() const { return training_sequences_; }
  int64_t held_out_sequences() const { return held_out_sequences_; }
  int64_t training_tokens() const { return training_sequences_ * sequence_length_; }
  int64_t held_out_tokens() const { return held_out_sequences_ * sequence_length_; }

  // The training sequences of round `round` (≥ 1), in batch order.
  std::vector<SequenceRef> RoundSequences(int64_t round) const;
  // The held-out sequences.
  std::vector<SequenceRef> HeldOutSequences() const;

  // The tokens of consecutive `sequences` concatenated, and the document starts within them
  // (offsets into the concatenation; every sequence start included). REQUIRES: every sequence is
  // of source 0 (the coordinator holds no local dataset's tokens).
  void Gather(const std::vector<SequenceRef>& sequences, std::vector<int64_t>* tokens,
              std::vector<int64_t>* doc_starts) const;

  // Predicted tokens of `sequences`: every token but the first of each document and sequence.
  int64_t PredictedTokens(const std::vector<SequenceRef>& sequences) const;

  // The most documents any training or held-out sequence holds (what the memory model assumes).
  int64_t max_documents_per_sequence() const { return max_documents_; }

  // Documents in one sequence (a sequence start counts as a document start).
  int64_t DocumentsIn(const SequenceRef& sequence) const;

  // The most sequences one round may take (a round is one optimizer step; larger ones are refused).
  static constexpr int64_t kMaxSequencesPerRound = int64_t{1} << 20;

  const rpc::TokenStream& stream() const { return stream_; }
  const std::vector<LocalSource>& local_sources() const { return local_; }
  // The local dataset a sequence of source ≥ 1 comes from; nullptr for the uploaded stream.
  const LocalSource* LocalSourceOf(const SequenceRef& sequence) const {
    return sequence.source > 0 ? &local_[static_cast<size_t>(sequence.source - 1)] : nullptr;
  }

 private:
  JobData() = default;
  std::vector<int64_t> EpochOrder(int64_t epoch) const;
  // Training sequence g (numbered source by source) as a reference.
  SequenceRef TrainingSequence(int64_t g) const;

  rpc::TokenStream stream_;
  std::vector<LocalSource> local_;
  // Per source (0: uploaded): whole sequences, and the first held-out one (= training sequences).
  std::vector<int64_t> source_sequences_;
  std::vector<int64_t> source_training_;
  std::vector<int64_t> training_before_;  // training sequences of the sources before each
  int64_t sequence_length_ = 0;
  int64_t sequences_per_round_ = 0;
  int64_t training_sequences_ = 0;
  int64_t held_out_sequences_ = 0;
  int64_t max_documents_ = 1;
  uint64_t seed_ = 0;
};

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_JOB_DATA_H_
