// How a round's sequences are cut into shards: in proportion to each worker's predicted speed so
// that workers finish together (largest-remainder apportionment), then each worker's share into
// shards that fit one ComputeGradientRequest (≤ MAX_CHUNK_BYTES of tokens, ≤ MAX_SHARD_DOC_STARTS
// document starts).
//
// Thread safety: pure functions.
#ifndef SLIMFIT_SERVER_SHARD_SPLIT_H_
#define SLIMFIT_SERVER_SHARD_SPLIT_H_

#include <cstdint>
#include <vector>

namespace slimfit::server {

// Counts summing to `items`, count[i] ∝ speeds[i] (largest remainder; ties to the faster, then the
// earlier worker). REQUIRES: speeds non-empty, every speed > 0 and finite, items ≥ 0.
std::vector<int64_t> SplitBySpeed(int64_t items, const std::vector<double>& speeds);

// The most sequences of `sequence_length` tokens of `token_width` bytes one shard may carry.
int64_t MaxSequencesPerShard(int64_t sequence_length, int token_width);

}  // namespace slimfit::server

#endif  // SLIMFIT_SERVER_SHARD_SPLIT_H_
