#include "rpc/text_proto_checks.h"

#include <limits>

#include "gtest/gtest.h"
#include "proto/slimfit.pb.h"

namespace slimfit::rpc {
namespace {

TEST(IsValidUtf8Test, AcceptsWellFormedText) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));  // é € 😀
  EXPECT_TRUE(IsValidUtf8("\xf4\x8f\xbf\xbf"));                           // U+10FFFF
}

TEST(IsValidUtf8Test, RefusesMalformedText) {
  EXPECT_FALSE(IsValidUtf8("\xff"));
  EXPECT_FALSE(IsValidUtf8("\x80"));              // a lone continuation byte
  EXPECT_FALSE(IsValidUtf8("\xc3"));              // truncated
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));      // a surrogate
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // above U+10FFFF
}

TEST(FirstNonUtf8FieldTest, NamesTheFieldWithItsPath) {
  v1::JobSpec spec;
  spec.set_name("fine");
  spec.add_dataset_ids("ds-1");
  spec.add_dataset_ids("ds-\xff");
  EXPECT_EQ(FirstNonUtf8Field(spec), "dataset_ids[1]");

  spec.clear_dataset_ids();
  EXPECT_EQ(FirstNonUtf8Field(spec), std::nullopt);
  spec.mutable_model()->mutable_checkpoint()->set_upload_id("\xc0\xaf");
  EXPECT_EQ(FirstNonUtf8Field(spec), "model.checkpoint.upload_id");
}

TEST(FirstNonUtf8FieldTest, IgnoresBytesFields) {
  v1::UploadMetadata metadata;
  metadata.set_document_separator("\xff\xfe");  // bytes: any value
  EXPECT_EQ(FirstNonUtf8Field(metadata), std::nullopt);
  metadata.set_name("\xff");
  EXPECT_EQ(FirstNonUtf8Field(metadata), "name");
}

TEST(FirstNonFiniteFieldTest, NamesNanAndInfinityWithTheirPaths) {
  v1::JobSpec spec;
  spec.mutable_optimizer()->set_learning_rate(3e-4);
  spec.set_held_out_fraction(0.1);
  EXPECT_EQ(FirstNonFiniteField(spec), std::nullopt);

  spec.mutable_optimizer()->set_learning_rate(-std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(FirstNonFiniteField(spec), "optimizer.learning_rate");
  spec.mutable_optimizer()->set_learning_rate(3e-4);
  spec.set_held_out_fraction(std::numeric_limits<double>::infinity());
  EXPECT_EQ(FirstNonFiniteField(spec), "held_out_fraction");
}

TEST(FirstNonFiniteFieldTest, LooksIntoRepeatedMessages) {
  v1::MemoryPlan plan;
  plan.add_frontier()->mutable_prediction()->set_seconds(0.5);
  plan.add_frontier()->mutable_plan()->set_beta(-std::numeric_limits<double>::infinity());
  EXPECT_EQ(FirstNonFiniteField(plan), "frontier[1].plan.beta");
}

}  // namespace
}  // namespace slimfit::rpc
