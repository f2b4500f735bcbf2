#include "worker/worker_identity.h"

#include "gtest/gtest.h"

namespace slimfit::worker {
namespace {

TEST(WorkerIdentityTest, JoinTokenUntilACredentialThenTheCredential) {
  WorkerIdentity identity("join-secret", "");
  EXPECT_EQ(identity.BearerForCoordinator(), "join-secret");
  EXPECT_FALSE(identity.has_credential());
  identity.SetCredential("wc-123");
  EXPECT_EQ(identity.BearerForCoordinator(), "wc-123");
  identity.ClearCredential();
  EXPECT_EQ(identity.BearerForCoordinator(), "join-secret");
}

TEST(WorkerIdentityTest, OnlyTheCurrentCoordinatorTokenComputes) {
  WorkerIdentity identity("join-secret", "wc-1");
  EXPECT_FALSE(identity.AcceptsCoordinator(""));  // before any registration: nobody
  identity.SetCoordinatorToken("ct-1");
  EXPECT_TRUE(identity.AcceptsCoordinator("ct-1"));
  EXPECT_FALSE(identity.AcceptsCoordinator("join-secret"));
  EXPECT_FALSE(identity.AcceptsCoordinator("wc-1"));
  identity.SetCoordinatorToken("ct-2");  // a new incarnation
  EXPECT_FALSE(identity.AcceptsCoordinator("ct-1"));
  EXPECT_TRUE(identity.AcceptsOperator("ct-2"));
  EXPECT_TRUE(identity.AcceptsOperator("join-secret"));
  EXPECT_FALSE(identity.AcceptsOperator("wc-1"));
}

}  // namespace
}  // namespace slimfit::worker
