#include "client/export_command.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/exit_status.h"
#include "base/files.h"
#include "base/sha256.h"
#include "base/test_util.h"
#include "client/fake_coordinator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace slimfit::client {
namespace {

using ::slimfit::base::ReadFileToString;
using ::slimfit::testing_util::TempPath;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

bool Exists(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0;
}

// Whether a temporary file of an export to `path` (FILE.tmp.<pid>.<n>, base::AtomicFileWriter) is
// left beside it.
bool TemporaryLeft(const std::string& path) {
  const std::filesystem::path target(path);
  const std::string prefix = target.filename().string() + ".tmp";
  for (const auto& entry : std::filesystem::directory_iterator(target.parent_path())) {
    if (entry.path().filename().string().rfind(prefix, 0) == 0) return true;
  }
  return false;
}

std::string Pattern(size_t size) {
  std::string bytes(size, '\0');
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>((i * 131 + i / 4096) & 0xFF);
  return bytes;
}

// How the scripted export misbehaves.
struct Script {
  std::string file;
  int64_t header_bytes = -1;  // -1: the file's size
  int64_t trailer_bytes = -1;
  std::string trailer_sha256;  // "": the file's
  size_t chunk = v1::LIMIT_MAX_CHUNK_BYTES;
  bool send_trailer = true;
  grpc::Status end = grpc::Status::OK;
};

class ExportCommandTest : public ::testing::Test {
 protected:
  ExportCommandTest() : fake_(FakeCoordinator::Start()) {
    fake_->export_model = [this](const v1::ExportModelRequest& request, int,
                                 const FakeCoordinator::Writer<v1::ExportModelResponse>& write) {
      v1::ExportModelResponse header;
      header.mutable_header()->set_job_id(request.job_id());
      header.mutable_header()->set_round(request.has_round() ? request.round() : 200);
      header.mutable_header()->set_parameter_version(201);
      header.mutable_header()->set_total_bytes(
          script_.header_bytes >= 0 ? script_.header_bytes : static_cast<int64_t>(script_.file.size()));
      header.mutable_header()->set_file_name("job-1-r200.safetensors");
      write(header);
      for (size_t offset = 0; offset < script_.file.size(); offset += script_.chunk) {
        v1::ExportModelResponse chunk;
        chunk.set_chunk(script_.file.substr(offset, script_.chunk));
        if (!write(chunk)) return grpc::Status::CANCELLED;
      }
      if (script_.send_trailer) {
        v1::ExportModelResponse trailer;
        trailer.mutable_trailer()->set_total_bytes(
            script_.trailer_bytes >= 0 ? script_.trailer_bytes : static_cast<int64_t>(script_.file.size()));
        trailer.mutable_trailer()->set_sha256(script_.trailer_sha256.empty() ? base::Sha256Hex(script_.file)
                                                                             : script_.trailer_sha256);
        write(trailer);
      }
      return script_.end;
    };
  }

  absl::Status Export(std::vector<std::string> args) {
    args.push_back("--coordinator=" + fake_->address());
    out_.str("");
    return RunExportCommand(args, out_);
  }

  std::unique_ptr<FakeCoordinator> fake_;
  Script script_;
  std::ostringstream out_;
};

TEST_F(ExportCommandTest, WritesExactlyTheBytesAndRenamesIntoPlace) {
  script_.file = Pattern(2 * v1::LIMIT_MAX_CHUNK_BYTES + 12345);
  const std::string path = TempPath("model.safetensors");
  const absl::Status status = Export({"job-1", "--out", path, "--round=150", "--token=tok"});
  ASSERT_TRUE(status.ok()) << status;
  absl::StatusOr<std::string> written = base::ReadFileToString(path);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(*written, script_.file);
  EXPECT_FALSE(TemporaryLeft(path));
  const std::string sha256 = base::Sha256Hex(script_.file);
  EXPECT_EQ(out_.str(), "wrote " + path +
                            ": job-1 round 150 (parameter version 201), 2109497 bytes (2.0 MiB), sha256 " +
                            sha256 + "\n");
  const ReceivedCalls calls = fake_->calls();
  ASSERT_EQ(calls.export_model.size(), 1u);
  EXPECT_EQ(calls.export_model[0].job_id(), "job-1");
  EXPECT_EQ(calls.export_model[0].round(), 150);
  EXPECT_EQ(calls.authorizations[0], "Bearer tok");
}

TEST_F(ExportCommandTest, LatestByDefaultAndJson) {
  script_.file = "tiny";
  const std::string path = TempPath("latest.safetensors");
  ASSERT_TRUE(Export({"job-1", "--out=" + path, "--json"}).ok());
  EXPECT_FALSE(fake_->calls().export_model[0].has_round());
  const nlohmann::json json = nlohmann::json::parse(out_.str());
  EXPECT_EQ(json["path"], path);
  EXPECT_EQ(json["round"], 200);
  EXPECT_EQ(json["bytes"], 4);
  EXPECT_EQ(json["sha256"], base::Sha256Hex("tiny"));
}

TEST_F(ExportCommandTest, BadShaLeavesNothingBehindAndKeepsTheOldFile) {
  script_.file = Pattern(5000);
  script_.trailer_sha256 = std::string(64, '0');
  const std::string path = TempPath("kept.safetensors");
  std::ofstream(path) << "previous export";
  const absl::Status status = Export({"job-1", "--out", path});
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Message(status), HasSubstr("the 5000 bytes received have SHA-256 " +
                                         base::Sha256Hex(script_.file) + "; the trailer says 0000"));
  EXPECT_FALSE(TemporaryLeft(path));
  EXPECT_EQ(*base::ReadFileToString(path), "previous export");
  EXPECT_EQ(out_.str(), "");
}

TEST_F(ExportCommandTest, ByteCountMismatchesAreDataLoss) {
  const std::string path = TempPath("count.safetensors");
  script_.file = Pattern(100);
  script_.header_bytes = 200;
  absl::Status status = Export({"job-1", "--out", path});
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Message(status), HasSubstr("received 100 bytes; the header announced 200 and the trailer 100"));

  script_.header_bytes = 50;  // more than announced
  status = Export({"job-1", "--out", path});
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Message(status), HasSubstr("more than the 50 bytes the header announced"));

  script_.header_bytes = -1;
  script_.send_trailer = false;
  status = Export({"job-1", "--out", path});
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Message(status), HasSubstr("ended without a trailer after 100 of 100 bytes"));

  script_.send_trailer = true;
  script_.file = Pattern(v1::LIMIT_MAX_CHUNK_BYTES + 1);
  script_.chunk = v1::LIMIT_MAX_CHUNK_BYTES + 1;
  status = Export({"job-1", "--out", path});
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Message(status), HasSubstr("a chunk of 1048577 bytes"));

  EXPECT_FALSE(Exists(path));
  EXPECT_FALSE(TemporaryLeft(path));
}

TEST_F(ExportCommandTest, BrokenStreamDeletesTheTemporaryFile) {
  script_.file = Pattern(3000);
  script_.send_trailer = false;
  script_.end = grpc::Status(grpc::StatusCode::INTERNAL, "checkpoint read failed at byte 3000");
  const std::string path = TempPath("broken.safetensors");
  const absl::Status status = Export({"job-1", "--out", path});
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(Message(status), "ExportModel: checkpoint read failed at byte 3000");
  EXPECT_FALSE(Exists(path));
  EXPECT_FALSE(TemporaryLeft(path));
}

// The coordinator hashes the checkpoint as it streams it and finds it is not what was written (a
// byte flipped on its disk): no trailer, DATA_LOSS. Nothing is written and the CLI exits 1 with
// one line naming the file.
TEST_F(ExportCommandTest, ACheckpointChangedOnTheCoordinatorsDiskIsDataLoss) {
  script_.file = Pattern(3000);
  script_.send_trailer = false;
  script_.end =
      grpc::Status(grpc::StatusCode::DATA_LOSS,
                   "checkpoint of round 3 of job-1: /state/jobs/job-1/round-000003.safetensors: the "
                   "SHA-256 of its 3000 bytes is 5e...; 9a... was recorded when it was written");
  const std::string path = TempPath("corrupt.safetensors");
  std::ofstream(path) << "previous export";
  const absl::Status status = Export({"job-1", "--out", path});
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_THAT(Message(status), HasSubstr("round-000003.safetensors: the SHA-256 of its 3000 bytes"));
  EXPECT_EQ(Message(status).find('\n'), std::string::npos);
  EXPECT_EQ(base::ExitCodeForStatus(status), base::kExitFailure);
  EXPECT_EQ(*base::ReadFileToString(path), "previous export");
  EXPECT_FALSE(TemporaryLeft(path));
  EXPECT_EQ(out_.str(), "");
}

TEST_F(ExportCommandTest, NoCheckpointYetIsAFailedPrecondition) {
  fake_->export_model = [](const v1::ExportModelRequest&, int,
                           const FakeCoordinator::Writer<v1::ExportModelResponse>&) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "job job-1 has no checkpoint yet");
  };
  const std::string path = TempPath("none.safetensors");
  const absl::Status status = Export({"job-1", "--out", path});
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(TemporaryLeft(path));
}

TEST_F(ExportCommandTest, UsageErrors) {
  absl::Status status = Export({"job-1"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("missing --out"));
  status = Export({"job-1", "--out", TempPath("x"), "--round=-2"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  status = Export({"job-1", "--out", TempPath("no/such/dir/x.safetensors")});
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);  // a local file: exit status 1
  EXPECT_THAT(Message(status), StartsWith(TempPath("no/such/dir/x.safetensors") + ": cannot create"));
  EXPECT_TRUE(fake_->calls().export_model.empty());
}

}  // namespace
}  // namespace slimfit::client
