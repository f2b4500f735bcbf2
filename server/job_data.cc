#include "server/job_data.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace slimfit::server {

absl::StatusOr<JobData> JobData::Create(rpc::TokenStream stream, int64_t vocab, int64_t sequence_length,
                                        int64_t tokens_per_round, double held_out_fraction, uint64_t seed) {
  return Create(std::move(stream), {}, vocab, sequence_length, tokens_per_round, held_out_fraction, seed);
}

absl::StatusOr<JobData> JobData::Create(rpc::TokenStream stream, std::vector<LocalSource> local,
                                        int64_t vocab, int64_t sequence_length, int64_t tokens_per_round,
                                        double held_out_fraction, uint64_t seed) {
  if (sequence_length < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.sequence_length: must be ≥ 2, got ", sequence_length));
  }
  if (tokens_per_round < sequence_length) {
    return absl::InvalidArgumentError(absl::StrCat("spec.tokens_per_round: ", tokens_per_round,
                                                   " is less than one sequence of ", sequence_length,
                                                   " tokens"));
  }
  if (tokens_per_round / sequence_length > kMaxSequencesPerRound) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.tokens_per_round: ", tokens_per_round, " tokens is ", tokens_per_round / sequence_length,
        " sequences of ", sequence_length, "; a round takes at most ", kMaxSequencesPerRound));
  }
  if (!(held_out_fraction >= 0 && held_out_fraction < 0.5)) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.held_out_fraction: must be in [0, 0.5), got ", held_out_fraction));
  }
  for (size_t i = 0; i < stream.tokens.size(); ++i) {
    if (stream.tokens[i] < 0 || stream.tokens[i] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("spec.dataset_ids: dataset token ", i, " = ",
                                                     stream.tokens[i],
                                                     " is outside the model's vocabulary of ", vocab));
    }
  }
  // The same held-out rule for every source: the last floor(n · fraction) whole sequences, at
  // least one when a fraction is asked for and the source has two.
  auto held_out_of = [&](int64_t sequences) {
    int64_t held_out = static_cast<int64_t>(std::floor(static_cast<double>(sequences) * held_out_fraction));
    if (held_out_fraction > 0 && held_out == 0 && sequences >= 2) held_out = 1;
    return held_out;
  };
  JobData data;
  const bool uploads = !stream.tokens.empty() || local.empty();
  const int64_t total = static_cast<int64_t>(stream.tokens.size());
  const int64_t sequences = total / sequence_length;
  const int64_t held_out = held_out_of(sequences);
  if (uploads && sequences - held_out < 1) {
    const int64_t training_tokens = total - held_out * sequence_length;
    return absl::FailedPreconditionError(absl::StrCat(
        "datasets hold ", training_tokens, " training tokens; sequence_length is ", sequence_length));
  }
  data.source_sequences_.push_back(sequences);
  data.source_training_.push_back(sequences - held_out);
  for (size_t k = 0; k < local.size(); ++k) {
    const int64_t n = static_cast<int64_t>(local[k].documents.size());
    const int64_t local_held_out = held_out_of(n);
    if (n - local_held_out < 1) {
      return absl::FailedPreconditionError(absl::StrCat(
          "spec.local_datasets[", k, "]: local dataset ", local[k].name, " holds ", n, " whole sequences of ",
          sequence_length, " tokens, ", local_held_out, " of them held out: no training sequence is left"));
    }
    data.source_sequences_.push_back(n);
    data.source_training_.push_back(n - local_held_out);
  }
  data.stream_ = std::move(stream);
  if (data.stream_.doc_starts.empty() || data.stream_.doc_starts.front() != 0) {
    data.stream_.doc_starts.insert(data.stream_.doc_starts.begin(), 0);
  }
  data.local_ = std::move(local);
  data.sequence_length_ = sequence_length;
  data.sequences_per_round_ = tokens_per_round / sequence_length;
  data.seed_ = seed;
  for (size_t source = 0; source < data.source_sequences_.size(); ++source) {
    data.training_before_.push_back(data.training_sequences_);
    data.training_sequences_ += data.source_training_[source];
    data.held_out_sequences_ += data.source_sequences_[source] - data.source_training_[source];
  }
  for (int64_t s = 0; s < sequences; ++s) {
    data.max_documents_ =
        std::max(data.max_documents_, data.DocumentsIn({s * sequence_length, sequence_length}));
  }
  for (const LocalSource& source : data.local_) {
    for (const int64_t documents : source.documents)
      data.max_documents_ = std::max(data.max_documents_, documents);
  }
  return data;
}

SequenceRef JobData::TrainingSequence(int64_t g) const {
  // The last source whose training sequences start at or before g (sources without any are
  // skipped: their start equals the next one's).
  size_t source = static_cast<size_t>(std::upper_bound(training_before_.begin(), training_before_.end(), g) -
                                      training_before_.begin() - 1);
  while (source_training_[source] == 0) ++source;
  const int64_t index = g - training_before_[source];
  return {index * sequence_length_, sequence_length_, static_cast<int>(source)};
}

std::vector<int64_t> JobData::EpochOrder(int64_t epoch) const {
  std::vector<int64_t> order(training_sequences_);
  for (int64_t i = 0; i < training_sequences_; ++i) order[i] = i;
  std::mt19937_64 generator(seed_ * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch) + 1);
  // Fisher–Yates with an explicit draw, so the order does not depend on the standard library.
  for (int64_t i = training_sequences_ - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(generator() % static_cast<uint64_t>(i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

std::vector<SequenceRef> JobData::RoundSequences(int64_t round) const {
  std::vector<SequenceRef> sequences;
  sequences.reserve(sequences_per_round_);
  int64_t cached_epoch = -1;
  std::vector<int64_t> order;
  for (int64_t j = 0; j < sequences_per_round_; ++j) {
    const int64_t position = (round - 1) * sequences_per_round_ + j;
    const int64_t epoch = position / training_sequences_;
    if (epoch != cached_epoch) {
      order = EpochOrder(epoch);
      cached_epoch = epoch;
    }
    sequences.push_back(TrainingSequence(order[position % training_sequences_]));
  }
  return sequences;
}

std::vector<SequenceRef> JobData::HeldOutSequences() const {
  std::vector<SequenceRef> sequences;
  for (size_t source = 0; source < source_sequences_.size(); ++source) {
    for (int64_t s = source_training_[source]; s < source_sequences_[source]; ++s) {
      sequences.push_back({s * sequence_length_, sequence_length_, static_cast<int>(source)});
    }
  }
  return sequences;
}

int64_t JobData::DocumentsIn(const SequenceRef& sequence) const {
  if (const LocalSource* local = LocalSourceOf(sequence)) {
    return local->documents[static_cast<size_t>(sequence.begin / sequence_length_)];
  }
  return rpc::DocumentsInRange(stream_, sequence.begin, sequence.length);
}

void JobData::Gather(const std::vector<SequenceRef>& sequences, std::vector<int64_t>* tokens,
                     std::vector<int64_t>* doc_starts) const {
  tokens->clear();
  doc_starts->clear();
  for (const SequenceRef& sequence : sequences) {
    rpc::AppendRange(stream_, sequence.begin, sequence.length, tokens, doc_starts);
  }
}

int64_t JobData::PredictedTokens(const std::vector<SequenceRef>& sequences) const {
  int64_t predicted = 0;
  for (const SequenceRef& sequence : sequences) predicted += sequence.length - DocumentsIn(sequence);
  return predicted;
}

}  // namespace slimfit::server
