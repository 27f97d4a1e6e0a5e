// Server: shoald assembled — API keys and TLS certificates (both renewable while it runs),
// catalog, CPU arena, admin and maintenance executors, gRPC service (raw methods, with health and
// reflection), HTTP endpoint, demo loader — with the start-up and graceful-shutdown order in one
// place.
//
// Shutdown (SIGTERM): stop admitting (new RPCs get UNAVAILABLE, health NOT_SERVING), let
// in-flight RPCs finish for the grace period then cancel the rest, wait for the arena to go
// idle, close the catalog (drains and fsyncs every WAL), stop HTTP. A shared-scan read still at
// the disk 30 s after gRPC stopped would call into the cache and the I/O scheduler when it
// answers, so those two are then left allocated: the shutdown is not clean (clean_shutdown()),
// the log says what was still out, and shoald exits with kExitShutdownLeakedState.
//
// Thread-safety: Start() and Shutdown() from one thread; accessors from any thread.
#pragma once

#include <grpcpp/security/server_credentials.h>

#include <atomic>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/config.h"

namespace shoal::server {

// shoald's exit code when SIGTERM's shutdown had to leave state allocated (reads still out at
// the disk after 30 s); the others: 0 a clean shutdown, 1 cannot start, 2 bad flags or config
// (or a malformed or unknown SHOAL_FAILPOINTS), 86 a failpoint's crash. README lists them.
inline constexpr int kExitShutdownLeakedState = 3;

class Server {
 public:
  explicit Server(Config config);
  ~Server();

  absl::Status Start();
  // Idempotent; see the file comment for the order.
  void Shutdown();
  // After Shutdown(): false when it had to leave the cache and the I/O scheduler allocated.
  bool clean_shutdown() const { return clean_shutdown_; }
  // Re-reads server.api_key_file (SIGHUP): the number of keys now accepted. On an error the
  // old keys stay in force.
  absl::StatusOr<size_t> ReloadApiKeys();
  // Re-reads server.tls_cert / tls_key / tls_client_ca (SIGHUP; also every
  // server.tls_reload_seconds): true when a renewal now serves new connections, false when
  // nothing changed or TLS is off. On an error the old certificate keeps serving.
  absl::StatusOr<bool> ReloadTls();

  int grpc_port() const;
  int http_port() const;

 private:
  struct State;
  // Start()'s steps, in order; each fails start-up with a Status naming the setting.
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> LoadCredentials();
  absl::Status OpenStorage();  // I/O scheduler, partition cache, catalog
  void StartService();         // executors and the gRPC service objects
  absl::Status StartGrpc(const std::shared_ptr<grpc::ServerCredentials>& credentials);
  absl::Status StartHttp();
  void ServeCollections();  // health SERVING, per-collection statuses, the demo loader
  void LogServing() const;
  const Config config_;
  std::unique_ptr<State> state_;
  bool clean_shutdown_ = true;
};

}  // namespace shoal::server
