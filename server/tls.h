// TlsCertificates: shoald's TLS identity (server.tls_cert / tls_key) and, for mutual TLS, the
// CA its gRPC clients must be signed by (server.tls_client_ca), for both ports, renewable
// without a restart.
//
// The files are read and checked here (the certificate parses, the key parses and belongs to
// it, the CA bundle holds a certificate), so a bad file at start-up is an INVALID_ARGUMENT
// naming the setting rather than a port that silently fails to open. Reload() (SIGHUP, and
// every server.tls_reload_seconds on a thread of its own) reads them again: a renewal that
// passes the same checks serves every new connection; one that does not is refused with the
// old pair still serving. Connections already open keep the certificate they started with.
//
// How gRPC 1.51 is made to follow: a listening port's credentials cannot be swapped, only fed
// by a certificate provider, and the one that re-reads files (FileWatcherCertificateProvider)
// checks nothing — a key from another certificate, or a missing file halfway through a copy,
// would be served (or serve nothing) and fail every handshake. So gRPC never sees the
// configured files: it watches an in-memory copy (a memfd, read through /proc/self/fd) that
// holds only a pair checked here, key and certificate in one file so a read cannot mix two
// pairs. A renewal is written to a new memfd and put in place with one dup3(); each one gets a
// later mtime, which the provider compares before and after reading. The provider looks once a
// second, so a reload reaches gRPC within about a second. The HTTPS port (cpp-httplib) takes
// the current pair at each handshake (SSL_CTX_set_cert_cb) and follows at once.
//
// Thread-safety: thread-safe. Reload() may run on any thread, concurrently with handshakes.
#pragma once

#include <grpcpp/security/server_credentials.h>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "server/config.h"

struct ssl_ctx_st;  // OpenSSL's SSL_CTX
struct ssl_st;      // and SSL

namespace grpc::experimental {
class CertificateProviderInterface;
}

namespace shoal::server {

class TlsCertificates {
 public:
  // Reads and checks the files. REQUIRES: config.tls_cert and config.tls_key are set.
  static absl::StatusOr<std::unique_ptr<TlsCertificates>> Create(const Config& config);
  ~TlsCertificates();  // stops polling

  TlsCertificates(const TlsCertificates&) = delete;
  TlsCertificates& operator=(const TlsCertificates&) = delete;

  // TLS (or mutual TLS) credentials for the gRPC port that follow every reload.
  std::shared_ptr<grpc::ServerCredentials> GrpcCredentials() const;

  // For httplib::SSLServer's set-up callback: TLS 1.2 or later, no compression, and the
  // current pair chosen at each handshake. Never asks for a client certificate.
  bool SetUpHttpsContext(ssl_ctx_st& ctx);

  // Reads the files again: true when a renewal now serves new connections, false when nothing
  // changed. On an error (naming the setting) the old certificate, key and CA keep serving.
  absl::StatusOr<bool> Reload();

  // Calls Reload() every `interval` until destruction, logging each renewal, and each error
  // once (not again while the files stay the same).
  void StartPolling(absl::Duration interval);

 private:
  struct Files;     // the PEM texts as read
  struct Identity;  // the parsed pair the HTTPS port serves
  TlsCertificates(const Config& config, bool mutual);
  absl::StatusOr<Files> ReadFiles() const;
  // The first certificate parses, the key parses and is its key, the CA bundle (if any) holds
  // a certificate: INVALID_ARGUMENT naming the setting otherwise.
  absl::StatusOr<std::shared_ptr<const Identity>> Check(const Files& files) const;
  absl::Status Publish(const Files& files, std::shared_ptr<const Identity> identity)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(reload_mu_);
  std::shared_ptr<const Identity> CurrentIdentity() const;
  static int SelectCertificate(ssl_st* ssl, void* self);
  void Poll(absl::Duration interval);

  const std::string cert_path_, key_path_, ca_path_;  // configured; ca_path_ empty: no mTLS
  const bool mutual_;

  absl::Mutex reload_mu_;  // one Reload() at a time
  std::unique_ptr<Files> files_ ABSL_GUARDED_BY(reload_mu_);
  int identity_fd_ ABSL_GUARDED_BY(reload_mu_) = -1;    // key + certificate, what gRPC reads
  int ca_fd_ ABSL_GUARDED_BY(reload_mu_) = -1;          // client CA bundle (mutual TLS)
  int64_t generation_ ABSL_GUARDED_BY(reload_mu_) = 0;  // the memfds' mtime, in seconds

  mutable absl::Mutex identity_mu_;
  std::shared_ptr<const Identity> identity_ ABSL_GUARDED_BY(identity_mu_);

  std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider_;
  absl::Notification stop_;
  std::thread poller_;
};

// The whole file; INVALID_ARGUMENT naming `field` when it cannot be read or is empty.
absl::StatusOr<std::string> ReadPemFile(const std::string& path, const char* field);

}  // namespace shoal::server
