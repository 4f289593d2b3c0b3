// Tokens minted here with keys libcrypto makes for the test (RSA 2048 and
// EC P-256), checked for every way a token can be wrong.
#include "auth/token.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "auth/jwt_testing.h"
#include "config/manifest.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched::auth {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

constexpr Micros kNow = 1'800'000'000LL * kMicrosPerSecond;
constexpr int64_t kNowS = 1'800'000'000;

using testing::B64;
using Key = testing::SigningKey;

Key MakeRsa(std::string kid) { return Key::Make("RS256", std::move(kid)); }
Key MakeEc(std::string kid) { return Key::Make("ES256", std::move(kid)); }

std::string Mint(const Key& k, const json& claims, json header = nullptr) {
  return k.Mint(claims, std::move(header));
}

json Claims() {
  return {
      {"iss", "https://idp.test"}, {"aud", "gpusched"}, {"sub", "alice"},
      {"groups", {"sre", "ml"}},   {"team", "team-a"},  {"exp", kNowS + 600},
      {"nbf", kNowS - 60}};
}

class TokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TokenConfig c;
    c.issuer = "https://idp.test";
    c.audience = "gpusched";
    c.jwks_file = "unused";
    c.leeway = 30 * kMicrosPerSecond;
    c.tenant_claim = "team";
    c.claim_roles = {{"groups", "ml", "tenant-user", ""}};
    auto v = TokenVerifier::Create(
        c,
        [this]() -> absl::StatusOr<std::string> {
          ++fetches_;
          return jwks_.dump();
        },
        [this] { return now_; });
    ASSERT_TRUE(v.ok()) << v.status();
    verifier_ = *std::move(v);
    jwks_ = {{"keys", {rsa_.Jwk(), ec_.Jwk()}}};
    policy_ = AccessPolicy::Empty();
  }

  absl::StatusOr<Principal> Verify(const std::string& token) {
    return verifier_->Verify(token, *policy_);
  }

  Key rsa_ = MakeRsa("rsa-1");
  Key ec_ = MakeEc("ec-1");
  json jwks_;
  Micros now_ = kNow;
  int fetches_ = 0;
  std::shared_ptr<const AccessPolicy> policy_;
  std::unique_ptr<TokenVerifier> verifier_;
};

TEST_F(TokenTest, GoodTokensOfBothAlgorithms) {
  for (const Key* k : {&rsa_, &ec_}) {
    SCOPED_TRACE(k->alg);
    auto p = Verify(Mint(*k, Claims()));
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->subject, "token:alice");
    EXPECT_EQ(p->tenant, "team-a");
    EXPECT_EQ(p->RoleNames(), "tenant-user@team-a");
  }
}

TEST_F(TokenTest, EveryWayATokenCanBeWrong) {
  const Key stranger = MakeRsa("rsa-1");  // same kid, another key
  json expired = Claims();
  expired["exp"] = kNowS - 31;
  json within_leeway = Claims();
  within_leeway["exp"] = kNowS - 29;
  json early = Claims();
  early["nbf"] = kNowS + 31;
  json issuer = Claims();
  issuer["iss"] = "https://evil.test";
  json audience = Claims();
  audience["aud"] = {"other", "another"};
  json no_exp = Claims();
  no_exp.erase("exp");
  json nothing = Claims();
  nothing["groups"] = {"marketing"};
  const std::string good = Mint(rsa_, Claims());
  const std::string none =
      absl::StrCat(B64(json{{"alg", "none"}, {"kid", "rsa-1"}}.dump()), ".",
                   B64(Claims().dump()), ".");
  std::string tampered = good;
  tampered[tampered.find('.') + 5] ^= 1;  // one bit of the payload
  struct Case {
    const char* name;
    std::string token;
    absl::StatusCode code;
    const char* message;
  };
  const Case cases[] = {
      {"bad signature", Mint(stranger, Claims()),
       absl::StatusCode::kUnauthenticated, "bad signature"},
      {"tampered payload", tampered, absl::StatusCode::kUnauthenticated, ""},
      {"alg none", none, absl::StatusCode::kUnauthenticated,
       "alg 'none' is refused"},
      {"alg HS256", Mint(rsa_, Claims(), {{"alg", "HS256"}, {"kid", "rsa-1"}}),
       absl::StatusCode::kUnauthenticated, "alg 'HS256' is refused"},
      {"alg of another key",
       Mint(rsa_, Claims(), {{"alg", "RS256"}, {"kid", "ec-1"}}),
       absl::StatusCode::kUnauthenticated, "does not fit key 'ec-1'"},
      {"wrong issuer", Mint(rsa_, issuer), absl::StatusCode::kUnauthenticated,
       "issuer 'https://evil.test' is not https://idp.test"},
      {"wrong audience", Mint(rsa_, audience),
       absl::StatusCode::kUnauthenticated, "audience is not gpusched"},
      {"expired", Mint(rsa_, expired), absl::StatusCode::kUnauthenticated,
       "expired at"},
      {"no expiry", Mint(rsa_, no_exp), absl::StatusCode::kUnauthenticated,
       "no exp"},
      {"not yet valid", Mint(ec_, early), absl::StatusCode::kUnauthenticated,
       "not valid before"},
      {"unknown kid", Mint(MakeEc("ec-9"), Claims()),
       absl::StatusCode::kUnauthenticated, "key id 'ec-9' is not in the JWKS"},
      {"maps to nothing", Mint(rsa_, nothing),
       absl::StatusCode::kPermissionDenied, "maps to no role"},
      {"not a JWT", "gs-notatoken", absl::StatusCode::kUnauthenticated,
       "not a JWT"},
      {"oversized", std::string(kMaxTokenBytes + 1, 'a'),
       absl::StatusCode::kUnauthenticated, "over"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto p = Verify(c.token);
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().code(), c.code) << p.status();
    EXPECT_THAT(p.status().message(), HasSubstr(c.message));
    // Never the token itself.
    EXPECT_THAT(p.status().message(),
                ::testing::Not(HasSubstr(c.token.substr(0, 40))));
  }
  EXPECT_TRUE(Verify(Mint(rsa_, within_leeway)).ok());
}

TEST_F(TokenTest, BindingsGrantRolesToSubjectsAndGroups) {
  config::AccessManifests access;
  ASSERT_TRUE(config::ParseManifests(R"(apiVersion: gpusched.io/v1
kind: RoleBinding
metadata: {name: sre}
spec:
  role: operator
  subjects: [{kind: Group, name: sre}]
)",
                                     "t", &access)
                  .ok());
  auto policy = AccessPolicy::Create(access.roles, access.bindings);
  ASSERT_TRUE(policy.ok());
  auto p = verifier_->Verify(Mint(ec_, Claims()), **policy, *policy);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->RoleNames(), "operator, tenant-user@team-a");
}

TEST_F(TokenTest, TheJwksIsCachedAndRefreshedWithinBounds) {
  ASSERT_TRUE(Verify(Mint(rsa_, Claims())).ok());
  EXPECT_EQ(fetches_, 1);
  // A verified token is not checked again; another one uses the cached JWKS.
  ASSERT_TRUE(Verify(Mint(rsa_, Claims())).ok());
  ASSERT_TRUE(Verify(Mint(ec_, Claims())).ok());
  EXPECT_EQ(fetches_, 1);
  // A key the provider added: an unknown kid refreshes, once per bound.
  const Key rotated = MakeEc("ec-2");
  jwks_["keys"].push_back(rotated.Jwk());
  now_ += 11 * kMicrosPerSecond;
  EXPECT_TRUE(Verify(Mint(rotated, Claims())).ok());
  EXPECT_EQ(fetches_, 2);
  // Unknown kids in a burst do not hammer the provider.
  for (int i = 0; i < 5; ++i) {
    EXPECT_FALSE(Verify(Mint(MakeEc("ec-x"), Claims())).ok());
  }
  EXPECT_EQ(fetches_, 2);
  // The refresh period re-reads it; a provider that fails keeps the last
  // good JWKS.
  jwks_ = json("not a jwks");
  now_ += 301 * kMicrosPerSecond;
  json later = Claims();
  later["exp"] = kNowS + 1000;
  EXPECT_TRUE(Verify(Mint(ec_, later)).ok());
  EXPECT_EQ(fetches_, 3);
}

TEST(TokenConfigTest, BadConfigNamesTheFields) {
  TokenConfig c;
  c.leeway = 400 * kMicrosPerSecond;
  const absl::Status st = ValidateTokenConfig(c);
  EXPECT_THAT(st.message(), HasSubstr("oidc.issuer: required"));
  EXPECT_THAT(st.message(), HasSubstr("oidc.audience: required"));
  EXPECT_THAT(st.message(), HasSubstr("give one of jwksFile and jwksUrl"));
  EXPECT_THAT(st.message(), HasSubstr("oidc.leewayS: must be in 0..300"));
}

}  // namespace
}  // namespace gpusched::auth
