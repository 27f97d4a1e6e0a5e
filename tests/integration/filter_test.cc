// Filtered search and Count against the real shoald: every operator on scalar and list
// attributes, FLAT and IVF collections and the memtable, min(k, matches) results, deletes and
// upserts, a restart, and a filter that does not parse.
#include <algorithm>
#include <set>

#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"
#include "tests/integration/shoald_process.h"

namespace shoal::filter_test {
namespace {

using ::testing::HasSubstr;
using testing::ShoaldProcess;

constexpr uint32_t kDim = 8;
constexpr uint64_t kPoints = 600;

// Point i: a vector near (i % 30) along the first axis, and attributes derived from i.
Point MakePoint(uint64_t i) {
  Point p;
  p.id = i;
  p.vector.assign(kDim, 0.f);
  p.vector[0] = float(i % 30);
  p.vector[1 + i % (kDim - 1)] = float(i) / kPoints;
  p.attributes["tenant"] = int64_t(i % 7);
  p.attributes["score"] = double(i) / 10.0;
  p.attributes["color"] = std::string(i % 3 == 0 ? "red" : i % 3 == 1 ? "green" : "blue");
  p.attributes["tags"] = AttributeList{std::string(i % 2 ? "odd" : "even"),
                                       std::string(i % 5 == 0 ? "five" : "other")};
  if (i % 4 == 0) p.attributes["flag"] = true;
  return p;
}

// The ids among 0..kPoints-1 for which `pred` holds.
template <typename Pred>
std::set<uint64_t> Where(Pred pred) {
  std::set<uint64_t> out;
  for (uint64_t i = 0; i < kPoints; ++i) {
    if (pred(i)) out.insert(i);
  }
  return out;
}

struct Case {
  std::string filter;
  std::set<uint64_t> matches;
};

std::vector<Case> Cases() {
  return {
      {"tenant = 3", Where([](uint64_t i) { return i % 7 == 3; })},
      {"tenant != 3", Where([](uint64_t i) { return i % 7 != 3; })},
      {"tenant < 2", Where([](uint64_t i) { return i % 7 < 2; })},
      {"tenant <= 2 and score > 30", Where([](uint64_t i) { return i % 7 <= 2 && i > 300; })},
      {"score >= 59.5", Where([](uint64_t i) { return i >= 595; })},
      {"color in [\"red\", \"blue\"]", Where([](uint64_t i) { return i % 3 != 1; })},
      {"color not in [\"red\"]", Where([](uint64_t i) { return i % 3 != 0; })},
      {"tags = \"five\"", Where([](uint64_t i) { return i % 5 == 0; })},
      {"not (tags = \"five\") and tags = \"odd\"",
       Where([](uint64_t i) { return i % 5 != 0 && i % 2 == 1; })},
      {"exists(flag)", Where([](uint64_t i) { return i % 4 == 0; })},
      {"not exists(flag) or id in [1, 2]",
       Where([](uint64_t i) { return i % 4 != 0 || i == 1 || i == 2; })},
      {"id < 5", Where([](uint64_t i) { return i < 5; })},
      {"id = 17", {17}},
      {"tenant = 100", {}},
      {"(tenant = 1 or tenant = 2) and color = \"green\"",
       Where([](uint64_t i) { return (i % 7 == 1 || i % 7 == 2) && i % 3 == 1; })},
  };
}

class FilterTest : public ::testing::TestWithParam<IndexType> {
 protected:
  void SetUp() override {
    server_ = ShoaldProcess::Start(dir_.Sub("data"), {"--cpu-threads", "2"});
    ASSERT_NE(server_, nullptr);
    client_ = std::make_unique<Client>(server_->addr());
    CollectionSpec spec{"c", kDim, Metric::kL2, {GetParam()}};
    if (GetParam() != IndexType::kFlat) spec.index.nlist = 8;
    ASSERT_TRUE(client_->CreateCollection(spec).ok());
    std::vector<Point> points;
    for (uint64_t i = 0; i < kPoints; ++i) points.push_back(MakePoint(i));
    ASSERT_TRUE(client_->Upsert("c", points).ok());
  }

  // Every case: Count is exact, and each query gets min(k, matches) hits, all matching.
  void CheckAll(const std::string& when) {
    for (const Case& c : Cases()) {
      auto count = client_->Count("c", c.filter);
      ASSERT_TRUE(count.ok()) << c.filter << ": " << count.status();
      EXPECT_EQ(*count, c.matches.size()) << c.filter << " " << when;
      std::vector<std::vector<float>> queries = {MakePoint(0).vector, MakePoint(299).vector};
      auto results = client_->SearchBatch("c", queries, {.k = 10, .nprobe = 2, .filter = c.filter});
      ASSERT_TRUE(results.ok()) << c.filter << ": " << results.status();
      for (const SearchResult& r : *results) {
        EXPECT_EQ(r.hits.size(), std::min<size_t>(10, c.matches.size())) << c.filter << " " << when;
        for (const Hit& h : r.hits) EXPECT_TRUE(c.matches.count(h.id)) << c.filter << ": " << h.id;
        EXPECT_EQ(r.stats.rows_matched, c.matches.size()) << c.filter;
        EXPECT_FALSE(r.stats.plan.empty());
      }
    }
  }

  testing::TempDir dir_;
  std::unique_ptr<ShoaldProcess> server_;
  std::unique_ptr<Client> client_;
};

TEST_P(FilterTest, EveryOperatorOverMemtableSegmentsAndARestart) {
  CheckAll("in the memtable");
  if (GetParam() != IndexType::kFlat) {
    auto built = client_->BuildIndex("c");
    ASSERT_TRUE(built.ok()) << built.status();
    CheckAll("after BuildIndex");
  }
  server_.reset();
  server_ = ShoaldProcess::Start(dir_.Sub("data"), {"--cpu-threads", "2"});
  ASSERT_NE(server_, nullptr);
  client_ = std::make_unique<Client>(server_->addr());
  CheckAll("after a restart");
}

TEST_P(FilterTest, DeletesAndUpsertsNeverMatchOldValues) {
  if (GetParam() != IndexType::kFlat) {
    ASSERT_TRUE(client_->BuildIndex("c").ok());
  }
  // tenant = 3 loses 3 and 10 (deleted) and 17 (now tenant 4); 18 joins (tenant 3).
  ASSERT_TRUE(client_->Delete("c", {3, 10}).ok());
  Point moved = MakePoint(17);
  moved.attributes["tenant"] = int64_t(4);
  Point joined = MakePoint(18);
  joined.attributes["tenant"] = int64_t(3);
  ASSERT_TRUE(client_->Upsert("c", {moved, joined}).ok());
  std::set<uint64_t> expect = Where([](uint64_t i) { return i % 7 == 3; });
  for (uint64_t gone : {3, 10, 17}) expect.erase(gone);
  expect.insert(18);
  auto count = client_->Count("c", "tenant = 3");
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ(*count, expect.size());
  auto r = client_->Search("c", MakePoint(3).vector, {.k = 200, .filter = "tenant = 3"});
  ASSERT_TRUE(r.ok()) << r.status();
  std::set<uint64_t> got;
  for (const Hit& h : r->hits) got.insert(h.id);
  EXPECT_EQ(got, expect);
}

// The plan follows the selectivity: few matches are read and scored exactly (exact_matches, the
// exact nearest among them), many walk the partitions (or, before an index, the memtable).
TEST_P(FilterTest, FewMatchesAreAnsweredExactlyAndManyByTheIvfPlans) {
  const bool ivf = GetParam() != IndexType::kFlat;
  if (ivf) {
    ASSERT_TRUE(client_->BuildIndex("c").ok());
  }
  const std::vector<float> query = MakePoint(123).vector;
  auto distance = [&](uint64_t id) {
    const std::vector<float> v = MakePoint(id).vector;
    float d = 0;
    for (uint32_t j = 0; j < kDim; ++j) d += (v[j] - query[j]) * (v[j] - query[j]);
    return d;
  };
  const std::set<uint64_t> few = Where([](uint64_t i) { return i % 7 == 3 && i < 200; });
  std::vector<uint64_t> truth(few.begin(), few.end());
  std::sort(truth.begin(), truth.end(), [&](uint64_t a, uint64_t b) {
    return distance(a) < distance(b) || (distance(a) == distance(b) && a < b);
  });
  truth.resize(10);
  auto r = client_->Search("c", query, {.k = 10, .nprobe = 1, .filter = "tenant = 3 and id < 200"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stats.plan, "exact_matches");
  EXPECT_EQ(r->stats.partitions_probed, 0u);
  std::vector<uint64_t> got;
  for (const Hit& h : r->hits) got.push_back(h.id);
  EXPECT_EQ(got, truth);

  auto broad = client_->Search("c", query, {.k = 10, .nprobe = 2, .filter = "tenant != 3"});
  ASSERT_TRUE(broad.ok()) << broad.status();
  EXPECT_EQ(broad->hits.size(), 10u);
  if (ivf) {
    EXPECT_THAT(broad->stats.plan, ::testing::AnyOf("ivf_bitmap", "selective_ivf"));
    EXPECT_GT(broad->stats.partitions_probed, 0u);
  } else {
    EXPECT_EQ(broad->stats.plan, "exact_matches");  // memtable rows only: scanned exactly
  }
}

TEST_P(FilterTest, AFilterThatDoesNotParseNamesTheByte) {
  auto r = client_->Search("c", MakePoint(0).vector, {.k = 3, .filter = "tenant = = 3"});
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("filter"));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("byte 9"));
  auto c = client_->Count("c", "(");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << c.status();
  // No filter: every live point.
  auto all = client_->Count("c");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(*all, kPoints);
}

INSTANTIATE_TEST_SUITE_P(Kinds, FilterTest,
                         ::testing::Values(IndexType::kFlat, IndexType::kIvfFlat,
                                           IndexType::kIvfSq8));

}  // namespace
}  // namespace shoal::filter_test
