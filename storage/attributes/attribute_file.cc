#include "storage/attributes/attribute_file.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/base/status.h"
#include "storage/attributes/attribute_columns.h"
#include "storage/format/coding.h"
#include "storage/format/crc32c.h"
#include "storage/format/wal_format.h"

namespace shoal::storage {
namespace {

absl::Status Corrupt(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("attrs.dat: ", what));
}

// A row entry's CRC covers its row number, so an entry read through a wrong offset fails.
uint32_t RowCrc(uint64_t row, std::string_view bytes) {
  char number[8];
  std::memcpy(number, &row, 8);
  return Crc32c(bytes, Crc32c(std::string_view(number, 8)));
}

absl::StatusOr<std::string> ReadExactly(const RandomAccessFile& file, uint64_t offset, uint64_t n) {
  if (offset > file.size() || n > file.size() - offset) return Corrupt("truncated");
  std::string bytes(size_t(n), '\0');
  SHOAL_ASSIGN_OR_RETURN(size_t got, file.Read(offset, bytes.size(), bytes.data()));
  if (got != bytes.size()) return Corrupt("short read");
  return bytes;
}

// The file's first kAttributeFileHeaderBytes: the magic and this version.
std::string Header() {
  std::string header(kAttributeFileMagic);
  PutFixed32(&header, kAttributeFileVersion);
  return header;
}

}  // namespace

AttributeFileWriter::AttributeFileWriter(Append append, uint32_t max_indexed_fields)
    : append_(std::move(append)), columns_(max_indexed_fields) {}

absl::Status AttributeFileWriter::Write(std::string_view bytes) {
  written_ += bytes.size();
  return append_(bytes);
}

absl::Status AttributeFileWriter::Add(std::string_view attributes) {
  const uint64_t row = starts_.size();
  if (row == 0) SHOAL_RETURN_IF_ERROR(Write(Header()));
  auto decoded = DecodeAttributes(attributes);
  if (!decoded.ok()) return Corrupt(absl::StrCat("row ", row, ": ", decoded.status().message()));
  columns_.Append(row, *decoded);
  starts_.push_back(written_);
  SHOAL_RETURN_IF_ERROR(Write(attributes));
  std::string crc;
  PutFixed32(&crc, MaskCrc(RowCrc(row, attributes)));
  return Write(crc);
}

absl::Status AttributeFileWriter::Finish() {
  if (starts_.empty()) SHOAL_RETURN_IF_ERROR(Write(Header()));
  const uint64_t rows = starts_.size(), table = written_;
  starts_.push_back(table);
  std::string out;
  out.reserve(starts_.size() * 8);
  for (uint64_t start : starts_) PutFixed64(&out, start);
  std::vector<uint64_t>().swap(starts_);
  SHOAL_RETURN_IF_ERROR(Write(out));
  columns_.Seal();
  std::string fields;
  uint64_t num_fields = 0;
  absl::Status status;
  columns_.ForEachColumn([&](const std::string& key, const FieldColumn& column) {
    if (!status.ok()) return;
    out.clear();
    column.EncodeTo(&out);
    PutBytes(&fields, key);
    PutFixed64(&fields, written_);
    PutFixed64(&fields, out.size());
    PutFixed32(&fields, Crc32c(out));
    ++num_fields;
    status = Write(out);
  });
  SHOAL_RETURN_IF_ERROR(status);
  std::string directory;
  PutVarint64(&directory, rows);
  PutFixed64(&directory, table);
  PutVarint64(&directory, num_fields);
  directory += fields;
  std::string footer;
  PutFixed64(&footer, written_);
  PutFixed32(&footer, uint32_t(directory.size()));
  PutFixed32(&footer, MaskCrc(Crc32c(directory, Crc32c(Header()))));
  SHOAL_RETURN_IF_ERROR(Write(directory));
  return Write(footer);
}

absl::StatusOr<std::string> EncodeAttributeFile(const std::vector<std::string_view>& attributes,
                                                uint32_t max_indexed_fields) {
  std::string out;
  AttributeFileWriter writer(
      [&out](std::string_view bytes) {
        out.append(bytes);
        return absl::OkStatus();
      },
      max_indexed_fields);
  for (std::string_view a : attributes) SHOAL_RETURN_IF_ERROR(writer.Add(a));
  SHOAL_RETURN_IF_ERROR(writer.Finish());
  return out;
}

absl::StatusOr<uint32_t> AttributeFileVersion(std::string_view header) {
  if (header.size() < kAttributeFileHeaderBytes ||
      header.substr(0, kAttributeFileMagic.size()) != kAttributeFileMagic) {
    return Corrupt("bad magic");
  }
  return DecodeFixed32(header.data() + kAttributeFileMagic.size());
}

absl::StatusOr<AttributeFileLayout> ReadAttributeLayout(const RandomAccessFile& file) {
  const uint64_t size = file.size();
  if (size < kAttributeFileHeaderBytes + kAttributeFileFooterBytes) return Corrupt("truncated");
  SHOAL_ASSIGN_OR_RETURN(std::string footer, ReadExactly(file, size - kAttributeFileFooterBytes,
                                                         kAttributeFileFooterBytes));
  uint64_t directory_at = 0;
  std::memcpy(&directory_at, footer.data(), 8);
  const uint32_t directory_bytes = DecodeFixed32(footer.data() + 8);
  const uint32_t masked = DecodeFixed32(footer.data() + 12);
  const uint64_t end = size - kAttributeFileFooterBytes;
  if (directory_at < kAttributeFileHeaderBytes || directory_at > end ||
      directory_bytes != end - directory_at) {
    return Corrupt("bad footer");
  }
  SHOAL_ASSIGN_OR_RETURN(std::string header, ReadExactly(file, 0, kAttributeFileHeaderBytes));
  SHOAL_ASSIGN_OR_RETURN(uint32_t version, AttributeFileVersion(header));
  SHOAL_ASSIGN_OR_RETURN(std::string directory, ReadExactly(file, directory_at, directory_bytes));
  if (Crc32c(directory, Crc32c(header)) != UnmaskCrc(masked)) {
    return Corrupt("bad header or directory checksum");
  }
  AttributeFileLayout layout;
  layout.version = version;
  Decoder in(directory);
  uint64_t num_fields = 0;
  if (!in.GetVarint64(&layout.rows) || !in.GetFixed64(&layout.table) ||
      !in.GetVarint64(&num_fields) || num_fields > in.remaining()) {
    return Corrupt("bad directory");
  }
  // The row table fits between the rows and the columns.
  if (layout.table < kAttributeFileHeaderBytes || layout.table > directory_at ||
      (layout.table - kAttributeFileHeaderBytes) / 4 < layout.rows ||
      (directory_at - layout.table) / 8 < layout.rows + 1) {
    return Corrupt("bad row table");
  }
  const uint64_t columns_at = layout.table + (layout.rows + 1) * 8;
  for (uint64_t i = 0; i < num_fields; ++i) {
    AttributeFileLayout::Field field;
    std::string_view key;
    if (!in.GetBytes(&key) || !in.GetFixed64(&field.offset) || !in.GetFixed64(&field.length) ||
        !in.GetFixed32(&field.crc32c)) {
      return Corrupt("bad directory");
    }
    if (field.offset < columns_at || field.offset > directory_at ||
        field.length > directory_at - field.offset) {
      return Corrupt(absl::StrCat("field ", std::string(key), " outside the file's columns"));
    }
    if (!layout.fields.empty() && !(layout.fields.back().key < key)) {
      return Corrupt("field keys out of order");
    }
    field.key = std::string(key);
    layout.fields.push_back(std::move(field));
  }
  if (!in.empty()) return Corrupt("bad directory");
  return layout;
}

absl::StatusOr<FieldColumn> ReadAttributeColumn(const RandomAccessFile& file,
                                                const AttributeFileLayout& layout, size_t f) {
  const AttributeFileLayout::Field& field = layout.fields[f];
  SHOAL_ASSIGN_OR_RETURN(std::string bytes, ReadExactly(file, field.offset, field.length));
  if (Crc32c(bytes) != field.crc32c) {
    return Corrupt(absl::StrCat("field ", field.key, ": bad checksum"));
  }
  auto column = FieldColumn::Decode(bytes, layout.rows);
  if (!column.ok()) {
    return Corrupt(absl::StrCat("field ", field.key, ": ", column.status().message()));
  }
  return column;
}

absl::StatusOr<std::vector<std::string>> ReadRowAttributes(const RandomAccessFile& file,
                                                           const AttributeFileLayout& layout,
                                                           uint64_t first, uint64_t n) {
  std::vector<std::string> out;
  if (n == 0) return out;
  SHOAL_ASSIGN_OR_RETURN(std::string table,
                         ReadExactly(file, layout.table + first * 8, (n + 1) * 8));
  std::vector<uint64_t> starts(n + 1);
  std::memcpy(starts.data(), table.data(), table.size());
  for (uint64_t i = 0; i < n; ++i) {
    if (starts[i] < kAttributeFileHeaderBytes || starts[i + 1] < starts[i] + 4 ||
        starts[i + 1] > layout.table) {
      return Corrupt(absl::StrCat("bad offset of row ", first + i));
    }
  }
  SHOAL_ASSIGN_OR_RETURN(std::string bytes, ReadExactly(file, starts[0], starts[n] - starts[0]));
  out.reserve(n);
  for (uint64_t i = 0; i < n; ++i) {
    const std::string_view entry =
        std::string_view(bytes).substr(starts[i] - starts[0], starts[i + 1] - starts[i]);
    const std::string_view attributes = entry.substr(0, entry.size() - 4);
    if (UnmaskCrc(DecodeFixed32(entry.data() + attributes.size())) !=
        RowCrc(first + i, attributes)) {
      return Corrupt(absl::StrCat("row ", first + i, ": bad checksum"));
    }
    out.emplace_back(attributes);
  }
  return out;
}

}  // namespace shoal::storage
