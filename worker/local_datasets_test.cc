#include "worker/local_datasets.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/sha256.h"
#include "base/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace slimfit::worker {
namespace {

using ::testing::HasSubstr;

rpc::DatasetFormat Format(absl::string_view type, absl::string_view separator) {
  absl::StatusOr<rpc::DatasetFormat> format = rpc::ParseDatasetFormat(type, separator);
  EXPECT_TRUE(format.ok()) << format.status();
  return *format;
}

TEST(ParseLocalDataFlagTest, NamesAndPathsInOrder) {
  absl::StatusOr<std::vector<LocalDataSpec>> specs =
      ParseLocalDataFlag("notes=/d/notes.txt,mail-2024=rel/m=x.txt");
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 2u);
  EXPECT_EQ((*specs)[0].name, "notes");
  EXPECT_EQ((*specs)[0].path, "/d/notes.txt");
  EXPECT_EQ((*specs)[1].name, "mail-2024");
  EXPECT_EQ((*specs)[1].path, "rel/m=x.txt");  // only the first '=' separates
  EXPECT_TRUE(ParseLocalDataFlag("")->empty());
}

TEST(ParseLocalDataFlagTest, BadEntriesNameTheFlagAndTheEntry) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"notes", "--data: 'notes': expected NAME=PATH"},
      {"=/x", "a name is 1 to 256"},
      {"a/b=/x", "'a/b=/x': a name is"},
      {std::string(257, 'n') + "=/x", "a name is 1 to 256"},
      {"a=", "'a=': the path is empty"},
      {"a=/x,b=/y,a=/z", "'a=/z': the name a is given twice"},
      {"a=/x,", "'': expected NAME=PATH"},
  };
  for (const auto& [value, message] : cases) {
    absl::StatusOr<std::vector<LocalDataSpec>> specs = ParseLocalDataFlag(value);
    EXPECT_EQ(specs.status().code(), absl::StatusCode::kInvalidArgument) << value;
    EXPECT_THAT(specs.status().message(), HasSubstr(message)) << value;
  }
  std::string many;
  for (int i = 0; i <= v1::LIMIT_MAX_LOCAL_DATASETS; ++i)
    absl::StrAppend(&many, i == 0 ? "" : ",", "d", i, "=/x");
  EXPECT_THAT(ParseLocalDataFlag(many).status().message(), HasSubstr("a worker holds at most 64"));
}

TEST(LocalDatasetsTest, AnnouncesCountsDigestFormatAndLargestTokenNotTheBytes) {
  const std::string text = "first doc\n\nsecond\n\n\n\nthird!";
  const std::string path = testing_util::WriteTempFile("notes.txt", text);
  absl::StatusOr<LocalDatasets> datasets = LocalDatasets::Load({{"notes", path}}, Format("text", "\\n\\n"));
  ASSERT_TRUE(datasets.ok()) << datasets.status();
  ASSERT_EQ(datasets->announcements().size(), 1u);
  const v1::LocalDataset& d = datasets->announcements()[0];
  EXPECT_EQ(d.name(), "notes");
  EXPECT_EQ(d.tokens(), 9 + 6 + 6);  // separators dropped, the empty document skipped
  EXPECT_EQ(d.documents(), 3);
  EXPECT_EQ(d.sha256(), base::Sha256Hex(text));
  EXPECT_EQ(d.content_type(), rpc::kTextContentType);
  EXPECT_EQ(d.max_token(), 't');
  EXPECT_EQ(datasets->PathOf("notes"), path);
  EXPECT_EQ(datasets->PathOf("mail"), "");
  // What is announced is valid as the coordinator checks it, and holds nothing of the text.
  google::protobuf::RepeatedPtrField<v1::LocalDataset> announced(datasets->announcements().begin(),
                                                                 datasets->announcements().end());
  EXPECT_TRUE(rpc::ValidateLocalDatasets(announced).ok());
  EXPECT_EQ(d.SerializeAsString().find("second"), std::string::npos);
}

TEST(LocalDatasetsTest, TokenFilesInTheirWidth) {
  const std::string bytes("\x01\x00\x2c\x01\x07\x00", 6);  // 1, 300, 7 as uint16 little-endian
  const std::string path = testing_util::WriteTempFile("ids.u16", bytes);
  absl::StatusOr<LocalDatasets> datasets = LocalDatasets::Load({{"ids", path}}, Format("uint16", ""));
  ASSERT_TRUE(datasets.ok()) << datasets.status();
  const v1::LocalDataset& d = datasets->announcements()[0];
  EXPECT_EQ(d.tokens(), 3);
  EXPECT_EQ(d.documents(), 1);
  EXPECT_EQ(d.max_token(), 300);
  EXPECT_EQ(d.token_encoding(), v1::TOKEN_ENCODING_UINT16_LE);
}

TEST(LocalDatasetsTest, UnreadableEmptyOrMalformedFilesNameTheDataset) {
  const std::string missing = testing_util::TempPath("absent.txt");
  absl::StatusOr<LocalDatasets> absent = LocalDatasets::Load({{"gone", missing}}, Format("text", ""));
  EXPECT_FALSE(absent.ok());
  EXPECT_THAT(absent.status().message(), HasSubstr("local dataset gone (" + missing + ")"));

  const std::string only_separators = testing_util::WriteTempFile("seps.txt", "\n\n\n\n");
  absl::StatusOr<LocalDatasets> empty =
      LocalDatasets::Load({{"e", only_separators}}, Format("text", "\\n\\n"));
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(empty.status().message(), HasSubstr("holds no tokens"));

  const std::string odd = testing_util::WriteTempFile("odd.u16", std::string("\x01\x00\x02", 3));
  absl::StatusOr<LocalDatasets> half = LocalDatasets::Load({{"odd", odd}}, Format("uint16", ""));
  EXPECT_EQ(half.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(half.status().message(), HasSubstr("local dataset odd"));
  EXPECT_THAT(half.status().message(), HasSubstr("not a whole number of 2-byte tokens"));
}

}  // namespace
}  // namespace slimfit::worker
