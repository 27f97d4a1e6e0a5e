// The IVF engine's scoring step (core/index/ivf_search.cc): candidates, the per-query sinks a
// partition scan pushes rows into, and the chunked scoring of one partition for queries of one
// or several requests. Internal to the engine.
//
// Thread-safety: ScoreIntoSinks uses a per-thread scratch; sinks must not be shared between
// threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "core/index/ivf_search.h"
#include "core/index/partition_scan.h"
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
  const IdFilter* filter;  // may be null
  uint32_t segment;        // in the owning request's segments
};

// Scores queries[0..nq) on the partition's n rows and pushes each live row of query j into
// sinks[j] (candidates of an `exact` model carry kExact instead of the segment). Queries are
// scored in chunks, so one thread's scratch stays near 4 MiB whatever nq is (I-9). An `exact`
// model's candidates carry exactly the single-query kernel's key, and each sink gets exactly
// the rows the single-query path would keep, however many queries share the scan: when the
// chunk goes through sgemm, a row near the threshold is re-scored (PreparedQueries::FlatKey,
// within core/index/rounding_bound.h's bound).
// dead_flags (memtable rows) may be null.
void ScoreIntoSinks(const ScanQuery* queries, const Sink* sinks, size_t nq, const uint8_t* codes,
                    const uint64_t* ids, const std::atomic<uint8_t>* dead_flags, size_t n,
                    bool exact, uint32_t partition);

}  // namespace shoal::core
