// Tombstones: for ids written (upserted again or deleted) since segments were cut, the
// sequence number of the latest write. A segment row is dead when its id's tombstone is newer
// than the segment (SegmentFilter), so deletes and re-upserts never rewrite a segment; merges
// drop dead rows and the tombstones they no longer need.
//
// Thread-safety: thread-safe; lookups take a shared lock for one hash probe (the query engine
// asks only for rows that would enter a top-k).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "core/index/ivf_search.h"
#include "storage/format/manifest_format.h"

namespace shoal::storage {

class Tombstones {
 public:
  void Set(uint64_t id, uint64_t seq) {
    absl::MutexLock lock(&mu_);
    uint64_t& s = seq_of_[id];
    s = std::max(s, seq);
  }
  // 0 if the id has no tombstone.
  uint64_t Get(uint64_t id) const {
    absl::ReaderMutexLock lock(&mu_);
    auto it = seq_of_.find(id);
    return it == seq_of_.end() ? 0 : it->second;
  }
  // Forgets tombstones at or below `seq` (no segment older than that is left).
  void DropUpTo(uint64_t seq) {
    absl::MutexLock lock(&mu_);
    absl::erase_if(seq_of_, [seq](const auto& kv) { return kv.second <= seq; });
  }
  std::vector<Tombstone> UpTo(uint64_t seq) const {
    absl::ReaderMutexLock lock(&mu_);
    std::vector<Tombstone> out;
    for (const auto& [id, s] : seq_of_) {
      if (s <= seq) out.push_back({id, s});
    }
    return out;
  }
  std::vector<Tombstone> Above(uint64_t seq) const {
    absl::ReaderMutexLock lock(&mu_);
    std::vector<Tombstone> out;
    for (const auto& [id, s] : seq_of_) {
      if (s > seq) out.push_back({id, s});
    }
    return out;
  }
  size_t size() const {
    absl::ReaderMutexLock lock(&mu_);
    return seq_of_.size();
  }

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, uint64_t> seq_of_ ABSL_GUARDED_BY(mu_);
};

// The dead rows of one segment: ids whose tombstone is newer than the segment.
class SegmentFilter final : public core::IdFilter {
 public:
  SegmentFilter(std::shared_ptr<const Tombstones> tombstones, uint64_t segment_seq)
      : tombstones_(std::move(tombstones)), segment_seq_(segment_seq) {}
  bool IsDead(uint64_t id) const override { return tombstones_->Get(id) > segment_seq_; }

 private:
  std::shared_ptr<const Tombstones> tombstones_;
  uint64_t segment_seq_;
};

}  // namespace shoal::storage
