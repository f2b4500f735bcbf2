// PackedBatch: the padding-free layout ("Saving Memory Using Padding-Free Transformer Layers") — documents
// concatenated into one token stream with the offsets where each document starts. The prefix state resets and
// positions restart at every document start; no token predicts across a boundary, and the last token of each
// document predicts nothing.
//
// Example: two documents "abc" and "de":
//   PackedBatch batch{{'a','b','c','d','e'}, {0, 3}};   // 3 predicted tokens: b, c, e
//
// Thread safety: plain value type; the free functions are pure.
#ifndef SLIMFIT_PERFORMER_PACKED_BATCH_H_
#define SLIMFIT_PERFORMER_PACKED_BATCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace slimfit::performer {

struct PackedBatch {
  std::vector<int64_t> tokens;
  // Strictly increasing offsets into `tokens`; the first is 0. Empty means one document.
  std::vector<int64_t> doc_starts;

  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
};

// INVALID_ARGUMENT with the offending index when the stream is empty, a token is outside
// [0, vocab), or the document starts are not strictly increasing offsets beginning at 0.
absl::Status ValidatePackedBatch(const PackedBatch& batch, int64_t vocab);

// Tokens that are predicted (every token but the first of each document).
int64_t PredictedTokenCount(const PackedBatch& batch);

// A maximal run of tokens [begin, end) of one document inside a stretch of the stream.
struct Segment {
  int64_t begin = 0;
  int64_t end = 0;
  // True when the document started before `begin`: the segment continues the incoming front.
  bool continues_front = false;
};

// The per-token layout of a stretch [begin, end) of a validated batch.
struct StretchLayout {
  std::vector<Segment> segments;     // in order, covering [begin, end)
  std::vector<int64_t> positions;    // position of each token within its document
  std::vector<int64_t> target_rows;  // rows (relative to begin) that predict a next token
  std::vector<int64_t> targets;      // the token each of those rows predicts
  // True when the outgoing front of this stretch is the incoming one plus the stretch's own
  // contributions, i.e. no document starts inside it: the incoming front can be recovered from
  // the outgoing one by subtraction.
  bool reversible = true;
};

// StretchLayout::reversible without building the layout: true when no document starts in
// [begin, end). O(log documents). Same preconditions as LayoutStretch.
bool StretchIsReversible(const PackedBatch& batch, int64_t begin, int64_t end);

// REQUIRES: `batch` passed ValidatePackedBatch, 0 <= begin < end <= batch.size().
StretchLayout LayoutStretch(const PackedBatch& batch, int64_t begin, int64_t end);

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_PACKED_BATCH_H_
