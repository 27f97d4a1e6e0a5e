#include "server/request_limits.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::server::request_limits_test {
namespace {

using ::testing::HasSubstr;

v1::SearchRequest SearchOf(int queries, uint32_t dim, uint32_t k, uint32_t refine = 0) {
  v1::SearchRequest req;
  req.set_collection("c");
  req.set_k(k);
  req.set_refine_factor(refine);
  for (int i = 0; i < queries; ++i) req.add_queries()->mutable_values()->Resize(int(dim), 0.5f);
  return req;
}

SearchShape FlatShape(uint32_t dim) { return {dim, 4, 16}; }

TEST(RequestLimits, AnOrdinarySearchIsAdmittedWithAnEstimate) {
  auto cost = SearchCost(SearchOf(10, 128, 10), FlatShape(128), RequestLimits{});
  ASSERT_TRUE(cost.ok()) << cost.status();
  EXPECT_GT(*cost, 10u * 128 * 4);  // at least the queries themselves
  EXPECT_LT(*cost, 1u << 20);
}

TEST(RequestLimits, TooManyCandidatesPerQueryNamesRefineFactor) {
  auto cost = SearchCost(SearchOf(1, 4, 10, 2147483647), FlatShape(4), RequestLimits{});
  EXPECT_EQ(cost.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(cost.status().message()), HasSubstr("refine_factor"));
  EXPECT_THAT(std::string(cost.status().message()), HasSubstr("100000"));
  // Without refine the same bound names k.
  RequestLimits small;
  small.max_candidates_per_query = 5;
  cost = SearchCost(SearchOf(1, 4, 10), FlatShape(4), small);
  EXPECT_THAT(std::string(cost.status().message()), HasSubstr("k: "));
}

TEST(RequestLimits, AFastScanSegmentsDefaultRefineIsPricedWhenTheRequestSetsNone) {
  SearchShape fast_scan = FlatShape(4);
  fast_scan.default_refine = 10;  // the engine re-ranks k * 10 candidates
  RequestLimits limits;
  limits.max_candidates_per_query = 50;
  EXPECT_TRUE(SearchCost(SearchOf(1, 4, 10), FlatShape(4), limits).ok());
  EXPECT_EQ(SearchCost(SearchOf(1, 4, 10), fast_scan, limits).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto plain = SearchCost(SearchOf(100, 4, 5), FlatShape(4), RequestLimits{});
  auto priced = SearchCost(SearchOf(100, 4, 5), fast_scan, RequestLimits{});
  ASSERT_TRUE(plain.ok() && priced.ok());
  EXPECT_GT(*priced, *plain);
}

TEST(RequestLimits, AResponseLargerThanAMessageIsRefused) {
  auto cost = SearchCost(SearchOf(10000, 4, 10000), FlatShape(4), RequestLimits{});
  EXPECT_EQ(cost.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(cost.status().message()), HasSubstr("server.max_message_bytes"));
  // Vectors in the answer count: 1000 hits of 4096 floats is 16 MiB.
  v1::SearchRequest req = SearchOf(1, 4096, 1000);
  req.set_include_vectors(true);
  RequestLimits limits;
  limits.max_response_bytes = 8 << 20;
  EXPECT_EQ(SearchCost(req, FlatShape(4096), limits).status().code(),
            absl::StatusCode::kResourceExhausted);
  req.set_include_vectors(false);
  EXPECT_TRUE(SearchCost(req, FlatShape(4096), limits).ok());
}

// Packed results replace the per-hit objects unless per-hit data is asked for, when both come.
TEST(RequestLimits, PackedResultsCostTheArraysAloneUnlessHitsComeToo) {
  v1::SearchRequest hits = SearchOf(100, 16, 1000);
  v1::SearchRequest packed = hits;
  packed.set_packed_results(true);
  v1::SearchRequest both = packed;
  both.set_include_attributes(true);
  const uint64_t h = *SearchCost(hits, FlatShape(16), RequestLimits{});
  const uint64_t p = *SearchCost(packed, FlatShape(16), RequestLimits{});
  const uint64_t b = *SearchCost(both, FlatShape(16), RequestLimits{});
  EXPECT_LT(p, h);
  EXPECT_GT(b, h);
}

TEST(RequestLimits, PqTablesCountPerQueryAndSegment) {
  // 2000 queries x (m 64 x 256 floats) x 4 segments = 500 MiB of tables.
  SearchShape shape{128, 4 * (64 * 256 * 4), 4 * 16};
  auto cost = SearchCost(SearchOf(2000, 128, 10), shape, RequestLimits{});
  EXPECT_EQ(cost.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(cost.status().message()), HasSubstr("limits.max_request_bytes"));
  EXPECT_TRUE(SearchCost(SearchOf(100, 128, 10), shape, RequestLimits{}).ok());
}

TEST(RequestLimits, EveryPlanEntryIsPricedWithItsRoutingKey) {
  // Per (query, probed partition): the router's Probe (8), the query's index and coarse key
  // grown by push_back (up to 2 x 8) and its ScanQuery (16): 40 bytes.
  SearchShape few = FlatShape(16), many = FlatShape(16);
  few.plan_entries_per_query = 16;
  many.plan_entries_per_query = 16 + 1000;
  const uint64_t a = *SearchCost(SearchOf(10, 16, 10), few, RequestLimits{});
  const uint64_t b = *SearchCost(SearchOf(10, 16, 10), many, RequestLimits{});
  EXPECT_EQ(b - a, 10u * 1000 * 40);
}

TEST(RequestLimits, RefinesRawVectorsArePricedAndCanRefuseTheRequest) {
  // 100 queries x k 100 x refine 10 x dim 1024 floats = 390 MiB of raw vectors read for refine.
  SearchShape sq8 = FlatShape(1024);
  const v1::SearchRequest req = SearchOf(100, 1024, 100, 10);
  auto cost = SearchCost(req, sq8, RequestLimits{});
  EXPECT_EQ(cost.status().code(), absl::StatusCode::kResourceExhausted);
  // The message names the refine bytes (100 x 100 x 10 rows of 4096 + 40 bytes), not the factor.
  EXPECT_THAT(std::string(cost.status().message()), HasSubstr("394.4 MiB of refine vectors"));
  // Within the limit, the estimate holds at least the raw vectors.
  const v1::SearchRequest small = SearchOf(4, 1024, 10, 10);
  auto priced = SearchCost(small, sq8, RequestLimits{});
  ASSERT_TRUE(priced.ok()) << priced.status();
  EXPECT_GE(*priced, 4u * 10 * 10 * 1024 * sizeof(float));
  // Every segment FLAT: no refine runs, so none is priced.
  SearchShape flat = sq8;
  flat.refine_reads_raw = false;
  auto unrefined = SearchCost(small, flat, RequestLimits{});
  ASSERT_TRUE(unrefined.ok());
  EXPECT_EQ(*priced - *unrefined, 4u * 10 * 10 * (1024 * sizeof(float) + 40));
  // Without a refine factor nothing is refined either.
  EXPECT_EQ(*SearchCost(SearchOf(4, 1024, 10), sq8, RequestLimits{}),
            *SearchCost(SearchOf(4, 1024, 10), flat, RequestLimits{}));
}

TEST(RequestLimits, GetWithVectorsIsBoundedByTheResponse) {
  v1::GetRequest req;
  for (uint64_t i = 0; i < 100000; ++i) req.add_ids(i);
  req.set_include_vectors(true);
  EXPECT_EQ(GetCost(req, 1024, RequestLimits{}).status().code(),
            absl::StatusCode::kResourceExhausted);
  req.set_include_vectors(false);
  EXPECT_TRUE(GetCost(req, 1024, RequestLimits{}).ok());
}

TEST(InflightBytes, RefusesPastTheBudgetAndReturnsItOnRelease) {
  InflightBytes budget(100);
  auto a = budget.Acquire(60);
  ASSERT_TRUE(a.ok());
  auto b = budget.Acquire(60);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("limits.max_inflight_request_bytes"));
  EXPECT_EQ(budget.used(), 60u);
  { auto moved = *std::move(a); }
  EXPECT_EQ(budget.used(), 0u);
  EXPECT_TRUE(budget.Acquire(60).ok());  // released again at once (a temporary)
  EXPECT_EQ(budget.used(), 0u);
}

TEST(InflightBytes, ALoneRequestLargerThanTheBudgetIsStillAdmitted) {
  InflightBytes budget(100);
  auto big = budget.Acquire(500);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(budget.Acquire(1).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(PeerSlots, APeerPastItsShareIsRefusedWhileOthersAreStillAdmitted) {
  PeerSlots slots(2);
  auto a1 = slots.Acquire("ipv4:127.0.0.1:1000");
  auto a2 = slots.Acquire("ipv4:127.0.0.1:1000");
  ASSERT_TRUE(a1.ok() && a2.ok());
  auto a3 = slots.Acquire("ipv4:127.0.0.1:1000");
  EXPECT_EQ(a3.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(a3.status().message(), HasSubstr("server.max_inflight_per_peer = 2"));
  EXPECT_THAT(a3.status().message(), HasSubstr("ipv4:127.0.0.1:1000"));
  // Another connection has its own share.
  auto b1 = slots.Acquire("ipv4:127.0.0.1:2000");
  EXPECT_TRUE(b1.ok()) << b1.status();
  EXPECT_EQ(slots.held("ipv4:127.0.0.1:1000"), 2);
  EXPECT_EQ(slots.held("ipv4:127.0.0.1:2000"), 1);
}

TEST(PeerSlots, ReleasingASlotAdmitsThePeerAgainAndForgetsIdlePeers) {
  PeerSlots slots(1);
  {
    auto a = slots.Acquire("p");
    ASSERT_TRUE(a.ok());
    EXPECT_FALSE(slots.Acquire("p").ok());
    PeerSlots::Slot moved = *std::move(a);  // the move carries the slot, not a second one
    EXPECT_EQ(slots.held("p"), 1);
    moved.Release();
    moved.Release();  // a second release is a no-op
    EXPECT_EQ(slots.held("p"), 0);
    auto again = slots.Acquire("p");
    EXPECT_TRUE(again.ok());
  }
  EXPECT_EQ(slots.peers(), 0u);  // no memory per connection once it is idle
}

TEST(PeerSlots, AShareBelowOneIsOne) {
  PeerSlots slots(0);
  EXPECT_EQ(slots.per_peer(), 1);
  auto a = slots.Acquire("p");
  EXPECT_TRUE(a.ok());
  EXPECT_FALSE(slots.Acquire("p").ok());
}

TEST(PeerSlots, AShareIsExceededOnlyWhileAShareOfTheServerStaysFree) {
  PeerSlots slots(2, 8);  // share 2 of 8 server slots
  std::vector<PeerSlots::Slot> greedy;
  for (int i = 0; i < 6; ++i) {  // alone, a connection may use all but one share
    auto s = slots.Acquire("greedy");
    ASSERT_TRUE(s.ok()) << i << ": " << s.status();
    greedy.push_back(*std::move(s));
  }
  auto seventh = slots.Acquire("greedy");
  EXPECT_EQ(seventh.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(seventh.status().message(), HasSubstr("while the server is busy"));
  // A newcomer within its share is admitted; the greedy one stays refused.
  auto polite = slots.Acquire("polite");
  EXPECT_TRUE(polite.ok()) << polite.status();
  EXPECT_FALSE(slots.Acquire("greedy").ok());
  // Once the others finish, the greedy connection may borrow again.
  polite->Release();
  greedy.pop_back();
  greedy.pop_back();
  EXPECT_TRUE(slots.Acquire("greedy").ok());
  EXPECT_EQ(slots.peers(), 1u);
}

}  // namespace
}  // namespace shoal::server::request_limits_test
