// Hostile requests through the real shoald (issue #10 §1): bytes that do not parse, fields
// that would make one request reserve unbounded memory, responses too large to send. Each is
// refused with the right code and the offending field or limit named, and the server goes on
// answering normal requests.
#include <grpcpp/generic/generic_stub.h>

#include <iostream>

#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shoal/v1/shoal.pb.h"
#include "tests/fakes/temp_dir.h"
#include "tests/integration/raw_call.h"
#include "tests/integration/shoald_process.h"

namespace shoal::hardening_test {
namespace {

using ::testing::HasSubstr;
using testing::RawCall;
using testing::ShoaldProcess;

class HardeningTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = ShoaldProcess::Start(dir_.Sub("data"), {"--cpu-threads", "1"});
    ASSERT_NE(server_, nullptr);
    client_ = std::make_unique<Client>(server_->addr());
    channel_ = grpc::CreateChannel(server_->addr(), grpc::InsecureChannelCredentials());
    stub_ = std::make_unique<grpc::GenericStub>(channel_);
    ASSERT_TRUE(client_->CreateCollection({"c", 4, Metric::kL2, {IndexType::kFlat}}).ok());
    std::vector<Point> points;
    for (uint64_t i = 0; i < 100; ++i) points.push_back({i, {float(i), 0, 0, 0}, {}});
    ASSERT_TRUE(client_->Upsert("c", points).ok());
  }

  // A normal search still answers, and answers right.
  void ExpectHealthy() {
    auto result = client_->Search("c", {41.2f, 0, 0, 0}, {.k = 2});
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_EQ(result->hits.size(), 2u);
    EXPECT_EQ(result->hits[0].id, 41u);
    EXPECT_EQ(result->hits[1].id, 42u);
  }

  void TearDown() override {
    if (HasFailure() && server_) std::cerr << "shoald's log:\n" << server_->log();
  }

  testing::TempDir dir_;
  std::unique_ptr<ShoaldProcess> server_;
  std::unique_ptr<Client> client_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<grpc::GenericStub> stub_;
};

TEST_F(HardeningTest, BytesThatDoNotParseAreInvalidArgumentNamingTheMessage) {
  // A field tag with wire type 7 (invalid), then a length that runs past the end.
  const std::string garbage("\x0f\xff\xff\xff\xff\x0a\x7f", 7);
  const std::vector<std::pair<std::string, std::string>> methods = {
      {"CreateCollection", "CreateCollectionRequest"},
      {"DropCollection", "DropCollectionRequest"},
      {"ListCollections", "ListCollectionsRequest"},
      {"DescribeCollection", "DescribeCollectionRequest"},
      {"Upsert", "UpsertRequest"},
      {"Delete", "DeleteRequest"},
      {"Get", "GetRequest"},
      {"Search", "SearchRequest"},
      {"BuildIndex", "BuildIndexRequest"},
      {"Flush", "FlushRequest"}};
  ASSERT_EQ(methods.size(), testing::ShoalUnaryMethods().size());
  for (const auto& [method, message] : methods) {
    grpc::Status s = RawCall(*stub_, method, garbage);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method;
    EXPECT_THAT(s.error_message(), HasSubstr("does not parse as shoal.v1." + message)) << method;
  }
  ExpectHealthy();
}

TEST_F(HardeningTest, AStreamMessageThatDoesNotParseIsInvalidArgumentNamingIt) {
  v1::UpsertRequest good;
  good.set_collection("c");
  auto* p = good.add_points();
  p->set_id(1000);
  p->mutable_vector()->Resize(4, 1000.0f);
  grpc::Status s = testing::RawStreamCall(*stub_, "UpsertStream",
                                          {good.SerializeAsString(), std::string("\x0f\xff", 2)});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("message 1: request does not parse as "
                                           "shoal.v1.UpsertRequest"));
  // A stream of good messages still loads.
  s = testing::RawStreamCall(*stub_, "UpsertStream", {good.SerializeAsString()});
  EXPECT_TRUE(s.ok()) << s.error_message();
  ExpectHealthy();
}

TEST_F(HardeningTest, OnlyAMethodThatDoesNotExistIsUnimplemented) {
  grpc::Status s = RawCall(*stub_, "Explode", "");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  // An empty message parses (every field at its default) and is validated like any other.
  s = RawCall(*stub_, "Search", "");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("collection"));
  ExpectHealthy();
}

TEST_F(HardeningTest, AHugeRefineFactorIsInvalidArgumentNamingTheField) {
  auto result = client_->Search("c", {1, 0, 0, 0}, {.k = 10, .refine_factor = 2147483647});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("refine_factor"));
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("limits.max_candidates_per_query"));
  ExpectHealthy();
}

TEST_F(HardeningTest, ASearchWhoseAnswerCannotBeSentIsRefusedBeforeTheWork) {
  // 10000 queries x k 10000: 10^8 hits. Measured before the limits: 9.3 GB of RSS.
  std::vector<std::vector<float>> queries(10000, std::vector<float>{1, 2, 3, 4});
  auto result = client_->SearchBatch("c", queries, {.k = 10000});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("server.max_message_bytes"));
  ExpectHealthy();
}

TEST_F(HardeningTest, AGetWhoseAnswerCannotBeSentIsRefusedBeforeTheWork) {
  ASSERT_TRUE(client_->CreateCollection({"wide", 4096, Metric::kL2, {IndexType::kFlat}}).ok());
  std::vector<uint64_t> ids(100000);
  for (uint64_t i = 0; i < ids.size(); ++i) ids[i] = i;
  auto got = client_->Get("wide", ids, /*include_vectors=*/true);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("server.max_message_bytes"));
  // Without vectors the same ids are fine (none exist).
  got = client_->Get("wide", ids, /*include_vectors=*/false);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->empty());
  ExpectHealthy();
}

TEST(HardeningLimits, TheLimitsAreConfigurable) {
  testing::TempDir dir;
  auto server = ShoaldProcess::Start(
      dir.Sub("data"), {"--max-candidates-per-query", "50", "--max-request-bytes", "100000"});
  ASSERT_NE(server, nullptr);
  Client client(server->addr());
  ASSERT_TRUE(client.CreateCollection({"c", 4, Metric::kL2, {IndexType::kFlat}}).ok());
  ASSERT_TRUE(client.Upsert("c", {{1, {1, 0, 0, 0}, {}}}).ok());
  auto result = client.Search("c", {1, 0, 0, 0}, {.k = 51});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("k: "));
  // 100 queries x k 50 x 24 bytes of candidates alone is 120000 bytes.
  std::vector<std::vector<float>> queries(100, std::vector<float>{1, 0, 0, 0});
  auto batch = client.SearchBatch("c", queries, {.k = 50});
  EXPECT_EQ(batch.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(batch.status().message()), HasSubstr("limits.max_request_bytes"));
  EXPECT_TRUE(client.Search("c", {1, 0, 0, 0}, {.k = 5}).ok());
}

}  // namespace
}  // namespace shoal::hardening_test
