#include "worker/worker_state.h"

#include <sys/stat.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/files.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/device_profile_io.h"

namespace slimfit::worker {
namespace {

using ::slimfit::base::ReadFileToString;
using ::slimfit::testing_util::RunfilePath;
using ::slimfit::testing_util::TempPath;
using ::testing::HasSubstr;

planner::DeviceProfile TinyProfile() {
  absl::StatusOr<planner::DeviceProfile> profile =
      planner::ReadDeviceProfile(RunfilePath("client/testdata/tiny_cpu.profile"));
  EXPECT_TRUE(profile.ok()) << profile.status();
  return profile.ok() ? *profile : planner::DeviceProfile{};
}

TEST(StateDirTest, CreatesMissingParents) {
  const std::string path = TempPath("state/a/b/c");
  absl::StatusOr<StateDir> state = StateDir::Open(path + "/");
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->path(), path);
  struct stat info;
  ASSERT_EQ(stat(path.c_str(), &info), 0);
  EXPECT_TRUE(S_ISDIR(info.st_mode));
  // Opening again is fine.
  EXPECT_TRUE(StateDir::Open(path).ok());
}

TEST(StateDirTest, RefusesAFileAndAnEmptyPath) {
  const std::string file = TempPath("not_a_dir");
  ASSERT_TRUE(base::WriteFileAtomically(file, "x").ok());
  absl::StatusOr<StateDir> state = StateDir::Open(file);
  EXPECT_EQ(state.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(state.status().message(), HasSubstr("not a directory"));
  EXPECT_EQ(StateDir::Open("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(StateDirTest, WorkerIdSurvivesReopening) {
  const std::string path = TempPath("state_id");
  {
    absl::StatusOr<StateDir> state = StateDir::Open(path);
    ASSERT_TRUE(state.ok()) << state.status();
    absl::StatusOr<std::string> id = state->ReadWorkerId();
    ASSERT_TRUE(id.ok()) << id.status();
    EXPECT_EQ(*id, "");
    ASSERT_TRUE(state->WriteWorkerId("w-3f2a").ok());
  }
  absl::StatusOr<StateDir> state = StateDir::Open(path);
  ASSERT_TRUE(state.ok());
  absl::StatusOr<std::string> id = state->ReadWorkerId();
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, "w-3f2a");
  absl::StatusOr<std::string> raw = ReadFileToString(path + "/worker_id");
  ASSERT_TRUE(raw.ok());
  EXPECT_EQ(*raw, "w-3f2a\n");
}

TEST(StateDirTest, RejectsBadWorkerIds) {
  absl::StatusOr<StateDir> state = StateDir::Open(TempPath("state_bad_id"));
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->WriteWorkerId("").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(state->WriteWorkerId("two words").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(state->WriteWorkerId(std::string(300, 'w')).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(base::WriteFileAtomically(state->path() + "/worker_id", "w-1\nw-2\n").ok());
  absl::StatusOr<std::string> id = state->ReadWorkerId();
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(id.status().message(), HasSubstr("worker_id"));
}

TEST(StateDirTest, ProfileIsCachedPerKey) {
  absl::StatusOr<StateDir> state = StateDir::Open(TempPath("state_profile"));
  ASSERT_TRUE(state.ok());
  const ProfileKey key{"cpu", 2, performer::DType::kFloat32};
  absl::StatusOr<std::optional<CachedProfile>> none = state->LoadProfile(key);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());

  const planner::DeviceProfile profile = TinyProfile();
  const absl::Time when = absl::FromUnixSeconds(1700000000) + absl::Milliseconds(250);
  ASSERT_TRUE(state->StoreProfile(key, profile, when).ok());

  absl::StatusOr<std::optional<CachedProfile>> cached = state->LoadProfile(key);
  ASSERT_TRUE(cached.ok()) << cached.status();
  ASSERT_TRUE(cached->has_value());
  EXPECT_EQ((*cached)->calibrated_at, when);
  EXPECT_EQ(planner::DeviceProfileToText((*cached)->profile), planner::DeviceProfileToText(profile));

  EXPECT_EQ(key.ToString(),
            absl::StrCat("device=cpu threads=2 dtype=float32 engine_revision=", performer::kEngineRevision));
  // Revision 1 is how caches written before the revision existed spell their key.
  EXPECT_EQ((ProfileKey{"cpu", 2, performer::DType::kFloat32, true, 1}).ToString(),
            "device=cpu threads=2 dtype=float32");
  EXPECT_EQ((ProfileKey{"cpu", 2, performer::DType::kFloat32, false, 1}).ToString(),
            "device=cpu threads=2 dtype=float32 cuda_graphs=false");
  // Another thread count, dtype, device, slice replay or engine: not reused.
  for (const ProfileKey& other :
       {ProfileKey{"cpu", 1, performer::DType::kFloat32}, ProfileKey{"cpu", 2, performer::DType::kFloat64},
        ProfileKey{"cuda:0", 2, performer::DType::kFloat32},
        ProfileKey{"cpu", 2, performer::DType::kFloat32, /*cuda_graphs=*/false},
        ProfileKey{"cpu", 2, performer::DType::kFloat32, true, /*engine_revision=*/1}}) {
    absl::StatusOr<std::optional<CachedProfile>> miss = state->LoadProfile(other);
    ASSERT_TRUE(miss.ok()) << miss.status();
    EXPECT_FALSE(miss->has_value()) << other.ToString();
  }
}

TEST(StateDirTest, CorruptProfileIsReportedWithThePath) {
  absl::StatusOr<StateDir> state = StateDir::Open(TempPath("state_corrupt"));
  ASSERT_TRUE(state.ok());
  const ProfileKey key{"cpu", 1, performer::DType::kFloat32};
  ASSERT_TRUE(base::WriteFileAtomically(
                  state->path() + "/profile.textproto",
                  absl::StrCat("# key: ", key.ToString(),
                               "\n# calibrated_at: 2024-01-01T00:00:00Z\nflops_per_second: x\n"))
                  .ok());
  absl::StatusOr<std::optional<CachedProfile>> cached = state->LoadProfile(key);
  EXPECT_EQ(cached.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(cached.status().message(), HasSubstr("profile.textproto"));

  ASSERT_TRUE(base::WriteFileAtomically(state->path() + "/profile.textproto", "threads: 1\n").ok());
  cached = state->LoadProfile(key);
  EXPECT_EQ(cached.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(cached.status().message(), HasSubstr("header"));
}

TEST(StateDirTest, InvalidProfileIsNotStored) {
  absl::StatusOr<StateDir> state = StateDir::Open(TempPath("state_invalid"));
  ASSERT_TRUE(state.ok());
  planner::DeviceProfile profile = TinyProfile();
  profile.flops_per_second = -1;
  EXPECT_EQ(state->StoreProfile({"cpu", 1}, profile, absl::Now()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadFileToString(state->path() + "/profile.textproto").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace slimfit::worker
