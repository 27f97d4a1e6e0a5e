// Integration tests: the real shoald binary on loopback, driven through shoal::Client.
#include <httplib.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <thread>

#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shoal/v1/shoal.pb.h"
#include "tests/fakes/temp_dir.h"
#include "tests/integration/grid_points.h"
#include "tests/integration/raw_call.h"
#include "tests/integration/shoald_process.h"

namespace shoal::server_test {
namespace {

using ::testing::HasSubstr;
using testing::ShoaldProcess;

using testing::Grid;

void ExpectError(const absl::Status& s, absl::StatusCode code, const std::string& text) {
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(text));
}

std::pair<int, std::string> HttpGet(int port, const std::string& path) {
  httplib::Client http("127.0.0.1", port);
  auto res = http.Get(path.c_str());
  if (!res) return {0, ""};
  return {res->status, res->body};
}

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = ShoaldProcess::Start(dir_.Sub("data"), {"--cpu-threads", "2"});
    ASSERT_NE(server_, nullptr);
    client_ = std::make_unique<Client>(server_->addr());
  }
  testing::TempDir dir_;
  std::unique_ptr<ShoaldProcess> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(ServerTest, EveryRpcRoundTrips) {
  ASSERT_TRUE(client_->CreateCollection({"docs", 4, Metric::kL2, {IndexType::kFlat}}).ok());
  auto list = client_->ListCollections();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].name, "docs");

  std::vector<Point> points = {
      {1, {0, 0, 0, 0}, {{"tag", std::string("origin")}}},
      {2, {1, 0, 0, 0}, {{"n", int64_t(2)}, {"ok", true}}},
      {3, {5, 5, 5, 5}, {{"w", 0.25}, {"tags", AttributeList{std::string("a"), int64_t(7)}}}}};
  EXPECT_EQ(*client_->Upsert("docs", points), 3u);

  auto info = client_->DescribeCollection("docs");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->dim, 4u);
  EXPECT_EQ(info->num_vectors, 3u);
  EXPECT_EQ(info->num_indexed, 0u);
  EXPECT_EQ(info->index_state, "none");
  EXPECT_GT(info->disk_bytes, 0u);

  auto got = client_->Get("docs", {3, 99, 1}, true);
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ((*got)[0].id, 3u);
  EXPECT_EQ((*got)[0].vector, std::vector<float>({5, 5, 5, 5}));
  EXPECT_EQ(std::get<double>((*got)[0].attributes.at("w")), 0.25);
  EXPECT_EQ(std::get<AttributeList>((*got)[0].attributes.at("tags")),
            (AttributeList{std::string("a"), int64_t(7)}));

  SearchOptions options{.k = 2, .include_vectors = true, .include_attributes = true};
  auto result = client_->Search("docs", {0.9f, 0, 0, 0}, options);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->hits.size(), 2u);
  EXPECT_EQ(result->hits[0].id, 2u);
  EXPECT_NEAR(result->hits[0].distance, 0.01f, 1e-5);
  EXPECT_EQ(result->hits[1].id, 1u);
  EXPECT_EQ(result->hits[0].vector, std::vector<float>({1, 0, 0, 0}));
  EXPECT_EQ(std::get<bool>(result->hits[0].attributes.at("ok")), true);
  EXPECT_EQ(std::get<std::string>(result->hits[1].attributes.at("tag")), "origin");
  EXPECT_EQ(result->stats.vectors_scanned, 3u);

  auto batch = client_->SearchBatch("docs", {{0, 0, 0, 0}, {5, 5, 5, 5}}, {.k = 1});
  ASSERT_TRUE(batch.ok());
  ASSERT_EQ(batch->size(), 2u);
  EXPECT_EQ((*batch)[0].hits[0].id, 1u);
  EXPECT_EQ((*batch)[1].hits[0].id, 3u);

  EXPECT_EQ(*client_->Delete("docs", {2, 777}), 1u);
  result = client_->Search("docs", {0.9f, 0, 0, 0}, {.k = 1});
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->hits[0].id, 1u);  // read-after-write of the delete

  auto built = client_->BuildIndex("docs");
  ASSERT_TRUE(built.ok());
  EXPECT_THAT(*built, HasSubstr("INDEX_FLAT"));
  auto flushed = client_->Flush("docs");
  ASSERT_TRUE(flushed.ok());
  // A FLAT collection flushes into an exact segment; searches stay exact.
  EXPECT_THAT(*flushed, HasSubstr("into exact segment"));
  EXPECT_EQ(client_->DescribeCollection("docs")->num_segments, 1u);
  result = client_->Search("docs", {0.9f, 0, 0, 0}, {.k = 1});
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->hits[0].id, 1u);

  ASSERT_TRUE(client_->DropCollection("docs").ok());
  EXPECT_TRUE(client_->ListCollections()->empty());
}

// packed_results is additive: a client that does not ask gets `hits` exactly as before; one that
// asks gets the same neighbours as two packed arrays, and per-hit objects only for per-hit data.
TEST_F(ServerTest, PackedResultsCarryTheSameNeighboursAsHits) {
  ASSERT_TRUE(client_->CreateCollection({"p", 4, Metric::kL2, {IndexType::kFlat}}).ok());
  ASSERT_TRUE(client_->Upsert("p", Grid(1, 50, 4)).ok());
  auto channel = grpc::CreateChannel(server_->addr(), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  auto search = [&](bool packed, bool vectors) {
    v1::SearchRequest req;
    req.set_collection("p");
    v1::QueryVector* q = req.add_queries();
    for (float v : {3.f, 1.f, 4.f, 1.f}) q->add_values(v);
    req.set_k(5);
    req.set_packed_results(packed);
    req.set_include_vectors(vectors);
    std::string bytes;
    EXPECT_TRUE(testing::RawCall(stub, "Search", req.SerializeAsString(), &bytes).ok());
    v1::SearchResponse resp;
    EXPECT_TRUE(resp.ParseFromString(bytes));
    EXPECT_EQ(resp.results_size(), 1);
    return resp.results_size() == 1 ? resp.results(0) : v1::SearchResult();
  };
  const v1::SearchResult old = search(false, false);
  const v1::SearchResult packed = search(true, false);
  const v1::SearchResult both = search(true, true);
  ASSERT_EQ(old.hits_size(), 5);
  EXPECT_EQ(old.ids_size(), 0);
  EXPECT_EQ(packed.hits_size(), 0);
  ASSERT_EQ(packed.ids_size(), 5);
  ASSERT_EQ(packed.distances_size(), 5);
  ASSERT_EQ(both.hits_size(), 5);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(packed.ids(i), old.hits(i).id());
    EXPECT_EQ(packed.distances(i), old.hits(i).distance());
    EXPECT_EQ(both.ids(i), old.hits(i).id());
    EXPECT_EQ(both.hits(i).vector_size(), 4);
  }
}

// The IVF lifecycle through the real server: build, read-after-write next to the segment,
// deletes as tombstones, Get from a segment, Flush into a second segment, restart.
TEST(ServerIvf, BuildSearchWriteFlushAndRestart) {
  testing::TempDir dir;
  std::vector<Point> points = Grid(0, 3000, 8);
  for (Point& p : points) p.vector[0] = float(p.id);  // every vector distinct
  auto check = [&](Client& client, bool after_writes) {
    auto hit = client.Search("ivf", points[7].vector, {.k = 1, .nprobe = 64});
    ASSERT_TRUE(hit.ok()) << hit.status();
    ASSERT_EQ(hit->hits.size(), 1u);
    EXPECT_EQ(hit->hits[0].id, after_writes ? 9999u : 7u);
    auto got = client.Get("ivf", {1, 7}, /*include_vectors=*/true);
    ASSERT_TRUE(got.ok());
    ASSERT_EQ(got->size(), after_writes ? 1u : 2u);
    EXPECT_EQ((*got)[0].vector, points[1].vector);
  };
  {
    auto server = ShoaldProcess::Start(dir.Sub("data"));
    ASSERT_NE(server, nullptr);
    Client client(server->addr());
    ASSERT_TRUE(client.CreateCollection({"ivf", 8, Metric::kL2, {IndexType::kIvfSq8, 32}}).ok());
    ASSERT_TRUE(client.Upsert("ivf", points).ok());
    auto built = client.BuildIndex("ivf");
    ASSERT_TRUE(built.ok()) << built.status();
    EXPECT_THAT(*built, HasSubstr("built IVF_SQ8 over 3000 vectors"));
    auto info = client.DescribeCollection("ivf");
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->index_state, "ready");
    EXPECT_EQ(info->num_segments, 1u);
    EXPECT_EQ(info->num_indexed, 3000u);
    check(client, false);
    // A new point at 7's place (read-after-write) and 7 deleted from the segment.
    ASSERT_TRUE(client.Upsert("ivf", {{9999, points[7].vector, {}}}).ok());
    ASSERT_TRUE(client.Delete("ivf", {7}).ok());
    check(client, true);
    auto flushed = client.Flush("ivf");
    ASSERT_TRUE(flushed.ok()) << flushed.status();
    EXPECT_THAT(*flushed, HasSubstr("flushed 1 vectors"));
    EXPECT_EQ(client.DescribeCollection("ivf")->num_segments, 2u);
    EXPECT_EQ(client.DescribeCollection("ivf")->num_vectors, 3000u);
    check(client, true);
    EXPECT_EQ(server->Terminate(), 0);
  }
  auto server = ShoaldProcess::Start(dir.Sub("data"));
  ASSERT_NE(server, nullptr);
  Client client(server->addr());
  check(client, true);
  EXPECT_EQ(client.DescribeCollection("ivf")->num_vectors, 3000u);
}

TEST_F(ServerTest, InnerProductAndCosineOrderBySimilarity) {
  ASSERT_TRUE(client_->CreateCollection({"ip", 2, Metric::kInnerProduct}).ok());
  ASSERT_TRUE(client_->CreateCollection({"cos", 2, Metric::kCosine}).ok());
  std::vector<Point> points = {{1, {1, 0}, {}}, {2, {10, 1}, {}}, {3, {0, 1}, {}}};
  ASSERT_TRUE(client_->Upsert("ip", points).ok());
  ASSERT_TRUE(client_->Upsert("cos", points).ok());
  auto ip = client_->Search("ip", {1, 0}, {.k = 3});
  ASSERT_TRUE(ip.ok());
  EXPECT_EQ(ip->hits[0].id, 2u);  // largest dot product
  EXPECT_FLOAT_EQ(ip->hits[0].distance, 10.0f);
  auto cos = client_->Search("cos", {2, 0}, {.k = 3});
  ASSERT_TRUE(cos.ok());
  EXPECT_EQ(cos->hits[0].id, 1u);  // same direction
  EXPECT_NEAR(cos->hits[0].distance, 1.0f, 1e-6);
  EXPECT_GE(cos->hits[1].distance, cos->hits[2].distance);
}

TEST_F(ServerTest, EveryValidationErrorNamesItsField) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  ASSERT_TRUE(client_->CreateCollection({"v", 3, Metric::kL2}).ok());
  ExpectError(client_->CreateCollection({"v", 3, Metric::kL2}), absl::StatusCode::kAlreadyExists,
              "already exists");
  ExpectError(client_->CreateCollection({"bad name!", 3, Metric::kL2}),
              absl::StatusCode::kInvalidArgument, "name");
  ExpectError(client_->CreateCollection({std::string(65, 'a'), 3, Metric::kL2}),
              absl::StatusCode::kInvalidArgument, "name");
  ExpectError(client_->CreateCollection({"d0", 0, Metric::kL2}), absl::StatusCode::kInvalidArgument,
              "dim");
  ExpectError(client_->CreateCollection({"dbig", 65537, Metric::kL2}),
              absl::StatusCode::kInvalidArgument, "dim");
  ExpectError(client_->Search("nope", {1, 2, 3}).status(), absl::StatusCode::kNotFound, "nope");
  ExpectError(client_->Upsert("nope", Grid(0, 1, 3)).status(), absl::StatusCode::kNotFound, "nope");
  ExpectError(client_->DescribeCollection("nope").status(), absl::StatusCode::kNotFound, "nope");
  ExpectError(client_->DropCollection("nope"), absl::StatusCode::kNotFound, "nope");
  ExpectError(client_->Upsert("v", Grid(0, 1, 4)).status(), absl::StatusCode::kInvalidArgument,
              "points[0].vector");
  ExpectError(client_->Upsert("v", {{1, {1, nan, 1}, {}}}).status(),
              absl::StatusCode::kInvalidArgument, "points[0].vector[1]");
  ExpectError(client_->Upsert("v", {}).status(), absl::StatusCode::kInvalidArgument, "points");
  ExpectError(client_->Search("v", {1, 2}).status(), absl::StatusCode::kInvalidArgument,
              "queries[0].values");
  ExpectError(client_->Search("v", {1, inf, 2}).status(), absl::StatusCode::kInvalidArgument,
              "queries[0].values[1]");
  ExpectError(client_->Search("v", {1, 2, 3}, {.k = 0}).status(),
              absl::StatusCode::kInvalidArgument, "k");
  ExpectError(client_->Search("v", {1, 2, 3}, {.k = 10001}).status(),
              absl::StatusCode::kInvalidArgument, "k");
  ExpectError(client_->SearchBatch("v", {}).status(), absl::StatusCode::kInvalidArgument,
              "queries");
  ExpectError(client_->Delete("v", {}).status(), absl::StatusCode::kInvalidArgument, "ids");
  ExpectError(client_->Search("bad/name", {1, 2, 3}).status(), absl::StatusCode::kInvalidArgument,
              "collection");
  // The server survived all of it and still answers.
  EXPECT_TRUE(client_->Search("v", {1, 2, 3}).ok());
}

TEST_F(ServerTest, UpsertStreamLoadsInBulkAndRejectsABadMessage) {
  ASSERT_TRUE(client_->CreateCollection({"bulk", 16, Metric::kL2}).ok());
  auto writer = client_->OpenUpsertStream("bulk");
  ASSERT_TRUE(writer.ok());
  for (uint64_t b = 0; b < 20; ++b) ASSERT_TRUE((*writer)->Write(Grid(b * 500, 500, 16)).ok());
  auto n = (*writer)->Finish();
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 10000u);
  EXPECT_EQ(client_->DescribeCollection("bulk")->num_vectors, 10000u);

  auto bad = client_->OpenUpsertStream("bulk");
  ASSERT_TRUE(bad.ok());
  (void)(*bad)->Write(Grid(0, 10, 16));
  (void)(*bad)->Write(Grid(10, 10, 15));
  auto failed = (*bad)->Finish();
  ExpectError(failed.status(), absl::StatusCode::kInvalidArgument, "message 1");
}

// Messages of one stream are applied in stream order: the last value written for an id wins.
// (They once raced into the WAL, the next read starting before the current hand-over.)
TEST_F(ServerTest, UpsertStreamAppliesMessagesInStreamOrder) {
  ASSERT_TRUE(client_->CreateCollection({"order", 4, Metric::kL2}).ok());
  auto writer = client_->OpenUpsertStream("order");
  ASSERT_TRUE(writer.ok());
  constexpr int kMessages = 400;
  for (int i = 0; i < kMessages; ++i) {
    std::vector<Point> points;
    for (uint64_t id = 0; id < 8; ++id) points.push_back({id, {float(i), 0, 0, 0}, {}});
    ASSERT_TRUE((*writer)->Write(points).ok());
  }
  ASSERT_TRUE((*writer)->Finish().ok());
  auto got = client_->Get("order", {0, 1, 2, 3, 4, 5, 6, 7}, /*include_vectors=*/true);
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 8u);
  for (const Point& p : *got) EXPECT_EQ(p.vector[0], float(kMessages - 1)) << "id " << p.id;
}

// A stream whose collection is dropped under it: the WAL refuses the next write (inline), the
// stream ends with an error instead of hanging, and the server keeps serving.
TEST_F(ServerTest, UpsertStreamIntoADroppedCollectionFailsCleanly) {
  ASSERT_TRUE(client_->CreateCollection({"gone", 8, Metric::kL2}).ok());
  auto writer = client_->OpenUpsertStream("gone", std::chrono::seconds(20));
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->Write(Grid(0, 10, 8)).ok());
  // Let the first message bind the stream to the collection before dropping it.
  for (int i = 0; i < 200 && client_->DescribeCollection("gone")->num_vectors < 10; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(client_->DropCollection("gone").ok());
  (void)(*writer)->Write(Grid(10, 10, 8));
  auto finished = (*writer)->Finish();
  // UNAVAILABLE from the closed WAL — not DEADLINE_EXCEEDED, which is what a reactor
  // deadlocked on its own lock would produce.
  ExpectError(finished.status(), absl::StatusCode::kUnavailable, "closing");
  EXPECT_TRUE(client_->ListCollections().ok());
}

TEST_F(ServerTest, DeadlinesAreHonoured) {
  ASSERT_TRUE(client_->CreateCollection({"slow", 64, Metric::kL2}).ok());
  auto writer = client_->OpenUpsertStream("slow");
  for (uint64_t b = 0; b < 20; ++b) ASSERT_TRUE((*writer)->Write(Grid(b * 2000, 2000, 64)).ok());
  ASSERT_TRUE((*writer)->Finish().ok());
  std::vector<std::vector<float>> queries(2000, std::vector<float>(64, 1.0f));
  Client impatient(server_->addr(), {.timeout = std::chrono::milliseconds(5)});
  auto r = impatient.SearchBatch("slow", queries, {.k = 10});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_TRUE(client_->Search("slow", queries[0]).ok());  // and the server moved on
}

TEST_F(ServerTest, HealthReportsServerAndCollections) {
  EXPECT_EQ(*client_->Health(), HealthStatus::kServing);
  EXPECT_EQ(*client_->Health("missing"), HealthStatus::kServiceUnknown);
  ASSERT_TRUE(client_->CreateCollection({"h", 2, Metric::kL2}).ok());
  EXPECT_EQ(*client_->Health("h"), HealthStatus::kServing);
  ASSERT_TRUE(client_->DropCollection("h").ok());
  EXPECT_EQ(*client_->Health("h"), HealthStatus::kNotServing);
  EXPECT_EQ(HttpGet(server_->http_port(), "/healthz").first, 200);
  EXPECT_EQ(HttpGet(server_->http_port(), "/readyz").first, 200);
  EXPECT_EQ(HttpGet(server_->http_port(), "/nope").first, 404);
}

TEST_F(ServerTest, MetricsAreValidPrometheusText) {
  ASSERT_TRUE(client_->CreateCollection({"m", 2, Metric::kL2}).ok());
  ASSERT_TRUE(client_->Upsert("m", Grid(0, 10, 2)).ok());
  ASSERT_TRUE(client_->Search("m", {1, 1}).ok());
  (void)client_->Search("m", {1});
  auto [status, body] = HttpGet(server_->http_port(), "/metrics");
  ASSERT_EQ(status, 200);
  EXPECT_THAT(body, HasSubstr("shoal_rpc_requests_total{code=\"OK\",method=\"Search\"} 1"));
  EXPECT_THAT(body,
              HasSubstr("shoal_rpc_requests_total{code=\"INVALID_ARGUMENT\",method=\"Search\"} 1"));
  EXPECT_THAT(body, HasSubstr("shoal_rpc_latency_seconds_bucket{method=\"Upsert\""));
  EXPECT_THAT(body, HasSubstr("shoal_collection_vectors{collection=\"m\"} 10"));
  EXPECT_THAT(body, HasSubstr("shoal_wal_fsync_seconds_count"));
  EXPECT_THAT(body, HasSubstr("shoal_cpu_arena_threads 2"));

  testing::TempDir tmp;
  const std::string file = tmp.Sub("metrics.txt");
  std::FILE* f = std::fopen(file.c_str(), "w");
  std::fwrite(body.data(), 1, body.size(), f);
  std::fclose(f);
  const int rc =
      std::system(("promtool check metrics < " + file + " > " + file + ".out 2>&1").c_str());
  EXPECT_EQ(rc, 0) << "promtool (from Debian's prometheus package) rejected /metrics:\n"
                   << testing::ReadWholeFile(file + ".out");
}

TEST(ServerRestart, DataSurvivesAGracefulRestart) {
  testing::TempDir dir;
  {
    auto server = ShoaldProcess::Start(dir.Sub("data"));
    ASSERT_NE(server, nullptr);
    Client client(server->addr());
    ASSERT_TRUE(client.CreateCollection({"p", 8, Metric::kCosine}).ok());
    ASSERT_TRUE(client.Upsert("p", Grid(0, 100, 8)).ok());
    ASSERT_TRUE(client.Delete("p", {5}).ok());
    EXPECT_EQ(server->Terminate(), 0);
    EXPECT_THAT(server->log(), HasSubstr("shutdown complete"));
  }
  auto server = ShoaldProcess::Start(dir.Sub("data"));
  ASSERT_NE(server, nullptr);
  Client client(server->addr());
  auto info = client.DescribeCollection("p");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->num_vectors, 99u);
  EXPECT_EQ(info->metric, Metric::kCosine);
  EXPECT_TRUE(client.Get("p", {5})->empty());
  EXPECT_EQ(*client.Health("p"), HealthStatus::kServing);
}

// kill -9 right after acknowledgements: every acknowledged point is there after restart.
TEST(ServerRestart, Kill9AfterAcknowledgedUpsertsLosesNothing) {
  testing::TempDir dir;
  std::vector<uint64_t> acked;
  {
    auto server = ShoaldProcess::Start(dir.Sub("data"));
    ASSERT_NE(server, nullptr);
    Client client(server->addr());
    ASSERT_TRUE(client.CreateCollection({"k", 32, Metric::kL2}).ok());
    std::mutex mu;
    std::vector<std::thread> writers;
    for (int t = 0; t < 4; ++t) {
      writers.emplace_back([&, t] {
        for (uint64_t b = 0; b < 25; ++b) {
          const uint64_t first = (uint64_t(t) * 25 + b) * 40;
          if (client.Upsert("k", Grid(first, 40, 32)).ok()) {
            std::lock_guard<std::mutex> lock(mu);
            for (uint64_t i = first; i < first + 40; ++i) acked.push_back(i);
          }
        }
      });
    }
    for (auto& w : writers) w.join();
    server->Kill9();
  }
  ASSERT_EQ(acked.size(), 4000u);
  auto server = ShoaldProcess::Start(dir.Sub("data"));
  ASSERT_NE(server, nullptr);
  Client client(server->addr());
  EXPECT_EQ(client.DescribeCollection("k")->num_vectors, 4000u);
  auto got = client.Get("k", acked);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->size(), acked.size());
}

TEST(ServerAuth, ApiKeyIsRequiredWhenConfigured) {
  testing::TempDir dir;
  auto server = ShoaldProcess::Start(dir.Sub("data"), {"--api-key", "s3cret"});
  ASSERT_NE(server, nullptr);
  Client anonymous(server->addr());
  EXPECT_EQ(anonymous.ListCollections().status().code(), absl::StatusCode::kUnauthenticated);
  Client wrong(server->addr(), {.api_key = "guess"});
  EXPECT_EQ(wrong.ListCollections().status().code(), absl::StatusCode::kUnauthenticated);
  Client good(server->addr(), {.api_key = "s3cret"});
  EXPECT_TRUE(good.ListCollections().ok());
}

TEST(ServerAdmission, SearchesPastTheBoundAreRejectedNotQueued) {
  testing::TempDir dir;
  auto server =
      ShoaldProcess::Start(dir.Sub("data"), {"--max-inflight-searches", "1", "--cpu-threads", "1"});
  ASSERT_NE(server, nullptr);
  // Sanitizer builds are ~10x slower: a generous deadline, so only admission can fail a call.
  Client client(server->addr(), {.timeout = std::chrono::minutes(5)});
  ASSERT_TRUE(client.CreateCollection({"a", 64, Metric::kL2}).ok());
  auto writer = client.OpenUpsertStream("a");
  for (uint64_t b = 0; b < 10; ++b) ASSERT_TRUE((*writer)->Write(Grid(b * 2000, 2000, 64)).ok());
  ASSERT_TRUE((*writer)->Finish().ok());
  std::vector<std::vector<float>> queries(64, std::vector<float>(64, 2.0f));
  std::atomic<int> ok{0}, exhausted{0}, other{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      auto r = client.SearchBatch("a", queries, {.k = 5});
      if (r.ok()) {
        ok++;
      } else if (r.status().code() == absl::StatusCode::kResourceExhausted) {
        exhausted++;
      } else {
        ADD_FAILURE() << r.status();
        other++;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_GE(ok.load(), 1);
  EXPECT_GE(exhausted.load(), 1);
  EXPECT_EQ(other.load(), 0);
}

}  // namespace
}  // namespace shoal::server_test

namespace shoal::server_test {
namespace {

std::string Metrics(int port) {
  httplib::Client http("127.0.0.1", port);
  auto res = http.Get("/metrics");
  return res ? res->body : "";
}

// I-8: io_uring is preferred, never required. Forcing the fallback is visible in /metrics.
TEST(ServerIo, TheIoBackendCanBeForcedAndIsExported) {
  testing::TempDir dir;
  auto forced = ShoaldProcess::Start(dir.Sub("a"), {"--io-backend", "pread"});
  ASSERT_NE(forced, nullptr);
  const std::string pread = Metrics(forced->http_port());
  EXPECT_THAT(pread, HasSubstr("shoal_io_backend{backend=\"pread\"} 1"));
  EXPECT_THAT(pread, HasSubstr("shoal_cache_budget_bytes"));
  EXPECT_THAT(forced->log(), HasSubstr("pread I/O"));

  auto automatic = ShoaldProcess::Start(dir.Sub("b"), {"--cache-bytes", "1048576"});
  ASSERT_NE(automatic, nullptr);
  const std::string chosen = Metrics(automatic->http_port());
  EXPECT_TRUE(chosen.find("shoal_io_backend{backend=\"uring\"} 1") != std::string::npos ||
              chosen.find("shoal_io_backend{backend=\"pread\"} 1") != std::string::npos)
      << chosen;
  EXPECT_THAT(chosen, HasSubstr("shoal_cache_budget_bytes 1048576"));

  // A bad backend name is a start-up error naming the field.
  testing::TempDir bad_dir;
  const std::string cmd =
      testing::BinDir() + "/shoald --io-backend spdk --data-dir " + bad_dir.Sub("c") + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  char buf[512] = {0};
  const size_t n = fread(buf, 1, sizeof(buf) - 1, p);
  const int status = pclose(p);
  EXPECT_NE(WEXITSTATUS(status), 0);
  EXPECT_THAT(std::string(buf, n), HasSubstr("io.backend"));
}

// A misspelt failpoint in SHOAL_FAILPOINTS would leave a crash test running with nothing armed:
// shoald refuses it before main() runs, with exit code 2 and the name on stderr.
TEST(ServerStartup, AnUnknownFailPointEndsStartUpWithExitCodeTwoNamingIt) {
  testing::TempDir dir;
  const std::string cmd = "SHOAL_FAILPOINTS=wal.after_write:crash@3,wal.after_wirte:crash " +
                          testing::BinDir() + "/shoald --data-dir " + dir.Sub("d") + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  const int status = pclose(p);
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 2) << out;
  EXPECT_THAT(out, HasSubstr("unknown failpoint 'wal.after_wirte'"));
  EXPECT_FALSE(std::filesystem::exists(dir.Sub("d"))) << "shoald got as far as its data dir";
}

// 8-bit PQ cannot train on 100 rows (FAISS throws; before, the throw ended shoald in
// std::terminate from the arena task). BuildIndex answers FAILED_PRECONDITION naming the
// minimum, the server stays up, the collection stays exactly searchable, and it builds once it
// has enough rows.
TEST_F(ServerTest, IvfPqBuildOnTooFewRowsIsFailedPreconditionAndTheCollectionStaysExact) {
  ASSERT_TRUE(client_->CreateCollection({"pq", 8, Metric::kL2, {IndexType::kIvfPq, 0, 4}}).ok());
  std::vector<Point> points = Grid(0, 100, 8);
  for (Point& p : points) p.vector[0] = float(p.id);  // every vector distinct
  ASSERT_TRUE(client_->Upsert("pq", points).ok());
  auto built = client_->BuildIndex("pq");
  ExpectError(built.status(), absl::StatusCode::kFailedPrecondition, "at least 256 rows");
  EXPECT_THAT(std::string(built.status().message()), HasSubstr("IVF_PQ"));
  auto health = client_->Health();
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, HealthStatus::kServing);
  auto info = client_->DescribeCollection("pq");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->num_vectors, 100u);
  EXPECT_NE(info->index_state, "ready");
  for (uint64_t id : {0u, 42u, 99u}) {
    auto hit = client_->Search("pq", points[id].vector, {.k = 3});
    ASSERT_TRUE(hit.ok()) << hit.status();
    ASSERT_EQ(hit->hits.size(), 3u);
    EXPECT_EQ(hit->hits[0].id, id);
    EXPECT_EQ(hit->hits[0].distance, 0.0f);
  }
  // With enough rows the same collection builds.
  std::vector<Point> more = Grid(100, 200, 8);
  for (Point& p : more) p.vector[0] = float(p.id);
  ASSERT_TRUE(client_->Upsert("pq", more).ok());
  built = client_->BuildIndex("pq");
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_THAT(*built, HasSubstr("built IVF_PQ over 300 vectors"));
  auto hit = client_->Search("pq", points[42].vector, {.k = 1, .nprobe = 64, .refine_factor = 10});
  ASSERT_TRUE(hit.ok()) << hit.status();
  ASSERT_EQ(hit->hits.size(), 1u);
  EXPECT_EQ(hit->hits[0].id, 42u);
}

}  // namespace
}  // namespace shoal::server_test
