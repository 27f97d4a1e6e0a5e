// UnaryReactor: the reactor every unary handler finishes. It records the RPC's latency and
// status code in Metrics when finished, forwards client cancellation to the request's
// CancelToken, and deletes itself once gRPC is done with it and FinishWith() has returned.
//
// RawUnaryReactor<Request, Response> (the one the service creates) also owns the call's
// request and response messages: gRPC hands Shoal raw bytes (see raw_service.h), the request is
// parsed into request(), and response() is serialised into gRPC's buffer when the call
// finishes OK.
//
// Thread-safety: FinishWith() may be called from any thread; only the first call counts (a
// handler that fails after a partial answer cannot finish twice). OnCancel() may run
// concurrently with it.
#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <atomic>
#include <chrono>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/base/cancel.h"
#include "server/convert.h"
#include "server/metrics.h"
#include "server/reactor_lifetime.h"

namespace shoal::server {

// The client's deadline as a CancelToken (no deadline: a token that never expires).
inline std::shared_ptr<core::CancelToken> CancelTokenFor(const grpc::CallbackServerContext& ctx) {
  const auto left = ctx.deadline() - std::chrono::system_clock::now();
  if (left > std::chrono::hours(24 * 365)) return std::make_shared<core::CancelToken>();
  return std::make_shared<core::CancelToken>(
      std::chrono::steady_clock::now() +
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(left));
}

// What an unexpected exception in a handler answers.
inline absl::Status InternalErrorIn(const char* method, const std::string& what) {
  return absl::InternalError(absl::StrCat(method, ": internal error: ", what));
}

class UnaryReactor : public grpc::ServerUnaryReactor {
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
  const char* method() const { return method_; }

  // Never throws: once finished_ is set the call must reach Finish().
  void FinishWith(absl::Status status) noexcept {
    if (finished_.exchange(true)) return;
    try {
      if (status.ok()) status = SerializeResponse();
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      metrics_->ObserveRpc(method_, int(status.code()), seconds);
    } catch (const std::exception& e) {
      status = InternalErrorIn(method_, e.what());
    }
    // gRPC runs OnDone on its own thread once the answer is sent (server/reactor_lifetime.h).
    if (lifetime_.Finished([&] { Finish(ToGrpc(status)); })) delete this;
  }

  void OnCancel() override { token_->Cancel(); }
  void OnDone() override {
    metrics_->RpcDone();
    if (lifetime_.Done()) delete this;
  }

 protected:
  ~UnaryReactor() override = default;
  // Called once, before an OK finish: puts the response on the wire.
  virtual absl::Status SerializeResponse() { return absl::OkStatus(); }

 private:
  Metrics* const metrics_;
  const char* const method_;
  const std::chrono::steady_clock::time_point start_;
  const std::shared_ptr<core::CancelToken> token_;
  std::atomic<bool> finished_{false};
  ReactorLifetime lifetime_;
};

// Parses a raw request. INVALID_ARGUMENT names the message type when the bytes do not parse.
template <typename Message>
absl::Status ParseRaw(const grpc::ByteBuffer& raw, Message* out) {
  grpc::ByteBuffer copy(raw);  // the reader consumes the buffer's slices; the copy is refcounted
  grpc::ProtoBufferReader reader(&copy);
  if (!reader.status().ok() || !out->ParseFromZeroCopyStream(&reader)) {
    return absl::InvalidArgumentError(
        absl::StrCat("request does not parse as ", Message::descriptor()->full_name()));
  }
  return absl::OkStatus();
}

// Wraps work that finishes `r` later (an executor task, a completion callback) so that an
// exception in it answers INTERNAL naming the method instead of leaving the call unanswered
// or ending the process.
template <typename Fn>
auto Guarded(UnaryReactor* r, Fn fn) {
  return [r, fn = std::move(fn)](auto&&... args) mutable {
    try {
      fn(std::forward<decltype(args)>(args)...);
    } catch (const std::exception& e) {
      r->FinishWith(InternalErrorIn(r->method(), e.what()));
    } catch (...) {
      r->FinishWith(InternalErrorIn(r->method(), "unknown exception"));
    }
  };
}

template <typename Request, typename Response>
class RawUnaryReactor final : public UnaryReactor {
 public:
  RawUnaryReactor(Metrics* metrics, const char* method, std::shared_ptr<core::CancelToken> token,
                  grpc::ByteBuffer* wire_response)
      : UnaryReactor(metrics, method, std::move(token)), wire_response_(wire_response) {}

  Request* request() { return &request_; }
  Response* response() { return &response_; }

 private:
  absl::Status SerializeResponse() override {
    bool own_buffer = false;
    grpc::Status s =
        grpc::SerializationTraits<Response>::Serialize(response_, wire_response_, &own_buffer);
    if (!s.ok()) {
      return absl::InternalError(
          absl::StrCat(method(), ": the response does not serialise: ", s.error_message()));
    }
    return absl::OkStatus();
  }

  grpc::ByteBuffer* const wire_response_;
  Request request_;
  Response response_;
};

}  // namespace shoal::server
