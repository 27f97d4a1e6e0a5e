#include "storage/cache/partition_cache.h"

#include "absl/strings/str_cat.h"

namespace shoal::storage {
namespace {
constexpr size_t kMaxGhosts = 16384;
constexpr int kMaxFreq = 3;
}  // namespace

PartitionHandle& PartitionHandle::operator=(PartitionHandle&& other) noexcept {
  if (this != &other) {
    if (cache_) cache_->Unpin(key_);
    cache_ = other.cache_;
    key_ = other.key_;
    bytes_ = std::move(other.bytes_);
    hit_ = other.hit_;
    other.cache_ = nullptr;
  }
  return *this;
}

PartitionHandle::~PartitionHandle() {
  if (cache_) cache_->Unpin(key_);
}

PartitionCache::PartitionCache(uint64_t budget_bytes, uint64_t uncached_bytes, uint64_t row_bytes,
                               uint64_t selection_bytes)
    : budget_(budget_bytes),
      small_target_(budget_bytes / 10),
      uncached_(uncached_bytes > 0 ? uncached_bytes : budget_bytes),
      rows_(row_bytes),
      selections_(selection_bytes) {}

PartitionCache::~PartitionCache() = default;

PartitionHandle PartitionCache::PinLocked(Entry& e, bool hit) {
  if (e.pins++ == 0) stats_.pinned_bytes += e.bytes;
  PartitionHandle h;
  h.cache_ = this;
  h.key_ = e.key;
  h.bytes_ = e.data;
  h.hit_ = hit;
  return h;
}

std::optional<PartitionHandle> PartitionCache::TryGetHit(const PartitionKey& key) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.queue == Queue::kLoading) return std::nullopt;
  Entry& e = it->second;
  e.freq = std::min(e.freq + 1, kMaxFreq);
  ++stats_.hits;
  return PinLocked(e, /*hit=*/true);
}

void PartitionCache::Get(const PartitionKey& key, uint64_t bytes, Admission admission,
                         Loader loader, GetCallback callback) {
  mu_.Lock();
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    Entry& e = it->second;
    if (e.queue == Queue::kLoading) {
      e.waiters.push_back(std::move(callback));
      ++stats_.attached;
      mu_.Unlock();
      return;
    }
    e.freq = std::min(e.freq + 1, kMaxFreq);
    ++stats_.hits;
    PartitionHandle handle = PinLocked(e, /*hit=*/true);
    mu_.Unlock();
    std::move(callback)(std::move(handle));
    return;
  }
  if (!MakeRoomLocked(bytes, admission) && admission == Admission::kIfRoom) {
    ++stats_.rejected;
    absl::Status full = absl::ResourceExhaustedError(
        absl::StrCat("partition cache: ", bytes, " bytes do not fit in the budget of ", budget_,
                     " bytes (pinned: ", stats_.pinned_bytes, ")"));
    mu_.Unlock();
    std::move(callback)(std::move(full));
    return;
  }
  Entry& e = entries_[key];
  e.key = key;
  e.bytes = bytes;
  e.waiters.push_back(std::move(callback));
  stats_.used_bytes += bytes;
  loading_bytes_ += bytes;
  ++stats_.misses;
  mu_.Unlock();
  std::move(loader)([this, key](absl::StatusOr<PartitionBytes> r) { OnLoaded(key, std::move(r)); });
}

void PartitionCache::OnLoaded(const PartitionKey& key, absl::StatusOr<PartitionBytes> result) {
  std::vector<GetCallback> waiters;
  std::vector<PartitionHandle> handles;
  {
    absl::MutexLock lock(&mu_);
    Entry& e = entries_.at(key);
    waiters = std::move(e.waiters);
    loading_bytes_ -= e.bytes;
    if (!result.ok()) {
      stats_.used_bytes -= e.bytes;
      entries_.erase(key);
    } else {
      e.data = *std::move(result);
      if (ghost_.erase(key)) {
        e.queue = Queue::kMain;
        main_.push_back(key);
        e.pos = std::prev(main_.end());
      } else {
        e.queue = Queue::kSmall;
        small_.push_back(key);
        e.pos = std::prev(small_.end());
        small_bytes_ += e.bytes;
      }
      for (size_t i = 0; i < waiters.size(); ++i) handles.push_back(PinLocked(e, false));
    }
  }
  for (size_t i = 0; i < waiters.size(); ++i) {
    if (result.ok()) {
      std::move(waiters[i])(std::move(handles[i]));
    } else {
      std::move(waiters[i])(result.status());
    }
  }
}

void PartitionCache::Unpin(const PartitionKey& key) {
  absl::MutexLock lock(&mu_);
  Entry& e = entries_.at(key);
  if (--e.pins == 0) {
    stats_.pinned_bytes -= e.bytes;
    // Over budget only through kAlways admissions: shrink back as soon as pins allow.
    if (stats_.used_bytes > budget_) MakeRoomLocked(0, Admission::kAlways);
  }
}

void PartitionCache::RememberGhostLocked(const PartitionKey& key) {
  if (ghost_.insert(key).second) ghost_order_.push_back(key);
  while (ghost_order_.size() > kMaxGhosts) {
    ghost_.erase(ghost_order_.front());
    ghost_order_.pop_front();
  }
}

bool PartitionCache::EvictOneLocked(std::list<PartitionKey>& queue, bool small) {
  // Each entry may be looked at a few times (pinned ones rotate; main decrements freq).
  for (size_t n = queue.size() * (kMaxFreq + 1); n > 0 && !queue.empty(); --n) {
    const PartitionKey key = queue.front();
    queue.pop_front();
    Entry& e = entries_.at(key);
    if (e.pins > 0) {
      queue.push_back(key);
      e.pos = std::prev(queue.end());
      continue;
    }
    if (small && e.freq > 0) {  // read again while in small: promote
      small_bytes_ -= e.bytes;
      e.freq = 0;
      e.queue = Queue::kMain;
      main_.push_back(key);
      e.pos = std::prev(main_.end());
      continue;
    }
    if (!small && e.freq > 0) {  // recently used: another round
      --e.freq;
      queue.push_back(key);
      e.pos = std::prev(queue.end());
      continue;
    }
    if (small) {
      small_bytes_ -= e.bytes;
      RememberGhostLocked(key);
    }
    stats_.used_bytes -= e.bytes;
    ++stats_.evictions;
    entries_.erase(key);
    return true;
  }
  return false;
}

bool PartitionCache::MakeRoomLocked(uint64_t need, Admission admission) {
  if (admission == Admission::kIfRoom && stats_.pinned_bytes + loading_bytes_ + need > budget_) {
    return false;
  }
  while (stats_.used_bytes + need > budget_) {
    const bool prefer_small = small_bytes_ > small_target_ || main_.empty();
    if (prefer_small ? EvictOneLocked(small_, true) : EvictOneLocked(main_, false)) continue;
    if (prefer_small ? EvictOneLocked(main_, false) : EvictOneLocked(small_, true)) continue;
    return false;  // everything left is pinned or loading
  }
  return true;
}

CacheStats PartitionCache::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace shoal::storage
