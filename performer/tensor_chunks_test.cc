#include "performer/tensor_chunks.h"

#include "performer/performer_model.h"

#include <ATen/ATen.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace slimfit::performer {
namespace {

using ::testing::HasSubstr;

std::vector<TensorSpec> Specs() { return {{"a", {3, 5}}, {"b", {7}}}; }

std::vector<at::Tensor> Tensors(at::ScalarType type) {
  return {at::arange(15, at::TensorOptions().dtype(type)).reshape({3, 5}), at::linspace(-1, 1, 7, at::TensorOptions().dtype(type))};
}

std::vector<v1::TensorChunk> Chunks(DType dtype, int64_t max_bytes) {
  std::vector<v1::TensorChunk> chunks;
  absl::Status status = ChunkTensors({"a", "b"}, Tensors(at::kDouble), dtype,
                                     [&](const v1::TensorChunk& c) {
                                       chunks.push_back(c);
                                       return true;
                                     },
                                     max_bytes);
  EXPECT_TRUE(status.ok()) << status;
  return chunks;
}

TEST(TensorChunksTest, SmallChunksRoundTripExactly) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    // 10 bytes rounds down to 2 float32 / 1 float64 elements per chunk.
    std::vector<v1::TensorChunk> chunks = Chunks(dtype, 10);
    const int64_t element = DTypeBytes(dtype);
    EXPECT_EQ(chunks.size(), dtype == DType::kFloat32 ? 8u + 4u : 15u + 7u);
    for (const v1::TensorChunk& c : chunks) EXPECT_LE(static_cast<int64_t>(c.data().size()), 10 / element * element);
    TensorAssembler assembler(Specs(), dtype, "test");
    for (const v1::TensorChunk& c : chunks) ASSERT_TRUE(assembler.Add(c).ok());
    absl::StatusOr<std::vector<at::Tensor>> tensors = assembler.Finish();
    ASSERT_TRUE(tensors.ok()) << tensors.status();
    std::vector<at::Tensor> want = Tensors(at::kDouble);
    for (at::Tensor& t : want) t = t.to(ToScalarType(dtype));
    EXPECT_TRUE(at::equal((*tensors)[0], want[0]));
    EXPECT_TRUE(at::equal((*tensors)[1], want[1]));
    EXPECT_EQ(assembler.bytes_received(), 22 * element);
  }
}

TEST(TensorChunksTest, DefaultChunksFillOneMebibyte) {
  std::vector<v1::TensorChunk> chunks;
  at::Tensor big = at::zeros({300000}, at::kFloat);  // 1.2 MB → 2 chunks
  ASSERT_TRUE(ChunkTensors({"big"}, {big}, DType::kFloat32, [&](const v1::TensorChunk& c) {
                chunks.push_back(c);
                return true;
              }).ok());
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0].data().size(), static_cast<size_t>(v1::LIMIT_MAX_CHUNK_BYTES));
  EXPECT_EQ(chunks[1].offset(), v1::LIMIT_MAX_CHUNK_BYTES);
}

TEST(TensorChunksTest, AssemblerRejectsEveryKindOfBadChunk) {
  std::vector<v1::TensorChunk> chunks = Chunks(DType::kFloat32, 16);
  auto first_error = [&](const std::function<void(std::vector<v1::TensorChunk>*)>& corrupt) {
    std::vector<v1::TensorChunk> copy = chunks;
    corrupt(&copy);
    TensorAssembler assembler(Specs(), DType::kFloat32, "gradient of shard 3");
    for (const v1::TensorChunk& c : copy) {
      absl::Status s = assembler.Add(c);
      if (!s.ok()) return s;
    }
    return assembler.Finish().status();
  };
  EXPECT_THAT(first_error([](auto* c) { (*c)[0].set_name("b"); }).message(), HasSubstr("expected a chunk of \"a\""));
  EXPECT_THAT(first_error([](auto* c) { (*c)[1].set_offset(0); }).message(), HasSubstr("expected offset 16"));
  EXPECT_THAT(first_error([](auto* c) { (*c)[0].set_dtype(v1::DTYPE_FLOAT64); }).message(), HasSubstr("dtype"));
  EXPECT_THAT(first_error([](auto* c) { (*c)[0].set_shape(0, 4); }).message(), HasSubstr("shape [4, 5]"));
  EXPECT_THAT(first_error([](auto* c) { (*c)[0].mutable_data()->pop_back(); }).message(),
              HasSubstr("whole number of elements"));
  EXPECT_THAT(first_error([](auto* c) { c->pop_back(); }).message(), HasSubstr("\"b\" (2 of 2) is incomplete"));
  EXPECT_THAT(first_error([](auto* c) { c->push_back(c->back()); }).message(), HasSubstr("already complete"));
  EXPECT_THAT(first_error([](auto* c) { (*c)[3].mutable_data()->append(std::string(8, 'x')); }).message(),
              HasSubstr("gradient of shard 3"));
  EXPECT_TRUE(first_error([](auto*) {}).ok());
}

TEST(TensorChunksTest, StopsWhenTheReceiverStops) {
  int calls = 0;
  absl::Status status = ChunkTensors({"a", "b"}, Tensors(at::kFloat), DType::kFloat32,
                                     [&](const v1::TensorChunk&) { return ++calls < 2; }, 8);
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace slimfit::performer
