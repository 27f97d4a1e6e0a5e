// IvfSearch: the query engine. Searches a batch of queries over IVF segments (through their
// PartitionSource) and a memtable view (exactly), without ever waiting on the CPU arena.
//
// The path (DESIGN.md §3): a routing task picks each query's `nprobe` nearest partitions per
// segment and merges the queries' lists into one plan, partition-major: a partition probed by
// several queries of the batch is fetched and scanned once for all of them. Fetches are issued
// nearest first while the request's pinned bytes stay under `max_pinned_bytes` (at least one
// is always in flight, so an oversized partition cannot stall a query) — prefetch depth comes
// from this byte budget, never from the number of CPU threads. Each completion marks its
// partition ready and, when fewer than executor.concurrency() tasks of this request are
// running, submits one. A task takes what is ready now (at least one partition, at most
// `batch_partitions` or `batch_bytes`), checks cancellation before each partition, scans,
// merges into the per-query top-k and returns: waiting is expressed by returning (I-1).
//
// Shared scans across requests (core/index/scan_share.h): every partition a request fetches is
// a ticket registered on its ScanShare. A request whose partition is already being fetched for
// another (older or as old) request joins that fetch instead of issuing its own; the request
// whose job accepts the data scores every registered request's queries on it in one batched
// ScorePartition call and hands each its candidates (filtered by that request's dead rows,
// kept to its own limit). A joined partition counts against the joiner's pinned-bytes budget
// and prefetch depth exactly like a fetch of its own, until it is scanned for it. A cancelled
// or failed request leaves the shared scans it waits on and answers at once; a partition whose
// fetch its leader's cancellation dropped is fetched again for the others. `share` null: each
// request has a private, unshared ScanShare (the same code path with one ticket per fetch).
//
// Refine (SQ8/PQ segments, refine_factor > 0): the best k * refine_factor candidates are
// re-ranked with exact distances from raw vectors read through PartitionSource::ReadRaw,
// another asynchronous stage. `done` runs once, on an executor thread, once every work item of
// the request is answered (scanned, handed back, failed, or left): the request's budget and
// every pin it accepted are released by then. A fetch the request issued may still be in
// flight after `done` (it left the shared scan, e.g. cancelled while the read was at the
// disk): the shared scan owns that fetch and drops its data when it answers; the owner of the
// ScanShare waits for ScanShare::InFlightFetches() == 0 before freeing the sources' cache and
// I/O scheduler (server/server.cc shutdown).
//
// Filters (request.filtered): each segment's RowSelection (core/index/row_selection.h) and the
// memtable's decide which rows may answer. A segment whose selected rows' vectors cost fewer
// bytes to read than its walk would (PrefersExactMatches in ivf_search.cc) is not routed:
// those vectors are read through ReadRaw in runs, under the same pinned-bytes budget as
// fetches, and scored exactly for every query (kExactMatches when no segment was walked).
// Otherwise a query takes partitions nearest first (routed first to as many as should hold
// its selected rows at the segment's density, at least 4x nprobe, and over every partition if
// that runs out), passing over those without a selected row (partitions_skipped), until it
// has its nprobe and enough selected rows
// (IvfSearchOptions::filter_rows_per_k; at least k, or all the segment has, so every query
// gets min(k, selected rows): I-10). Selected rows are tested
// per row in the scan, for the request's own queries and for joiners of its shared scans, each
// with its own selection: requests with different filters still share a partition's read and
// scan. The stats say which plan ran (kIvfBitmap: the nprobe nearest; kSelectiveIvf: widened).
//
// Thread-safety: IvfSearch may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/base/cancel.h"
#include "core/exec/executor.h"
#include "core/index/ivf_model.h"
#include "core/index/partition_source.h"
#include "core/index/row_selection.h"
#include "core/index/scan_share.h"
#include "core/index/search_types.h"

namespace shoal::core {

// Rows of a segment that were deleted or superseded after the segment was written.
class IdFilter {
 public:
  virtual ~IdFilter() = default;
  virtual bool IsDead(uint64_t id) const = 0;
};

struct IvfSegmentRef {
  std::shared_ptr<const IvfModel> model;
  std::vector<uint64_t> partition_bytes;  // per partition, for the pinned-bytes budget
  std::vector<uint64_t> partition_rows;   // per partition; empty partitions are not fetched
  std::shared_ptr<PartitionSource> source;
  std::shared_ptr<const IdFilter> dead;  // may be null: every row is live
  // A filtered request's rows of this segment (its dead rows already out). REQUIRES: set on
  // every segment of a filtered request, and on none of an unfiltered one.
  std::shared_ptr<const RowSelection> selection;
};

struct IvfSearchOptions {
  size_t batch_partitions = 16;             // K: partitions per task, at most
  uint64_t batch_bytes = 8ull << 20;        // B: bytes per task, at most (>= 1 partition)
  uint64_t max_pinned_bytes = 64ull << 20;  // fetched but not yet scanned, per request
  // Filtered requests: past its nprobe nearest partitions with a selected row, a query's
  // probes widen (nearest first) until it has scanned this many selected rows per neighbour
  // asked for (k) — or as many as the unfiltered search would scan, or every selected row of
  // the segment, if fewer.
  uint32_t filter_rows_per_k = 20;
};

struct IvfSearchRequest {
  std::vector<IvfSegmentRef> segments;
  FlatView memtable;           // not yet indexed rows, searched exactly (dim may be 0: none)
  std::vector<float> queries;  // num_queries * dim; cosine queries already normalised
  size_t num_queries = 0;
  uint32_t dim = 0;
  size_t k = 10;
  Metric metric = Metric::kL2;
  uint32_t nprobe = 16;
  uint32_t refine_factor = 0;
  std::shared_ptr<const CancelToken> cancel;  // may be null
  IvfSearchOptions options;
  // A filter: only rows each segment's `selection` (and `memtable_selection`, over the
  // memtable's blocks) selects are answered, min(k, selected rows) per query (I-10).
  bool filtered = false;
  std::shared_ptr<const RowSelection> memtable_selection;  // REQUIRES: set when filtered
  // Shared scans with other requests on the same ScanShare; null: none.
  std::shared_ptr<ScanShare> share;
  // Called at most once, without the engine's locks, the first time the request has no CPU
  // work left to run while reads it needs are outstanding (a partition fetch or a re-rank read
  // from disk): the CPU it was given is free for others. SearchBatcher starts the next batch on
  // it. May be empty.
  std::function<void()> on_io_wait;
};

void IvfSearch(Executor& executor, IvfSearchRequest request, SearchDone done);

}  // namespace shoal::core
