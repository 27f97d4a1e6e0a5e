// TopK: keeps the k smallest (key, id) items pushed into it. BasicTopK<Item> carries a payload
// (the IVF engine's refine candidates remember where their raw vector lives).
//
// Keys follow core/base/metric.h: smaller is nearer for every metric. Ties are broken by the
// smaller id so results are deterministic whatever order rows are scanned in.
//
// Thread-safety: none; one TopK per task, merged afterwards with Merge().
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace shoal::core {

struct ScoredId {
  float key;
  uint64_t id;
  friend bool operator<(const ScoredId& a, const ScoredId& b) {
    return a.key < b.key || (a.key == b.key && a.id < b.id);
  }
};

template <typename Item>
class BasicTopK {
 public:
  explicit BasicTopK(size_t k) : k_(k) { heap_.reserve(k); }

  size_t k() const { return k_; }
  size_t size() const { return heap_.size(); }

  // The key a new candidate must beat to enter, +inf while not full.
  float threshold() const {
    return heap_.size() < k_ ? std::numeric_limits<float>::infinity() : heap_.front().key;
  }

  void Push(float key, uint64_t id) { Push(Item{key, id}); }

  void Push(const Item& item) {
    if (k_ == 0) return;
    if (heap_.size() < k_) {
      heap_.push_back(item);
      std::push_heap(heap_.begin(), heap_.end());
    } else if (item < heap_.front()) {
      std::pop_heap(heap_.begin(), heap_.end());
      heap_.back() = item;
      std::push_heap(heap_.begin(), heap_.end());
    }
  }

  void Merge(const BasicTopK& other) {
    for (const Item& item : other.heap_) Push(item);
  }

  // The kept items, nearest first. Leaves this TopK empty.
  std::vector<Item> Take() {
    std::sort_heap(heap_.begin(), heap_.end());
    return std::move(heap_);
  }

 private:
  size_t k_;
  std::vector<Item> heap_;  // max-heap on (key, id)
};

using TopK = BasicTopK<ScoredId>;

}  // namespace shoal::core
