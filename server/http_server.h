// HttpServer: the operations endpoint on its own port — /metrics (Prometheus text format),
// /healthz (the process is alive), /readyz (serving: 200, otherwise 503).
//
// With a certificate (server.tls_cert / tls_key) it serves HTTPS only, with the gRPC port's
// certificate (renewals included) and no client certificate (kubelet probes and most scrapers
// present none), so /healthz and /readyz stay open to probes. /metrics may require `Authorization:
// Bearer <key>` (server.metrics_auth): otherwise 401 with nothing of the metrics in it.
//
// Runs cpp-httplib's server on its own threads; handlers only read snapshots, never block on
// the query path.
//
// Thread-safety: Start/Stop from one thread; the callbacks are called from HTTP threads.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace httplib {
class Server;
}
struct ssl_ctx_st;  // OpenSSL's SSL_CTX

namespace shoal::server {

class HttpServer {
 public:
  struct Handlers {
    std::function<std::string()> metrics;
    std::function<bool()> ready;
    // Set: /metrics answers only when it returns true for the Authorization header.
    std::function<bool(const std::string&)> authorize_metrics;
  };

  // Unset: plaintext HTTP. Set: HTTPS only, with an SSL_CTX that `set_up` prepares (its
  // certificate, key and options; TlsCertificates::SetUpHttpsContext); false refuses to start.
  struct Tls {
    std::function<bool(ssl_ctx_st&)> set_up;
  };

  explicit HttpServer(Handlers handlers);
  ~HttpServer();

  // Binds `addr` (host:port; port 0 picks a free one) and starts serving; returns the port.
  // INVALID_ARGUMENT when the TLS set-up fails.
  absl::StatusOr<int> Start(const std::string& addr, const Tls& tls = {});
  void Stop();

 private:
  Handlers handlers_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::atomic<bool> listen_returned_{false};  // set by thread_ when listen_after_bind returns
};

// Splits "host:port"; INVALID_ARGUMENT names `field` when malformed.
absl::StatusOr<std::pair<std::string, int>> SplitHostPort(const std::string& addr,
                                                          const char* field);

}  // namespace shoal::server
