// The IVF engine's scoring step (core/index/ivf_search.cc): candidates, the per-query sinks a
// partition scan pushes rows into, and the chunked scoring of one partition for queries of one
// or several requests; stats merging and the engine's exception guard. Internal to the engine.
//
// Thread-safety: ScoreIntoSinks uses a per-thread scratch; sinks must not be shared between
// threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/index/ivf_search.h"
#include "core/index/partition_scan.h"
#include "core/index/row_selection.h"
#include "core/index/search_types.h"
#include "core/index/topk.h"

namespace shoal::core {

inline constexpr uint32_t kExact = UINT32_MAX;  // candidate key is exact (memtable or FLAT)

struct Candidate {
  float key = 0;
  uint64_t id = 0;
  uint32_t segment = kExact;  // where the raw vector lives, for refine
  uint32_t partition = 0;
  uint32_t row = 0;
  friend bool operator<(const Candidate& a, const Candidate& b) {
    return a.key < b.key || (a.key == b.key && a.id < b.id);
  }
};
using CandidateTopK = BasicTopK<Candidate>;

// A joiner's share of a shared scan: per ticket query its candidates, and the stats every one
// of its queries gets.
struct HandBack {
  std::vector<CandidateTopK> topk;
  QueryStats stats;
};

// Where one scored query's rows go: its request's top-k, dead-row filter and segment index.
struct Sink {
  CandidateTopK* best;
  const IdFilter* filter;                // may be null
  uint32_t segment;                      // in the owning request's segments
  const RowSelection* select = nullptr;  // filtered request: only these rows; null: all
};

// to += from, field by field (a task's or a hand-back's stats into a query's).
inline void AddStats(const QueryStats& from, QueryStats* to) {
  to->partitions_probed += from.partitions_probed;
  to->partitions_cached += from.partitions_cached;
  to->bytes_read += from.bytes_read;
  to->vectors_scanned += from.vectors_scanned;
  to->queue_us += from.queue_us;
  to->io_us += from.io_us;
  to->cpu_us += from.cpu_us;
  to->matching_rows_scanned += from.matching_rows_scanned;
}

// Runs `fn`; an exception (an allocation failure above all: scratch, PQ tables and results
// grow with the request) becomes the request's status. Nothing may escape an engine task: the
// job would never answer.
template <typename Fn>
absl::Status Catching(const char* what, Fn&& fn) {
  try {
    fn();
    return absl::OkStatus();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(std::string("out of memory ") + what);
  } catch (const std::exception& e) {
    return absl::InternalError(std::string(what) + " failed: " + e.what());
  } catch (...) {
    return absl::InternalError(std::string(what) + " failed");
  }
}

// Scores queries[0..nq) on the partition's n rows and pushes each live row of query j into
// sinks[j] (candidates of an `exact` model carry kExact instead of the segment). Queries are
// scored in chunks, so one thread's scratch stays near 4 MiB whatever nq is (I-9). An `exact`
// model's candidates carry exactly the single-query kernel's key, and each sink gets exactly
// the rows the single-query path would keep, however many queries share the scan: when the
// chunk goes through sgemm, a row near the threshold is re-scored (PreparedQueries::FlatKey,
// within core/index/rounding_bound.h's bound).
// A 4-bit PQ (fast-scan) model is scanned with each query's top-k threshold inside the kernel
// (FastScanRegion, shifted by the query's coarse key of the partition): only rows that can
// enter a top-k leave the registers, with the keys ScorePartition would give them.
// A filtered query (its sink has a RowSelection) that selects at most a quarter of the rows
// is scored on just those rows, their codes gathered, with the single-query kernel's keys;
// not for fast-scan codes (interleaved in blocks) or memtable blocks.
// dead_flags (memtable rows) may be null. The rows are rows [row_begin, row_begin + n) of
// `partition` (a memtable block's slice starts past 0), as a sink's RowSelection numbers them.
void ScoreIntoSinks(const ScanQuery* queries, const Sink* sinks, size_t nq, const uint8_t* codes,
                    const uint64_t* ids, const std::atomic<uint8_t>* dead_flags, size_t n,
                    bool exact, uint32_t partition, uint32_t row_begin = 0);

}  // namespace shoal::core
