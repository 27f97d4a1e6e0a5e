// ShoalTarget: a Shoal collection searched over gRPC on loopback, the way users reach it.
//
// Either the harness starts its own shoald (LocalShoald, one server and data directory per
// target, so CPU and memory figures belong to that index alone) or it uses a running server
// (`external_addr`; then CPU and RSS only with `server_pid`, storage counters only with
// `metrics_url`). A collection already holding exactly this dataset with this index is reused;
// otherwise it is (re)created, loaded through an upsert stream and indexed with BuildIndex.
// The knob is nprobe (none for FLAT).
//
// MakeCold() restarts the server and drops the page cache of its files (posix_fadvise), so the
// next queries read from the device, through O_DIRECT when --io-direct is among server_args.
//
// Thread-safety: as Target (shoal::Client is thread-safe).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "bench/harness/target.h"
#include "client/client.h"
#include "tests/support/local_shoald.h"

namespace shoal::bench {

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
  ResourceUsage Usage() override;
  absl::StatusOr<bool> MakeCold() override;

  // For logs: where the server writes (empty for an external server).
  std::string server_log() const { return server_ ? server_->log_path() : ""; }

 private:
  absl::Status StartServer();
  absl::Status Load(const Dataset& d);
  std::string MetricsUrl() const;

  const ShoalParams params_;
  std::string collection_;
  std::string data_dir_;
  uint32_t dim_ = 0;
  uint32_t nprobe_ = 0;
  std::unique_ptr<LocalShoald> server_;
  std::unique_ptr<Client> client_;
};

}  // namespace shoal::bench
