#include "client/calibrate_command.h"

#include <ATen/Context.h>

#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "base/test_util.h"
#include "client/device_calibrator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "planner/device_profile.h"
#include "planner/device_profile_io.h"

namespace slimfit::client {
namespace {

using ::slimfit::base::ReadFileToString;
using ::slimfit::testing_util::TempPath;
using ::testing::HasSubstr;
using Json = nlohmann::ordered_json;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

// Stands in for the engine, whose own calibration is tested in performer/ and end to end in
// slimfit_cli_test; here only the command's flags, output and file handling are under test.
class FixedCalibrator {
 public:
  absl::StatusOr<CalibrationOutcome> operator()(const CalibrationRequest& request) {
    requests.push_back(request);
    CalibrationOutcome outcome;
    outcome.profile.device = request.device;
    outcome.profile.device_name = "Test CPU 9000";
    outcome.profile.threads = request.threads;
    outcome.profile.total_memory_bytes = int64_t{16} << 30;
    outcome.profile.activation_scale = 1.0 / 3.0;
    outcome.profile.flops_per_second = 1.25e11;
    outcome.probes = {{8, 0.5, 1000, 128}, {32, 0.25, 4000, 128, 2048}, {0, 0.125, 64000, 128}};
    outcome.warnings = warnings;
    return outcome;
  }
  std::vector<CalibrationRequest> requests;
  std::vector<std::string> warnings;
};

class CalibrateCommandTest : public ::testing::Test {
 protected:
  absl::StatusOr<std::string> RunCalibrate(std::vector<std::string> args) {
    std::ostringstream out;
    DeviceCalibrator calibrate = [this](const CalibrationRequest& request) { return calibrator_(request); };
    if (absl::Status s = RunCalibrateCommand(args, out, calibrate); !s.ok()) return s;
    return out.str();
  }

  FixedCalibrator calibrator_;
};

TEST_F(CalibrateCommandTest, PrintsTheProfileAsTextFormat) {
  absl::StatusOr<std::string> text = RunCalibrate({"--device=cpu", "--threads=3"});
  ASSERT_TRUE(text.ok()) << text.status();
  ASSERT_EQ(calibrator_.requests.size(), 1u);
  EXPECT_EQ(calibrator_.requests[0].device, "cpu");
  EXPECT_EQ(calibrator_.requests[0].threads, 3);
  EXPECT_EQ(calibrator_.requests[0].dtype, performer::DType::kFloat32);
  absl::StatusOr<planner::DeviceProfile> parsed = planner::ParseDeviceProfileText(*text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->device_name, "Test CPU 9000");
  EXPECT_EQ(parsed->threads, 3);
  EXPECT_EQ(parsed->activation_scale, 1.0 / 3.0);
  EXPECT_EQ(*text, planner::DeviceProfileToText(*parsed));
}

TEST_F(CalibrateCommandTest, OutWritesTheFileAndSaysSo) {
  const std::string path = TempPath("calibrated.profile");
  absl::StatusOr<std::string> text = RunCalibrate({"--threads=2", "--out", path});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, absl::StrCat("wrote the profile of cpu (Test CPU 9000), 2 threads, to ", path, "\n"));
  absl::StatusOr<planner::DeviceProfile> read = planner::ReadDeviceProfile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->flops_per_second, 1.25e11);
  EXPECT_EQ(read->threads, 2);
}

TEST_F(CalibrateCommandTest, JsonHasProfileOutAndProbes) {
  const std::string path = TempPath("calibrated_json.profile");
  absl::StatusOr<std::string> text =
      RunCalibrate({"--threads=1", "--dtype=float64", "--json", absl::StrCat("--out=", path)});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(calibrator_.requests.at(0).dtype, performer::DType::kFloat64);
  const Json json = Json::parse(*text);
  EXPECT_EQ(json["profile"]["device_name"], "Test CPU 9000");
  EXPECT_EQ(json["profile"]["total_memory_bytes"], int64_t{16} << 30);
  EXPECT_EQ(json["out"], path);
  ASSERT_EQ(json["probes"].size(), 3u);
  EXPECT_EQ(json["probes"][1]["slice"], 32);
  EXPECT_EQ(json["probes"][1]["seconds"], 0.25);
  EXPECT_EQ(json["probes"][1]["working_bytes"], 4000);
  EXPECT_EQ(json["probes"][1]["seq_len"], 128);
  EXPECT_EQ(json["probes"][1]["graph_pool_bytes"], 2048);
  EXPECT_EQ(json["probes"][0]["graph_pool_bytes"], 0);
  EXPECT_EQ(json["probes"][1]["pool_only"], false);
  absl::StatusOr<std::string> written = base::ReadFileToString(path);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_FALSE(written->empty());

  text = RunCalibrate({"--threads=1", "--json"});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_TRUE(Json::parse(*text)["out"].is_null());
  EXPECT_TRUE(Json::parse(*text)["warnings"].empty());
}

// What the profile leaves unmeasured is said in every output form; the text still reads as a profile.
TEST_F(CalibrateCommandTest, WarningsAreShownInEveryForm) {
  calibrator_.warnings = {"bfloat16 plans are predicted with the float32 constants: too few probes"};
  absl::StatusOr<std::string> text = RunCalibrate({"--threads=1"});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text,
              ::testing::StartsWith("# warning: bfloat16 plans are predicted with the float32 constants"));
  absl::StatusOr<planner::DeviceProfile> parsed = planner::ParseDeviceProfileText(*text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->flops_per_second, 1.25e11);
  text = RunCalibrate({"--threads=1", "--out", TempPath("warned.profile")});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(
      *text,
      HasSubstr("\nwarning: bfloat16 plans are predicted with the float32 constants: too few probes\n"));
  text = RunCalibrate({"--threads=1", "--json"});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(Json::parse(*text)["warnings"][0], calibrator_.warnings[0]);
}

TEST_F(CalibrateCommandTest, FlagErrors) {
  absl::StatusOr<std::string> text = RunCalibrate({"--threads=0"});
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(text.status()), HasSubstr("--threads=0"));
  text = RunCalibrate({"--dtype=half"});
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(text.status()), HasSubstr("--dtype: "));
  text = RunCalibrate({"--out="});
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(text.status()), HasSubstr("--out is empty"));
  text = RunCalibrate({"--output=x"});
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(text.status()), HasSubstr("did you mean --out?"));
  EXPECT_TRUE(calibrator_.requests.empty());  // nothing was measured for a usage error
}

TEST_F(CalibrateCommandTest, UnwritableOutIsReported) {
  absl::StatusOr<std::string> text = RunCalibrate({"--out=/no/such/dir/profile"});
  EXPECT_EQ(text.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(text.status()), HasSubstr("/no/such/dir/profile"));
}

TEST_F(CalibrateCommandTest, CalibratorErrorsPropagate) {
  std::ostringstream out;
  DeviceCalibrator failing = [](const CalibrationRequest&) -> absl::StatusOr<CalibrationOutcome> {
    return absl::InvalidArgumentError("calibrating tpu: unknown device 'tpu'");
  };
  const std::vector<std::string> args = {"--device=tpu"};
  absl::Status status = RunCalibrateCommand(args, out, failing);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(status), "calibrating tpu: unknown device 'tpu'");
}

TEST(CalibrateDeviceTest, UnknownDeviceIsInvalidArgument) {
  CalibrationRequest request;
  request.device = "no-such-device";
  absl::StatusOr<CalibrationOutcome> outcome = CalibrateDevice(request);
  EXPECT_EQ(outcome.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(outcome.status()), HasSubstr("calibrating no-such-device: "));
}

TEST(CalibrateDeviceTest, CudaWithoutCudaSupportIsFailedPrecondition) {
  if (at::hasCUDA()) GTEST_SKIP() << "this LibTorch has CUDA";
  CalibrationRequest request;
  request.device = "cuda:0";
  absl::StatusOr<CalibrationOutcome> outcome = CalibrateDevice(request);
  EXPECT_EQ(outcome.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(outcome.status()), HasSubstr("no CUDA support"));
}

}  // namespace
}  // namespace slimfit::client
