// WriteSegment: writes one immutable IVF segment directory (DESIGN.md §5):
//
//   lists.dat  partitions, each 4 KiB aligned: ids, then codes (storage/format/segment_format.h)
//   raw.dat    float32 vectors in the same order, for refine (SQ8 and PQ only)
//   attrs.dat  every row's attributes in the same order, and their columns with value
//              indexes (storage/attributes/attribute_file.h)
//   ivf.meta   written last: a segment directory without it is an unfinished build
//
// Every file is fsync'ed, then the directory. The caller installs the manifest that names
// the segment afterwards (I-6).
//
// Thread-safety: pure function of its arguments; blocking file I/O (run it off the arena).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/index/ivf_model.h"
#include "storage/attributes/attribute_columns.h"
#include "storage/io/file_system.h"

namespace shoal::storage {

// Rows for a segment, any order. attributes is empty or has one entry per row.
struct SegmentRows {
  std::vector<float> vectors;  // n * dim
  std::vector<uint64_t> ids;
  std::vector<std::string> attributes;

  size_t size() const { return ids.size(); }
};

// `assign` holds each row's partition and `codes` its code (model.CodeSize() bytes per row),
// both computed by the caller on the CPU arena. `max_indexed_fields`: as AttributeColumns'.
absl::Status WriteSegment(FileSystem* fs, const std::string& dir, const core::IvfModel& model,
                          const SegmentRows& rows, const std::vector<uint32_t>& assign,
                          const std::vector<uint8_t>& codes,
                          uint32_t max_indexed_fields = AttributeColumns::kDefaultMaxIndexedFields);

}  // namespace shoal::storage
