#include "storage/attributes/value_index.h"

#include <algorithm>
#include <exception>
#include <iterator>
#include <string_view>

#include "absl/container/flat_hash_set.h"
#include "roaring/containers/containers.h"
#include "roaring/roaring_version.h"

// OrRows reads bitmaps through the container layouts the 0.2 releases install (Debian 12 ships
// 0.2.66); another release must be checked against them first.
static_assert(ROARING_VERSION_MAJOR == 0 && ROARING_VERSION_MINOR == 2,
              "OrRows knows CRoaring 0.2's container layouts");

namespace shoal::storage {

template <typename Key>
bool ValueIndex<Key>::OverBound() const {
  return rows_of_.size() > std::max(kDistinctFloor, entries_ / kRowsPerValue) ||
         containers_ > std::max(kDistinctFloor, entries_ / kRowsPerContainer);
}

template <typename Key>
void ValueIndex<Key>::Drop() {
  enabled_ = false;
  rows_of_.clear();
  containers_ = 0;
}

template <typename Key>
uint64_t ValueIndex<Key>::CountContainers() const {
  uint64_t n = 0;
  for (const auto& [value, bitmap] : rows_of_)
    n += uint64_t(bitmap.roaring.high_low_container.size);
  return n;
}

template <typename Key>
void ValueIndex<Key>::Add(Key value, uint32_t row) {
  ++entries_;
  if (!enabled_) return;
  try {
    Roaring& rows = rows_of_[value];
    const int32_t before = rows.roaring.high_low_container.size;
    rows.add(row);
    containers_ += uint64_t(rows.roaring.high_low_container.size - before);
  } catch (const std::exception&) {  // no memory for a node: the index is only a shortcut
    Drop();
    return;
  }
  if (OverBound()) Drop();
}

template <typename Key>
void ValueIndex<Key>::Seal(const std::vector<Key>& values, const std::vector<uint32_t>& rows) {
  try {
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
      containers_ = CountContainers();
      if (OverBound()) return Drop();  // the values repeat, but scattered one row a container
    }
    for (auto& [value, bitmap] : rows_of_) {
      bitmap.runOptimize();
      bitmap.shrinkToFit();
    }
  } catch (const std::exception&) {  // no memory: scan the column instead
    Drop();
  }
}

template <typename Key>
void ValueIndex<Key>::Want(bool wanted, const std::vector<Key>& values,
                           const std::vector<uint32_t>& rows) {
  if (!wanted) {
    Drop();
    wanted_ = false;
    return;
  }
  if (wanted_) return;
  wanted_ = true;
  Seal(values, rows);
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
  // A btree slot, the bitmap's header and its container table, then its containers: their
  // payload (as serialised) and, per container, its heap object and slots in the table.
  constexpr uint64_t kPerValue = sizeof(Key) + sizeof(Roaring) + 48;
  constexpr uint64_t kPerContainer = 48;
  uint64_t bytes = containers_ * kPerContainer;
  for (const auto& [value, bitmap] : rows_of_) bytes += kPerValue + bitmap.getSizeInBytes();
  return bytes;
}

template <typename Key>
void ValueIndex<Key>::EncodeTo(std::string* out) const {
  out->push_back(char(uint8_t(enabled_) | uint8_t(wanted_) << 1));
  PutVarint64(out, entries_);
  PutVarint64(out, rows_of_.size());
  std::string bitmap;
  for (const auto& [value, rows] : rows_of_) {
    PutFixed64(out, uint64_t(value));
    bitmap.resize(rows.getSizeInBytes(/*portable=*/true));
    bitmap.resize(rows.write(bitmap.data(), /*portable=*/true));
    PutBytes(out, bitmap);
  }
}

namespace {

// Whether a bitmap read from a file holds what its containers say: rows strictly ascending,
// below `rows`, and cardinality() of them (a bitset container's count is stored, not counted).
bool Consistent(const Roaring& bitmap, uint64_t rows) {
  roaring_uint32_iterator_t it;
  roaring_init_iterator(&bitmap.roaring, &it);
  uint32_t batch[256];
  uint64_t count = 0;
  int64_t last = -1;
  for (uint32_t got; (got = roaring_read_uint32_iterator(&it, batch, 256)) > 0;) {
    for (uint32_t i = 0; i < got; ++i) {
      if (int64_t(batch[i]) <= last || batch[i] >= rows) return false;
      last = batch[i];
    }
    count += got;
  }
  return count == bitmap.cardinality();
}

}  // namespace

template <typename Key>
bool ValueIndex<Key>::DecodeFrom(Decoder* in, uint64_t rows) {
  Drop();
  uint8_t flags = 0;
  uint64_t entries = 0, values = 0;
  if (!in->GetByte(&flags) || flags > 3 || !in->GetVarint64(&entries) ||
      !in->GetVarint64(&values) || values > in->remaining() / 9 ||
      ((flags & 1) == 0 && values != 0)) {
    return false;
  }
  absl::btree_map<Key, Roaring> rows_of;
  try {
    for (uint64_t i = 0; i < values; ++i) {
      uint64_t value = 0;
      std::string_view bitmap;
      if (!in->GetFixed64(&value) || !in->GetBytes(&bitmap)) return false;
      if (!rows_of.empty() && Key(value) <= std::prev(rows_of.end())->first) return false;
      auto it = rows_of.emplace_hint(rows_of.end(), Key(value),
                                     Roaring::readSafe(bitmap.data(), bitmap.size()));
      if (!Consistent(it->second, rows)) return false;
    }
  } catch (const std::exception&) {  // a malformed bitmap, or no memory for it
    return false;
  }
  enabled_ = (flags & 1) != 0;
  wanted_ = (flags & 2) != 0;
  entries_ = entries;
  rows_of_ = std::move(rows_of);
  containers_ = CountContainers();
  return true;
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
