// RowBits: a dense bitset over a segment's (or the memtable's) row numbers, what a filter's
// evaluation produces leaf by leaf and combines with and/or/not.
//
// Thread-safety: a value type; not synchronised.
#pragma once

#include <cstdint>
#include <vector>

namespace shoal::storage {

// One bit per row: bit r of words[r / 64] is row r; bits at and past `rows` are zero.
struct RowBits {
  uint64_t rows = 0;
  std::vector<uint64_t> words;

  explicit RowBits(uint64_t n = 0, bool value = false);
  bool Test(uint64_t r) const { return (words[r >> 6] >> (r & 63)) & 1; }
  void Set(uint64_t r) { words[r >> 6] |= uint64_t(1) << (r & 63); }
  void Clear(uint64_t r) { words[r >> 6] &= ~(uint64_t(1) << (r & 63)); }
  uint64_t Count() const;
  void And(const RowBits& other);
  void Or(const RowBits& other);
  void Not();  // within [0, rows)
};

}  // namespace shoal::storage
