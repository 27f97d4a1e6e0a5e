#include "bench/io_bench_cold.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <thread>

#include "absl/synchronization/notification.h"
#include "core/base/status.h"
#include "core/exec/tbb_executor.h"
#include "core/index/distance.h"
#include "core/index/ivf_search.h"
#include "dataset/vector_reader.h"
#include "storage/cache/partition_cache.h"
#include "storage/collection/segment.h"
#include "storage/io/file_system.h"

namespace shoal::bench {
namespace {

using Clock = std::chrono::steady_clock;
using storage::IoScheduler;

double MillisSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Page cache out, so neither Shoal (O_DIRECT anyway) nor fio gets a warm read.
void DropCaches() {
  ::sync();
  const int fd = ::open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return;  // not root: O_DIRECT still bypasses the cache
  ssize_t rc = ::write(fd, "3\n", 2);
  (void)rc;
  ::close(fd);
  // Let the drop's aftermath (freeing, writeback) settle, as it does while fio starts up.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

// The route step of ivf_search.cc for one query: its nprobe nearest non-empty partitions,
// nearest first.
std::vector<uint32_t> Route(const storage::IvfMeta& meta, const float* query, uint32_t nprobe) {
  const core::IvfModel& model = meta.model;
  const size_t nlist = model.nlist();
  std::vector<float> dist(nlist);
  if (core::IsSimilarity(model.metric)) {
    core::InnerProductMany(query, model.centroids.data(), nlist, model.dim, dist.data());
    for (float& d : dist) d = -d;
  } else {
    core::L2SqrMany(query, model.centroids.data(), nlist, model.dim, dist.data());
  }
  std::vector<uint32_t> order(nlist);
  std::iota(order.begin(), order.end(), 0u);
  const size_t n = std::min<size_t>(nprobe, nlist);
  std::partial_sort(
      order.begin(), order.begin() + long(n), order.end(),
      [&](uint32_t a, uint32_t b) { return dist[a] < dist[b] || (dist[a] == dist[b] && a < b); });
  std::vector<uint32_t> out;
  for (size_t r = 0; r < n; ++r) {
    if (meta.partitions[order[r]].count > 0) out.push_back(order[r]);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<IoScheduler>> NewScheduler(const ColdQueryOptions& o) {
  storage::IoSchedulerOptions options;
  options.limits.max_requests_in_flight = o.queue_depth;
  options.backend =
      o.backend == "pread" ? storage::IoBackendKind::kPread : storage::IoBackendKind::kUring;
  return IoScheduler::Create(options);
}

// The engine's cold query: a fresh cache, IvfSearch over the segment, start to answer.
absl::StatusOr<double> EngineOnce(const ColdQueryOptions& o, const std::vector<float>& query,
                                  core::Executor& executor, core::QueryStats* stats) {
  SHOAL_ASSIGN_OR_RETURN(auto io, NewScheduler(o));
  storage::PartitionCache cache(o.cache_bytes);
  SHOAL_ASSIGN_OR_RETURN(auto segment, storage::Segment::Open(storage::DefaultFileSystem(),
                                                              o.segment_dir, 1, io.get(), &cache));
  core::IvfSearchRequest request;
  request.segments.push_back(segment->Ref(nullptr));
  request.queries = query;
  request.num_queries = 1;
  request.dim = segment->meta().model.dim;
  request.k = 10;
  request.metric = segment->meta().model.metric;
  request.nprobe = o.nprobe;
  request.options.max_pinned_bytes = o.max_pinned_bytes;
  DropCaches();
  absl::Notification done;
  absl::StatusOr<std::vector<core::QueryResult>> result;
  const Clock::time_point start = Clock::now();
  core::IvfSearch(executor, std::move(request),
                  [&](absl::StatusOr<std::vector<core::QueryResult>> r) {
                    result = std::move(r);
                    done.Notify();
                  });
  done.WaitForNotification();
  const double ms = MillisSince(start);
  if (!result.ok()) return result.status();
  *stats = (*result)[0].stats;
  return ms;
}

// The same partitions through the IoScheduler alone, all queued at once: the I/O part.
absl::StatusOr<double> SchedulerOnce(const ColdQueryOptions& o,
                                     const std::vector<storage::PartitionExtent>& reads) {
  SHOAL_ASSIGN_OR_RETURN(auto io, NewScheduler(o));
  SHOAL_ASSIGN_OR_RETURN(uint64_t file, io->OpenFile(o.segment_dir + "/lists.dat"));
  DropCaches();
  absl::Mutex mu;
  size_t left = reads.size();
  const Clock::time_point start = Clock::now();
  io->Plug();  // as the engine issues a query's fetches: one submission
  for (uint32_t rank = 0; rank < reads.size(); ++rank) {
    storage::ReadRequest r{file, reads[rank].offset, uint32_t(reads[rank].length), 1, rank};
    io->Read(r, [&](absl::StatusOr<storage::ReadResult>) {
      absl::MutexLock lock(&mu);
      --left;
    });
  }
  io->Unplug();
  {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(
        +[](size_t* n) { return *n == 0; }, &left));
  }
  return MillisSince(start);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int RunColdQuery(const ColdQueryOptions& o) {
  uint32_t dim = 0;
  auto queries = dataset::ReadAllVectors(o.query_file, o.query_index + 1, &dim);
  auto meta_bytes =
      storage::ReadFileToString(storage::DefaultFileSystem(), o.segment_dir + "/ivf.meta");
  if (!queries.ok() || !meta_bytes.ok()) {
    std::fprintf(stderr, "cannot read the query file or %s/ivf.meta\n", o.segment_dir.c_str());
    return 1;
  }
  auto meta = storage::DecodeIvfMeta(*meta_bytes);
  if (!meta.ok() || meta->model.dim != dim) {
    std::fprintf(stderr, "bad ivf.meta or query dimension\n");
    return 1;
  }
  std::vector<float> query(queries->end() - dim, queries->end());
  std::vector<storage::PartitionExtent> reads;
  for (uint32_t p : Route(*meta, query.data(), o.nprobe)) reads.push_back(meta->partitions[p]);

  core::TbbExecutor executor(o.cpu_threads);
  std::vector<double> engine_ms, sched_ms;
  core::QueryStats stats;
  // The process's first search also pays for starting the arena's threads and, after the drop,
  // for reading the search path's code back in: reported apart, not in the medians.
  double first_ms = 0;
  for (int i = -1; i < o.repeat; ++i) {
    auto e = EngineOnce(o, query, executor, &stats);
    auto s = SchedulerOnce(o, reads);
    if (!e.ok() || !s.ok()) {
      std::fprintf(stderr, "%s\n", (!e.ok() ? e.status() : s.status()).ToString().c_str());
      return 1;
    }
    if (i < 0) {
      first_ms = *e;
      continue;
    }
    engine_ms.push_back(*e);
    sched_ms.push_back(*s);
  }
  uint64_t bytes = 0;
  std::printf("{\"engine\": \"shoal-%s\", \"reads\": [", o.backend.c_str());
  for (size_t i = 0; i < reads.size(); ++i) {
    bytes +=
        storage::AlignUp(reads[i].offset + reads[i].length) - storage::AlignDown(reads[i].offset);
    std::printf("%s[%llu, %llu]", i ? ", " : "", (unsigned long long)reads[i].offset,
                (unsigned long long)reads[i].length);
  }
  std::printf("], \"bytes\": %llu, \"query_ms\": %.3f, \"query_ms_all\": [",
              (unsigned long long)bytes, Median(engine_ms));
  for (size_t i = 0; i < engine_ms.size(); ++i) std::printf("%s%.3f", i ? ", " : "", engine_ms[i]);
  std::printf(
      "], \"first_query_ms\": %.3f, \"scheduler_ms\": %.3f, \"io_us_sum\": %llu, "
      "\"cpu_us\": %llu}\n",
      first_ms, Median(sched_ms), (unsigned long long)stats.io_us,
      (unsigned long long)stats.cpu_us);
  return 0;
}

}  // namespace shoal::bench
