// ShardDispatcher: how a round's sequences become tasks — which worker may run what (worker-local
// data only on its holders), the speed-proportional share-out, shards that fit one request, a
// local-steps round's one request per worker, and the spot checks' second opinions.
#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "data_formats/token_codec.h"
#include "server/shard_dispatcher.h"
#include "server/shard_split.h"
#include "server/spot_checks.h"

namespace slimfit::server {

bool ShardDispatcher::Holds(const WorkerPlan& plan, int source) const {
  if (source == 0) return true;
  const LocalSource& local = deps_.data->local_sources()[static_cast<size_t>(source - 1)];
  return plan.worker.local_datasets.count(local.sha256) > 0;
}

bool ShardDispatcher::CanRun(const WorkerPlan& plan, const Task& task) const {
  if (task.sequences_per_step.empty()) return Holds(plan, task.source);
  for (const int source : LocalSourcesOf(task.sequences)) {
    if (!Holds(plan, source)) return false;
  }
  return true;
}

std::set<int> ShardDispatcher::LocalSourcesOf(const std::vector<SequenceRef>& sequences) {
  std::set<int> sources;
  for (const SequenceRef& sequence : sequences) {
    if (sequence.source > 0) sources.insert(sequence.source);
  }
  return sources;
}

std::vector<std::vector<SequenceRef>> ShardDispatcher::ShareOut(const std::vector<SequenceRef>& sequences,
                                                                const std::vector<WorkerPlan>& plans) const {
  // Each worker's share in proportion to its predicted speed. A worker-local dataset's sequences go
  // only to its holders: sources are shared out one after another, those with the fewest holders
  // first and the uploaded stream (anyone's) last, each in proportion to what its eligible workers
  // still lack of their speed-proportional share of the whole.
  std::vector<double> speeds;
  double total_speed = 0;
  for (const WorkerPlan& plan : plans) {
    speeds.push_back(plan.tokens_per_second);
    total_speed += plan.tokens_per_second;
  }
  std::map<int, std::vector<SequenceRef>> by_source;
  for (const SequenceRef& sequence : sequences) by_source[sequence.source].push_back(sequence);
  std::vector<std::pair<size_t, int>> order;  // (holders, source)
  for (const auto& [source, items] : by_source) {
    size_t holders = 0;
    for (const WorkerPlan& plan : plans) holders += Holds(plan, source) ? 1 : 0;
    order.push_back({source == 0 ? plans.size() + 1 : holders, source});
  }
  std::sort(order.begin(), order.end());

  const double round_items = static_cast<double>(sequences.size());
  std::vector<double> assigned(plans.size(), 0);
  std::vector<std::vector<SequenceRef>> shares(plans.size());
  for (const auto& [holders, source] : order) {
    const std::vector<SequenceRef>& items = by_source[source];
    // Weights: what each eligible worker lacks of its share; its speed when none lacks anything
    // (or nothing was assigned yet, which keeps a job of uploads alone split exactly by speed).
    std::vector<size_t> eligible;
    std::vector<double> lack;
    bool untouched = true;
    for (size_t w = 0; w < plans.size(); ++w) {
      if (!Holds(plans[w], source)) continue;
      eligible.push_back(w);
      lack.push_back(round_items * speeds[w] / total_speed - assigned[w]);
      untouched &= assigned[w] == 0;
    }
    if (eligible.empty()) continue;  // PlanWorkers waits for a holder of every source; not reached
    std::vector<double> weights;
    for (size_t i = 0; i < eligible.size(); ++i) weights.push_back(speeds[eligible[i]]);
    if (!untouched) {
      double lacking = 0;
      for (double l : lack) lacking += std::max(0.0, l);
      if (lacking > 0) {
        for (size_t i = 0; i < eligible.size(); ++i)
          weights[i] = std::max(lack[i], 1e-9 * speeds[eligible[i]]);
      }
    }
    const std::vector<int64_t> counts = SplitBySpeed(static_cast<int64_t>(items.size()), weights);
    size_t next = 0;
    for (size_t i = 0; i < eligible.size(); ++i) {
      std::vector<SequenceRef>& share = shares[eligible[i]];
      share.insert(share.end(), items.begin() + static_cast<std::ptrdiff_t>(next),
                   items.begin() + static_cast<std::ptrdiff_t>(next + static_cast<size_t>(counts[i])));
      next += static_cast<size_t>(counts[i]);
      assigned[eligible[i]] += static_cast<double>(counts[i]);
    }
  }
  return shares;
}

std::vector<ShardDispatcher::Task> ShardDispatcher::CutRound(const std::vector<SequenceRef>& sequences,
                                                             const std::vector<WorkerPlan>& plans) const {
  // Each worker's share (ShareOut), cut into shards of one source each that fit one request: at
  // most a request's bytes of tokens and LIMIT_MAX_SHARD_DOC_STARTS document starts.
  const JobData& data = *deps_.data;
  int64_t per_shard = MaxSequencesPerShard(data.sequence_length(), rpc::TokenWidth(deps_.encoding));
  if (deps_.options.max_sequences_per_shard > 0)
    per_shard = std::min(per_shard, deps_.options.max_sequences_per_shard);
  const std::vector<std::vector<SequenceRef>> shares = ShareOut(sequences, plans);
  std::vector<Task> tasks;
  for (size_t w = 0; w < plans.size(); ++w) {
    const std::vector<SequenceRef>& share = shares[w];
    // Runs of one source (ShareOut keeps a worker's share grouped by source).
    for (size_t begin = 0; begin < share.size();) {
      size_t end = begin;
      while (end < share.size() && share[end].source == share[begin].source) ++end;
      const std::vector<ShardCut> cuts =
          CutShards({static_cast<int64_t>(end - begin)}, per_shard, v1::LIMIT_MAX_SHARD_DOC_STARTS,
                    [&](int64_t i) { return data.DocumentsIn(share[begin + static_cast<size_t>(i)]); });
      for (const ShardCut& cut : cuts) {
        Task task;
        task.id = static_cast<int64_t>(tasks.size());
        task.source = share[begin].source;
        task.sequences.assign(share.begin() + static_cast<std::ptrdiff_t>(begin) + cut.begin,
                              share.begin() + static_cast<std::ptrdiff_t>(begin) + cut.end);
        task.expected_tokens = data.PredictedTokens(task.sequences);
        task.worker = w;
        task.fresh = false;
        tasks.push_back(std::move(task));
      }
      begin = end;
    }
  }
  return tasks;
}

absl::StatusOr<std::vector<ShardDispatcher::Task>> ShardDispatcher::CutLocalRound(
    int64_t round, const std::vector<SequenceRef>& sequences, const std::vector<int64_t>& steps,
    const std::vector<WorkerPlan>& plans) const {
  // Every inner step's batch is shared out in proportion to the workers' speed (worker-local data
  // only to its holders: ShareOut), so that they finish their inner steps together; a worker's
  // shares of all steps travel in one request, since its inner steps run one after another on its
  // own optimizer.
  const JobData& data = *deps_.data;
  std::vector<Task> per_worker(plans.size());
  std::vector<std::vector<int64_t>> per_step(plans.size());
  size_t offset = 0;
  for (const int64_t batch : steps) {
    const std::vector<SequenceRef> step(
        sequences.begin() + static_cast<std::ptrdiff_t>(offset),
        sequences.begin() + static_cast<std::ptrdiff_t>(offset + static_cast<size_t>(batch)));
    offset += static_cast<size_t>(batch);
    const std::vector<std::vector<SequenceRef>> shares = ShareOut(step, plans);
    for (size_t w = 0; w < plans.size(); ++w) {
      per_worker[w].sequences.insert(per_worker[w].sequences.end(), shares[w].begin(), shares[w].end());
      per_step[w].push_back(static_cast<int64_t>(shares[w].size()));
    }
  }
  const int64_t per_request = MaxSequencesPerShard(data.sequence_length(), rpc::TokenWidth(deps_.encoding));
  std::vector<Task> tasks;
  for (size_t w = 0; w < plans.size(); ++w) {
    Task& task = per_worker[w];
    if (task.sequences.empty()) continue;
    int64_t documents = 0;
    for (const SequenceRef& sequence : task.sequences) documents += data.DocumentsIn(sequence);
    if (static_cast<int64_t>(task.sequences.size()) > per_request ||
        documents > v1::LIMIT_MAX_SHARD_DOC_STARTS) {
      return absl::FailedPreconditionError(
          absl::StrCat("round ", round, ": worker ", plans[w].worker.worker_id, "'s share of the ",
                       steps.size(), " inner steps is ", task.sequences.size(), " sequences with ", documents,
                       " document starts; one request carries at most ", per_request, " sequences and ",
                       v1::LIMIT_MAX_SHARD_DOC_STARTS,
                       " document starts: lower local_steps or tokens_per_round, or add workers"));
    }
    task.id = static_cast<int64_t>(tasks.size());
    task.expected_tokens = data.PredictedTokens(task.sequences);
    task.worker = w;
    task.fresh = false;
    task.sequences_per_step = std::move(per_step[w]);
    if (deps_.round_time_budget_seconds > 0) {
      size_t begin = 0;
      int64_t tokens = 0;
      for (const int64_t count : task.sequences_per_step) {
        tokens += data.PredictedTokens(std::vector<SequenceRef>(
            task.sequences.begin() + static_cast<std::ptrdiff_t>(begin),
            task.sequences.begin() + static_cast<std::ptrdiff_t>(begin + static_cast<size_t>(count))));
        begin += static_cast<size_t>(count);
        task.step_token_counts.push_back(tokens);
      }
    }
    tasks.push_back(std::move(task));
  }
  return tasks;
}

void ShardDispatcher::AddSpotChecks(int64_t round, const std::vector<WorkerPlan>& plans,
                                    RoundCollector* collector, std::vector<Task>* tasks) const {
  const size_t workers = plans.size();
  if (deps_.verify_fraction <= 0 || workers < 2) return;
  const size_t shards = tasks->size();
  for (size_t i = 0; i < shards; ++i) {
    if (!IsSpotChecked(deps_.feature_seed, round, (*tasks)[i].id, deps_.verify_fraction)) continue;
    Task check = (*tasks)[i];
    check.opinion = 2;
    // Another worker (one that holds the shard's data), spread over all of them.
    std::vector<size_t> others;  // from the next worker on, wrapping around
    for (size_t k = 1; k < workers; ++k) {
      const size_t w = (check.worker + k) % workers;
      if (CanRun(plans[w], check)) others.push_back(w);
    }
    if (others.empty()) continue;  // a local dataset with one holder: the shard counts unverified
    collector->ExpectCheck(check.id);
    check.worker = others[i % others.size()];
    tasks->push_back(std::move(check));
  }
}

}  // namespace slimfit::server
