#include "storage/attributes/row_bits.h"

#include <cstddef>

#include "core/index/bit_count.h"

namespace shoal::storage {

RowBits::RowBits(uint64_t n, bool value) : rows(n), words((n + 63) / 64, value ? ~uint64_t(0) : 0) {
  if (value && (n & 63)) words.back() = (uint64_t(1) << (n & 63)) - 1;
}

uint64_t RowBits::Count() const {
  return core::CountBits(words.data(), 0, uint64_t(words.size()) * 64);
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
