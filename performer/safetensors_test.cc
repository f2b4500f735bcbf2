#include "performer/safetensors.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace slimfit {
namespace performer {
namespace {

using ::slimfit::base::ReadFileToString;
using ::slimfit::testing_util::TempPath;
using ::testing::HasSubstr;

std::string TestDataPath(absl::string_view name) {
  return testing_util::RunfilePath(absl::StrCat("performer/testdata/", name));
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out) << path;
}

// A safetensors file from a raw header and data section.
std::string MakeFile(const std::string& header, const std::string& data = "") {
  std::string bytes;
  for (int i = 0; i < 8; ++i) {
    bytes.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  }
  return bytes + header + data;
}

// A header holding one tensor 'x' whose fields are the given JSON texts.
std::string OneTensor(const std::string& dtype, const std::string& shape, const std::string& data_offsets) {
  return absl::StrCat(R"({"x": {"dtype": ")", dtype, R"(", "shape": )", shape, R"(, "data_offsets": )",
                      data_offsets, "}}");
}

at::Tensor Ints(std::vector<int64_t> values, at::ScalarType dtype) {
  return at::tensor(values, at::kLong).to(dtype);
}

// Must match reference_tensors() in testdata/make_tensor_file_testdata.py.
TensorFile ReferenceFile() {
  TensorFile file;
  auto& t = file.tensors;
  t["f64"] = at::tensor({1.5, -2.25, 1e300}, at::kDouble);
  t["f32"] = at::arange(6, at::kFloat).reshape({2, 3}) / 4 - 0.5;
  t["f16"] =
      at::tensor({0.5, -1.0, 65504.0, std::ldexp(1.0, -24)}, at::kDouble).to(at::kHalf).reshape({2, 2});
  t["bf16"] = at::tensor({1.0, -3.0, 0.0078125}, at::kDouble).to(at::kBFloat16);
  t["i64"] = at::tensor(
      std::vector<int64_t>{std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), 7});
  t["i32"] = Ints({-5, std::numeric_limits<int32_t>::max()}, at::kInt).reshape({2, 1});
  t["i16"] = Ints({-32768, 32767}, at::kShort);
  t["i8"] = Ints({-128, 0, 127}, at::kChar);
  t["u8"] = Ints({0, 200, 255}, at::kByte);
  t["bool"] = Ints({1, 0, 1}, at::kBool);
  t["scalar"] = at::scalar_tensor(3.25, at::kFloat);
  t["empty"] = at::zeros({2, 0, 3}, at::kFloat);
  file.metadata = {{"format", "pt"}, {"note", "caf\xc3\xa9 \"quoted\""}};
  return file;
}

void ExpectTensorsEqual(const std::map<std::string, at::Tensor>& actual,
                        const std::map<std::string, at::Tensor>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (const auto& [name, want] : expected) {
    SCOPED_TRACE(name);
    auto it = actual.find(name);
    ASSERT_NE(it, actual.end());
    const at::Tensor& got = it->second;
    EXPECT_EQ(got.scalar_type(), want.scalar_type());
    EXPECT_EQ(got.sizes(), want.sizes());
    EXPECT_TRUE(got.device().is_cpu());
    EXPECT_TRUE(got.is_contiguous());
    EXPECT_TRUE(at::equal(got, want.to(at::kCPU)));
  }
}

void ExpectInvalid(const absl::Status& status, const std::string& phrase) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(phrase));
}

absl::Status ParseStatus(const std::string& bytes) { return ParseSafetensors(bytes).status(); }

// --- Round trips -------------------------------------------------------------

TEST(SafetensorsTest, RoundTripsEveryDtype) {
  TensorFile file;
  const std::vector<at::ScalarType> dtypes = {at::kDouble, at::kFloat, at::kHalf, at::kBFloat16, at::kLong,
                                              at::kInt,    at::kShort, at::kChar, at::kByte,     at::kBool};
  for (at::ScalarType dtype : dtypes) {
    at::Tensor values =
        dtype == at::kBool ? at::arange(12, at::kLong).remainder(3).eq(0) : at::arange(12, at::kLong).sub(4);
    file.tensors[absl::StrCat("t_", c10::toString(dtype))] = values.to(dtype).reshape({3, 4});
  }
  absl::StatusOr<std::string> bytes = SerializeSafetensors(file);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<TensorFile> parsed = ParseSafetensors(*bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ExpectTensorsEqual(parsed->tensors, file.tensors);
  EXPECT_TRUE(parsed->metadata.empty());
}

TEST(SafetensorsTest, RoundTripsScalarsAndEmptyTensors) {
  TensorFile file;
  file.tensors["scalar_f64"] = at::scalar_tensor(-0.125, at::kDouble);
  file.tensors["scalar_i8"] = at::scalar_tensor(-7, at::kChar);
  file.tensors["scalar_bool"] = at::scalar_tensor(true, at::kBool);
  file.tensors["empty_1d"] = at::empty({0}, at::kHalf);
  file.tensors["empty_3d"] = at::empty({4, 0, 2}, at::kLong);
  absl::StatusOr<std::string> bytes = SerializeSafetensors(file);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_THAT(*bytes, HasSubstr(R"("scalar_f64":{"dtype":"F64","shape":[],)"));
  EXPECT_THAT(*bytes, HasSubstr(R"("empty_3d":{"dtype":"I64","shape":[4,0,2],)"));
  absl::StatusOr<TensorFile> parsed = ParseSafetensors(*bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ExpectTensorsEqual(parsed->tensors, file.tensors);
  EXPECT_EQ(parsed->tensors.at("scalar_f64").dim(), 0);
  EXPECT_EQ(parsed->tensors.at("scalar_f64").item<double>(), -0.125);
  EXPECT_EQ(parsed->tensors.at("empty_3d").numel(), 0);
}

TEST(SafetensorsTest, EmptyFileIsAPaddedEmptyObject) {
  absl::StatusOr<std::string> bytes = SerializeSafetensors(TensorFile{});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, std::string("\x08\0\0\0\0\0\0\0{}      ", 16));
  absl::StatusOr<TensorFile> parsed = ParseSafetensors(*bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->tensors.empty());
  EXPECT_TRUE(parsed->metadata.empty());
}

TEST(SafetensorsTest, RoundTripsMetadataFirstInHeader) {
  TensorFile file;
  file.tensors["a"] = at::ones({2}, at::kFloat);
  file.metadata = {{"format", "pt"},
                   {"empty", ""},
                   {"quote\"and\\slash", "line\nbreak"},
                   {"unicode", "\xe6\x97\xa5\xe6\x9c\xac"}};
  absl::StatusOr<std::string> bytes = SerializeSafetensors(file);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(bytes->substr(8, 17), R"({"__metadata__":{)");
  EXPECT_EQ((bytes->size() - 8 - 8) % 8, 0u);  // header is padded
  absl::StatusOr<TensorFile> parsed = ParseSafetensors(*bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->metadata, file.metadata);
  ExpectTensorsEqual(parsed->tensors, file.tensors);
}

TEST(SafetensorsTest, SavesValuesOfNonContiguousTensors) {
  at::Tensor base = at::arange(24, at::kFloat).reshape({4, 6});
  TensorFile file;
  file.tensors["transposed"] = base.t();
  file.tensors["strided"] = base.slice(/*dim=*/1, /*start=*/1, /*end=*/6,
                                       /*step=*/2);
  file.tensors["offset"] = base[2];
  file.tensors["expanded"] = at::arange(3, at::kInt).expand({2, 3});
  file.tensors["negated"] = at::_neg_view(base);
  absl::StatusOr<std::string> bytes = SerializeSafetensors(file);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<TensorFile> parsed = ParseSafetensors(*bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ExpectTensorsEqual(parsed->tensors, file.tensors);
  EXPECT_TRUE(at::equal(parsed->tensors.at("negated"), -base));
}

TEST(SafetensorsTest, ParsedTensorsOwnTheirMemory) {
  TensorFile file;
  file.tensors["x"] = at::arange(16, at::kInt);
  std::string bytes = *SerializeSafetensors(file);
  absl::StatusOr<TensorFile> parsed = ParseSafetensors(bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  std::fill(bytes.begin(), bytes.end(), '\xff');
  bytes.clear();
  bytes.shrink_to_fit();
  ExpectTensorsEqual(parsed->tensors, file.tensors);
}

TEST(SafetensorsTest, AcceptsOtherHeaderOrderAndIgnoresUnknownFields) {
  // Another writer's layout: data in non-name order, fields reordered,
  // an extra field, whitespace.
  const std::string header = R"( { "b": {"data_offsets": [0, 4], "shape": [2],
      "dtype": "I16", "extra": {"x": 1}},
    "a": {"dtype": "U8", "shape": [1], "data_offsets": [4, 5]} }  )";
  const std::string data("\x01\x00\xfe\xff\x09", 5);
  absl::StatusOr<TensorFile> parsed = ParseSafetensors(MakeFile(header, data));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ExpectTensorsEqual(parsed->tensors, {{"a", Ints({9}, at::kByte)}, {"b", Ints({1, -2}, at::kShort)}});
}

// --- Compatibility with an independently written file ------------------------

TEST(SafetensorsTest, ReadsIndependentlyWrittenFile) {
  const std::string path = TestDataPath("reference.safetensors");
  absl::StatusOr<TensorFile> read = ReadSafetensors(path);
  ASSERT_TRUE(read.ok()) << read.status();
  const TensorFile expected = ReferenceFile();
  ExpectTensorsEqual(read->tensors, expected.tensors);
  EXPECT_EQ(read->metadata, expected.metadata);

  absl::StatusOr<std::string> bytes = base::ReadFileToString(path);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<TensorFile> parsed = ParseSafetensors(*bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ExpectTensorsEqual(parsed->tensors, expected.tensors);
  EXPECT_EQ(parsed->metadata, expected.metadata);
}

TEST(SafetensorsTest, WritesByteIdenticalFile) {
  absl::StatusOr<std::string> read = base::ReadFileToString(TestDataPath("reference.safetensors"));
  ASSERT_TRUE(read.ok()) << read.status();
  const std::string& reference = *read;
  absl::StatusOr<std::string> from_scratch = SerializeSafetensors(ReferenceFile());
  ASSERT_TRUE(from_scratch.ok()) << from_scratch.status();
  EXPECT_EQ(*from_scratch, reference);

  absl::StatusOr<TensorFile> parsed = ParseSafetensors(reference);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  absl::StatusOr<std::string> round_trip = SerializeSafetensors(*parsed);
  ASSERT_TRUE(round_trip.ok()) << round_trip.status();
  EXPECT_EQ(*round_trip, reference);
}

TEST(SafetensorsTest, EveryTruncationIsAnErrorNeverACrash) {
  absl::StatusOr<std::string> read = base::ReadFileToString(TestDataPath("reference.safetensors"));
  ASSERT_TRUE(read.ok()) << read.status();
  const std::string& bytes = *read;
  ASSERT_GT(bytes.size(), 8u);
  const std::string path = TempPath("truncated.safetensors");
  for (size_t n = 0; n < bytes.size(); ++n) {
    SCOPED_TRACE(n);
    const std::string prefix = bytes.substr(0, n);
    EXPECT_EQ(ParseStatus(prefix).code(), absl::StatusCode::kInvalidArgument);
    WriteBytes(path, prefix);
    absl::Status status = ReadSafetensors(path).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()), HasSubstr(path));
  }
}

// --- Corrupt input -----------------------------------------------------------

TEST(SafetensorsTest, RejectsShortFile) {
  ExpectInvalid(ParseStatus(""), "0 bytes, shorter than the 8-byte");
  ExpectInvalid(ParseStatus(std::string("\x02\0\0", 3)), "3 bytes, shorter than the 8-byte");
}

TEST(SafetensorsTest, RejectsHeaderLengthBeyondFile) {
  std::string bytes = MakeFile("{}      ");
  bytes[0] = 9;
  ExpectInvalid(ParseStatus(bytes),
                "header length 9 exceeds the 8 bytes that follow the length "
                "prefix (file truncated?)");
}

TEST(SafetensorsTest, RejectsAbsurdHeaderLength) {
  std::string bytes = MakeFile("{}");
  bytes.replace(0, 8, std::string("\0\0\0\0\0\x01\0\0", 8));  // 2^40
  ExpectInvalid(ParseStatus(bytes), "header length 1099511627776 exceeds the limit of 104857600");
}

TEST(SafetensorsTest, RejectsMalformedJson) {
  ExpectInvalid(ParseStatus(MakeFile(R"({"a": )")), "header is not valid JSON");
  ExpectInvalid(ParseStatus(MakeFile("{} trailing")), "not valid JSON");
  ExpectInvalid(ParseStatus(MakeFile("\"\xff\xfe\"")), "not valid JSON");
  ExpectInvalid(ParseStatus(MakeFile("[1, 2]")), "header is a JSON array, expected an object");
}

TEST(SafetensorsTest, RejectsEntryWithMissingOrMistypedFields) {
  ExpectInvalid(ParseStatus(MakeFile(R"({"w": 3})")),
                "tensor 'w' entry is a JSON number, expected an object");
  ExpectInvalid(ParseStatus(MakeFile(R"({"w": {"shape": [], "data_offsets": [0, 0]}})")),
                "tensor 'w' has no \"dtype\"");
  ExpectInvalid(ParseStatus(MakeFile(R"({"w": {"dtype": "U8", "data_offsets": [0, 0]}})")),
                "tensor 'w' has no \"shape\"");
  ExpectInvalid(ParseStatus(MakeFile(R"({"w": {"dtype": "U8", "shape": []}})")),
                "tensor 'w' has no \"data_offsets\"");
  ExpectInvalid(ParseStatus(MakeFile(R"({"w": {"dtype": 5, "shape": [], "data_offsets": [0, 1]}})")),
                "tensor 'w' dtype is a JSON number, expected a string");
  ExpectInvalid(ParseStatus(MakeFile(R"({"w": {"dtype": "U8", "shape": "1", "data_offsets": [0, 1]}})")),
                "tensor 'w' shape is a JSON string, expected an array");
  ExpectInvalid(ParseStatus(MakeFile(R"({"w": {"dtype": "U8", "shape": [1.5], "data_offsets": [0, 1]}})")),
                "tensor 'w' shape[0] is 1.5, expected a non-negative integer");
  ExpectInvalid(ParseStatus(MakeFile(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [1]}})")),
                "tensor 'w' data_offsets is [1], expected [begin, end]");
  ExpectInvalid(ParseStatus(MakeFile(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [-1, 0]}})")),
                "tensor 'w' data_offsets is [-1,0], expected [begin, end]");
}

TEST(SafetensorsTest, RejectsUnknownDtype) {
  ExpectInvalid(ParseStatus(MakeFile(R"({"z": {"dtype": "C64", "shape": [], "data_offsets": [0, 8]}})",
                                     std::string(8, '\0'))),
                "tensor 'z' has unsupported dtype \"C64\" (supported: F64, "
                "F32, F16, BF16, I64, I32, I16, I8, U8, BOOL)");
}

TEST(SafetensorsTest, RejectsBadDimensions) {
  ExpectInvalid(ParseStatus(MakeFile(OneTensor("F32", "[3, -2]", "[0, 0]"))),
                "tensor 'x' has negative dimension -2 at shape[1]");
  ExpectInvalid(ParseStatus(MakeFile(OneTensor("U8", "[9223372036854775808]", "[0, 0]"))),
                "tensor 'x' dimension 9223372036854775808 at shape[0] does not fit in "
                "int64");
  ExpectInvalid(ParseStatus(MakeFile(OneTensor("F32", "[4611686018427387904, 8]", "[0, 0]"))),
                "tensor 'x' shape [4611686018427387904, 8] is too large");
  // LibTorch cannot allocate such a shape even when it has no elements.
  ExpectInvalid(ParseStatus(MakeFile(OneTensor("U8", "[4611686018427387904, 8, 0]", "[0, 0]"))),
                "is too large: its dimensions multiply past 2^63 bytes");
}

TEST(SafetensorsTest, RejectsBadOffsets) {
  ExpectInvalid(ParseStatus(MakeFile(OneTensor("U8", "[4]", "[8, 4]"), std::string(8, '\0'))),
                "tensor 'x' data_offsets [8, 4] have begin > end");
  ExpectInvalid(ParseStatus(MakeFile(OneTensor("F32", "[1024]", "[0, 4096]"), std::string(1024, '\0'))),
                "tensor 'x' data_offsets [0, 4096] exceed the 1024-byte data "
                "section (file truncated?)");
  ExpectInvalid(ParseStatus(MakeFile(OneTensor("F32", "[2, 3]", "[0, 20]"), std::string(20, '\0'))),
                "tensor 'x' of dtype F32 and shape [2, 3] needs 24 bytes, but "
                "data_offsets [0, 20] span 20");
}

TEST(SafetensorsTest, RejectsOverlapsHolesAndTrailingBytes) {
  const std::string data(12, '\0');
  ExpectInvalid(ParseStatus(MakeFile(
                    R"({"a": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]},
              "b": {"dtype": "U8", "shape": [8], "data_offsets": [4, 12]}})",
                    data)),
                "tensor 'b' data_offsets [4, 12] overlap tensor 'a' data_offsets [0, 8]");
  ExpectInvalid(ParseStatus(MakeFile(
                    R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
              "b": {"dtype": "U8", "shape": [4], "data_offsets": [8, 12]}})",
                    data)),
                "bytes [4, 8) of the data section belong to no tensor");
  ExpectInvalid(
      ParseStatus(MakeFile(R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}})", data)),
      "the data section is 12 bytes but the tensors cover only the first 4");
}

TEST(SafetensorsTest, RejectsDuplicateKeys) {
  ExpectInvalid(ParseStatus(MakeFile(
                    R"({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
              "a": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}})",
                    "xy")),
                "header has duplicate tensor name 'a'");
  ExpectInvalid(ParseStatus(MakeFile(R"({"__metadata__": {"k": "1", "k": "2"}})")),
                "header has duplicate key 'k'");
}

TEST(SafetensorsTest, RejectsBadMetadata) {
  ExpectInvalid(ParseStatus(MakeFile(R"({"__metadata__": {"k": 1}})")),
                "\"__metadata__\" value of key 'k' is a number, expected a "
                "string");
  ExpectInvalid(ParseStatus(MakeFile(R"({"__metadata__": ["k"]})")),
                "\"__metadata__\" is a JSON array, expected an object");
}

TEST(SafetensorsTest, RejectsInvalidBoolBytes) {
  ExpectInvalid(ParseStatus(MakeFile(R"({"m": {"dtype": "BOOL", "shape": [3], "data_offsets": [0, 3]}})",
                                     std::string("\x01\x00\x02", 3))),
                "tensor 'm' element 2 is byte 2; BOOL elements must be 0 or 1");
}

// --- Serialization errors ----------------------------------------------------

TEST(SafetensorsTest, SerializeRejectsUnsavableInput) {
  TensorFile undefined;
  undefined.tensors["u"] = at::Tensor();
  ExpectInvalid(SerializeSafetensors(undefined).status(), "tensor 'u' is undefined");

  TensorFile complex;
  complex.tensors["c"] = at::zeros({2}, at::kComplexFloat);
  ExpectInvalid(SerializeSafetensors(complex).status(),
                "tensor 'c' has dtype ComplexFloat, which cannot be saved");

  TensorFile sparse;
  sparse.tensors["s"] = at::eye(3).to_sparse();
  ExpectInvalid(SerializeSafetensors(sparse).status(), "only dense (strided) tensors can be saved");

  TensorFile reserved;
  reserved.tensors["__metadata__"] = at::zeros({1});
  ExpectInvalid(SerializeSafetensors(reserved).status(), "a tensor cannot be named \"__metadata__\"");

  TensorFile bad_name;
  bad_name.tensors["bad\xff"] = at::zeros({1});
  ExpectInvalid(SerializeSafetensors(bad_name).status(), "is not valid UTF-8");

  TensorFile bad_metadata;
  bad_metadata.metadata["k"] = "\xc3";
  ExpectInvalid(SerializeSafetensors(bad_metadata).status(), "metadata value of key 'k' is not valid UTF-8");
}

// --- Files -------------------------------------------------------------------

TEST(SafetensorsTest, ReadReportsMissingFileAndDirectory) {
  const std::string missing = TempPath("no_such_file.safetensors");
  absl::Status status = ReadSafetensors(missing).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(missing));

  ExpectInvalid(ReadSafetensors(TempPath("")).status(), "not a regular file");
}

TEST(SafetensorsTest, WriteIsAtomicAndReplacesExistingFile) {
  namespace fs = std::filesystem;
  const fs::path dir = TempPath("atomic_write");
  fs::remove_all(dir);
  ASSERT_TRUE(fs::create_directory(dir));
  const std::string path = (dir / "model.safetensors").string();

  TensorFile first;
  first.tensors["w"] = at::arange(10, at::kFloat);
  ASSERT_TRUE(WriteSafetensors(path, first).ok());

  const TensorFile second = ReferenceFile();
  absl::Status written = WriteSafetensors(path, second);
  ASSERT_TRUE(written.ok()) << written;
  absl::StatusOr<std::string> bytes = base::ReadFileToString(path);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, *SerializeSafetensors(second));
  absl::StatusOr<TensorFile> read = ReadSafetensors(path);
  ASSERT_TRUE(read.ok()) << read.status();
  ExpectTensorsEqual(read->tensors, second.tensors);
  EXPECT_EQ(read->metadata, second.metadata);

  // A failed write leaves the old file as it was.
  TensorFile invalid;
  invalid.tensors["c"] = at::zeros({2}, at::kComplexDouble);
  ExpectInvalid(WriteSafetensors(path, invalid), path);
  bytes = base::ReadFileToString(path);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, *SerializeSafetensors(second));

  std::vector<std::string> names;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  EXPECT_THAT(names, ::testing::ElementsAre("model.safetensors"));
}

TEST(SafetensorsTest, WriteIntoMissingDirectoryIsNotFound) {
  const std::string path = TempPath("no_such_dir/model.safetensors");
  absl::Status status = WriteSafetensors(path, ReferenceFile());
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(path));
  EXPECT_FALSE(std::filesystem::exists(TempPath("no_such_dir")));
}

}  // namespace
}  // namespace performer
}  // namespace slimfit
