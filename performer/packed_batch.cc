#include "performer/packed_batch.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace slimfit::performer {

absl::Status ValidatePackedBatch(const PackedBatch& batch, int64_t vocab) {
  if (batch.tokens.empty()) {
    return absl::InvalidArgumentError("the token sequence is empty; a gradient needs tokens");
  }
  for (size_t i = 0; i < batch.tokens.size(); ++i) {
    const int64_t token = batch.tokens[i];
    if (token < 0 || token >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrFormat("token %d at position %d is outside the vocabulary [0, %d)", token, i, vocab));
    }
  }
  if (!batch.doc_starts.empty()) {
    if (batch.doc_starts.front() != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("the first document must start at offset 0, got ", batch.doc_starts.front()));
    }
    for (size_t i = 1; i < batch.doc_starts.size(); ++i) {
      const int64_t start = batch.doc_starts[i];
      if (start <= batch.doc_starts[i - 1] || start >= batch.size()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "document start %d (index %d) must be greater than the previous start %d and less "
            "than the stream length %d",
            start, i, batch.doc_starts[i - 1], batch.size()));
      }
    }
  }
  return absl::OkStatus();
}

int64_t PredictedTokenCount(const PackedBatch& batch) {
  const int64_t docs = batch.doc_starts.empty() ? 1 : static_cast<int64_t>(batch.doc_starts.size());
  return batch.size() - docs;
}

bool StretchIsReversible(const PackedBatch& batch, int64_t begin, int64_t end) {
  if (begin == 0) return false;  // the first document starts here
  // The first document start at or after `begin` must lie beyond the stretch.
  auto next = std::lower_bound(batch.doc_starts.begin(), batch.doc_starts.end(), begin);
  return next == batch.doc_starts.end() || *next >= end;
}

StretchLayout LayoutStretch(const PackedBatch& batch, int64_t begin, int64_t end) {
  StretchLayout layout;
  static const std::vector<int64_t> kSingleDocument = {0};
  const std::vector<int64_t>& starts = batch.doc_starts.empty() ? kSingleDocument : batch.doc_starts;

  // The document containing `begin`, and the first start after it.
  auto next = std::upper_bound(starts.begin(), starts.end(), begin);
  int64_t doc_start = *(next - 1);
  int64_t cursor = begin;
  while (cursor < end) {
    const int64_t next_start = next == starts.end() ? batch.size() : *next;
    const int64_t segment_end = std::min(end, next_start);
    const bool continues = doc_start < cursor;
    layout.segments.push_back(Segment{cursor, segment_end, continues});
    for (int64_t i = cursor; i < segment_end; ++i) {
      layout.positions.push_back(i - doc_start);
      if (i + 1 < next_start) {
        layout.target_rows.push_back(i - begin);
        layout.targets.push_back(batch.tokens[i + 1]);
      }
    }
    cursor = segment_end;
    if (cursor == next_start && next != starts.end()) {
      doc_start = next_start;
      ++next;
    }
  }
  layout.reversible = layout.segments.size() == 1 && layout.segments.front().continues_front;
  return layout;
}

}  // namespace slimfit::performer
