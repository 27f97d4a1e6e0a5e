// FieldColumn: one attribute key's values across a segment's (or the memtable's) rows, stored
// by kind — int64s, doubles, bools, strings as codes into a dictionary of the distinct strings,
// and lists — each kind as its values in row order with their row numbers (no row numbers
// while the kind covers every row so far: entry i is row i). A leaf of a filter is evaluated
// over it kind by kind with the leaf compiled for that kind (core/filter/typed_leaf.h): a
// compare or two per int or double (vector compares over a dense kind, match_kernels.h), one
// table lookup per string or bool (the leaf is decided once per distinct string), the
// reference per-element test for lists. A row holds one value per key, so the kinds' rows are
// disjoint. An indexed field also keeps its ints' and strings' rows per value (value_index.h):
// an equality, `in` or range leaf whose matches cost less to set than the column costs to scan
// is answered from there.
//
// Memory per entry: 8 bytes for an int or a double, 4 for a string's code, 1 for a bool, plus 4
// for its row number once the kind is sparse; each distinct string once; lists as they are;
// an index's bitmaps (value_index.h).
//
// Thread-safety: none; AttributeColumns serialises Append against readers.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/base/attributes.h"
#include "core/filter/filter.h"
#include "core/filter/typed_leaf.h"
#include "storage/attributes/row_bits.h"
#include "storage/attributes/value_index.h"

namespace shoal::storage {

class FieldColumn {
 public:
  // `indexed`: keep value indexes for its ints and strings.
  explicit FieldColumn(bool indexed) : int_index_(indexed), string_index_(indexed) {}
  FieldColumn(const FieldColumn&) = delete;
  FieldColumn& operator=(const FieldColumn&) = delete;
  FieldColumn(FieldColumn&&) = default;
  FieldColumn& operator=(FieldColumn&&) = default;

  // REQUIRES: `row` above every row appended before.
  void Append(uint32_t row, const core::AttributeValue& value);

  // Sets in `out` the rows below out->rows whose value satisfies `leaf` (a kCompare, kIn or
  // kNotIn leaf on this key), or (kExists) that have a value.
  void Eval(const core::filter::Expr& leaf, RowBits* out) const;

  // The rows are final: indexes are decided on every value and trimmed.
  void Seal();
  // Keeps value indexes or not (filter.max_indexed_fields, decided once the rows are final).
  void SetIndexed(bool indexed);

  uint64_t memory_bytes() const;

  // The sealed column as bytes (storage/attributes/attribute_file.h), its indexes included, and
  // back. Decode checks what it reads (row numbers ascending and below `rows`, the segment's;
  // string codes within the dictionary): DATA_LOSS naming what is malformed.
  void EncodeTo(std::string* out) const;
  static absl::StatusOr<FieldColumn> Decode(std::string_view bytes, uint64_t rows);

 private:
  // Values of one kind, in row order.
  template <typename T>
  struct Entries {
    std::vector<uint32_t> rows;  // ascending; empty while entry i is row i
    std::vector<T> values;

    void Append(uint32_t row, T value);
    size_t CountBelow(uint64_t rows) const;
    uint64_t memory_bytes() const;
    void EncodeTo(std::string* out) const;
    bool DecodeFrom(Decoder* in, uint64_t max_rows);
  };

  // Eval's index paths: set the leaf's int (string) rows from the index and answer true, or
  // answer false, having set nothing, when scanning the first `n` values costs less.
  bool OrIntsFromIndex(const core::filter::IntLeaf& leaf, size_t n, RowBits* out) const;
  bool OrStringsFromIndex(const std::vector<uint8_t>& table, size_t n, RowBits* out) const;

  Entries<int64_t> ints_;
  Entries<double> doubles_;
  Entries<uint8_t> bools_;
  Entries<uint32_t> strings_;           // codes into dictionary_
  std::deque<std::string> dictionary_;  // the distinct strings, by code (stable addresses)
  absl::flat_hash_map<std::string_view, uint32_t> code_of_;  // views into dictionary_
  Entries<core::AttributeList> lists_;
  uint64_t list_heap_bytes_ = 0;
  ValueIndex<int64_t> int_index_;
  ValueIndex<uint32_t> string_index_;  // by code
};

}  // namespace shoal::storage
