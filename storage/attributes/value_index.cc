#include "storage/attributes/value_index.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "roaring/containers/containers.h"

namespace shoal::storage {

template <typename Key>
bool ValueIndex<Key>::OverBound() const {
  return rows_of_.size() > std::max(kDistinctFloor, entries_ / kRowsPerValue);
}

template <typename Key>
void ValueIndex<Key>::Add(Key value, uint32_t row) {
  ++entries_;
  if (!enabled_) return;
  rows_of_[value].add(row);
  if (OverBound()) {
    enabled_ = false;
    rows_of_.clear();
  }
}

template <typename Key>
void ValueIndex<Key>::Seal(const std::vector<Key>& values, const std::vector<uint32_t>& rows) {
  if (wanted_ && !enabled_) {
    // Count the distinct values, stopping as soon as they are too many.
    const uint64_t bound = std::max(kDistinctFloor, uint64_t(values.size()) / kRowsPerValue);
    absl::flat_hash_set<Key> distinct;
    for (const Key& v : values) {
      if (distinct.insert(v).second && distinct.size() > bound) return;
    }
    enabled_ = true;
    entries_ = values.size();  // within the bound, counted over every value
    for (size_t i = 0; i < values.size(); ++i) {
      rows_of_[values[i]].add(rows.empty() ? uint32_t(i) : rows[i]);
    }
  }
  for (auto& [value, bitmap] : rows_of_) {
    bitmap.runOptimize();
    bitmap.shrinkToFit();
  }
}

template <typename Key>
const Roaring* ValueIndex<Key>::Find(Key value) const {
  auto it = rows_of_.find(value);
  return it == rows_of_.end() ? nullptr : &it->second;
}

template <typename Key>
bool ValueIndex<Key>::Collect(Key lo, Key hi, size_t max_values,
                              std::vector<const Roaring*>* out) const {
  size_t found = 0;
  for (auto it = rows_of_.lower_bound(lo); it != rows_of_.end() && !(hi < it->first); ++it) {
    if (++found > max_values) return false;
    out->push_back(&it->second);
  }
  return true;
}

template <typename Key>
uint64_t ValueIndex<Key>::memory_bytes() const {
  // A btree slot, the bitmap's header and its container table, then its containers.
  constexpr uint64_t kPerValue = sizeof(Key) + sizeof(Roaring) + 48;
  uint64_t bytes = 0;
  for (const auto& [value, bitmap] : rows_of_) {
    bytes += kPerValue + bitmap.getSizeInBytes();
  }
  return bytes;
}

uint64_t CountBelow(const Roaring& bitmap, uint64_t n) {
  if (n == 0) return 0;
  return n > UINT32_MAX ? bitmap.cardinality() : bitmap.rank(uint32_t(n - 1));
}

namespace {

// The rows of `bitmap` below n through the library's iterator: ~4-6 ns a row with Debian's
// build of CRoaring 0.2.66 (attribute-bench), so only for containers OrRows does not know.
void OrRowsIterated(const Roaring& bitmap, uint64_t n, uint64_t* words) {
  roaring_uint32_iterator_t it;
  roaring_init_iterator(&bitmap.roaring, &it);
  uint32_t batch[256];
  for (uint32_t got; (got = roaring_read_uint32_iterator(&it, batch, 256)) > 0;) {
    for (uint32_t i = 0; i < got; ++i) {
      const uint32_t r = batch[i];
      if (r >= n) return;  // rows appended after the reader's prefix
      words[r >> 6] |= uint64_t(1) << (r & 63);
    }
  }
}

}  // namespace

// Container by container, through the container layouts 0.2.66 installs as public headers
// (roaring/containers/): a bitset container is 1024 words ORed in, an array container its
// 16-bit lows, a run container its ranges — 0.3 to 1.5 ns a row.
void OrRows(const Roaring& bitmap, RowBits* out) {
  const roaring_array_t& ra = bitmap.roaring.high_low_container;
  uint64_t* words = out->words.data();
  const uint64_t n = out->rows;
  for (int32_t i = 0; i < ra.size; ++i) {
    const uint8_t type = ra.typecodes[i];
    if (type != BITSET_CONTAINER_TYPE_CODE && type != ARRAY_CONTAINER_TYPE_CODE &&
        type != RUN_CONTAINER_TYPE_CODE) {
      return OrRowsIterated(bitmap, n, words);  // shared (copy-on-write): never made here
    }
  }
  for (int32_t i = 0; i < ra.size; ++i) {
    const uint64_t base = uint64_t(ra.keys[i]) << 16;
    if (base >= n) return;
    const void* c = ra.containers[i];
    switch (ra.typecodes[i]) {
      case BITSET_CONTAINER_TYPE_CODE: {
        const uint64_t* bits = static_cast<const bitset_container_t*>(c)->array;
        const uint64_t end = std::min<uint64_t>(n, base + (uint64_t(1) << 16));
        uint64_t* o = words + (base >> 6);
        const uint64_t full = (end - base) >> 6;
        for (uint64_t w = 0; w < full; ++w) o[w] |= bits[w];
        if ((end - base) & 63) o[full] |= bits[full] & ((uint64_t(1) << ((end - base) & 63)) - 1);
        break;
      }
      case ARRAY_CONTAINER_TYPE_CODE: {
        const auto* a = static_cast<const array_container_t*>(c);
        for (int32_t j = 0; j < a->cardinality; ++j) {
          const uint64_t r = base + a->array[j];
          if (r >= n) return;
          words[r >> 6] |= uint64_t(1) << (r & 63);
        }
        break;
      }
      default: {  // runs
        const auto* runs = static_cast<const run_container_t*>(c);
        for (int32_t j = 0; j < runs->n_runs; ++j) {
          const uint64_t lo = base + runs->runs[j].value;
          const uint64_t hi = std::min<uint64_t>(n, lo + runs->runs[j].length + 1);
          for (uint64_t r = lo; r < hi; ++r) words[r >> 6] |= uint64_t(1) << (r & 63);
        }
        break;
      }
    }
  }
}

template class ValueIndex<int64_t>;
template class ValueIndex<uint32_t>;

}  // namespace shoal::storage
