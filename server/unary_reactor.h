// UnaryReactor: the reactor every unary handler returns. It records the RPC's latency and
// status code in Metrics when finished, forwards client cancellation to the request's
// CancelToken, and deletes itself when gRPC is done with it.
//
// Thread-safety: FinishWith() is called exactly once, from any thread; OnCancel() may run
// concurrently with it.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>

#include "absl/status/status.h"
#include "core/base/cancel.h"
#include "server/convert.h"
#include "server/metrics.h"

namespace shoal::server {

class UnaryReactor final : public grpc::ServerUnaryReactor {
 public:
  // `token` carries the call's deadline; it is fixed at construction because OnCancel() may
  // run on another thread at any moment after that.
  UnaryReactor(Metrics* metrics, const char* method, std::shared_ptr<core::CancelToken> token)
      : metrics_(metrics),
        method_(method),
        start_(std::chrono::steady_clock::now()),
        token_(std::move(token)) {
    metrics_->RpcStarted();
  }

  // Cancelled when the client goes away; expires at the client's deadline.
  const std::shared_ptr<core::CancelToken>& cancel_token() const { return token_; }

  void FinishWith(const absl::Status& status) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    metrics_->ObserveRpc(method_, int(status.code()), seconds);
    Finish(ToGrpc(status));
  }

  void OnCancel() override { token_->Cancel(); }
  void OnDone() override {
    metrics_->RpcDone();
    delete this;
  }

 private:
  Metrics* const metrics_;
  const char* const method_;
  const std::chrono::steady_clock::time_point start_;
  const std::shared_ptr<core::CancelToken> token_;
};

}  // namespace shoal::server
