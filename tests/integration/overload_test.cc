// Overload (issue #17): one greedy client floods a real shoald with async searches on one
// channel while a polite client on its own connection sends one query at a time. The
// per-connection share (server.max_inflight_per_peer) must refuse the greedy client's excess
// with RESOURCE_EXHAUSTED and answer every polite query; afterwards both are served normally.
//
// Before the per-connection share, the greedy client held every search.max_inflight slot and
// the polite client's queries were refused. Behaviour only: request counts are bounded and a
// watchdog turns a hang into a failure; no wall-clock assertion.
#include <grpcpp/generic/generic_stub.h>
#include <httplib.h>

#include <atomic>
#include <iostream>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shoal/v1/shoal.pb.h"
#include "tests/fakes/temp_dir.h"
#include "tests/fakes/watchdog.h"
#include "tests/integration/raw_call.h"
#include "tests/integration/shoald_process.h"

namespace shoal::overload_test {
namespace {

using testing::ShoaldProcess;

constexpr uint32_t kDim = 64;
constexpr int kPoliteQueries = 20;
constexpr int kGreedyInFlight = 64;     // outstanding async searches of the greedy client
constexpr int kGreedyMaxCalls = 50000;  // bound on the flood, whatever happens

std::vector<float> Vector(uint64_t i) {
  std::vector<float> v(kDim);
  for (uint32_t j = 0; j < kDim; ++j) v[j] = float((i * 31 + j * 7) % 97);
  return v;
}

// "shoal_admission_refusals_total{reason="peer_slots"} N" from /metrics; -1 when absent.
double PeerRefusals(int http_port) {
  httplib::Client http("127.0.0.1", http_port);
  auto res = http.Get("/metrics");
  if (!res) return -1;
  const std::string key = "shoal_admission_refusals_total{reason=\"peer_slots\"} ";
  const size_t at = res->body.find(key);
  if (at == std::string::npos) return -1;
  return std::stod(res->body.substr(at + key.size()));
}

// The greedy client: keeps kGreedyInFlight async searches outstanding on one Client (one
// channel, one connection) until Stop(), re-issuing each as soon as it is answered.
class Flood {
 public:
  explicit Flood(Client* client) : client_(client) {}

  // A failed assertion may leave the test early: no callback may outlive the flood.
  ~Flood() {
    Stop();
    Drain();
  }

  void Start() {
    for (int i = 0; i < kGreedyInFlight; ++i) Issue();
  }
  void Stop() { stop_.store(true); }
  // Blocks until every outstanding search has been answered.
  void Drain() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* outstanding) { return *outstanding == 0; }, &outstanding_));
  }
  // Blocks until the flood has been refused at least once (or has run out of calls).
  void AwaitFirstRefusal() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &Flood::RefusedOrDone));
  }

  int ok() const { return ok_.load(); }
  int exhausted() const { return exhausted_.load(); }
  int other() const { return other_.load(); }
  std::string first_other() {
    absl::MutexLock lock(&mu_);
    return first_other_;
  }

 private:
  bool RefusedOrDone() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return exhausted_.load() > 0 || outstanding_ == 0;
  }

  void Issue() {
    {
      absl::MutexLock lock(&mu_);
      ++outstanding_;
    }
    calls_.fetch_add(1);
    client_->SearchAsync("a", Vector(calls_.load()), {.k = 10},
                         [this](absl::StatusOr<SearchResult> r) { Done(r.status()); });
  }

  void Done(const absl::Status& status) {
    if (status.ok()) {
      ok_.fetch_add(1);
    } else if (status.code() == absl::StatusCode::kResourceExhausted) {
      exhausted_.fetch_add(1);
    } else {
      other_.fetch_add(1);
      absl::MutexLock lock(&mu_);
      if (first_other_.empty()) first_other_ = status.ToString();
    }
    // Re-issue before this one counts as answered, so Drain() cannot see a false zero.
    if (!stop_.load() && calls_.load() < kGreedyMaxCalls) Issue();
    absl::MutexLock lock(&mu_);
    --outstanding_;
  }

  Client* const client_;
  std::atomic<bool> stop_{false};
  std::atomic<int> calls_{0}, ok_{0}, exhausted_{0}, other_{0};
  absl::Mutex mu_;
  int outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  std::string first_other_ ABSL_GUARDED_BY(mu_);
};

// The polite client: its own channel with a local subchannel pool, so its own connection
// (channels with equal arguments in one process would otherwise share one).
class Polite {
 public:
  explicit Polite(const std::string& addr) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    stub_ = std::make_unique<grpc::GenericStub>(
        grpc::CreateCustomChannel(addr, grpc::InsecureChannelCredentials(), args));
  }

  // One query, waited for: the status and, when OK, the hits of its one result.
  grpc::Status Search(uint64_t i, int* hits) {
    v1::SearchRequest req;
    req.set_collection("a");
    req.set_k(10);
    std::vector<float> q = Vector(i);
    req.add_queries()->mutable_values()->Assign(q.begin(), q.end());
    std::string bytes;
    grpc::Status s = testing::RawCall(*stub_, "Search", req.SerializeAsString(), &bytes,
                                      std::chrono::minutes(5));
    v1::SearchResponse resp;
    *hits = s.ok() && resp.ParseFromString(bytes) && resp.results_size() == 1
                ? resp.results(0).hits_size()
                : -1;
    return s;
  }

 private:
  std::unique_ptr<grpc::GenericStub> stub_;
};

TEST(Overload, AGreedyClientIsRefusedWhileAPoliteOneIsAlwaysAnswered) {
  testing::Watchdog watchdog(std::chrono::minutes(5), "overload flood");
  testing::TempDir dir;
  // 8 search slots, so the default per-connection share is 2; one arena thread, so searches
  // queue and a slot stays taken for a while.
  auto server =
      ShoaldProcess::Start(dir.Sub("data"), {"--max-inflight-searches", "8", "--cpu-threads", "1"});
  ASSERT_NE(server, nullptr);
  // Generous deadlines (sanitizer builds are slow): only admission may refuse a call.
  Client greedy(server->addr(), {.timeout = std::chrono::minutes(5)});
  ASSERT_TRUE(greedy.CreateCollection({"a", kDim, Metric::kL2}).ok());
  std::vector<Point> points;
  for (uint64_t i = 0; i < 20000; ++i) points.push_back({i, Vector(i), {}});
  ASSERT_TRUE(greedy.Upsert("a", points).ok());

  Flood flood(&greedy);
  flood.Start();
  flood.AwaitFirstRefusal();
  ASSERT_GT(flood.exhausted(), 0) << "the flood was never refused";

  Polite polite(server->addr());
  int answered = 0;
  for (int i = 0; i < kPoliteQueries; ++i) {
    int hits = 0;
    grpc::Status s = polite.Search(uint64_t(i), &hits);
    EXPECT_TRUE(s.ok()) << "polite query " << i << ": " << s.error_code() << " "
                        << s.error_message();
    if (s.ok() && hits == 10) ++answered;
  }
  flood.Stop();
  flood.Drain();
  EXPECT_EQ(answered, kPoliteQueries);
  EXPECT_EQ(flood.other(), 0) << flood.first_other();
  EXPECT_GT(flood.ok(), 0);
  EXPECT_GT(PeerRefusals(server->http_port()), 0);
  std::cout << "greedy: " << flood.ok() << " answered, " << flood.exhausted()
            << " refused; polite: " << answered << "/" << kPoliteQueries << " answered\n";

  // After the burst both are served normally.
  auto after = greedy.Search("a", Vector(3), {.k = 10});
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->hits.size(), 10u);
  int hits = 0;
  EXPECT_TRUE(polite.Search(4, &hits).ok());
  EXPECT_EQ(hits, 10);
  EXPECT_EQ(server->Terminate(), 0) << server->log();
}

}  // namespace
}  // namespace shoal::overload_test
