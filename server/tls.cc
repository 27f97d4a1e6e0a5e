#include "server/tls.h"

#include <fcntl.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "core/base/logging.h"
#include "core/base/seeded_bug.h"

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
struct ChainFree {
  void operator()(STACK_OF(X509) * s) const { sk_X509_pop_free(s, X509_free); }
};

std::unique_ptr<BIO, BioFree> MemoryBio(const std::string& pem) {
  return std::unique_ptr<BIO, BioFree>(BIO_new_mem_buf(pem.data(), int(pem.size())));
}

// Every certificate after the first in `bio` onto `chain`. False if the PEM does not end cleanly
// (a block that does not parse: a file caught halfway through a write, a missing intermediate).
bool ReadRestOfChain(BIO* bio, STACK_OF(X509) * chain) {
  ERR_clear_error();
  while (X509* next = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
    if (chain) {
      sk_X509_push(chain, next);
    } else {
      X509_free(next);
    }
  }
  const unsigned long end = ERR_peek_last_error();
  ERR_clear_error();
  return ERR_GET_LIB(end) == ERR_LIB_PEM && ERR_GET_REASON(end) == PEM_R_NO_START_LINE;
}

// An encrypted key must fail to load, never prompt for a passphrase on the terminal (OpenSSL's
// default when no callback is given), which would block start-up or a reload.
int NoPassphrase(char* /*buf*/, int /*size*/, int /*rwflag*/, void* /*u*/) { return 0; }

std::string ProcPath(int fd) { return absl::StrCat("/proc/self/fd/", fd); }

// A new memfd holding `text`, its mtime `mtime` seconds (gRPC's provider compares them).
absl::StatusOr<int> MemFile(const char* name, const std::string& text, int64_t mtime) {
  const int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("memfd_create: ", std::strerror(errno)));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = errno;
      close(fd);
      return absl::InternalError(absl::StrCat("writing a memfd: ", std::strerror(error)));
    }
    done += size_t(n);
  }
  const timespec times[2] = {{mtime, 0}, {mtime, 0}};
  if (futimens(fd, times) != 0) {
    const int error = errno;
    close(fd);
    return absl::InternalError(absl::StrCat("futimens on a memfd: ", std::strerror(error)));
  }
  return fd;
}

// Puts a new memfd holding `text` at descriptor `*fd` in one step (a fresh descriptor the
// first time): a reader opening /proc/self/fd/<*fd> gets the old file or the new one.
absl::Status ReplaceFile(int* fd, const char* name, const std::string& text, int64_t mtime) {
  auto fresh = MemFile(name, text, mtime);
  if (!fresh.ok()) return fresh.status();
  if (*fd < 0) {
    *fd = *fresh;
    return absl::OkStatus();
  }
  const bool moved = dup3(*fresh, *fd, O_CLOEXEC) >= 0;
  const int error = errno;
  close(*fresh);
  if (!moved) return absl::InternalError(absl::StrCat("dup3: ", std::strerror(error)));
  return absl::OkStatus();
}

}  // namespace

struct TlsCertificates::Files {
  std::string cert, key, ca;
  bool operator==(const Files&) const = default;
};

struct TlsCertificates::Identity {
  std::unique_ptr<X509, X509Free> cert;
  std::unique_ptr<EVP_PKEY, KeyFree> key;
  std::unique_ptr<STACK_OF(X509), ChainFree> chain;  // the certificates after the first
};

TlsCertificates::TlsCertificates(const Config& config, bool mutual)
    : cert_path_(config.tls_cert),
      key_path_(config.tls_key),
      ca_path_(config.tls_client_ca),
      mutual_(mutual) {}

TlsCertificates::~TlsCertificates() {
  stop_.Notify();
  if (poller_.joinable()) poller_.join();
  // gRPC's provider thread stops with the last reference to it (the server's credentials);
  // the server is gone before this, so nothing reads the memfds any more.
  provider_.reset();
  absl::MutexLock l(&reload_mu_);
  if (identity_fd_ >= 0) close(identity_fd_);
  if (ca_fd_ >= 0) close(ca_fd_);
}

absl::StatusOr<std::unique_ptr<TlsCertificates>> TlsCertificates::Create(const Config& config) {
  std::unique_ptr<TlsCertificates> tls(new TlsCertificates(config, !config.tls_client_ca.empty()));
  auto files = tls->ReadFiles();
  if (!files.ok()) return files.status();
  auto identity = tls->Check(*files);
  if (!identity.ok()) return identity.status();
  std::string identity_path, ca_path;
  {
    absl::MutexLock l(&tls->reload_mu_);
    if (absl::Status s = tls->Publish(*files, *std::move(identity)); !s.ok()) return s;
    identity_path = ProcPath(tls->identity_fd_);
    if (tls->mutual_) ca_path = ProcPath(tls->ca_fd_);
  }
  // gRPC reads the memfds through /proc: make sure that works here, or it would serve nothing.
  auto seen = ReadPemFile(identity_path, "server.tls_cert");
  if (!seen.ok() || *seen != files->key + "\n" + files->cert) {
    return absl::FailedPreconditionError(
        absl::StrCat("server.tls_cert: cannot read back the certificate through ", identity_path,
                     " (is /proc mounted?)"));
  }
  // Once a second: the provider re-reads two small in-memory files and compares them.
  tls->provider_ = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      identity_path, identity_path, ca_path, 1);
  return tls;
}

std::shared_ptr<grpc::ServerCredentials> TlsCertificates::GrpcCredentials() const {
  grpc::experimental::TlsServerCredentialsOptions options(provider_);
  options.watch_identity_key_cert_pairs();
  if (mutual_) {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  return grpc::experimental::TlsServerCredentials(options);
}

absl::StatusOr<TlsCertificates::Files> TlsCertificates::ReadFiles() const {
  Files files;
  auto cert = ReadPemFile(cert_path_, "server.tls_cert");
  if (!cert.ok()) return cert.status();
  files.cert = *std::move(cert);
  auto key = ReadPemFile(key_path_, "server.tls_key");
  if (!key.ok()) return key.status();
  files.key = *std::move(key);
  if (mutual_) {
    auto ca = ReadPemFile(ca_path_, "server.tls_client_ca");
    if (!ca.ok()) return ca.status();
    files.ca = *std::move(ca);
  }
  return files;
}

absl::StatusOr<std::shared_ptr<const TlsCertificates::Identity>> TlsCertificates::Check(
    const Files& files) const {
  auto identity = std::make_shared<Identity>();
  auto cert_bio = MemoryBio(files.cert);
  identity->cert.reset(PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr));
  if (!identity->cert) {
    return absl::InvalidArgumentError(
        absl::StrCat("server.tls_cert: '", cert_path_, "' holds no PEM certificate"));
  }
  identity->chain.reset(sk_X509_new_null());
  if (!ReadRestOfChain(cert_bio.get(), identity->chain.get())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "server.tls_cert: '", cert_path_, "' has a certificate that does not parse (truncated?)"));
  }
  identity->key.reset(
      PEM_read_bio_PrivateKey(MemoryBio(files.key).get(), nullptr, NoPassphrase, nullptr));
  if (!identity->key) {
    return absl::InvalidArgumentError(absl::StrCat(
        "server.tls_key: '", key_path_, "' holds no PEM private key (or it is encrypted)"));
  }
  if (X509_check_private_key(identity->cert.get(), identity->key.get()) != 1) {
    return absl::InvalidArgumentError(
        "server.tls_key: the key does not belong to server.tls_cert's certificate");
  }
  if (mutual_) {
    auto ca_bio = MemoryBio(files.ca);
    std::unique_ptr<X509, X509Free> first(
        PEM_read_bio_X509(ca_bio.get(), nullptr, nullptr, nullptr));
    if (!first) {
      return absl::InvalidArgumentError(
          absl::StrCat("server.tls_client_ca: '", ca_path_, "' holds no PEM certificate"));
    }
    if (!ReadRestOfChain(ca_bio.get(), nullptr)) {
      return absl::InvalidArgumentError(absl::StrCat("server.tls_client_ca: '", ca_path_,
                                                     "' has a certificate that does not parse"));
    }
  }
  ERR_clear_error();
  return std::shared_ptr<const Identity>(std::move(identity));
}

absl::Status TlsCertificates::Publish(const Files& files,
                                      std::shared_ptr<const Identity> identity) {
  // Every generation a later mtime: the provider re-reads when the mtimes it saw before and
  // after reading differ, so it never keeps half of one file and half of the next.
  ++generation_;
  // Key first: a reader of the chain (certificates only) skips the PRIVATE KEY block and a
  // reader of the key skips the certificates.
  absl::Status s =
      ReplaceFile(&identity_fd_, "shoal-tls-identity", files.key + "\n" + files.cert, generation_);
  if (s.ok() && mutual_) s = ReplaceFile(&ca_fd_, "shoal-tls-client-ca", files.ca, generation_);
  if (!s.ok()) return s;
  files_ = std::make_unique<Files>(files);
  core::SeedableMutexLock l(&identity_mu_, "tls.publish_unlocked");
  identity_ = std::move(identity);
  return absl::OkStatus();
}

absl::StatusOr<bool> TlsCertificates::Reload() {
  absl::MutexLock l(&reload_mu_);
  auto files = ReadFiles();
  if (!files.ok()) return files.status();
  if (files_ && *files == *files_) return false;
  auto identity = Check(*files);
  if (!identity.ok()) return identity.status();
  if (absl::Status s = Publish(*files, *std::move(identity)); !s.ok()) return s;
  return true;
}

void TlsCertificates::StartPolling(absl::Duration interval) {
  poller_ = std::thread([this, interval] { Poll(interval); });
}

void TlsCertificates::Poll(absl::Duration interval) {
  auto log = core::Logger("server");
  std::string last_error;
  while (!stop_.WaitForNotificationWithTimeout(interval)) {
    auto reloaded = Reload();
    if (!reloaded.ok()) {
      // Once per distinct error, not every interval while the broken files stay.
      if (reloaded.status().ToString() != last_error) {
        last_error = reloaded.status().ToString();
        log->error("TLS: keeping the old certificate: {}", last_error);
      }
      continue;
    }
    last_error.clear();
    if (*reloaded) log->info("TLS: renewed certificate loaded from {}", cert_path_);
  }
}

std::shared_ptr<const TlsCertificates::Identity> TlsCertificates::CurrentIdentity() const {
  absl::MutexLock l(&identity_mu_);
  return identity_;
}

int TlsCertificates::SelectCertificate(SSL* ssl, void* self) {
  auto identity = static_cast<TlsCertificates*>(self)->CurrentIdentity();
  // SSL_use_cert_and_key takes its own references: `identity` may be replaced meanwhile.
  return SSL_use_cert_and_key(ssl, identity->cert.get(), identity->key.get(), identity->chain.get(),
                              /*override=*/1) == 1;
}

bool TlsCertificates::SetUpHttpsContext(SSL_CTX& ctx) {
  SSL_CTX_set_options(&ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_SESSION_RESUMPTION_ON_RENEGOTIATION);
  SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION);
  SSL_CTX_set_cert_cb(&ctx, &TlsCertificates::SelectCertificate, this);
  return true;
}

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

}  // namespace shoal::server
