// shoal-io-bench --cold-query: one query's cold partition reads, as Shoal does them, for
// comparison with fio reading the same offsets at the same depth (bench/io_bench.py).
//
// It routes one query against a segment's centroids (as the engine does), then, `repeat` times
// with the page cache dropped before each: (1) the engine's whole search over a fresh cache
// and scheduler (IvfSearch on a TbbExecutor, start to answer), (2) the same partition reads
// queued on the IoScheduler alone. Prints one JSON object: the reads (offset, length), their
// 4 KiB-aligned bytes, and the median times, and the process's first search apart.
//
// Thread-safety: runs on the calling thread.
#pragma once

#include <cstdint>
#include <string>

namespace shoal::bench {

struct ColdQueryOptions {
  std::string segment_dir;  // a seg-<id> directory: ivf.meta, lists.dat
  std::string query_file;
  size_t query_index = 0;
  uint32_t nprobe = 16;
  uint32_t queue_depth = 64;  // io.queue_depth
  uint64_t max_pinned_bytes = 64ull << 20;
  uint64_t cache_bytes = 1ull << 30;
  std::string backend = "uring";
  int cpu_threads = 1;
  int repeat = 5;
};

// Returns the process exit code.
int RunColdQuery(const ColdQueryOptions& options);

}  // namespace shoal::bench
