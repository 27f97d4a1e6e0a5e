#include "server/api_keys.h"

#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/config.h"
#include "tests/fakes/temp_dir.h"

namespace shoal::server::api_keys_test {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ParseApiKeys, OneKeyPerLineWithoutCommentsBlankLinesOrSurroundingSpaces) {
  EXPECT_THAT(ParseApiKeys("# rotated monthly\n\n  alpha  \r\nbeta\n#gamma\n   \n"),
              ElementsAre("alpha", "beta"));
  EXPECT_THAT(ParseApiKeys(""), ElementsAre());
}

TEST(ApiKeys, NoKeyConfiguredAcceptsEveryRequest) {
  auto keys = ApiKeys::Create("", "");
  ASSERT_TRUE(keys.ok());
  EXPECT_FALSE((*keys)->enabled());
}

TEST(ApiKeys, OnlyExactKeysAreAcceptedAsBearerTokens) {
  auto keys = ApiKeys::Create("s3cret", "");
  ASSERT_TRUE(keys.ok());
  EXPECT_TRUE((*keys)->enabled());
  EXPECT_TRUE((*keys)->AcceptsAuthorization("Bearer s3cret"));
  EXPECT_TRUE((*keys)->AcceptsAuthorization("bearer s3cret"));  // the scheme ignores case
  for (const char* wrong : {"Bearer s3cre", "Bearer s3cretX", "Bearer ", "s3cret", "Bearer S3CRET",
                            "Basic s3cret", ""}) {
    EXPECT_FALSE((*keys)->AcceptsAuthorization(wrong)) << wrong;
  }
}

TEST(ApiKeys, ReloadReplacesTheFilesKeysAndKeepsTheStaticOne) {
  testing::TempDir dir;
  const std::string file = dir.Sub("keys");
  std::ofstream(file) << "a\nb\n";
  auto keys = ApiKeys::Create("env", file);
  ASSERT_TRUE(keys.ok());
  EXPECT_TRUE((*keys)->Accepts("a"));
  EXPECT_TRUE((*keys)->Accepts("b"));
  std::ofstream(file) << "c\n";
  EXPECT_EQ(*(*keys)->Reload(), 2u);
  EXPECT_FALSE((*keys)->Accepts("a"));
  EXPECT_TRUE((*keys)->Accepts("c"));
  EXPECT_TRUE((*keys)->Accepts("env"));
}

TEST(ApiKeys, AFileWithNoKeysRefusesEveryoneRatherThanOpeningTheServer) {
  testing::TempDir dir;
  const std::string file = dir.Sub("keys");
  std::ofstream(file) << "# nothing yet\n";
  auto keys = ApiKeys::Create("", file);
  ASSERT_TRUE(keys.ok());
  EXPECT_TRUE((*keys)->enabled());
  EXPECT_FALSE((*keys)->AcceptsAuthorization("Bearer "));
  EXPECT_FALSE((*keys)->Accepts(""));
}

TEST(ApiKeys, MissingFileFailsCreateAndAFailedReloadKeepsTheOldKeys) {
  testing::TempDir dir;
  auto missing = ApiKeys::Create("", dir.Sub("none"));
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("server.api_key_file"));
  const std::string file = dir.Sub("keys");
  std::ofstream(file) << "a\n";
  auto keys = ApiKeys::Create("", file);
  ASSERT_TRUE(keys.ok());
  std::remove(file.c_str());
  EXPECT_FALSE((*keys)->Reload().ok());
  EXPECT_TRUE((*keys)->Accepts("a"));
}

absl::StatusOr<LoadedConfig> Load(std::vector<std::string> args) {
  args.insert(args.begin(), "shoald");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return LoadConfig(int(argv.size()), argv.data());
}

TEST(SecurityConfig, TlsAndMetricsAuthSettingsMustBeComplete) {
  EXPECT_THAT(std::string(Load({"--tls-cert", "c.pem"}).status().message()),
              HasSubstr("server.tls_key"));
  EXPECT_THAT(std::string(Load({"--tls-client-ca", "ca.pem"}).status().message()),
              HasSubstr("server.tls_client_ca"));
  EXPECT_THAT(std::string(Load({"--metrics-auth"}).status().message()),
              HasSubstr("server.metrics_auth"));
  EXPECT_TRUE(Load({"--metrics-auth", "--api-key-file", "k"}).ok());
}

TEST(SecurityConfig, EverySecuritySettingComesFromYamlLikeTheOthers) {
  testing::TempDir dir;
  const std::string yaml = dir.Sub("shoal.yaml");
  std::ofstream(yaml) << "server:\n  api_key_file: /k\n  metrics_auth: true\n"
                         "  tls_cert: /c.pem\n  tls_key: /k.pem\n  tls_client_ca: /ca.pem\n";
  setenv("SHOAL_TLS_CLIENT_CA", "/env-ca.pem", 1);
  auto c = Load({"--config", yaml});
  unsetenv("SHOAL_TLS_CLIENT_CA");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->config.api_key_file, "/k");
  EXPECT_TRUE(c->config.metrics_auth);
  EXPECT_EQ(c->config.tls_cert, "/c.pem");
  EXPECT_EQ(c->config.tls_key, "/k.pem");
  EXPECT_EQ(c->config.tls_client_ca, "/env-ca.pem");
}

TEST(SecurityConfig, ApiKeyFlagIsWarnedAboutButTheEnvironmentIsNot) {
  auto flag = Load({"--api-key", "k"});
  ASSERT_TRUE(flag.ok());
  EXPECT_THAT(SecurityWarnings(*flag), ElementsAre(HasSubstr("visible to other users")));
  setenv("SHOAL_API_KEY", "k", 1);
  auto env = Load({});
  unsetenv("SHOAL_API_KEY");
  ASSERT_TRUE(env.ok());
  EXPECT_THAT(SecurityWarnings(*env), ElementsAre());
}

TEST(SecurityConfig, NonLoopbackListenersWithoutKeyOrTlsAreWarnedAbout) {
  auto open = Load({"--grpc-addr", "0.0.0.0:7700", "--http-addr", "10.0.0.1:7701"});
  ASSERT_TRUE(open.ok());
  EXPECT_THAT(SecurityWarnings(*open),
              ElementsAre(HasSubstr("0.0.0.0:7700 (not loopback) without an API key"),
                          HasSubstr("0.0.0.0:7700 (not loopback) without TLS"),
                          HasSubstr("10.0.0.1:7701 (not loopback) without an API key"),
                          HasSubstr("10.0.0.1:7701 (not loopback) without TLS")));
  auto closed =
      Load({"--grpc-addr", "0.0.0.0:7700", "--http-addr", "10.0.0.1:7701", "--api-key-file", "k",
            "--metrics-auth", "--tls-cert", "c", "--tls-key", "k"});
  ASSERT_TRUE(closed.ok());
  EXPECT_THAT(SecurityWarnings(*closed), ElementsAre());
}

}  // namespace
}  // namespace shoal::server::api_keys_test
