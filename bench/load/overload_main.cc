// shoal-overload (`make overload`; bench/load/README.md): how shoald behaves when offered more
// searches than it can serve. Starts shoald on a synthetic IVF collection and, in one run:
//   1. capacity: a closed loop (a fixed number of searches outstanding) measures the QPS it
//      can serve;
//   2. baseline: open loop at half that rate: latency of a server that keeps up;
//   3. burst: open loop at --factor (2) x capacity for --seconds (30): how fast the excess is
//      refused (RESOURCE_EXHAUSTED latency), p50/p99 of the admitted queries, shoald's RSS
//      against cache.bytes;
//   4. recovery: open loop at half the capacity again right after the burst (its admitted
//      backlog still queued), per second, until the median is back within 2x of the baseline's.
// Open loop: requests are sent on a fixed schedule whatever the answers, spread over
// --connections connections, as independent clients would.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "bench/harness/dataset.h"
#include "bench/harness/latency_histogram.h"
#include "bench/load/load_common.h"
#include "client/client.h"
#include "shoal/v1/shoal.grpc.pb.h"
#include "tests/support/local_shoald.h"

namespace shoal::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Recovered: a second's median latency within this factor of the baseline's (the machine is
// shared, so single seconds of a quiet server vary by about this much).
constexpr double kRecovered = 2.0;
// Searches outstanding while capacity is measured: enough to keep the arena busy, within one
// connection's default share (search.max_inflight / 4 = 64).
constexpr int kClosedLoopOutstanding = 32;

struct Options {
  std::string shoald = "build/bin/shoald";
  std::string dir = "/tmp/shoal-overload";
  size_t n = 100000;
  uint32_t dim = 128;
  uint32_t nlist = 256;
  uint32_t nprobe = 64;
  int seconds = 30;
  double factor = 2.0;
  int connections = 8;
  int cpu_threads = 1;
  int64_t cache_bytes = 32 << 20;
  int max_inflight = 0;  // shoald's search.max_inflight; 0 = its default
};

// What one phase's answers looked like.
struct PhaseStats {
  LatencyHistogram ok, refused;
  uint64_t other = 0;
  std::string first_other;
  std::vector<LatencyHistogram> ok_by_second;  // by the second the request was sent in
};

class Driver {
 public:
  Driver(const std::string& addr, int connections, const Dataset& data, uint32_t nprobe) {
    for (int i = 0; i < connections; ++i) stubs_.push_back(v1::Shoal::NewStub(OwnChannel(addr)));
    for (size_t q = 0; q < data.nq; ++q) {
      v1::SearchRequest req;
      req.set_collection("overload");
      req.set_k(10);
      req.set_nprobe(nprobe);
      req.add_queries()->mutable_values()->Assign(data.query(q), data.query(q) + data.dim);
      requests_.push_back(std::move(req));
    }
  }

  // Keeps `outstanding` searches in flight for `seconds`: the answered QPS.
  double ClosedLoop(int outstanding, double seconds) {
    PhaseStats stats;
    std::atomic<bool> stop{false};
    const Clock::time_point start = Clock::now();
    std::function<void()> issue = [&] {
      Send(&stats, start, [&] {
        if (!stop.load()) issue();
      });
    };
    for (int i = 0; i < outstanding; ++i) issue();
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    stop.store(true);
    Drain();
    return double(stats.ok.count()) / seconds;
  }

  // Sends at `qps` for `seconds` on a fixed schedule into `stats`; `sample` runs every 100 ms
  // meanwhile. Returns once the last request is sent: answers still arrive into `stats`, which
  // must live until Drain().
  void OpenLoop(double qps, double seconds, PhaseStats* stats,
                const std::function<void()>& sample = {}) {
    stats->ok_by_second.resize(size_t(seconds) + 1);
    const Clock::time_point start = Clock::now();
    const auto total = uint64_t(qps * seconds);
    Clock::time_point next_sample = start;
    for (uint64_t i = 0; i < total; ++i) {
      const auto due = start + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(double(i) / qps));
      std::this_thread::sleep_until(due);
      Send(stats, start, [] {});
      if (sample && Clock::now() >= next_sample) {
        sample();
        next_sample += std::chrono::milliseconds(100);
      }
    }
  }

  // Blocks until every request sent has been answered.
  void Drain() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int64_t* n) { return *n == 0; }, &outstanding_));
  }

 private:
  struct Call {
    grpc::ClientContext ctx;
    v1::SearchResponse resp;
    Clock::time_point sent;
  };

  void Send(PhaseStats* stats, Clock::time_point phase_start, std::function<void()> then) {
    const uint64_t i = next_.fetch_add(1);
    auto* call = new Call;
    call->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    call->sent = Clock::now();
    {
      absl::MutexLock lock(&mu_);
      ++outstanding_;
    }
    stubs_[i % stubs_.size()]->async()->Search(
        &call->ctx, &requests_[i % requests_.size()], &call->resp,
        [this, stats, phase_start, call, then = std::move(then)](grpc::Status s) {
          const Clock::time_point now = Clock::now();
          const auto ns = uint64_t(std::chrono::nanoseconds(now - call->sent).count());
          const auto second =
              size_t(std::chrono::duration<double>(call->sent - phase_start).count());
          {
            absl::MutexLock lock(&mu_);
            if (s.ok()) {
              stats->ok.Record(ns);
              if (second < stats->ok_by_second.size()) stats->ok_by_second[second].Record(ns);
            } else if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
              stats->refused.Record(ns);
            } else if (stats->other++ == 0) {
              stats->first_other = absl::StrFormat("%d %s", s.error_code(), s.error_message());
            }
          }
          delete call;
          then();
          absl::MutexLock lock(&mu_);
          --outstanding_;
        });
  }

  std::vector<std::unique_ptr<v1::Shoal::Stub>> stubs_;
  std::vector<v1::SearchRequest> requests_;
  std::atomic<uint64_t> next_{0};
  absl::Mutex mu_;
  int64_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;
};

void PrintPhase(const char* name, double offered, const PhaseStats& s) {
  const double total = double(s.ok.count() + s.refused.count() + s.other);
  std::printf("%-9s offered %7.0f QPS | admitted %7llu p50 %10s p99 %10s | refused %7llu (%5.1f%%)",
              name, offered, (unsigned long long)s.ok.count(), Ms(s.ok.Percentile(0.5)).c_str(),
              Ms(s.ok.Percentile(0.99)).c_str(), (unsigned long long)s.refused.count(),
              total > 0 ? 100.0 * double(s.refused.count()) / total : 0.0);
  if (s.refused.count() > 0) {
    std::printf(" p50 %s p99 %s", Ms(s.refused.Percentile(0.5)).c_str(),
                Ms(s.refused.Percentile(0.99)).c_str());
  }
  std::printf(" | other errors %llu\n", (unsigned long long)s.other);
  if (s.other > 0) std::printf("          first other error: %s\n", s.first_other.c_str());
}

int Run(const Options& o) {
  std::error_code ec;
  std::filesystem::remove_all(o.dir, ec);
  std::filesystem::create_directories(o.dir, ec);
  std::vector<std::string> args = {"--cpu-threads", std::to_string(o.cpu_threads), "--cache-bytes",
                                   std::to_string(o.cache_bytes)};
  if (o.max_inflight > 0) {
    args.insert(args.end(), {"--max-inflight-searches", std::to_string(o.max_inflight)});
  }
  auto server =
      LocalShoald::Start({.binary = o.shoald, .data_dir = o.dir + "/data", .extra_args = args});
  if (!server.ok()) {
    std::fprintf(stderr, "shoald: %s\n", server.status().ToString().c_str());
    return 1;
  }
  const LocalShoald& shoald = **server;
  const Dataset data = MakeSynthetic({.n = o.n, .dim = o.dim, .clusters = 1000, .seed = 1}, 1000);
  Client client(shoald.grpc_addr());
  absl::Status s = client.CreateCollection(
      {"overload", o.dim, Metric::kL2, {.type = IndexType::kIvfFlat, .nlist = o.nlist}});
  if (s.ok()) s = LoadRows(client, "overload", data);
  if (s.ok()) s = client.BuildIndex("overload").status();
  if (!s.ok()) {
    std::fprintf(stderr, "loading: %s\n", s.ToString().c_str());
    return 1;
  }
  const std::string extra =
      o.max_inflight > 0 ? absl::StrFormat(", search.max_inflight %d", o.max_inflight) : "";
  std::printf(
      "shoald: %d arena thread(s), cache.bytes %s%s; %zu x %u IVF_FLAT nlist %u, "
      "nprobe %u, %d connections\n",
      o.cpu_threads, MiB(double(o.cache_bytes)).c_str(), extra.c_str(), o.n, o.dim, o.nlist,
      o.nprobe, o.connections);

  Driver driver(shoald.grpc_addr(), o.connections, data, o.nprobe);
  driver.ClosedLoop(kClosedLoopOutstanding, 2);  // warm the cache and the connections
  const double capacity = driver.ClosedLoop(kClosedLoopOutstanding, 5);
  std::printf("capacity (closed loop, %d outstanding): %.0f QPS\n", kClosedLoopOutstanding,
              capacity);
  if (capacity <= 0) return 1;

  PhaseStats baseline, burst, recovery;
  driver.OpenLoop(capacity / 2, 5, &baseline);
  driver.Drain();
  uint64_t peak_rss = 0;
  const uint64_t rss_before = RssBytes(shoald.pid());
  // Every 100 ms: shoald's RSS; every second: what it holds (admitted searches, RPCs).
  double max_searches = 0, max_rpcs = 0;
  int tick = 0;
  driver.OpenLoop(capacity * o.factor, o.seconds, &burst, [&] {
    peak_rss = std::max(peak_rss, RssBytes(shoald.pid()));
    if (tick++ % 10 != 0) return;
    max_searches =
        std::max(max_searches, ScrapeSample(shoald.http_port(), "shoal_search_inflight"));
    max_rpcs = std::max(max_rpcs, ScrapeSample(shoald.http_port(), "shoal_rpc_inflight"));
  });
  const double cache_used = ScrapeSample(shoald.http_port(), "shoal_cache_bytes{state=\"used\"}");
  // No drain: the recovery's requests queue behind the burst's admitted backlog, as a real
  // client's would.
  driver.OpenLoop(capacity / 2, 15, &recovery,
                  [&] { peak_rss = std::max(peak_rss, RssBytes(shoald.pid())); });
  driver.Drain();

  std::printf("\n");
  PrintPhase("baseline", capacity / 2, baseline);
  PrintPhase("burst", capacity * o.factor, burst);
  PrintPhase("recovery", capacity / 2, recovery);
  for (const char* reason : {"server_slots", "peer_slots", "inflight_bytes"}) {
    const double n =
        ScrapeSample(shoald.http_port(),
                     absl::StrFormat("shoal_admission_refusals_total{reason=\"%s\"}", reason));
    std::printf("refusals %-15s %.0f\n", reason, n);
  }
  std::printf(
      "during the burst shoald held at most %.0f admitted searches and %.0f RPCs "
      "(sampled each second)\n",
      max_searches, max_rpcs);
  const double served_qps = double(burst.ok.count()) / o.seconds;
  std::printf("burst served %.0f QPS (%.2f x capacity) while offered %.0f\n", served_qps,
              served_qps / capacity, capacity * o.factor);
  std::printf(
      "RSS: before burst %s, peak during burst and recovery %s, cache.bytes %s (cache used %s)\n",
      MiB(double(rss_before)).c_str(), MiB(double(peak_rss)).c_str(),
      MiB(double(o.cache_bytes)).c_str(), MiB(cache_used).c_str());

  const double base_p50 = baseline.ok.Percentile(0.5);
  std::printf("\nrecovery (half capacity after the burst), by the second requests were sent:\n");
  std::printf("  second  answered        p50        p99  p50/baseline\n");
  int recovered_at = -1;
  for (size_t sec = 0; sec < recovery.ok_by_second.size(); ++sec) {
    const LatencyHistogram& h = recovery.ok_by_second[sec];
    if (h.count() == 0) continue;
    const double ratio = h.Percentile(0.5) / base_p50;
    if (recovered_at < 0 && ratio <= kRecovered) recovered_at = int(sec);
    std::printf("  %6zu  %8llu %10s %10s  %12.2f\n", sec, (unsigned long long)h.count(),
                Ms(h.Percentile(0.5)).c_str(), Ms(h.Percentile(0.99)).c_str(), ratio);
  }
  if (recovered_at >= 0) {
    std::printf(
        "recovered: the median of the requests sent in second %d after the burst is "
        "within %.1fx of the baseline's (%s)\n",
        recovered_at, kRecovered, Ms(base_p50).c_str());
  } else {
    std::printf("NOT recovered within %zu s\n", recovery.ok_by_second.size());
  }
  const bool alive = kill(shoald.pid(), 0) == 0;
  std::printf("shoald %s\n", alive ? "still serving" : "DIED");
  return alive && burst.other == 0 ? 0 : 1;
}

}  // namespace
}  // namespace shoal::bench

int main(int argc, char** argv) {
  shoal::bench::Options o;
  CLI::App app{"shoal-overload: shoald offered twice the searches it can serve"};
  app.add_option("--shoald", o.shoald, "shoald binary");
  app.add_option("--dir", o.dir, "scratch directory (emptied)");
  app.add_option("--n", o.n, "vectors");
  app.add_option("--dim", o.dim, "dimensions");
  app.add_option("--nlist", o.nlist, "IVF lists");
  app.add_option("--nprobe", o.nprobe, "lists probed per query");
  app.add_option("--seconds", o.seconds, "length of the burst");
  app.add_option("--factor", o.factor, "burst rate / measured capacity");
  app.add_option("--connections", o.connections, "client connections");
  app.add_option("--cpu-threads", o.cpu_threads, "shoald's arena threads");
  app.add_option("--cache-bytes", o.cache_bytes, "shoald's cache.bytes");
  app.add_option("--max-inflight", o.max_inflight,
                 "shoald's search.max_inflight (0 = its default, 256)");
  CLI11_PARSE(app, argc, argv);
  return shoal::bench::Run(o);
}
