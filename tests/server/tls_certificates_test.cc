// TlsCertificates in-process: handshakes of the HTTPS port's context run on one thread while
// Reload() swaps the pair on another (the header's "Reload() may run concurrently with
// handshakes"). Under TSan this is the test that sees a renewal published without its lock
// (seeded bug tls.publish_unlocked, tools/run-seeded.sh).
#include <openssl/bio.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "server/config.h"
#include "server/tls.h"
#include "tests/fakes/temp_dir.h"
#include "tests/fakes/watchdog.h"

namespace shoal::server::tls_certificates_test {
namespace {

// A self-signed certificate with common name `cn` and its key, made by the openssl tool.
void MakePair(const std::string& dir, const std::string& cn) {
  const std::string cmd =
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
      "-nodes -days 2 -subj /CN=" +
      cn + " -keyout " + dir + "/" + cn + ".key -out " + dir + "/" + cn + ".pem >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

// Copies `from` over `to` with a rename, as a certificate manager renews a file.
void Install(const std::string& from, const std::string& to) {
  std::filesystem::copy_file(from, to + ".tmp", std::filesystem::copy_options::overwrite_existing);
  std::filesystem::rename(to + ".tmp", to);
}

// One TLS handshake over a memory BIO pair against `server`; the common name of the
// certificate the server presented ("" if the handshake failed).
std::string HandshakeCommonName(SSL_CTX* server, SSL_CTX* client) {
  SSL* s = SSL_new(server);
  SSL* c = SSL_new(client);
  BIO *sb = nullptr, *cb = nullptr;
  BIO_new_bio_pair(&sb, 0, &cb, 0);
  SSL_set_bio(s, sb, sb);
  SSL_set_bio(c, cb, cb);
  SSL_set_accept_state(s);
  SSL_set_connect_state(c);
  bool done = false;
  for (int round = 0; round < 32 && !done; ++round) {
    const int rc = SSL_do_handshake(c);
    const int rs = SSL_do_handshake(s);
    done = rc == 1 && rs == 1;
  }
  std::string cn;
  if (X509* peer = done ? SSL_get1_peer_certificate(c) : nullptr) {
    char name[256] = {};
    X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName, name, sizeof(name));
    cn = name;
    X509_free(peer);
  }
  SSL_free(c);
  SSL_free(s);
  return cn;
}

TEST(TlsCertificates, HandshakesDuringReloadsAlwaysGetACompleteCurrentOrPreviousPair) {
  testing::Watchdog watchdog(std::chrono::seconds(120), "TLS handshakes during reloads");
  testing::TempDir dir;
  MakePair(dir.path(), "first");
  MakePair(dir.path(), "second");
  Config config;
  config.tls_cert = dir.Sub("live.pem");
  config.tls_key = dir.Sub("live.key");
  Install(dir.Sub("first.pem"), config.tls_cert);
  Install(dir.Sub("first.key"), config.tls_key);
  auto tls = TlsCertificates::Create(config);
  ASSERT_TRUE(tls.ok()) << tls.status();

  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> server(SSL_CTX_new(TLS_server_method()),
                                                           &SSL_CTX_free);
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> client(SSL_CTX_new(TLS_client_method()),
                                                           &SSL_CTX_free);
  ASSERT_TRUE((*tls)->SetUpHttpsContext(*server));
  SSL_CTX_set_verify(client.get(), SSL_VERIFY_NONE, nullptr);
  ASSERT_EQ(HandshakeCommonName(server.get(), client.get()), "first");

  constexpr int kRenewals = 40;
  std::thread renewer([&] {
    for (int i = 1; i <= kRenewals; ++i) {
      const std::string cn = i % 2 == 1 ? "second" : "first";
      // Key and certificate change together between two reloads, never during one.
      Install(dir.Sub(cn + ".key"), config.tls_key);
      Install(dir.Sub(cn + ".pem"), config.tls_cert);
      auto renewed = (*tls)->Reload();
      EXPECT_TRUE(renewed.ok() && *renewed) << i << ": " << renewed.status();
    }
  });
  int handshakes = 0;
  for (; handshakes < 200; ++handshakes) {
    const std::string cn = HandshakeCommonName(server.get(), client.get());
    ASSERT_TRUE(cn == "first" || cn == "second")
        << "handshake " << handshakes << ": '" << cn << "'";
  }
  renewer.join();
  // The last renewal (an even one) installed "first": every new handshake gets it.
  EXPECT_EQ(HandshakeCommonName(server.get(), client.get()), "first");
  auto unchanged = (*tls)->Reload();
  ASSERT_TRUE(unchanged.ok()) << unchanged.status();
  EXPECT_FALSE(*unchanged) << "the files did not change: no renewal";
}

}  // namespace
}  // namespace shoal::server::tls_certificates_test
