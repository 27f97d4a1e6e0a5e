// SearchStream against the real shoald on loopback: every message answered once with its tag,
// in completion order, with the same neighbours as a unary Search; a failing message gets its
// own error and the stream goes on; the server stops reading past search.stream_max_inflight;
// per-message timeouts and the client's cancellation reach the search; the SDK's SearchMany
// runs over the stream.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <thread>

#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shoal/v1/shoal.grpc.pb.h"
#include "tests/fakes/temp_dir.h"
#include "tests/integration/grid_points.h"
#include "tests/integration/shoald_process.h"

namespace shoal::search_stream_test {
namespace {

using ::testing::HasSubstr;
using testing::ShoaldProcess;

constexpr uint32_t kDim = 16;

using testing::Grid;

std::vector<float> Query(uint64_t i, uint32_t dim) {
  std::vector<float> q(dim);
  for (uint32_t j = 0; j < dim; ++j) q[j] = float((i * 13 + j * 5) % 97) + 0.5f;
  return q;
}

v1::SearchRequest Request(const std::string& collection, uint64_t tag, uint32_t k, size_t nq,
                          uint32_t dim) {
  v1::SearchRequest r;
  r.set_collection(collection);
  r.set_tag(tag);
  r.set_k(k);
  r.set_packed_results(true);
  for (size_t i = 0; i < nq; ++i) {
    const std::vector<float> q = Query(tag * 7 + i, dim);
    r.add_queries()->mutable_values()->Assign(q.begin(), q.end());
  }
  return r;
}

int64_t MetricValue(int port, const std::string& series) {
  httplib::Client http("127.0.0.1", port);
  auto res = http.Get("/metrics");
  if (!res) return -1;
  const size_t at = res->body.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return int64_t(std::stod(res->body.substr(at + series.size() + 2)));
}

class SearchStreamTest : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> flags = {}) {
    flags.insert(flags.end(), {"--cpu-threads", "2"});
    server_ = ShoaldProcess::Start(dir_.Sub("data"), flags);
    ASSERT_NE(server_, nullptr);
    client_ = std::make_unique<Client>(server_->addr(),
                                       ClientOptions{.timeout = std::chrono::minutes(5)});
    channel_ = grpc::CreateChannel(server_->addr(), grpc::InsecureChannelCredentials());
    stub_ = v1::Shoal::NewStub(channel_);
  }
  void Load(const std::string& name, uint64_t rows, uint32_t dim) {
    ASSERT_TRUE(client_->CreateCollection({name, dim, Metric::kL2}).ok());
    auto writer = client_->OpenUpsertStream(name);
    ASSERT_TRUE(writer.ok());
    for (uint64_t b = 0; b < rows; b += 2000) {
      ASSERT_TRUE((*writer)->Write(Grid(b, std::min<uint64_t>(2000, rows - b), dim)).ok());
    }
    ASSERT_TRUE((*writer)->Finish().ok());
  }

  testing::TempDir dir_;
  std::unique_ptr<ShoaldProcess> server_;
  std::unique_ptr<Client> client_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Shoal::Stub> stub_;
};

TEST_F(SearchStreamTest, EveryMessageIsAnsweredOnceWithItsTagAndTheUnaryNeighbours) {
  Start();
  Load("docs", 3000, kDim);
  grpc::ClientContext ctx;
  auto stream = stub_->SearchStream(&ctx);
  constexpr uint64_t kMessages = 40;
  std::map<uint64_t, v1::SearchRequest> sent;
  for (uint64_t t = 0; t < kMessages; ++t) {
    const uint64_t tag = 1000 + t * 3;  // any values: the client's
    sent[tag] = Request("docs", tag, 5, 1 + t % 4, kDim);
    ASSERT_TRUE(stream->Write(sent[tag]));
  }
  stream->WritesDone();
  std::set<uint64_t> seen;
  for (v1::SearchResponse resp; stream->Read(&resp);) {
    ASSERT_FALSE(resp.has_error()) << resp.error().message();
    ASSERT_TRUE(sent.contains(resp.tag())) << resp.tag();
    EXPECT_TRUE(seen.insert(resp.tag()).second) << "tag " << resp.tag() << " answered twice";
    // The same neighbours as unary Search answers for the same request.
    grpc::ClientContext unary_ctx;
    v1::SearchResponse unary;
    ASSERT_TRUE(stub_->Search(&unary_ctx, sent[resp.tag()], &unary).ok());
    EXPECT_EQ(unary.tag(), resp.tag());
    ASSERT_EQ(resp.results_size(), unary.results_size());
    for (int q = 0; q < resp.results_size(); ++q) {
      EXPECT_THAT(resp.results(q).ids(), ::testing::ElementsAreArray(unary.results(q).ids()));
      EXPECT_THAT(resp.results(q).distances(),
                  ::testing::ElementsAreArray(unary.results(q).distances()));
    }
  }
  EXPECT_EQ(seen.size(), kMessages);
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(SearchStreamTest, AFailingMessageGetsItsOwnErrorAndTheStreamGoesOn) {
  Start();
  Load("docs", 500, kDim);
  grpc::ClientContext ctx;
  auto stream = stub_->SearchStream(&ctx);
  ASSERT_TRUE(stream->Write(Request("docs", 1, 5, 2, kDim)));
  v1::SearchRequest bad_k = Request("docs", 2, 5, 1, kDim);
  bad_k.set_k(0);
  ASSERT_TRUE(stream->Write(bad_k));
  ASSERT_TRUE(stream->Write(Request("nowhere", 3, 5, 1, kDim)));
  v1::SearchRequest bad_dim = Request("docs", 4, 5, 1, kDim);
  bad_dim.mutable_queries(0)->add_values(1.0f);
  ASSERT_TRUE(stream->Write(bad_dim));
  ASSERT_TRUE(stream->Write(Request("docs", 5, 5, 3, kDim)));
  stream->WritesDone();
  std::map<uint64_t, v1::SearchResponse> answers;
  for (v1::SearchResponse resp; stream->Read(&resp);) answers[resp.tag()] = resp;
  ASSERT_TRUE(stream->Finish().ok());
  ASSERT_EQ(answers.size(), 5u);
  EXPECT_FALSE(answers[1].has_error());
  EXPECT_EQ(answers[1].results_size(), 2);
  EXPECT_EQ(answers[2].error().code(), int(grpc::StatusCode::INVALID_ARGUMENT));
  EXPECT_THAT(answers[2].error().message(), HasSubstr("k"));
  EXPECT_EQ(answers[2].results_size(), 0);
  EXPECT_EQ(answers[3].error().code(), int(grpc::StatusCode::NOT_FOUND));
  EXPECT_EQ(answers[4].error().code(), int(grpc::StatusCode::INVALID_ARGUMENT));
  EXPECT_THAT(answers[4].error().message(), HasSubstr("queries[0]"));
  EXPECT_FALSE(answers[5].has_error());
  EXPECT_EQ(answers[5].results_size(), 3);
}

TEST_F(SearchStreamTest, AMessageThatDoesNotParseIsAnsweredAndTheStreamGoesOn) {
  Start();
  Load("docs", 200, kDim);
  // Raw bytes, which no stub would send: the generic stub on a completion queue of its own.
  grpc::ClientContext raw_ctx;
  grpc::CompletionQueue cq;
  grpc::GenericStub generic(channel_);
  auto call = generic.PrepareCall(&raw_ctx, "/shoal.v1.Shoal/SearchStream", &cq);
  call->StartCall(reinterpret_cast<void*>(1));
  void* got = nullptr;
  bool ok = false;
  ASSERT_TRUE(cq.Next(&got, &ok) && ok);
  auto write = [&](const std::string& bytes, intptr_t tag) {
    grpc::Slice slice(bytes);
    grpc::ByteBuffer buffer(&slice, 1);
    call->Write(buffer, reinterpret_cast<void*>(tag));
    ASSERT_TRUE(cq.Next(&got, &ok) && ok);
  };
  write("\xff\xff\xff\xff garbage", 2);
  write(Request("docs", 7, 3, 1, kDim).SerializeAsString(), 3);
  call->WritesDone(reinterpret_cast<void*>(4));
  ASSERT_TRUE(cq.Next(&got, &ok) && ok);
  std::vector<v1::SearchResponse> answers;
  for (;;) {
    grpc::ByteBuffer buffer;
    call->Read(&buffer, reinterpret_cast<void*>(5));
    ASSERT_TRUE(cq.Next(&got, &ok));
    if (!ok) break;
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(buffer.Dump(&slices).ok());
    std::string bytes;
    for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    v1::SearchResponse resp;
    ASSERT_TRUE(resp.ParseFromString(bytes));
    answers.push_back(resp);
  }
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(6));
  ASSERT_TRUE(cq.Next(&got, &ok) && ok);
  EXPECT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(answers.size(), 2u);
  int errors = 0, results = 0;
  for (const auto& a : answers) {
    if (a.has_error()) {
      ++errors;
      EXPECT_EQ(a.error().code(), int(grpc::StatusCode::INVALID_ARGUMENT));
      EXPECT_THAT(a.error().message(), HasSubstr("does not parse"));
    } else {
      ++results;
      EXPECT_EQ(a.tag(), 7u);
    }
  }
  EXPECT_EQ(errors, 1);
  EXPECT_EQ(results, 1);
  cq.Shutdown();
  while (cq.Next(&got, &ok)) {
  }
}

// Flow control: while the client reads nothing, the server answers at most
// search.stream_max_inflight messages past what the transport buffers (the answers are 600 KB
// each, so that is a few), instead of reading and answering the whole stream; once the client
// reads, every message is answered.
TEST_F(SearchStreamTest, TheServerStopsReadingPastTheStreamsInFlightBound) {
  Start({"--stream-max-inflight", "2"});
  Load("docs", 2000, kDim);
  constexpr uint64_t kMessages = 64;  // each a full scan: 200 took 64 s under TSan
  const std::string answered =
      "shoal_rpc_requests_total{code=\"OK\",method=\"SearchStream.Search\"}";
  grpc::ClientContext ctx;
  auto stream = stub_->SearchStream(&ctx);
  std::thread writer([&] {
    v1::SearchRequest r = Request("docs", 0, 500, 100, kDim);  // 100 x 500 hits per answer
    for (uint64_t t = 0; t < kMessages; ++t) {
      r.set_tag(t);
      if (!stream->Write(r)) return;
    }
    stream->WritesDone();
  });
  // Without reading, the server's progress stalls well short of the end.
  int64_t before = -1, now = 0;
  for (int i = 0; i < 100; ++i) {  // until it stops moving (at most 10 s)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    now = std::max<int64_t>(0, MetricValue(server_->http_port(), answered));
    if (now == before && now > 0) break;
    before = now;
  }
  EXPECT_LT(now, int64_t(kMessages / 2)) << "the server read the stream without bound";
  std::set<uint64_t> seen;
  for (v1::SearchResponse resp; stream->Read(&resp);) {
    ASSERT_FALSE(resp.has_error()) << resp.error().message();
    EXPECT_EQ(resp.results(0).ids_size(), 500);
    seen.insert(resp.tag());
  }
  writer.join();
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(seen.size(), kMessages);
  EXPECT_EQ(MetricValue(server_->http_port(), answered), int64_t(kMessages));
}

// timeout_ms is the message's own deadline: a heavy search past it is answered
// DEADLINE_EXCEEDED, and a light one after it on the same stream is answered normally.
TEST_F(SearchStreamTest, AMessagesTimeoutIsItsOwnDeadline) {
  Start();
  Load("heavy", 20000, 128);
  grpc::ClientContext ctx;
  auto stream = stub_->SearchStream(&ctx);
  v1::SearchRequest heavy = Request("heavy", 1, 10, 2000, 128);
  heavy.set_timeout_ms(1);
  ASSERT_TRUE(stream->Write(heavy));
  ASSERT_TRUE(stream->Write(Request("heavy", 2, 10, 1, 128)));
  stream->WritesDone();
  std::map<uint64_t, v1::SearchResponse> answers;
  for (v1::SearchResponse resp; stream->Read(&resp);) answers[resp.tag()] = resp;
  ASSERT_TRUE(stream->Finish().ok());
  EXPECT_EQ(answers[1].error().code(), int(grpc::StatusCode::DEADLINE_EXCEEDED));
  EXPECT_FALSE(answers[2].has_error());
  EXPECT_EQ(answers[2].results_size(), 1);
}

// The client cancelling the stream cancels its running searches: the stream ends CANCELLED,
// the server's search slots come back, and the server goes on answering.
TEST_F(SearchStreamTest, CancellingTheStreamCancelsItsSearches) {
  Start();
  Load("heavy", 20000, 128);
  grpc::ClientContext ctx;
  auto stream = stub_->SearchStream(&ctx);
  for (uint64_t t = 0; t < 4; ++t) ASSERT_TRUE(stream->Write(Request("heavy", t, 10, 5000, 128)));
  // Wait until the server runs them, then cancel.
  for (int i = 0; i < 600 && MetricValue(server_->http_port(), "shoal_search_inflight") < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GE(MetricValue(server_->http_port(), "shoal_search_inflight"), 1);
  ctx.TryCancel();
  v1::SearchResponse resp;
  while (stream->Read(&resp)) {
  }
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  int64_t inflight = -1;
  for (int i = 0; i < 1200; ++i) {  // watchdog: 60 s
    inflight = MetricValue(server_->http_port(), "shoal_search_inflight");
    if (inflight == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(inflight, 0);
  // Four searches of 5000 queries x 20000 rows were not run to the end: the CPU arena did a
  // fraction of their work (each alone is several seconds of one core).
  auto after = client_->Search("heavy", Query(1, 128), {.k = 3});
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->hits.size(), 3u);
}

TEST_F(SearchStreamTest, SearchManyRunsOverTheStreamInQueryOrder) {
  Start();
  Load("docs", 3000, kDim);
  std::vector<std::vector<float>> queries;
  for (uint64_t i = 0; i < 250; ++i) queries.push_back(Query(i, kDim));
  auto many = client_->SearchMany("docs", queries, {.k = 4}, {.batch = 7, .in_flight = 3});
  ASSERT_TRUE(many.ok()) << many.status();
  ASSERT_EQ(many->size(), queries.size());
  for (size_t i = 0; i < queries.size(); i += 17) {
    auto one = client_->Search("docs", queries[i], {.k = 4});
    ASSERT_TRUE(one.ok());
    ASSERT_EQ((*many)[i].hits.size(), one->hits.size());
    for (size_t h = 0; h < one->hits.size(); ++h) {
      EXPECT_EQ((*many)[i].hits[h].id, one->hits[h].id) << i;
    }
  }
  const int64_t streams = MetricValue(
      server_->http_port(), "shoal_rpc_requests_total{code=\"OK\",method=\"SearchStream\"}");
  EXPECT_EQ(streams, 1);
  // A failing message fails the whole call with its status.
  auto bad = client_->SearchMany("docs", {std::vector<float>(kDim + 1, 0.0f)}, {.k = 4});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shoal::search_stream_test
