#include "storage/attributes/row_bits.h"

#include <bit>
#include <cstddef>

namespace shoal::storage {

RowBits::RowBits(uint64_t n, bool value) : rows(n), words((n + 63) / 64, value ? ~uint64_t(0) : 0) {
  if (value && (n & 63)) words.back() = (uint64_t(1) << (n & 63)) - 1;
}

uint64_t RowBits::Count() const {
  uint64_t n = 0;
  for (uint64_t w : words) n += uint64_t(std::popcount(w));
  return n;
}

void RowBits::And(const RowBits& other) {
  for (size_t i = 0; i < words.size(); ++i) words[i] &= other.words[i];
}

void RowBits::Or(const RowBits& other) {
  for (size_t i = 0; i < words.size(); ++i) words[i] |= other.words[i];
}

void RowBits::Not() {
  for (uint64_t& w : words) w = ~w;
  if (rows & 63) words.back() &= (uint64_t(1) << (rows & 63)) - 1;
}

}  // namespace shoal::storage
