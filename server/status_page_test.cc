#include "server/status_page.h"

#include <memory>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/sha256.h"
#include "base/test_util.h"
#include "gtest/gtest.h"

namespace slimfit::server {
namespace {

constexpr char kToken[] = "ct-page-test-token";

class StatusPageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions options;
    options.state_dir = testing_util::TempPath(
        absl::StrCat("status_page_", ::testing::UnitTest::GetInstance()->current_test_info()->name()));
    absl::StatusOr<std::unique_ptr<Coordinator>> coordinator = Coordinator::Create(options);
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = *std::move(coordinator);
    absl::StatusOr<std::unique_ptr<AccessTokens>> tokens = AccessTokens::Create("client", kToken, "");
    ASSERT_TRUE(tokens.ok()) << tokens.status();
    tokens_ = *std::move(tokens);
    page_ = std::make_unique<StatusPage>(StatusPage::Options{coordinator_.get(), tokens_.get()});
  }

  base::HttpResponse Status(const std::string& authorization) {
    base::HttpRequest request;
    request.method = "GET";
    request.path = "/status";
    if (!authorization.empty()) request.headers["authorization"] = authorization;
    return page_->Status(request);
  }

  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<AccessTokens> tokens_;
  std::unique_ptr<StatusPage> page_;
};

std::string Header(const base::HttpResponse& response, const std::string& name) {
  for (const auto& [key, value] : response.headers) {
    if (key == name) return value;
  }
  return "";
}

std::string Between(const std::string& text, const std::string& open, const std::string& close) {
  const size_t start = text.find(open);
  if (start == std::string::npos) return "";
  const size_t end = text.find(close, start + open.size());
  return end == std::string::npos ? "" : text.substr(start + open.size(), end - start - open.size());
}

std::string Sha256Base64(const std::string& text) {
  std::string digest;
  absl::Base64Escape(absl::HexStringToBytes(base::Sha256Hex(text)), &digest);
  return digest;
}

TEST_F(StatusPageTest, ThePageHoldsNoDataAndAllowsOnlyItsOwnScriptAndStyle) {
  const base::HttpResponse response = page_->Page(base::HttpRequest{});
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.content_type, "text/html; charset=utf-8");
  EXPECT_NE(response.body.find("<form id=\"login\""), std::string::npos);
  EXPECT_NE(response.body.find("<main id=\"content\"></main>"), std::string::npos);
  EXPECT_EQ(response.body.find("http://"), std::string::npos) << "nothing external";
  EXPECT_EQ(response.body.find("https://"), std::string::npos) << "nothing external";
  const std::string policy = Header(response, "Content-Security-Policy");
  const std::string script = Between(response.body, "<script>", "</script>");
  const std::string style = Between(response.body, "<style>", "</style>");
  ASSERT_FALSE(script.empty());
  ASSERT_FALSE(style.empty());
  EXPECT_NE(policy.find(absl::StrCat("script-src 'sha256-", Sha256Base64(script), "'")), std::string::npos)
      << policy;
  EXPECT_NE(policy.find(absl::StrCat("style-src 'sha256-", Sha256Base64(style), "'")), std::string::npos)
      << policy;
  EXPECT_NE(policy.find("default-src 'none'"), std::string::npos);
  EXPECT_NE(policy.find("connect-src 'self'"), std::string::npos);
  EXPECT_EQ(Header(response, "Referrer-Policy"), "no-referrer");
  // The token goes in a header, never in a URL.
  EXPECT_NE(script.find("'Authorization': 'Bearer ' + bearer"), std::string::npos);
  EXPECT_EQ(script.find("?token"), std::string::npos);
}

TEST_F(StatusPageTest, StatusNeedsAClientToken) {
  for (const std::string& wrong :
       {std::string(), std::string("Bearer"), std::string("Bearer "), std::string("Bearer wrong-token"),
        std::string("Basic Y3QtcGFnZQ=="), absl::StrCat("Token ", kToken), absl::StrCat(kToken)}) {
    const base::HttpResponse response = Status(wrong);
    EXPECT_EQ(response.status, 401) << wrong;
    EXPECT_EQ(response.body.find("Workers"), std::string::npos) << "no data without a token";
    EXPECT_EQ(Header(response, "WWW-Authenticate"), "Bearer realm=\"slimfit coordinator\"");
  }
  for (const std::string& right : {absl::StrCat("Bearer ", kToken), absl::StrCat("bearer ", kToken),
                                   absl::StrCat("  BEARER   ", kToken, " ")}) {
    const base::HttpResponse response = Status(right);
    EXPECT_EQ(response.status, 200) << right;
    EXPECT_NE(response.body.find("No worker has registered yet."), std::string::npos) << response.body;
    EXPECT_NE(response.body.find("No job has been submitted yet."), std::string::npos);
  }
}

TEST_F(StatusPageTest, RoutesServeThePageAndTheStatus) {
  std::map<std::string, base::HttpHandler> routes = page_->Routes();
  ASSERT_EQ(routes.size(), 2u);
  base::HttpRequest request;
  EXPECT_EQ(routes.at("/")(request).status, 200);
  EXPECT_EQ(routes.at("/status")(request).status, 401);
  request.headers["authorization"] = absl::StrCat("Bearer ", kToken);
  EXPECT_EQ(routes.at("/status")(request).status, 200);
}

}  // namespace
}  // namespace slimfit::server
