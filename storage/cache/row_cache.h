// RowCache: full-precision vectors of single rows, kept in memory under a byte budget
// (`cache.refine_bytes`) so that re-ranking an SQ8/PQ shortlist costs a hash lookup per
// candidate, not a read (one preadv2 per candidate before: ~10% of shoald's CPU). Rows are
// handed out shared, not copied: the engine computes its exact distances on the cache's own
// bytes, and a row evicted meanwhile lives on until its last holder drops it (refine's rows are
// priced with the request, I-9).
//
// Why rows and not whole raw partitions: a shortlist touches a few rows of each probed
// partition (k * refine over nprobe partitions: ~10 of ~250 on Fashion-MNIST), so caching a
// partition's raw block would read ~25x the bytes a cold query needs; a row cache reads only
// what the shortlist names and keeps what is asked again.
//
// Keys are (segment cache id, row number in the segment's raw file): a segment's rows never
// change, and a new segment gets a new id, so entries are never stale, only unused.
//
// Eviction: CLOCK per shard — a row read since the hand last passed it gets another round.
// Every inserted row is admitted; a row nobody asks for again leaves within one turn.
//
// Thread-safety: every method is thread-safe. kShards shards, each under its own mutex (a
// lookup holds it for one hash probe and a reference-count increment).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace shoal::storage {

struct RowCacheStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t evictions = 0;
  uint64_t used_bytes = 0;
};

class RowCache {
 public:
  // `budget_bytes` 0: nothing is cached (Lookup always misses, Insert does nothing).
  explicit RowCache(uint64_t budget_bytes);

  // Row `row` of segment `segment` when it is cached with `bytes` bytes; null (a miss)
  // otherwise.
  std::shared_ptr<const float> Lookup(uint64_t segment, uint64_t row, size_t bytes);
  // The same without counting a hit or a miss and without marking the row used (for copies
  // made from the cache, which are not reads of it).
  std::shared_ptr<const float> Peek(uint64_t segment, uint64_t row, size_t bytes);
  // Keeps `data` (`bytes` long, not copied), evicting other rows as needed. A row larger than a
  // shard's budget is not kept. Inserting a cached row again does nothing.
  void Insert(uint64_t segment, uint64_t row, std::shared_ptr<const float> data, size_t bytes);

  RowCacheStats stats() const;
  uint64_t budget() const { return budget_; }

 private:
  static constexpr size_t kShards = 16;
  struct Key {
    uint64_t segment = 0, row = 0;
    friend bool operator==(const Key& a, const Key& b) {
      return a.segment == b.segment && a.row == b.row;
    }
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) {
      return H::combine(std::move(h), k.segment, k.row);
    }
  };
  struct Slot {
    Key key;
    std::shared_ptr<const float> data;  // null: the slot is free
    uint32_t bytes = 0;
    bool referenced = false;
  };
  struct Shard {
    mutable absl::Mutex mu;
    absl::flat_hash_map<Key, uint32_t> index ABSL_GUARDED_BY(mu);  // key -> slot
    std::vector<Slot> slots ABSL_GUARDED_BY(mu);                   // the CLOCK ring
    std::vector<uint32_t> free_slots ABSL_GUARDED_BY(mu);
    size_t hand ABSL_GUARDED_BY(mu) = 0;
    uint64_t used_bytes ABSL_GUARDED_BY(mu) = 0;
    uint64_t hits ABSL_GUARDED_BY(mu) = 0;
    uint64_t misses ABSL_GUARDED_BY(mu) = 0;
    uint64_t evictions ABSL_GUARDED_BY(mu) = 0;
  };

  Shard& ShardOf(const Key& key);
  std::shared_ptr<const float> Find(uint64_t segment, uint64_t row, size_t bytes, bool count);
  // Evicts rows at the hand until `bytes` more fit in the shard's budget.
  void MakeRoomLocked(Shard& shard, uint64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);

  const uint64_t budget_;
  const uint64_t shard_budget_;
  std::array<Shard, kShards> shards_;
};

}  // namespace shoal::storage
