// attrs.dat: a segment's attributes (DESIGN.md §5), written with the segment. Version 2 is
// columnar so that opening a segment reads only its directory and its fields' columns (with
// their value indexes, ready to evaluate filters on), while each row's own attributes stay on
// disk until a Get or a rebuild asks for them.
//
//   "SHOALATR" fixed32 version (2)
//   per row, in the segment's row order (partition order, as raw.dat): its attributes
//     (EncodeAttributes bytes, empty for none), then fixed32 masked crc32c of (fixed64 row
//     number, those bytes) — the row number makes an entry read through a bad offset fail
//   fixed64 x (rows + 1): where each row's entry starts; the last is where this table starts
//   per field, in key order: its column (FieldColumn::EncodeTo)
//   directory: varint rows, fixed64 offset of the table, varint fields, then per field:
//     bytes key, fixed64 offset, fixed64 length, fixed32 crc32c of the column
//   footer (16 bytes): fixed64 directory offset, fixed32 directory length, fixed32 masked
//     crc32c of the header and the directory (a flipped version is corruption, not a newer
//     file; later versions keep this footer)
//
// Version 1 ("SHOALATR" fixed32 1, varint n, n x (fixed64 id, bytes attributes), fixed32
// masked crc of everything before it; only rows with attributes) is still read, whole, at open
// (storage/collection/segment.cc).
//
// Thread-safety: pure functions; the readers only read the file (concurrent calls are fine).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "storage/attributes/attribute_columns.h"
#include "storage/attributes/field_column.h"
#include "storage/io/file_system.h"

namespace shoal::storage {

inline constexpr std::string_view kAttributeFileMagic = "SHOALATR";
inline constexpr uint32_t kAttributeFileVersion = 2;
inline constexpr size_t kAttributeFileHeaderBytes = 12;  // magic + version
inline constexpr size_t kAttributeFileFooterBytes = 16;

// Writes a version 2 file row by row through `append`, which receives the file's bytes in order.
// Memory: the columns of the rows added (what the segment holds once open) and 16 bytes a row
// (the row table and the columns' row ids); each row's bytes go to `append` as they come.
//
// Thread-safety: not thread-safe; one thread writes a file.
class AttributeFileWriter {
 public:
  using Append = absl::AnyInvocable<absl::Status(std::string_view bytes)>;
  // The columns' value indexes follow `max_indexed_fields` as AttributeColumns'.
  AttributeFileWriter(Append append, uint32_t max_indexed_fields);

  // The next row's attributes (EncodeAttributes bytes; empty for none). DATA_LOSS when they do
  // not decode.
  absl::Status Add(std::string_view attributes);
  // The row table, the columns, the directory and the footer. No Add after it.
  absl::Status Finish();

 private:
  absl::Status Write(std::string_view bytes);

  Append append_;
  AttributeColumns columns_;
  std::vector<uint64_t> starts_;  // per row, where its entry starts
  uint64_t written_ = 0;
};

// A whole file in memory, for rows whose attributes are `attributes`, in row order.
absl::StatusOr<std::string> EncodeAttributeFile(const std::vector<std::string_view>& attributes,
                                                uint32_t max_indexed_fields);

// Where a version 2 file keeps what (its directory).
struct AttributeFileLayout {
  struct Field {
    std::string key;
    uint64_t offset = 0, length = 0;
    uint32_t crc32c = 0;
  };
  uint32_t version = 0;  // the header's, checked by the footer's CRC
  uint64_t rows = 0;
  uint64_t table = 0;  // the row offsets' table
  std::vector<Field> fields;
};

// The version in a file's first kAttributeFileHeaderBytes; DATA_LOSS on a bad magic.
absl::StatusOr<uint32_t> AttributeFileVersion(std::string_view header);
// Reads and checks a version 2 (or later) file's header, footer and directory: DATA_LOSS on a
// bad checksum, a truncated file, sections that do not fit in it or field keys out of order.
absl::StatusOr<AttributeFileLayout> ReadAttributeLayout(const RandomAccessFile& file);
// Field `f` of the layout, read and checked.
absl::StatusOr<FieldColumn> ReadAttributeColumn(const RandomAccessFile& file,
                                                const AttributeFileLayout& layout, size_t f);
// Rows [first, first + n)'s attributes (EncodeAttributes bytes; empty for none), read in two
// reads and each checked against its CRC. REQUIRES: first + n <= layout.rows.
absl::StatusOr<std::vector<std::string>> ReadRowAttributes(const RandomAccessFile& file,
                                                           const AttributeFileLayout& layout,
                                                           uint64_t first, uint64_t n);

}  // namespace shoal::storage
