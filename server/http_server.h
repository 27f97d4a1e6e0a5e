// HttpServer: the operations endpoint on its own port — /metrics (Prometheus text format),
// /healthz (the process is alive), /readyz (serving: 200, otherwise 503).
//
// Runs cpp-httplib's server on its own threads; handlers only read snapshots, never block on
// the query path.
//
// Thread-safety: Start/Stop from one thread; the callbacks are called from HTTP threads.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace httplib {
class Server;
}

namespace shoal::server {

class HttpServer {
 public:
  struct Handlers {
    std::function<std::string()> metrics;
    std::function<bool()> ready;
  };

  explicit HttpServer(Handlers handlers);
  ~HttpServer();

  // Binds `addr` (host:port; port 0 picks a free one) and starts serving; returns the port.
  absl::StatusOr<int> Start(const std::string& addr);
  void Stop();

 private:
  Handlers handlers_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

// Splits "host:port"; INVALID_ARGUMENT names `field` when malformed.
absl::StatusOr<std::pair<std::string, int>> SplitHostPort(const std::string& addr,
                                                          const char* field);

}  // namespace shoal::server
