// ShoalService in process, on a loopback gRPC port, with a file system that parks every build:
// BuildIndex must never hold the threads that serve Get.
#include <grpcpp/grpcpp.h>

#include <thread>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "core/exec/tbb_executor.h"
#include "core/exec/thread_executor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/config.h"
#include "server/metrics.h"
#include "server/raw_service.h"
#include "server/shoal_service.h"
#include "storage/cache/partition_cache.h"
#include "storage/collection/catalog.h"
#include "storage/sched/io_scheduler.h"
#include "tests/fakes/temp_dir.h"
#include "tests/fakes/watchdog.h"

namespace shoal::server::maintenance_executor_test {
namespace {

// Once armed, opening a new WAL file — the first thing BuildIndex does (it freezes the
// memtable) — blocks until the test releases it. Get never opens a WAL file.
class ParkBuildsFileSystem final : public storage::FileSystemWrapper {
 public:
  ParkBuildsFileSystem() : FileSystemWrapper(storage::DefaultFileSystem()) {}

  absl::StatusOr<std::unique_ptr<storage::WritableFile>> NewAppendableFile(
      const std::string& path) override {
    {
      absl::MutexLock lock(&mu_);
      if (armed_ && absl::StrContains(path, "/wal/")) {
        ++parked_;
        mu_.Await(absl::Condition(
            +[](bool* armed) { return !*armed; }, &armed_));
      }
    }
    return target()->NewAppendableFile(path);
  }

  void Arm() {
    absl::MutexLock lock(&mu_);
    armed_ = true;
  }
  void WaitUntilParked(int n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return parked_ >= n; };
    mu_.Await(absl::Condition(&enough));
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    armed_ = false;
  }

 private:
  absl::Mutex mu_;
  bool armed_ ABSL_GUARDED_BY(mu_) = false;
  int parked_ ABSL_GUARDED_BY(mu_) = 0;
};

std::unique_ptr<grpc::ClientContext> Context(int seconds) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
  return ctx;
}

class MaintenanceExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    storage::IoSchedulerOptions io_options;
    io_options.backend = storage::IoBackendKind::kPread;
    io_options.direct_io = false;
    auto io = storage::IoScheduler::Create(io_options);
    ASSERT_TRUE(io.ok()) << io.status();
    io_ = *std::move(io);
    storage::CollectionOptions options;
    options.scheduler = io_.get();
    options.cache = &cache_;
    auto catalog = storage::Catalog::Open(&fs_, dir_.path(), options);
    ASSERT_TRUE(catalog.ok()) << catalog.status();
    catalog_ = *std::move(catalog);
    service_ = std::make_unique<ShoalService>(catalog_.get(), &cpu_, &admin_, &metrics_,
                                              ShoalService::Options{});
    service_->SetMaintenanceExecutor(&maintenance_);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    raw_service_ = std::make_unique<RawShoalService>(service_.get());
    builder.RegisterService(raw_service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = v1::Shoal::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
    cpu_.WaitIdle();
  }

  void CreateWithPoints(const std::string& name) {
    v1::CreateCollectionRequest create;
    create.set_name(name);
    create.set_dim(4);
    create.set_metric(v1::METRIC_L2);
    create.mutable_index()->set_type(v1::INDEX_IVF_FLAT);
    create.mutable_index()->set_nlist(2);
    v1::CreateCollectionResponse created;
    ASSERT_TRUE(stub_->CreateCollection(Context(60).get(), create, &created).ok());
    v1::UpsertRequest upsert;
    upsert.set_collection(name);
    for (int i = 1; i <= 64; ++i) {
      v1::Point* p = upsert.add_points();
      p->set_id(i);
      for (int j = 0; j < 4; ++j) p->add_vector(float(i % 2 ? 10 + j : -10 - j) + 0.01f * i);
    }
    v1::UpsertResponse upserted;
    ASSERT_TRUE(stub_->Upsert(Context(60).get(), upsert, &upserted).ok());
  }

  grpc::Status Build(const std::string& name) {
    v1::BuildIndexRequest req;
    req.set_collection(name);
    v1::BuildIndexResponse resp;
    return stub_->BuildIndex(Context(300).get(), req, &resp);
  }

  testing::TempDir dir_;
  ParkBuildsFileSystem fs_;
  std::unique_ptr<storage::IoScheduler> io_;
  storage::PartitionCache cache_{64 << 20};
  std::unique_ptr<storage::Catalog> catalog_;
  core::TbbExecutor cpu_{1};
  core::ThreadExecutor admin_{2};
  core::ThreadExecutor maintenance_{1};
  Metrics metrics_;
  std::unique_ptr<ShoalService> service_;
  std::unique_ptr<RawShoalService> raw_service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Shoal::Stub> stub_;
};

TEST_F(MaintenanceExecutorTest, GetAnswersWhileBuildsHoldEveryMaintenanceThread) {
  CreateWithPoints("a");
  CreateWithPoints("b");
  CreateWithPoints("c");
  fs_.Arm();
  grpc::Status built_a, built_b;
  std::thread build_a([&] { built_a = Build("a"); });
  {
    testing::Watchdog watchdog(std::chrono::seconds(120), "first BuildIndex parked");
    fs_.WaitUntilParked(1);  // the first build holds a maintenance thread
  }
  // A second build queues behind it. Before the split both ran on the two admin threads, both
  // parked, and Get below never got a thread.
  std::thread build_b([&] { built_b = Build("b"); });
  {
    testing::Watchdog watchdog(std::chrono::seconds(120), "second BuildIndex admitted");
    while (metrics_.rpcs_in_flight() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  v1::GetRequest get;
  get.set_collection("c");
  get.add_ids(1);
  get.add_ids(2);
  get.set_include_vectors(true);
  v1::GetResponse got;
  // The deadline only bounds the failure: with its own threads Get answers whatever the builds do.
  const grpc::Status status = stub_->Get(Context(20).get(), get, &got);
  EXPECT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
  EXPECT_EQ(got.points_size(), 2);
  fs_.Release();
  build_a.join();
  build_b.join();
  EXPECT_TRUE(built_a.ok()) << built_a.error_message();
  EXPECT_TRUE(built_b.ok()) << built_b.error_message();
}

TEST(MaintenanceThreadsConfig, DefaultsToOneIsPrintedAndRefusesZero) {
  std::vector<std::string> args = {"shoald"};
  auto load = [&args] {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    return LoadConfig(int(argv.size()), argv.data());
  };
  auto defaults = load();
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->config.maintenance_threads, 1);
  EXPECT_THAT(PrintConfig(defaults->config), ::testing::HasSubstr("maintenance_threads: 1"));
  args = {"shoald", "--maintenance-threads", "0"};
  auto zero = load();
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(zero.status().message()),
              ::testing::HasSubstr("server.maintenance_threads"));
}

}  // namespace
}  // namespace shoal::server::maintenance_executor_test
