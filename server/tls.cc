#include "server/tls.h"

#include <grpcpp/security/server_credentials.h>
#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace shoal::server {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};

std::unique_ptr<BIO, BioFree> MemoryBio(const std::string& pem) {
  return std::unique_ptr<BIO, BioFree>(BIO_new_mem_buf(pem.data(), int(pem.size())));
}

// The first certificate parses, the key parses, and the key is the certificate's.
absl::Status CheckPair(const std::string& cert_pem, const std::string& key_pem,
                       const Config& config) {
  std::unique_ptr<X509, X509Free> cert(
      PEM_read_bio_X509(MemoryBio(cert_pem).get(), nullptr, nullptr, nullptr));
  if (!cert) {
    return absl::InvalidArgumentError(
        absl::StrCat("server.tls_cert: '", config.tls_cert, "' holds no PEM certificate"));
  }
  std::unique_ptr<EVP_PKEY, KeyFree> key(
      PEM_read_bio_PrivateKey(MemoryBio(key_pem).get(), nullptr, nullptr, nullptr));
  if (!key) {
    return absl::InvalidArgumentError(absl::StrCat(
        "server.tls_key: '", config.tls_key, "' holds no PEM private key (or it is encrypted)"));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    return absl::InvalidArgumentError(
        "server.tls_key: the key does not belong to server.tls_cert's certificate");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ReadPemFile(const std::string& path, const char* field) {
  std::ifstream in(path);
  if (!in.is_open()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": cannot open '", path, "'"));
  }
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad() || text.str().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": '", path, "' is empty"));
  }
  return text.str();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const Config& config) {
  if (config.tls_cert.empty()) return grpc::InsecureServerCredentials();
  auto cert = ReadPemFile(config.tls_cert, "server.tls_cert");
  if (!cert.ok()) return cert.status();
  auto key = ReadPemFile(config.tls_key, "server.tls_key");
  if (!key.ok()) return key.status();
  if (absl::Status s = CheckPair(*cert, *key, config); !s.ok()) return s;
  grpc::SslServerCredentialsOptions options;
  options.pem_key_cert_pairs.push_back({*key, *cert});
  if (config.tls_client_ca.empty()) {
    options.client_certificate_request = GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE;
  } else {
    auto ca = ReadPemFile(config.tls_client_ca, "server.tls_client_ca");
    if (!ca.ok()) return ca.status();
    std::unique_ptr<X509, X509Free> first(
        PEM_read_bio_X509(MemoryBio(*ca).get(), nullptr, nullptr, nullptr));
    if (!first) {
      return absl::InvalidArgumentError(absl::StrCat(
          "server.tls_client_ca: '", config.tls_client_ca, "' holds no PEM certificate"));
    }
    options.pem_root_certs = *ca;
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

}  // namespace shoal::server
