// Plain types shared by the search paths: a scanned block of rows, a query's result and the
// per-query statistics reported to clients.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"

namespace shoal::core {

// A contiguous run of rows: vectors row-major with stride `dim`, the parallel ids, and an
// optional tombstone flag per row (non-zero = deleted or superseded).
struct VectorBlock {
  const float* vectors = nullptr;
  const uint64_t* ids = nullptr;
  const std::atomic<uint8_t>* dead = nullptr;  // may be null: every row is live
  size_t rows = 0;
};

// A consistent set of blocks. The memory stays valid for as long as `keepalive` is held.
struct FlatView {
  size_t dim = 0;
  std::vector<VectorBlock> blocks;
  std::shared_ptr<const void> keepalive;

  size_t rows() const {
    size_t n = 0;
    for (const VectorBlock& b : blocks) n += b.rows;
    return n;
  }
};

// How a filtered search chose its partitions (ivf_search.h).
enum class FilterPlan : uint8_t {
  kNone,          // not filtered
  kExactMatches,  // few matches: just the selected rows, read and scored exactly
  kIvfBitmap,     // broad: the nearest partitions with a match, each row tested in the scan
  kSelectiveIvf,  // selective: probes widen, in centroid order, until enough matches scanned
};

struct QueryStats {
  uint32_t partitions_probed = 0;
  uint32_t partitions_cached = 0;
  uint64_t bytes_read = 0;
  uint64_t vectors_scanned = 0;
  uint64_t queue_us = 0;
  uint64_t io_us = 0;
  uint64_t cpu_us = 0;
  // Filtered searches (IvfSearchRequest::filtered): the plan, the rows the filter selects
  // (over the memtable and every segment), the partitions passed over because none of their
  // rows is selected, and the selected rows this query scanned.
  FilterPlan plan = FilterPlan::kNone;
  uint64_t rows_matched = 0;
  uint32_t partitions_skipped = 0;
  uint64_t matching_rows_scanned = 0;
};

struct Neighbor {
  uint64_t id;
  float distance;  // in the metric's reported convention (see core/base/metric.h)
};

struct QueryResult {
  std::vector<Neighbor> neighbors;  // nearest first
  QueryStats stats;
};

// Called once with one result per query, in request order, or the error that stopped the search.
using SearchDone = absl::AnyInvocable<void(absl::StatusOr<std::vector<QueryResult>>) &&>;

}  // namespace shoal::core
