#include "storage/format/manifest_format.h"

#include "absl/strings/str_cat.h"
#include "storage/format/coding.h"
#include "storage/format/crc32c.h"

namespace shoal::storage {

std::string EncodeManifest(const CollectionManifest& m) {
  std::string out(kManifestMagic);
  PutFixed32(&out, kManifestVersion);
  PutBytes(&out, m.name);
  PutVarint64(&out, m.dim);
  out.push_back(char(m.metric));
  out.push_back(char(m.index.type));
  PutVarint64(&out, m.index.nlist);
  PutVarint64(&out, m.index.pq_m);
  PutVarint64(&out, m.index.default_nprobe);
  PutVarint64(&out, m.first_wal_seq);
  PutVarint64(&out, m.write_seq);
  PutVarint64(&out, m.next_segment_id);
  PutVarint64(&out, m.segments.size());
  for (const SegmentEntry& s : m.segments) {
    PutVarint64(&out, s.id);
    PutVarint64(&out, s.seq);
    PutVarint64(&out, s.num_vectors);
  }
  PutVarint64(&out, m.tombstones.size());
  for (const Tombstone& t : m.tombstones) {
    PutFixed64(&out, t.id);
    PutVarint64(&out, t.seq);
  }
  PutVarint64(&out, m.index.pq_bits);
  PutFixed32(&out, MaskCrc(Crc32c(out)));
  return out;
}

absl::StatusOr<CollectionManifest> DecodeManifest(std::string_view data) {
  if (data.size() < kManifestMagic.size() + 8 ||
      data.substr(0, kManifestMagic.size()) != kManifestMagic) {
    return absl::DataLossError("manifest: bad magic");
  }
  const std::string_view body = data.substr(0, data.size() - 4);
  if (UnmaskCrc(DecodeFixed32(data.data() + body.size())) != Crc32c(body)) {
    return absl::DataLossError("manifest: checksum mismatch");
  }
  Decoder in(body.substr(kManifestMagic.size()));
  uint32_t version = 0;
  in.GetFixed32(&version);
  if (version < 1 || version > kManifestVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("manifest: format version ", version, " is not supported"));
  }
  CollectionManifest m;
  std::string_view name;
  uint64_t dim = 0, nlist = 0, pq_m = 0, nprobe = 0, first_wal = 0;
  uint8_t metric = 0, type = 0;
  if (!in.GetBytes(&name) || !in.GetVarint64(&dim) || !in.GetByte(&metric) || !in.GetByte(&type) ||
      !in.GetVarint64(&nlist) || !in.GetVarint64(&pq_m) || !in.GetVarint64(&nprobe) ||
      !in.GetVarint64(&first_wal)) {
    return absl::DataLossError("manifest: truncated body");
  }
  if (version >= 2) {
    uint64_t segments = 0, tombstones = 0;
    if (!in.GetVarint64(&m.write_seq) || !in.GetVarint64(&m.next_segment_id) ||
        !in.GetVarint64(&segments) || segments > (1u << 20)) {
      return absl::DataLossError("manifest: truncated segment list");
    }
    m.segments.resize(segments);
    for (SegmentEntry& s : m.segments) {
      if (!in.GetVarint64(&s.id) || !in.GetVarint64(&s.seq) || !in.GetVarint64(&s.num_vectors)) {
        return absl::DataLossError("manifest: truncated segment list");
      }
    }
    if (!in.GetVarint64(&tombstones) || tombstones > in.remaining()) {
      return absl::DataLossError("manifest: truncated tombstones");
    }
    m.tombstones.resize(tombstones);
    for (Tombstone& t : m.tombstones) {
      if (!in.GetFixed64(&t.id) || !in.GetVarint64(&t.seq)) {
        return absl::DataLossError("manifest: truncated tombstones");
      }
    }
  }
  uint64_t pq_bits = 0;
  if (version >= 3 && (!in.GetVarint64(&pq_bits) || pq_bits > 8)) {
    return absl::DataLossError("manifest: truncated or bad pq_bits");
  }
  if (!in.empty()) return absl::DataLossError("manifest: trailing bytes");
  if (metric < 1 || metric > 3 || type < 1 || type > 4) {
    return absl::DataLossError("manifest: bad metric or index type");
  }
  m.name = std::string(name);
  m.dim = uint32_t(dim);
  m.metric = core::Metric(metric);
  m.index = {core::IndexType(type), uint32_t(nlist), uint32_t(pq_m), uint32_t(nprobe),
             uint32_t(pq_bits)};
  m.first_wal_seq = first_wal;
  return m;
}

}  // namespace shoal::storage
