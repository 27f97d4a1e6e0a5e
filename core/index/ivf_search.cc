#include "core/index/ivf_search.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <exception>
#include <new>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/base/seeded_bug.h"
#include "core/index/coarse_router.h"
#include "core/index/distance.h"
#include "core/index/fastscan_model.h"
#include "core/index/ivf_scan.h"
#include "core/index/partition_scan.h"
#include "core/index/scan_share.h"
#include "core/index/topk.h"

namespace shoal::core {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMemtableRowsPerWork = 16384;
// The exact_matches plan reads a segment's selected rows in work items of at most this many.
constexpr size_t kListedRowsPerWork = 512;

std::atomic<uint64_t> g_next_query_seq{1};

// BeginBatch() on every segment's source for the lifetime of a scope (EndBatch() even when an
// exception leaves it, so no thread stays batched).
class SourceBatch {
 public:
  explicit SourceBatch(const std::vector<IvfSegmentRef>& segments) : segments_(segments) {
    for (const IvfSegmentRef& s : segments_) s.source->BeginBatch();
  }
  ~SourceBatch() {
    for (const IvfSegmentRef& s : segments_) s.source->EndBatch();
  }
  SourceBatch(const SourceBatch&) = delete;
  SourceBatch& operator=(const SourceBatch&) = delete;

 private:
  const std::vector<IvfSegmentRef>& segments_;
};

uint64_t MicrosSince(Clock::time_point start) {
  return uint64_t(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count());
}

// Rows in the first `nprobe` non-empty partitions of `route`: what an unfiltered query scans.
uint64_t UnfilteredRows(const IvfSegmentRef& seg, const Probe* route, size_t depth, size_t nprobe) {
  uint64_t rows = 0;
  for (size_t rank = 0, taken = 0; rank < depth && taken < nprobe; ++rank) {
    const uint64_t n = seg.partition_rows[route[rank].partition];
    rows += n;
    taken += n > 0;
  }
  return rows;
}

// All the rows of a segment's partitions.
uint64_t SegmentRows(const IvfSegmentRef& seg) {
  uint64_t rows = 0;
  for (uint64_t n : seg.partition_rows) rows += n;
  return rows;
}

double BytesPerRow(const IvfSegmentRef& seg) {
  uint64_t rows = 0, bytes = 0;
  for (size_t p = 0; p < seg.partition_rows.size(); ++p) {
    rows += seg.partition_rows[p];
    bytes += seg.partition_bytes[p];
  }
  return rows == 0 ? 0 : double(bytes) / double(rows);
}

// Whether a segment with `matches` selected rows takes the exact_matches plan (reads just
// those rows' vectors, full precision, in runs) rather than a walk of its partitions. Priced in
// bytes: the walk reads at least the nprobe nearest partitions, and to scan `budget` selected
// rows it reads about budget / density rows' codes (density = matches / rows); the matches'
// vectors are read once. At or under the budget the exact plan is never more work.
bool PrefersExactMatches(const IvfSegmentRef& seg, uint64_t matches, size_t nprobe, uint64_t budget,
                         uint32_t dim) {
  if (matches > RowSelection::kMaxListed) return false;
  if (matches <= budget) return true;
  const uint64_t rows = SegmentRows(seg);
  if (rows == 0) return true;
  const double bytes_per_row = BytesPerRow(seg);
  const size_t nlist = std::max<size_t>(1, seg.partition_rows.size());
  const double probed_rows =
      seg.model->exact ? double(rows) : double(rows * nprobe) / double(nlist);
  const double walked_rows = std::min(
      double(rows), std::max(probed_rows, double(budget) * double(rows) / double(matches)));
  return double(matches) * double(dim) * sizeof(float) <= walked_rows * bytes_per_row;
}

// The partitions of `seg` holding a selected row, ascending, when they are at most a quarter of
// its partitions (a filter whose matches cluster: a region, a tenant of similar items); else
// empty.
std::vector<uint32_t> ConcentratedMatches(const IvfSegmentRef& seg) {
  const RowSelection* select = seg.selection.get();
  const size_t nlist = seg.partition_rows.size();
  std::vector<uint32_t> matching;
  if (!select || seg.model->exact) return matching;
  for (uint32_t p = 0; p < nlist && p < select->partitions(); ++p) {
    if (select->matches_in(p) == 0) continue;
    if (4 * (matching.size() + 1) > nlist) return {};
    matching.push_back(p);
  }
  return matching;
}

// Routes the queries over just the partitions in `matching` (their probes name the segment's
// partitions): the order a full route gives those partitions, so a walk, which passes over
// partitions without a selected row, takes the same ones, for |matching| centroids' work
// rather than nlist's. May throw bad_alloc (Plan's caller catches it).
void RouteOverMatching(const IvfModel& model, const std::vector<uint32_t>& matching,
                       const float* queries, size_t nq, std::vector<Probe>* probes) {
  IvfModel sub;
  sub.dim = model.dim;
  sub.metric = model.metric;
  sub.centroids.resize(matching.size() * model.dim);
  for (size_t i = 0; i < matching.size(); ++i) {
    std::copy_n(model.centroid(matching[i]), model.dim, sub.centroids.data() + i * model.dim);
  }
  RouteQueries(sub, queries, nq, matching.size(), probes);
  for (Probe& p : *probes) p.partition = matching[p.partition];
}

// Whether the exact_matches plan, chosen at the segment's density, may still cost more than a
// query's walk: it does when the matches' vectors outweigh the query's nprobe nearest
// partitions, and a filter correlated with the query finds its matches there (its nearest
// partitions are full of them; the density says they are spread over the whole segment). Such
// a segment's queries are routed, and each takes the cheaper plan on its own route.
bool ExactMayLoseToAWalk(const IvfSegmentRef& seg, uint64_t matches, size_t nprobe, uint32_t dim) {
  if (seg.model->exact) return false;
  const uint64_t rows = SegmentRows(seg);
  const size_t nlist = std::max<size_t>(1, seg.partition_rows.size());
  const double probed_bytes = double(rows * nprobe) / double(nlist) * BytesPerRow(seg);
  return double(matches) * double(dim) * sizeof(float) > probed_bytes;
}

// How far to route a filtered query first: its nprobe, a few more, and about as many
// partitions as hold `enough` selected rows at the segment's density (twice that, for the
// spread between partitions), so that few queries run out and are routed over every partition.
size_t FilteredRouteDepth(const IvfSegmentRef& seg, size_t nprobe, uint64_t enough,
                          double density) {
  const size_t nlist = seg.partition_rows.size();
  const double rows_per_partition = double(SegmentRows(seg)) / double(std::max<size_t>(1, nlist));
  const double needed = density > 0 && rows_per_partition > 0
                            ? 2 * double(enough) / (density * rows_per_partition)
                            : double(nlist);
  const size_t depth = std::max({4 * nprobe, nprobe + 32, size_t(std::min(needed, double(nlist)))});
  return std::min(nlist, depth);
}

// One unit of scanning: a segment's partition, a run of a segment's selected rows (the
// exact_matches plan), or a range of memtable rows.
struct Work {
  uint32_t segment = kExact;  // kExact: memtable block `partition`, rows [row_begin, +rows)
  uint32_t partition = 0;
  size_t row_begin = 0, rows = 0;  // listed: the segment's selected rows [row_begin, +rows)
  bool listed = false;
  uint64_t bytes = 0;
  uint32_t rank = 0;      // nearest probe rank among its queries
  uint64_t matching = 0;  // filtered request: selected rows among the work's rows
  std::vector<uint32_t> queries;
  // Segment work: each query's routing key of the partition (|q - c|^2 or -<q, c>), the
  // per-(query, partition) constant of residual codes (core/index/partition_scan.h).
  std::vector<float> coarse_keys;
  std::vector<ScanQuery> scan;  // queries[j] as ScorePartition takes it (and tickets point to)
};

// One query's walk over a segment's route (IvfSearchJob::Plan): partitions nearest first,
// passing over those without a selected row, until it has `nprobe` of them and `enough`
// selected rows (unfiltered: the nprobe nearest non-empty ones). A partition counts towards
// nprobe by its share of matches against the segment's (`density`: selected rows per row):
// one holding three quarters of its fair share or more counts 1, one with a few stray matches
// counts as that fraction (ProbeCredit) — so a filter whose matches cluster far from the query
// (anti-correlated) still gets nprobe partitions' worth of matches, not nprobe strays.
struct RouteWalk {
  uint32_t segment = 0, query = 0;
  size_t nprobe = 0;
  uint64_t enough = 0;
  double density = 0;  // filtered: the segment's selected rows per row
  double taken = 0;
  uint64_t matched = 0;
  uint32_t skipped = 0;  // partitions passed over
  bool widened = false;  // passed over one, or took more than nprobe
  bool done = false;     // had nprobe and enough before the route ran out
};

// What a partition holding `share` of its fair share of matches counts towards nprobe: 1 from
// three quarters of its fair share up (a broad filter's partitions scatter around 1 by sampling
// noise alone, and counting 0.93 of one made a walk take an extra partition for a few missing
// matches), else the fraction itself (the strays of an anti-correlated filter).
double ProbeCredit(double share) { return share >= 0.75 ? 1.0 : share; }

// Walks `route` (`len` probes) for walk->query, calling take(p, rank) for each partition it
// takes, nearest first, until it has nprobe and enough selected rows.
template <typename Take>
void WalkRouteWith(const IvfSegmentRef& seg, const Probe* route, size_t len, RouteWalk* walk,
                   Take take) {
  const RowSelection* select = seg.selection.get();
  for (uint32_t rank = 0; rank < len; ++rank) {
    if (walk->taken >= double(walk->nprobe) && walk->matched >= walk->enough) {
      walk->done = true;
      return;
    }
    const uint32_t p = route[rank].partition;
    if (seg.partition_rows[p] == 0) continue;
    if (select && select->matches_in(p) == 0) {
      ++walk->skipped;
      walk->widened = true;
      continue;
    }
    if (select && walk->taken >= double(walk->nprobe)) walk->widened = true;
    walk->taken += select ? ProbeCredit(double(select->matches_in(p)) /
                                        (double(seg.partition_rows[p]) * walk->density))
                          : 1.0;
    if (select) walk->matched += select->matches_in(p);
    take(p, rank);
  }
  walk->done = walk->taken >= double(walk->nprobe) && walk->matched >= walk->enough;
}

// WalkRouteWith, adding the walk's work items; a partition the query already took (an earlier,
// shorter route) counts again but is not added twice.
void WalkRoute(const IvfSegmentRef& seg, const Probe* route, size_t len, RouteWalk* walk,
               std::vector<int64_t>* work_of, std::vector<Work>* work) {
  const RowSelection* select = seg.selection.get();
  WalkRouteWith(seg, route, len, walk, [&](uint32_t p, uint32_t rank) {
    int64_t& index = (*work_of)[p];
    if (index >= 0 && (*work)[size_t(index)].queries.back() == walk->query) return;
    if (index < 0) {
      index = int64_t(work->size());
      Work w;
      w.segment = walk->segment;
      w.partition = p;
      w.bytes = seg.partition_bytes[p];
      w.rank = rank;
      w.matching = select ? select->matches_in(p) : 0;
      work->push_back(std::move(w));
    }
    Work& w = (*work)[size_t(index)];
    w.rank = std::min(w.rank, rank);
    w.queries.push_back(walk->query);
    w.coarse_keys.push_back(route[rank].key);
  });
}

// The bytes a walk of `route` would read, or nullopt when the route runs out first.
std::optional<double> WalkedBytes(const IvfSegmentRef& seg, const Probe* route, size_t len,
                                  RouteWalk walk) {
  double bytes = 0;
  WalkRouteWith(seg, route, len, &walk,
                [&](uint32_t p, uint32_t) { bytes += double(seg.partition_bytes[p]); });
  if (!walk.done) return std::nullopt;
  return bytes;
}

struct ReadyItem {
  size_t work = 0;
  PartitionData data;
  std::shared_ptr<SharedScan> entry;  // segment work: the shared scan it answered
  RawRows raw;                        // listed work: its rows' vectors
};

// A registered segment work item, as the job tracks it (all answers go through the ticket).
enum class TicketState : uint8_t { kNone, kRegistered, kLeaving, kAnswered };

// Per-task results, merged into the job under its lock when the task ends.
struct TaskResults {
  explicit TaskResults(size_t nq) : topk(nq), stats(nq) {}
  std::vector<std::optional<CandidateTopK>> topk;
  std::vector<QueryStats> stats;
};

// The request's refine factor; 4-bit estimates only shortlist, so without one a search over a
// fast-scan segment re-ranks kDefaultFastScanRefine.
uint32_t RefineFactor(const IvfSearchRequest& req) {
  if (req.refine_factor > 0) return req.refine_factor;
  for (const IvfSegmentRef& s : req.segments) {
    if (IsFastScan(*s.model)) return kDefaultFastScanRefine;
  }
  return 0;
}

class IvfSearchJob : public ScanMember, public std::enable_shared_from_this<IvfSearchJob> {
 public:
  IvfSearchJob(Executor& executor, IvfSearchRequest request, SearchDone done)
      : executor_(executor),
        req_(std::move(request)),
        done_(std::move(done)),
        share_(req_.share ? req_.share : std::make_shared<ScanShare>(ScanShare::Options{false})),
        query_seq_(g_next_query_seq.fetch_add(1)),
        max_tasks_(size_t(std::max(1, executor.concurrency()))),
        flat_model_{req_.dim, req_.metric, VectorEncoding::kFlat, {}, {}, {}, 0, 0, {}},
        stats_(req_.num_queries) {
    const uint32_t refine_factor = RefineFactor(req_);
    for (const IvfSegmentRef& s : req_.segments) {
      if (s.model->encoding != VectorEncoding::kFlat) refine_ = refine_factor > 0;
    }
    candidates_per_query_ = req_.k * (refine_ ? refine_factor : 1);
    for (size_t q = 0; q < req_.num_queries; ++q) candidates_.emplace_back(candidates_per_query_);
  }

  const std::shared_ptr<const CancelToken>& cancel_token() const { return req_.cancel; }

  void Submit(void (IvfSearchJob::*method)()) {
    executor_.Submit([self = shared_from_this(), method] { ((*self).*method)(); });
  }

  // The first task: coarse search, the partition-major plan, prepared queries.
  void Route() {
    const Clock::time_point start = Clock::now();
    absl::Status s = CheckCancel();
    if (s.ok()) s = Catching("planning the search", [this] { Plan(); });
    if (!s.ok()) {
      absl::MutexLock lock(&mu_);
      FailLocked(std::move(s));
    }
    const uint64_t route_us = MicrosSince(start);
    {
      absl::MutexLock lock(&mu_);
      for (QueryStats& s : stats_) s.cpu_us += route_us / std::max<size_t>(1, req_.num_queries);
      routed_ = true;
    }
    Progress();
  }

  // The request's token was cancelled (called on the cancelling thread): fail the job, take its
  // queued reads out of the I/O queue, and finish once what is in flight has answered.
  void Abort() {
    absl::Status status = CheckCancel();
    if (status.ok()) status = absl::CancelledError("request cancelled");
    {
      absl::MutexLock lock(&mu_);
      FailLocked(std::move(status));
    }
    Progress();
  }

 private:
  absl::Status CheckCancel() const { return req_.cancel ? req_.cancel->Check() : absl::OkStatus(); }

  void Plan() {
    const size_t nq = req_.num_queries, dim = req_.dim;
    std::vector<Work> work;
    std::vector<Probe> probes;
    // Filtered: per query, partitions passed over, and whether its probes went past its nprobe
    // nearest (passing over one, or taking more to reach the budget).
    std::vector<uint32_t> skipped(nq, 0);
    std::vector<bool> widened(nq, false);
    uint64_t rows_matched = req_.memtable_selection ? req_.memtable_selection->matches() : 0;
    std::vector<bool> walked(nq, false);  // filtered: a segment's partitions were walked
    std::vector<uint32_t> all(nq);
    for (uint32_t q = 0; q < nq; ++q) all[q] = q;
    std::vector<Work> listed_work;
    std::vector<Work> in_place;  // listed work over vectors kept with the selection: no read
    if (nq > 0) {
      flat_prepared_ = std::make_unique<PreparedQueries>(flat_model_, req_.queries.data(), nq);
    }
    for (uint32_t s = 0; s < req_.segments.size(); ++s) {
      const IvfSegmentRef& seg = req_.segments[s];
      const IvfModel& model = *seg.model;
      const size_t nlist = model.nlist();
      // Exact (FLAT) segments are scanned whole: their partitions are slices, not clusters.
      const size_t nprobe =
          model.exact ? nlist : std::min<size_t>(std::max<uint32_t>(1, req_.nprobe), nlist);
      // Filtered: a query takes partitions nearest first, passing over those without a selected
      // row, until it has nprobe and `enough` selected rows (WalkRoute). Routed first to a few
      // times nprobe; a query that runs out is routed again over every partition.
      const RowSelection* select = seg.selection.get();
      if (select) rows_matched += select->matches();
      const uint64_t per_k = uint64_t(req_.options.filter_rows_per_k) * req_.k;
      const uint64_t budget = select ? std::min<uint64_t>(select->matches(), per_k) : 0;
      std::vector<Work>* listed_dest =
          select && select->listed_vectors() ? &in_place : &listed_work;
      // A selection whose matches cluster in a few partitions is routed over those alone.
      const std::vector<uint32_t> matching = ConcentratedMatches(seg);
      // exact_matches for some queries (of a clustered selection, whose walks near the query
      // may be short): those whose own walk would read more than the matches.
      double exact_bytes = -1;
      if (select && select->listed() &&
          PrefersExactMatches(seg, select->matches(), nprobe, per_k, uint32_t(dim))) {
        if (matching.empty() ||
            !ExactMayLoseToAWalk(seg, select->matches(), nprobe, uint32_t(dim))) {
          AddListedWork(s, *select, all, listed_dest);
          prepared_.push_back(nullptr);  // nothing of this segment is scanned from its codes
          continue;
        }
        exact_bytes = double(select->matches()) * double(dim) * sizeof(float);
      }
      std::vector<uint32_t> exact_queries;
      std::vector<int64_t> work_of(nlist, -1);
      const uint64_t seg_rows = SegmentRows(seg);
      const double density =
          select && seg_rows > 0 ? double(select->matches()) / double(seg_rows) : 1.0;
      const size_t depth = !matching.empty() ? matching.size()
                           : select          ? FilteredRouteDepth(seg, nprobe, budget, density)
                                             : nprobe;
      // Batched coarse search (one sgemm per block of queries); may throw bad_alloc, which
      // Route's Catching turns into the request's status.
      if (!matching.empty()) {
        RouteOverMatching(model, matching, req_.queries.data(), nq, &probes);
      } else {
        RouteQueries(model, req_.queries.data(), nq, depth, &probes);
      }
      for (uint32_t q = 0; q < nq; ++q) {
        const Probe* route = probes.data() + size_t(q) * depth;
        // Never more selected rows than the unfiltered search would scan (a broad filter keeps
        // the nprobe nearest partitions), never fewer than k when the segment has them (I-10).
        const uint64_t enough =
            select ? std::max(std::min<uint64_t>(req_.k, select->matches()),
                              std::min(budget, UnfilteredRows(seg, route, depth, nprobe)))
                   : 0;
        RouteWalk walk{s, q, nprobe, enough, density};
        if (exact_bytes >= 0) {
          const std::optional<double> walk_bytes = WalkedBytes(seg, route, depth, walk);
          // Half the bytes at most: a walk also pays its route and a task per partition, where
          // the matches are scored in a few runs (in place, once kept with the selection).
          if (!walk_bytes || 2 * *walk_bytes > exact_bytes) {
            exact_queries.push_back(q);
            continue;
          }
        }
        if (select) walked[q] = true;
        WalkRoute(seg, route, depth, &walk, &work_of, &work);
        if (!matching.empty()) {
          walk.skipped += uint32_t(nlist - matching.size());  // none of those was routed to
          walk.widened = true;
        } else if (select && !walk.done && depth < nlist) {
          std::vector<Probe> every;
          RouteQueries(model, req_.queries.data() + size_t(q) * dim, 1, nlist, &every);
          walk.taken = 0;
          walk.matched = 0;
          walk.skipped = 0;
          WalkRoute(seg, every.data(), nlist, &walk, &work_of, &work);
        }
        skipped[q] += walk.skipped;
        widened[q] = widened[q] || walk.widened;
      }
      if (!exact_queries.empty()) AddListedWork(s, *select, exact_queries, listed_dest);
      prepared_.push_back(std::make_unique<PreparedQueries>(model, req_.queries.data(), nq));
    }
    for (Work& w : work) {
      w.scan = ScanQueries(*prepared_[w.segment], w.queries.data(), w.coarse_keys.data(),
                           w.queries.size());
    }
    // Nearest first across segments: every query's first partitions are read before anyone's
    // far ones.
    std::stable_sort(work.begin(), work.end(),
                     [](const Work& a, const Work& b) { return a.rank < b.rank; });
    // The exact_matches rows first: each is as near as a query's nearest partition.
    work.insert(work.begin(), std::make_move_iterator(listed_work.begin()),
                std::make_move_iterator(listed_work.end()));

    // Memtable ranges and listed rows scored in place go first in work_ and are ready at once;
    // segment work follows, fetched in plan order from next_fetch_.
    std::vector<Work> memtable_work = std::move(in_place);
    if (req_.memtable.dim == dim && nq > 0) {
      const RowSelection* select = req_.memtable_selection.get();
      for (uint32_t b = 0; b < req_.memtable.blocks.size(); ++b) {
        const size_t rows = req_.memtable.blocks[b].rows;
        if (select && (b >= select->partitions() || select->matches_in(b) == 0)) continue;
        for (size_t r = 0; r < rows; r += kMemtableRowsPerWork) {
          Work w;
          w.partition = b;
          w.row_begin = r;
          w.rows = std::min(kMemtableRowsPerWork, rows - r);
          if (select) w.matching = select->CountRange(b, r, r + w.rows);
          w.bytes = w.rows * dim * sizeof(float);
          w.queries = all;
          w.scan = ScanQueries(*flat_prepared_, all.data(), nullptr, nq);
          memtable_work.push_back(std::move(w));
        }
      }
    }
    absl::MutexLock lock(&mu_);
    if (req_.filtered) {
      for (uint32_t q = 0; q < nq; ++q) {
        stats_[q].plan = !walked[q]   ? FilterPlan::kExactMatches
                         : widened[q] ? FilterPlan::kSelectiveIvf
                                      : FilterPlan::kIvfBitmap;
        stats_[q].rows_matched = rows_matched;
        stats_[q].partitions_skipped = skipped[q];
      }
    }
    work_ = std::move(memtable_work);
    for (size_t i = 0; i < work_.size(); ++i) ready_.push_back({i, {}, nullptr});
    next_fetch_ = work_.size();
    for (Work& w : work) work_.push_back(std::move(w));
    tickets_.assign(work_.size(), TicketState::kNone);
    entries_.resize(work_.size());
  }

  // The exact_matches plan for segment `s`: its selected rows, in runs of kListedRowsPerWork,
  // each read (full precision) and scored exactly for `queries`.
  void AddListedWork(uint32_t s, const RowSelection& select, const std::vector<uint32_t>& queries,
                     std::vector<Work>* out) {
    const uint64_t row_bytes = uint64_t(req_.dim) * sizeof(float);
    for (size_t r = 0; r < select.matches(); r += kListedRowsPerWork) {
      Work w;
      w.segment = s;
      w.listed = true;
      w.row_begin = r;
      w.rows = std::min<size_t>(kListedRowsPerWork, select.matches() - r);
      w.matching = w.rows;
      // Scored in place: nothing is read or pinned (the selection holds the vectors).
      w.bytes = select.listed_vectors() ? 0 : w.rows * row_bytes;
      w.queries = queries;
      if (select.listed_vectors() && flat_prepared_) {
        w.scan = ScanQueries(*flat_prepared_, queries.data(), nullptr, queries.size());
      }
      out->push_back(std::move(w));
    }
  }

  // Decides what to do next under the lock and does it without the lock: fetch more partitions,
  // submit scan tasks, release dropped pins, or move on to refine / finish.
  void Progress() {
    std::vector<size_t> fetches;
    std::vector<ReadyItem> dropped;
    std::vector<std::pair<size_t, std::shared_ptr<SharedScan>>> leaving;
    size_t tasks = 0;
    bool stage_done = false;
    bool cancel_sources = false;
    bool io_wait = false;
    {
      absl::MutexLock lock(&mu_);
      if (!routed_) return;  // nothing fetched yet; Route calls Progress when it is done
      cancel_sources = std::exchange(cancel_sources_, false);
      if (failed_) DropOnFailureLocked(&dropped, &leaving);
      while (next_fetch_ < work_.size()) {
        const Work& w = work_[next_fetch_];
        if (pinned_bytes_ > 0 && pinned_bytes_ + w.bytes > req_.options.max_pinned_bytes) break;
        pinned_bytes_ += w.bytes;
        ++fetches_in_flight_;
        fetches.push_back(next_fetch_++);
      }
      if (fetches.empty()) {
        while (!ready_.empty() && active_tasks_ + tasks < max_tasks_ && tasks < ready_.size()) {
          ++tasks;
        }
        active_tasks_ += tasks;
      } else {
        ++issuing_;
      }
      if (fetches.empty() && !finishing_ && active_tasks_ == 0 && fetches_in_flight_ == 0 &&
          issuing_ == 0 && scanned_ == work_.size()) {
        finishing_ = true;
        stage_done = true;
      }
      io_wait = fetches.empty() && active_tasks_ == 0 && ready_.empty() && fetches_in_flight_ > 0;
    }
    if (io_wait) ReportIoWait();
    const bool left = LeaveShared(leaving);
    // Data this job accepted but will not scan goes to the entry's other tickets, if any.
    for (ReadyItem& item : dropped) {
      if (item.entry) item.entry->Deliver(std::move(item.data));
    }
    dropped.clear();  // unpin outside the lock
    CancelSourcesIf(cancel_sources);
    if (left) return Progress();  // the work items that left are done: maybe the stage too
    if (!fetches.empty()) {
      // One batch per source: the request's reads reach the disk together, not one by one.
      {
        SourceBatch batch(req_.segments);
        for (size_t w : fetches) StartFetch(w);
      }
      {
        absl::MutexLock lock(&mu_);
        --issuing_;
        // Failed while these were being issued: they may have queued after the sources were
        // told, so tell them again (idempotent).
        if (failed_) cancel_sources_ = true;
      }
      return Progress();  // now schedule tasks for whatever the fetches answered inline
    }
    for (size_t i = 0; i < tasks; ++i) Submit(&IvfSearchJob::Scan);
    if (stage_done) Submit(&IvfSearchJob::FinishScan);
  }

  // REQUIRES: mu_ held, failed_. Drops the ready items (into `dropped`, passed on outside the
  // lock), counts the never-fetched work scanned, and marks the registered tickets leaving
  // (into `leaving`: withdrawn from their shared scans outside the lock).
  void DropOnFailureLocked(std::vector<ReadyItem>* dropped,
                           std::vector<std::pair<size_t, std::shared_ptr<SharedScan>>>* leaving)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    scanned_ += ready_.size();
    for (ReadyItem& item : ready_) {
      if (work_[item.work].segment != kExact) pinned_bytes_ -= work_[item.work].bytes;
      dropped->push_back(std::move(item));
    }
    ready_.clear();
    scanned_ += work_.size() - next_fetch_;  // never fetched
    next_fetch_ = work_.size();
    for (size_t w = 0; w < work_.size(); ++w) {
      if (tickets_[w] != TicketState::kRegistered) continue;
      tickets_[w] = TicketState::kLeaving;
      leaving->push_back({w, entries_[w]});
    }
  }

  // Registers work item `index` on the shared scan of its partition: leads it (issues the
  // fetch) or joins one already in flight. Either way the answer comes exactly once, through
  // AcceptShared, FailShared or OnHandBack.
  void StartFetch(size_t index) {
    const Work& w = work_[index];
    const IvfSegmentRef& seg = req_.segments[w.segment];
    if (w.listed) return StartListedRead(index);
    Ticket ticket;
    ticket.job = shared_from_this();
    ticket.work = index;
    ticket.segment = w.segment;
    ticket.queries = w.scan.data();
    ticket.num_queries = w.scan.size();
    ticket.limit = candidates_per_query_;
    ticket.dead = seg.dead.get();
    ticket.select = seg.selection.get();
    ticket.query_seq = query_seq_;
    ticket.fetch.partition = w.partition;
    ticket.fetch.query_seq = query_seq_;
    ticket.fetch.rank = w.rank;
    ticket.fetch.cancel = req_.cancel;
    const PartitionFetch fetch = ticket.fetch;
    ScanShare::Registration r =
        share_->Register({seg.source.get(), w.partition}, seg.source, std::move(ticket));
    {
      absl::MutexLock lock(&mu_);
      if (tickets_[index] == TicketState::kNone) {  // not answered inline by a racing scan
        tickets_[index] = TicketState::kRegistered;
        entries_[index] = r.entry;
      }
    }
    if (r.lead) r.entry->Issue(fetch);
  }

  // Reads the vectors of listed work item `index` (not shared: its rows are this request's).
  void StartListedRead(size_t index) {
    const Work& w = work_[index];
    const std::vector<RowRef>& all = req_.segments[w.segment].selection->listed_rows();
    std::vector<RowRef> rows(all.begin() + ptrdiff_t(w.row_begin),
                             all.begin() + ptrdiff_t(w.row_begin + w.rows));
    PartitionFetch priority;
    priority.query_seq = query_seq_;
    priority.cancel = req_.cancel;
    req_.segments[w.segment].source->ReadRaw(
        std::move(rows), priority,
        [self = shared_from_this(), index](absl::StatusOr<RawRows> raw) mutable {
          self->OnListedRead(index, std::move(raw));
        });
  }

  // Runs on the I/O thread (or inline): bookkeeping only, as OnFetched.
  void OnListedRead(size_t index, absl::StatusOr<RawRows> raw) {
    bool progress;
    {
      absl::MutexLock lock(&mu_);
      --fetches_in_flight_;
      if (!raw.ok() || failed_) {
        pinned_bytes_ -= work_[index].bytes;
        ++scanned_;
        if (!raw.ok()) FailLocked(raw.status());
      } else {
        ready_.push_back({index, {}, nullptr, *std::move(raw)});
      }
      progress = issuing_ == 0;
    }
    if (progress) Progress();
  }

  // ScanMember: the shared scan's data for work item `work` (I/O thread or inline).
  bool AcceptShared(size_t work, const std::shared_ptr<SharedScan>& entry,
                    PartitionData& data) override {
    return OnFetched(work, &data, entry, absl::OkStatus());
  }

  // ScanMember: the shared scan's fetch failed.
  void FailShared(size_t work, absl::Status status) override {
    OnFetched(work, nullptr, nullptr, std::move(status));
  }

  // Runs on the I/O thread (or inline): bookkeeping only, never a scan (DESIGN.md §3 step 4).
  // Takes `data` (returns true) unless the job has failed or `status` is an error.
  bool OnFetched(size_t index, PartitionData* data, const std::shared_ptr<SharedScan>& entry,
                 absl::Status status) {
    bool progress = true, accepted = false;
    {
      absl::MutexLock lock(&mu_);
      TicketAnsweredLocked(index);
      if (!status.ok() || failed_) {
        pinned_bytes_ -= work_[index].bytes;
        ++scanned_;
        if (!status.ok()) FailLocked(std::move(status));
      } else {
        ready_.push_back({index, std::move(*data), entry});
        accepted = true;
      }
      progress = issuing_ == 0;  // the issuing thread calls Progress() when it is done
    }
    if (progress) Progress();
    return accepted;
  }

  // ScanMember: another request's scan task scored work item `work`'s queries: merge, as if
  // scanned here.
  void OnHandBack(size_t work, HandBack results) override {
    const CandidateTopK* topk = results.topk.data();
    // Seeded bug (core/base/seeded_bug.h, ASan): the candidates are freed before the merge.
    if (SHOAL_SEEDED_BUG("ivf_search.hand_back_after_free"))
      std::vector<CandidateTopK>().swap(results.topk);
    bool progress;
    {
      absl::MutexLock lock(&mu_);
      TicketAnsweredLocked(work);
      const Work& w = work_[work];
      for (size_t j = 0; j < w.queries.size(); ++j) {
        candidates_[w.queries[j]].Merge(topk[j]);
        AddStats(results.stats, &stats_[w.queries[j]]);
      }
      pinned_bytes_ -= w.bytes;
      ++scanned_;
      progress = issuing_ == 0;
    }
    if (progress) Progress();
  }

  // REQUIRES: mu_ held. Work item `work`'s ticket got its one answer (or left).
  void TicketAnsweredLocked(size_t work) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    --fetches_in_flight_;
    tickets_[work] = TicketState::kAnswered;
    entries_[work].reset();
  }

  // The job failed: withdraw its tickets from shared scans still waiting for data, so that it
  // answers without waiting for other requests' reads. A ticket a scan already took answers
  // later (bounded CPU work). REQUIRES: mu_ not held.
  bool LeaveShared(const std::vector<std::pair<size_t, std::shared_ptr<SharedScan>>>& leaving) {
    bool left = false;
    for (const auto& [work, entry] : leaving) {
      if (!share_->Leave(entry, this, work)) continue;
      absl::MutexLock lock(&mu_);
      TicketAnsweredLocked(work);
      pinned_bytes_ -= work_[work].bytes;
      ++scanned_;
      left = true;
    }
    return left;
  }

  // REQUIRES: mu_ held. The first failure wins; it also asks for the sources to drop this
  // query's queued reads (done outside the lock by Progress or Refine).
  void FailLocked(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!failed_) {
      error_ = std::move(status);
      cancel_sources_ = true;
    }
    failed_ = true;
  }

  // Takes this query's queued reads out of every segment's I/O queue; they answer CANCELLED
  // (on this thread) and the job drops them. REQUIRES: mu_ not held.
  void CancelSourcesIf(bool cancel) {
    if (!cancel) return;
    for (const IvfSegmentRef& s : req_.segments) s.source->CancelQuery(query_seq_);
  }

  // A scan task: takes a share of what is ready (1..K partitions, <= B bytes), scans, merges.
  void Scan() {
    std::vector<ReadyItem> batch;
    {
      absl::MutexLock lock(&mu_);
      const size_t share = std::clamp<size_t>((ready_.size() + max_tasks_ - 1) / max_tasks_, 1,
                                              req_.options.batch_partitions);
      uint64_t bytes = 0;
      while (
          !ready_.empty() && batch.size() < share &&
          (batch.empty() || bytes + work_[ready_.front().work].bytes <= req_.options.batch_bytes)) {
        bytes += work_[ready_.front().work].bytes;
        batch.push_back(std::move(ready_.front()));
        ready_.pop_front();
      }
    }
    TaskResults results(req_.num_queries);
    absl::Status status;
    for (ReadyItem& item : batch) {
      if (status.ok()) status = CheckCancel();
      if (!status.ok()) {
        // Not scanned here: the shared scan's other tickets still want the data.
        if (item.entry) item.entry->Deliver(std::move(item.data));
        item.data.pin.reset();
        continue;
      }
      // From here no ticket joins: score every registered query, hand each its share.
      std::vector<Ticket> tickets;
      if (item.entry) tickets = share_->Close(item.entry);
      std::vector<HandBack> handbacks;
      status = ScanItemCatching(item, tickets, &results, &handbacks);
      item.data.pin.reset();  // unpin as soon as the partition is scanned
      item.raw = {};
      for (size_t t = 0; t < tickets.size(); ++t) {
        ScanMember* joiner = tickets[t].job.get();
        if (status.ok()) {
          joiner->OnHandBack(tickets[t].work, std::move(handbacks[t]));
        } else {
          joiner->FailShared(tickets[t].work, status);
        }
      }
    }
    {
      absl::MutexLock lock(&mu_);
      for (size_t q = 0; q < req_.num_queries; ++q) {
        if (results.topk[q]) candidates_[q].Merge(*results.topk[q]);
        AddStats(results.stats[q], &stats_[q]);
      }
      for (const ReadyItem& item : batch) {
        if (work_[item.work].segment != kExact) pinned_bytes_ -= work_[item.work].bytes;
      }
      scanned_ += batch.size();
      --active_tasks_;
      if (!status.ok()) FailLocked(std::move(status));
    }
    Progress();
  }

  absl::Status ScanItemCatching(const ReadyItem& item, const std::vector<Ticket>& tickets,
                                TaskResults* results, std::vector<HandBack>* handbacks) {
    return Catching("scanning a partition", [&] { ScanItem(item, tickets, results, handbacks); });
  }

  // The queries to score on work item `w`, own first then each ticket's (`joined`, left empty
  // when there is no ticket: w.scan is the list), and where each one's rows go: this job's
  // per-task top-k, or the ticket's hand-back (built with the joiner's limit, filter and
  // segment index).
  void BuildSinks(const Work& w, const IdFilter* filter, const RowSelection* select,
                  const std::vector<Ticket>& tickets, TaskResults* results,
                  std::vector<HandBack>* handbacks, std::vector<Sink>* sinks,
                  std::vector<ScanQuery>* joined) {
    for (uint32_t q : w.queries) {
      if (!results->topk[q]) results->topk[q].emplace(candidates_per_query_);
      sinks->push_back({&*results->topk[q], filter, w.segment, select});
    }
    handbacks->resize(tickets.size());
    for (size_t t = 0; t < tickets.size(); ++t) {
      const Ticket& ticket = tickets[t];
      HandBack& hb = (*handbacks)[t];
      hb.topk.reserve(ticket.num_queries);
      for (size_t j = 0; j < ticket.num_queries; ++j) {
        hb.topk.emplace_back(ticket.limit);
        sinks->push_back({&hb.topk.back(), ticket.dead, ticket.segment, ticket.select});
      }
      if (joined->empty()) *joined = w.scan;
      joined->insert(joined->end(), ticket.queries, ticket.queries + ticket.num_queries);
    }
  }

  // Scores one ready item for this job's queries and for every closed ticket's (other
  // requests' queries on the same partition), in one batched ScorePartition per chunk.
  void ScanItem(const ReadyItem& item, const std::vector<Ticket>& tickets, TaskResults* results,
                std::vector<HandBack>* handbacks) {
    const Clock::time_point start = Clock::now();
    const Work& w = work_[item.work];
    if (w.listed) return ScoreListed(w, item.raw, results, start);
    const bool memtable = w.segment == kExact;
    const uint8_t* codes;
    const uint64_t* ids;
    const std::atomic<uint8_t>* dead_flags = nullptr;
    const IdFilter* filter = nullptr;
    const RowSelection* select = nullptr;
    size_t n;
    const PreparedQueries* prepared;
    bool exact = true;
    if (memtable) {
      const VectorBlock& block = req_.memtable.blocks[w.partition];
      codes = reinterpret_cast<const uint8_t*>(block.vectors + w.row_begin * req_.dim);
      ids = block.ids + w.row_begin;
      if (block.dead) dead_flags = block.dead + w.row_begin;
      select = req_.memtable_selection.get();
      n = w.rows;
      prepared = flat_prepared_.get();
    } else {
      codes = item.data.codes;
      ids = item.data.ids;
      n = item.data.count;
      filter = req_.segments[w.segment].dead.get();
      select = req_.segments[w.segment].selection.get();
      prepared = prepared_[w.segment].get();
      exact = prepared->model().encoding == VectorEncoding::kFlat;
    }
    std::vector<Sink> sinks;
    std::vector<ScanQuery> joined;
    BuildSinks(w, filter, select, tickets, results, handbacks, &sinks, &joined);
    const ScanQuery* queries = tickets.empty() ? w.scan.data() : joined.data();
    const size_t nq = sinks.size();
    ScoreIntoSinks(queries, sinks.data(), nq, codes, ids, dead_flags, n, exact, w.partition,
                   uint32_t(memtable ? w.row_begin : 0));
    const uint64_t cpu_us = MicrosSince(start) / std::max<size_t>(1, nq);
    for (uint32_t q : w.queries) {
      QueryStats& s = results->stats[q];
      s.vectors_scanned += n;
      s.matching_rows_scanned += w.matching;
      s.cpu_us += cpu_us;
      if (memtable) continue;
      ++s.partitions_probed;
      s.partitions_cached += item.data.cached ? 1 : 0;
      s.bytes_read += item.data.bytes_read;
      s.queue_us += item.data.queue_us;
      s.io_us += item.data.io_us;
    }
    for (size_t t = 0; t < handbacks->size(); ++t) {  // a joiner read nothing itself
      HandBack& hb = (*handbacks)[t];
      hb.stats.vectors_scanned = n;
      hb.stats.matching_rows_scanned =
          tickets[t].select ? tickets[t].select->matches_in(w.partition) : 0;
      hb.stats.cpu_us = cpu_us;
      hb.stats.partitions_probed = 1;
      hb.stats.partitions_cached = item.data.cached ? 1 : 0;
    }
    if (!memtable) share_->ObserveScan(nq);
  }

  // Scores listed work `w` (rows read in `raw`) exactly for every query: exact candidates, never
  // re-ranked.
  void ScoreListed(const Work& w, const RawRows& raw, TaskResults* results,
                   Clock::time_point start) {
    const RowSelection& select = *req_.segments[w.segment].selection;
    const uint64_t* ids = select.listed_ids().data() + w.row_begin;
    if (select.listed_vectors()) return ScoreListedInPlace(w, select, ids, results, start);
    const bool similarity = IsSimilarity(req_.metric);
    for (uint32_t q : w.queries) {
      if (!results->topk[q]) results->topk[q].emplace(candidates_per_query_);
      CandidateTopK& topk = *results->topk[q];
      const float* query = req_.queries.data() + size_t(q) * req_.dim;
      for (size_t i = 0; i < w.rows; ++i) {
        const float* v = raw.rows[i].get();
        const float d = similarity ? -InnerProduct(query, v, req_.dim) : L2Sqr(query, v, req_.dim);
        topk.Push({d, ids[i], kExact, 0, 0});
      }
    }
    const uint64_t cpu_us = MicrosSince(start) / std::max<size_t>(1, w.queries.size());
    for (uint32_t q : w.queries) {
      QueryStats& s = results->stats[q];
      s.vectors_scanned += w.rows;
      s.matching_rows_scanned += w.rows;
      s.bytes_read += raw.bytes_read;
      s.cpu_us += cpu_us;
    }
  }

  // Scores listed work `w` on the vectors kept with its selection, for every query at once as
  // a FLAT partition of those rows (through sgemm with the exact recheck when enough queries
  // share it, so the keys are the single-query kernel's): exact candidates, never re-ranked.
  void ScoreListedInPlace(const Work& w, const RowSelection& select, const uint64_t* ids,
                          TaskResults* results, Clock::time_point start) {
    std::vector<Sink> sinks;
    sinks.reserve(w.queries.size());
    for (uint32_t q : w.queries) {
      if (!results->topk[q]) results->topk[q].emplace(candidates_per_query_);
      sinks.push_back({&*results->topk[q], nullptr, kExact, nullptr});
    }
    const float* rows = select.listed_vectors() + w.row_begin * req_.dim;
    ScoreIntoSinks(w.scan.data(), sinks.data(), sinks.size(),
                   reinterpret_cast<const uint8_t*>(rows), ids, nullptr, w.rows, /*exact=*/true,
                   /*partition=*/0, /*row_begin=*/0);
    const uint64_t cpu_us = MicrosSince(start) / std::max<size_t>(1, w.queries.size());
    for (uint32_t q : w.queries) {
      QueryStats& s = results->stats[q];
      s.vectors_scanned += w.rows;
      s.matching_rows_scanned += w.rows;
      s.cpu_us += cpu_us;
    }
  }

  // Every partition is scanned (or the request failed): refine or answer.
  void FinishScan() {
    std::vector<std::vector<Candidate>> per_query(req_.num_queries);
    bool failed;
    {
      absl::MutexLock lock(&mu_);
      failed = failed_;
      for (size_t q = 0; q < req_.num_queries; ++q) per_query[q] = candidates_[q].Take();
    }
    if (failed || !refine_) {
      finals_ = std::move(per_query);
      return Answer();
    }
    StartRefine(std::move(per_query));
  }

  // Groups the approximate candidates by segment and reads their raw vectors.
  void StartRefine(std::vector<std::vector<Candidate>> per_query) {
    struct Pending {
      std::vector<RowRef> rows;
      std::vector<std::pair<uint32_t, Candidate>> owners;  // (query, candidate)
    };
    std::vector<Pending> by_segment(req_.segments.size());
    {
      absl::MutexLock lock(&mu_);  // uncontended: no refine read is in flight yet
      refined_.assign(req_.num_queries, TopK(req_.k));
    }
    exact_.assign(req_.num_queries, {});
    for (uint32_t q = 0; q < req_.num_queries; ++q) {
      for (const Candidate& c : per_query[q]) {
        if (c.segment == kExact) {
          exact_[q].push_back(c);
          continue;
        }
        by_segment[c.segment].rows.push_back({c.partition, c.row});
        by_segment[c.segment].owners.push_back({q, c});
      }
    }
    std::vector<uint32_t> reads;
    for (uint32_t s = 0; s < by_segment.size(); ++s) {
      if (!by_segment[s].rows.empty()) reads.push_back(s);
    }
    {
      absl::MutexLock lock(&mu_);
      refine_reads_ = reads.size();
    }
    if (reads.empty()) return RefineDone();
    auto answered = std::make_shared<std::atomic<size_t>>(0);
    for (uint32_t s : reads) {
      PartitionFetch priority;
      priority.query_seq = query_seq_;
      priority.cancel = req_.cancel;
      auto owners = std::make_shared<std::vector<std::pair<uint32_t, Candidate>>>(
          std::move(by_segment[s].owners));
      req_.segments[s].source->ReadRaw(
          std::move(by_segment[s].rows), priority,
          [self = shared_from_this(), owners, answered](absl::StatusOr<RawRows> raw) mutable {
            answered->fetch_add(1, std::memory_order_relaxed);
            // On the I/O thread: hand the distance work to the arena.
            self->executor_.Submit([self, owners, raw = std::move(raw)]() mutable {
              self->Refine(*owners, std::move(raw));
            });
          });
    }
    bool cancel;
    {
      absl::MutexLock lock(&mu_);
      cancel = failed_;  // cancelled while issuing: the reads above may be queued
    }
    CancelSourcesIf(cancel);
    // Reads not answered from memory while they were issued wait for the disk.
    if (answered->load(std::memory_order_relaxed) < reads.size()) ReportIoWait();
  }

  void ReportIoWait() {
    if (!req_.on_io_wait || io_wait_reported_.exchange(true)) return;
    req_.on_io_wait();
  }

  void Refine(const std::vector<std::pair<uint32_t, Candidate>>& owners,
              absl::StatusOr<RawRows> raw) {
    const Clock::time_point start = Clock::now();
    absl::Status status = raw.status();
    if (status.ok()) status = CheckCancel();
    std::vector<std::pair<uint32_t, Candidate>> exact;
    if (status.ok()) {
      status = Catching("re-ranking", [&] {
        exact.reserve(owners.size());
        for (size_t i = 0; i < owners.size(); ++i) {
          const float* v = raw->rows[i].get();
          const float* query = req_.queries.data() + size_t(owners[i].first) * req_.dim;
          const float d = IsSimilarity(req_.metric) ? -InnerProduct(query, v, req_.dim)
                                                    : L2Sqr(query, v, req_.dim);
          Candidate c = owners[i].second;
          c.key = d;
          exact.push_back({owners[i].first, c});
        }
      });
      if (!status.ok()) exact.clear();
    }
    const uint64_t cpu_us = MicrosSince(start);
    bool last, cancel_sources;
    {
      absl::MutexLock lock(&mu_);
      if (!status.ok()) FailLocked(std::move(status));
      cancel_sources = std::exchange(cancel_sources_, false);
      for (const auto& [q, c] : exact) {
        refined_[q].Push(c.key, c.id);
        stats_[q].bytes_read += req_.dim * sizeof(float);
        stats_[q].cpu_us += cpu_us / std::max<size_t>(1, exact.size());
      }
      last = --refine_reads_ == 0;
    }
    CancelSourcesIf(cancel_sources);
    if (last) RefineDone();
  }

  void RefineDone() {
    finals_.assign(req_.num_queries, {});
    {
      absl::MutexLock lock(&mu_);  // uncontended: the last refine read has answered
      for (size_t q = 0; q < req_.num_queries; ++q) {
        for (const Candidate& c : exact_[q]) refined_[q].Push(c.key, c.id);
        for (const ScoredId& s : refined_[q].Take()) finals_[q].push_back({s.key, s.id});
      }
    }
    Answer();
  }

  void Answer() {
    absl::Status error;
    std::vector<QueryStats> stats;
    {
      absl::MutexLock lock(&mu_);
      if (failed_) error = error_;
      stats = std::move(stats_);
    }
    if (!error.ok()) return std::move(done_)(std::move(error));
    std::vector<QueryResult> results;
    error = Catching("assembling the results", [&] {
      results.resize(req_.num_queries);
      for (size_t q = 0; q < req_.num_queries; ++q) {
        const size_t n = std::min(req_.k, finals_[q].size());
        for (size_t i = 0; i < n; ++i) {
          results[q].neighbors.push_back(
              {finals_[q][i].id, FromKey(req_.metric, finals_[q][i].key)});
        }
        results[q].stats = stats[q];
      }
    });
    if (!error.ok()) return std::move(done_)(std::move(error));
    std::move(done_)(std::move(results));
  }

  Executor& executor_;
  const IvfSearchRequest req_;
  SearchDone done_;
  const std::shared_ptr<ScanShare> share_;  // the request's, or a private unshared one
  const uint64_t query_seq_;
  const size_t max_tasks_;
  // FLAT at the request's dim and metric: how the memtable's rows and listed vectors kept with
  // a selection (exact_matches in place) are scored.
  const IvfModel flat_model_;
  bool refine_ = false;
  size_t candidates_per_query_ = 0;
  std::vector<std::unique_ptr<PreparedQueries>> prepared_;  // per segment; set by Route
  std::unique_ptr<PreparedQueries> flat_prepared_;          // the queries under flat_model_
  std::vector<Work> work_;                                  // immutable once routed_
  std::atomic<bool> io_wait_reported_{false};

  absl::Mutex mu_;
  bool routed_ ABSL_GUARDED_BY(mu_) = false;
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  // failed, sources not yet told
  bool cancel_sources_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  size_t next_fetch_ ABSL_GUARDED_BY(mu_) = 0;
  size_t fetches_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  // threads inside StartFetch loops
  size_t issuing_ ABSL_GUARDED_BY(mu_) = 0;
  size_t active_tasks_ ABSL_GUARDED_BY(mu_) = 0;
  // work items finished or dropped
  size_t scanned_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t pinned_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<ReadyItem> ready_ ABSL_GUARDED_BY(mu_);
  // Per work item: its ticket's state and, while registered, its shared scan.
  std::vector<TicketState> tickets_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<SharedScan>> entries_ ABSL_GUARDED_BY(mu_);
  std::vector<CandidateTopK> candidates_ ABSL_GUARDED_BY(mu_);
  std::vector<QueryStats> stats_ ABSL_GUARDED_BY(mu_);
  size_t refine_reads_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<TopK> refined_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<Candidate>> exact_;
  std::vector<std::vector<Candidate>> finals_;
};

}  // namespace

void IvfSearch(Executor& executor, IvfSearchRequest request, SearchDone done) {
  auto job = std::make_shared<IvfSearchJob>(executor, std::move(request), std::move(done));
  if (const std::shared_ptr<const CancelToken>& token = job->cancel_token()) {
    // A query waiting for reads runs no task that could notice the cancellation: be told.
    token->OnCancel([weak = std::weak_ptr<IvfSearchJob>(job)] {
      if (auto j = weak.lock()) j->Abort();
    });
  }
  job->Submit(&IvfSearchJob::Route);
}

}  // namespace shoal::core
