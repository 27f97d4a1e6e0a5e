#include "core/index/flat_search.h"

#include <algorithm>
#include <atomic>
#include <chrono>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/index/distance.h"
#include "core/index/topk.h"

namespace shoal::core {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kQueriesPerGroup = 32;
constexpr size_t kTileRows = 64;           // base rows reused across a query group
constexpr size_t kMinRowsPerTask = 16384;  // below this, splitting costs more than it saves
constexpr size_t kTilesPerCancelCheck = 16;

uint64_t MicrosSince(Clock::time_point start, Clock::time_point end) {
  return uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(end - start).count());
}

// Shared by the tasks of one FlatSearch call.
class FlatSearchJob {
 public:
  FlatSearchJob(Executor& executor, FlatSearchRequest request, SearchDone done)
      : req_(std::move(request)), done_(std::move(done)), submitted_(Clock::now()) {
    const size_t rows = req_.view.rows();
    // At least one task, so even an empty batch is answered from a worker.
    num_groups_ = std::max<size_t>(1, (req_.num_queries + kQueriesPerGroup - 1) / kQueriesPerGroup);
    const size_t max_parts = size_t(std::max(1, executor.concurrency())) * 2;
    num_parts_ = std::clamp<size_t>(rows / kMinRowsPerTask, 1, max_parts);
    rows_per_part_ = (rows + num_parts_ - 1) / num_parts_;
    partial_.assign(num_parts_ * req_.num_queries, TopK(0));
    stats_.assign(num_parts_ * req_.num_queries, QueryStats{});
    remaining_.store(num_groups_ * num_parts_, std::memory_order_relaxed);
  }

  size_t num_tasks() const { return num_groups_ * num_parts_; }

  // Runs task `index` (group-major); the last one to finish completes the job.
  void RunTask(size_t index) {
    const size_t group = index / num_parts_;
    const size_t part = index % num_parts_;
    if (!failed_.load(std::memory_order_relaxed)) Scan(group, part);
    if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) Complete();
  }

 private:
  void Scan(size_t group, size_t part) {
    const Clock::time_point start = Clock::now();
    const size_t q_begin = group * kQueriesPerGroup;
    const size_t q_end = std::min(req_.num_queries, q_begin + kQueriesPerGroup);
    const size_t dim = req_.view.dim;
    std::vector<TopK> topk(q_end - q_begin, TopK(req_.k));
    std::vector<float> dist(kTileRows);

    size_t row_begin = part * rows_per_part_;
    size_t row_end = row_begin + rows_per_part_;
    size_t scanned = 0, tiles = 0;
    size_t block_start = 0;  // global index of the current block's first row
    for (const VectorBlock& block : req_.view.blocks) {
      const size_t lo = std::max(row_begin, block_start);
      const size_t hi = std::min(row_end, block_start + block.rows);
      for (size_t r = lo; r < hi; r += kTileRows) {
        if (++tiles % kTilesPerCancelCheck == 0 && !CheckCancel()) return;
        const size_t local = r - block_start;
        const size_t n = std::min(kTileRows, hi - r);
        const float* base = block.vectors + local * dim;
        for (size_t q = q_begin; q < q_end; ++q) {
          const float* query = req_.queries.data() + q * dim;
          if (req_.metric == Metric::kL2) {
            L2SqrMany(query, base, n, dim, dist.data());
          } else {
            InnerProductMany(query, base, n, dim, dist.data());
          }
          TopK& best = topk[q - q_begin];
          for (size_t i = 0; i < n; ++i) {
            if (block.dead && block.dead[local + i].load(std::memory_order_acquire)) continue;
            const float key = ToKey(req_.metric, dist[i]);
            if (key <= best.threshold()) best.Push(key, block.ids[local + i]);
          }
        }
        scanned += n;
      }
      block_start += block.rows;
    }
    if (!CheckCancel()) return;

    const Clock::time_point end = Clock::now();
    const uint64_t cpu_us = MicrosSince(start, end) / std::max<size_t>(1, q_end - q_begin);
    for (size_t q = q_begin; q < q_end; ++q) {
      partial_[part * req_.num_queries + q] = std::move(topk[q - q_begin]);
      QueryStats& s = stats_[part * req_.num_queries + q];
      s.vectors_scanned = scanned;
      s.cpu_us = cpu_us;
      s.queue_us = MicrosSince(submitted_, start);
    }
  }

  bool CheckCancel() {
    if (!req_.cancel) return true;
    absl::Status status = req_.cancel->Check();
    if (status.ok()) return true;
    absl::MutexLock lock(&error_mu_);
    if (!failed_.exchange(true)) error_ = std::move(status);
    return false;
  }

  void Complete() {
    if (failed_.load(std::memory_order_acquire)) {
      absl::Status error;
      {
        absl::MutexLock lock(&error_mu_);
        error = error_;
      }
      std::move(done_)(error);
      return;
    }
    std::vector<QueryResult> results(req_.num_queries);
    for (size_t q = 0; q < req_.num_queries; ++q) {
      TopK merged(req_.k);
      QueryStats& stats = results[q].stats;
      for (size_t part = 0; part < num_parts_; ++part) {
        merged.Merge(partial_[part * req_.num_queries + q]);
        const QueryStats& s = stats_[part * req_.num_queries + q];
        stats.vectors_scanned += s.vectors_scanned;
        stats.cpu_us += s.cpu_us;
        stats.queue_us = std::max(stats.queue_us, s.queue_us);
      }
      for (const ScoredId& item : merged.Take()) {
        results[q].neighbors.push_back({item.id, FromKey(req_.metric, item.key)});
      }
    }
    std::move(done_)(std::move(results));
  }

  FlatSearchRequest req_;
  SearchDone done_;
  const Clock::time_point submitted_;
  size_t num_groups_ = 0, num_parts_ = 0, rows_per_part_ = 0;
  std::vector<TopK> partial_;      // [part][query]; each written by exactly one task
  std::vector<QueryStats> stats_;  // [part][query]
  std::atomic<size_t> remaining_{0};
  std::atomic<bool> failed_{false};
  absl::Mutex error_mu_;
  absl::Status error_ ABSL_GUARDED_BY(error_mu_);
};

}  // namespace

void FlatSearch(Executor& executor, FlatSearchRequest request, SearchDone done) {
  auto job = std::make_shared<FlatSearchJob>(executor, std::move(request), std::move(done));
  const size_t tasks = job->num_tasks();
  for (size_t i = 0; i < tasks; ++i) executor.Submit([job, i] { job->RunTask(i); });
}

}  // namespace shoal::core
