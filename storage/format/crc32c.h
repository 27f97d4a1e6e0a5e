// CRC32C (Castagnoli), hardware-accelerated through ISA-L. Every on-disk record and file
// carries one. Mask()/Unmask() follow leveldb: a CRC stored next to the data it covers is
// masked so that a CRC of bytes that themselves contain CRCs stays well distributed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace shoal::storage {

// CRC32C of data, continuing from `crc` (the value returned for the preceding bytes).
uint32_t Crc32c(std::string_view data, uint32_t crc = 0);

constexpr uint32_t kCrcMaskDelta = 0xa282ead8u;
constexpr uint32_t MaskCrc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kCrcMaskDelta; }
constexpr uint32_t UnmaskCrc(uint32_t masked) {
  uint32_t rot = masked - kCrcMaskDelta;
  return (rot >> 17) | (rot << 15);
}

}  // namespace shoal::storage
