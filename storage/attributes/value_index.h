// ValueIndex: for one kind of one attribute field (its int64 values, or its strings' dictionary
// codes), the rows that hold each distinct value, as a compressed bitmap per value (CRoaring),
// so that an equality, `in` or narrow-range leaf costs about its matches rather than a pass
// over the field's column. FieldColumn (field_column.h) asks it first and falls back to the
// column scan when the index would cost more (it counts the matches before it sets a bit).
//
// An index pays only where values repeat: a unique key's bitmaps would cost ~100 bytes a row
// against its column's 8, and so would repeated values scattered one row to a container (64 Ki
// rows each). So while rows are added (in ascending row order: each add appends to its bitmap's
// last container) it drops itself once it holds more than max(kDistinctFloor, entries /
// kRowsPerValue) values or max(kDistinctFloor, entries / kRowsPerContainer) containers; Seal()
// (the rows are final) builds it again from the column if the final values meet those bounds
// after all, and trims it. Out of memory, it drops itself rather than throw (the column scan
// answers the same).
//
// Memory: per value ~100 bytes of bookkeeping, per container ~50, plus the rows — 2 bytes a row
// in a sparse container, 8 KiB per 64 Ki rows in a dense one, less in runs. memory_bytes()
// estimates it.
//
// Thread-safety: none; AttributeColumns serialises Add and Seal against readers.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/container/btree_map.h"
#include "roaring/roaring.hh"
#include "storage/attributes/row_bits.h"
#include "storage/format/coding.h"

namespace shoal::storage {

template <typename Key>
class ValueIndex {
 public:
  static constexpr uint64_t kDistinctFloor = 4096;
  static constexpr uint64_t kRowsPerValue = 16;
  // A container's ~50 bytes over 4 rows: about the int column's 8 bytes a row, twice over.
  static constexpr uint64_t kRowsPerContainer = 4;

  // Enabled: it indexes the values added. A disabled index never indexes again (Seal aside).
  explicit ValueIndex(bool enabled) : enabled_(enabled), wanted_(enabled) {}

  bool enabled() const { return enabled_; }
  // REQUIRES: `row` above every row added before.
  void Add(Key value, uint32_t row);
  // The rows are final: `values` are the column's (entry i is row rows[i], or row i when `rows`
  // is empty). Re-indexes them if this index dropped itself but they meet the bound now.
  void Seal(const std::vector<Key>& values, const std::vector<uint32_t>& rows);
  // Whether the field may be indexed, decided again once its rows are final (AttributeColumns
  // caps the indexed fields in key order): not wanted drops the index; wanted when it was not
  // builds it as Seal would.
  void Want(bool wanted, const std::vector<Key>& values, const std::vector<uint32_t>& rows);

  // The bitmap of `value`'s rows, or null when no row holds it. REQUIRES: enabled().
  const Roaring* Find(Key value) const;
  // Appends the bitmaps of the values in [lo, hi] to *out, in value order; false when there are
  // more than `max_values` of them (*out then holds some). REQUIRES: enabled().
  bool Collect(Key lo, Key hi, size_t max_values, std::vector<const Roaring*>* out) const;

  uint64_t memory_bytes() const;

  // The index as bytes (attribute_file.h): its state, then each value with its bitmap in
  // CRoaring's portable format; and back. DecodeFrom answers false on malformed bytes, having
  // caught what CRoaring throws, and on a bitmap whose rows are not ascending, not below
  // `rows` or not as many as it says (CRoaring 0.2's readSafe checks lengths, not contents).
  void EncodeTo(std::string* out) const;
  bool DecodeFrom(Decoder* in, uint64_t rows);

 private:
  bool OverBound() const;
  void Drop();
  uint64_t CountContainers() const;

  bool enabled_;
  bool wanted_;  // the field may be indexed at all (filter.max_indexed_fields)
  uint64_t entries_ = 0;
  uint64_t containers_ = 0;  // across rows_of_'s bitmaps
  absl::btree_map<Key, Roaring> rows_of_;
};

// How many of `bitmap`'s rows are below `n`.
uint64_t CountBelow(const Roaring& bitmap, uint64_t n);
// Sets in `out` the rows of `bitmap` below out->rows.
void OrRows(const Roaring& bitmap, RowBits* out);

extern template class ValueIndex<int64_t>;
extern template class ValueIndex<uint32_t>;

}  // namespace shoal::storage
