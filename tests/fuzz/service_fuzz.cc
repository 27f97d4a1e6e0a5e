// libFuzzer target: arbitrary bytes through the real service handlers. One shoald (Server)
// runs in-process on a loopback port with a FLAT and a built IVF_FLAT collection; each input
// picks a unary method (first byte) and sends the rest as its request, raw, over gRPC. The
// server must answer every call with a status that is not UNIMPLEMENTED (every method
// exists), UNKNOWN or INTERNAL (a handler bug), and never with an empty message on an error;
// a crash or sanitizer report anywhere in the server is a finding too.
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
  CreateWithRows(*f->stub, "c", shoal::v1::INDEX_FLAT, 50);
  CreateWithRows(*f->stub, "ivf", shoal::v1::INDEX_IVF_FLAT, 200);
  shoal::v1::BuildIndexRequest build;
  build.set_collection("ivf");
  Must(RawCall(*f->stub, "BuildIndex", build.SerializeAsString()), "build");
  return f;
}

Fixture* fixture = nullptr;

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
  const grpc::Status s =
      RawCall(*fixture->stub, method, request, nullptr, std::chrono::seconds(20));
  const auto code = s.error_code();
  if (code == grpc::StatusCode::UNIMPLEMENTED || code == grpc::StatusCode::UNKNOWN ||
      code == grpc::StatusCode::INTERNAL || (!s.ok() && s.error_message().empty())) {
    std::fprintf(stderr, "service_fuzz: %s answered %d '%s'\n", method.c_str(), int(code),
                 s.error_message().c_str());
    std::abort();
  }
  return 0;
}
