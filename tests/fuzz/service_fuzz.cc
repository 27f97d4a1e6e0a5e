// libFuzzer target: arbitrary bytes through the real service handlers. One shoald (Server)
// runs in-process on a loopback port with a FLAT and a built IVF_FLAT collection; each input
// picks a unary method (first byte) and sends the rest as its request, raw, over gRPC. The
// server must answer every call with a status that is not UNIMPLEMENTED (every method
// exists), UNKNOWN or INTERNAL (a handler bug), and never with an empty message on an error;
// a crash or sanitizer report anywhere in the server is a finding too.
//
// DEADLINE_EXCEEDED is a finding as well: the only deadline is this harness's (kCallDeadline;
// the server has none of its own), and no legitimate call can need it. Calls run one at a
// time, so none waits behind another; an input is at most -max_len (4096) bytes; and the
// vector values the inputs' Upserts store are capped (kMaxUpsertedValues: before an Upsert
// would pass it, every collection is dropped and the two fixtures are made again), so no
// collection grows until a search, flush or index build of it takes more than a fraction of a
// second, even under ASan. A call that outlives kCallDeadline is a handler that hung or never
// finished its reactor.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "core/base/logging.h"
#include "server/server.h"
#include "shoal/v1/shoal.pb.h"
#include "tests/integration/raw_call.h"

namespace {

using shoal::testing::RawCall;
using shoal::testing::ShoalUnaryMethods;

struct Fixture {
  std::string dir;
  std::unique_ptr<shoal::server::Server> server;
  std::unique_ptr<grpc::GenericStub> stub;
};

void Must(const grpc::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "service_fuzz set-up: %s: %s\n", what, s.error_message().c_str());
    std::abort();
  }
}

void CreateWithRows(grpc::GenericStub& stub, const std::string& name, shoal::v1::IndexType type,
                    int rows) {
  shoal::v1::CreateCollectionRequest create;
  create.set_name(name);
  create.set_dim(4);
  create.set_metric(shoal::v1::METRIC_L2);
  create.mutable_index()->set_type(type);
  create.mutable_index()->set_nlist(4);
  Must(RawCall(stub, "CreateCollection", create.SerializeAsString()), "create");
  shoal::v1::UpsertRequest upsert;
  upsert.set_collection(name);
  for (int i = 0; i < rows; ++i) {
    auto* p = upsert.add_points();
    p->set_id(uint64_t(i));
    for (int j = 0; j < 4; ++j) p->add_vector(float((i * 7 + j * 3) % 23));
  }
  Must(RawCall(stub, "Upsert", upsert.SerializeAsString()), "upsert");
}

// The two collections every input may use: "c" (FLAT, 50 rows) and "ivf" (IVF_FLAT, built).
void MakeCollections(grpc::GenericStub& stub) {
  CreateWithRows(stub, "c", shoal::v1::INDEX_FLAT, 50);
  CreateWithRows(stub, "ivf", shoal::v1::INDEX_IVF_FLAT, 200);
  shoal::v1::BuildIndexRequest build;
  build.set_collection("ivf");
  Must(RawCall(stub, "BuildIndex", build.SerializeAsString()), "build");
}

// Drops every collection (the fixtures' and the inputs'), then makes the fixtures again.
void ResetCollections(grpc::GenericStub& stub) {
  std::string listed;
  Must(RawCall(stub, "ListCollections", "", &listed), "list");
  shoal::v1::ListCollectionsResponse list;
  if (!list.ParseFromString(listed)) {
    std::fprintf(stderr, "service_fuzz reset: ListCollections answered unparsable bytes\n");
    std::abort();
  }
  for (const shoal::v1::CollectionInfo& c : list.collections()) {
    shoal::v1::DropCollectionRequest drop;
    drop.set_name(c.name());
    Must(RawCall(stub, "DropCollection", drop.SerializeAsString()), "drop");
  }
  MakeCollections(stub);
}

Fixture* Start() {
  auto* f = new Fixture;
  char pattern[] = "/tmp/shoal-service-fuzz-XXXXXX";
  f->dir = mkdtemp(pattern);
  shoal::server::Config config;
  config.data_dir = f->dir;
  config.grpc_addr = "127.0.0.1:0";
  config.http_addr = "127.0.0.1:0";
  config.cpu_threads = 1;
  config.cache_bytes = 16 << 20;
  config.shutdown_grace_seconds = 1;
  f->server = std::make_unique<shoal::server::Server>(config);
  if (absl::Status s = f->server->Start(); !s.ok()) {
    std::fprintf(stderr, "service_fuzz: shoald did not start: %s\n", s.ToString().c_str());
    std::abort();
  }
  f->stub = std::make_unique<grpc::GenericStub>(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(f->server->grpc_port()), grpc::InsecureChannelCredentials()));
  MakeCollections(*f->stub);
  return f;
}

Fixture* fixture = nullptr;

// A hung handler is reported after this long (libFuzzer's own -timeout is 20 minutes).
constexpr std::chrono::seconds kCallDeadline(60);
// Vector values the inputs' Upserts may store (1 MiB of floats, across collections) before
// the collections are reset.
constexpr uint64_t kMaxUpsertedValues = 1 << 18;
uint64_t upserted_values = 0;  // since the last reset

// The vector values an Upsert request would store (0 if it does not parse: neither does the
// server's parse, the same protobuf code).
uint64_t UpsertValues(const std::string& request) {
  shoal::v1::UpsertRequest upsert;
  if (!upsert.ParseFromString(request)) return 0;
  uint64_t values = 0;
  for (const auto& p : upsert.points()) values += uint64_t(p.vector_size());
  return values;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (!fixture) {
    (void)shoal::core::SetLogLevel("error");
    fixture = Start();
    // Stop the server before static destructors run under its threads.
    std::atexit([] {
      fixture->server->Shutdown();
      std::error_code ec;
      std::filesystem::remove_all(fixture->dir, ec);
    });
  }
  if (size == 0) return 0;
  const auto& methods = ShoalUnaryMethods();
  const std::string& method = methods[data[0] % methods.size()];
  const std::string request(reinterpret_cast<const char*>(data + 1), size - 1);
  if (method == "Upsert") {
    const uint64_t values = UpsertValues(request);
    if (upserted_values + values > kMaxUpsertedValues) {
      ResetCollections(*fixture->stub);
      upserted_values = 0;
    }
    upserted_values += values;
  }
  const grpc::Status s = RawCall(*fixture->stub, method, request, nullptr, kCallDeadline);
  const auto code = s.error_code();
  if (code == grpc::StatusCode::DEADLINE_EXCEEDED) {
    std::fprintf(stderr, "service_fuzz: %s did not answer within %llds: a hung handler\n",
                 method.c_str(), static_cast<long long>(kCallDeadline.count()));
    __builtin_trap();
  }
  if (code == grpc::StatusCode::UNIMPLEMENTED || code == grpc::StatusCode::UNKNOWN ||
      code == grpc::StatusCode::INTERNAL || (!s.ok() && s.error_message().empty())) {
    std::fprintf(stderr, "service_fuzz: %s answered %d '%s'\n", method.c_str(), int(code),
                 s.error_message().c_str());
    std::abort();
  }
  return 0;
}
