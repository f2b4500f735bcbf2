// The transformer baselines' formatting, batch-spec parsing and input validation. (The memory
// formulas are tested in transformer_baselines_test.cc.)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "planner/transformer_baselines.h"
#include "planner/transformer_baselines_testing.h"

namespace slimfit::planner {
namespace {

using transformer_testing::Equal;
using transformer_testing::ExpectInvalid;
using transformer_testing::kGiB;
using transformer_testing::Moments;
using transformer_testing::Shape;

constexpr AttentionLayout kAllLayouts[] = {AttentionLayout::kNaive, AttentionLayout::kFlash,
                                           AttentionLayout::kPaddingFree};
constexpr Recompute kAllRecomputes[] = {Recompute::kNone, Recompute::kAttention, Recompute::kFeedForward,
                                        Recompute::kFull};

// ---- Formatting ---------------------------------------------------------------------------------

TEST(TransformerBaselinesTest, FormatBytesUsesBinaryUnits) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1024), "1.0 KiB");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(37.5 * 1024 * 1024), "37.5 MiB");
  EXPECT_EQ(FormatBytes(1.25 * kGiB), "1.2 GiB");  // round half to even in printf: 1.25 → 1.2
  EXPECT_EQ(FormatBytes(1023.97 * 1024), "1.0 MiB");
  EXPECT_EQ(FormatBytes(1581.386 * kGiB), "1.5 TiB");
  EXPECT_EQ(FormatBytes(3.0 * kGiB * kGiB * 1024), "3072.0 EiB");  // no unit beyond EiB
  EXPECT_EQ(FormatBytes(-1), "-");
  EXPECT_EQ(FormatBytes(std::nan("")), "-");
}

TEST(TransformerBaselinesTest, FormatBaselineTableHasFixedWidthColumns) {
  BaselineRow row;
  row.layout = AttentionLayout::kPaddingFree;
  row.recompute = Recompute::kFeedForward;
  row.activation_bytes = 37.5 * 1024 * 1024;
  row.kept_bytes_per_layer = 512;
  row.model_state_bytes = 2 * kGiB;
  row.total_bytes = row.activation_bytes + row.model_state_bytes;
  row.compute_overhead_fraction = 2.0 / 9;
  const std::string table = FormatBaselineTable({row});
  EXPECT_EQ(table,
            "layout        recompute      activations   kept/layer  model state        total "
            " overhead\n"
            "padding-free  feed-forward      37.5 MiB        512 B      2.0 GiB      2.0 GiB "
            "   +22.2%\n");

  BaselineWorkload workload;
  workload.shape = Shape(6144, 48, 24576, 2, true, 44);
  workload.shape.vocab_size = 50304;
  workload.batch = BatchSpec::Uniform(8192, 8);
  absl::StatusOr<std::vector<BaselineRow>> rows = ComputeBaselines(workload);
  ASSERT_TRUE(rows.ok()) << rows.status();
  const std::string full = FormatBaselineTable(*rows);
  const std::vector<absl::string_view> lines = absl::StrSplit(full, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 13u);
  for (absl::string_view line : lines) EXPECT_EQ(line.size(), lines[0].size()) << line;
  EXPECT_TRUE(absl::StartsWith(lines[1], "naive         none  ")) << lines[1];
  EXPECT_TRUE(absl::StartsWith(lines[12], "padding-free  full  ")) << lines[12];
}

// ---- Parsing ------------------------------------------------------------------------------------

TEST(TransformerBaselinesTest, ParseLengthsFileToleratesWhitespaceAndBlankLines) {
  absl::StatusOr<std::vector<int64_t>> lengths = ParseLengthsFile("  12\n\n7\r\n \t \n+3  \n");
  ASSERT_TRUE(lengths.ok()) << lengths.status();
  EXPECT_EQ(*lengths, (std::vector<int64_t>{12, 7, 3}));
  lengths = ParseLengthsFile("5");  // no final newline
  ASSERT_TRUE(lengths.ok()) << lengths.status();
  EXPECT_EQ(*lengths, (std::vector<int64_t>{5}));
}

TEST(TransformerBaselinesTest, ParseLengthsFileErrorsNameTheLine) {
  ExpectInvalid(ParseLengthsFile("12\nabc\n").status(), "line 2: expected one sequence length");
  ExpectInvalid(ParseLengthsFile("12\nabc\n").status(), "\"abc\"");
  ExpectInvalid(ParseLengthsFile("1\n\n2\n0\n").status(),
                "line 4: sequence length must be at least 1, got 0");
  ExpectInvalid(ParseLengthsFile("-5\n").status(), "line 1: sequence length must be at least 1");
  ExpectInvalid(ParseLengthsFile("7\n12 34\n").status(), "line 2:");
  ExpectInvalid(ParseLengthsFile("3.5").status(), "line 1:");
  ExpectInvalid(ParseLengthsFile("99999999999999999999999").status(), "line 1:");
  ExpectInvalid(ParseLengthsFile("1\n16777217\n").status(),
                "line 2: sequence length 16777217 exceeds the maximum of 16777216");
  ExpectInvalid(ParseLengthsFile("").status(), "no sequence lengths found");
  ExpectInvalid(ParseLengthsFile("\n  \n\r\n").status(), "no sequence lengths found");
}

TEST(TransformerBaselinesTest, ParseBatchSpec) {
  absl::StatusOr<BatchSpec> spec = ParseBatchSpec("uniform:L=8192,b=8");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->kind, BatchSpec::Kind::kUniform);
  EXPECT_EQ(spec->max_length, 8192);
  EXPECT_EQ(spec->batch_size, 8);
  spec = ParseBatchSpec(" uniform: b = 4 , L=512 ");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->max_length, 512);
  EXPECT_EQ(spec->batch_size, 4);

  ExpectInvalid(ParseBatchSpec("normal:L=1,b=2").status(), "unknown length distribution");
  ExpectInvalid(ParseBatchSpec("uniform:L=8192").status(), "missing b");
  ExpectInvalid(ParseBatchSpec("uniform:b=8").status(), "missing L");
  ExpectInvalid(ParseBatchSpec("uniform:L=1,b=2,L=3").status(), "key L given twice");
  ExpectInvalid(ParseBatchSpec("uniform:L=x,b=2").status(), "value of L must be an integer");
  ExpectInvalid(ParseBatchSpec("uniform:M=3,b=2").status(), "unknown key \"M\"");
  ExpectInvalid(ParseBatchSpec("uniform:L=0,b=2").status(), "uniform max_length L must be positive, got 0");
  ExpectInvalid(ParseBatchSpec("uniform:L=10,b=-1").status(),
                "uniform batch_size b must be positive, got -1");
}

// ---- Validation ---------------------------------------------------------------------------------

TEST(TransformerBaselinesTest, ShapeValidation) {
  EXPECT_TRUE(ValidateTransformerShape(Shape(64, 4)).ok());
  ExpectInvalid(ValidateTransformerShape(Shape(0, 4)), "d_model must be positive, got 0");
  ExpectInvalid(ValidateTransformerShape(Shape(64, 0)), "heads must be positive, got 0");
  ExpectInvalid(ValidateTransformerShape(Shape(64, -2)), "heads must be positive, got -2");
  ExpectInvalid(ValidateTransformerShape(Shape(100, 3)), "d_model (100) must be divisible by heads (3)");
  ExpectInvalid(ValidateTransformerShape(Shape(64, 128)), "d_model (64) must be divisible by heads (128)");
  ExpectInvalid(ValidateTransformerShape(Shape(64, 4, 0, 2, true, 0)), "layers must be positive, got 0");
  ExpectInvalid(ValidateTransformerShape(Shape(64, 4, -1)), "d_ff must be at least 0, got -1");
  ExpectInvalid(ValidateTransformerShape(Shape(64, 4, 0, 3)),
                "bytes_per_element must be 1, 2, 4 or 8, got 3");
  ExpectInvalid(ValidateTransformerShape(Shape(64, 4, 0, 0)),
                "bytes_per_element must be 1, 2, 4 or 8, got 0");
  ExpectInvalid(ValidateTransformerShape(Shape(kMaxBaselineWidth * 2, 4)), "d_model must be at most 1048576");
  TransformerShape shape = Shape(64, 4);
  shape.vocab_size = -1;
  ExpectInvalid(ValidateTransformerShape(shape), "vocab_size must be at least 0, got -1");

  // Every entry point reports the same error.
  const BatchMoments moments = Moments(Equal(1, 8));
  ExpectInvalid(ComputeLayerActivations(Shape(100, 3), moments, AttentionLayout::kNaive).status(),
                "divisible");
  ExpectInvalid(ComputeLayerForwardFlops(Shape(0, 1), moments, AttentionLayout::kFlash).status(),
                "d_model must be positive");
  ExpectInvalid(ComputeModelState(Shape(64, 0), ModelStateOptions{}).status(), "heads");
  ExpectInvalid(ComputeLayerActivations(Shape(64, 4), moments, static_cast<AttentionLayout>(7)).status(),
                "unknown attention layout 7");
  ModelStateOptions options;
  options.parameter_bytes_per_element = 3;
  ExpectInvalid(ComputeModelState(Shape(64, 4), options).status(),
                "parameter_bytes_per_element must be 1, 2, 4 or 8, got 3");
}

TEST(TransformerBaselinesTest, BatchValidation) {
  ExpectInvalid(ValidateBatchSpec(BatchSpec::Explicit({})), "no sequence lengths");
  ExpectInvalid(ValidateBatchSpec(BatchSpec::Explicit({5, 0, 3})), "lengths[1] must be positive, got 0");
  ExpectInvalid(ValidateBatchSpec(BatchSpec::Explicit({-4})), "lengths[0] must be positive, got -4");
  ExpectInvalid(ValidateBatchSpec(BatchSpec::Explicit({kMaxBaselineSequenceLength + 1})),
                "lengths[0] must be at most 16777216");
  ExpectInvalid(ValidateBatchSpec(BatchSpec::Uniform(0, 8)), "uniform max_length L must be positive, got 0");
  ExpectInvalid(ValidateBatchSpec(BatchSpec::Uniform(8, 0)), "uniform batch_size b must be positive, got 0");
  ExpectInvalid(ValidateBatchSpec(BatchSpec::Uniform(kMaxBaselineSequenceLength + 1, 1)),
                "uniform max_length L must be at most");
  ExpectInvalid(ComputeBatchMoments(BatchSpec::Explicit({})).status(), "no sequence lengths");

  BaselineWorkload workload;
  workload.shape = Shape(64, 4);
  workload.batch = BatchSpec::Explicit({3, 0});
  ExpectInvalid(ComputeBaselines(workload).status(), "lengths[1] must be positive");
  workload.batch = BatchSpec::Explicit({3});
  workload.shape.heads = 5;
  ExpectInvalid(ComputeBaselines(workload).status(), "divisible");
}

}  // namespace
}  // namespace slimfit::planner
