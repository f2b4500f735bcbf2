#include "worker/local_data_reader.h"

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/sha256.h"
#include "base/test_util.h"
#include "data_formats/dataset_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace slimfit::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Documents "aaaa", "bbbbbbb", "cc", "dddddddddd", "e" separated by blank lines: 24 tokens,
// document starts 0, 4, 11, 13, 23.
constexpr char kText[] = "aaaa\n\nbbbbbbb\n\ncc\n\ndddddddddd\n\ne";

struct Held {
  std::string path;
  LocalDatasets datasets;
  std::string sha256;
};

Held Hold(const std::string& file, const std::string& text) {
  Held held;
  held.path = testing_util::WriteTempFile(file, text);
  absl::StatusOr<rpc::DatasetFormat> format = rpc::ParseDatasetFormat("text", "\\n\\n");
  EXPECT_TRUE(format.ok());
  absl::StatusOr<LocalDatasets> loaded = LocalDatasets::Load({{"notes", held.path}}, *format);
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  held.datasets = *std::move(loaded);
  held.sha256 = base::Sha256Hex(text);
  return held;
}

TEST(LocalDataReaderTest, DescribesTheDocumentsOfEveryWholeSequence) {
  Held held = Hold("reader_describe.txt", kText);
  LocalDataReader reader(&held.datasets);
  v1::DescribeLocalDataRequest request;
  request.set_sha256(held.sha256);
  request.set_sequence_length(5);
  absl::StatusOr<v1::LocalDataLayout> layout = reader.Describe(request);
  ASSERT_TRUE(layout.ok()) << layout.status();
  // Sequences [0,5) [5,10) [10,15) [15,20): starts 4 | none | 11, 13 | none; the partial [20,24) dropped.
  EXPECT_EQ(layout->sequences(), 4);
  EXPECT_THAT(layout->documents(), ElementsAre(2, 1, 3, 1));
  EXPECT_EQ(layout->next_sequence(), 4);

  request.set_first_sequence(3);
  layout = reader.Describe(request);
  ASSERT_TRUE(layout.ok());
  EXPECT_THAT(layout->documents(), ElementsAre(1));
  EXPECT_EQ(layout->first_sequence(), 3);
}

TEST(LocalDataReaderTest, ReadsTheNamedSequencesWithTheirDocumentStarts) {
  Held held = Hold("reader_read.txt", kText);
  LocalDataReader reader(&held.datasets);
  v1::LocalDataShard shard;
  shard.set_sha256(held.sha256);
  shard.add_sequences(2);
  shard.add_sequences(0);
  absl::StatusOr<LocalDataReader::Sequences> read = reader.Read(shard, 5);
  ASSERT_TRUE(read.ok()) << read.status();
  // Sequence 2 is tokens 10..14 ("bccdd"), sequence 0 is "aaaab".
  std::string text;
  for (int64_t token : read->tokens) text.push_back(static_cast<char>(token));
  EXPECT_EQ(text, "bccddaaaab");
  EXPECT_THAT(read->doc_starts, ElementsAre(0, 1, 3, 5, 9));
}

TEST(LocalDataReaderTest, RefusesWhatItCannotServeWithTheFieldOrTheReason) {
  Held held = Hold("reader_refuse.txt", kText);
  LocalDataReader reader(&held.datasets);
  v1::LocalDataShard shard;
  shard.set_sha256(held.sha256);
  shard.add_sequences(4);  // only 0..3 are whole
  absl::StatusOr<LocalDataReader::Sequences> read = reader.Read(shard, 5);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(read.status().message(), HasSubstr("local_data.sequences: entry 0 = 4 is outside [0, 4)"));

  shard.set_sha256(std::string(64, 'a'));
  shard.set_sequences(0, 0);
  read = reader.Read(shard, 5);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(read.status().message(), HasSubstr("holds no dataset with SHA-256 aaaa"));

  v1::DescribeLocalDataRequest request;
  request.set_sha256("not-a-digest");
  request.set_sequence_length(5);
  EXPECT_THAT(reader.Describe(request).status().message(), HasSubstr("sha256: must be 64"));
  request.set_sha256(held.sha256);
  request.set_sequence_length(1);
  EXPECT_THAT(reader.Describe(request).status().message(), HasSubstr("sequence_length: must be in [2,"));
  request.set_sequence_length(5);
  request.set_first_sequence(5);
  EXPECT_THAT(reader.Describe(request).status().message(), HasSubstr("first_sequence: 5 is outside [0, 4]"));
}

TEST(LocalDataReaderTest, AFileThatChangedSinceStartIsNotServed) {
  Held held = Hold("reader_changed.txt", kText);
  {
    std::ofstream out(held.path, std::ios::trunc);
    out << "something else entirely";
  }
  LocalDataReader reader(&held.datasets);
  v1::LocalDataShard shard;
  shard.set_sha256(held.sha256);
  shard.add_sequences(0);
  absl::StatusOr<LocalDataReader::Sequences> read = reader.Read(shard, 5);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(read.status().message(), HasSubstr("the file changed since the worker started"));
}

}  // namespace
}  // namespace slimfit::worker
