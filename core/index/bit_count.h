// CountBits: the set bits of a bitset's range, with the CPU's POPCNT instruction when it has one
// (the build targets baseline x86-64, where std::popcount is a libgcc call of ~5 ns a word;
// filtered searches count each selection per partition and per segment).
//
// Thread-safety: a pure function.
#pragma once

#include <cstdint>

namespace shoal::core {

// Set bits among bits [begin, end) of `words` (bit i is bit i % 64 of words[i / 64]).
uint64_t CountBits(const uint64_t* words, uint64_t begin, uint64_t end);

}  // namespace shoal::core
