// ShoalService: the shoal.v1.Shoal gRPC service on the callback API.
//
// Handlers validate the request (I-7), then hand the work on and return at once: searches go
// to the CPU arena (core::FlatSearch), writes to the collection's WAL, create/drop (which
// fsync and rename) and Get to the admin executor, BuildIndex / Flush to the maintenance one. The
// response is finished later from whichever thread completes the work; no handler blocks a gRPC
// thread.
//
// Thread-safety: all methods are called concurrently by gRPC; shared state is atomic or
// lives in thread-safe components (Catalog, Metrics, executors).
#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <atomic>
#include <mutex>
#include <set>
#include <string>

#include "core/exec/executor.h"
#include "server/metrics.h"
#include "shoal/v1/shoal.grpc.pb.h"
#include "storage/collection/catalog.h"

namespace shoal::server {

class UnaryReactor;

// The health service name of a collection: "shoal.v1.Shoal/<collection>".
std::string CollectionHealthName(const std::string& collection);

class ShoalService final : public v1::Shoal::CallbackService {
 public:
  struct Options {
    std::string api_key;  // empty = no authentication
    int max_inflight_searches = 256;
    uint32_t default_nprobe = 16;
    size_t batch_partitions = 16;
    uint64_t batch_bytes = 8ull << 20;
    uint64_t max_pinned_bytes = 64ull << 20;
    uint64_t flush_rows = 200000;  // memtable rows that trigger a background flush
  };

  ShoalService(storage::Catalog* catalog, core::Executor* cpu, core::Executor* admin,
               Metrics* metrics, Options options);

  // Called once the gRPC server exists (the health service belongs to it).
  void SetHealthService(grpc::HealthCheckServiceInterface* health) { health_ = health; }
  void SetCollectionServing(const std::string& collection, bool serving);
  // Where BuildIndex, Flush and background flushes run, apart from the admin executor that
  // serves Get and create/drop (a build holds its thread for minutes). Unset: the admin one.
  // REQUIRES: called before the server starts.
  void SetMaintenanceExecutor(core::Executor* maintenance) { maintenance_ = maintenance; }

  // From now on every new RPC gets UNAVAILABLE (graceful shutdown).
  void StopAdmitting() { admitting_.store(false); }
  int64_t inflight_searches() const { return inflight_searches_.load(); }

  grpc::ServerUnaryReactor* CreateCollection(grpc::CallbackServerContext* ctx,
                                             const v1::CreateCollectionRequest* req,
                                             v1::CreateCollectionResponse* resp) override;
  grpc::ServerUnaryReactor* DropCollection(grpc::CallbackServerContext* ctx,
                                           const v1::DropCollectionRequest* req,
                                           v1::DropCollectionResponse* resp) override;
  grpc::ServerUnaryReactor* ListCollections(grpc::CallbackServerContext* ctx,
                                            const v1::ListCollectionsRequest* req,
                                            v1::ListCollectionsResponse* resp) override;
  grpc::ServerUnaryReactor* DescribeCollection(grpc::CallbackServerContext* ctx,
                                               const v1::DescribeCollectionRequest* req,
                                               v1::CollectionInfo* resp) override;
  grpc::ServerUnaryReactor* Upsert(grpc::CallbackServerContext* ctx, const v1::UpsertRequest* req,
                                   v1::UpsertResponse* resp) override;
  grpc::ServerReadReactor<v1::UpsertRequest>* UpsertStream(grpc::CallbackServerContext* ctx,
                                                           v1::UpsertResponse* resp) override;
  grpc::ServerUnaryReactor* Delete(grpc::CallbackServerContext* ctx, const v1::DeleteRequest* req,
                                   v1::DeleteResponse* resp) override;
  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* ctx, const v1::GetRequest* req,
                                v1::GetResponse* resp) override;
  grpc::ServerUnaryReactor* Search(grpc::CallbackServerContext* ctx, const v1::SearchRequest* req,
                                   v1::SearchResponse* resp) override;
  grpc::ServerUnaryReactor* BuildIndex(grpc::CallbackServerContext* ctx,
                                       const v1::BuildIndexRequest* req,
                                       v1::BuildIndexResponse* resp) override;
  grpc::ServerUnaryReactor* Flush(grpc::CallbackServerContext* ctx, const v1::FlushRequest* req,
                                  v1::FlushResponse* resp) override;

  // Shared by the handlers and the streaming reactor.
  absl::Status Admit(grpc::CallbackServerContext* ctx) const;
  absl::StatusOr<std::shared_ptr<storage::Collection>> Lookup(const std::string& name,
                                                              const char* field) const;
  // Admit() then Lookup().
  absl::StatusOr<std::shared_ptr<storage::Collection>> AdmitAndLookup(
      grpc::CallbackServerContext* ctx, const std::string& name, const char* field) const;
  Metrics* metrics() const { return metrics_; }

 private:
  void FillInfo(const storage::Collection& c, v1::CollectionInfo* info) const;
  // State BROKEN and the reason; false when `name` is not a broken collection.
  bool FillBrokenInfo(const std::string& name, v1::CollectionInfo* info) const;
  // Appends the broken collections, then sorts the list by name.
  void AddBrokenInfos(v1::ListCollectionsResponse* resp) const;
  core::Executor* maintenance() const { return maintenance_ ? maintenance_ : admin_; }
  // Queues a background flush when an indexed collection's memtable has grown past
  // options_.flush_rows (one at a time per collection).
  void MaybeFlush(const std::shared_ptr<storage::Collection>& collection);
  template <typename Response>
  grpc::ServerUnaryReactor* RunMaintenance(
      grpc::CallbackServerContext* ctx, const char* method, const std::string& name, Response* resp,
      absl::StatusOr<std::string> (storage::Collection::*op)(core::Executor&));
  // The reactor for one unary call, with the call's deadline as its cancel token.
  UnaryReactor* NewReactor(grpc::CallbackServerContext* ctx, const char* method) const;

  storage::Catalog* const catalog_;
  core::Executor* const cpu_;
  core::Executor* const admin_;
  Metrics* const metrics_;
  const Options options_;
  grpc::HealthCheckServiceInterface* health_ = nullptr;
  core::Executor* maintenance_ = nullptr;
  std::atomic<bool> admitting_{true};
  std::atomic<int64_t> inflight_searches_{0};
  mutable std::mutex flush_mu_;
  std::set<std::string> flushing_;  // guarded by flush_mu_: background flushes queued or running
};

}  // namespace shoal::server
