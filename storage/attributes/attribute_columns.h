// AttributeColumns: the attributes of one segment's rows (or of the memtable's), decoded once
// and stored by field — per attribute key a FieldColumn (field_column.h: the rows that have it
// and their values, typed, in row order) — with every row's id, so that a filter is evaluated
// leaf by leaf over the fields it names, never by decoding each row's map (core/filter/filter.h
// has the language and its semantics).
// Select() answers the rows that satisfy a filter as a dense bitset over row numbers (a
// segment's rows in partition order, the memtable's in insertion order).
//
// Rows are appended in row-number order (a segment's at open, the memtable's as they are
// written); a row's attributes never change (an upsert writes a new row, the old one is dead).
//
// Memory: per field entry 1 to 12 bytes by kind (field_column.h), each distinct string once;
// 8 bytes per row for the ids; the value indexes of `max_indexed_fields` fields
// (filter.max_indexed_fields; value_index.h): the first seen while rows are appended (the
// memtable), the first in key order once they are final (Seal, Restore: a segment's).
// memory_bytes() reports it.
//
// Thread-safety: one writer (Append, Seal) with any number of concurrent readers (Select, Count):
// a reader sees a prefix of the rows, at least `rows` of them when it asks for `rows`.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/base/attributes.h"
#include "core/filter/filter.h"
#include "core/index/ivf_search.h"
#include "storage/attributes/field_column.h"
#include "storage/attributes/row_bits.h"

namespace shoal::storage {

class AttributeColumns {
 public:
  static constexpr uint32_t kDefaultMaxIndexedFields = 64;

  explicit AttributeColumns(uint32_t max_indexed_fields = kDefaultMaxIndexedFields)
      : max_indexed_fields_(max_indexed_fields) {}
  AttributeColumns(const AttributeColumns&) = delete;
  AttributeColumns& operator=(const AttributeColumns&) = delete;

  // Row number rows() gets `id` and `attributes`. Writer only.
  void Append(uint64_t id, const core::Attributes& attributes);
  // No row follows: the indexes are decided on all the values and trimmed. Writer only.
  void Seal();

  uint64_t rows() const;
  // The rows among the first `rows` (REQUIRES: <= rows()) that satisfy `filter`.
  RowBits Select(const core::filter::Filter& filter, uint64_t rows) const;
  // How many RowBits of `rows` bits Select(filter) holds at most at once (one per and/or
  // ancestor of the deepest leaf, plus the leaf's): what a search prices for it (I-9).
  static uint64_t BitsetsToSelect(const core::filter::Filter& filter);

  // Clears the rows of `bits` whose id `dead` says is dead (deleted or superseded); returns how
  // many it cleared.
  uint64_t ClearDead(RowBits* bits, const core::IdFilter& dead) const;
  // The ids of the rows set in `bits`, in row order.
  std::vector<uint64_t> IdsOf(const RowBits& bits) const;
  uint64_t memory_bytes() const;

  // Every field's column in key order, for the segment file (attribute_file.h). Sealed only.
  void ForEachColumn(
      const std::function<void(const std::string& key, const FieldColumn& column)>& fn) const;
  // Replaces the rows with `ids`' and the columns read back from a segment file: sealed.
  void Restore(std::vector<uint64_t> ids, std::vector<std::pair<std::string, FieldColumn>> columns);

 private:
  // The rows are final: the first max_indexed_fields_ fields in key order keep value indexes.
  void CapIndexedFields() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // REQUIRES: mu_ held (shared). The rows below `rows` that satisfy `e`.
  RowBits Eval(const core::filter::Expr& e, uint64_t rows) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  RowBits EvalLeaf(const core::filter::Expr& e, uint64_t rows) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const uint32_t max_indexed_fields_;
  mutable absl::Mutex mu_;
  std::vector<uint64_t> ids_ ABSL_GUARDED_BY(mu_);  // per row
  absl::flat_hash_map<std::string, FieldColumn> columns_ ABSL_GUARDED_BY(mu_);
  uint32_t indexed_fields_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace shoal::storage
