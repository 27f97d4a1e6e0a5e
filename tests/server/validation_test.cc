#include "server/validation.h"

#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::server::validation_test {
namespace {

using ::testing::HasSubstr;

void ExpectInvalid(const absl::Status& s, const std::string& field) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(field));
}

v1::CreateCollectionRequest Create(const std::string& name, uint32_t dim) {
  v1::CreateCollectionRequest req;
  req.set_name(name);
  req.set_dim(dim);
  req.set_metric(v1::METRIC_L2);
  return req;
}

TEST(Validation, CollectionNames) {
  EXPECT_TRUE(ValidateCollectionName("a-B_9", "name").ok());
  EXPECT_TRUE(ValidateCollectionName(std::string(64, 'x'), "name").ok());
  ExpectInvalid(ValidateCollectionName("", "name"), "name");
  ExpectInvalid(ValidateCollectionName(std::string(65, 'x'), "name"), "name");
  for (const char* bad : {"a b", "a/b", "..", "é", "a.b", "a\nb"}) {
    ExpectInvalid(ValidateCollectionName(bad, "collection"), "collection");
  }
}

TEST(Validation, CreateChecksDimMetricAndIndex) {
  EXPECT_TRUE(ValidateCreate(Create("c", 4)).ok());
  ExpectInvalid(ValidateCreate(Create("c", 0)), "dim");
  ExpectInvalid(ValidateCreate(Create("c", 65537)), "dim");
  EXPECT_TRUE(ValidateCreate(Create("c", 65536)).ok());
  auto no_metric = Create("c", 4);
  no_metric.set_metric(v1::METRIC_UNSPECIFIED);
  ExpectInvalid(ValidateCreate(no_metric), "metric");
  auto pq = Create("c", 8);
  pq.mutable_index()->set_type(v1::INDEX_IVF_PQ);
  pq.mutable_index()->set_pq_m(3);
  ExpectInvalid(ValidateCreate(pq), "index.pq_m");
  pq.mutable_index()->set_pq_m(4);
  EXPECT_TRUE(ValidateCreate(pq).ok());
  auto flat_pq = Create("c", 8);
  flat_pq.mutable_index()->set_pq_m(4);
  ExpectInvalid(ValidateCreate(flat_pq), "index.pq_m");
  auto nlist = Create("c", 8);
  nlist.mutable_index()->set_nlist(1 << 20);
  ExpectInvalid(ValidateCreate(nlist), "index.nlist");
  ExpectInvalid(ValidateCreate(Create("bad name", 4)), "name");
}

TEST(Validation, CreateAcceptsPqBitsZeroFourOrEightOnlyForIvfPq) {
  auto pq = Create("c", 8);
  pq.mutable_index()->set_type(v1::INDEX_IVF_PQ);
  pq.mutable_index()->set_pq_m(4);
  for (uint32_t bits : {0u, 4u, 8u}) {
    pq.mutable_index()->set_pq_bits(bits);
    EXPECT_TRUE(ValidateCreate(pq).ok()) << bits;
  }
  for (uint32_t bits : {1u, 5u, 16u}) {
    pq.mutable_index()->set_pq_bits(bits);
    ExpectInvalid(ValidateCreate(pq), "index.pq_bits");
  }
  auto flat = Create("c", 8);
  flat.mutable_index()->set_type(v1::INDEX_IVF_FLAT);
  flat.mutable_index()->set_pq_bits(4);
  ExpectInvalid(ValidateCreate(flat), "index.pq_bits");
}

TEST(Validation, CreateWantsAnEvenPqMThatDividesDimForFourBitPq) {
  auto pq = Create("c", 6);
  pq.mutable_index()->set_type(v1::INDEX_IVF_PQ);
  pq.mutable_index()->set_pq_bits(4);
  pq.mutable_index()->set_pq_m(3);  // divides 6 but odd
  ExpectInvalid(ValidateCreate(pq), "index.pq_m");
  pq.mutable_index()->set_pq_m(4);  // even but does not divide 6
  ExpectInvalid(ValidateCreate(pq), "index.pq_m");
  pq.mutable_index()->set_pq_m(2);
  EXPECT_TRUE(ValidateCreate(pq).ok());
  pq.mutable_index()->set_pq_bits(8);
  pq.mutable_index()->set_pq_m(3);  // odd is fine for 8 bits
  EXPECT_TRUE(ValidateCreate(pq).ok());
}

TEST(Validation, UpsertChecksEveryVectorAndAttribute) {
  v1::UpsertRequest req;
  ExpectInvalid(ValidateUpsert(req, 2), "points");
  auto* p = req.add_points();
  p->add_vector(1);
  p->add_vector(2);
  EXPECT_TRUE(ValidateUpsert(req, 2).ok());
  ExpectInvalid(ValidateUpsert(req, 3), "points[0].vector");
  auto* q = req.add_points();
  q->add_vector(1);
  q->add_vector(std::numeric_limits<float>::quiet_NaN());
  ExpectInvalid(ValidateUpsert(req, 2), "points[1].vector[1]");
  q->set_vector(1, std::numeric_limits<float>::infinity());
  ExpectInvalid(ValidateUpsert(req, 2), "not a finite number");
  q->set_vector(1, 0);
  (*q->mutable_attributes())["k"];  // value without a kind
  ExpectInvalid(ValidateUpsert(req, 2), "points[1].attributes[k]");
  (*q->mutable_attributes())["k"].set_int_value(1);
  EXPECT_TRUE(ValidateUpsert(req, 2).ok());
  auto* tags = (*q->mutable_attributes())["tags"].mutable_list_value();
  tags->add_values()->set_string_value("a");
  tags->add_values()->set_int_value(2);
  EXPECT_TRUE(ValidateUpsert(req, 2).ok());
  tags->add_values();  // element without a kind
  ExpectInvalid(ValidateUpsert(req, 2), "points[1].attributes[tags][2]: value not set");
  tags->mutable_values(2)->mutable_list_value();
  ExpectInvalid(ValidateUpsert(req, 2), "lists do not nest");
  tags->mutable_values(2)->set_bool_value(true);
  for (int i = 3; i <= kMaxListValues; ++i) tags->add_values()->set_int_value(i);
  ExpectInvalid(ValidateUpsert(req, 2), "at most 1024 values");
  q->mutable_attributes()->erase("tags");
  (*q->mutable_attributes())[""].set_int_value(1);
  ExpectInvalid(ValidateUpsert(req, 2), "attributes");
}

TEST(Validation, SearchChecksKQueriesAndValues) {
  v1::SearchRequest req;
  req.set_k(10);
  ExpectInvalid(ValidateSearch(req, 2), "queries");
  auto* q = req.add_queries();
  q->add_values(1);
  q->add_values(2);
  EXPECT_TRUE(ValidateSearch(req, 2).ok());
  ExpectInvalid(ValidateSearch(req, 3), "queries[0].values");
  req.set_k(0);
  ExpectInvalid(ValidateSearch(req, 2), "k");
  req.set_k(10001);
  ExpectInvalid(ValidateSearch(req, 2), "k");
  req.set_k(10000);
  EXPECT_TRUE(ValidateSearch(req, 2).ok());
  q->set_values(0, -std::numeric_limits<float>::infinity());
  ExpectInvalid(ValidateSearch(req, 2), "queries[0].values[0]");
  q->set_values(0, 0);
  req.set_nprobe(1 << 20);
  ExpectInvalid(ValidateSearch(req, 2), "nprobe");
}

TEST(Validation, AVectorWhoseSquaredNormOverflowsFloatIsRefusedNamingItsIndex) {
  // Every component finite, but |q|^2 = 2e40 overflows float (FLT_MAX is about 3.4e38).
  v1::SearchRequest search;
  search.set_k(10);
  auto* fine = search.add_queries();
  fine->add_values(3e18f);  // |q|^2 = 9e36 + 9e36: still far from overflowing any distance
  fine->add_values(3e18f);
  EXPECT_TRUE(ValidateSearch(search, 2).ok());
  auto* huge = search.add_queries();
  huge->add_values(1e20f);
  huge->add_values(1e20f);
  ExpectInvalid(ValidateSearch(search, 2), "queries[1].values: squared norm");
  // Just below the overflow of |q|^2 itself, yet a distance to -q would overflow: refused too.
  huge->set_values(0, 1.3e19f);
  huge->set_values(1, 0);
  ExpectInvalid(ValidateSearch(search, 2), "queries[1].values");

  v1::UpsertRequest upsert;
  auto* p = upsert.add_points();
  p->add_vector(1);
  p->add_vector(2);
  auto* q = upsert.add_points();
  q->add_vector(-1e20f);
  q->add_vector(0);
  ExpectInvalid(ValidateUpsert(upsert, 2), "points[1].vector: squared norm");
}

TEST(Validation, Ids) {
  google::protobuf::RepeatedField<uint64_t> ids;
  ExpectInvalid(ValidateIds(ids), "ids");
  ids.Add(1);
  EXPECT_TRUE(ValidateIds(ids).ok());
}

}  // namespace
}  // namespace shoal::server::validation_test
