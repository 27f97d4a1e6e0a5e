#include "storage/format/wal_format.h"

#include <cstring>
#include <type_traits>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "storage/format/coding.h"
#include "storage/format/crc32c.h"

namespace shoal::storage {
namespace {

// A list is varint count + that many tagged scalars (lists do not nest).
enum AttributeTag : uint8_t { kInt = 1, kDouble = 2, kString = 3, kBool = 4, kList = 5 };

absl::Status Corrupt(const char* what) {
  return absl::DataLossError(absl::StrCat("corrupt WAL record: ", what));
}

}  // namespace

std::string EncodeWalFileHeader() {
  std::string out(kWalMagic);
  PutFixed32(&out, kWalVersion);
  PutFixed32(&out, 0);
  return out;
}

absl::Status CheckWalFileHeader(std::string_view header) {
  if (header.size() < kWalFileHeaderSize || header.substr(0, kWalMagic.size()) != kWalMagic) {
    return absl::DataLossError("not a Shoal WAL file (bad magic)");
  }
  const uint32_t version = DecodeFixed32(header.data() + kWalMagic.size());
  if (version != kWalVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("WAL format version ", version, " is not supported (want ", kWalVersion, ")"));
  }
  return absl::OkStatus();
}

std::string EncodeWalRecord(WalRecordType type, std::string_view payload) {
  std::string body;
  body.reserve(payload.size() + 1);
  body.push_back(char(type));
  body.append(payload);
  std::string out;
  out.reserve(body.size() + 8);
  PutFixed32(&out, uint32_t(body.size()));
  PutFixed32(&out, MaskCrc(Crc32c(body)));
  out.append(body);
  return out;
}

std::string EncodeUpsertBatch(const UpsertBatch& batch) {
  std::string out;
  out.reserve(batch.points.size() * (12 + batch.dim * sizeof(float)) + 16);
  PutVarint64(&out, batch.dim);
  PutVarint64(&out, batch.points.size());
  for (const PointRecord& p : batch.points) {
    PutFixed64(&out, p.id);
    PutFloats(&out, p.vector.data(), batch.dim);
    PutBytes(&out, p.attributes);
  }
  return out;
}

absl::StatusOr<UpsertBatch> DecodeUpsertBatch(std::string_view payload) {
  Decoder in(payload);
  uint64_t dim = 0, count = 0;
  if (!in.GetVarint64(&dim) || !in.GetVarint64(&count)) return Corrupt("upsert header");
  if (dim == 0 || dim > (1u << 20)) return Corrupt("upsert dim");
  if (count > in.remaining() / (8 + dim * sizeof(float))) return Corrupt("upsert count");
  UpsertBatch batch;
  batch.dim = uint32_t(dim);
  batch.points.resize(count);
  for (PointRecord& p : batch.points) {
    std::string_view floats, attributes;
    if (!in.GetFixed64(&p.id) || !in.GetFloatBytes(dim, &floats) || !in.GetBytes(&attributes)) {
      return Corrupt("upsert point");
    }
    p.vector.resize(dim);
    std::memcpy(p.vector.data(), floats.data(), floats.size());
    p.attributes.assign(attributes);
  }
  if (!in.empty()) return Corrupt("trailing bytes after upsert batch");
  return batch;
}

std::string EncodeDeleteBatch(const DeleteBatch& batch) {
  std::string out;
  PutVarint64(&out, batch.ids.size());
  for (uint64_t id : batch.ids) PutFixed64(&out, id);
  return out;
}

absl::StatusOr<DeleteBatch> DecodeDeleteBatch(std::string_view payload) {
  Decoder in(payload);
  uint64_t count = 0;
  if (!in.GetVarint64(&count) || count > in.remaining() / 8) return Corrupt("delete header");
  DeleteBatch batch;
  batch.ids.resize(count);
  for (uint64_t& id : batch.ids) {
    if (!in.GetFixed64(&id)) return Corrupt("delete id");
  }
  if (!in.empty()) return Corrupt("trailing bytes after delete batch");
  return batch;
}

namespace {

void PutScalar(std::string* out, const core::AttributeScalar& value) {
  if (const auto* i = std::get_if<int64_t>(&value)) {
    out->push_back(char(kInt));
    PutFixed64(out, uint64_t(*i));
  } else if (const auto* d = std::get_if<double>(&value)) {
    out->push_back(char(kDouble));
    uint64_t bits;
    std::memcpy(&bits, d, 8);
    PutFixed64(out, bits);
  } else if (const auto* s = std::get_if<std::string>(&value)) {
    out->push_back(char(kString));
    PutBytes(out, *s);
  } else {
    out->push_back(char(kBool));
    out->push_back(std::get<bool>(value) ? 1 : 0);
  }
}

// Reads the scalar of `tag`; false: truncated, or not a scalar tag.
bool GetScalar(Decoder* in, uint8_t tag, core::AttributeScalar* value) {
  uint64_t bits = 0;
  std::string_view text;
  uint8_t flag = 0;
  switch (tag) {
    case kInt:
      if (!in->GetFixed64(&bits)) return false;
      *value = int64_t(bits);
      return true;
    case kDouble: {
      if (!in->GetFixed64(&bits)) return false;
      double d;
      std::memcpy(&d, &bits, 8);
      *value = d;
      return true;
    }
    case kString:
      if (!in->GetBytes(&text)) return false;
      *value = std::string(text);
      return true;
    case kBool:
      if (!in->GetByte(&flag)) return false;
      *value = flag != 0;
      return true;
    default:
      return false;
  }
}

core::AttributeValue FromScalar(core::AttributeScalar scalar) {
  return std::visit([](auto&& v) { return core::AttributeValue(std::move(v)); }, std::move(scalar));
}

}  // namespace

void PutAttributeValue(std::string* out, const core::AttributeValue& value) {
  if (const auto* list = std::get_if<core::AttributeList>(&value)) {
    out->push_back(char(kList));
    PutVarint64(out, list->size());
    for (const core::AttributeScalar& element : *list) PutScalar(out, element);
    return;
  }
  std::visit(
      [out](const auto& v) {
        if constexpr (!std::is_same_v<std::decay_t<decltype(v)>, core::AttributeList>) {
          PutScalar(out, v);
        }
      },
      value);
}

bool GetAttributeValue(Decoder* in, core::AttributeValue* value) {
  uint8_t tag = 0;
  if (!in->GetByte(&tag)) return false;
  if (tag != kList) {
    core::AttributeScalar scalar;
    if (!GetScalar(in, tag, &scalar)) return false;
    *value = FromScalar(std::move(scalar));
    return true;
  }
  uint64_t n = 0;
  // Every element takes at least two bytes (tag + bool): a count past that is corrupt.
  if (!in->GetVarint64(&n) || n > in->remaining() / 2) return false;
  core::AttributeList list;
  list.reserve(size_t(n));
  for (uint64_t e = 0; e < n; ++e) {
    core::AttributeScalar scalar;
    uint8_t element_tag = 0;
    if (!in->GetByte(&element_tag) || !GetScalar(in, element_tag, &scalar)) return false;
    list.push_back(std::move(scalar));
  }
  *value = std::move(list);
  return true;
}

std::string EncodeAttributes(const core::Attributes& attributes) {
  std::string out;
  if (attributes.empty()) return out;
  PutVarint64(&out, attributes.size());
  for (const auto& [key, value] : attributes) {
    PutBytes(&out, key);
    PutAttributeValue(&out, value);
  }
  return out;
}

absl::StatusOr<core::Attributes> DecodeAttributes(std::string_view bytes) {
  core::Attributes attributes;
  if (bytes.empty()) return attributes;
  Decoder in(bytes);
  uint64_t count = 0;
  if (!in.GetVarint64(&count)) return Corrupt("attribute count");
  for (uint64_t i = 0; i < count; ++i) {
    std::string_view key;
    if (!in.GetBytes(&key)) return Corrupt("attribute key");
    core::AttributeValue value;
    if (!GetAttributeValue(&in, &value)) return Corrupt("attribute value");
    attributes[std::string(key)] = std::move(value);
  }
  if (!in.empty()) return Corrupt("trailing bytes after attributes");
  return attributes;
}

}  // namespace shoal::storage
