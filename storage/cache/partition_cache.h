// PartitionCache: partitions read from segment files, kept in memory under a byte budget
// (`cache.bytes`) and pinned while queries scan them.
//
// Get() answers a pinned PartitionHandle: at once on a hit; otherwise it starts the caller's
// loader (an IoScheduler read) and answers when the bytes arrive. Several queries asking for a
// partition that is being loaded attach to that one load (single flight).
//
// Budget (I-4): bytes of cached + loading partitions never exceed the budget, except for loads
// admitted with Admission::kAlways — what the oldest query needs next, so the budget can never
// deadlock the engine. A kIfRoom request that does not fit even after evicting everything
// unpinned gets RESOURCE_EXHAUSTED at once; the caller retries when handles are released.
// Pinned entries are never evicted.
//
// Eviction: S3-FIFO (Yang et al., SOSP'23). New entries enter a small FIFO (10% of the
// budget); an entry read again while there moves to the main FIFO, otherwise it leaves and its
// key is remembered in a ghost list, so it enters main directly if it comes back. Main gives
// entries with recent hits another round. Why: IVF probing has heavy one-hit traffic (cold
// partitions of rare queries); S3-FIFO keeps those from flushing the hot set (scan resistance)
// at the cost of a counter per entry, with no list reordering on hits.
//
// Past the cache: a partition refused for want of room is read for one query alone (see
// storage/collection/segment.h); the bytes such reads hold across the process are bounded by
// the cache's UncachedBudget (`cache.uncached_bytes`), which lives here because every segment
// already shares this one cache.
//
// Refine's rows: full-precision vectors of single rows are kept apart, in the RowCache
// (`cache.refine_bytes`, storage/cache/row_cache.h), under a budget of their own; it lives here
// for the same reason. So are filters' selections per segment, in the SelectionCache
// (`cache.filter_bytes`, storage/cache/selection_cache.h).
//
// Thread-safety: every method is thread-safe; callbacks run without the cache's lock held.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "storage/cache/row_cache.h"
#include "storage/cache/selection_cache.h"
#include "storage/cache/uncached_budget.h"

namespace shoal::storage {

struct PartitionKey {
  uint64_t segment = 0;
  uint32_t partition = 0;
  friend bool operator==(const PartitionKey& a, const PartitionKey& b) {
    return a.segment == b.segment && a.partition == b.partition;
  }
};

struct PartitionKeyHash {
  size_t operator()(const PartitionKey& k) const {
    return std::hash<uint64_t>()(k.segment * 0x9E3779B97F4A7C15ull ^ k.partition);
  }
};

// Bytes of one partition and whatever keeps them alive (e.g. the I/O buffer).
struct PartitionBytes {
  std::shared_ptr<const void> owner;
  const char* data = nullptr;
  size_t size = 0;
};

class PartitionCache;

// A pinned partition. Movable; unpins when destroyed.
class PartitionHandle {
 public:
  PartitionHandle() = default;
  PartitionHandle(PartitionHandle&& other) noexcept { *this = std::move(other); }
  PartitionHandle& operator=(PartitionHandle&& other) noexcept;
  ~PartitionHandle();

  const char* data() const { return bytes_.data; }
  size_t size() const { return bytes_.size; }
  bool hit() const { return hit_; }  // answered from the cache, no read
  explicit operator bool() const { return cache_ != nullptr; }

 private:
  friend class PartitionCache;
  PartitionCache* cache_ = nullptr;
  PartitionKey key_;
  PartitionBytes bytes_;
  bool hit_ = false;
};

struct CacheStats {
  uint64_t hits = 0;
  uint64_t misses = 0;    // loads started
  uint64_t attached = 0;  // requests that joined a load in flight
  uint64_t evictions = 0;
  uint64_t rejected = 0;    // kIfRoom requests that did not fit
  uint64_t used_bytes = 0;  // cached + loading
  uint64_t pinned_bytes = 0;
};

class PartitionCache {
 public:
  enum class Admission { kIfRoom, kAlways };
  using LoadDone = absl::AnyInvocable<void(absl::StatusOr<PartitionBytes>) &&>;
  using Loader = absl::AnyInvocable<void(LoadDone) &&>;
  using GetCallback = absl::AnyInvocable<void(absl::StatusOr<PartitionHandle>) &&>;

  // `uncached_bytes`: the UncachedBudget's bytes; 0 = budget_bytes (cache.uncached_bytes = 0).
  // `row_bytes`: the RowCache's budget (0: refine rows are not cached); `selection_bytes`: the
  // SelectionCache's (0: filters are evaluated on every search).
  explicit PartitionCache(uint64_t budget_bytes, uint64_t uncached_bytes = 0,
                          uint64_t row_bytes = 0, uint64_t selection_bytes = 0);
  ~PartitionCache();

  // REQUIRES: `bytes` is the partition's size (known from the segment's metadata).
  void Get(const PartitionKey& key, uint64_t bytes, Admission admission, Loader loader,
           GetCallback callback);

  // A hit only: pins and returns the partition when it is cached and loaded, counted and aged
  // exactly as Get() counts a hit; nullopt otherwise, with no side effect (not even a miss).
  // Lets a caller skip building a loader and callbacks for the common case.
  std::optional<PartitionHandle> TryGetHit(const PartitionKey& key);

  CacheStats stats() const;
  uint64_t budget() const { return budget_; }

  // Bytes of partitions read past the cache (refused with RESOURCE_EXHAUSTED by Get).
  UncachedBudget& uncached() { return uncached_; }
  // Full-precision rows for refine.
  RowCache& rows() { return rows_; }
  // What filters select in each segment.
  SelectionCache& selections() { return selections_; }

 private:
  friend class PartitionHandle;
  enum class Queue { kLoading, kSmall, kMain };
  struct Entry {
    PartitionKey key;
    uint64_t bytes = 0;
    PartitionBytes data;
    Queue queue = Queue::kLoading;
    int freq = 0;
    int pins = 0;
    std::list<PartitionKey>::iterator pos;
    std::vector<GetCallback> waiters;  // while loading
  };

  void Unpin(const PartitionKey& key);
  void OnLoaded(const PartitionKey& key, absl::StatusOr<PartitionBytes> result);
  // Evicts unpinned entries until `need` more bytes fit; false if they cannot. With
  // kIfRoom nothing is evicted for a request that would not fit even with every unpinned
  // entry gone (a refusal must not flush the cache); kAlways evicts what it can.
  bool MakeRoomLocked(uint64_t need, Admission admission) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool EvictOneLocked(std::list<PartitionKey>& queue, bool small)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RememberGhostLocked(const PartitionKey& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  PartitionHandle PinLocked(Entry& e, bool hit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint64_t budget_;
  const uint64_t small_target_;
  mutable absl::Mutex mu_;
  std::unordered_map<PartitionKey, Entry, PartitionKeyHash> entries_ ABSL_GUARDED_BY(mu_);
  std::list<PartitionKey> small_ ABSL_GUARDED_BY(mu_);
  std::list<PartitionKey> main_ ABSL_GUARDED_BY(mu_);
  std::unordered_set<PartitionKey, PartitionKeyHash> ghost_ ABSL_GUARDED_BY(mu_);
  std::deque<PartitionKey> ghost_order_ ABSL_GUARDED_BY(mu_);
  uint64_t small_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t loading_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // entries being loaded: not evictable
  CacheStats stats_ ABSL_GUARDED_BY(mu_);
  UncachedBudget uncached_;
  RowCache rows_;
  SelectionCache selections_;
};

}  // namespace shoal::storage
