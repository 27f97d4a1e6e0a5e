// Client::Impl: the channel, the stubs and the retry loop shared by the synchronous calls
// (client.cc) and the asynchronous ones (client_async.cc). Internal to shoal_client.
//
// Thread-safety: every member is thread-safe; `outstanding_` counts asynchronous calls so
// ~Client can wait for them.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "client/client.h"
#include "client/convert.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "shoal/v1/shoal.grpc.pb.h"

namespace shoal {

// Whether a call may be repeated after UNAVAILABLE: the server may or may not have acted on
// the first attempt, so only calls whose repetition has the same effect are.
enum class Idempotency { kIdempotent, kNotIdempotent };

struct Client::Impl {
  Impl(const std::string& target, ClientOptions opts);

  const ClientOptions options;
  // Not OK when the TLS files could not be read: every call returns it.
  absl::Status init_status;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Shoal::Stub> stub;
  std::unique_ptr<grpc::health::v1::Health::Stub> health;

  void Prepare(grpc::ClientContext* ctx, std::chrono::milliseconds timeout) const;
  // Whether attempt number `attempt` (0 = the first) answered `code` is tried again.
  bool ShouldRetry(grpc::StatusCode code, int attempt, Idempotency idempotency) const;
  // How long to wait before retry number `attempt` (0-based): jittered exponential backoff.
  std::chrono::milliseconds Backoff(int attempt) const;

  // Runs `rpc` with a fresh context per attempt, retrying UNAVAILABLE when idempotent.
  template <typename Rpc>
  absl::Status Call(Idempotency idempotency, Rpc&& rpc,
                    std::chrono::milliseconds timeout = {}) const {
    if (!init_status.ok()) return init_status;
    for (int attempt = 0;; ++attempt) {
      grpc::ClientContext ctx;
      Prepare(&ctx, timeout.count() ? timeout : options.timeout);
      grpc::Status s = rpc(&ctx);
      if (!ShouldRetry(s.error_code(), attempt, idempotency)) return client_internal::FromGrpc(s);
      std::this_thread::sleep_for(Backoff(attempt));
    }
  }

  // Asynchronous calls in flight: ~Client waits for zero.
  void BeginAsync();
  void EndAsync();
  void WaitForAsyncCalls();

 private:
  absl::Mutex mu_;
  int outstanding_ ABSL_GUARDED_BY(mu_) = 0;
};

// SearchMany over unary Search requests (client_async.cc): for a server without SearchStream.
absl::StatusOr<std::vector<SearchResult>> SearchManyUnary(
    Client::Impl* impl, const std::string& collection,
    const std::vector<std::vector<float>>& queries, const SearchOptions& options,
    const SearchManyOptions& many);

}  // namespace shoal
