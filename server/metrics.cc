#include "server/metrics.h"

#include <grpcpp/support/status.h>

#include <optional>
#include <set>

#include "core/index/distance.h"
#include "prometheus/text_serializer.h"
#include "server/alloc_counter.h"

namespace shoal::server {
namespace {

constexpr char kHeapAllocations[] = "shoal_process_heap_allocations_total";

const char* CodeName(int code) {
  static const char* kNames[] = {"OK",
                                 "CANCELLED",
                                 "UNKNOWN",
                                 "INVALID_ARGUMENT",
                                 "DEADLINE_EXCEEDED",
                                 "NOT_FOUND",
                                 "ALREADY_EXISTS",
                                 "PERMISSION_DENIED",
                                 "RESOURCE_EXHAUSTED",
                                 "FAILED_PRECONDITION",
                                 "ABORTED",
                                 "OUT_OF_RANGE",
                                 "UNIMPLEMENTED",
                                 "INTERNAL",
                                 "UNAVAILABLE",
                                 "DATA_LOSS",
                                 "UNAUTHENTICATED"};
  return code >= 0 && code <= 16 ? kNames[code] : "UNKNOWN";
}

}  // namespace

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()) {
  requests_ = &prometheus::BuildCounter()
                   .Name("shoal_rpc_requests_total")
                   .Help("gRPC requests handled, by method and status code")
                   .Register(*registry_);
  latency_ = &prometheus::BuildHistogram()
                  .Name("shoal_rpc_latency_seconds")
                  .Help("gRPC request latency from arrival to response, by method")
                  .Register(*registry_);
  vectors_ = &prometheus::BuildGauge()
                  .Name("shoal_collection_vectors")
                  .Help("Live vectors per collection")
                  .Register(*registry_);
  disk_bytes_ = &prometheus::BuildGauge()
                     .Name("shoal_collection_disk_bytes")
                     .Help("Bytes on disk per collection")
                     .Register(*registry_);
  wal_fsync_ =
      &prometheus::BuildHistogram()
           .Name("shoal_wal_fsync_seconds")
           .Help("Duration of WAL group commits (write + fdatasync)")
           .Register(*registry_)
           .Add({}, prometheus::Histogram::BucketBoundaries{0.0001, 0.0005, 0.001, 0.002, 0.005,
                                                            0.01, 0.02, 0.05, 0.1, 0.5, 1});
  search_inflight_ = &prometheus::BuildGauge()
                          .Name("shoal_search_inflight")
                          .Help("Search requests admitted and not yet answered")
                          .Register(*registry_)
                          .Add({});
  queries_per_scan_ =
      &prometheus::BuildHistogram()
           .Name("shoal_search_queries_per_scan")
           .Help("Queries scored by one partition scan, of every request sharing it")
           .Register(*registry_)
           .Add({}, prometheus::Histogram::BucketBoundaries{1, 2, 4, 8, 16, 32, 64, 128, 256});
  requests_per_batch_ =
      &prometheus::BuildHistogram()
           .Name("shoal_search_requests_per_batch")
           .Help("Searches merged into one engine batch (search.batch_requests)")
           .Register(*registry_)
           .Add({}, prometheus::Histogram::BucketBoundaries{1, 2, 4, 8, 16, 32, 64, 128, 256});
  auto& refusals = prometheus::BuildCounter()
                       .Name("shoal_admission_refusals_total")
                       .Help("Requests refused with RESOURCE_EXHAUSTED at admission, by reason")
                       .Register(*registry_);
  refusals_[int(Refusal::kServerSlots)] = &refusals.Add({{"reason", "server_slots"}});
  refusals_[int(Refusal::kPeerSlots)] = &refusals.Add({{"reason", "peer_slots"}});
  refusals_[int(Refusal::kInflightBytes)] = &refusals.Add({{"reason", "inflight_bytes"}});
  rpc_inflight_ = &prometheus::BuildGauge()
                       .Name("shoal_rpc_inflight")
                       .Help("gRPC requests received and not yet completed")
                       .Register(*registry_)
                       .Add({});
  arena_threads_ = &prometheus::BuildGauge()
                        .Name("shoal_cpu_arena_threads")
                        .Help("Threads in the CPU reservation (cpu.threads)")
                        .Register(*registry_)
                        .Add({});
  arena_queued_ = &prometheus::BuildGauge()
                       .Name("shoal_cpu_arena_queued_tasks")
                       .Help("Tasks submitted to the CPU arena and not finished")
                       .Register(*registry_)
                       .Add({});
  arena_busy_ = &prometheus::BuildCounter()
                     .Name("shoal_cpu_arena_busy_seconds_total")
                     .Help("Thread-seconds spent running tasks in the CPU arena")
                     .Register(*registry_)
                     .Add({});
  const std::vector<std::pair<const char*, const char*>> counters = {
      {"shoal_io_reads_total", "Reads answered with data"},
      {"shoal_io_submissions_total", "Kernel reads issued, after coalescing"},
      {"shoal_io_read_bytes_total", "Bytes read by the kernel"},
      {"shoal_io_errors_total", "Reads that failed"},
      {"shoal_io_cancelled_total", "Reads cancelled by their query"},
      {"shoal_io_expired_total", "Reads dropped because their deadline passed"},
      {"shoal_io_read_seconds_total",
       "Kernel time of the reads issued, submission to completion, summed (mean latency = "
       "rate of this / rate of shoal_io_submissions_total)"},
      {"shoal_cache_hits_total", "Partition cache hits"},
      {"shoal_cache_misses_total", "Partition cache misses (loads started)"},
      {"shoal_cache_evictions_total", "Partitions evicted from the cache"},
      {"shoal_refine_cache_hits_total", "Refine rows answered from the row cache"},
      {"shoal_refine_cache_misses_total", "Refine rows read (page cache or disk)"},
      {"shoal_refine_cache_evictions_total", "Rows evicted from the refine row cache"},
      {"shoal_filter_cache_hits_total",
       "Segment selections of a filtered search taken from the filter cache"},
      {"shoal_filter_cache_misses_total",
       "Segment selections evaluated over the attribute columns (then kept)"},
      {"shoal_filter_cache_evictions_total", "Selections evicted from the filter cache"}};
  for (const auto& [name, help] : counters) {
    sampled_counters_[name] =
        &prometheus::BuildCounter().Name(name).Help(help).Register(*registry_).Add({});
  }
  if (HeapAllocations()) {  // shoald counts them; tests and sanitizer builds do not
    sampled_counters_[kHeapAllocations] =
        &prometheus::BuildCounter()
             .Name(kHeapAllocations)
             .Help("Heap allocations (malloc, calloc, realloc) of the process since it started")
             .Register(*registry_)
             .Add({});
  }
  auto& cache_bytes = prometheus::BuildGauge()
                          .Name("shoal_cache_bytes")
                          .Help("Partition cache bytes")
                          .Register(*registry_);
  sampled_gauges_["used"] = &cache_bytes.Add({{"state", "used"}});
  sampled_gauges_["pinned"] = &cache_bytes.Add({{"state", "pinned"}});
  sampled_gauges_["budget"] = &prometheus::BuildGauge()
                                   .Name("shoal_cache_budget_bytes")
                                   .Help("Partition cache budget (cache.bytes)")
                                   .Register(*registry_)
                                   .Add({});
  auto& refine_bytes = prometheus::BuildGauge()
                           .Name("shoal_refine_cache_bytes")
                           .Help("Refine row cache bytes (budget: cache.refine_bytes)")
                           .Register(*registry_);
  sampled_gauges_["refine_used"] = &refine_bytes.Add({{"state", "used"}});
  sampled_gauges_["refine_budget"] = &refine_bytes.Add({{"state", "budget"}});
  auto& filter_bytes = prometheus::BuildGauge()
                           .Name("shoal_filter_cache_bytes")
                           .Help("Filter selection cache bytes (budget: cache.filter_bytes)")
                           .Register(*registry_);
  sampled_gauges_["filter_used"] = &filter_bytes.Add({{"state", "used"}});
  sampled_gauges_["filter_budget"] = &filter_bytes.Add({{"state", "budget"}});
  prometheus::BuildGauge()
      .Name("shoal_simd_level")
      .Help("Distance kernel level in use")
      .Register(*registry_)
      .Add({{"level", std::string(core::SimdLevelName(core::ActiveSimdLevel()))}})
      .Set(1);
  prometheus::BuildGauge()
      .Name("shoal_build_info")
      .Help("Build information")
      .Register(*registry_)
      .Add({{"version", "0.1.0"}})
      .Set(1);
}

void Metrics::SetIoBackend(const std::string& name) {
  prometheus::BuildGauge()
      .Name("shoal_io_backend")
      .Help("I/O backend in use: io_uring, or the pread fallback (I-8)")
      .Register(*registry_)
      .Add({{"backend", name}})
      .Set(1);
}

void Metrics::SetTier(const std::string& tier, const CacheTierSample& sample) {
  SetCounter("shoal_" + tier + "_cache_hits_total", sample.hits);
  SetCounter("shoal_" + tier + "_cache_misses_total", sample.misses);
  SetCounter("shoal_" + tier + "_cache_evictions_total", sample.evictions);
  sampled_gauges_.at(tier + "_used")->Set(sample.used);
  sampled_gauges_.at(tier + "_budget")->Set(sample.budget);
}

void Metrics::SetCounter(const std::string& name, double value) {
  prometheus::Counter* c = sampled_counters_.at(name);
  if (value > c->Value()) c->Increment(value - c->Value());
}

void Metrics::ObserveRpc(const std::string& method, int code, double seconds) {
  prometheus::Counter* counter;
  prometheus::Histogram* histogram;
  {
    absl::MutexLock lock(&mu_);
    auto& c = request_counters_[{method, code}];
    if (c == nullptr) c = &requests_->Add({{"method", method}, {"code", CodeName(code)}});
    counter = c;
    auto& h = latency_histograms_[method];
    if (h == nullptr) {
      h = &latency_->Add({{"method", method}},
                         prometheus::Histogram::BucketBoundaries{0.0001, 0.00025, 0.0005, 0.001,
                                                                 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                                 0.1, 0.25, 0.5, 1, 2.5, 5, 10});
    }
    histogram = h;
  }
  counter->Increment();
  histogram->Observe(seconds);
}

std::string Metrics::Render(const std::vector<CollectionSample>& collections,
                            const ArenaSample& arena, const StorageSample& storage) {
  absl::MutexLock lock(&mu_);
  std::set<std::string> seen;
  for (const CollectionSample& c : collections) {
    seen.insert(c.name);
    auto& gauges = collection_gauges_[c.name];
    if (gauges.first == nullptr) {
      gauges.first = &vectors_->Add({{"collection", c.name}});
      gauges.second = &disk_bytes_->Add({{"collection", c.name}});
    }
    gauges.first->Set(c.vectors);
    gauges.second->Set(c.disk_bytes);
  }
  for (auto it = collection_gauges_.begin(); it != collection_gauges_.end();) {
    if (seen.count(it->first)) {
      ++it;
      continue;
    }
    vectors_->Remove(it->second.first);
    disk_bytes_->Remove(it->second.second);
    it = collection_gauges_.erase(it);
  }
  if (std::optional<uint64_t> n = HeapAllocations();
      n && sampled_counters_.contains(kHeapAllocations)) {
    SetCounter(kHeapAllocations, double(*n));
  }
  SetCounter("shoal_io_reads_total", storage.io_reads);
  SetCounter("shoal_io_submissions_total", storage.io_submissions);
  SetCounter("shoal_io_read_bytes_total", storage.io_bytes);
  SetCounter("shoal_io_errors_total", storage.io_errors);
  SetCounter("shoal_io_cancelled_total", storage.io_cancelled);
  SetCounter("shoal_io_expired_total", storage.io_expired);
  SetCounter("shoal_io_read_seconds_total", storage.io_kernel_seconds);
  SetCounter("shoal_cache_hits_total", storage.cache_hits);
  SetCounter("shoal_cache_misses_total", storage.cache_misses);
  SetCounter("shoal_cache_evictions_total", storage.cache_evictions);
  sampled_gauges_.at("used")->Set(storage.cache_used);
  sampled_gauges_.at("pinned")->Set(storage.cache_pinned);
  sampled_gauges_.at("budget")->Set(storage.cache_budget);
  SetTier("refine", storage.refine);
  SetTier("filter", storage.filter);
  arena_threads_->Set(arena.threads);
  arena_queued_->Set(arena.queued);
  const double busy_delta = arena.busy_seconds - arena_busy_->Value();
  if (busy_delta > 0) arena_busy_->Increment(busy_delta);
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace shoal::server
