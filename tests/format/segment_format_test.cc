#include "storage/format/segment_format.h"

#include "gtest/gtest.h"
#include "storage/format/coding.h"
#include "storage/format/crc32c.h"

namespace shoal::storage::segment_format_test {
namespace {

IvfMeta Meta(VectorEncoding encoding) {
  IvfMeta meta;
  core::IvfModel& m = meta.model;
  m.dim = 8;
  m.metric = core::Metric::kInnerProduct;
  m.encoding = encoding;
  m.centroids.assign(3 * 8, 0.5f);
  if (encoding == VectorEncoding::kSq8) {
    m.sq_vmin.assign(8, -1.0f);
    m.sq_vdiff.assign(8, 2.0f);
  }
  if (encoding == VectorEncoding::kPq) {
    m.pq_m = 4;
    m.pq_nbits = 8;
    m.pq_codebooks.assign(256 * 8, 0.25f);
  }
  const uint64_t counts[3] = {10, 0, 5};
  uint64_t offset = 0;
  for (uint64_t c : counts) {
    PartitionExtent p;
    p.offset = offset;
    p.count = c;
    p.length = c * (m.CodeSize() + 8);
    p.crc32c = uint32_t(c * 7);
    meta.partitions.push_back(p);
    offset += (p.length + 4095) / 4096 * 4096;
  }
  meta.num_vectors = 15;
  return meta;
}

TEST(SegmentFormat, RoundTripsEveryEncoding) {
  for (VectorEncoding e : {VectorEncoding::kFlat, VectorEncoding::kSq8, VectorEncoding::kPq}) {
    const IvfMeta m = Meta(e);
    auto back = DecodeIvfMeta(EncodeIvfMeta(m));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->model.dim, 8u);
    EXPECT_EQ(back->model.metric, core::Metric::kInnerProduct);
    EXPECT_EQ(back->model.encoding, e);
    EXPECT_EQ(back->nlist(), 3u);
    EXPECT_EQ(back->model.centroids, m.model.centroids);
    EXPECT_EQ(back->model.sq_vdiff, m.model.sq_vdiff);
    EXPECT_EQ(back->model.pq_codebooks, m.model.pq_codebooks);
    EXPECT_EQ(back->partitions[2].offset, m.partitions[2].offset);
    EXPECT_EQ(back->partitions[2].crc32c, m.partitions[2].crc32c);
  }
  EXPECT_EQ(Meta(VectorEncoding::kFlat).model.CodeSize(), 32u);
  EXPECT_EQ(Meta(VectorEncoding::kSq8).model.CodeSize(), 8u);
  EXPECT_EQ(Meta(VectorEncoding::kPq).model.CodeSize(), 4u);
}

TEST(SegmentFormat, EveryFlippedByteAndEveryTruncationIsRejected) {
  const std::string bytes = EncodeIvfMeta(Meta(VectorEncoding::kSq8));
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string flipped = bytes;
    flipped[i] ^= 0x01;
    EXPECT_FALSE(DecodeIvfMeta(flipped).ok()) << "byte " << i;
  }
  for (size_t n = 0; n < bytes.size(); n += 7) EXPECT_FALSE(DecodeIvfMeta(bytes.substr(0, n)).ok());
}

TEST(SegmentFormat, InconsistentExtentsAreDataLoss) {
  IvfMeta m = Meta(VectorEncoding::kFlat);
  m.partitions[0].offset = 100;  // not 4 KiB aligned
  EXPECT_EQ(DecodeIvfMeta(EncodeIvfMeta(m)).status().code(), absl::StatusCode::kDataLoss);
  m = Meta(VectorEncoding::kFlat);
  m.num_vectors = 16;  // counts add up to 15
  EXPECT_EQ(DecodeIvfMeta(EncodeIvfMeta(m)).status().code(), absl::StatusCode::kDataLoss);
  m = Meta(VectorEncoding::kFlat);
  m.partitions[0].length += 1;
  EXPECT_EQ(DecodeIvfMeta(EncodeIvfMeta(m)).status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace shoal::storage::segment_format_test

namespace shoal::storage::segment_format_test {
namespace {

TEST(SegmentFormat, AnExactSegmentKeepsItsFlagAndOnlyFlatCodesMayBeExact) {
  IvfMeta m = Meta(VectorEncoding::kFlat);
  m.model.exact = true;
  auto back = DecodeIvfMeta(EncodeIvfMeta(m));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->model.exact);
  EXPECT_FALSE(DecodeIvfMeta(EncodeIvfMeta(Meta(VectorEncoding::kFlat)))->model.exact);
  IvfMeta sq = Meta(VectorEncoding::kSq8);
  sq.model.exact = true;
  EXPECT_EQ(DecodeIvfMeta(EncodeIvfMeta(sq)).status().code(), absl::StatusCode::kDataLoss);
}

TEST(SegmentFormat, VersionOneFilesWithoutFlagsAreStillRead) {
  // Version 1 is version 2 without the flags byte after the encoding.
  std::string v2 = EncodeIvfMeta(Meta(VectorEncoding::kSq8));
  std::string v1 = v2.substr(0, v2.size() - 4);
  const size_t flags_at = kIvfMetaMagic.size() + 4 + 1 + 2;  // version, varint dim 8, two bytes
  ASSERT_EQ(v1[flags_at], 0);
  v1.erase(flags_at, 1);
  v1[kIvfMetaMagic.size()] = 1;
  PutFixed32(&v1, MaskCrc(Crc32c(v1)));
  auto back = DecodeIvfMeta(v1);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->model.exact);
  EXPECT_EQ(back->model.encoding, VectorEncoding::kSq8);
  EXPECT_EQ(back->nlist(), 3u);
}

}  // namespace
}  // namespace shoal::storage::segment_format_test

namespace shoal::storage::segment_format_test {
namespace {

// The version field and the CRC of an encoded ivf.meta rewritten, as an older writer made it.
std::string WithVersion(std::string bytes, uint32_t version) {
  bytes.resize(bytes.size() - 4);
  std::string v;
  PutFixed32(&v, version);
  bytes.replace(kIvfMetaMagic.size(), 4, v);
  PutFixed32(&bytes, MaskCrc(Crc32c(bytes)));
  return bytes;
}

IvfMeta ResidualL2Meta(VectorEncoding encoding) {
  IvfMeta m = Meta(encoding);
  m.model.metric = core::Metric::kL2;
  m.model.residual = true;
  for (PartitionExtent& p : m.partitions) p.length = p.count * (m.model.CodeSize() + 8);
  uint64_t offset = 0;
  for (PartitionExtent& p : m.partitions) {
    p.offset = offset;
    offset += (p.length + 4095) / 4096 * 4096;
  }
  return m;
}

TEST(SegmentFormat, ResidualModelsAreWrittenAsVersionThreeWithATermPerRow) {
  for (VectorEncoding e : {VectorEncoding::kSq8, VectorEncoding::kPq}) {
    const IvfMeta m = ResidualL2Meta(e);
    EXPECT_EQ(m.model.CodeSize(), m.model.QuantizerCodeSize() + 4);
    const std::string bytes = EncodeIvfMeta(m);
    EXPECT_EQ(DecodeFixed32(bytes.data() + kIvfMetaMagic.size()), 3u);
    auto back = DecodeIvfMeta(bytes);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(back->model.residual);
    EXPECT_EQ(back->model.CodeSize(), m.model.CodeSize());
    // Inner product needs no per-row term.
    IvfMeta ip = Meta(e);
    ip.model.residual = true;
    auto ip_back = DecodeIvfMeta(EncodeIvfMeta(ip));
    ASSERT_TRUE(ip_back.ok()) << ip_back.status();
    EXPECT_TRUE(ip_back->model.residual);
    EXPECT_EQ(ip_back->model.CodeSize(), ip.model.QuantizerCodeSize());
  }
}

// A version 2 file (what shoald wrote before residual codes) is the version 3 encoding of a raw
// model with the version field 2: it is read as raw codes, scored the old way.
TEST(SegmentFormat, VersionTwoFilesAreReadAsRawCodes) {
  for (VectorEncoding e : {VectorEncoding::kSq8, VectorEncoding::kPq}) {
    const IvfMeta m = Meta(e);
    ASSERT_FALSE(m.model.residual);
    auto back = DecodeIvfMeta(WithVersion(EncodeIvfMeta(m), 2));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_FALSE(back->model.residual);
    EXPECT_EQ(back->model.CodeSize(), m.model.CodeSize());
  }
  // Version 2 had no residual bit: a file claiming it is corrupt.
  EXPECT_EQ(DecodeIvfMeta(WithVersion(EncodeIvfMeta(ResidualL2Meta(VectorEncoding::kPq)), 2))
                .status()
                .code(),
            absl::StatusCode::kDataLoss);
}

TEST(SegmentFormat, OnlySq8AndPqCodesMayBeResidual) {
  IvfMeta flat = Meta(VectorEncoding::kFlat);
  flat.model.residual = true;
  EXPECT_EQ(DecodeIvfMeta(EncodeIvfMeta(flat)).status().code(), absl::StatusCode::kDataLoss);
}

TEST(SegmentFormat, PqWidthsTheScorerCannotReadAreDataLoss) {
  // 8-bit codes and 4-bit pairs are scored; any other width would index past the tables.
  for (uint32_t nbits : {1u, 5u, 7u, 16u}) {
    IvfMeta pq = Meta(VectorEncoding::kPq);
    pq.model.pq_nbits = nbits;
    pq.model.pq_codebooks.assign((size_t(1) << nbits) * 8, 0.25f);
    EXPECT_EQ(DecodeIvfMeta(EncodeIvfMeta(pq)).status().code(), absl::StatusCode::kDataLoss)
        << nbits;
  }
  IvfMeta odd = Meta(VectorEncoding::kPq);  // 4 bits need sub-quantizers in pairs
  odd.model.pq_m = 1;
  odd.model.pq_nbits = 4;
  odd.model.pq_codebooks.assign(16 * 8, 0.25f);
  EXPECT_EQ(DecodeIvfMeta(EncodeIvfMeta(odd)).status().code(), absl::StatusCode::kDataLoss);
}

TEST(SegmentFormat, AFutureVersionIsRefusedNamingTheVersion) {
  const auto s = DecodeIvfMeta(WithVersion(EncodeIvfMeta(Meta(VectorEncoding::kPq)), 4)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("version 4"), std::string::npos) << s;
}

}  // namespace
}  // namespace shoal::storage::segment_format_test
