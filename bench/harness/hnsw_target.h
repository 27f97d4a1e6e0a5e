// HnswTarget: hnswlib 0.6 (Debian's libhnswlib-dev, header-only) searched in-process — the graph
// index users pick when they embed a library. M and efConstruction fixed at build; the knob is
// ef. Built with every core (hnswlib's concurrent addPoint) and compiled with -march=native as
// hnswlib's own Python package is. The built graph is cached in `cache_dir` under a name that
// carries the dataset's checksum.
//
// Thread-safety: as Target (hnswlib's searchKnn is safe to call concurrently).
#pragma once

#include <memory>

#include "bench/harness/in_process_target.h"

namespace shoal::bench {

struct HnswParams {
  uint32_t m = 16;
  uint32_t ef_construction = 200;
  int build_threads = 1;
  std::string cache_dir;  // "" = never cache
};

class HnswTarget final : public InProcessTarget {
 public:
  explicit HnswTarget(HnswParams params);
  ~HnswTarget() override;

  std::string name() const override { return "hnsw"; }
  std::string knob_name() const override { return "ef"; }
  absl::Status Build(const Dataset& d) override;
  void SetKnob(uint32_t value) override;
  absl::Status Search(const float* queries, size_t count, uint32_t k, int threads,
                      int64_t* ids) override;

 private:
  struct Impl;
  const HnswParams params_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shoal::bench
