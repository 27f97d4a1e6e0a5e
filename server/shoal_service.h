// ShoalService: the handlers of the shoal.v1.Shoal service (gRPC reaches them through
// RawShoalService, raw_service.h, which parses the request and owns it and the response).
//
// Handlers validate the request (I-7) and bound its cost (I-9, request_limits.h), then hand
// the work on as their last step and return at once: searches go to the CPU arena
// (core::IvfSearch), writes to the collection's WAL, create/drop (which fsync and rename) and
// reads of stored rows to the admin executor, BuildIndex / Flush to the maintenance one. The
// call is finished later from whichever thread completes the work; no handler blocks a gRPC
// thread. Work finished on other threads is wrapped in Guarded(), so an exception answers
// INTERNAL naming the method.
//
// Thread-safety: all methods are called concurrently by gRPC; shared state is atomic or
// lives in thread-safe components (Catalog, Metrics, executors).
#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <atomic>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "core/exec/executor.h"
#include "core/filter/filter.h"
#include "core/index/scan_share.h"
#include "core/index/search_batcher.h"
#include "server/api_keys.h"
#include "server/metrics.h"
#include "server/request_limits.h"
#include "shoal/v1/shoal.pb.h"
#include "storage/collection/catalog.h"

namespace shoal::server {

class UnaryReactor;
class OnceDone;  // a SearchDone that runs once (shoal_service.cc)
using grpc::CallbackServerContext;

// The token of one search: `call` (the RPC's), or with timeout_ms > 0 one that also expires
// timeout_ms from now and is cancelled with `call`.
std::shared_ptr<core::CancelToken> SearchToken(std::shared_ptr<core::CancelToken> call,
                                               uint32_t timeout_ms);

// The health service name of a collection: "shoal.v1.Shoal/<collection>".
std::string CollectionHealthName(const std::string& collection);

class ShoalService final {
 public:
  struct Options {
    const ApiKeys* api_keys = nullptr;  // null or !enabled(): no authentication
    int max_inflight_searches = 256;
    uint32_t default_nprobe = 16;
    size_t batch_partitions = 16;
    uint64_t batch_bytes = 8ull << 20;
    uint64_t max_pinned_bytes = 64ull << 20;
    uint64_t flush_rows = 200000;  // memtable rows that trigger a background flush
    RequestLimits limits;
    uint64_t max_inflight_request_bytes = 1ull << 30;
    // Searches and Gets of one connection at once; 0 = max(1, max_inflight_searches / 4).
    int max_inflight_per_peer = 0;
    bool share_scans = true;  // search.share_scans
    size_t max_queries_per_scan = 64;
    int stream_max_inflight = 32;  // search.stream_max_inflight: one SearchStream's at once
    bool batch_requests = true;    // search.batch_requests
    size_t max_batch_queries = 256;
  };

  // One Search after the call was admitted (Admit): what the unary handler and SearchStream
  // share. `req` and `resp` live until `done` has run.
  struct SearchCall {
    const v1::SearchRequest* req = nullptr;
    v1::SearchResponse* resp = nullptr;
    std::shared_ptr<core::CancelToken> cancel;  // the search's deadline and cancellation
    // The connection whose server.max_inflight_per_peer share it takes; nullopt: none (a
    // stream's message, bounded by the stream's own flow control).
    std::optional<std::string> peer;
  };
  // Runs once, on any thread: OK with `resp` filled, or the search's error.
  using SearchDone = absl::AnyInvocable<void(absl::Status) &&>;

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
  // Shared-scan fetches still in flight (core::ScanShare::InFlightFetches): a cancelled
  // request may have answered while a read it issued is still at the disk. Non-blocking.
  size_t scan_fetches_in_flight() const { return scan_share_->InFlightFetches(); }
  int max_inflight_per_peer() const { return peer_slots_.per_peer(); }

  // The handlers. Each finishes `r` exactly once, now or later from another thread; `req` and
  // `resp` live until then (they belong to `r`).
  void CreateCollection(CallbackServerContext* ctx, UnaryReactor* r,
                        const v1::CreateCollectionRequest* req, v1::CreateCollectionResponse* resp);
  void DropCollection(CallbackServerContext* ctx, UnaryReactor* r,
                      const v1::DropCollectionRequest* req, v1::DropCollectionResponse* resp);
  void ListCollections(CallbackServerContext* ctx, UnaryReactor* r,
                       const v1::ListCollectionsRequest* req, v1::ListCollectionsResponse* resp);
  void DescribeCollection(CallbackServerContext* ctx, UnaryReactor* r,
                          const v1::DescribeCollectionRequest* req, v1::CollectionInfo* resp);
  void Upsert(CallbackServerContext* ctx, UnaryReactor* r, const v1::UpsertRequest* req,
              v1::UpsertResponse* resp);
  void Delete(CallbackServerContext* ctx, UnaryReactor* r, const v1::DeleteRequest* req,
              v1::DeleteResponse* resp);
  void Get(CallbackServerContext* ctx, UnaryReactor* r, const v1::GetRequest* req,
           v1::GetResponse* resp);
  void Search(CallbackServerContext* ctx, UnaryReactor* r, const v1::SearchRequest* req,
              v1::SearchResponse* resp);
  void Count(CallbackServerContext* ctx, UnaryReactor* r, const v1::CountRequest* req,
             v1::CountResponse* resp);
  void BuildIndex(CallbackServerContext* ctx, UnaryReactor* r, const v1::BuildIndexRequest* req,
                  v1::BuildIndexResponse* resp);
  void Flush(CallbackServerContext* ctx, UnaryReactor* r, const v1::FlushRequest* req,
             v1::FlushResponse* resp);
  // Client streaming: raw messages, parsed one by one (upsert_stream.cc).
  grpc::ServerReadReactor<grpc::ByteBuffer>* UpsertStream(CallbackServerContext* ctx,
                                                          grpc::ByteBuffer* resp);
  // Bidirectional streaming: many searches, each answered when done (search_stream.cc).
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* SearchStream(
      CallbackServerContext* ctx);

  // Validates, prices (I-9) and admits one search (server slots, the peer's share, in-flight
  // bytes), then runs it on the arena; `done` answers it. Never blocks.
  void RunSearch(SearchCall call, SearchDone done);
  const Options& options() const { return options_; }

  // Shared by the handlers and the streaming reactor.
  absl::Status Admit(grpc::CallbackServerContext* ctx) const;
  absl::StatusOr<std::shared_ptr<storage::Collection>> Lookup(const std::string& name,
                                                              const char* field) const;
  // Admit() then Lookup().
  absl::StatusOr<std::shared_ptr<storage::Collection>> AdmitAndLookup(
      grpc::CallbackServerContext* ctx, const std::string& name, const char* field) const;
  Metrics* metrics() const { return metrics_; }
  // Queues a background flush when a collection's memtable has grown past options_.flush_rows
  // (one at a time per collection).
  void MaybeFlush(const std::shared_ptr<storage::Collection>& collection) noexcept;

 private:
  // One search counted in search.max_inflight (taken by the caller) and the in-flight gauge,
  // until Release() or destruction. Move-only.
  class SearchSlot {
   public:
    explicit SearchSlot(ShoalService* service);
    SearchSlot(SearchSlot&& other) noexcept : service_(std::exchange(other.service_, nullptr)) {}
    SearchSlot& operator=(SearchSlot&&) = delete;
    ~SearchSlot() { Release(); }
    void Release();

   private:
    ShoalService* service_;
  };

  // A Get's or Count's shares: the connection's slot (server.max_inflight_per_peer) and its
  // estimated bytes (I-9), each counted as a refusal when it is not granted.
  struct Shares {
    PeerSlots::Slot peer_slot;
    InflightBytes::Reservation reservation;
  };
  absl::StatusOr<Shares> TakeShares(const std::string& peer, uint64_t bytes);

  void FillInfo(const storage::Collection& c, v1::CollectionInfo* info) const;
  // Search with include_vectors / include_attributes: the hits' stored points (blocking reads).
  // RESOURCE_EXHAUSTED when they would take the response past `max_response_bytes`.
  static absl::Status AttachPoints(const storage::Collection& collection,
                                   const v1::SearchRequest& req, uint64_t max_response_bytes,
                                   v1::SearchResponse* resp);
  // Search's completion: the engine's results into `resp` (the stored points attached on the
  // admin executor when asked for), then Finish; releases the request's byte reservation and
  // its connection's slot on every path.
  void FinishSearch(const std::shared_ptr<OnceDone>& once, const v1::SearchRequest* req,
                    v1::SearchResponse* resp,
                    const std::shared_ptr<storage::Collection>& collection,
                    PeerSlots::Slot peer_slot, InflightBytes::Reservation reservation,
                    absl::StatusOr<std::vector<core::QueryResult>> results);
  // State BROKEN and the reason; false when `name` is not a broken collection.
  bool FillBrokenInfo(const std::string& name, v1::CollectionInfo* info) const;
  // Appends the broken collections, then sorts the list by name.
  void AddBrokenInfos(v1::ListCollectionsResponse* resp) const;
  core::Executor* maintenance() const { return maintenance_ ? maintenance_ : admin_; }
  void QueueFlushIfDue(const std::shared_ptr<storage::Collection>& collection);
  template <typename Response>
  void RunMaintenance(CallbackServerContext* ctx, UnaryReactor* r, const std::string& name,
                      Response* resp,
                      absl::StatusOr<std::string> (storage::Collection::*op)(core::Executor&));

  storage::Catalog* const catalog_;
  core::Executor* const cpu_;
  core::Executor* const admin_;
  Metrics* const metrics_;
  const Options options_;
  // Shared partition scans of every collection's searches (keyed by segment and partition).
  const std::shared_ptr<core::ScanShare> scan_share_;
  // Merges searches that arrive while the CPU reservation is busy; null: search.batch_requests
  // is off and every search goes to the engine alone.
  const std::shared_ptr<core::SearchBatcher> batcher_;
  grpc::HealthCheckServiceInterface* health_ = nullptr;
  core::Executor* maintenance_ = nullptr;
  std::atomic<bool> admitting_{true};
  std::atomic<int64_t> inflight_searches_{0};
  InflightBytes inflight_bytes_;  // estimates of the Searches and Gets running (I-9)
  PeerSlots peer_slots_;          // Searches and Gets running per client connection
  absl::Mutex flush_mu_;
  // Collections with a background flush queued or running.
  std::set<std::string> flushing_ ABSL_GUARDED_BY(flush_mu_);
};

}  // namespace shoal::server
