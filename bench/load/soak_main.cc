// shoal-soak (`make soak`; bench/load/README.md): --minutes of mixed traffic from --clients
// clients against one shoald with a small cache, then a check of every row.
//
// Each client owns its own ids in two collections (an IVF_FLAT one and a FLAT one), so its
// record of what it wrote is exact: it upserts new ids, overwrites and deletes its own,
// searches (some with a 1 ms deadline: the injected cancellations), reads its own rows back
// and checks them against the record; two of the clients also run BuildIndex and Flush in turn.
// Every interval (a minute by default) it prints throughput, errors, injected cancellations,
// BuildIndex/Flush calls, p99 latency of reads and of writes and shoald's
// RSS; at the end, whether the RSS plateaued, and whether shoald's final contents equal the
// clients' records (every live row's vector, no deleted id, a search for each of a sample of
// rows finding it first). Exit status 0 only when there were no errors, the RSS plateaued and
// the contents check passed.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "bench/harness/latency_histogram.h"
#include "bench/load/load_common.h"
#include "client/client.h"
#include "tests/support/local_shoald.h"

namespace shoal::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string shoald = "build/bin/shoald";
  std::string dir = "/tmp/shoal-soak";
  double minutes = 10;
  int interval_seconds = 60;
  int clients = 32;
  uint32_t dim = 32;
  uint64_t ids_per_client = 2000;  // per collection
  int64_t cache_bytes = 8 << 20;
  int flush_rows = 20000;
};

const char* kCollections[] = {"soak_ivf", "soak_flat"};

enum class Kind { kRead, kWrite, kMaintenance };

// One interval's figures, merged from every client.
struct Interval {
  uint64_t ops = 0, errors = 0, cancelled = 0;
  LatencyHistogram reads, writes;  // Search and Get; Upsert and Delete (answered OK)
  uint64_t maintenance = 0;        // BuildIndex and Flush calls
  uint64_t rss = 0;
};

class Stats {
 public:
  explicit Stats(size_t intervals) : intervals_(intervals) {}
  void Record(size_t interval, uint64_t ns, bool ok, bool cancelled, Kind kind,
              const std::string& error) {
    absl::MutexLock lock(&mu_);
    Interval& in = intervals_[std::min(interval, intervals_.size() - 1)];
    ++in.ops;
    if (cancelled) {
      ++in.cancelled;
    } else if (!ok) {
      ++in.errors;
      if (errors_.size() < 10) errors_.push_back(error);
    } else if (kind == Kind::kRead) {
      in.reads.Record(ns);
    } else if (kind == Kind::kWrite) {
      in.writes.Record(ns);
    } else {
      ++in.maintenance;
    }
  }
  void SetRss(size_t interval, uint64_t rss) {
    absl::MutexLock lock(&mu_);
    intervals_[std::min(interval, intervals_.size() - 1)].rss = rss;
  }
  std::vector<Interval> intervals() {
    absl::MutexLock lock(&mu_);
    return intervals_;
  }
  std::vector<std::string> errors() {
    absl::MutexLock lock(&mu_);
    return errors_;
  }

 private:
  absl::Mutex mu_;
  std::vector<Interval> intervals_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> errors_ ABSL_GUARDED_BY(mu_);
};

// One client: its own connection's share of the traffic and its exact record.
class SoakClient {
 public:
  SoakClient(const std::string& addr, int index, const Options& o, Stats* stats)
      : client_(addr, {.timeout = std::chrono::seconds(60)}),
        impatient_(addr, {.timeout = std::chrono::milliseconds(1), .retry = {.max_retries = 0}}),
        index_(index),
        o_(o),
        stats_(stats),
        rng_(uint64_t(index) * 7919 + 1) {}

  // Runs operations until `stop`; `interval()` says which row they count in.
  void Run(const std::atomic<bool>& stop, const std::function<size_t()>& interval) {
    int op = 0;
    while (!stop.load()) {
      const size_t c = rng_() % 2;
      const int dice = int(rng_() % 100);
      if (index_ < 2 && ++op % 400 == 0) {
        Timed(interval, Kind::kMaintenance, [&] {
          const std::string name = kCollections[index_];
          return (op / 400) % 2 ? client_.BuildIndex(name).status() : client_.Flush(name).status();
        });
      } else if (dice < 40) {
        Upsert(c, interval);
      } else if (dice < 50) {
        Delete(c, interval);
      } else if (dice < 92) {
        Search(c, interval, dice < 52);
      } else {
        Check(c, interval);
      }
    }
  }

  // Compares shoald's rows with the record: the number of mismatches (printed).
  uint64_t Verify() {
    uint64_t bad = 0, live = 0, dead = 0;
    for (size_t c = 0; c < 2; ++c) {
      std::vector<uint64_t> ids;
      for (uint64_t i = 0; i < o_.ids_per_client; ++i) ids.push_back(Id(i));
      for (size_t first = 0; first < ids.size(); first += 500) {
        std::vector<uint64_t> batch(ids.begin() + first,
                                    ids.begin() + std::min(ids.size(), first + 500));
        auto got = client_.Get(kCollections[c], batch, true);
        if (!got.ok()) {
          std::printf("client %d: Get: %s\n", index_, got.status().ToString().c_str());
          return batch.size() + bad;
        }
        std::map<uint64_t, const Point*> found;
        for (const Point& p : *got) found[p.id] = &p;
        for (uint64_t id : batch) {
          const auto& want = record_[c][id - Id(0)];
          auto it = found.find(id);
          if (want.has_value())
            ++live;
          else
            ++dead;
          if (want.has_value() != (it != found.end()) ||
              (want.has_value() && it->second->vector != *want)) {
            if (bad++ < 3) {
              std::printf("client %d: %s id %llu: %s\n", index_, kCollections[c],
                          (unsigned long long)id,
                          want.has_value() ? (it == found.end() ? "missing" : "wrong vector")
                                           : "deleted but present");
            }
          }
        }
      }
      // A sample of live rows: an exact-enough search finds each one first.
      int sampled = 0;
      for (uint64_t i = 0; i < o_.ids_per_client && sampled < 5; i += 97) {
        const auto& want = record_[c][i];
        if (!want.has_value()) continue;
        ++sampled;
        auto r = client_.Search(kCollections[c], *want, {.k = 1, .nprobe = 65536});
        if (!r.ok() || r->hits.empty() || r->hits[0].id != Id(i)) {
          if (bad++ < 3)
            std::printf("client %d: search for id %llu did not find it\n", index_,
                        (unsigned long long)Id(i));
        }
      }
    }
    live_ = live;
    dead_ = dead;
    return bad;
  }
  uint64_t live() const { return live_; }
  uint64_t dead() const { return dead_; }

 private:
  uint64_t Id(uint64_t i) const { return uint64_t(index_) * 1000000 + i; }

  std::vector<float> RandomVector() {
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> v(o_.dim);
    for (float& x : v) x = u(rng_);
    return v;
  }

  template <typename Fn>
  void Timed(const std::function<size_t()>& interval, Kind kind, Fn fn, bool may_cancel = false) {
    const Clock::time_point t0 = Clock::now();
    absl::Status s = fn();
    const auto ns = uint64_t(std::chrono::nanoseconds(Clock::now() - t0).count());
    const bool cancelled = may_cancel && (absl::IsDeadlineExceeded(s) || absl::IsCancelled(s));
    stats_->Record(interval(), ns, s.ok(), cancelled, kind,
                   absl::StrFormat("client %d: %s", index_, s.ToString()));
  }

  // New ids and overwrites, 1..16 rows.
  void Upsert(size_t c, const std::function<size_t()>& interval) {
    std::vector<Point> points;
    const int n = 1 + int(rng_() % 16);
    for (int i = 0; i < n; ++i) {
      const uint64_t slot = rng_() % o_.ids_per_client;
      bool dup = false;
      for (const Point& p : points) dup |= p.id == Id(slot);
      if (!dup) points.push_back({Id(slot), RandomVector(), {}});
    }
    Timed(interval, Kind::kWrite, [&] {
      auto r = client_.Upsert(kCollections[c], points);
      if (r.ok()) {
        for (const Point& p : points) record_[c][p.id - Id(0)] = p.vector;
      }
      return r.status();
    });
  }

  void Delete(size_t c, const std::function<size_t()>& interval) {
    std::vector<uint64_t> ids;
    const int n = 1 + int(rng_() % 8);
    for (int i = 0; i < n; ++i) ids.push_back(Id(rng_() % o_.ids_per_client));
    Timed(interval, Kind::kWrite, [&] {
      auto r = client_.Delete(kCollections[c], ids);
      if (r.ok()) {
        for (uint64_t id : ids) record_[c][id - Id(0)].reset();
      }
      return r.status();
    });
  }

  // `cancel`: a 1 ms deadline, the injected cancellation (DEADLINE_EXCEEDED is not an error).
  void Search(size_t c, const std::function<size_t()>& interval, bool cancel) {
    const std::vector<float> q = RandomVector();
    if (cancel) {
      Timed(
          interval, Kind::kRead,
          [&] { return impatient_.Search(kCollections[c], q, {.k = 10, .nprobe = 64}).status(); },
          true);
      return;
    }
    Timed(interval, Kind::kRead, [&] {
      auto r = client_.Search(kCollections[c], q, {.k = 10});
      if (r.ok() && r->hits.size() > 10) return absl::InternalError("more than k hits");
      return r.status();
    });
  }

  // Reads back a few own rows and compares them with the record.
  void Check(size_t c, const std::function<size_t()>& interval) {
    std::vector<uint64_t> ids;
    for (int i = 0; i < 4; ++i) ids.push_back(Id(rng_() % o_.ids_per_client));
    Timed(interval, Kind::kRead, [&]() -> absl::Status {
      auto got = client_.Get(kCollections[c], ids, true);
      if (!got.ok()) return got.status();
      std::map<uint64_t, const Point*> found;
      for (const Point& p : *got) found[p.id] = &p;
      for (uint64_t id : ids) {
        const auto& want = record_[c][id - Id(0)];
        auto it = found.find(id);
        if (want.has_value() != (it != found.end()) ||
            (want.has_value() && it->second->vector != *want)) {
          return absl::DataLossError(absl::StrFormat("%s id %llu disagrees with the record",
                                                     kCollections[c], (unsigned long long)id));
        }
      }
      return absl::OkStatus();
    });
  }

  Client client_;
  Client impatient_;  // a 1 ms deadline: the injected cancellations
  const int index_;
  const Options& o_;
  Stats* const stats_;
  std::mt19937_64 rng_;
  // Per collection, per own id: the acknowledged vector, or none (never written / deleted).
  std::vector<std::optional<std::vector<float>>> record_[2] = {
      std::vector<std::optional<std::vector<float>>>(o_.ids_per_client),
      std::vector<std::optional<std::vector<float>>>(o_.ids_per_client)};
  uint64_t live_ = 0, dead_ = 0;
};

int Run(const Options& o) {
  std::error_code ec;
  std::filesystem::remove_all(o.dir, ec);
  std::filesystem::create_directories(o.dir, ec);
  auto server = LocalShoald::Start({.binary = o.shoald,
                                    .data_dir = o.dir + "/data",
                                    .extra_args = {"--cache-bytes", std::to_string(o.cache_bytes),
                                                   "--flush-rows", std::to_string(o.flush_rows)}});
  if (!server.ok()) {
    std::fprintf(stderr, "shoald: %s\n", server.status().ToString().c_str());
    return 1;
  }
  const LocalShoald& shoald = **server;
  Client admin(shoald.grpc_addr());
  for (const char* name : kCollections) {
    IndexSpec index;
    if (std::string(name) == "soak_ivf") index = {.type = IndexType::kIvfFlat, .nlist = 64};
    if (absl::Status s = admin.CreateCollection({name, o.dim, Metric::kL2, index}); !s.ok()) {
      std::fprintf(stderr, "create %s: %s\n", name, s.ToString().c_str());
      return 1;
    }
  }
  const auto total = std::chrono::duration<double>(o.minutes * 60);
  const size_t intervals =
      std::max<size_t>(1, size_t(std::ceil(total.count() / double(o.interval_seconds))));
  std::printf(
      "shoal-soak: %d clients, %.1f min, cache.bytes %s, flush_rows %d, dim %u, "
      "%llu ids per client and collection\n",
      o.clients, o.minutes, MiB(double(o.cache_bytes)).c_str(), o.flush_rows, o.dim,
      (unsigned long long)o.ids_per_client);
  Stats stats(intervals);
  std::vector<std::unique_ptr<SoakClient>> clients;
  for (int i = 0; i < o.clients; ++i) {
    clients.push_back(std::make_unique<SoakClient>(shoald.grpc_addr(), i, o, &stats));
  }
  const Clock::time_point start = Clock::now();
  auto interval = [&] {
    return size_t(std::chrono::duration<double>(Clock::now() - start).count() /
                  double(o.interval_seconds));
  };
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (auto& c : clients) threads.emplace_back([&, c = c.get()] { c->Run(stop, interval); });

  std::printf("\n%8s %8s %7s %9s %11s %12s %12s %10s\n", "until s", "ops/s", "errors", "cancelled",
              "build/flush", "p99 reads", "p99 writes", "RSS");
  for (size_t i = 0; i < intervals; ++i) {
    std::this_thread::sleep_until(start + std::chrono::seconds(o.interval_seconds * (i + 1)));
    stats.SetRss(i, RssBytes(shoald.pid()));
    const Interval in = stats.intervals()[i];
    std::printf("%8zu %8.0f %7llu %9llu %11llu %12s %12s %10s\n",
                size_t(o.interval_seconds) * (i + 1), double(in.ops) / o.interval_seconds,
                (unsigned long long)in.errors, (unsigned long long)in.cancelled,
                (unsigned long long)in.maintenance, Ms(in.reads.Percentile(0.99)).c_str(),
                Ms(in.writes.Percentile(0.99)).c_str(), MiB(double(in.rss)).c_str());
    std::fflush(stdout);
  }
  stop.store(true);
  for (auto& t : threads) t.join();

  const std::vector<Interval> all = stats.intervals();
  uint64_t errors = 0, cancelled = 0, ops = 0;
  for (const Interval& in : all) {
    errors += in.errors;
    cancelled += in.cancelled;
    ops += in.ops;
  }
  for (const std::string& e : stats.errors()) std::printf("error: %s\n", e.c_str());
  // Plateau: the second half's highest RSS is within 10% (+16 MiB) of the first half's.
  uint64_t first_half = 0, second_half = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    (i < (all.size() + 1) / 2 ? first_half : second_half) =
        std::max(i < (all.size() + 1) / 2 ? first_half : second_half, all[i].rss);
  }
  const bool plateau =
      all.size() < 2 || double(second_half) <= 1.10 * double(first_half) + double(16 << 20);
  std::printf("\nRSS: first half peak %s, second half peak %s: %s\n",
              MiB(double(first_half)).c_str(), MiB(double(second_half)).c_str(),
              all.size() < 2 ? "too short to judge"
              : plateau      ? "PLATEAU"
                             : "STILL GROWING");

  uint64_t bad = 0, live = 0, dead = 0;
  for (auto& c : clients) {
    bad += c->Verify();
    live += c->live();
    dead += c->dead();
  }
  std::printf("operations %llu, errors %llu, injected cancellations %llu\n",
              (unsigned long long)ops, (unsigned long long)errors, (unsigned long long)cancelled);
  std::printf(
      "final contents: %llu live rows and %llu absent ids checked against the record: "
      "%llu mismatches\n",
      (unsigned long long)live, (unsigned long long)dead, (unsigned long long)bad);
  const bool alive = kill(shoald.pid(), 0) == 0;
  const bool pass = alive && errors == 0 && plateau && bad == 0;
  std::printf("soak %s\n", pass ? "PASSED" : "FAILED");
  return pass ? 0 : 1;
}

}  // namespace
}  // namespace shoal::bench

int main(int argc, char** argv) {
  shoal::bench::Options o;
  CLI::App app{"shoal-soak: mixed traffic from many clients, then every row checked"};
  app.add_option("--shoald", o.shoald, "shoald binary");
  app.add_option("--dir", o.dir, "scratch directory (emptied)");
  app.add_option("--minutes", o.minutes, "length of the run");
  app.add_option("--interval-seconds", o.interval_seconds, "seconds per printed row");
  app.add_option("--clients", o.clients, "concurrent clients");
  app.add_option("--ids-per-client", o.ids_per_client, "ids each client owns per collection");
  app.add_option("--cache-bytes", o.cache_bytes, "shoald's cache.bytes");
  app.add_option("--flush-rows", o.flush_rows, "shoald's collection.flush_rows");
  CLI11_PARSE(app, argc, argv);
  return shoal::bench::Run(o);
}
