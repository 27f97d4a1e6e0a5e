// WAL file and record format.
//
// A WAL file (wal/<seq>.log) starts with a 16-byte header: magic "SHOALWAL", format version
// (fixed32), reserved (fixed32). Then records, each framed as
//
//   fixed32 length      bytes of type + payload
//   fixed32 masked_crc  MaskCrc(Crc32c(type + payload))
//   uint8   type        kUpsertBatch | kDeleteBatch
//   payload
//
// Payloads:
//   UpsertBatch: varint dim, varint count, then per point: fixed64 id, dim floats,
//                bytes attributes (EncodeAttributes)
//   DeleteBatch: varint count, then fixed64 ids
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/base/attributes.h"
#include "storage/format/coding.h"

namespace shoal::storage {

inline constexpr std::string_view kWalMagic = "SHOALWAL";
inline constexpr uint32_t kWalVersion = 1;
inline constexpr size_t kWalFileHeaderSize = 16;
inline constexpr size_t kWalRecordHeaderSize = 9;  // length + crc + type
inline constexpr uint32_t kWalMaxRecordBytes = 1u << 30;

enum class WalRecordType : uint8_t { kUpsertBatch = 1, kDeleteBatch = 2 };

struct PointRecord {
  uint64_t id = 0;
  std::vector<float> vector;
  std::string attributes;  // EncodeAttributes() bytes; empty = none
};

struct UpsertBatch {
  uint32_t dim = 0;
  std::vector<PointRecord> points;
};

struct DeleteBatch {
  std::vector<uint64_t> ids;
};

std::string EncodeWalFileHeader();
absl::Status CheckWalFileHeader(std::string_view header);

// A complete framed record.
std::string EncodeWalRecord(WalRecordType type, std::string_view payload);

std::string EncodeUpsertBatch(const UpsertBatch& batch);
absl::StatusOr<UpsertBatch> DecodeUpsertBatch(std::string_view payload);
std::string EncodeDeleteBatch(const DeleteBatch& batch);
absl::StatusOr<DeleteBatch> DecodeDeleteBatch(std::string_view payload);

std::string EncodeAttributes(const core::Attributes& attributes);
absl::StatusOr<core::Attributes> DecodeAttributes(std::string_view bytes);

// One value as EncodeAttributes writes it after its key (a tag, then the scalar or the list),
// for other formats that hold values (storage/attributes/attribute_file.h). GetAttributeValue
// answers false on a truncated or malformed value.
void PutAttributeValue(std::string* out, const core::AttributeValue& value);
bool GetAttributeValue(Decoder* in, core::AttributeValue* value);

}  // namespace shoal::storage
