// IVF segment metadata format (seg-<id>/ivf.meta, DESIGN.md §5): everything needed to route a
// query and to find, verify and decode each partition of seg-<id>/lists.dat.
//
//   "SHOALIVF" fixed32 version
//   varint dim, uint8 metric, uint8 encoding, [v2+: uint8 flags], varint nlist, varint num_vectors
//   floats centroids[nlist * dim]
//   encoding params: SQ8 -> floats vmin[dim], vdiff[dim];
//                    PQ  -> varint m, varint nbits, floats codebooks[m * 2^nbits * dim/m]
//   per partition: fixed64 offset, fixed64 length, varint count, fixed32 crc32c(bytes)
//   fixed32 masked crc of everything before it
//
// lists.dat holds the partitions back to back, each starting at a 4 KiB-aligned offset (for
// O_DIRECT): `count` fixed64 ids, then `count` rows of CodeSize() bytes. (DESIGN.md has codes
// first; ids first keeps them 8-byte aligned in the read buffer whatever the code size.)
// raw.dat (SQ8/PQ only) holds the float32 vectors in the same partition and row order.
//
// Version 2 adds the flags byte (bit 0: an exact segment, IvfModel::exact). Version 3 adds
// flag bit 1: residual SQ8/PQ codes (IvfModel::residual, core/index/ivf_model.h), whose rows in
// an L2 segment are the quantizer code then a float32 term (CodeSize() = code + 4 bytes).
// Version 1 and 2 files (no residual bit: raw-vector codes) are still read and scored the old
// way; flushes and merges keep their model. New files are written as version 3, with the bit
// clear when the model is an old raw one: v3 without the bit is byte for byte v2 but for the
// version number.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/index/ivf_model.h"

namespace shoal::storage {

inline constexpr std::string_view kIvfMetaMagic = "SHOALIVF";
inline constexpr uint32_t kIvfMetaVersion = 3;
inline constexpr uint8_t kIvfMetaFlagExact = 1;
inline constexpr uint8_t kIvfMetaFlagResidual = 2;  // version >= 3

using core::VectorEncoding;

struct PartitionExtent {
  uint64_t offset = 0;  // in lists.dat, 4 KiB aligned
  uint64_t length = 0;  // bytes: count * (code size + 8)
  uint64_t count = 0;   // vectors
  uint32_t crc32c = 0;  // of the `length` bytes
};

struct IvfMeta {
  core::IvfModel model;
  uint64_t num_vectors = 0;
  std::vector<PartitionExtent> partitions;  // nlist

  size_t nlist() const { return partitions.size(); }
};

std::string EncodeIvfMeta(const IvfMeta& meta);
// DATA_LOSS on a bad checksum, truncation or inconsistent sizes; FAILED_PRECONDITION on an
// unknown version.
absl::StatusOr<IvfMeta> DecodeIvfMeta(std::string_view data);

}  // namespace shoal::storage
