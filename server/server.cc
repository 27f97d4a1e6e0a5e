#include "server/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/base/logging.h"
#include "core/exec/tbb_executor.h"
#include "core/exec/thread_executor.h"
#include "core/index/distance.h"
#include "server/demo_loader.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/raw_service.h"
#include "server/shoal_service.h"
#include "server/tls.h"
#include "storage/cache/partition_cache.h"
#include "storage/collection/catalog.h"
#include "storage/sched/io_scheduler.h"

namespace shoal::server {

struct Server::State {
  Metrics metrics;
  std::unique_ptr<ApiKeys> api_keys;
  // Null without TLS. Before the gRPC and HTTP servers, which read it while they run.
  std::unique_ptr<TlsCertificates> tls;
  // The read path for IVF segments; declared before the catalog, whose segments use them.
  std::unique_ptr<storage::IoScheduler> io;
  std::unique_ptr<storage::PartitionCache> cache;
  std::unique_ptr<storage::Catalog> catalog;
  std::unique_ptr<core::TbbExecutor> cpu;
  // Blocking work that must answer promptly: Get's point reads, create/drop.
  std::unique_ptr<core::ThreadExecutor> admin;
  // Blocking work that runs for minutes: BuildIndex, Flush, background flushes. Apart from
  // `admin`, so builds cannot starve Get.
  std::unique_ptr<core::ThreadExecutor> maintenance;
  std::unique_ptr<ShoalService> service;
  std::unique_ptr<RawShoalService> raw_service;  // what gRPC calls; forwards to `service`
  std::unique_ptr<grpc::Server> grpc_server;
  std::unique_ptr<HttpServer> http;
  std::atomic<bool> ready{false};
  std::atomic<bool> stopping{false};
  int grpc_port = 0;
  int http_port = 0;
};

Server::Server(Config config) : config_(std::move(config)), state_(std::make_unique<State>()) {}

Server::~Server() { Shutdown(); }

absl::Status Server::Start() {
  // Credentials first: a bad key file or certificate fails start-up before anything opens.
  auto credentials = LoadCredentials();
  if (!credentials.ok()) return credentials.status();
  if (absl::Status s = OpenStorage(); !s.ok()) return s;
  StartService();
  if (absl::Status s = StartGrpc(*credentials); !s.ok()) return s;
  if (absl::Status s = StartHttp(); !s.ok()) return s;
  ServeCollections();
  state_->ready.store(true);
  LogServing();
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Server::LoadCredentials() {
  auto api_keys = ApiKeys::Create(config_.api_key, config_.api_key_file);
  if (!api_keys.ok()) return api_keys.status();
  state_->api_keys = *std::move(api_keys);
  if (config_.tls_cert.empty()) return grpc::InsecureServerCredentials();
  auto tls = TlsCertificates::Create(config_);
  if (!tls.ok()) return tls.status();
  state_->tls = *std::move(tls);
  if (config_.tls_reload_seconds > 0) {
    state_->tls->StartPolling(absl::Seconds(config_.tls_reload_seconds));
  }
  return state_->tls->GrpcCredentials();
}

absl::Status Server::OpenStorage() {
  State& s = *state_;
  storage::IoSchedulerOptions io_options;
  io_options.limits.max_requests_in_flight = uint32_t(config_.io_queue_depth);
  io_options.limits.max_bytes_in_flight = uint64_t(config_.io_max_inflight_bytes);
  io_options.limits.max_request_bytes = uint32_t(config_.io_max_request_bytes);
  io_options.backend = config_.io_backend == "uring"   ? storage::IoBackendKind::kUring
                       : config_.io_backend == "pread" ? storage::IoBackendKind::kPread
                                                       : storage::IoBackendKind::kAuto;
  io_options.direct_io = config_.io_direct;
  auto io = storage::IoScheduler::Create(io_options);
  if (!io.ok()) {
    return absl::Status(io.status().code(), absl::StrCat("io.backend: ", io.status().message()));
  }
  s.io = *std::move(io);
  s.metrics.SetIoBackend(std::string(s.io->backend_name()));
  s.cache = std::make_unique<storage::PartitionCache>(
      uint64_t(config_.EffectiveCacheBytes()), uint64_t(config_.cache_uncached_bytes),
      uint64_t(config_.EffectiveRefineBytes()), uint64_t(config_.EffectiveFilterBytes()));

  storage::CollectionOptions options;
  options.wal.max_pending_bytes = uint64_t(config_.wal_max_pending_bytes);
  options.wal.on_sync = [&s](double seconds) { s.metrics.ObserveWalFsync(seconds); };
  options.scheduler = s.io.get();
  options.build_memory_bytes = uint64_t(config_.build_memory_bytes);
  options.max_indexed_fields = uint32_t(config_.filter_max_indexed_fields);
  options.cache = s.cache.get();
  auto catalog = storage::Catalog::Open(storage::DefaultFileSystem(), config_.data_dir, options);
  if (!catalog.ok()) return catalog.status();
  s.catalog = *std::move(catalog);
  return absl::OkStatus();
}

void Server::StartService() {
  State& s = *state_;
  s.cpu = std::make_unique<core::TbbExecutor>(config_.EffectiveCpuThreads());
  s.admin = std::make_unique<core::ThreadExecutor>(2);
  s.maintenance = std::make_unique<core::ThreadExecutor>(std::max(1, config_.maintenance_threads));
  s.service = std::make_unique<ShoalService>(
      s.catalog.get(), s.cpu.get(), s.admin.get(), &s.metrics,
      ShoalService::Options{
          s.api_keys.get(), config_.max_inflight_searches, uint32_t(config_.search_default_nprobe),
          size_t(config_.search_batch_partitions), uint64_t(config_.search_batch_bytes),
          uint64_t(config_.search_max_pinned_bytes), uint64_t(config_.flush_rows),
          RequestLimits{uint64_t(config_.max_candidates_per_query),
                        uint64_t(config_.max_request_bytes), uint64_t(config_.max_message_bytes)},
          uint64_t(config_.max_inflight_request_bytes), config_.max_inflight_per_peer,
          config_.search_share_scans, size_t(config_.search_max_queries_per_scan),
          config_.search_stream_max_inflight, config_.search_batch_requests,
          size_t(config_.search_max_batch_queries)});
  s.raw_service = std::make_unique<RawShoalService>(s.service.get());
  s.service->SetMaintenanceExecutor(s.maintenance.get());
}

absl::Status Server::StartGrpc(const std::shared_ptr<grpc::ServerCredentials>& credentials) {
  State& s = *state_;
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(config_.grpc_addr, credentials, &s.grpc_port);
  // gRPC sets SO_REUSEPORT by default: a second shoald would silently share the port and
  // half the requests would reach the wrong data directory. Refuse a taken port instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Client keepalive pings (shoal::KeepaliveOptions, default every 60 s) are accepted down to
  // every 10 s, also between calls; faster ones still get GOAWAY too_many_pings.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.SetMaxReceiveMessageSize(int(config_.max_message_bytes));
  builder.SetMaxSendMessageSize(int(config_.max_message_bytes));
  builder.RegisterService(s.raw_service.get());
  s.grpc_server = builder.BuildAndStart();
  if (!s.grpc_server || s.grpc_port == 0) {
    return absl::UnavailableError(
        absl::StrCat("server.grpc_addr: cannot listen on ", config_.grpc_addr));
  }
  s.service->SetHealthService(s.grpc_server->GetHealthCheckService());
  return absl::OkStatus();
}

namespace {

// A side cache's stats (RowCache, SelectionCache: the same fields) as a metrics sample.
template <typename Stats>
CacheTierSample TierSample(const Stats& stats, uint64_t budget) {
  return {double(stats.hits), double(stats.misses), double(stats.evictions),
          double(stats.used_bytes), double(budget)};
}

}  // namespace

absl::Status Server::StartHttp() {
  State& s = *state_;
  std::function<bool(const std::string&)> authorize_metrics;  // unset: /metrics is open
  if (config_.metrics_auth) {
    authorize_metrics = [&s](const std::string& h) { return s.api_keys->AcceptsAuthorization(h); };
  }
  s.http = std::make_unique<HttpServer>(HttpServer::Handlers{
      [&s] {
        std::vector<CollectionSample> collections;
        for (const auto& c : s.catalog->List()) {
          const auto stats = c->Stats();
          collections.push_back({c->name(), double(stats.num_vectors), double(stats.disk_bytes)});
        }
        ArenaSample arena{double(s.cpu->concurrency()), double(s.cpu->busy_micros()) / 1e6,
                          double(s.cpu->outstanding())};
        const auto io = s.io->stats();
        const auto cache = s.cache->stats();
        // Designated: a field added to StorageSample cannot shift the ones after it.
        const StorageSample storage{
            .io_reads = double(io.reads),
            .io_submissions = double(io.submissions),
            .io_bytes = double(io.bytes_read),
            .io_errors = double(io.errors),
            .io_cancelled = double(io.cancelled),
            .io_expired = double(io.expired),
            .cache_hits = double(cache.hits),
            .cache_misses = double(cache.misses),
            .cache_evictions = double(cache.evictions),
            .cache_used = double(cache.used_bytes),
            .cache_pinned = double(cache.pinned_bytes),
            .cache_budget = double(s.cache->budget()),
            .refine = TierSample(s.cache->rows().stats(), s.cache->rows().budget()),
            .filter = TierSample(s.cache->selections().stats(), s.cache->selections().budget()),
            .io_kernel_seconds = double(io.kernel_us) / 1e6};
        return s.metrics.Render(collections, arena, storage);
      },
      [&s] { return s.ready.load(); }, authorize_metrics});
  HttpServer::Tls tls;
  if (s.tls) tls.set_up = [&s](ssl_ctx_st& ctx) { return s.tls->SetUpHttpsContext(ctx); };
  auto http_port = s.http->Start(config_.http_addr, tls);
  if (!http_port.ok()) return http_port.status();
  s.http_port = *http_port;
  return absl::OkStatus();
}

void Server::ServeCollections() {
  State& s = *state_;
  // SetServingStatus(bool) sets every service, per-collection ones included: first the server,
  // then each collection (broken ones NOT_SERVING: they answer DATA_LOSS until dropped), then
  // the demo loader, which flips its collection while it loads.
  s.grpc_server->GetHealthCheckService()->SetServingStatus(true);
  for (const auto& c : s.catalog->List()) s.service->SetCollectionServing(c->name(), true);
  for (const auto& b : s.catalog->Broken()) s.service->SetCollectionServing(b.name, false);
  if (config_.demo) {
    // A maintenance thread, not an admin one: the demo ends with an index build.
    s.maintenance->Submit([this, &s] {
      absl::Status loaded = LoadDemoCollection(
          s.catalog.get(), *s.cpu, config_.demo_file,
          [&s](bool serving) { s.service->SetCollectionServing(kDemoCollection, serving); },
          s.stopping);
      if (!loaded.ok()) core::Logger("demo")->error("{}", loaded.ToString());
    });
  }
}

void Server::LogServing() const {
  const State& s = *state_;
  core::Logger("server")->info(
      "shoald serving gRPC{} on port {} and HTTP{} on port {}; data in {}; {} CPU thread(s); "
      "{} kernels; {} I/O; cache {} MiB",
      config_.tls_cert.empty()        ? ""
      : config_.tls_client_ca.empty() ? " (TLS)"
                                      : " (mutual TLS)",
      s.grpc_port, config_.tls_cert.empty() ? "" : "S", s.http_port, config_.data_dir,
      s.cpu->concurrency(), core::SimdLevelName(core::ActiveSimdLevel()), s.io->backend_name(),
      s.cache->budget() >> 20);
}

void Server::Shutdown() {
  State& s = *state_;
  if (s.stopping.exchange(true)) return;
  auto log = core::Logger("server");
  s.ready.store(false);
  bool reads_outstanding = false;
  if (s.grpc_server) {
    log->info("shutting down: draining in-flight requests (up to {}s)",
              config_.shutdown_grace_seconds);
    s.service->StopAdmitting();
    s.grpc_server->GetHealthCheckService()->SetServingStatus(false);
    // Wait for our own in-flight count rather than gRPC's graceful GOAWAY, which also waits
    // several seconds for idle client connections to go away.
    const auto grace =
        std::chrono::steady_clock::now() + std::chrono::seconds(config_.shutdown_grace_seconds);
    while (s.metrics.rpcs_in_flight() > 0 && std::chrono::steady_clock::now() < grace) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (s.metrics.rpcs_in_flight() > 0) {
      log->warn("cancelling {} request(s) still running after the grace period",
                s.metrics.rpcs_in_flight());
    }
    s.grpc_server->Shutdown(std::chrono::system_clock::now());
    s.grpc_server->Wait();
    log->debug("gRPC server stopped");
    // A cancelled request may have answered while a shared scan's read it issued is still at
    // the disk; that read calls back into the cache and the scheduler freed below.
    const auto reads_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (s.service->scan_fetches_in_flight() > 0 &&
           std::chrono::steady_clock::now() < reads_deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (const size_t out = s.service->scan_fetches_in_flight(); out > 0) {
      const auto cache = s.cache->stats();
      log->error(
          "shutdown not clean: {} shared-scan read(s) still in flight after 30s ({} cache "
          "bytes pinned, {} in use); leaving the I/O scheduler and the cache allocated for "
          "them, exit code {}",
          out, cache.pinned_bytes, cache.used_bytes, kExitShutdownLeakedState);
      reads_outstanding = true;
    }
  }
  if (s.cpu) s.cpu->WaitIdle();
  s.maintenance.reset();  // drains its queue (the demo loader watches `stopping`)
  s.admin.reset();        // likewise, before the catalog closes
  log->debug("executors idle");
  if (s.catalog) {
    absl::Status closed = s.catalog->Close();
    if (!closed.ok()) log->error("closing collections: {}", closed.ToString());
  }
  if (s.http) s.http->Stop();
  s.raw_service.reset();
  s.service.reset();
  s.catalog.reset();  // segments close their files in the scheduler
  // The scheduler first: its destructor joins the I/O thread, which may still be unwinding the
  // cache's completion code after the last shared-scan read answered. Pooled buffers the cache
  // still holds keep their pool alive (a shared_ptr), so the cache can go after it.
  if (reads_outstanding) {
    // A read still at the disk calls into both when it answers: leak them rather than free
    // memory a late completion would use (the process is exiting anyway).
    static_cast<void>(s.io.release());
    static_cast<void>(s.cache.release());
    clean_shutdown_ = false;
  }
  s.io.reset();
  s.cache.reset();
  if (clean_shutdown_) {
    log->info("shutdown complete");
  } else {
    log->error("shutdown complete, the I/O scheduler and the cache left allocated");
  }
}

absl::StatusOr<bool> Server::ReloadTls() {
  if (config_.tls_cert.empty()) return false;
  if (!state_->tls) return absl::FailedPreconditionError("not started");
  return state_->tls->Reload();
}

absl::StatusOr<size_t> Server::ReloadApiKeys() {
  if (!state_->api_keys) return absl::FailedPreconditionError("not started");
  return state_->api_keys->Reload();
}

int Server::grpc_port() const { return state_->grpc_port; }
int Server::http_port() const { return state_->http_port; }

}  // namespace shoal::server
