// The asynchronous half of shoal::Client: SearchAsync, SearchBatchAsync and SearchMany's unary
// fallback on gRPC's callback API. A call is an AsyncSearchCall that owns its request, context and
// response, retries UNAVAILABLE after a grpc::Alarm (no thread sleeps), and deletes itself once
// the caller's callback has run.
#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "client/client.h"
#include "client/client_impl.h"
#include "client/convert.h"

namespace shoal {
namespace {

using client_internal::FromGrpc;
using client_internal::FromProto;

// gRPC's completion queue (inside the uninstrumented libgrpc) orders a call's start before its
// callback, and an alarm's Set before its callback, but ThreadSanitizer cannot see that: the
// call object says so itself, at its own address (a no-op in other builds).
#if defined(__SANITIZE_THREAD__)
#define SHOAL_CLIENT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SHOAL_CLIENT_TSAN 1
#endif
#endif
#ifdef SHOAL_CLIENT_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
inline void HandedToGrpc(void* call) { __tsan_release(call); }
inline void BackFromGrpc(void* call) { __tsan_acquire(call); }
#else
inline void HandedToGrpc(void*) {}
inline void BackFromGrpc(void*) {}
#endif

class AsyncSearchCall {
 public:
  // REQUIRES: impl->BeginAsync() was called for this call; Start() is called once.
  AsyncSearchCall(Client::Impl* impl, v1::SearchRequest request, SearchBatchCallback done)
      : impl_(impl),
        request_(std::move(request)),
        num_queries_(size_t(request_.queries_size())),
        done_(std::move(done)) {}

  void Start() { Attempt(); }

 private:
  void Attempt() {
    context_ = std::make_unique<grpc::ClientContext>();
    impl_->Prepare(context_.get(), impl_->options.timeout);
    response_.Clear();
    // Every read of this call's members comes before the hand-off (the callback may delete it).
    auto* stub = impl_->stub->async();
    grpc::ClientContext* context = context_.get();
    HandedToGrpc(this);
    stub->Search(context, &request_, &response_, [this](grpc::Status s) {
      BackFromGrpc(this);
      OnDone(std::move(s));
    });
  }

  void OnDone(grpc::Status s) {
    if (impl_->ShouldRetry(s.error_code(), attempt_, Idempotency::kIdempotent)) {
      // Alarms stay alive until the call is deleted: the last one may still be returning
      // from its callback when the retried RPC completes.
      alarms_.push_back(std::make_unique<grpc::Alarm>());
      const auto when = std::chrono::system_clock::now() + impl_->Backoff(attempt_++);
      HandedToGrpc(this);
      alarms_.back()->Set(when, [this, s](bool fired) {
        BackFromGrpc(this);
        if (fired) {
          Attempt();
        } else {
          Complete(FromGrpc(s));
        }
      });
      return;
    }
    Complete(s.ok() ? FromProto(response_, num_queries_)
                    : absl::StatusOr<std::vector<SearchResult>>(FromGrpc(s)));
  }

  void Complete(absl::StatusOr<std::vector<SearchResult>> result) {
    Client::Impl* impl = impl_;
    SearchBatchCallback done = std::move(done_);
    delete this;
    done(std::move(result));
    impl->EndAsync();  // last: ~Client may proceed now
  }

  Client::Impl* const impl_;
  const v1::SearchRequest request_;
  const size_t num_queries_;
  SearchBatchCallback done_;
  int attempt_ = 0;
  std::unique_ptr<grpc::ClientContext> context_;
  v1::SearchResponse response_;
  std::vector<std::unique_ptr<grpc::Alarm>> alarms_;
};

void StartSearch(Client::Impl* impl, v1::SearchRequest request, SearchBatchCallback done) {
  if (!impl->init_status.ok()) {
    done(impl->init_status);
    return;
  }
  impl->BeginAsync();
  (new AsyncSearchCall(impl, std::move(request), std::move(done)))->Start();
}

// The shared state of one SearchMany: which batch starts next, how many run, the results.
class SearchManyJob {
 public:
  SearchManyJob(size_t num_queries, const SearchManyOptions& many)
      : batch_(std::max<size_t>(1, many.batch)),
        in_flight_(std::max<size_t>(1, many.in_flight)),
        num_batches_((num_queries + batch_ - 1) / batch_),
        results_(num_queries) {}

  size_t batch() const { return batch_; }

  // Claims the next batch to start, if one may start now.
  std::optional<size_t> Claim() {
    absl::MutexLock l(&mu_);
    if (!error_.ok() || next_ == num_batches_ || running_ == in_flight_) return std::nullopt;
    ++running_;
    return next_++;
  }

  void Finish(size_t batch, absl::StatusOr<std::vector<SearchResult>> result) {
    absl::MutexLock l(&mu_);
    --running_;
    if (!result.ok()) {
      if (error_.ok()) error_ = result.status();
      return;
    }
    for (size_t i = 0; i < result->size(); ++i)
      results_[batch * batch_ + i] = std::move((*result)[i]);
  }

  // Waits until every started batch has finished and nothing more will start.
  absl::StatusOr<std::vector<SearchResult>> Wait() {
    absl::MutexLock l(&mu_);
    mu_.Await(absl::Condition(this, &SearchManyJob::DoneLocked));
    if (!error_.ok()) return error_;
    return std::move(results_);
  }

 private:
  bool DoneLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return running_ == 0 && (next_ == num_batches_ || !error_.ok());
  }

  const size_t batch_;
  const size_t in_flight_;
  const size_t num_batches_;
  absl::Mutex mu_;
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
  size_t running_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::vector<SearchResult> results_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

void Client::SearchBatchAsync(const std::string& collection,
                              const std::vector<std::vector<float>>& queries,
                              const SearchOptions& options, SearchBatchCallback done) {
  StartSearch(impl_.get(),
              client_internal::MakeSearchRequest(collection, queries, 0, queries.size(), options),
              std::move(done));
}

void Client::SearchAsync(const std::string& collection, const std::vector<float>& query,
                         const SearchOptions& options, SearchCallback done) {
  v1::SearchRequest request = client_internal::MakeSearchRequest(collection, {}, 0, 0, options);
  request.add_queries()->mutable_values()->Assign(query.begin(), query.end());
  StartSearch(impl_.get(), std::move(request),
              [done = std::move(done)](absl::StatusOr<std::vector<SearchResult>> results) {
                if (!results.ok()) return done(results.status());
                done(std::move(results->front()));  // FromProto checked the count
              });
}

std::future<absl::StatusOr<SearchResult>> Client::SearchAsync(const std::string& collection,
                                                              const std::vector<float>& query,
                                                              const SearchOptions& options) {
  auto promise = std::make_shared<std::promise<absl::StatusOr<SearchResult>>>();
  std::future<absl::StatusOr<SearchResult>> future = promise->get_future();
  SearchAsync(collection, query, options, [promise](absl::StatusOr<SearchResult> result) {
    promise->set_value(std::move(result));
  });
  return future;
}

absl::StatusOr<std::vector<SearchResult>> SearchManyUnary(
    Client::Impl* impl, const std::string& collection,
    const std::vector<std::vector<float>>& queries, const SearchOptions& options,
    const SearchManyOptions& many) {
  auto job = std::make_shared<SearchManyJob>(queries.size(), many);
  // Starts batches while the in-flight bound allows; each completion starts the next. The
  // requests copy their queries, so `queries` is only read on this thread and the callbacks
  // only touch the job.
  std::vector<v1::SearchRequest> requests;
  const size_t num_batches = (queries.size() + job->batch() - 1) / job->batch();
  requests.reserve(num_batches);
  for (size_t b = 0; b < num_batches; ++b) {
    requests.push_back(client_internal::MakeSearchRequest(collection, queries, b * job->batch(),
                                                          job->batch(), options));
  }
  auto shared_requests = std::make_shared<std::vector<v1::SearchRequest>>(std::move(requests));
  auto start_more = std::make_shared<std::function<void()>>();
  *start_more = [impl, job, shared_requests, weak = std::weak_ptr(start_more)] {
    while (std::optional<size_t> b = job->Claim()) {
      StartSearch(impl, std::move((*shared_requests)[*b]),
                  [job, b = *b, weak](absl::StatusOr<std::vector<SearchResult>> r) {
                    job->Finish(b, std::move(r));
                    if (auto more = weak.lock()) (*more)();
                  });
    }
  };
  (*start_more)();
  return job->Wait();
}

}  // namespace shoal
