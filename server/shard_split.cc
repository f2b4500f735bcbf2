#include "server/shard_split.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "proto/slimfit.pb.h"

namespace slimfit::server {

std::vector<int64_t> SplitBySpeed(int64_t items, const std::vector<double>& speeds) {
  const double total = std::accumulate(speeds.begin(), speeds.end(), 0.0);
  std::vector<int64_t> counts(speeds.size(), 0);
  std::vector<double> remainders(speeds.size(), 0);
  int64_t assigned = 0;
  for (size_t i = 0; i < speeds.size(); ++i) {
    const double exact = static_cast<double>(items) * speeds[i] / total;
    counts[i] = static_cast<int64_t>(std::floor(exact));
    remainders[i] = exact - static_cast<double>(counts[i]);
    assigned += counts[i];
  }
  std::vector<size_t> order(speeds.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (remainders[a] != remainders[b]) return remainders[a] > remainders[b];
    return speeds[a] > speeds[b];
  });
  for (size_t k = 0; assigned < items; k = (k + 1) % order.size(), ++assigned) ++counts[order[k]];
  return counts;
}

int64_t MaxSequencesPerShard(int64_t sequence_length, int token_width) {
  const int64_t by_bytes = v1::LIMIT_MAX_CHUNK_BYTES / (sequence_length * token_width);
  return std::max<int64_t>(1, by_bytes);
}

std::vector<ShardCut> CutShards(const std::vector<int64_t>& counts, int64_t max_items, int64_t max_weight,
                                const std::function<int64_t(int64_t item)>& weight) {
  std::vector<ShardCut> shards;
  int64_t next = 0;
  for (size_t w = 0; w < counts.size(); ++w) {
    for (int64_t left = counts[w]; left > 0;) {
      int64_t take = 0;
      int64_t total = 0;
      while (take < std::min(left, max_items)) {
        const int64_t more = weight(next + take);
        if (take > 0 && total + more > max_weight) break;
        total += more;
        ++take;
      }
      shards.push_back(ShardCut{w, next, next + take});
      next += take;
      left -= take;
    }
  }
  return shards;
}

}  // namespace slimfit::server
