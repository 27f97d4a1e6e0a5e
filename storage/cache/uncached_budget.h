// UncachedBudget: a process-wide bound on partition bytes that queries hold outside the
// partition cache (`cache.uncached_bytes`, DESIGN I-4).
//
// When the cache has no room next to what is pinned, a partition is read for one query only
// ("uncached") and lives as long as that query's pin. Each request's `max_pinned_bytes` bounds
// its own such bytes, but not their sum: with hundreds of searches admitted, a full cache made
// the process hold hundreds of MiB past cache.bytes. Every uncached read therefore acquires its
// bytes here before it is issued and returns them when its pin is dropped.
//
// Order: waiting reads are granted oldest query first (smaller `query`, then arrival), strictly:
// a younger query never overtakes a waiting older one, so the oldest query cannot starve.
// Progress (I-3, I-4; mirrors IoPolicy's forced read): when the oldest waiting query holds
// nothing here, its next read is granted even past the budget, one such read at a time in the
// process — so a budget smaller than one partition, or one filled by younger queries, never
// stalls everyone. Holders release by scanning (CPU work that waits for no read), so the budget
// cannot deadlock.
//
// Answers: Acquire() answers exactly once, with a Grant or CANCELLED; possibly inline, before it
// returns, or later on the thread that drops another grant or calls CancelQuery(). Callers must
// therefore drop grants (and the pins that carry them) with no lock held that an answer needs.
//
// Thread-safety: every method is thread-safe; answers run without the budget's lock held.
// REQUIRES: the budget outlives its grants.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace shoal::storage {

struct UncachedBudgetStats {
  uint64_t budget = 0;
  uint64_t held_bytes = 0;  // granted and not yet released
  uint64_t waiting = 0;     // reads waiting for bytes now
  uint64_t granted = 0;     // grants so far
  uint64_t waited = 0;      // of them, grants that had to wait
  uint64_t forced = 0;      // of them, grants past the budget (the oldest query's)
};

class UncachedBudget {
 public:
  // Holds its bytes until the last copy is dropped.
  using Grant = std::shared_ptr<const void>;
  using GrantDone = absl::AnyInvocable<void(absl::StatusOr<Grant>) &&>;

  explicit UncachedBudget(uint64_t budget_bytes) : budget_(budget_bytes) {}
  // Answers reads still waiting with CANCELLED.
  ~UncachedBudget();

  UncachedBudget(const UncachedBudget&) = delete;
  UncachedBudget& operator=(const UncachedBudget&) = delete;

  // `bytes` for a read of `query` (smaller = older, as IoScheduler's ReadRequest::query).
  void Acquire(uint64_t query, uint64_t bytes, GrantDone done);
  // Every read of `query` still waiting answers CANCELLED, on this thread.
  void CancelQuery(uint64_t query);

  UncachedBudgetStats stats() const;
  uint64_t budget() const { return budget_; }

 private:
  class Token;
  struct Waiter {
    uint64_t bytes = 0;
    GrantDone done;
  };
  using Answers = std::vector<std::pair<GrantDone, Grant>>;

  void Release(uint64_t query, uint64_t bytes, bool forced);
  // Grants waiters from the head of the queue while they may start; their answers go to `out`.
  void GrantLocked(Answers* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void Run(Answers answers);

  const uint64_t budget_;
  mutable absl::Mutex mu_;
  // (query, arrival) -> waiter: the head is the oldest query's earliest read.
  std::map<std::pair<uint64_t, uint64_t>, Waiter> waiting_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, uint64_t> held_by_query_ ABSL_GUARDED_BY(mu_);
  bool forced_out_ ABSL_GUARDED_BY(mu_) = false;  // the one over-budget grant is alive
  uint64_t next_arrival_ ABSL_GUARDED_BY(mu_) = 0;
  UncachedBudgetStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shoal::storage
