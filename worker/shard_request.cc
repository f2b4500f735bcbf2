#include "worker/shard_request.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/sha256.h"
#include "data_formats/token_codec.h"
#include "performer/trainer.h"
#include "planner/plan_proto.h"
#include "planner/plan_search.h"
#include "rpc/rpc_util.h"
#include "wire/engine_settings.h"

namespace slimfit::worker {
namespace {

// `status` (an INVALID_ARGUMENT whose message already names the field) with ErrorDetail.field.
absl::Status WithField(const absl::Status& status, absl::string_view field) {
  v1::ErrorDetail detail;
  detail.set_field(std::string(field));
  return rpc::AttachErrorDetail(absl::InvalidArgumentError(status.message()), detail);
}

// The request's local_data entries: digests, indices and positions. `token_sequences`: the
// sequences `tokens` carries. The shard's sequence count, or INVALID_ARGUMENT naming the field.
absl::StatusOr<int64_t> ValidateLocalData(const v1::ComputeGradientRequest& request, int64_t token_sequences,
                                          int width) {
  const int64_t most = std::max<int64_t>(
      1, v1::LIMIT_MAX_CHUNK_BYTES / (static_cast<int64_t>(width) * request.sequence_length()));
  const bool whole_shard = request.local_data_size() == 1 && token_sequences == 0;
  int64_t total = token_sequences;
  for (int e = 0; e < request.local_data_size(); ++e) {
    const v1::LocalDataShard& local = request.local_data(e);
    const std::string field = absl::StrCat("local_data[", e, "]");
    if (!base::IsSha256Hex(local.sha256())) {
      return InvalidField(field + ".sha256", "must be 64 lowercase hexadecimal characters");
    }
    for (int f = 0; f < e; ++f) {
      if (request.local_data(f).sha256() == local.sha256()) {
        return InvalidField(field + ".sha256", absl::StrCat("the same dataset as local_data[", f, "]"));
      }
    }
    if (local.sequences_size() < 1) return InvalidField(field + ".sequences", "empty");
    for (int i = 0; i < local.sequences_size(); ++i) {
      if (local.sequences(i) < 0) {
        return InvalidField(field + ".sequences",
                            absl::StrCat("entry ", i, " = ", local.sequences(i), " is negative"));
      }
    }
    if (local.positions_size() != local.sequences_size() && !(whole_shard && local.positions_size() == 0)) {
      return InvalidField(
          field + ".positions",
          absl::StrCat(local.positions_size(), " entries for ", local.sequences_size(),
                       " sequences; positions are required unless one entry is the whole shard"));
    }
    total += local.sequences_size();
  }
  if (total > most) {
    return InvalidField("local_data", absl::StrCat("the shard holds ", total, " sequences; at most ", most,
                                                   " of ", request.sequence_length(), " tokens"));
  }
  std::vector<bool> taken(static_cast<size_t>(total), false);
  for (int e = 0; e < request.local_data_size(); ++e) {
    for (int i = 0; i < request.local_data(e).positions_size(); ++i) {
      const int64_t position = request.local_data(e).positions(i);
      if (position < 0 || position >= total || taken[static_cast<size_t>(position)]) {
        return InvalidField(absl::StrCat("local_data[", e, "].positions"),
                            absl::StrCat("entry ", i, " = ", position, " is outside [0, ", total,
                                         ") or taken by another sequence"));
      }
      taken[static_cast<size_t>(position)] = true;
    }
  }
  return total;
}

}  // namespace

int64_t UsableBytes(int64_t memory_budget_bytes) {
  return static_cast<int64_t>(std::floor(static_cast<double>(memory_budget_bytes) * (1.0 - kSafetyMargin)));
}

absl::Status InvalidField(absl::string_view field, absl::string_view message) {
  return rpc::InvalidFieldError(field, message);
}

absl::StatusOr<performer::Plan> ValidateShardRequest(const v1::ComputeGradientRequest& request) {
  if (request.job_id().empty()) return InvalidField("job_id", "required");
  if (static_cast<int64_t>(request.job_id().size()) > v1::LIMIT_MAX_NAME_BYTES) {
    return InvalidField("job_id",
                        absl::StrCat(request.job_id().size(), " bytes; at most ", v1::LIMIT_MAX_NAME_BYTES));
  }
  // Evaluation shards carry the round they follow: 0 is the evaluation before the first round.
  const int64_t first_round = request.evaluate_only() ? 0 : 1;
  if (request.round() < first_round) {
    return InvalidField("round", absl::StrCat("must be >= ", first_round, ", got ", request.round()));
  }
  if (request.shard_id() < 0)
    return InvalidField("shard_id", absl::StrCat("must be >= 0, got ", request.shard_id()));
  if (request.attempt() < 1)
    return InvalidField("attempt", absl::StrCat("must be >= 1, got ", request.attempt()));
  if (request.parameter_version() < 1) return InvalidField("parameter_version", "must be >= 1, got 0");
  const int64_t length = request.sequence_length();
  if (length < 2) return InvalidField("sequence_length", absl::StrCat("must be >= 2, got ", length));
  // A sequence fits one shard's tokens (the contract's bound); anything longer is no sequence this
  // request can carry, and would overflow the cost model.
  if (length > v1::LIMIT_MAX_CHUNK_BYTES) {
    return InvalidField("sequence_length", absl::StrCat(length, " is above ", v1::LIMIT_MAX_CHUNK_BYTES,
                                                        " (a sequence must fit one shard)"));
  }
  if (request.loss_normalizer() <= 0) {
    return InvalidField("loss_normalizer", absl::StrCat("must be > 0, got ", request.loss_normalizer()));
  }

  if (!request.has_plan()) return InvalidField("plan", "required");
  absl::StatusOr<performer::Plan> plan = planner::PlanFromProto(request.plan(), "plan");
  if (!plan.ok()) return WithField(plan.status(), "plan");
  if (absl::Status s = plan->Validate(length); !s.ok()) {
    return InvalidField("plan", absl::StrCat(s.message(), " (sequence_length ", length, ")"));
  }

  const int width = rpc::TokenWidth(request.token_encoding());
  if (width == 0) {
    return InvalidField("token_encoding",
                        absl::StrCat("unknown or unspecified encoding ", request.token_encoding()));
  }
  const int64_t bytes = static_cast<int64_t>(request.tokens().size());
  if (bytes == 0 && request.local_data_size() == 0) return InvalidField("tokens", "empty");
  if (bytes > v1::LIMIT_MAX_CHUNK_BYTES) {
    return InvalidField("tokens", absl::StrCat(bytes, " bytes; at most ", v1::LIMIT_MAX_CHUNK_BYTES));
  }
  if (bytes % width != 0) {
    return InvalidField("tokens",
                        absl::StrCat(bytes, " bytes is not a whole number of ", width, "-byte tokens"));
  }
  const int64_t count = bytes / width;

  if (request.doc_starts_size() > v1::LIMIT_MAX_SHARD_DOC_STARTS) {
    return InvalidField("doc_starts", absl::StrCat(request.doc_starts_size(), " entries; at most ",
                                                   v1::LIMIT_MAX_SHARD_DOC_STARTS));
  }
  for (int i = 0; i < request.doc_starts_size(); ++i) {
    const int64_t start = request.doc_starts(i);
    if (start < 0 || start >= count) {
      return InvalidField("doc_starts", absl::StrCat("entry ", i, " = ", start, " is outside [0, ", count,
                                                     ") (the shard holds ", count, " tokens)"));
    }
    if (i > 0 && start <= request.doc_starts(i - 1)) {
      return InvalidField(
          "doc_starts", absl::StrCat("entry ", i, " = ", start, " does not increase on entry ", i - 1, " = ",
                                     request.doc_starts(i - 1)));
    }
  }

  for (int i = 0; i < request.gradient_tensors_size(); ++i) {
    const int index = request.gradient_tensors(i);
    if (index < 0 || (i > 0 && index <= request.gradient_tensors(i - 1))) {
      return InvalidField("gradient_tensors",
                          absl::StrCat("entry ", i, " = ", index, " is negative or does not increase"));
    }
  }
  if (request.gradient_tensors_size() > 0 && request.has_local_steps()) {
    return InvalidField("gradient_tensors", "not with local_steps");
  }

  int64_t sequences = (count + length - 1) / length;
  if (request.local_data_size() > 0) {
    absl::StatusOr<int64_t> total = ValidateLocalData(request, sequences, width);
    if (!total.ok()) return total.status();
    sequences = *total;
  }

  if (request.has_local_steps()) {
    const v1::LocalSteps& local = request.local_steps();
    if (request.evaluate_only()) return InvalidField("local_steps", "not with evaluate_only");
    const int steps = local.sequences_per_step_size();
    if (steps < 1 || steps > v1::LIMIT_MAX_LOCAL_STEPS) {
      return InvalidField("local_steps.sequences_per_step",
                          absl::StrCat(steps, " inner steps; must be 1 to ", v1::LIMIT_MAX_LOCAL_STEPS));
    }
    int64_t total = 0;
    for (int i = 0; i < steps; ++i) {
      const int64_t n = local.sequences_per_step(i);
      if (n < 0 || n > sequences) {
        return InvalidField("local_steps.sequences_per_step",
                            absl::StrCat("entry ", i, " = ", n, " is outside [0, ", sequences, "]"));
      }
      total += n;
    }
    if (total != sequences) {
      return InvalidField("local_steps.sequences_per_step",
                          absl::StrCat("entries sum to ", total, " sequences; the shard holds ", sequences));
    }
    if (absl::Status optimizer =
            wire::ValidateOptimizer(local.inner_optimizer(), "local_steps.inner_optimizer");
        !optimizer.ok()) {
      return WithField(optimizer, "local_steps.inner_optimizer");
    }
    if (local.has_time_budget_seconds() &&
        !(local.time_budget_seconds() > 0 && std::isfinite(local.time_budget_seconds()))) {
      return InvalidField(
          "local_steps.time_budget_seconds",
          absl::StrCat("must be a positive number of seconds, got ", local.time_budget_seconds()));
    }
    if (!v1::Compression_IsValid(local.compression())) {
      return InvalidField("local_steps.compression",
                          absl::StrCat("unknown encoding ", static_cast<int>(local.compression())));
    }
  }
  return plan;
}

absl::StatusOr<Shard> CutShard(const v1::ComputeGradientRequest& request, int64_t vocab) {
  absl::StatusOr<std::vector<int64_t>> tokens =
      rpc::DecodeTokens(request.tokens(), request.token_encoding(), vocab, "tokens");
  if (!tokens.ok()) return WithField(tokens.status(), "tokens");
  return CutSequences(*tokens, std::vector<int64_t>(request.doc_starts().begin(), request.doc_starts().end()),
                      request.sequence_length());
}

absl::StatusOr<Shard> CutLocalShard(const std::vector<int64_t>& tokens,
                                    const std::vector<int64_t>& doc_starts, int64_t sequence_length,
                                    int64_t vocab) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      return absl::FailedPreconditionError(absl::StrCat("local_data: token ", i,
                                                        " of the shard = ", tokens[i],
                                                        " is outside the model's vocabulary of ", vocab));
    }
  }
  return CutSequences(tokens, doc_starts, sequence_length);
}

absl::StatusOr<Shard> AssembleShard(const v1::ComputeGradientRequest& request, int64_t vocab,
                                    std::vector<Shard> local) {
  if (request.local_data_size() == 0) return CutShard(request, vocab);
  Shard from_tokens;
  if (!request.tokens().empty()) {
    absl::StatusOr<Shard> cut = CutShard(request, vocab);
    if (!cut.ok()) return cut.status();
    from_tokens = *std::move(cut);
  }
  if (local.size() == 1 && request.local_data(0).positions_size() == 0) return std::move(local[0]);
  size_t total = from_tokens.sequences.size();
  for (const Shard& entry : local) total += entry.sequences.size();
  Shard shard;
  shard.sequences.resize(total);
  std::vector<bool> filled(total, false);
  for (size_t e = 0; e < local.size(); ++e) {
    for (size_t i = 0; i < local[e].sequences.size(); ++i) {
      const size_t position =
          static_cast<size_t>(request.local_data(static_cast<int>(e)).positions(static_cast<int>(i)));
      shard.sequences[position] = std::move(local[e].sequences[i]);
      filled[position] = true;
    }
  }
  size_t next = 0;
  for (size_t position = 0; position < total; ++position) {
    if (!filled[position]) shard.sequences[position] = std::move(from_tokens.sequences[next++]);
  }
  for (const performer::PackedBatch& sequence : shard.sequences) {
    shard.tokens += static_cast<int64_t>(sequence.tokens.size());
    shard.max_documents =
        std::max<int64_t>(shard.max_documents, static_cast<int64_t>(sequence.doc_starts.size()));
  }
  return shard;
}

Shard CutSequences(const std::vector<int64_t>& tokens, const std::vector<int64_t>& doc_starts,
                   int64_t sequence_length) {
  const int64_t length = sequence_length;
  const int64_t count = static_cast<int64_t>(tokens.size());
  Shard shard;
  shard.tokens = count;
  size_t doc = 0;
  for (int64_t begin = 0; begin < count; begin += length) {
    const int64_t end = std::min(count, begin + length);
    performer::PackedBatch batch;
    batch.tokens.assign(tokens.begin() + begin, tokens.begin() + end);
    batch.doc_starts.push_back(0);  // a sequence start is a document start
    while (doc < doc_starts.size() && doc_starts[doc] < end) {
      const int64_t offset = doc_starts[doc] - begin;
      if (offset > 0) batch.doc_starts.push_back(offset);
      ++doc;
    }
    shard.max_documents =
        std::max<int64_t>(shard.max_documents, static_cast<int64_t>(batch.doc_starts.size()));
    shard.sequences.push_back(std::move(batch));
  }
  return shard;
}

performer::Plan PlanForSequence(const performer::Plan& plan, int64_t length) {
  performer::Plan clamped = plan;
  clamped.slice = std::min(plan.slice, length);
  return clamped;
}

absl::StatusOr<BudgetCheck> CheckBudget(const performer::ModelConfig& model, const performer::Plan& plan,
                                        int64_t sequence_length, const Shard& shard, bool gradient_wanted,
                                        int64_t memory_budget_bytes, const planner::DeviceProfile& profile,
                                        absl::string_view worker_name, int64_t extra_bytes) {
  planner::Workload workload;
  workload.model = model;
  workload.seq_len = sequence_length;
  workload.documents = shard.max_documents;
  const bool running_sum = gradient_wanted && shard.sequences.size() > 1;
  workload.gradient_sum = running_sum;
  absl::StatusOr<planner::Prediction> prediction = planner::Predict(workload, plan, profile);
  if (!prediction.ok()) {
    return InvalidField("plan", absl::StrCat("cannot predict it: ", prediction.status().message()));
  }
  BudgetCheck check;
  check.prediction = *prediction;
  check.needed_bytes = prediction->peak_bytes + extra_bytes;
  check.usable_bytes = UsableBytes(memory_budget_bytes);
  if (check.needed_bytes <= check.usable_bytes) return check;

  std::string what = running_sum ? absl::StrCat("predicted peak, with a running gradient sum over ",
                                                shard.sequences.size(), " sequences")
                                 : "predicted peak";
  if (extra_bytes > 0) {
    absl::StrAppend(&what, ", and ", planner::HumanBytes(static_cast<double>(extra_bytes)),
                    " for the local steps' parameters and optimizer state");
  }
  v1::ErrorDetail detail;
  detail.set_required_bytes(check.needed_bytes);
  detail.set_budget_bytes(memory_budget_bytes);
  detail.set_usable_bytes(check.usable_bytes);
  return rpc::AttachErrorDetail(
      absl::ResourceExhaustedError(absl::StrFormat(
          "plan needs %s (%s) but worker %s budget allows %s (%s less a %.0f%% margin); plan: %s",
          planner::HumanBytes(static_cast<double>(check.needed_bytes)), what, worker_name,
          planner::HumanBytes(static_cast<double>(check.usable_bytes)),
          planner::HumanBytes(static_cast<double>(memory_budget_bytes)), 100 * kSafetyMargin,
          planner::PlanSummary(plan))),
      detail);
}

}  // namespace slimfit::worker
