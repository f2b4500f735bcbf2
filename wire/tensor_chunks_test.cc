#include "wire/tensor_chunks.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "performer/file_backed_tensors.h"
#include "performer/performer_model.h"

namespace slimfit::performer {
namespace {

using ::testing::HasSubstr;

std::vector<TensorSpec> Specs() { return {{"a", {3, 5}}, {"b", {7}}}; }

std::vector<at::Tensor> Tensors(at::ScalarType type) {
  return {at::arange(15, at::TensorOptions().dtype(type)).reshape({3, 5}),
          at::linspace(-1, 1, 7, at::TensorOptions().dtype(type))};
}

std::vector<v1::TensorChunk> Chunks(DType dtype, int64_t max_bytes) {
  std::vector<v1::TensorChunk> chunks;
  absl::Status status = ChunkTensors(
      {"a", "b"}, Tensors(at::kDouble), dtype,
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
    for (const v1::TensorChunk& c : chunks)
      EXPECT_LE(static_cast<int64_t>(c.data().size()), 10 / element * element);
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
  EXPECT_THAT(first_error([](auto* c) { (*c)[0].set_name("b"); }).message(),
              HasSubstr("expected a chunk of \"a\""));
  EXPECT_THAT(first_error([](auto* c) { (*c)[1].set_offset(0); }).message(), HasSubstr("expected offset 16"));
  EXPECT_THAT(first_error([](auto* c) { (*c)[0].set_dtype(v1::DTYPE_FLOAT64); }).message(),
              HasSubstr("dtype"));
  EXPECT_THAT(first_error([](auto* c) { (*c)[0].set_shape(0, 4); }).message(), HasSubstr("shape [4, 5]"));
  EXPECT_THAT(first_error([](auto* c) { (*c)[0].mutable_data()->pop_back(); }).message(),
              HasSubstr("whole number of elements"));
  EXPECT_THAT(first_error([](auto* c) { c->pop_back(); }).message(),
              HasSubstr("\"b\" (2 of 2) is incomplete"));
  EXPECT_THAT(first_error([](auto* c) { c->push_back(c->back()); }).message(), HasSubstr("already complete"));
  EXPECT_THAT(first_error([](auto* c) { (*c)[3].mutable_data()->append(std::string(8, 'x')); }).message(),
              HasSubstr("gradient of shard 3"));
  EXPECT_TRUE(first_error([](auto*) {}).ok());
}

TEST(TensorChunksTest, StopsWhenTheReceiverStops) {
  int calls = 0;
  absl::Status status = ChunkTensors(
      {"a", "b"}, Tensors(at::kFloat), DType::kFloat32, [&](const v1::TensorChunk&) { return ++calls < 2; },
      8);
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(calls, 2);
}

// ────────────────────────────── Compressed chunks (tensor_codec.h) ──────────────────────────────

constexpr int64_t kBlock = v1::LIMIT_INT8_BLOCK_ELEMENTS;

// Three tensors: "w" of 900 elements (int8: three whole blocks and one of 132), "v" of exactly two
// blocks, "s" of 7 elements (one partial block).
std::vector<TensorSpec> EncodedSpecs() { return {{"w", {3, 300}}, {"v", {512}}, {"s", {7}}}; }
std::vector<std::string> EncodedNames() { return {"w", "v", "s"}; }

std::vector<EncodedTensor> EncodedTensors(v1::Compression compression) {
  at::manual_seed(42);
  std::vector<EncodedTensor> encoded;
  for (const TensorSpec& spec : EncodedSpecs()) {
    // Magnitudes differ block to block so int8 scales differ.
    at::Tensor x = at::randn(spec.shape) * at::pow(10.0, at::randint(-3, 3, spec.shape).to(at::kFloat));
    absl::StatusOr<EncodedTensor> e = EncodeTensor(x, compression);
    EXPECT_TRUE(e.ok()) << e.status();
    encoded.push_back(e.ok() ? *std::move(e) : EncodedTensor{});
  }
  return encoded;
}

std::vector<v1::TensorChunk> EncodedChunks(const std::vector<EncodedTensor>& tensors, DType dtype,
                                           int64_t max_bytes) {
  std::vector<v1::TensorChunk> chunks;
  absl::Status status = ChunkEncoded(
      EncodedNames(), tensors, dtype,
      [&](const v1::TensorChunk& c) {
        chunks.push_back(c);
        return true;
      },
      max_bytes);
  EXPECT_TRUE(status.ok()) << status;
  return chunks;
}

bool SameBits(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) return false;
  at::Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), static_cast<size_t>(x.numel() * x.element_size())) == 0;
}

constexpr v1::Compression kEncodings[] = {v1::COMPRESSION_FLOAT16, v1::COMPRESSION_BFLOAT16,
                                          v1::COMPRESSION_INT8};

TEST(TensorChunksTest, EncodedChunksRoundTripBitForBit) {
  for (v1::Compression compression : kEncodings) {
    const std::vector<EncodedTensor> tensors = EncodedTensors(compression);
    const int64_t wire_element = CompressedElementBytes(compression);
    const bool int8 = compression == v1::COMPRESSION_INT8;
    for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
      // float16/bfloat16: 10 bytes → 5 elements per chunk, 22 bytes → 11; int8: 600 bytes → two
      // blocks, 100 bytes → one block (at least one block even past max_chunk_bytes).
      for (int64_t max_bytes : int8 ? std::vector<int64_t>{600, 100} : std::vector<int64_t>{10, 22}) {
        SCOPED_TRACE(CompressionName(compression) + (dtype == DType::kFloat32 ? " float32 " : " float64 ") +
                     std::to_string(max_bytes));
        const int64_t per_chunk =
            int8 ? std::max(kBlock, max_bytes / kBlock * kBlock) : max_bytes / wire_element;
        const std::vector<v1::TensorChunk> chunks = EncodedChunks(tensors, dtype, max_bytes);
        const int64_t element = DTypeBytes(dtype);

        // Every chunk: the tensor's name, dtype and shape, the encoding, contiguous offsets in
        // dtype bytes, full chunks but the last of a tensor, the scales of the blocks it covers.
        size_t next = 0;
        int64_t want_chunks = 0;
        for (size_t t = 0; t < tensors.size(); ++t) {
          const EncodedTensor& tensor = tensors[t];
          const int64_t n = tensor.numel();
          want_chunks += (n + per_chunk - 1) / per_chunk;
          for (int64_t first = 0; first < n; first += per_chunk, ++next) {
            ASSERT_LT(next, chunks.size());
            const v1::TensorChunk& c = chunks[next];
            const int64_t count = std::min(per_chunk, n - first);
            EXPECT_EQ(c.name(), EncodedNames()[t]);
            EXPECT_EQ(c.dtype(), dtype == DType::kFloat32 ? v1::DTYPE_FLOAT32 : v1::DTYPE_FLOAT64);
            EXPECT_EQ(std::vector<int64_t>(c.shape().begin(), c.shape().end()), tensor.shape);
            EXPECT_EQ(c.compression(), compression);
            EXPECT_EQ(c.offset(), first * element);
            EXPECT_EQ(static_cast<int64_t>(c.data().size()), count * wire_element);
            EXPECT_EQ(c.data(), tensor.data.substr(first * wire_element, count * wire_element));
            if (int8) {
              EXPECT_EQ(first % kBlock, 0);
              if (first + count < n) {
                EXPECT_EQ(count % kBlock, 0);
              }
              const int64_t blocks = (count + kBlock - 1) / kBlock;
              ASSERT_EQ(c.scales_size(), blocks);
              for (int64_t b = 0; b < blocks; ++b) EXPECT_EQ(c.scales(b), tensor.scales[first / kBlock + b]);
            } else {
              EXPECT_LE(static_cast<int64_t>(c.data().size()), max_bytes);
              EXPECT_EQ(c.scales_size(), 0);
            }
          }
        }
        EXPECT_EQ(static_cast<int64_t>(chunks.size()), want_chunks);

        TensorAssembler assembler(EncodedSpecs(), dtype, "parameters", compression);
        for (const v1::TensorChunk& c : chunks) {
          absl::Status added = assembler.Add(c);
          ASSERT_TRUE(added.ok()) << added;
        }
        absl::StatusOr<std::vector<at::Tensor>> assembled = assembler.Finish();
        ASSERT_TRUE(assembled.ok()) << assembled.status();
        ASSERT_EQ(assembled->size(), tensors.size());
        int64_t wire_bytes = 0;
        for (size_t t = 0; t < tensors.size(); ++t) {
          absl::StatusOr<at::Tensor> decoded = DecodeTensor(tensors[t]);
          ASSERT_TRUE(decoded.ok()) << decoded.status();
          EXPECT_TRUE(SameBits((*assembled)[t], decoded->to(ToScalarType(dtype)))) << EncodedNames()[t];
          wire_bytes += tensors[t].wire_bytes();
        }
        // Data bytes and 4 per scale, as ChunkWireBytes counts each chunk.
        EXPECT_EQ(assembler.bytes_received(), wire_bytes);
        int64_t chunk_bytes = 0;
        for (const v1::TensorChunk& c : chunks) chunk_bytes += ChunkWireBytes(c);
        EXPECT_EQ(chunk_bytes, wire_bytes);
      }
    }
  }
}

TEST(TensorChunksTest, DefaultEncodedChunksFillOneMebibyteOfEncodedData) {
  at::manual_seed(43);
  // float16: 2^19 elements per chunk; the second chunk starts at element 2^19, byte 2 MiB of the
  // float32 tensor. int8: 2^20 elements (4096 scales) per chunk.
  for (v1::Compression compression : {v1::COMPRESSION_FLOAT16, v1::COMPRESSION_INT8}) {
    const int64_t n = 1300000;
    absl::StatusOr<EncodedTensor> e = EncodeTensor(at::randn({n}), compression);
    ASSERT_TRUE(e.ok()) << e.status();
    std::vector<v1::TensorChunk> chunks;
    ASSERT_TRUE(ChunkEncoded({"big"}, {*e}, DType::kFloat32, [&](const v1::TensorChunk& c) {
                  chunks.push_back(c);
                  return true;
                }).ok());
    const int64_t per_chunk = v1::LIMIT_MAX_CHUNK_BYTES / CompressedElementBytes(compression);
    ASSERT_EQ(static_cast<int64_t>(chunks.size()), (n + per_chunk - 1) / per_chunk)
        << CompressionName(compression);
    EXPECT_EQ(chunks[0].data().size(), static_cast<size_t>(v1::LIMIT_MAX_CHUNK_BYTES));
    EXPECT_EQ(chunks[1].offset(), per_chunk * 4);
    if (compression == v1::COMPRESSION_INT8) {
      EXPECT_EQ(chunks[0].scales_size(), v1::LIMIT_MAX_CHUNK_BYTES / kBlock);
      EXPECT_EQ(chunks.back().scales_size(), (n - per_chunk + kBlock - 1) / kBlock);
    }
    TensorAssembler assembler({{"big", {n}}}, DType::kFloat32, "gradient", compression);
    for (const v1::TensorChunk& c : chunks) ASSERT_TRUE(assembler.Add(c).ok());
    absl::StatusOr<std::vector<at::Tensor>> assembled = assembler.Finish();
    ASSERT_TRUE(assembled.ok()) << assembled.status();
    EXPECT_TRUE(SameBits((*assembled)[0], *DecodeTensor(*e)));
    EXPECT_EQ(assembler.bytes_received(), e->wire_bytes());
  }
}

// Streams `chunks` through an assembler with a sink that writes each chunk's values where they
// belong in tensors of `specs`; those tensors, or the first error.
absl::StatusOr<std::vector<at::Tensor>> Streamed(const std::vector<TensorSpec>& specs, DType dtype,
                                                 v1::Compression compression,
                                                 const std::vector<v1::TensorChunk>& chunks) {
  std::vector<at::Tensor> out;
  for (const TensorSpec& spec : specs) out.push_back(at::full(spec.shape, 7.0, ToScalarType(dtype)));
  int64_t calls = 0;
  TensorAssembler assembler(specs, dtype, "streamed", compression,
                            [&](size_t tensor, int64_t first, const at::Tensor& values) {
                              ++calls;
                              EXPECT_EQ(values.scalar_type(), ToScalarType(dtype));
                              EXPECT_TRUE(values.is_contiguous());
                              out[tensor].view({-1}).narrow(0, first, values.numel()).copy_(values);
                              return absl::OkStatus();
                            });
  for (const v1::TensorChunk& c : chunks) {
    if (absl::Status s = assembler.Add(c); !s.ok()) return s;
  }
  absl::StatusOr<std::vector<at::Tensor>> finished = assembler.Finish();
  if (!finished.ok()) return finished.status();
  EXPECT_TRUE(finished->empty());  // nothing was held
  EXPECT_EQ(calls, static_cast<int64_t>(chunks.size()));
  return out;
}

TEST(TensorChunksTest, AStreamingAssemblerHandsOnExactlyWhatItWouldHaveAssembled) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    const std::vector<v1::TensorChunk> chunks = Chunks(dtype, 10);
    TensorAssembler assembler(Specs(), dtype, "test");
    for (const v1::TensorChunk& c : chunks) ASSERT_TRUE(assembler.Add(c).ok());
    const std::vector<at::Tensor> assembled = *assembler.Finish();
    absl::StatusOr<std::vector<at::Tensor>> streamed = Streamed(Specs(), dtype, v1::COMPRESSION_NONE, chunks);
    ASSERT_TRUE(streamed.ok()) << streamed.status();
    for (size_t i = 0; i < assembled.size(); ++i) EXPECT_TRUE(SameBits((*streamed)[i], assembled[i]));
  }
  for (v1::Compression compression : kEncodings) {
    for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
      SCOPED_TRACE(CompressionName(compression) + (dtype == DType::kFloat32 ? " float32" : " float64"));
      const std::vector<EncodedTensor> tensors = EncodedTensors(compression);
      const std::vector<v1::TensorChunk> chunks =
          EncodedChunks(tensors, dtype, compression == v1::COMPRESSION_INT8 ? 600 : 22);
      TensorAssembler assembler(EncodedSpecs(), dtype, "test", compression);
      for (const v1::TensorChunk& c : chunks) ASSERT_TRUE(assembler.Add(c).ok());
      const std::vector<at::Tensor> assembled = *assembler.Finish();
      absl::StatusOr<std::vector<at::Tensor>> streamed = Streamed(EncodedSpecs(), dtype, compression, chunks);
      ASSERT_TRUE(streamed.ok()) << streamed.status();
      for (size_t i = 0; i < tensors.size(); ++i) EXPECT_TRUE(SameBits((*streamed)[i], assembled[i]));
    }
  }
}

TEST(TensorChunksTest, AStreamingAssemblerChecksChunksAndPassesOnItsSinksError) {
  const std::vector<v1::TensorChunk> chunks = Chunks(DType::kFloat32, 16);
  std::vector<v1::TensorChunk> misnamed = chunks;
  misnamed[1].set_name("b");
  EXPECT_THAT(Streamed(Specs(), DType::kFloat32, v1::COMPRESSION_NONE, misnamed).status().message(),
              HasSubstr("expected a chunk of \"a\""));
  std::vector<v1::TensorChunk> short_of_one = chunks;
  short_of_one.pop_back();
  EXPECT_THAT(Streamed(Specs(), DType::kFloat32, v1::COMPRESSION_NONE, short_of_one).status().message(),
              HasSubstr("\"b\" (2 of 2) is incomplete"));

  int calls = 0;
  TensorAssembler refusing(Specs(), DType::kFloat32, "gradient of shard 4", v1::COMPRESSION_NONE,
                           [&](size_t tensor, int64_t first, const at::Tensor&) {
                             ++calls;
                             return tensor == 0 && first == 8 ? absl::DeadlineExceededError("too late")
                                                              : absl::OkStatus();
                           });
  ASSERT_TRUE(refusing.Add(chunks[0]).ok());
  ASSERT_TRUE(refusing.Add(chunks[1]).ok());
  absl::Status refused = refusing.Add(chunks[2]);                  // elements 8..11 of "a"
  EXPECT_EQ(refused.code(), absl::StatusCode::kDeadlineExceeded);  // the sink's code
  EXPECT_THAT(refused.message(), HasSubstr("gradient of shard 4: chunk of \"a\" at offset 32: too late"));
  EXPECT_EQ(calls, 3);
}

TEST(TensorChunksTest, ChunkEncodedRefusesWhatItCannotSend) {
  auto emit = [](const v1::TensorChunk&) { return true; };
  const std::vector<EncodedTensor> tensors = EncodedTensors(v1::COMPRESSION_INT8);
  EXPECT_EQ(ChunkEncoded({"w", "v"}, tensors, DType::kFloat32, emit).code(),
            absl::StatusCode::kInvalidArgument);

  EncodedTensor truncated = tensors[0];
  truncated.data.pop_back();
  EXPECT_EQ(ChunkEncoded({"w"}, {truncated}, DType::kFloat32, emit).code(),
            absl::StatusCode::kInvalidArgument);

  EncodedTensor exact = tensors[0];
  exact.compression = v1::COMPRESSION_NONE;
  EXPECT_EQ(ChunkEncoded({"w"}, {exact}, DType::kFloat32, emit).code(), absl::StatusCode::kInvalidArgument);

  int calls = 0;
  absl::Status stopped = ChunkEncoded(
      EncodedNames(), tensors, DType::kFloat32, [&](const v1::TensorChunk&) { return ++calls < 2; }, 256);
  EXPECT_EQ(stopped.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(calls, 2);
}

// Feeds `chunks` (after `corrupt`) to an assembler for `compression`; the first error, or Finish's.
absl::Status FirstError(std::vector<v1::TensorChunk> chunks, v1::Compression compression,
                        const std::function<void(std::vector<v1::TensorChunk>*)>& corrupt,
                        DType dtype = DType::kFloat32) {
  corrupt(&chunks);
  TensorAssembler assembler(EncodedSpecs(), dtype, "pseudo-gradient of shard 5", compression);
  for (const v1::TensorChunk& c : chunks) {
    absl::Status s = assembler.Add(c);
    if (!s.ok()) return s;
  }
  return assembler.Finish().status();
}

// Expects INVALID_ARGUMENT naming the stream and `what`.
void ExpectRefused(const absl::Status& status, const std::string& what) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("pseudo-gradient of shard 5"));
  EXPECT_THAT(status.message(), HasSubstr(what));
}

TEST(TensorChunksTest, AssemblerRefusesMixedEncodings) {
  const std::vector<v1::TensorChunk> int8 =
      EncodedChunks(EncodedTensors(v1::COMPRESSION_INT8), DType::kFloat32, 256);
  const std::vector<v1::TensorChunk> half =
      EncodedChunks(EncodedTensors(v1::COMPRESSION_FLOAT16), DType::kFloat32, 64);
  auto none = [](auto*) {};
  // A compressed stream to an exact assembler (NONE, or UNSPECIFIED which means the same).
  ExpectRefused(FirstError(int8, v1::COMPRESSION_NONE, none), "encoding int8, expected none");
  ExpectRefused(FirstError(half, v1::COMPRESSION_UNSPECIFIED, none), "encoding float16, expected none");
  // Another compressed encoding, even of the same width.
  ExpectRefused(FirstError(half, v1::COMPRESSION_BFLOAT16, none), "encoding float16, expected bfloat16");
  ExpectRefused(FirstError(half, v1::COMPRESSION_INT8, none), "encoding float16, expected int8");
  // One chunk of the stream in another encoding.
  ExpectRefused(FirstError(half, v1::COMPRESSION_FLOAT16,
                           [](auto* c) { (*c)[2].set_compression(v1::COMPRESSION_BFLOAT16); }),
                "encoding bfloat16");

  // Exact chunks to a compressed assembler, with the compression field unset or NONE.
  std::vector<v1::TensorChunk> exact;
  ASSERT_TRUE(ChunkTensors(
                  EncodedNames(), {at::zeros({3, 300}), at::zeros({512}), at::zeros({7})}, DType::kFloat32,
                  [&](const v1::TensorChunk& c) {
                    exact.push_back(c);
                    return true;
                  },
                  1024)
                  .ok());
  for (v1::Compression compression : kEncodings) {
    ExpectRefused(FirstError(exact, compression, none),
                  "encoding none, expected " + CompressionName(compression));
    ExpectRefused(
        FirstError(exact, compression, [](auto* c) { (*c)[0].set_compression(v1::COMPRESSION_NONE); }),
        "encoding none");
  }
  // Exact chunks that say NONE, or leave it unset, are what an exact assembler takes.
  EXPECT_TRUE(FirstError(exact, v1::COMPRESSION_NONE, none).ok());
  EXPECT_TRUE(FirstError(exact, v1::COMPRESSION_UNSPECIFIED, [](auto* c) {
                for (auto& chunk : *c) chunk.set_compression(v1::COMPRESSION_NONE);
              }).ok());
}

TEST(TensorChunksTest, AssemblerRefusesScalesWhereThereAreNone) {
  const std::vector<v1::TensorChunk> half =
      EncodedChunks(EncodedTensors(v1::COMPRESSION_BFLOAT16), DType::kFloat32, 64);
  ExpectRefused(FirstError(half, v1::COMPRESSION_BFLOAT16, [](auto* c) { (*c)[1].add_scales(1.0f); }),
                "1 scales on a chunk that is not int8");
  std::vector<v1::TensorChunk> exact;
  ASSERT_TRUE(ChunkTensors(EncodedNames(), {at::zeros({3, 300}), at::zeros({512}), at::zeros({7})},
                           DType::kFloat32,
                           [&](const v1::TensorChunk& c) {
                             exact.push_back(c);
                             return true;
                           })
                  .ok());
  ExpectRefused(FirstError(exact, v1::COMPRESSION_NONE, [](auto* c) { (*c)[0].add_scales(0.0f); }),
                "not int8");
}

TEST(TensorChunksTest, AssemblerRefusesBadInt8Chunks) {
  const std::vector<EncodedTensor> tensors = EncodedTensors(v1::COMPRESSION_INT8);
  // One block per chunk: "w" in chunks 0..3 (the last 132 elements), "v" in 4..5, "s" in 6.
  const std::vector<v1::TensorChunk> chunks = EncodedChunks(tensors, DType::kFloat32, 256);
  ASSERT_EQ(chunks.size(), 7u);
  ASSERT_EQ(chunks[3].data().size(), 132u);
  EXPECT_TRUE(FirstError(chunks, v1::COMPRESSION_INT8, [](auto*) {}).ok());

  // A chunk that ends inside a block, short of the tensor's end: the first 100 elements of "w".
  ExpectRefused(
      FirstError(chunks, v1::COMPRESSION_INT8, [](auto* c) { (*c)[0].mutable_data()->resize(100); }),
      "block");
  // ... or 300 elements (a block and a bit), with both scales.
  ExpectRefused(FirstError(chunks, v1::COMPRESSION_INT8,
                           [](auto* c) {
                             (*c)[0].mutable_data()->append((*c)[1].data().substr(0, 44));
                             (*c)[0].add_scales((*c)[1].scales(0));
                           }),
                "block");
  // Two chunks merged into one of 512 elements is fine (block boundaries, two scales).
  EXPECT_TRUE(FirstError(chunks, v1::COMPRESSION_INT8, [](auto* c) {
                (*c)[0].mutable_data()->append((*c)[1].data());
                (*c)[0].add_scales((*c)[1].scales(0));
                c->erase(c->begin() + 1);
              }).ok());

  // Wrong scale counts.
  ExpectRefused(FirstError(chunks, v1::COMPRESSION_INT8, [](auto* c) { (*c)[1].clear_scales(); }), "scales");
  ExpectRefused(FirstError(chunks, v1::COMPRESSION_INT8, [](auto* c) { (*c)[1].add_scales(1.0f); }),
                "scales");
  ExpectRefused(FirstError(chunks, v1::COMPRESSION_INT8, [](auto* c) { (*c)[3].add_scales(1.0f); }),
                "scales");
  // Negative and non-finite scales.
  ExpectRefused(FirstError(chunks, v1::COMPRESSION_INT8, [](auto* c) { (*c)[2].set_scales(0, -1.0f); }),
                "scale 0");
  ExpectRefused(FirstError(chunks, v1::COMPRESSION_INT8,
                           [](auto* c) { (*c)[6].set_scales(0, std::numeric_limits<float>::quiet_NaN()); }),
                "scale 0");
  ExpectRefused(FirstError(chunks, v1::COMPRESSION_INT8,
                           [](auto* c) { (*c)[4].set_scales(0, std::numeric_limits<float>::infinity()); }),
                "scale 0");
  // The value −128.
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    ExpectRefused(FirstError(
                      EncodedChunks(tensors, dtype, 256), v1::COMPRESSION_INT8,
                      [](auto* c) { (*(*c)[5].mutable_data())[17] = static_cast<char>(0x80); }, dtype),
                  "-128");
  }
}

TEST(TensorChunksTest, AssemblerRefusesBadCompressedOffsetsAndSizes) {
  const std::vector<v1::TensorChunk> half =
      EncodedChunks(EncodedTensors(v1::COMPRESSION_FLOAT16), DType::kFloat32, 64);  // 32 elements each
  // The offset counts float32 bytes (element × 4), not encoded bytes (element × 2).
  ASSERT_EQ(half[1].offset(), 32 * 4);
  ExpectRefused(FirstError(half, v1::COMPRESSION_FLOAT16, [](auto* c) { (*c)[1].set_offset(64); }),
                "expected offset 128");
  // Half an element.
  ExpectRefused(
      FirstError(half, v1::COMPRESSION_FLOAT16, [](auto* c) { (*c)[0].mutable_data()->pop_back(); }),
      "whole number of elements");
  // Data past the tensor's end ("s" has 7 elements: 28 float32 bytes).
  ExpectRefused(FirstError(half, v1::COMPRESSION_FLOAT16,
                           [](auto* c) { c->back().mutable_data()->append(std::string(2, '\0')); }),
                "data runs to byte 32 of a 28-byte tensor");
  // Empty data.
  ExpectRefused(FirstError(half, v1::COMPRESSION_FLOAT16, [](auto* c) { (*c)[0].clear_data(); }),
                "0 data bytes");
  // A missing last chunk.
  ExpectRefused(FirstError(half, v1::COMPRESSION_FLOAT16, [](auto* c) { c->pop_back(); }), "incomplete");
}

TEST(TensorChunksTest, AssemblerRefusesOversizedCompressedChunks) {
  // ChunkEncoded's max_chunk_bytes is for tests; a sender that packs more than
  // LIMIT_MAX_CHUNK_BYTES of encoded data (here one block more) into a chunk is refused.
  const int64_t n = v1::LIMIT_MAX_CHUNK_BYTES + kBlock;
  absl::StatusOr<EncodedTensor> e = EncodeTensor(at::ones({n}), v1::COMPRESSION_INT8);
  ASSERT_TRUE(e.ok()) << e.status();
  std::vector<v1::TensorChunk> chunks;
  ASSERT_TRUE(ChunkEncoded(
                  {"big"}, {*e}, DType::kFloat32,
                  [&](const v1::TensorChunk& c) {
                    chunks.push_back(c);
                    return true;
                  },
                  n)
                  .ok());
  ASSERT_EQ(chunks.size(), 1u);
  TensorAssembler assembler({{"big", {n}}}, DType::kFloat32, "gradient", v1::COMPRESSION_INT8);
  absl::Status s = assembler.Add(chunks[0]);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("data bytes; a chunk holds 1..1048576"));
  EXPECT_EQ(assembler.bytes_received(), 0);
}

TEST(TensorChunksTest, BytesReceivedCountsOnlyAcceptedChunks) {
  const std::vector<EncodedTensor> tensors = EncodedTensors(v1::COMPRESSION_INT8);
  const std::vector<v1::TensorChunk> chunks = EncodedChunks(tensors, DType::kFloat64, 600);
  TensorAssembler assembler(EncodedSpecs(), DType::kFloat64, "parameters", v1::COMPRESSION_INT8);
  int64_t want = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (i == 1) {  // a refused chunk first: counts nothing
      v1::TensorChunk bad = chunks[i];
      bad.add_scales(1.0f);
      EXPECT_FALSE(assembler.Add(bad).ok());
      EXPECT_EQ(assembler.bytes_received(), want);
    }
    ASSERT_TRUE(assembler.Add(chunks[i]).ok());
    want += static_cast<int64_t>(chunks[i].data().size()) + 4 * chunks[i].scales_size();
    EXPECT_EQ(assembler.bytes_received(), want);
  }
  int64_t wire_bytes = 0;
  for (const EncodedTensor& t : tensors) wire_bytes += t.wire_bytes();
  EXPECT_EQ(want, wire_bytes);
  EXPECT_EQ(want, 900 + 512 + 7 + 4 * (4 + 2 + 1));
}

}  // namespace
}  // namespace slimfit::performer

namespace slimfit::performer {
namespace {

TEST(TensorChunksTest, AssembledInFilesEqualsAssembledInMemoryAndLeavesTheResidentSet) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    const std::vector<v1::TensorChunk> chunks = Chunks(dtype, 10);
    TensorAssembler in_memory(Specs(), dtype, "test");
    TensorAssembler in_files(Specs(), dtype, "test");
    in_files.AllocateInFiles(::testing::TempDir());
    for (const v1::TensorChunk& c : chunks) {
      ASSERT_TRUE(in_memory.Add(c).ok());
      ASSERT_TRUE(in_files.Add(c).ok());
    }
    const std::vector<at::Tensor> want = *in_memory.Finish();
    absl::StatusOr<std::vector<at::Tensor>> got = in_files.Finish();
    ASSERT_TRUE(got.ok()) << got.status();
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_TRUE(IsFileBacked((*got)[i])) << i;
      EXPECT_EQ(ResidentBytes((*got)[i]), 0) << i;  // released once complete
      EXPECT_TRUE(SameBits((*got)[i], want[i])) << i;
    }
  }
}

TEST(TensorChunksTest, WhereNoFileCanBeMadeTheTensorsAreAssembledInMemory) {
  // The receiver's disk (here: its directory) failing is no fault of the sender's: nothing is refused.
  TensorAssembler assembler(Specs(), DType::kFloat32, "gradient of shard 3");
  assembler.AllocateInFiles("/nonexistent/held-results");
  for (const v1::TensorChunk& c : Chunks(DType::kFloat32, 10)) ASSERT_TRUE(assembler.Add(c).ok());
  EXPECT_EQ(assembler.file_error().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(assembler.file_error().message(), HasSubstr("gradient of shard 3"));
  EXPECT_THAT(assembler.file_error().message(), HasSubstr("/nonexistent/held-results"));
  absl::StatusOr<std::vector<at::Tensor>> got = assembler.Finish();
  ASSERT_TRUE(got.ok()) << got.status();
  std::vector<at::Tensor> want = Tensors(at::kDouble);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_FALSE(IsFileBacked((*got)[i]));
    EXPECT_TRUE(SameBits((*got)[i], want[i].to(at::kFloat))) << i;
  }
}

}  // namespace
}  // namespace slimfit::performer
