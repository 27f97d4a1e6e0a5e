#include "storage/format/segment_format.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "storage/format/coding.h"
#include "storage/format/crc32c.h"

namespace shoal::storage {
namespace {

constexpr uint64_t kMaxFloats = uint64_t(1) << 32;

absl::Status Corrupt(const char* what) {
  return absl::DataLossError(absl::StrCat("ivf.meta: ", what));
}

void PutFloatVector(std::string* out, const std::vector<float>& v) {
  PutFloats(out, v.data(), v.size());
}

bool GetFloatVector(Decoder* in, uint64_t n, std::vector<float>* v) {
  std::string_view bytes;
  if (n > kMaxFloats || !in->GetFloatBytes(n, &bytes)) return false;
  v->resize(n);
  if (n) std::memcpy(v->data(), bytes.data(), bytes.size());
  return true;
}

}  // namespace

std::string EncodeIvfMeta(const IvfMeta& meta) {
  const core::IvfModel& m = meta.model;
  std::string out(kIvfMetaMagic);
  PutFixed32(&out, kIvfMetaVersion);
  PutVarint64(&out, m.dim);
  out.push_back(char(m.metric));
  out.push_back(char(m.encoding));
  out.push_back(char((m.exact ? kIvfMetaFlagExact : 0) | (m.residual ? kIvfMetaFlagResidual : 0)));
  PutVarint64(&out, meta.nlist());
  PutVarint64(&out, meta.num_vectors);
  PutFloatVector(&out, m.centroids);
  if (m.encoding == VectorEncoding::kSq8) {
    PutFloatVector(&out, m.sq_vmin);
    PutFloatVector(&out, m.sq_vdiff);
  } else if (m.encoding == VectorEncoding::kPq) {
    PutVarint64(&out, m.pq_m);
    PutVarint64(&out, m.pq_nbits);
    PutFloatVector(&out, m.pq_codebooks);
  }
  for (const PartitionExtent& p : meta.partitions) {
    PutFixed64(&out, p.offset);
    PutFixed64(&out, p.length);
    PutVarint64(&out, p.count);
    PutFixed32(&out, p.crc32c);
  }
  PutFixed32(&out, MaskCrc(Crc32c(out)));
  return out;
}

absl::StatusOr<IvfMeta> DecodeIvfMeta(std::string_view data) {
  if (data.size() < kIvfMetaMagic.size() + 8 ||
      data.substr(0, kIvfMetaMagic.size()) != kIvfMetaMagic) {
    return Corrupt("bad magic");
  }
  const std::string_view body = data.substr(0, data.size() - 4);
  if (UnmaskCrc(DecodeFixed32(data.data() + body.size())) != Crc32c(body)) {
    return Corrupt("checksum mismatch");
  }
  Decoder in(body.substr(kIvfMetaMagic.size()));
  uint32_t version = 0;
  in.GetFixed32(&version);
  if (version < 1 || version > kIvfMetaVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ivf.meta: format version ", version, " is not supported (this build reads 1 to ",
        kIvfMetaVersion, "); a newer shoald wrote it"));
  }
  const uint8_t known_flags = kIvfMetaFlagExact | (version >= 3 ? kIvfMetaFlagResidual : 0);
  IvfMeta meta;
  core::IvfModel& m = meta.model;
  uint64_t dim = 0, nlist = 0, num = 0;
  uint8_t metric = 0, encoding = 0, flags = 0;
  if (!in.GetVarint64(&dim) || !in.GetByte(&metric) || !in.GetByte(&encoding) ||
      (version >= 2 && !in.GetByte(&flags)) || !in.GetVarint64(&nlist) || !in.GetVarint64(&num)) {
    return Corrupt("truncated header");
  }
  if (dim == 0 || dim > 65536 || metric < 1 || metric > 3 || encoding < 1 || encoding > 3 ||
      nlist == 0 || nlist > (1u << 20) || (flags & ~known_flags) != 0 ||
      ((flags & kIvfMetaFlagExact) && encoding != uint8_t(VectorEncoding::kFlat)) ||
      ((flags & kIvfMetaFlagResidual) && encoding == uint8_t(VectorEncoding::kFlat))) {
    return Corrupt("bad header values");
  }
  m.exact = (flags & kIvfMetaFlagExact) != 0;
  m.residual = (flags & kIvfMetaFlagResidual) != 0;
  m.dim = uint32_t(dim);
  m.metric = core::Metric(metric);
  m.encoding = core::VectorEncoding(encoding);
  meta.num_vectors = num;
  if (!GetFloatVector(&in, nlist * dim, &m.centroids)) return Corrupt("truncated centroids");
  if (m.encoding == VectorEncoding::kSq8) {
    if (!GetFloatVector(&in, dim, &m.sq_vmin) || !GetFloatVector(&in, dim, &m.sq_vdiff)) {
      return Corrupt("truncated SQ8 ranges");
    }
  } else if (m.encoding == VectorEncoding::kPq) {
    uint64_t pq_m = 0, nbits = 0;
    // Only the widths the scorer reads: 8-bit codes, or 4-bit fast-scan pairs (even m).
    if (!in.GetVarint64(&pq_m) || !in.GetVarint64(&nbits) || pq_m == 0 || dim % pq_m != 0 ||
        (nbits != 8 && !(nbits == 4 && pq_m % 2 == 0))) {
      return Corrupt("bad PQ parameters");
    }
    m.pq_m = uint32_t(pq_m);
    m.pq_nbits = uint32_t(nbits);
    if (!GetFloatVector(&in, (uint64_t(1) << nbits) * dim, &m.pq_codebooks)) {
      return Corrupt("truncated PQ codebooks");
    }
  }
  meta.partitions.resize(nlist);
  uint64_t total = 0;
  for (PartitionExtent& p : meta.partitions) {
    if (!in.GetFixed64(&p.offset) || !in.GetFixed64(&p.length) || !in.GetVarint64(&p.count) ||
        !in.GetFixed32(&p.crc32c)) {
      return Corrupt("truncated partition table");
    }
    if (p.count > num || p.length != p.count * (m.CodeSize() + 8) || p.offset % 4096 != 0) {
      return Corrupt("inconsistent partition extent");
    }
    total += p.count;
  }
  if (total != num) return Corrupt("partition counts do not add up to num_vectors");
  if (!in.empty()) return Corrupt("trailing bytes");
  return meta;
}

}  // namespace shoal::storage
