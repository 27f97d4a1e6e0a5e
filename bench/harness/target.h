// Target: one system under test — Shoal over gRPC, or a library searched in-process (FAISS,
// hnswlib) — behind the few calls the driver needs.
//
// Life cycle: Build() once, then for each sweep point SetKnob() and many Search() calls.
// Thread-safety: Search() may be called from many threads at once; Build(), SetKnob() and
// Usage() only while no Search() runs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/harness/dataset.h"

namespace shoal::bench {

// What the system under test has consumed so far (monotonic counters; the driver takes
// differences around each measured point).
struct ResourceUsage {
  double cpu_seconds = 0;  // user + system of the process that searches
  // Memory, attributed as far as the process allows:
  std::optional<uint64_t> server_peak_rss_bytes;  // a server's VmHWM since Build()
  std::optional<uint64_t> index_heap_bytes;       // in-process: heap the index holds now
  std::optional<uint64_t> bytes_read;             // storage bytes read (Shoal's /metrics)
  std::optional<uint64_t> cache_hits, cache_misses;
  // Shoal's shoal_search_queries_per_scan histogram: _sum (queries scored by partition scans)
  // and _count (scans); absent when the server does not export it.
  std::optional<double> scan_queries_sum, scans;
  // shoald's shoal_process_heap_allocations_total; absent when it does not count them.
  std::optional<double> heap_allocations;
};

class Target {
 public:
  virtual ~Target() = default;

  virtual std::string name() const = 0;       // "shoal:ivf_flat", "faiss:ivf_pq", "hnsw", ...
  virtual std::string knob_name() const = 0;  // "nprobe", "ef", or "" when there is none
  virtual bool in_process() const = 0;        // searched by threads of this process

  // Indexes d's base vectors (or reuses an index already built for exactly this dataset).
  virtual absl::Status Build(const Dataset& d) = 0;
  virtual void SetKnob(uint32_t value) = 0;
  // Answers `count` queries (row-major, d.dim floats each): ids[i * k + j] is the j-th nearest
  // of query i, -1 when fewer were found. An in-process target may use up to `threads` threads.
  virtual absl::Status Search(const float* queries, size_t count, uint32_t k, int threads,
                              int64_t* ids) = 0;
  virtual ResourceUsage Usage() = 0;
  // Forgets cached state so the next searches run cold; false when the target has none.
  virtual absl::StatusOr<bool> MakeCold() { return false; }
};

}  // namespace shoal::bench
