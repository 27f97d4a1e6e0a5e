#include "storage/attributes/field_column.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <variant>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/filter/scalar_order.h"
#include "core/filter/typed_leaf.h"
#include "storage/attributes/match_kernels.h"
#include "storage/format/wal_format.h"

namespace shoal::storage {

using core::filter::Expr;

template <typename T>
void FieldColumn::Entries<T>::Append(uint32_t row, T value) {
  if (rows.empty() && row != values.size()) {  // no longer dense: number the rows so far
    rows.resize(values.size());
    std::iota(rows.begin(), rows.end(), uint32_t(0));
  }
  if (!rows.empty() || row != values.size()) rows.push_back(row);
  values.push_back(std::move(value));
}

template <typename T>
size_t FieldColumn::Entries<T>::CountBelow(uint64_t n) const {
  if (rows.empty()) return size_t(std::min<uint64_t>(values.size(), n));
  return size_t(std::lower_bound(rows.begin(), rows.end(), n) - rows.begin());
}

template <typename T>
uint64_t FieldColumn::Entries<T>::memory_bytes() const {
  return rows.capacity() * sizeof(uint32_t) + values.capacity() * sizeof(T);
}

// Entries: varint n, a byte (1: dense, entry i is row i), the n row numbers as fixed32 unless
// dense, then the values: fixed-width ones as their bytes, lists as PutAttributeValue writes them.
template <typename T>
void FieldColumn::Entries<T>::EncodeTo(std::string* out) const {
  PutVarint64(out, values.size());
  out->push_back(char(rows.empty()));
  out->append(reinterpret_cast<const char*>(rows.data()), rows.size() * sizeof(uint32_t));
  if constexpr (std::is_same_v<T, core::AttributeList>) {
    for (const core::AttributeList& list : values) PutAttributeValue(out, list);
  } else {
    out->append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
  }
}

template <typename T>
bool FieldColumn::Entries<T>::DecodeFrom(Decoder* in, uint64_t max_rows) {
  uint64_t n = 0;
  uint8_t dense = 0;
  if (!in->GetVarint64(&n) || n > max_rows || !in->GetByte(&dense) || dense > 1) return false;
  std::string_view bytes;
  if (!dense) {
    if (!in->GetView(n * sizeof(uint32_t), &bytes)) return false;
    rows.resize(size_t(n));
    if (n > 0) std::memcpy(rows.data(), bytes.data(), bytes.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      if (rows[i] >= max_rows || (i > 0 && rows[i] <= rows[i - 1])) return false;
    }
  }
  if constexpr (std::is_same_v<T, core::AttributeList>) {
    if (n > in->remaining() / 2) return false;  // a list takes at least a tag and a count
    values.resize(size_t(n));
    for (core::AttributeList& list : values) {
      core::AttributeValue value;
      if (!GetAttributeValue(in, &value)) return false;
      auto* l = std::get_if<core::AttributeList>(&value);
      if (l == nullptr) return false;
      list = std::move(*l);
    }
  } else {
    if (!in->GetView(n * sizeof(T), &bytes)) return false;
    values.resize(size_t(n));
    if (n > 0) std::memcpy(values.data(), bytes.data(), bytes.size());
  }
  return true;
}

namespace {

// A string's bytes outside its own object (none while short enough to be held inline).
uint64_t HeapBytes(const std::string& s) {
  return s.capacity() > std::string().capacity() ? s.capacity() + 1 : 0;
}

// Sets the rows of `entries`' first `n` values that satisfy `satisfies`, without a branch per
// value; a dense kind 64 values to a word.
template <typename Entries, typename P>
void SetWhere(const Entries& entries, size_t n, P satisfies, RowBits* out) {
  uint64_t* words = out->words.data();
  const auto& values = entries.values;
  if (entries.rows.empty()) {
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
      uint64_t word = 0;
      for (size_t b = 0; b < 64; ++b) word |= uint64_t(satisfies(values[i + b])) << b;
      words[i >> 6] |= word;
    }
    for (; i < n; ++i) words[i >> 6] |= uint64_t(satisfies(values[i])) << (i & 63);
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    const uint32_t r = entries.rows[i];
    words[r >> 6] |= uint64_t(satisfies(values[i])) << (r & 63);
  }
}

template <typename Entries>
void SetAll(const Entries& entries, size_t n, RowBits* out) {
  if (entries.rows.empty()) {
    RowBits all(n, true);
    for (size_t w = 0; w < all.words.size(); ++w) out->words[w] |= all.words[w];
    return;
  }
  for (size_t i = 0; i < n; ++i) out->Set(entries.rows[i]);
}

bool ListSatisfies(const core::AttributeList& list, const Expr& leaf) {
  return std::any_of(list.begin(), list.end(), [&leaf](const core::AttributeScalar& e) {
    return std::visit([&leaf](const auto& x) { return core::filter::ScalarSatisfies(x, leaf); }, e);
  });
}

}  // namespace

void FieldColumn::Append(uint32_t row, const core::AttributeValue& value) {
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          ints_.Append(row, v);
          int_index_.Add(v, row);
        } else if constexpr (std::is_same_v<T, double>) {
          doubles_.Append(row, v);
        } else if constexpr (std::is_same_v<T, bool>) {
          bools_.Append(row, uint8_t(v));
        } else if constexpr (std::is_same_v<T, std::string>) {
          auto it = code_of_.find(std::string_view(v));
          if (it == code_of_.end()) {
            dictionary_.push_back(v);
            it =
                code_of_
                    .emplace(std::string_view(dictionary_.back()), uint32_t(dictionary_.size() - 1))
                    .first;
          }
          strings_.Append(row, it->second);
          string_index_.Add(it->second, row);
        } else {
          for (const core::AttributeScalar& e : v) {
            if (const auto* s = std::get_if<std::string>(&e)) list_heap_bytes_ += HeapBytes(*s);
          }
          list_heap_bytes_ += v.capacity() * sizeof(core::AttributeScalar);
          lists_.Append(row, v);
        }
      },
      value);
}

void FieldColumn::Eval(const Expr& leaf, RowBits* out) const {
  const uint64_t rows = out->rows;
  const size_t ints = ints_.CountBelow(rows), doubles = doubles_.CountBelow(rows);
  const size_t bools = bools_.CountBelow(rows), strings = strings_.CountBelow(rows);
  const size_t lists = lists_.CountBelow(rows);
  if (leaf.kind == Expr::Kind::kExists) {
    SetAll(ints_, ints, out);
    SetAll(doubles_, doubles, out);
    SetAll(bools_, bools, out);
    SetAll(strings_, strings, out);
    SetAll(lists_, lists, out);
    return;
  }
  if (ints > 0) {
    using Mode = core::filter::IntLeaf::Mode;
    const core::filter::IntLeaf compiled(leaf);
    const bool interval = compiled.mode() == Mode::kRange || compiled.mode() == Mode::kOutside;
    const bool set = (compiled.mode() == Mode::kSet || compiled.mode() == Mode::kNotSet) &&
                     compiled.set().size() <= kMaxSetLiterals;
    if (OrIntsFromIndex(compiled, ints, out)) {
      // answered by the index
    } else if (interval && ints_.rows.empty()) {
      OrIntervalBits(ints_.values.data(), ints, compiled.lo(), compiled.span(),
                     compiled.mode() == Mode::kOutside, out->words.data());
    } else if (set && ints_.rows.empty()) {
      OrSetBits(ints_.values.data(), ints, compiled.set().data(), compiled.set().size(),
                compiled.mode() == Mode::kNotSet, out->words.data());
    } else {
      compiled.Visit([&](auto satisfies) { SetWhere(ints_, ints, satisfies, out); });
    }
  }
  if (doubles > 0) {
    const core::filter::DoubleLeaf compiled(leaf);
    if (compiled.mode() == core::filter::DoubleLeaf::Mode::kCompare && doubles_.rows.empty()) {
      OrCompareBits(doubles_.values.data(), doubles, compiled.op(), compiled.x(),
                    out->words.data());
    } else {
      compiled.Visit([&](auto satisfies) { SetWhere(doubles_, doubles, satisfies, out); });
    }
  }
  if (bools > 0) {
    const bool table[2] = {core::filter::ScalarSatisfies(false, leaf),
                           core::filter::ScalarSatisfies(true, leaf)};
    SetWhere(
        bools_, bools, [&table](uint8_t b) { return table[b]; }, out);
  }
  if (strings > 0) {
    // The leaf decided once per distinct string; the codes below `strings` are all in it.
    std::vector<uint8_t> table(dictionary_.size());
    for (size_t c = 0; c < dictionary_.size(); ++c) {
      table[c] = core::filter::ScalarSatisfies(dictionary_[c], leaf);
    }
    if (!OrStringsFromIndex(table, strings, out)) {
      SetWhere(
          strings_, strings, [&table](uint32_t code) { return table[code] != 0; }, out);
    }
  }
  if (lists > 0) {
    SetWhere(
        lists_, lists, [&leaf](const core::AttributeList& l) { return ListSatisfies(l, leaf); },
        out);
  }
}

namespace {

// Costs in ~nanoseconds (attribute-bench on this project's machines): a dense int column is
// tested six values to the nanosecond (vector compares), a dense string column or a sparse kind
// about one (a table lookup or a row number each); a value's bitmap costs kPerValue to look up
// and count, and 1.5 per row it sets (an array container; a bitset container is cheaper).
constexpr uint64_t kPerValue = 32;

uint64_t ScanCost(size_t n, bool dense, uint64_t values_per_ns) {
  return dense ? n / values_per_ns : n;
}

// Sets `hits`' rows in `out` when that costs less than `scan_cost`.
bool OrIfCheaper(const std::vector<const Roaring*>& hits, uint64_t scan_cost, RowBits* out) {
  uint64_t cost = kPerValue * hits.size();
  for (const Roaring* b : hits) {
    cost += CountBelow(*b, out->rows) * 3 / 2;
    if (cost >= scan_cost) return false;
  }
  for (const Roaring* b : hits) OrRows(*b, out);
  return true;
}

}  // namespace

bool FieldColumn::OrIntsFromIndex(const core::filter::IntLeaf& leaf, size_t n, RowBits* out) const {
  using Mode = core::filter::IntLeaf::Mode;
  if (!int_index_.enabled()) return false;
  const uint64_t scan_cost = ScanCost(n, ints_.rows.empty(), 6);
  const size_t max_values = scan_cost / kPerValue;
  std::vector<const Roaring*> hits;
  switch (leaf.mode()) {
    case Mode::kNone:
      return true;
    case Mode::kRange: {
      const int64_t hi = int64_t(uint64_t(leaf.lo()) + leaf.span());  // on the int64 line
      if (!int_index_.Collect(leaf.lo(), hi, max_values, &hits)) return false;
      break;
    }
    case Mode::kSet:
      if (leaf.set().size() > max_values) return false;
      for (int64_t v : leaf.set()) {
        if (const Roaring* b = int_index_.Find(v)) hits.push_back(b);
      }
      break;
    default:  // everything, or the complement of a few values: the scan
      return false;
  }
  return OrIfCheaper(hits, scan_cost, out);
}

bool FieldColumn::OrStringsFromIndex(const std::vector<uint8_t>& table, size_t n,
                                     RowBits* out) const {
  if (!string_index_.enabled()) return false;
  const uint64_t scan_cost = ScanCost(n, strings_.rows.empty(), 1);
  const size_t max_values = scan_cost / kPerValue;
  std::vector<const Roaring*> hits;
  for (uint32_t code = 0; code < table.size(); ++code) {
    if (!table[code]) continue;
    if (hits.size() == max_values) return false;
    if (const Roaring* b = string_index_.Find(code)) hits.push_back(b);
  }
  return OrIfCheaper(hits, scan_cost, out);
}

void FieldColumn::Seal() {
  int_index_.Seal(ints_.values, ints_.rows);
  string_index_.Seal(strings_.values, strings_.rows);
}

// A column: its kinds' entries (ints, doubles, bools, string codes, lists), the dictionary
// (varint count, then each string as bytes), then the int and string indexes (value_index.h).
void FieldColumn::EncodeTo(std::string* out) const {
  ints_.EncodeTo(out);
  doubles_.EncodeTo(out);
  bools_.EncodeTo(out);
  strings_.EncodeTo(out);
  lists_.EncodeTo(out);
  PutVarint64(out, dictionary_.size());
  for (const std::string& s : dictionary_) PutBytes(out, s);
  int_index_.EncodeTo(out);
  string_index_.EncodeTo(out);
}

absl::StatusOr<FieldColumn> FieldColumn::Decode(std::string_view bytes, uint64_t rows) {
  auto corrupt = [](absl::string_view what) {
    return absl::DataLossError(absl::StrCat("attribute column: bad ", what));
  };
  FieldColumn c(false);
  Decoder in(bytes);
  if (!c.ints_.DecodeFrom(&in, rows) || !c.doubles_.DecodeFrom(&in, rows) ||
      !c.bools_.DecodeFrom(&in, rows) || !c.strings_.DecodeFrom(&in, rows) ||
      !c.lists_.DecodeFrom(&in, rows)) {
    return corrupt("entries");
  }
  uint64_t distinct = 0;
  if (!in.GetVarint64(&distinct) || distinct > in.remaining()) return corrupt("dictionary");
  for (uint64_t i = 0; i < distinct; ++i) {
    std::string_view s;
    if (!in.GetBytes(&s)) return corrupt("dictionary");
    c.dictionary_.emplace_back(s);
    if (!c.code_of_.emplace(std::string_view(c.dictionary_.back()), uint32_t(i)).second) {
      return corrupt("dictionary (a string twice)");
    }
  }
  for (uint32_t code : c.strings_.values) {
    if (code >= distinct) return corrupt("string code");
  }
  for (uint8_t b : c.bools_.values) {
    if (b > 1) return corrupt("bool");
  }
  if (!c.int_index_.DecodeFrom(&in, rows) || !c.string_index_.DecodeFrom(&in, rows)) {
    return corrupt("index");
  }
  if (!in.empty()) return corrupt("length");
  for (const core::AttributeList& l : c.lists_.values) {
    for (const core::AttributeScalar& e : l) {
      if (const auto* s = std::get_if<std::string>(&e)) c.list_heap_bytes_ += HeapBytes(*s);
    }
    c.list_heap_bytes_ += l.capacity() * sizeof(core::AttributeScalar);
  }
  return c;
}

void FieldColumn::SetIndexed(bool indexed) {
  int_index_.Want(indexed, ints_.values, ints_.rows);
  string_index_.Want(indexed, strings_.values, strings_.rows);
}

uint64_t FieldColumn::memory_bytes() const {
  uint64_t bytes = ints_.memory_bytes() + doubles_.memory_bytes() + bools_.memory_bytes() +
                   strings_.memory_bytes() + lists_.memory_bytes() + list_heap_bytes_;
  for (const std::string& s : dictionary_) bytes += sizeof(std::string) + HeapBytes(s);
  bytes += code_of_.capacity() * (sizeof(std::string_view) + sizeof(uint32_t) + 1);
  return bytes + int_index_.memory_bytes() + string_index_.memory_bytes();
}

}  // namespace shoal::storage
