#include "storage/attributes/attribute_columns.h"

#include <algorithm>
#include <bit>
#include <variant>

namespace shoal::storage {

using core::filter::Expr;

void AttributeColumns::Append(uint64_t id, const core::Attributes& attributes) {
  absl::MutexLock lock(&mu_);
  const uint32_t row = uint32_t(ids_.size());
  ids_.push_back(id);
  for (const auto& [key, value] : attributes) {
    auto it = columns_.find(key);
    if (it == columns_.end()) {
      const bool indexed = indexed_fields_ < max_indexed_fields_;
      indexed_fields_ += indexed;
      it = columns_.try_emplace(key, indexed).first;
    }
    it->second.Append(row, value);
  }
}

void AttributeColumns::Seal() {
  absl::MutexLock lock(&mu_);
  for (auto& [key, column] : columns_) column.Seal();
  CapIndexedFields();
  ids_.shrink_to_fit();
}

void AttributeColumns::CapIndexedFields() {
  std::vector<std::pair<const std::string*, FieldColumn*>> fields;
  fields.reserve(columns_.size());
  for (auto& [key, column] : columns_) fields.emplace_back(&key, &column);
  std::sort(fields.begin(), fields.end(), [](auto& a, auto& b) { return *a.first < *b.first; });
  for (size_t i = 0; i < fields.size(); ++i) fields[i].second->SetIndexed(i < max_indexed_fields_);
  indexed_fields_ = uint32_t(std::min<size_t>(fields.size(), max_indexed_fields_));
}

uint64_t AttributeColumns::rows() const {
  absl::ReaderMutexLock lock(&mu_);
  return ids_.size();
}

uint64_t AttributeColumns::ClearDead(RowBits* bits, const core::IdFilter& dead) const {
  absl::ReaderMutexLock lock(&mu_);
  uint64_t cleared = 0;
  for (size_t w = 0; w < bits->words.size(); ++w) {
    for (uint64_t word = bits->words[w]; word != 0; word &= word - 1) {
      const uint64_t r = w * 64 + uint64_t(std::countr_zero(word));
      if (dead.IsDead(ids_[r])) {
        bits->Clear(r);
        ++cleared;
      }
    }
  }
  return cleared;
}

std::vector<uint64_t> AttributeColumns::IdsOf(const RowBits& bits) const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<uint64_t> ids;
  for (size_t w = 0; w < bits.words.size(); ++w) {
    for (uint64_t word = bits.words[w]; word != 0; word &= word - 1) {
      ids.push_back(ids_[w * 64 + uint64_t(std::countr_zero(word))]);
    }
  }
  return ids;
}

uint64_t AttributeColumns::memory_bytes() const {
  absl::ReaderMutexLock lock(&mu_);
  uint64_t bytes = ids_.capacity() * sizeof(uint64_t);
  for (const auto& [key, column] : columns_) bytes += key.capacity() + column.memory_bytes();
  return bytes;
}

void AttributeColumns::ForEachColumn(
    const std::function<void(const std::string&, const FieldColumn&)>& fn) const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<const std::string*> keys;
  keys.reserve(columns_.size());
  for (const auto& [key, column] : columns_) keys.push_back(&key);
  std::sort(keys.begin(), keys.end(), [](auto* a, auto* b) { return *a < *b; });
  for (const std::string* key : keys) fn(*key, columns_.find(*key)->second);
}

void AttributeColumns::Restore(std::vector<uint64_t> ids,
                               std::vector<std::pair<std::string, FieldColumn>> columns) {
  absl::MutexLock lock(&mu_);
  ids_ = std::move(ids);
  columns_.clear();
  columns_.reserve(columns.size());
  for (auto& [key, column] : columns) columns_.insert_or_assign(std::move(key), std::move(column));
  CapIndexedFields();
}

namespace {

uint64_t LiveBitsets(const Expr& e) {
  uint64_t deepest = 0;
  for (const Expr& c : e.children) deepest = std::max(deepest, LiveBitsets(c));
  switch (e.kind) {
    case Expr::Kind::kAnd:
    case Expr::Kind::kOr:
      return 1 + deepest;  // the accumulator, and a child's result
    case Expr::Kind::kNot:
      return deepest;
    default:
      return 1;
  }
}

}  // namespace

uint64_t AttributeColumns::BitsetsToSelect(const core::filter::Filter& filter) {
  return LiveBitsets(filter.root());
}

RowBits AttributeColumns::Select(const core::filter::Filter& filter, uint64_t rows) const {
  absl::ReaderMutexLock lock(&mu_);
  return Eval(filter.root(), std::min<uint64_t>(rows, ids_.size()));
}

// Depth is bounded by the parser (core/filter/filter.h), so recursion is.
RowBits AttributeColumns::Eval(const Expr& e, uint64_t rows) const {
  switch (e.kind) {
    case Expr::Kind::kAnd: {
      RowBits out(rows, true);
      for (const Expr& child : e.children) out.And(Eval(child, rows));
      return out;
    }
    case Expr::Kind::kOr: {
      RowBits out(rows, false);
      for (const Expr& child : e.children) out.Or(Eval(child, rows));
      return out;
    }
    case Expr::Kind::kNot: {
      RowBits out = Eval(e.children.front(), rows);
      out.Not();
      return out;
    }
    default:
      return EvalLeaf(e, rows);
  }
}

RowBits AttributeColumns::EvalLeaf(const Expr& e, uint64_t rows) const {
  if (e.field.is_id && e.kind == Expr::Kind::kExists) return RowBits(rows, true);
  RowBits out(rows, false);
  if (e.field.is_id) {
    for (uint64_t r = 0; r < rows; ++r) {
      if (core::filter::IdSatisfies(ids_[r], e)) out.Set(r);
    }
    return out;
  }
  auto it = columns_.find(e.field.key);
  if (it != columns_.end()) it->second.Eval(e, &out);  // no row has the field: every leaf is false
  return out;
}

}  // namespace shoal::storage
