#include "gtest/gtest.h"
#include "storage/format/coding.h"
#include "storage/format/crc32c.h"
#include "storage/format/manifest_format.h"
#include "storage/format/wal_format.h"

namespace shoal::storage::format_test {
namespace {

TEST(Crc32c, MatchesTheStandardCheckValueAndChains) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(""), 0u);
  EXPECT_EQ(Crc32c("6789", Crc32c("12345")), Crc32c("123456789"));
  for (uint32_t crc : {0u, 1u, 0xdeadbeefu, 0xffffffffu}) EXPECT_EQ(UnmaskCrc(MaskCrc(crc)), crc);
  EXPECT_NE(MaskCrc(0x12345678u), 0x12345678u);
}

TEST(Coding, DecoderRefusesToReadPastTheEnd) {
  std::string s;
  PutFixed32(&s, 7);
  PutFixed64(&s, 1ull << 40);
  PutVarint64(&s, 300);
  PutBytes(&s, "abc");
  Decoder in(s);
  uint32_t a;
  uint64_t b, c;
  std::string_view d;
  ASSERT_TRUE(in.GetFixed32(&a) && in.GetFixed64(&b) && in.GetVarint64(&c) && in.GetBytes(&d));
  EXPECT_EQ(a, 7u);
  EXPECT_EQ(b, 1ull << 40);
  EXPECT_EQ(c, 300u);
  EXPECT_EQ(d, "abc");
  EXPECT_TRUE(in.empty());
  EXPECT_FALSE(in.GetFixed32(&a));
  Decoder truncated(std::string_view(s).substr(0, 6));
  EXPECT_TRUE(truncated.GetFixed32(&a));
  EXPECT_FALSE(truncated.GetFixed64(&b));
  std::string bad_len;
  PutVarint64(&bad_len, 100);
  Decoder lying(bad_len);
  EXPECT_FALSE(lying.GetBytes(&d));
  Decoder unterminated("\xff\xff");
  EXPECT_FALSE(unterminated.GetVarint64(&b));
}

TEST(WalFormat, UpsertBatchRoundTripsWithAttributes) {
  UpsertBatch batch;
  batch.dim = 3;
  core::Attributes attrs = {{"color", std::string("red")},
                            {"n", int64_t(-4)},
                            {"w", 0.5},
                            {"ok", true},
                            {"tags", core::AttributeList{std::string("a"), int64_t(3), 1.5, false}},
                            {"none", core::AttributeList{}}};
  batch.points.push_back({7, {1, 2, 3}, EncodeAttributes(attrs)});
  batch.points.push_back({1ull << 63, {4, 5, 6}, ""});
  auto decoded = DecodeUpsertBatch(EncodeUpsertBatch(batch));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_EQ(decoded->points.size(), 2u);
  EXPECT_EQ(decoded->dim, 3u);
  EXPECT_EQ(decoded->points[1].id, 1ull << 63);
  EXPECT_EQ(decoded->points[0].vector, std::vector<float>({1, 2, 3}));
  EXPECT_EQ(*DecodeAttributes(decoded->points[0].attributes), attrs);
  EXPECT_TRUE(DecodeAttributes("")->empty());
}

TEST(WalFormat, DeleteBatchRoundTrips) {
  DeleteBatch batch{{1, 2, 99}};
  auto decoded = DecodeDeleteBatch(EncodeDeleteBatch(batch));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(decoded->ids, batch.ids);
}

TEST(WalFormat, EveryTruncationOfAPayloadIsDataLossNotACrash) {
  UpsertBatch batch;
  batch.dim = 2;
  batch.points.push_back(
      {1,
       {1, 2},
       EncodeAttributes(
           {{"k", std::string("v")}, {"l", core::AttributeList{std::string("x"), int64_t(1)}}})});
  const std::string payload = EncodeUpsertBatch(batch);
  for (size_t n = 0; n < payload.size(); ++n) {
    auto r = DecodeUpsertBatch(payload.substr(0, n));
    ASSERT_FALSE(r.ok()) << n;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  }
  EXPECT_FALSE(DecodeUpsertBatch(payload + "x").ok());
  const std::string del = EncodeDeleteBatch({{5, 6}});
  for (size_t n = 0; n < del.size(); ++n) EXPECT_FALSE(DecodeDeleteBatch(del.substr(0, n)).ok());
  std::string bad_tag;
  PutVarint64(&bad_tag, 1);
  PutBytes(&bad_tag, "k");
  bad_tag.push_back(char(9));
  EXPECT_FALSE(DecodeAttributes(bad_tag).ok());
  // A list inside a list, and a list longer than its bytes can hold, are corrupt.
  std::string nested;
  PutVarint64(&nested, 1);
  PutBytes(&nested, "k");
  nested.push_back(char(5));
  PutVarint64(&nested, 1);
  nested.push_back(char(5));
  PutVarint64(&nested, 0);
  EXPECT_EQ(DecodeAttributes(nested).status().code(), absl::StatusCode::kDataLoss);
  std::string huge;
  PutVarint64(&huge, 1);
  PutBytes(&huge, "k");
  huge.push_back(char(5));
  PutVarint64(&huge, 1ull << 40);
  EXPECT_EQ(DecodeAttributes(huge).status().code(), absl::StatusCode::kDataLoss);
}

TEST(WalFormat, FileHeaderIsCheckedForMagicAndVersion) {
  EXPECT_TRUE(CheckWalFileHeader(EncodeWalFileHeader()).ok());
  EXPECT_EQ(CheckWalFileHeader("SHOALWAX00000000").code(), absl::StatusCode::kDataLoss);
  std::string future = EncodeWalFileHeader();
  future[8] = 9;
  EXPECT_EQ(CheckWalFileHeader(future).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(CheckWalFileHeader("short").ok());
}

TEST(WalFormat, RecordFramingCarriesLengthAndMaskedCrc) {
  const std::string record = EncodeWalRecord(WalRecordType::kDeleteBatch, "abc");
  ASSERT_EQ(record.size(), 8u + 4u);
  EXPECT_EQ(DecodeFixed32(record.data()), 4u);
  EXPECT_EQ(UnmaskCrc(DecodeFixed32(record.data() + 4)), Crc32c(record.substr(8)));
  EXPECT_EQ(record[8], char(WalRecordType::kDeleteBatch));
}

// A version 2 manifest (before pq_bits) still opens, as 8-bit PQ.
TEST(ManifestFormat, ReadsVersionTwoManifestsWithoutPqBits) {
  CollectionManifest m;
  m.name = "old";
  m.dim = 8;
  m.metric = core::Metric::kL2;
  m.index = {core::IndexType::kIvfPq, 16, 4, 8, 0};
  std::string bytes = EncodeManifest(m);
  // Drop the crc and the trailing pq_bits varint (one zero byte), then re-seal as version 2.
  std::string body = bytes.substr(0, bytes.size() - 5);
  body.replace(kManifestMagic.size(), 4, std::string("\x02\0\0\0", 4));
  PutFixed32(&body, MaskCrc(Crc32c(body)));
  auto back = DecodeManifest(body);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->index.pq_m, 4u);
  EXPECT_EQ(back->index.pq_bits, 0u);
}

TEST(ManifestFormat, RoundTripsAndDetectsCorruption) {
  CollectionManifest m;
  m.name = "docs";
  m.dim = 768;
  m.metric = core::Metric::kCosine;
  m.index = {core::IndexType::kIvfPq, 1024, 96, 32, 4};
  m.first_wal_seq = 5;
  const std::string bytes = EncodeManifest(m);
  auto back = DecodeManifest(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->name, "docs");
  EXPECT_EQ(back->dim, 768u);
  EXPECT_EQ(back->metric, core::Metric::kCosine);
  EXPECT_EQ(back->index.type, core::IndexType::kIvfPq);
  EXPECT_EQ(back->index.pq_m, 96u);
  EXPECT_EQ(back->index.pq_bits, 4u);
  EXPECT_EQ(back->first_wal_seq, 5u);
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string flipped = bytes;
    flipped[i] ^= 0x20;
    EXPECT_FALSE(DecodeManifest(flipped).ok()) << "byte " << i;
  }
  EXPECT_EQ(DecodeManifest("garbage").status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace shoal::storage::format_test
