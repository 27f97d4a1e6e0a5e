#include "core/index/bit_count.h"

#include <bit>

namespace shoal::core {
namespace {

template <typename Popcount>
uint64_t Count(const uint64_t* words, uint64_t begin, uint64_t end, Popcount popcount) {
  if (begin >= end) return 0;
  const uint64_t first = begin >> 6, last = (end - 1) >> 6;
  const uint64_t head = ~uint64_t(0) << (begin & 63);
  const uint64_t tail = ~uint64_t(0) >> (63 - ((end - 1) & 63));
  if (first == last) return popcount(words[first] & head & tail);
  uint64_t n = popcount(words[first] & head) + popcount(words[last] & tail);
  for (uint64_t w = first + 1; w < last; ++w) n += popcount(words[w]);
  return n;
}

__attribute__((target("popcnt"))) uint64_t CountPopcnt(const uint64_t* words, uint64_t begin,
                                                       uint64_t end) {
  return Count(words, begin, end, [](uint64_t w) { return uint64_t(__builtin_popcountll(w)); });
}

uint64_t CountPortable(const uint64_t* words, uint64_t begin, uint64_t end) {
  return Count(words, begin, end, [](uint64_t w) { return uint64_t(std::popcount(w)); });
}

}  // namespace

uint64_t CountBits(const uint64_t* words, uint64_t begin, uint64_t end) {
  static const bool popcnt = __builtin_cpu_supports("popcnt");
  return popcnt ? CountPopcnt(words, begin, end) : CountPortable(words, begin, end);
}

}  // namespace shoal::core
