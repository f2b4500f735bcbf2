#include "planner/device_profile_io.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <limits>
#include <string>

#include "base/files.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace slimfit::planner {
namespace {

using ::slimfit::base::ReadFileToString;
using ::slimfit::testing_util::TempPath;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

DeviceProfile SampleProfile() {
  DeviceProfile profile;
  profile.device = "cuda:1";
  profile.device_name = "NVIDIA H100 \"SXM\"";  // quotes must survive the text format
  profile.threads = 16;
  profile.total_memory_bytes = int64_t{80} << 30;
  profile.activation_scale = 1.0 / 3.0;  // needs all 17 digits to round-trip
  profile.activation_overhead_bytes = 12345678901;
  profile.resident_overhead_bytes = 68157440;
  profile.forward_weight_copies = false;  // not the default: must be written and read back
  profile.replays_slices = true;
  profile.graph_pool_overhead_bytes = 25165824;
  profile.flops_per_second = 4.56789e14;
  profile.half_rate_rows = 0;  // a zero that must still be written and read back
  profile.layer_overhead_s = 2.5e-5;
  profile.seconds_per_element = 7.25e-10;
  profile.backward_factor = 2.0000000000000004;
  profile.bf16_flops_per_second = 9.87654e14;
  profile.bf16_half_rate_rows = 123.25;
  profile.bf16_layer_overhead_s = 3.5e-5;
  return profile;
}

void ExpectSameProfile(const DeviceProfile& got, const DeviceProfile& want) {
  EXPECT_EQ(got.device, want.device);
  EXPECT_EQ(got.device_name, want.device_name);
  EXPECT_EQ(got.threads, want.threads);
  EXPECT_EQ(got.total_memory_bytes, want.total_memory_bytes);
  EXPECT_EQ(got.activation_scale, want.activation_scale);
  EXPECT_EQ(got.activation_overhead_bytes, want.activation_overhead_bytes);
  EXPECT_EQ(got.resident_overhead_bytes, want.resident_overhead_bytes);
  EXPECT_EQ(got.forward_weight_copies, want.forward_weight_copies);
  EXPECT_EQ(got.replays_slices, want.replays_slices);
  EXPECT_EQ(got.graph_pool_overhead_bytes, want.graph_pool_overhead_bytes);
  EXPECT_EQ(got.flops_per_second, want.flops_per_second);
  EXPECT_EQ(got.half_rate_rows, want.half_rate_rows);
  EXPECT_EQ(got.seconds_per_element, want.seconds_per_element);
  EXPECT_EQ(got.layer_overhead_s, want.layer_overhead_s);
  EXPECT_EQ(got.backward_factor, want.backward_factor);
  EXPECT_EQ(got.bf16_flops_per_second, want.bf16_flops_per_second);
  EXPECT_EQ(got.bf16_half_rate_rows, want.bf16_half_rate_rows);
  EXPECT_EQ(got.bf16_layer_overhead_s, want.bf16_layer_overhead_s);
}

// As a std::string, so that failing matchers print text rather than characters.
std::string Message(const absl::Status& status) { return std::string(status.message()); }

TEST(DeviceProfileIoTest, TextRoundTripIsExact) {
  const DeviceProfile profile = SampleProfile();
  const std::string text = DeviceProfileToText(profile);
  absl::StatusOr<DeviceProfile> parsed = ParseDeviceProfileText(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << text;
  ExpectSameProfile(*parsed, profile);
  EXPECT_EQ(DeviceProfileToText(*parsed), text);
}

TEST(DeviceProfileIoTest, TextWritesEveryFieldOnePerLine) {
  const std::string text = DeviceProfileToText(DeviceProfile());
  EXPECT_THAT(text, HasSubstr("device: \"cpu\"\n"));
  EXPECT_THAT(text, HasSubstr("device_name: \"\"\n"));
  EXPECT_THAT(text, HasSubstr("threads: 1\n"));
  EXPECT_THAT(text, HasSubstr("total_memory_bytes: 0\n"));
  EXPECT_THAT(text, HasSubstr("activation_scale: 1\n"));
  EXPECT_THAT(text, HasSubstr("activation_overhead_bytes: 0\n"));
  EXPECT_THAT(text, HasSubstr("resident_overhead_bytes: 0\n"));
  EXPECT_THAT(text, HasSubstr("forward_weight_copies: true\n"));
  EXPECT_THAT(text, HasSubstr("flops_per_second: 10000000000\n"));
  EXPECT_THAT(text, HasSubstr("half_rate_rows: 16\n"));
  EXPECT_THAT(text, HasSubstr("layer_overhead_s: 0.0001\n"));
  EXPECT_THAT(text, HasSubstr("backward_factor: 2\n"));
  EXPECT_THAT(text, HasSubstr("bf16_flops_per_second: 0\n"));
  EXPECT_THAT(text, HasSubstr("bf16_half_rate_rows: 0\n"));
  EXPECT_THAT(text, HasSubstr("bf16_layer_overhead_s: 0\n"));
  EXPECT_THAT(text, Not(HasSubstr("bf16_time_ratio")));  // superseded: read, no longer written
}

// A profile calibrated before engine revision 8 holds the whole call's bfloat16 ratio only: it is
// read as bfloat16 products at the float32 rate over the ratio, with the float32 size penalty and
// overhead; the new fields win where both are given; a ratio that is not positive is refused.
TEST(DeviceProfileIoTest, TheSupersededBf16TimeRatioIsReadAsTheProductsRate) {
  absl::StatusOr<DeviceProfile> old = ParseDeviceProfileText(
      "flops_per_second: 3e11\nhalf_rate_rows: 24\nlayer_overhead_s: 5e-05\nbf16_time_ratio: 0.75\n");
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_DOUBLE_EQ(old->bf16_flops_per_second, 4e11);
  EXPECT_EQ(old->bf16_half_rate_rows, 24);
  EXPECT_EQ(old->bf16_layer_overhead_s, 5e-05);
  absl::StatusOr<DeviceProfile> both =
      ParseDeviceProfileText("bf16_time_ratio: 0.75\nbf16_flops_per_second: 7e11\n");
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->bf16_flops_per_second, 7e11);
  EXPECT_EQ(both->bf16_half_rate_rows, 0);
  EXPECT_THAT(Message(ParseDeviceProfileText("bf16_time_ratio: 0\n").status()),
              HasSubstr("bf16_time_ratio must be in [0.001, 1000], got 0"));
  EXPECT_THAT(Message(ParseDeviceProfileText("bf16_time_ratio: 1e4\n").status()),
              HasSubstr("bf16_time_ratio must be in [0.001, 1000], got 10000"));
  EXPECT_THAT(Message(ParseDeviceProfileText("bf16_flops_per_second: -1\n").status()),
              HasSubstr("bf16_flops_per_second must be ≥ 0"));
  EXPECT_THAT(Message(ParseDeviceProfileText("bf16_half_rate_rows: -1\n").status()),
              HasSubstr("bf16_half_rate_rows and bf16_layer_overhead_s must be finite and ≥ 0"));
  // What a worker registers goes through the same check.
  v1::DeviceProfile proto;
  proto.set_bf16_time_ratio(-2);
  EXPECT_THAT(Message(CheckedDeviceProfileFromProto(proto).status()),
              HasSubstr("bf16_time_ratio must be in [0.001, 1000]"));
  proto.set_bf16_time_ratio(std::numeric_limits<double>::infinity());  // a proto, unlike text, can say so
  EXPECT_THAT(Message(CheckedDeviceProfileFromProto(proto).status()),
              HasSubstr("bf16_time_ratio must be in"));
  proto.set_bf16_time_ratio(1e-300);
  EXPECT_THAT(Message(CheckedDeviceProfileFromProto(proto).status()),
              HasSubstr("bf16_time_ratio must be in"));
  proto.set_bf16_time_ratio(0.5);
  absl::StatusOr<DeviceProfile> registered = CheckedDeviceProfileFromProto(proto);
  ASSERT_TRUE(registered.ok()) << registered.status();
  EXPECT_DOUBLE_EQ(registered->bf16_flops_per_second, 2 * DeviceProfile().flops_per_second);
}

TEST(DeviceProfileIoTest, ProtoConversionRoundTrips) {
  const DeviceProfile profile = SampleProfile();
  ExpectSameProfile(DeviceProfileFromProto(DeviceProfileToProto(profile)), profile);
}

TEST(DeviceProfileIoTest, MissingFieldsKeepTheStructDefaults) {
  absl::StatusOr<DeviceProfile> parsed = ParseDeviceProfileText(
      "# only two fields\n"
      "threads: 4\n"
      "flops_per_second: 2e9\n");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  DeviceProfile want;
  want.threads = 4;
  want.flops_per_second = 2e9;
  ExpectSameProfile(*parsed, want);

  absl::StatusOr<DeviceProfile> empty = ParseDeviceProfileText("");
  ASSERT_TRUE(empty.ok()) << empty.status();
  ExpectSameProfile(*empty, DeviceProfile());
}

TEST(DeviceProfileIoTest, SyntaxErrorNamesLineAndColumn) {
  absl::StatusOr<DeviceProfile> parsed = ParseDeviceProfileText(
      "device: \"cpu\"\n"
      "threads: 2\n"
      "flops_per_second 1e9\n");
  ASSERT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  // TextFormat reports the token after the missing ':' — line 3, column 18 in 1-based terms.
  EXPECT_THAT(Message(parsed.status()), HasSubstr("line 3, column 18"));
  EXPECT_THAT(Message(parsed.status()), StartsWith("device profile: "));
}

TEST(DeviceProfileIoTest, UnknownFieldNamesLineAndColumn) {
  absl::StatusOr<DeviceProfile> parsed = ParseDeviceProfileText("threads: 2\n  flops: 1e9\n");
  ASSERT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  // TextFormat reports an unknown field where its name ends.
  EXPECT_THAT(Message(parsed.status()), HasSubstr("line 2, column 8"));
  EXPECT_THAT(Message(parsed.status()), HasSubstr("flops"));
}

TEST(DeviceProfileIoTest, WrongValueTypeNamesLineAndColumn) {
  absl::StatusOr<DeviceProfile> parsed = ParseDeviceProfileText("threads: \"two\"\n");
  ASSERT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(parsed.status()), HasSubstr("line 1, column 10"));
}

// Found by fuzz/device_profile_fuzzer.cc: text format takes "\377" into a
// string field; the coordinator could then not parse the worker's
// RegisterWorkerRequest carrying the profile.
TEST(DeviceProfileIoTest, StringsThatAreNotUtf8AreRejected) {
  absl::StatusOr<DeviceProfile> parsed =
      ParseDeviceProfileText("device: \"cpu\"\ndevice_name: \"Xeon \\256\"\n");
  ASSERT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(parsed.status()), "device profile: device_name is not valid UTF-8");
}

TEST(DeviceProfileIoTest, NumbersThatAreNotFiniteAreRejectedNamingTheField) {
  absl::StatusOr<DeviceProfile> parsed = ParseDeviceProfileText("device: \"cpu\"\nflops_per_second: inf\n");
  ASSERT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(parsed.status()), "device profile: flops_per_second is not a finite number");
}

TEST(DeviceProfileIoTest, InvalidValuesAreRejectedByValidate) {
  absl::StatusOr<DeviceProfile> parsed = ParseDeviceProfileText("flops_per_second: -1\n");
  ASSERT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(parsed.status()), HasSubstr("flops_per_second"));

  parsed = ParseDeviceProfileText("threads: 0\n");
  ASSERT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(parsed.status()), HasSubstr("threads"));
}

TEST(DeviceProfileIoTest, WriteThenReadRoundTrips) {
  const std::string path = TempPath("profile_roundtrip.txtpb");
  const DeviceProfile profile = SampleProfile();
  ASSERT_TRUE(WriteDeviceProfile(path, profile).ok());
  absl::StatusOr<DeviceProfile> read = ReadDeviceProfile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  ExpectSameProfile(*read, profile);
  absl::StatusOr<std::string> written = base::ReadFileToString(path);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(*written, DeviceProfileToText(profile));
}

TEST(DeviceProfileIoTest, WriteReplacesAnExistingFileAndLeavesNoTemporaryFile) {
  const std::string dir = TempPath("profile_replace");
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  const std::string path = dir + "/profile.txtpb";
  { std::ofstream(path) << "old contents that are not a profile"; }
  DeviceProfile profile;
  profile.threads = 3;
  ASSERT_TRUE(WriteDeviceProfile(path, profile).ok());
  absl::StatusOr<std::string> written = base::ReadFileToString(path);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(*written, DeviceProfileToText(profile));
  // Only the profile itself is left in the directory.
  int entries = 0;
  if (FILE* listing = popen(("ls -A " + dir).c_str(), "r")) {
    char line[512];
    while (fgets(line, sizeof(line), listing) != nullptr) ++entries;
    pclose(listing);
  }
  EXPECT_EQ(entries, 1);
}

TEST(DeviceProfileIoTest, WriteRefusesAnInvalidProfileAndKeepsTheOldFile) {
  const std::string path = TempPath("profile_invalid.txtpb");
  DeviceProfile good;
  ASSERT_TRUE(WriteDeviceProfile(path, good).ok());
  DeviceProfile bad;
  bad.backward_factor = 0;
  absl::Status status = WriteDeviceProfile(path, bad);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("backward_factor"));
  absl::StatusOr<std::string> kept = base::ReadFileToString(path);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(*kept, DeviceProfileToText(good));
}

TEST(DeviceProfileIoTest, WriteIntoMissingDirectoryIsNotFound) {
  absl::Status status = WriteDeviceProfile(TempPath("no/such/dir/profile.txtpb"), DeviceProfile());
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(status), HasSubstr("no/such/dir/profile.txtpb"));
}

TEST(DeviceProfileIoTest, ReadMissingFileIsNotFound) {
  absl::StatusOr<DeviceProfile> read = ReadDeviceProfile(TempPath("does_not_exist.txtpb"));
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(read.status()), HasSubstr("does_not_exist.txtpb"));
}

TEST(DeviceProfileIoTest, ReadErrorsStartWithThePathAndKeepThePosition) {
  const std::string path = TempPath("profile_bad.txtpb");
  { std::ofstream(path) << "threads: 2\nthreads 3\n"; }
  absl::StatusOr<DeviceProfile> read = ReadDeviceProfile(path);
  ASSERT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(read.status()), StartsWith(path + ": device profile: line 2, column 9"));
}

}  // namespace
}  // namespace slimfit::planner
