// Security of the real shoald on loopback (issue 17): TLS and mutual TLS with a throw-away CA
// made by deploy/make-secrets.sh (openssl) in a temporary directory, certificates renewed while
// shoald runs, API key files rotated by SIGHUP, /metrics behind the key, health checks exempt, and
// the start-up warnings.
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"
#include "tests/integration/shoald_process.h"

namespace shoal::security_test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::ShoaldProcess;

// A CA, a server certificate (SAN localhost, 127.0.0.1) and a client certificate in `dir`.
struct Pki {
  std::string dir;
  std::string ca() const { return dir + "/ca.pem"; }
  std::string server_cert() const { return dir + "/server.pem"; }
  std::string server_key() const { return dir + "/server.key"; }
  std::string client_cert() const { return dir + "/client.pem"; }
  std::string client_key() const { return dir + "/client.key"; }
};

Pki MakePki(const std::string& dir) {
  const std::string command = std::string(SHOAL_SOURCE_DIR) + "/deploy/make-secrets.sh " + dir +
                              " >/dev/null 2>" + dir + ".err";
  EXPECT_EQ(std::system(command.c_str()), 0) << testing::ReadWholeFile(dir + ".err");
  return {dir};
}

std::vector<std::string> TlsFlags(const Pki& pki, bool mutual) {
  std::vector<std::string> flags = {"--tls-cert", pki.server_cert(), "--tls-key", pki.server_key()};
  if (mutual) flags.insert(flags.end(), {"--tls-client-ca", pki.ca()});
  return flags;
}

absl::Status List(const std::string& addr, std::optional<TlsOptions> tls,
                  const std::string& api_key = "") {
  ClientOptions options;
  options.timeout = std::chrono::seconds(20);
  options.retry.max_retries = 0;
  options.tls = std::move(tls);
  options.api_key = api_key;
  return Client(addr, options).ListCollections().status();
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pki_ = MakePki(dir_.Sub("pki"));
    other_ = MakePki(dir_.Sub("other"));
  }
  std::unique_ptr<ShoaldProcess> Start(bool mutual) {
    return ShoaldProcess::Start(dir_.Sub("data"), TlsFlags(pki_, mutual));
  }
  testing::TempDir dir_;
  Pki pki_;
  Pki other_;  // another CA and its certificates: trusted by nobody here
};

TEST_F(TlsTest, ClientTrustingTheCaIsServedByIpAndByName) {
  auto server = Start(false);
  ASSERT_NE(server, nullptr);
  EXPECT_THAT(server->log(), HasSubstr("serving gRPC (TLS)"));
  EXPECT_TRUE(List(server->addr(), TlsOptions{.ca_file = pki_.ca()}).ok());
  const std::string by_name = "localhost:" + std::to_string(server->grpc_port());
  EXPECT_TRUE(List(by_name, TlsOptions{.ca_file = pki_.ca()}).ok());
}

TEST_F(TlsTest, PlaintextClientIsRefusedOnATlsPort) {
  auto server = Start(false);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(List(server->addr(), std::nullopt).code(), absl::StatusCode::kUnavailable);
}

TEST_F(TlsTest, ClientTrustingAnotherCaRefusesTheServer) {
  auto server = Start(false);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(List(server->addr(), TlsOptions{.ca_file = other_.ca()}).code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(TlsTest, UnreadableCaFileIsAnInvalidArgumentNamingIt) {
  auto server = Start(false);
  ASSERT_NE(server, nullptr);
  absl::Status s = List(server->addr(), TlsOptions{.ca_file = dir_.Sub("missing.pem")});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("ca_file"));
}

TEST_F(TlsTest, MutualTlsRefusesAClientWithoutACertificate) {
  auto server = Start(true);
  ASSERT_NE(server, nullptr);
  EXPECT_THAT(server->log(), HasSubstr("serving gRPC (mutual TLS)"));
  EXPECT_EQ(List(server->addr(), TlsOptions{.ca_file = pki_.ca()}).code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(TlsTest, MutualTlsRefusesAClientCertificateFromAnotherCa) {
  auto server = Start(true);
  ASSERT_NE(server, nullptr);
  TlsOptions tls{pki_.ca(), other_.client_cert(), other_.client_key(), ""};
  EXPECT_EQ(List(server->addr(), tls).code(), absl::StatusCode::kUnavailable);
}

TEST_F(TlsTest, MutualTlsServesAClientWithACertificateFromItsCa) {
  auto server = Start(true);
  ASSERT_NE(server, nullptr);
  TlsOptions tls{pki_.ca(), pki_.client_cert(), pki_.client_key(), ""};
  EXPECT_TRUE(List(server->addr(), tls).ok());
  ClientOptions options{.tls = tls};
  Client client(server->addr(), options);
  EXPECT_EQ(*client.Health(), HealthStatus::kServing);
}

// shoalctl's exit status and output; `env` goes before the command (VAR=value ...).
std::pair<int, std::string> Ctl(const std::string& env, const std::string& args) {
  const std::string cmd = env + " " + testing::BinDir() + "/shoalctl " + args + " 2>&1";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST_F(TlsTest, ShoalctlTakesTheCaAndClientCertificateFromFlagsOrTheEnvironment) {
  auto server = Start(true);
  ASSERT_NE(server, nullptr);
  const std::string addr = "--addr " + server->addr() + " --timeout-ms 20000 ";
  const std::string cert = " --tls-cert " + pki_.client_cert() + " --tls-key " + pki_.client_key();
  auto [ok, out] = Ctl("", addr + "--tls-ca " + pki_.ca() + cert + " list");
  EXPECT_EQ(ok, 0) << out;
  EXPECT_NE(Ctl("", addr + "--tls-ca " + pki_.ca() + " list").first, 0);
  EXPECT_NE(Ctl("", addr + "list").first, 0);
  // The environment: shoald's own SHOAL_TLS_CERT is not taken for a client certificate.
  const std::string env = "SHOAL_TLS_CERT=" + pki_.server_cert() + " SHOAL_TLS_CA=" + pki_.ca() +
                          " SHOAL_TLS_CLIENT_CERT=" + pki_.client_cert() +
                          " SHOAL_TLS_CLIENT_KEY=" + pki_.client_key();
  auto [health, health_out] = Ctl(env, addr + "health");
  EXPECT_EQ(health, 0) << health_out;
  EXPECT_THAT(health_out, HasSubstr("SERVING"));
}

TEST_F(TlsTest, HttpPortServesHttpsOnlyWithoutAskingForAClientCertificate) {
  auto server = Start(true);
  ASSERT_NE(server, nullptr);
  httplib::SSLClient https("127.0.0.1", server->http_port());
  https.set_ca_cert_path(pki_.ca().c_str());
  https.enable_server_certificate_verification(true);
  auto ready = https.Get("/readyz");
  ASSERT_TRUE(ready) << httplib::to_string(ready.error());
  EXPECT_EQ(ready->status, 200);
  httplib::Client plain("127.0.0.1", server->http_port());
  EXPECT_FALSE(plain.Get("/readyz"));
}

TEST_F(TlsTest, KeyThatIsNotTheCertificatesFailsStartUpNamingTheSetting) {
  auto server = LocalShoald::Start(
      {.binary = testing::BinDir() + "/shoald",
       .data_dir = dir_.Sub("data"),
       .extra_args = {"--tls-cert", pki_.server_cert(), "--tls-key", other_.server_key()}});
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(std::string(server.status().message()), HasSubstr("server.tls_key"));
}

// Polls `done` for up to 30 s (a reload reaches gRPC within about two seconds: shoald's check
// and gRPC's provider each look once a second); bounded so a server that never reloads fails
// rather than hangs.
template <typename F>
bool Eventually(F done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// Replaces `to` with a copy of `from` in one rename, as a Secret volume update does.
void Install(const std::string& from, const std::string& to) {
  std::ofstream(to + ".tmp") << testing::ReadWholeFile(from);
  ASSERT_EQ(std::rename((to + ".tmp").c_str(), to.c_str()), 0) << to;
}

// shoald serves copies of pki_'s files in live/, which the tests renew while it runs.
class TlsReloadTest : public TlsTest {
 protected:
  std::unique_ptr<ShoaldProcess> StartLive(bool mutual, const std::string& reload_seconds) {
    std::filesystem::create_directories(live_.dir);
    Install(pki_.server_key(), live_.server_key());
    Install(pki_.server_cert(), live_.server_cert());
    Install(pki_.ca(), live_.ca());
    std::vector<std::string> flags = TlsFlags(live_, mutual);
    flags.insert(flags.end(), {"--tls-reload-seconds", reload_seconds});
    return ShoaldProcess::Start(dir_.Sub("data"), flags);
  }
  // Installs `pki`'s server key and certificate (and its CA as the client CA) into live/.
  void Renew(const Pki& pki) {
    Install(pki.server_key(), live_.server_key());
    Install(pki.server_cert(), live_.server_cert());
    Install(pki.ca(), live_.ca());
  }
  static bool HttpsReady(int port, const std::string& ca) {
    httplib::SSLClient https("127.0.0.1", port);
    https.set_ca_cert_path(ca.c_str());
    https.enable_server_certificate_verification(true);
    auto res = https.Get("/readyz");
    return res && res->status == 200;
  }
  // The old pair keeps serving for longer than gRPC's provider takes to pick up a file (1 s):
  // a pair that reached it would refuse these clients within that time.
  static bool KeepsServing(const std::string& addr, const std::string& ca) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2500);
    while (std::chrono::steady_clock::now() < until) {
      if (!List(addr, TlsOptions{.ca_file = ca}).ok()) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
    return true;
  }
  Pki live_{dir_.Sub("live")};
};

TEST_F(TlsReloadTest, RenewedCertificateFromANewCaServesNewConnectionsWithoutARestart) {
  auto server = StartLive(false, "1");
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(List(server->addr(), TlsOptions{.ca_file = pki_.ca()}).ok());
  Renew(other_);
  ASSERT_TRUE(Eventually([&] {
    return List(server->addr(), TlsOptions{.ca_file = other_.ca()}).ok();
  })) << server->log();
  EXPECT_EQ(List(server->addr(), TlsOptions{.ca_file = pki_.ca()}).code(),
            absl::StatusCode::kUnavailable);
  // The HTTPS port serves the renewed certificate too.
  EXPECT_TRUE(HttpsReady(server->http_port(), other_.ca()));
  EXPECT_FALSE(HttpsReady(server->http_port(), pki_.ca()));
  EXPECT_THAT(server->log(), HasSubstr("TLS: renewed certificate loaded"));
}

TEST_F(TlsReloadTest, SighupRenewsTheCertificateAndTheClientCaForMutualTls) {
  auto server = StartLive(true, "0");  // no polling: only the SIGHUP reloads
  ASSERT_NE(server, nullptr);
  const TlsOptions old_client{pki_.ca(), pki_.client_cert(), pki_.client_key(), ""};
  const TlsOptions new_client{other_.ca(), other_.client_cert(), other_.client_key(), ""};
  ASSERT_TRUE(List(server->addr(), old_client).ok());
  Renew(other_);
  ASSERT_EQ(kill(server->pid(), SIGHUP), 0);
  ASSERT_TRUE(Eventually([&] { return List(server->addr(), new_client).ok(); })) << server->log();
  EXPECT_EQ(List(server->addr(), old_client).code(), absl::StatusCode::kUnavailable);
  // The server's new certificate with the old client certificate: the client CA changed too.
  const TlsOptions old_certificate{other_.ca(), pki_.client_cert(), pki_.client_key(), ""};
  EXPECT_EQ(List(server->addr(), old_certificate).code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(server->log(), HasSubstr("SIGHUP: TLS certificate reloaded"));
}

TEST_F(TlsReloadTest, BrokenRenewalKeepsTheOldPairServing) {
  auto server = StartLive(false, "1");
  ASSERT_NE(server, nullptr);
  // A certificate from the new CA with a key that is not its own.
  Install(other_.server_cert(), live_.server_cert());
  ASSERT_TRUE(Eventually(
      [&] { return server->log().find("TLS: keeping the old certificate") != std::string::npos; }));
  EXPECT_THAT(server->log(), HasSubstr("server.tls_key: the key does not belong"));
  EXPECT_TRUE(KeepsServing(server->addr(), pki_.ca()));
  EXPECT_EQ(List(server->addr(), TlsOptions{.ca_file = other_.ca()}).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_TRUE(HttpsReady(server->http_port(), pki_.ca()));
  // A certificate file caught halfway through a write: the right certificate (its key matches),
  // then half of another block. It must be refused, not served without the rest of its chain.
  const std::string ca_pem = testing::ReadWholeFile(pki_.ca());
  std::ofstream(live_.server_cert() + ".tmp")
      << testing::ReadWholeFile(pki_.server_cert()) << ca_pem.substr(0, ca_pem.size() / 2);
  ASSERT_EQ(std::rename((live_.server_cert() + ".tmp").c_str(), live_.server_cert().c_str()), 0);
  ASSERT_TRUE(Eventually([&] {
    return server->log().find("does not parse (truncated?)") != std::string::npos;
  })) << server->log();
  EXPECT_TRUE(KeepsServing(server->addr(), pki_.ca()));
  // A key file gone missing (halfway through a copy), on SIGHUP: likewise.
  std::remove(live_.server_key().c_str());
  ASSERT_EQ(kill(server->pid(), SIGHUP), 0);
  ASSERT_TRUE(Eventually([&] {
    return server->log().find("SIGHUP: keeping the old TLS certificate") != std::string::npos;
  }));
  EXPECT_TRUE(List(server->addr(), TlsOptions{.ca_file = pki_.ca()}).ok());
}

// A measurement, not a test (run with --gtest_also_run_disabled_tests): a new connection
// (TCP + TLS handshake) and one search, then one search on a warm connection, plaintext vs
// TLS, alternating so both see the same machine load.
TEST_F(TlsTest, DISABLED_HandshakeAndOneQueryLatencyPlaintextVsTls) {
  auto plain = ShoaldProcess::Start(dir_.Sub("plain"));
  auto tls = Start(false);
  ASSERT_TRUE(plain && tls);
  std::vector<Point> points;
  for (uint64_t i = 0; i < 1000; ++i) points.push_back({i, std::vector<float>(32, float(i))});
  const ClientOptions tls_options{.tls = TlsOptions{.ca_file = pki_.ca()}};
  for (auto [addr, options] :
       {std::pair{plain->addr(), ClientOptions{}}, {tls->addr(), tls_options}}) {
    Client c(addr, options);
    ASSERT_TRUE(c.CreateCollection({"m", 32, Metric::kL2}).ok());
    ASSERT_TRUE(c.Upsert("m", points).ok());
  }
  const std::vector<float> query(32, 7.5f);
  std::vector<double> cold[2], warm[2];
  std::unique_ptr<Client> warm_clients[2] = {std::make_unique<Client>(plain->addr()),
                                             std::make_unique<Client>(tls->addr(), tls_options)};
  for (int i = 0; i < 400; ++i) {
    for (int t = 0; t < 2; ++t) {
      auto start = std::chrono::steady_clock::now();
      {
        Client c(t ? tls->addr() : plain->addr(), t ? tls_options : ClientOptions{});
        ASSERT_TRUE(c.Search("m", query, {.k = 10}).ok());
      }
      auto mid = std::chrono::steady_clock::now();
      ASSERT_TRUE(warm_clients[t]->Search("m", query, {.k = 10}).ok());
      auto end = std::chrono::steady_clock::now();
      cold[t].push_back(std::chrono::duration<double, std::micro>(mid - start).count());
      warm[t].push_back(std::chrono::duration<double, std::micro>(end - mid).count());
    }
  }
  auto pct = [](std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    return v[size_t(q * double(v.size() - 1))];
  };
  for (auto [name, v] : {std::pair{"new connection + 1 search", cold}, {"1 search, warm", warm}}) {
    std::printf(
        "%-26s plaintext p50 %7.0f us p90 %7.0f us | TLS p50 %7.0f us p90 %7.0f us | "
        "TLS/plaintext p50 %.2fx\n",
        name, pct(v[0], 0.5), pct(v[0], 0.9), pct(v[1], 0.5), pct(v[1], 0.9),
        pct(v[1], 0.5) / pct(v[0], 0.5));
  }
}

void WriteKeys(const std::string& path, const std::string& text) {
  std::ofstream(path + ".tmp") << text;
  std::rename((path + ".tmp").c_str(), path.c_str());
}

// Polls until `key` is accepted (the SIGHUP is handled on shoald's main thread); bounded so a
// server that never reloads fails rather than hangs.
bool AcceptedSoon(const std::string& addr, const std::string& key) {
  for (int i = 0; i < 500; ++i) {
    if (List(addr, std::nullopt, key).ok()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

TEST(ApiKeyFile, SighupRotatesKeysWithoutARestart) {
  testing::TempDir dir;
  const std::string keys = dir.Sub("api-keys");
  WriteKeys(keys, "# rotated by SIGHUP\n\nkey-A\n");
  auto server = ShoaldProcess::Start(dir.Sub("data"), {"--api-key-file", keys});
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(List(server->addr(), std::nullopt, "key-A").ok());
  EXPECT_EQ(List(server->addr(), std::nullopt, "key-B").code(), absl::StatusCode::kUnauthenticated);
  WriteKeys(keys, "key-B\n");
  ASSERT_EQ(kill(server->pid(), SIGHUP), 0);
  ASSERT_TRUE(AcceptedSoon(server->addr(), "key-B"));
  EXPECT_EQ(List(server->addr(), std::nullopt, "key-A").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(server->log(), HasSubstr("API keys reloaded, 1 accepted"));
}

TEST(ApiKeyFile, UnreadableFileOnSighupKeepsTheOldKeys) {
  testing::TempDir dir;
  const std::string keys = dir.Sub("api-keys");
  WriteKeys(keys, "key-A\n");
  auto server = ShoaldProcess::Start(dir.Sub("data"), {"--api-key-file", keys});
  ASSERT_NE(server, nullptr);
  std::remove(keys.c_str());
  ASSERT_EQ(kill(server->pid(), SIGHUP), 0);
  for (int i = 0; i < 500 && server->log().find("keeping the old API keys") == std::string::npos;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_THAT(server->log(), HasSubstr("keeping the old API keys"));
  EXPECT_TRUE(List(server->addr(), std::nullopt, "key-A").ok());
}

TEST(ApiKeyFile, KeysFromTheFileAndTheEnvironmentBothWork) {
  testing::TempDir dir;
  const std::string keys = dir.Sub("api-keys");
  WriteKeys(keys, "from-file\n");
  auto server = ShoaldProcess::Start(dir.Sub("data"), {"--api-key-file", keys}, {},
                                     {"SHOAL_API_KEY=from-env"});
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(List(server->addr(), std::nullopt, "from-file").ok());
  EXPECT_TRUE(List(server->addr(), std::nullopt, "from-env").ok());
  EXPECT_THAT(server->log(), Not(HasSubstr("visible to other users")));
}

std::pair<int, std::string> Metrics(int port, const std::string& key) {
  httplib::Client http("127.0.0.1", port);
  httplib::Headers headers;
  if (!key.empty()) headers.emplace("Authorization", "Bearer " + key);
  auto res = http.Get("/metrics", headers);
  if (!res) return {0, ""};
  return {res->status, res->body};
}

TEST(MetricsAuth, MetricsNeedTheKeyWhileHealthChecksDoNot) {
  testing::TempDir dir;
  auto server = ShoaldProcess::Start(dir.Sub("data"), {"--api-key", "s3cret", "--metrics-auth"});
  ASSERT_NE(server, nullptr);
  auto [anonymous, anonymous_body] = Metrics(server->http_port(), "");
  EXPECT_EQ(anonymous, 401);
  EXPECT_THAT(anonymous_body, Not(HasSubstr("shoal_")));
  EXPECT_EQ(Metrics(server->http_port(), "guess").first, 401);
  auto [ok, body] = Metrics(server->http_port(), "s3cret");
  EXPECT_EQ(ok, 200);
  EXPECT_THAT(body, HasSubstr("shoal_"));
  httplib::Client http("127.0.0.1", server->http_port());
  EXPECT_EQ(http.Get("/healthz")->status, 200);
  EXPECT_EQ(http.Get("/readyz")->status, 200);
  EXPECT_THAT(server->log(), HasSubstr("--api-key on the command line is visible"));
  // Once started, ps no longer shows the key (it was visible until then: hence the warning).
  EXPECT_THAT(testing::ReadWholeFile("/proc/" + std::to_string(server->pid()) + "/cmdline"),
              Not(HasSubstr("s3cret")));
}

TEST(MetricsAuth, GrpcHealthIsExemptAndRefusalsLeakNothing) {
  testing::TempDir dir;
  auto server = ShoaldProcess::Start(dir.Sub("data"), {"--api-key", "s3cret"});
  ASSERT_NE(server, nullptr);
  Client anonymous(server->addr());
  EXPECT_EQ(*anonymous.Health(), HealthStatus::kServing);
  for (const std::string& key : {std::string(), std::string("s3cre"), std::string("s3cretX")}) {
    absl::Status s = List(server->addr(), std::nullopt, key);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << key;
    EXPECT_THAT(std::string(s.message()), Not(HasSubstr("s3cret")));
  }
}

TEST(MetricsAuth, WithoutAnyApiKeyIsAConfigError) {
  testing::TempDir dir;
  auto server = LocalShoald::Start({.binary = testing::BinDir() + "/shoald",
                                    .data_dir = dir.Sub("data"),
                                    .extra_args = {"--metrics-auth"}});
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(std::string(server.status().message()), HasSubstr("server.metrics_auth"));
}

// Runs shoald on 0.0.0.0 (every interface) instead of LocalShoald's 127.0.0.1.
std::unique_ptr<ShoaldProcess> StartOnEveryInterface(const std::string& data_dir,
                                                     std::vector<std::string> extra) {
  return ShoaldProcess::Start(data_dir, std::move(extra),
                              {"/bin/bash", "-c", "exec \"${@//127.0.0.1:0/0.0.0.0:0}\"", "bash"});
}

TEST(StartupWarnings, EveryInterfaceWithoutKeyOrTlsIsWarnedAbout) {
  testing::TempDir dir;
  auto server = StartOnEveryInterface(dir.Sub("data"), {});
  ASSERT_NE(server, nullptr);
  const std::string log = server->log();
  EXPECT_THAT(log, HasSubstr("listening on 0.0.0.0:0 (not loopback) without an API key:"));
  EXPECT_THAT(log, HasSubstr("gRPC on 0.0.0.0:0 (not loopback) without TLS"));
  EXPECT_THAT(log, HasSubstr("without an API key for /metrics"));
  EXPECT_THAT(log, HasSubstr("HTTP on 0.0.0.0:0 (not loopback) without TLS"));
}

TEST(StartupWarnings, EveryInterfaceWithKeyTlsAndMetricsAuthIsNotWarnedAbout) {
  testing::TempDir dir;
  const Pki pki = MakePki(dir.Sub("pki"));
  std::vector<std::string> flags = TlsFlags(pki, false);
  flags.insert(flags.end(), {"--api-key-file", dir.Sub("pki/api-keys"), "--metrics-auth"});
  auto server = StartOnEveryInterface(dir.Sub("data"), flags);
  ASSERT_NE(server, nullptr);
  EXPECT_THAT(server->log(), Not(HasSubstr("(not loopback)")));
}

TEST(StartupWarnings, LoopbackIsNotWarnedAbout) {
  testing::TempDir dir;
  auto server = ShoaldProcess::Start(dir.Sub("data"), {});
  ASSERT_NE(server, nullptr);
  EXPECT_THAT(server->log(), Not(HasSubstr("(not loopback)")));
}

}  // namespace
}  // namespace shoal::security_test
