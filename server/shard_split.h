// How a round's sequences are cut into shards: in proportion to each worker's predicted speed so
// that workers finish together (largest-remainder apportionment), then each worker's share into
// shards that fit one ComputeGradientRequest (≤ MAX_CHUNK_BYTES of tokens, ≤ MAX_SHARD_DOC_STARTS
// document starts).
//
// Thread safety: pure functions.
#ifndef SLIMFIT_SERVER_SHARD_SPLIT_H_
#define SLIMFIT_SERVER_SHARD_SPLIT_H_

#include <cstdint>
#include <functional>
#include <vector>

namespace slimfit::server {

// Counts summing to `items`, count[i] ∝ speeds[i] (largest remainder; ties to the faster, then the
// earlier worker). REQUIRES: speeds non-empty, every speed > 0 and finite, items ≥ 0.
std::vector<int64_t> SplitBySpeed(int64_t items, const std::vector<double>& speeds);

// The most sequences of `sequence_length` tokens of `token_width` bytes one shard may carry.
int64_t MaxSequencesPerShard(int64_t sequence_length, int token_width);

// One shard: items [begin, end) of the round, for worker `worker`.
struct ShardCut {
  size_t worker = 0;
  int64_t begin = 0;
  int64_t end = 0;
};

// Cuts each worker's share — counts[w] consecutive items, workers in order — into shards of at
// most `max_items` items whose weights (`weight(item)`: document starts) sum to at most
// `max_weight`; a single item heavier than that is a shard of its own. REQUIRES: max_items ≥ 1.
std::vector<ShardCut> CutShards(const std::vector<int64_t>& counts, int64_t max_items, int64_t max_weight,
                                const std::function<int64_t(int64_t item)>& weight);

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_SHARD_SPLIT_H_
