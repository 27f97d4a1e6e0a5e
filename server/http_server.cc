#include "server/http_server.h"

#include <httplib.h>

#include <chrono>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace shoal::server {

absl::StatusOr<std::pair<std::string, int>> SplitHostPort(const std::string& addr,
                                                          const char* field) {
  const size_t colon = addr.rfind(':');
  int port;
  if (colon == std::string::npos || !absl::SimpleAtoi(addr.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": '", addr, "' is not host:port"));
  }
  std::string host = addr.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return std::make_pair(host, port);
}

HttpServer::HttpServer(Handlers handlers) : handlers_(std::move(handlers)) {}

HttpServer::~HttpServer() { Stop(); }

absl::StatusOr<int> HttpServer::Start(const std::string& addr, const Tls& tls) {
  auto host_port = SplitHostPort(addr, "server.http_addr");
  if (!host_port.ok()) return host_port.status();
  if (!tls.set_up) {
    server_ = std::make_unique<httplib::Server>();
  } else {
    auto ssl = std::make_unique<httplib::SSLServer>(tls.set_up);
    if (!ssl->is_valid()) {
      return absl::InvalidArgumentError(
          "server.tls_cert / server.tls_key: the HTTP port cannot set up TLS");
    }
    server_ = std::move(ssl);
  }
  // httplib's default sets SO_REUSEPORT; like the gRPC port, a taken port must be an error.
  server_->set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server_->Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    if (handlers_.authorize_metrics &&
        !handlers_.authorize_metrics(req.get_header_value("Authorization"))) {
      res.status = 401;
      res.set_header("WWW-Authenticate", "Bearer");
      res.set_content("unauthenticated\n", "text/plain");
      return;
    }
    res.set_content(handlers_.metrics(), "text/plain; version=0.0.4; charset=utf-8");
  });
  server_->Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  server_->Get("/readyz", [this](const httplib::Request&, httplib::Response& res) {
    const bool ready = handlers_.ready();
    res.status = ready ? 200 : 503;
    res.set_content(ready ? "ready\n" : "not ready\n", "text/plain");
  });
  int port = host_port->second;
  if (port == 0) {
    port = server_->bind_to_any_port(host_port->first);
  } else if (!server_->bind_to_port(host_port->first, port)) {
    port = -1;
  }
  if (port < 0) {
    return absl::UnavailableError(absl::StrCat("server.http_addr: cannot bind ", addr));
  }
  thread_ = std::thread([this] {
    server_->listen_after_bind();
    listen_returned_.store(true);
  });
  return port;
}

void HttpServer::Stop() {
  if (!server_) return;
  // httplib's stop() does nothing until listen_after_bind has started listening, and a listen
  // that starts after it never ends: a SIGTERM right after start-up hung shoald in the join.
  while (thread_.joinable() && !listen_returned_.load() && !server_->is_running()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace shoal::server
