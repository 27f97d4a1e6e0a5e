#include "storage/cache/selection_cache.h"

namespace shoal::storage {

std::shared_ptr<const core::RowSelection> SelectionCache::Lookup(uint64_t segment,
                                                                 std::string_view filter) {
  if (budget_ == 0) return nullptr;
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(Key{segment, std::string(filter)});
  if (it == entries_.end()) {
    ++stats_.misses;
    return nullptr;
  }
  ++stats_.hits;
  lru_.splice(lru_.begin(), lru_, it->second.age);
  return it->second.selection;
}

void SelectionCache::Insert(uint64_t segment, std::string_view filter,
                            std::shared_ptr<const core::RowSelection> selection) {
  if (!selection) return;
  const uint64_t bytes = selection->memory_bytes() + filter.size();
  if (bytes > budget_) return;
  Key key{segment, std::string(filter)};
  absl::MutexLock lock(&mu_);
  if (entries_.contains(key)) return;
  while (stats_.used_bytes + bytes > budget_ && !lru_.empty()) {
    auto victim = entries_.find(lru_.back());
    stats_.used_bytes -= victim->second.bytes;
    ++stats_.evictions;
    entries_.erase(victim);
    lru_.pop_back();
  }
  lru_.push_front(key);
  entries_.emplace(std::move(key), Entry{std::move(selection), bytes, lru_.begin()});
  stats_.used_bytes += bytes;
}

SelectionCacheStats SelectionCache::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace shoal::storage
