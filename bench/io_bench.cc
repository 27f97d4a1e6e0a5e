// shoal-io-bench: closed-loop random reads through Shoal's IoScheduler, for comparison with fio
// (bench/io_bench.py runs both in one go). Prints one JSON object per run on stdout.
//
//   shoal-io-bench --file F --bs 262144 --depth 32 --backend uring --seconds 3
//   shoal-io-bench --cold-query SEG_DIR --query-file Q --nprobe 16   (bench/io_bench_cold.h)
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/io_bench_cold.h"
#include "storage/sched/io_scheduler.h"

namespace {

using shoal::storage::IoBackendKind;
using shoal::storage::IoScheduler;
using shoal::storage::ReadRequest;
using shoal::storage::ReadResult;
using Clock = std::chrono::steady_clock;

double CpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

struct Loop {
  IoScheduler* io;
  uint64_t file;
  uint64_t blocks;
  uint32_t bs;
  Clock::time_point stop;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<uint32_t> latencies_us;  // guarded by mu
  std::mt19937_64 rng{42};             // guarded by mu
  int outstanding = 0;                 // guarded by mu
  uint64_t bytes = 0;                  // guarded by mu
  uint64_t errors = 0;                 // guarded by mu

  // REQUIRES: the caller counted this read in `outstanding` (under mu), so the main thread
  // cannot see zero outstanding while a read is about to start.
  void Issue() {
    uint64_t block;
    {
      std::lock_guard<std::mutex> lock(mu);
      block = rng() % blocks;
    }
    const auto start = Clock::now();
    io->Read(ReadRequest{file, block * bs, bs, 1, 0}, [this, start](absl::StatusOr<ReadResult> r) {
      const auto us =
          std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count();
      bool again;
      {
        std::lock_guard<std::mutex> lock(mu);
        --outstanding;
        if (r.ok()) {
          bytes += r->size;
          latencies_us.push_back(uint32_t(us));
        } else {
          ++errors;
        }
        again = Clock::now() < stop;
        if (again) ++outstanding;
        cv.notify_all();
      }
      if (again) Issue();
    });
  }
};

double Percentile(std::vector<uint32_t>& v, double p) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, size_t(p * double(v.size())));
  std::nth_element(v.begin(), v.begin() + long(k), v.end());
  return v[k];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shoal-io-bench: random reads through Shoal's I/O scheduler"};
  std::string path, backend = "uring";
  uint32_t bs = 256 << 10;
  int depth = 32;
  double seconds = 3;
  bool direct = true;
  shoal::bench::ColdQueryOptions cold;
  app.add_option("--file", path);
  app.add_option("--cold-query", cold.segment_dir, "a segment directory: time one cold query");
  app.add_option("--query-file", cold.query_file);
  app.add_option("--query-index", cold.query_index);
  app.add_option("--nprobe", cold.nprobe);
  app.add_option("--max-pinned-bytes", cold.max_pinned_bytes);
  app.add_option("--repeat", cold.repeat);
  app.add_option("--bs", bs);
  app.add_option("--depth", depth);
  app.add_option("--backend", backend, "uring or pread");
  app.add_option("--seconds", seconds);
  app.add_option("--direct", direct);
  CLI11_PARSE(app, argc, argv);
  if (!cold.segment_dir.empty()) {
    cold.queue_depth = uint32_t(depth);
    cold.backend = backend;
    return shoal::bench::RunColdQuery(cold);
  }
  if (path.empty()) {
    std::fprintf(stderr, "--file or --cold-query is required\n");
    return 1;
  }

  shoal::storage::IoSchedulerOptions options;
  options.limits.max_requests_in_flight = uint32_t(depth);
  options.limits.max_bytes_in_flight = uint64_t(depth) * bs;
  options.limits.max_request_bytes = bs;
  options.backend = backend == "pread" ? IoBackendKind::kPread : IoBackendKind::kUring;
  options.direct_io = direct;
  auto io = IoScheduler::Create(options);
  if (!io.ok()) {
    std::fprintf(stderr, "%s\n", io.status().ToString().c_str());
    return 1;
  }
  auto file = (*io)->OpenFile(path);
  if (!file.ok()) {
    std::fprintf(stderr, "%s\n", file.status().ToString().c_str());
    return 1;
  }
  FILE* f = std::fopen(path.c_str(), "rb");
  std::fseek(f, 0, SEEK_END);
  const uint64_t size = uint64_t(std::ftell(f));
  std::fclose(f);

  Loop loop;
  loop.io = io->get();
  loop.file = *file;
  loop.blocks = size / bs;
  loop.bs = bs;
  const double cpu0 = CpuSeconds();
  const auto start = Clock::now();
  loop.stop = start + std::chrono::milliseconds(int64_t(seconds * 1000));
  {
    std::lock_guard<std::mutex> lock(loop.mu);
    loop.outstanding = depth;
  }
  for (int i = 0; i < depth; ++i) loop.Issue();
  {
    std::unique_lock<std::mutex> lock(loop.mu);
    loop.cv.wait(lock, [&] { return Clock::now() >= loop.stop && loop.outstanding == 0; });
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  const double cpu = CpuSeconds() - cpu0;
  std::lock_guard<std::mutex> lock(loop.mu);
  std::printf(
      "{\"engine\": \"shoal-%s\", \"bs\": %u, \"depth\": %d, \"direct\": %s, \"mib_s\": %.1f, "
      "\"iops\": %.0f, \"p50_us\": %.0f, \"p99_us\": %.0f, \"cpu_s_per_gib\": %.3f, "
      "\"errors\": %llu}\n",
      std::string((*io)->backend_name()).c_str(), bs, depth,
      (*io)->is_direct(*file) ? "true" : "false", double(loop.bytes) / elapsed / (1 << 20),
      double(loop.latencies_us.size()) / elapsed, Percentile(loop.latencies_us, 0.50),
      Percentile(loop.latencies_us, 0.99), cpu / (double(loop.bytes) / (1 << 30)),
      (unsigned long long)loop.errors);
  return 0;
}
