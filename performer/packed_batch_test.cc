#include "performer/packed_batch.h"

#include <gtest/gtest.h>

namespace slimfit::performer {
namespace {

TEST(PackedBatchTest, CountsPredictedTokensPerDocument) {
  PackedBatch batch{{1, 2, 3, 4, 5}, {0, 3}};
  EXPECT_EQ(PredictedTokenCount(batch), 3);
  batch.doc_starts.clear();
  EXPECT_EQ(PredictedTokenCount(batch), 4);
}

TEST(PackedBatchTest, LayoutSplitsAtDocumentStartsAndRestartsPositions) {
  const PackedBatch batch{{10, 11, 12, 13, 14, 15, 16, 17}, {0, 3, 4}};
  const StretchLayout layout = LayoutStretch(batch, 2, 7);
  ASSERT_EQ(layout.segments.size(), 3u);
  EXPECT_EQ(layout.segments[0].begin, 2);
  EXPECT_EQ(layout.segments[0].end, 3);
  EXPECT_TRUE(layout.segments[0].continues_front);
  EXPECT_FALSE(layout.segments[1].continues_front);
  EXPECT_EQ(layout.segments[2].begin, 4);
  EXPECT_EQ(layout.segments[2].end, 7);
  EXPECT_EQ(layout.positions, (std::vector<int64_t>{2, 0, 0, 1, 2}));
  // Row 0 (token 12) ends document 0 and row 1 (token 13) is a one-token document.
  EXPECT_EQ(layout.target_rows, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(layout.targets, (std::vector<int64_t>{15, 16, 17}));
  EXPECT_FALSE(layout.reversible);
  EXPECT_TRUE(LayoutStretch(batch, 5, 7).reversible);
  // A stretch that begins exactly at a document start cannot be walked back either.
  EXPECT_FALSE(LayoutStretch(batch, 4, 6).reversible);
  // The shortcut agrees with the layout on every stretch.
  for (int64_t begin = 0; begin < batch.size(); ++begin) {
    for (int64_t end = begin + 1; end <= batch.size(); ++end) {
      EXPECT_EQ(StretchIsReversible(batch, begin, end), LayoutStretch(batch, begin, end).reversible)
          << begin << ".." << end;
    }
  }
  PackedBatch single{{1, 2, 3, 4}, {}};
  EXPECT_TRUE(StretchIsReversible(single, 2, 4));
  EXPECT_FALSE(StretchIsReversible(single, 0, 2));
}

TEST(PackedBatchTest, ValidationNamesTheProblem) {
  EXPECT_EQ(ValidatePackedBatch(PackedBatch{}, 256).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidatePackedBatch(PackedBatch{{1, 300}, {}}, 256).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidatePackedBatch(PackedBatch{{1, 2, 3}, {0, 2, 1}}, 256).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidatePackedBatch(PackedBatch{{1, 2, 3}, {1}}, 256).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidatePackedBatch(PackedBatch{{1, 2, 3}, {0, 2}}, 256).ok());
}

}  // namespace
}  // namespace slimfit::performer
