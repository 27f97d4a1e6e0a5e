#include "storage/cache/selection_cache.h"

#include <utility>

namespace shoal::storage {

std::shared_ptr<const core::RowSelection> SelectionCache::Lookup(uint64_t segment,
                                                                 std::string_view filter,
                                                                 Deletes deletes) {
  if (budget_ == 0) return nullptr;
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(MakeKey(segment, filter, deletes));
  if (it == entries_.end()) {
    ++stats_.misses;
    return nullptr;
  }
  ++stats_.hits;
  lru_.splice(lru_.begin(), lru_, it->second.age);
  return it->second.selection;
}

void SelectionCache::Insert(uint64_t segment, std::string_view filter,
                            std::shared_ptr<const core::RowSelection> selection, Deletes deletes) {
  Put(segment, filter, std::move(selection), deletes, /*replace=*/false);
}

void SelectionCache::Replace(uint64_t segment, std::string_view filter,
                             std::shared_ptr<const core::RowSelection> selection, Deletes deletes) {
  Put(segment, filter, std::move(selection), deletes, /*replace=*/true);
}

void SelectionCache::Put(uint64_t segment, std::string_view filter,
                         std::shared_ptr<const core::RowSelection> selection, Deletes deletes,
                         bool replace) {
  if (!selection) return;
  const uint64_t bytes = selection->memory_bytes() + filter.size();
  if (bytes > budget_) return;  // a Replace keeps the old entry
  Key key = MakeKey(segment, filter, deletes);
  absl::MutexLock lock(&mu_);
  if (auto it = entries_.find(key); it != entries_.end()) {
    if (!replace) return;
    EraseLocked(it);
  }
  while (stats_.used_bytes + bytes > budget_ && !lru_.empty()) {
    EraseLocked(entries_.find(lru_.back()));
    ++stats_.evictions;
  }
  lru_.push_front(key);
  entries_.emplace(std::move(key), Entry{std::move(selection), bytes, lru_.begin()});
  stats_.used_bytes += bytes;
}

void SelectionCache::EraseLocked(absl::flat_hash_map<Key, Entry>::iterator it) {
  stats_.used_bytes -= it->second.bytes;
  lru_.erase(it->second.age);
  entries_.erase(it);
}

SelectionCacheStats SelectionCache::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace shoal::storage
