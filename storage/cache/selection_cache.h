// SelectionCache: what a filter selects in one segment (a core::RowSelection), kept under a
// byte budget (`cache.filter_bytes`) so that a filter a workload repeats — a tenant, a
// category, this month — is evaluated over a segment's attribute columns once, not on every
// search. Lucene's query cache does the same per index segment, for the same reason: at low
// selectivity the evaluation over every row costs more than scoring the few matches
// (storage/collection/segment.h, Select).
//
// Keys are (segment cache id, filter text as sent, deletes): a segment's rows and attributes
// never change and a new segment gets a new id, so an entry is never stale, only unused. An
// entry holds the filter's matches as evaluated (Deletes{}: none taken out), or the live
// matches under one set of deletes — the tombstones newer than the segment, named by their
// count and highest sequence (tombstones only grow, each new one with a higher sequence than
// any before, so a further delete names a new entry and the old one ages out). Two spellings
// of one filter are two entries.
//
// Eviction: least recently used first. A selection larger than the budget is not kept.
//
// Thread-safety: every method is thread-safe, under one mutex (a lookup or two per segment of
// a filtered search); entries are handed out shared and immutable.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "core/index/row_selection.h"

namespace shoal::storage {

struct SelectionCacheStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t evictions = 0;
  uint64_t used_bytes = 0;
};

// The deletes a cached selection has taken out (see above); {} = none.
struct SelectionDeletes {
  uint64_t count = 0, last_seq = 0;
};

class SelectionCache {
 public:
  using Deletes = SelectionDeletes;

  // `budget_bytes` 0: nothing is cached.
  explicit SelectionCache(uint64_t budget_bytes) : budget_(budget_bytes) {}

  // The selection cached for `filter` in segment `segment` under `deletes`; null (a miss)
  // otherwise.
  std::shared_ptr<const core::RowSelection> Lookup(uint64_t segment, std::string_view filter,
                                                   Deletes deletes = {});
  // Keeps `selection` (costing its memory_bytes()), evicting the least recently used entries
  // as needed. Inserting a cached key again does nothing.
  void Insert(uint64_t segment, std::string_view filter,
              std::shared_ptr<const core::RowSelection> selection, Deletes deletes = {});
  // Puts `selection` in place of what is cached for the key (or inserts it), as Insert; keeps
  // the old entry when the new one would not fit the budget.
  void Replace(uint64_t segment, std::string_view filter,
               std::shared_ptr<const core::RowSelection> selection, Deletes deletes = {});

  SelectionCacheStats stats() const;
  uint64_t budget() const { return budget_; }

 private:
  using Key = std::tuple<uint64_t, uint64_t, uint64_t, std::string>;  // segment, deletes, text
  struct Entry {
    std::shared_ptr<const core::RowSelection> selection;
    uint64_t bytes = 0;
    std::list<Key>::iterator age;  // in lru_
  };
  static Key MakeKey(uint64_t segment, std::string_view filter, Deletes deletes) {
    return Key{segment, deletes.count, deletes.last_seq, std::string(filter)};
  }

  // Insert (replace = false) or Replace (true).
  void Put(uint64_t segment, std::string_view filter,
           std::shared_ptr<const core::RowSelection> selection, Deletes deletes, bool replace);
  void EraseLocked(absl::flat_hash_map<Key, Entry>::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint64_t budget_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<Key, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::list<Key> lru_ ABSL_GUARDED_BY(mu_);  // most recently used first
  SelectionCacheStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shoal::storage
