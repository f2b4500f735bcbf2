#include "performer/torch_state_dict.h"

#include <ATen/ATen.h>

#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace slimfit::performer {
namespace {

using ::slimfit::testing_util::TempPath;
using ::testing::HasSubstr;

std::string TestDataPath(absl::string_view name) {
  return testing_util::RunfilePath(absl::StrCat("performer/testdata/", name));
}

void ExpectTensorsEqual(const std::map<std::string, at::Tensor>& actual,
                        const std::map<std::string, at::Tensor>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (const auto& [name, want] : expected) {
    SCOPED_TRACE(name);
    auto it = actual.find(name);
    ASSERT_NE(it, actual.end());
    EXPECT_EQ(it->second.scalar_type(), want.scalar_type());
    EXPECT_TRUE(it->second.device().is_cpu());
    EXPECT_TRUE(at::equal(it->second, want));
  }
}

void ExpectInvalid(const absl::Status& status, const std::string& phrase) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(phrase));
}

// Must match state_dict() in testdata/make_tensor_file_testdata.py.
std::map<std::string, at::Tensor> ExpectedStateDict() {
  return {{"linear.weight", at::arange(6, at::kFloat).reshape({2, 3})},
          {"linear.bias", at::tensor({0.5f, -0.5f})},
          {"steps", at::scalar_tensor(42, at::kLong)}};
}

TEST(TorchStateDictTest, ReadsPlainDict) {
  absl::StatusOr<std::map<std::string, at::Tensor>> tensors =
      ReadTorchStateDict(TestDataPath("state_dict_plain.pt"));
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ExpectTensorsEqual(*tensors, ExpectedStateDict());
}

TEST(TorchStateDictTest, ReadsDictNestedUnderStateDict) {
  absl::StatusOr<std::map<std::string, at::Tensor>> tensors =
      ReadTorchStateDict(TestDataPath("state_dict_nested.pt"));
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ExpectTensorsEqual(*tensors, ExpectedStateDict());
}

TEST(TorchStateDictTest, ExplainsOrderedDict) {
  ExpectInvalid(ReadTorchStateDict(TestDataPath("state_dict_ordered.pt")).status(),
                "the file holds a collections.OrderedDict, which LibTorch "
                "cannot read; save it as torch.save(dict(model.state_dict()), "
                "path) or as safetensors");
}

TEST(TorchStateDictTest, ExplainsLegacyFormat) {
  const std::string path = TestDataPath("state_dict_legacy.pt");
  absl::Status status = ReadTorchStateDict(path).status();
  ExpectInvalid(status, "failed finding the zip central directory");
  ExpectInvalid(status, "_use_new_zipfile_serialization=False");
  EXPECT_THAT(std::string(status.message()), HasSubstr(path));
}

TEST(TorchStateDictTest, NamesNonTensorValue) {
  ExpectInvalid(ReadTorchStateDict(TestDataPath("state_dict_non_tensor.pt")).status(),
                "value of key 'lr' is a Double, not a tensor");
}

TEST(TorchStateDictTest, RejectsOtherFiles) {
  ExpectInvalid(ReadTorchStateDict(TestDataPath("reference.safetensors")).status(),
                "not a torch.save zip archive");
  const std::string missing = TempPath("no_such_file.pt");
  absl::Status status = ReadTorchStateDict(missing).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(missing));
}

// Found by fuzzing (fuzz/torch_state_dict_fuzzer.cc). LibTorch's unpickler
// takes a storage's size from the pickle: reading this tensor would run past
// the 24 bytes stored for it.
TEST(TorchStateDictTest, RefusesStorageLargerThanItsRecord) {
  ExpectInvalid(ReadTorchStateDict(TestDataPath("state_dict_storage_overrun.pt")).status(),
                "tensor 'linear.weight' is corrupt: its storage of 800 bytes is larger "
                "than the 24 bytes stored for it");
}

TEST(TorchStateDictTest, RefusesTensorOutsideItsStorage) {
  ExpectInvalid(ReadTorchStateDict(TestDataPath("state_dict_view_overrun.pt")).status(),
                "tensor 'linear.weight' is corrupt: its shape, strides and offset reach "
                "past its 24-byte storage");
}

// LibTorch's reader leaked the opened archive when its first file is not in a
// folder; the archive is refused before LibTorch sees it.
TEST(TorchStateDictTest, RefusesArchiveWithoutFolder) {
  ExpectInvalid(ReadTorchStateDict(TestDataPath("state_dict_no_folder.pt")).status(),
                "not a torch.save zip archive: the first file 'data.pkl' is not in a "
                "folder");
}

// LibTorch's unpickler allocated the 2 GiB this pickle's first string claims
// before finding that 300 bytes follow.
TEST(TorchStateDictTest, RefusesPickleLengthsBeyondThePickle) {
  ExpectInvalid(ReadTorchStateDict(TestDataPath("state_dict_long_string.pt")).status(),
                "data.pkl opcode 0x58 at byte 6 has a 2130706445-byte argument; 307 bytes "
                "follow");
}

// miniz reads nothing from an entry marked as a directory: LibTorch's reader
// then failed on an empty version and leaked the archive.
TEST(TorchStateDictTest, RefusesVersionMarkedAsDirectory) {
  ExpectInvalid(ReadTorchStateDict(TestDataPath("state_dict_version_directory.pt")).status(),
                "'archive/version' is a directory");
}

// BUILD on an empty stack: LibTorch's unpickler pops without checking and
// crashed (SEGV).
TEST(TorchStateDictTest, RefusesPickleThatUnderflowsTheStack) {
  ExpectInvalid(ReadTorchStateDict(TestDataPath("state_dict_stack_underflow.pt")).status(),
                "data.pkl opcode 0x62 at byte 2 takes more from the unpickler's stack "
                "than there is");
}

TEST(TorchStateDictTest, RefusesCompressedRecords) {
  ExpectInvalid(ReadTorchStateDict(TestDataPath("state_dict_deflated.pt")).status(),
                "'archive/data.pkl' is compressed");
}

TEST(TorchStateDictTest, RefusesUnreadableVersion) {
  ExpectInvalid(ReadTorchStateDict(TestDataPath("state_dict_version_99.pt")).status(),
                "torch.save file format version 99 is outside the versions this "
                "LibTorch reads");
}

// The same records zipped by Python's zipfile (no zip64 end record, no
// alignment padding) read like torch.save's own archive.
TEST(TorchStateDictTest, ReadsArchiveWrittenByAnotherZipWriter) {
  absl::StatusOr<std::map<std::string, at::Tensor>> tensors =
      ReadTorchStateDict(TestDataPath("state_dict_rezipped.pt"));
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ExpectTensorsEqual(*tensors, ExpectedStateDict());
}

}  // namespace
}  // namespace slimfit::performer
