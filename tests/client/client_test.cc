// shoal::Client against a tiny in-process gRPC server whose answers the test controls: which
// calls are retried after UNAVAILABLE, and how many SearchMany requests are in flight at once.
// (The behaviour against the real shoald is in tests/integration/client_async_test.cc.)
#include "client/client.h"

#include <grpcpp/grpcpp.h>

#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shoal/v1/shoal.grpc.pb.h"
#include "tests/fakes/watchdog.h"

namespace shoal::client_test {
namespace {

using grpc::CallbackServerContext;
using grpc::ServerUnaryReactor;

// Answers every call UNAVAILABLE ("shutting down") and counts the calls per method.
class UnavailableService final : public v1::Shoal::CallbackService {
 public:
  int calls(const std::string& method) {
    absl::MutexLock l(&mu_);
    return counts_[method];
  }

 private:
  ServerUnaryReactor* Refuse(CallbackServerContext* ctx, const std::string& method) {
    {
      absl::MutexLock l(&mu_);
      ++counts_[method];
    }
    ServerUnaryReactor* r = ctx->DefaultReactor();
    r->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "shutting down"));
    return r;
  }
  ServerUnaryReactor* CreateCollection(CallbackServerContext* ctx,
                                       const v1::CreateCollectionRequest*,
                                       v1::CreateCollectionResponse*) override {
    return Refuse(ctx, "CreateCollection");
  }
  ServerUnaryReactor* DropCollection(CallbackServerContext* ctx, const v1::DropCollectionRequest*,
                                     v1::DropCollectionResponse*) override {
    return Refuse(ctx, "DropCollection");
  }
  ServerUnaryReactor* BuildIndex(CallbackServerContext* ctx, const v1::BuildIndexRequest*,
                                 v1::BuildIndexResponse*) override {
    return Refuse(ctx, "BuildIndex");
  }
  ServerUnaryReactor* DescribeCollection(CallbackServerContext* ctx,
                                         const v1::DescribeCollectionRequest*,
                                         v1::CollectionInfo*) override {
    return Refuse(ctx, "DescribeCollection");
  }
  ServerUnaryReactor* Upsert(CallbackServerContext* ctx, const v1::UpsertRequest*,
                             v1::UpsertResponse*) override {
    return Refuse(ctx, "Upsert");
  }
  ServerUnaryReactor* Search(CallbackServerContext* ctx, const v1::SearchRequest*,
                             v1::SearchResponse*) override {
    return Refuse(ctx, "Search");
  }

  absl::Mutex mu_;
  std::map<std::string, int> counts_ ABSL_GUARDED_BY(mu_);
};

// Holds every Search call it gets, as many as arrive: it answers the held calls together only
// once at least min(in_flight, remaining) are held and no further call has arrived for
// kSettle. A client that kept more than `in_flight` outstanding would have them all held here
// at once (max_outstanding(), rounds()), since nothing is answered while they keep coming.
// The settle time only gives a broken client's extra calls room to arrive; a correct client
// sends nothing more until an answer, so its result does not depend on the timing. Each
// query's one hit has id = the query's first value, so the client's ordering can be checked.
class HoldingSearchService final : public v1::Shoal::CallbackService {
 public:
  static constexpr absl::Duration kSettle = absl::Milliseconds(100);

  HoldingSearchService(int total_requests, int in_flight)
      : remaining_(total_requests), in_flight_(in_flight), releaser_([this] { ReleaseLoop(); }) {}
  ~HoldingSearchService() override {
    {
      absl::MutexLock l(&mu_);
      stop_ = true;
    }
    releaser_.join();
  }

  int max_outstanding() {
    absl::MutexLock l(&mu_);
    return max_outstanding_;
  }
  int requests() {
    absl::MutexLock l(&mu_);
    return requests_;
  }
  // How many calls were held at each answer, in order.
  std::vector<int> rounds() {
    absl::MutexLock l(&mu_);
    return rounds_;
  }

 private:
  ServerUnaryReactor* Search(CallbackServerContext* ctx, const v1::SearchRequest* req,
                             v1::SearchResponse* resp) override {
    for (const v1::QueryVector& q : req->queries()) {
      v1::SearchResult* r = resp->add_results();
      r->add_ids(uint64_t(q.values(0)));
      r->add_distances(0);
    }
    ServerUnaryReactor* reactor = ctx->DefaultReactor();
    absl::MutexLock l(&mu_);
    ++requests_;
    held_.push_back(reactor);
    max_outstanding_ = std::max(max_outstanding_, int(held_.size()));
    return reactor;
  }

  void ReleaseLoop() {
    absl::MutexLock l(&mu_);
    while (!stop_ && remaining_ > 0) {
      auto enough = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return stop_ || int(held_.size()) >= std::min(in_flight_, remaining_);
      };
      mu_.Await(absl::Condition(&enough));
      if (stop_) return;
      // Until no call has arrived for kSettle.
      for (size_t seen = held_.size();; seen = held_.size()) {
        auto more = [this, seen]()
                        ABSL_NO_THREAD_SAFETY_ANALYSIS { return stop_ || held_.size() > seen; };
        if (!mu_.AwaitWithTimeout(absl::Condition(&more), kSettle) || stop_) break;
      }
      if (stop_) return;
      std::vector<ServerUnaryReactor*> release;
      release.swap(held_);
      rounds_.push_back(int(release.size()));
      remaining_ -= int(release.size());
      mu_.Unlock();
      for (ServerUnaryReactor* r : release) r->Finish(grpc::Status::OK);
      mu_.Lock();
    }
  }

  absl::Mutex mu_;
  int remaining_ ABSL_GUARDED_BY(mu_);
  const int in_flight_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int requests_ ABSL_GUARDED_BY(mu_) = 0;
  int max_outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int> rounds_ ABSL_GUARDED_BY(mu_);
  std::vector<ServerUnaryReactor*> held_ ABSL_GUARDED_BY(mu_);
  std::thread releaser_;  // last: starts once the fields above are set
};

class FakeServer {
 public:
  explicit FakeServer(grpc::Service* service) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service);
    server_ = builder.BuildAndStart();
  }
  ~FakeServer() { server_->Shutdown(std::chrono::system_clock::now()); }
  std::string addr() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

ClientOptions FastRetries() {
  ClientOptions options;
  options.timeout = std::chrono::seconds(30);
  options.retry.max_retries = 3;
  options.retry.initial_backoff = std::chrono::milliseconds(1);
  options.retry.max_backoff = std::chrono::milliseconds(4);
  return options;
}

TEST(ClientRetry, NonIdempotentCallsAreSentOnceAfterUnavailable) {
  testing::Watchdog watchdog(std::chrono::seconds(60), "non-idempotent retries");
  UnavailableService service;
  FakeServer server(&service);
  Client client(server.addr(), FastRetries());
  EXPECT_TRUE(absl::IsUnavailable(client.CreateCollection({.name = "c", .dim = 4})));
  EXPECT_TRUE(absl::IsUnavailable(client.DropCollection("c")));
  EXPECT_TRUE(absl::IsUnavailable(client.BuildIndex("c").status()));
  EXPECT_EQ(service.calls("CreateCollection"), 1);
  EXPECT_EQ(service.calls("DropCollection"), 1);
  EXPECT_EQ(service.calls("BuildIndex"), 1);
}

TEST(ClientRetry, IdempotentCallsAreRetriedUpToThePolicy) {
  testing::Watchdog watchdog(std::chrono::seconds(60), "idempotent retries");
  UnavailableService service;
  FakeServer server(&service);
  Client client(server.addr(), FastRetries());
  EXPECT_TRUE(absl::IsUnavailable(client.DescribeCollection("c").status()));
  EXPECT_TRUE(absl::IsUnavailable(client.Upsert("c", {{.id = 1, .vector = {1, 2}}}).status()));
  EXPECT_TRUE(absl::IsUnavailable(client.Search("c", {1, 2}).status()));
  EXPECT_EQ(service.calls("DescribeCollection"), 4);
  EXPECT_EQ(service.calls("Upsert"), 4);
  EXPECT_EQ(service.calls("Search"), 4);
}

TEST(ClientRetry, AsyncSearchesAreRetriedUpToThePolicyThenFail) {
  testing::Watchdog watchdog(std::chrono::seconds(60), "async retries");
  UnavailableService service;
  FakeServer server(&service);
  Client client(server.addr(), FastRetries());
  std::future<absl::StatusOr<SearchResult>> f = client.SearchAsync("c", {1, 2});
  EXPECT_TRUE(absl::IsUnavailable(f.get().status()));
  EXPECT_EQ(service.calls("Search"), 4);
  auto many = client.SearchMany("c", {{1}, {2}, {3}}, {}, {.batch = 1, .in_flight = 1});
  EXPECT_TRUE(absl::IsUnavailable(many.status()));
  // The first batch failed after its retries; no later batch started.
  EXPECT_EQ(service.calls("Search"), 8);
}

TEST(ClientRetry, ZeroRetriesMeansOneAttempt) {
  testing::Watchdog watchdog(std::chrono::seconds(60), "no retries");
  UnavailableService service;
  FakeServer server(&service);
  ClientOptions options = FastRetries();
  options.retry.max_retries = 0;
  Client client(server.addr(), options);
  EXPECT_TRUE(absl::IsUnavailable(client.Search("c", {1, 2}).status()));
  EXPECT_EQ(service.calls("Search"), 1);
}

std::vector<std::vector<float>> NumberedQueries(int n) {
  std::vector<std::vector<float>> queries;
  for (int i = 0; i < n; ++i) queries.push_back({float(i), 0.5f});
  return queries;
}

TEST(ClientSearchMany, KeepsExactlyInFlightRequestsOutstandingAndAnswersInOrder) {
  testing::Watchdog watchdog(std::chrono::seconds(60), "SearchMany in flight");
  // 103 queries in batches of 5: 21 requests, the last with 3 queries.
  HoldingSearchService service(/*total_requests=*/21, /*in_flight=*/3);
  FakeServer server(&service);
  Client client(server.addr());
  auto results = client.SearchMany("c", NumberedQueries(103), {}, {.batch = 5, .in_flight = 3});
  ASSERT_TRUE(results.ok()) << results.status();
  ASSERT_EQ(results->size(), 103u);
  for (int i = 0; i < 103; ++i) {
    ASSERT_EQ((*results)[i].hits.size(), 1u);
    EXPECT_EQ((*results)[i].hits[0].id, uint64_t(i)) << "query " << i;
  }
  EXPECT_EQ(service.requests(), 21);
  // The service holds whatever arrives and answers only once min(3, remaining) are held and
  // the calls stopped coming: a fourth outstanding call would be held with the others and
  // show here; fewer than three would never be answered (the watchdog).
  EXPECT_EQ(service.max_outstanding(), 3) << "the client kept more or fewer than 3 in flight";
  EXPECT_EQ(service.rounds(), std::vector<int>(7, 3));
}

TEST(ClientSearchMany, AnEmptyQuerySetAnswersAtOnce) {
  HoldingSearchService service(0, 1);
  FakeServer server(&service);
  Client client(server.addr());
  auto results = client.SearchMany("c", {}, {}, {.batch = 5, .in_flight = 3});
  ASSERT_TRUE(results.ok());
  EXPECT_TRUE(results->empty());
  EXPECT_EQ(service.requests(), 0);
}

}  // namespace
}  // namespace shoal::client_test
