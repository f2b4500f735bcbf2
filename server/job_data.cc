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
  if (sequence_length < 2) {
    return absl::InvalidArgumentError(absl::StrCat("spec.sequence_length: must be ≥ 2, got ", sequence_length));
  }
  if (tokens_per_round < sequence_length) {
    return absl::InvalidArgumentError(absl::StrCat("spec.tokens_per_round: ", tokens_per_round,
                                                   " is less than one sequence of ", sequence_length, " tokens"));
  }
  if (tokens_per_round / sequence_length > kMaxSequencesPerRound) {
    return absl::InvalidArgumentError(absl::StrCat("spec.tokens_per_round: ", tokens_per_round, " tokens is ",
                                                   tokens_per_round / sequence_length, " sequences of ",
                                                   sequence_length, "; a round takes at most ",
                                                   kMaxSequencesPerRound));
  }
  if (!(held_out_fraction >= 0 && held_out_fraction < 0.5)) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.held_out_fraction: must be in [0, 0.5), got ", held_out_fraction));
  }
  for (size_t i = 0; i < stream.tokens.size(); ++i) {
    if (stream.tokens[i] < 0 || stream.tokens[i] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("spec.dataset_ids: dataset token ", i, " = ", stream.tokens[i],
                                                     " is outside the model's vocabulary of ", vocab));
    }
  }
  JobData data;
  const int64_t total = static_cast<int64_t>(stream.tokens.size());
  const int64_t sequences = total / sequence_length;
  int64_t held_out = static_cast<int64_t>(std::floor(static_cast<double>(sequences) * held_out_fraction));
  if (held_out_fraction > 0 && held_out == 0 && sequences >= 2) held_out = 1;
  const int64_t training = sequences - held_out;
  if (training < 1) {
    const int64_t training_tokens = total - held_out * sequence_length;
    return absl::FailedPreconditionError(absl::StrCat("datasets hold ", training_tokens,
                                                      " training tokens; sequence_length is ", sequence_length));
  }
  data.stream_ = std::move(stream);
  if (data.stream_.doc_starts.empty() || data.stream_.doc_starts.front() != 0) {
    data.stream_.doc_starts.insert(data.stream_.doc_starts.begin(), 0);
  }
  data.sequence_length_ = sequence_length;
  data.sequences_per_round_ = tokens_per_round / sequence_length;
  data.training_sequences_ = training;
  data.held_out_sequences_ = held_out;
  data.seed_ = seed;
  for (int64_t s = 0; s < training + held_out; ++s) {
    data.max_documents_ = std::max(data.max_documents_, data.DocumentsIn({s * sequence_length, sequence_length}));
  }
  return data;
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
    const int64_t index = order[position % training_sequences_];
    sequences.push_back({index * sequence_length_, sequence_length_});
  }
  return sequences;
}

std::vector<SequenceRef> JobData::HeldOutSequences() const {
  std::vector<SequenceRef> sequences;
  for (int64_t s = 0; s < held_out_sequences_; ++s) {
    sequences.push_back({(training_sequences_ + s) * sequence_length_, sequence_length_});
  }
  return sequences;
}

int64_t JobData::DocumentsIn(const SequenceRef& sequence) const {
  const auto& starts = stream_.doc_starts;
  auto first = std::upper_bound(starts.begin(), starts.end(), sequence.begin);
  auto last = std::lower_bound(starts.begin(), starts.end(), sequence.begin + sequence.length);
  return 1 + std::max<int64_t>(0, last - first);
}

void JobData::Gather(const std::vector<SequenceRef>& sequences, std::vector<int64_t>* tokens,
                     std::vector<int64_t>* doc_starts) const {
  tokens->clear();
  doc_starts->clear();
  const auto& starts = stream_.doc_starts;
  for (const SequenceRef& sequence : sequences) {
    const int64_t base = static_cast<int64_t>(tokens->size());
    doc_starts->push_back(base);
    auto it = std::upper_bound(starts.begin(), starts.end(), sequence.begin);
    for (; it != starts.end() && *it < sequence.begin + sequence.length; ++it) {
      doc_starts->push_back(base + (*it - sequence.begin));
    }
    tokens->insert(tokens->end(), stream_.tokens.begin() + sequence.begin,
                   stream_.tokens.begin() + sequence.begin + sequence.length);
  }
}

int64_t JobData::PredictedTokens(const std::vector<SequenceRef>& sequences) const {
  int64_t predicted = 0;
  for (const SequenceRef& sequence : sequences) predicted += sequence.length - DocumentsIn(sequence);
  return predicted;
}

}  // namespace slimfit::server
