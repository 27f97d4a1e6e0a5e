// ShoalTarget: a Shoal collection searched over gRPC on loopback, the way users reach it.
//
// Either the harness starts its own shoald (LocalShoald, one server and data directory per
// target, so CPU and memory figures belong to that index alone) or it uses a running server
// (`external_addr`; then CPU and RSS only with `server_pid`, storage counters only with
// `metrics_url`). A collection already holding exactly this dataset with this index is reused;
// otherwise it is (re)created, loaded through an upsert stream and indexed with BuildIndex.
// The knob is nprobe (none for FLAT).
//
// Config overrides: a target spelled "shoal:ivf_flat@search.share_scans=false" (any number of
// "@key=value", keys as in `shoald --print-config`) starts its own shoald with those settings,
// written to a YAML file passed with --config (so --server-arg flags still win over them). It
// searches the same collection as the target without overrides, so "on vs off" compares one
// index in one run. Keys shoald does not know are refused before it starts (shoald itself
// would ignore them). Needs the harness's own server, not --target.
//
// Usage() also reads shoal_search_queries_per_scan's _sum and _count (how many queries one
// partition scan served), when the server exports it.
//
// MakeCold() restarts the server and drops the page cache of its files (posix_fadvise), so the
// next queries read from the device, through O_DIRECT when --io-direct is among server_args.
//
// Thread-safety: as Target (shoal::Client is thread-safe).
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bench/harness/target.h"
#include "client/client.h"
#include "tests/support/local_shoald.h"

namespace shoal::bench {

struct ConfigOverride {
  std::string key;  // dotted YAML key, "search.share_scans"
  std::string value;
};

// Splits "shoal:ivf_flat@a.b=1@c.d=x" into the target ("shoal:ivf_flat") and its overrides.
// INVALID_ARGUMENT names a part without '=' or a key that is not dotted lower-case
// ([a-z0-9_], '.' between parts).
absl::StatusOr<std::pair<std::string, std::vector<ConfigOverride>>> SplitTargetOverrides(
    std::string_view spec);
// The overrides as a YAML document (dotted keys nest; values double-quoted, which shoald's
// parser reads as the same scalar).
std::string OverridesYaml(const std::vector<ConfigOverride>& overrides);

struct ShoalParams {
  IndexType index = IndexType::kIvfFlat;
  uint32_t nlist = 1024;
  uint32_t pq_m = 0;
  uint32_t pq_bits = 0;        // IVF_PQ: 4 = fast-scan codes ("shoal:ivf_pq4")
  uint32_t refine_factor = 0;  // SQ8 / PQ: candidates re-ranked on raw vectors, x k
  // Own server:
  std::string shoald_binary = "build/bin/shoald";
  std::string data_root = "build/bench-data";  // one sub-directory per target
  std::vector<std::string> server_args;
  std::vector<ConfigOverride> config_overrides;  // own server only; part of name()
  // Attributes of base row i, written with it (shoal-filter-bench); `attributes_tag` names
  // them in the collection, so a collection with other attributes is not reused. Empty: none.
  std::function<Attributes(size_t row)> attributes;
  std::string attributes_tag;
  // Or an external one:
  std::string external_addr;
  std::string metrics_url;  // http://host:port/metrics
  pid_t server_pid = 0;
};

class ShoalTarget final : public Target {
 public:
  explicit ShoalTarget(ShoalParams params);
  ~ShoalTarget() override;

  std::string name() const override;
  std::string knob_name() const override;
  bool in_process() const override { return false; }
  absl::Status Build(const Dataset& d) override;
  void SetKnob(uint32_t value) override { nprobe_ = value; }
  absl::Status Search(const float* queries, size_t count, uint32_t k, int threads,
                      int64_t* ids) override;
  // Search() with a filter (empty: none); `stats` (may be null) gets each query's QueryStats
  // and `hits` (may be null) how many neighbours each query got.
  absl::Status SearchFiltered(const float* queries, size_t count, uint32_t k,
                              const std::string& filter, int64_t* ids, QueryStats* stats,
                              size_t* hits);
  ResourceUsage Usage() override;
  absl::StatusOr<bool> MakeCold() override;

  // The collection as the server describes it (after Build()).
  absl::StatusOr<CollectionInfo> Describe() { return client_->DescribeCollection(collection_); }

  // For logs: where the server writes (empty for an external server).
  std::string server_log() const { return server_ ? server_->log_path() : ""; }

 private:
  std::string BaseName() const;  // name() without the overrides: names the collection
  absl::Status WriteOverrides();
  absl::Status StartServer();
  absl::Status Load(const Dataset& d);
  std::string MetricsUrl() const;

  const ShoalParams params_;
  std::string collection_;
  std::string data_dir_;
  std::string overrides_path_;  // YAML for --config, when there are overrides
  uint32_t dim_ = 0;
  uint32_t nprobe_ = 0;
  std::unique_ptr<LocalShoald> server_;
  std::unique_ptr<Client> client_;
};

}  // namespace shoal::bench
