#include "storage/cache/row_cache.h"

#include "absl/hash/hash.h"

namespace shoal::storage {

RowCache::RowCache(uint64_t budget_bytes)
    : budget_(budget_bytes), shard_budget_(budget_bytes / kShards) {}

RowCache::Shard& RowCache::ShardOf(const Key& key) {
  // The map hashes again with its own seed; the shard takes high bits of this hash.
  return shards_[(absl::HashOf(key) >> 32) % kShards];
}

std::shared_ptr<const float> RowCache::Lookup(uint64_t segment, uint64_t row, size_t bytes) {
  return Find(segment, row, bytes, /*count=*/true);
}

std::shared_ptr<const float> RowCache::Peek(uint64_t segment, uint64_t row, size_t bytes) {
  return Find(segment, row, bytes, /*count=*/false);
}

std::shared_ptr<const float> RowCache::Find(uint64_t segment, uint64_t row, size_t bytes,
                                            bool count) {
  if (shard_budget_ == 0) return nullptr;
  const Key key{segment, row};
  Shard& shard = ShardOf(key);
  absl::MutexLock lock(&shard.mu);
  auto it = shard.index.find(key);
  if (it == shard.index.end() || shard.slots[it->second].bytes != bytes) {
    if (count) ++shard.misses;
    return nullptr;
  }
  Slot& slot = shard.slots[it->second];
  if (count) {
    slot.referenced = true;
    ++shard.hits;
  }
  return slot.data;
}

void RowCache::MakeRoomLocked(Shard& shard, uint64_t bytes) {
  // Two turns of the hand clear every reference bit and evict what is left; free slots are
  // skipped, so the loop is bounded by twice the ring.
  for (size_t steps = 0; shard.used_bytes + bytes > shard_budget_ && steps < 2 * shard.slots.size();
       ++steps) {
    Slot& slot = shard.slots[shard.hand];
    shard.hand = (shard.hand + 1) % shard.slots.size();
    if (!slot.data) continue;
    if (slot.referenced) {
      slot.referenced = false;
      continue;
    }
    shard.index.erase(slot.key);
    shard.used_bytes -= slot.bytes;
    slot.data.reset();
    shard.free_slots.push_back(uint32_t(&slot - shard.slots.data()));
    ++shard.evictions;
  }
}

void RowCache::Insert(uint64_t segment, uint64_t row, std::shared_ptr<const float> data,
                      size_t bytes) {
  if (!data || bytes == 0 || bytes > shard_budget_) return;
  const Key key{segment, row};
  Shard& shard = ShardOf(key);
  absl::MutexLock lock(&shard.mu);
  if (shard.index.contains(key)) return;
  MakeRoomLocked(shard, bytes);
  if (shard.used_bytes + bytes > shard_budget_) return;  // every row is referenced: skip
  uint32_t index;
  if (!shard.free_slots.empty()) {
    index = shard.free_slots.back();
    shard.free_slots.pop_back();
  } else {
    index = uint32_t(shard.slots.size());
    shard.slots.emplace_back();
  }
  Slot& slot = shard.slots[index];
  slot.key = key;
  slot.data = std::move(data);
  slot.bytes = uint32_t(bytes);
  slot.referenced = false;
  shard.index[key] = index;
  shard.used_bytes += bytes;
}

RowCacheStats RowCache::stats() const {
  RowCacheStats s;
  for (const Shard& shard : shards_) {
    absl::MutexLock lock(&shard.mu);
    s.hits += shard.hits;
    s.misses += shard.misses;
    s.evictions += shard.evictions;
    s.used_bytes += shard.used_bytes;
  }
  return s;
}

}  // namespace shoal::storage
