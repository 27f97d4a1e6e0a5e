// FaissTarget: FAISS 1.7.3 (Debian's build) searched in-process, the library a user would embed
// instead of running a server: IndexFlatL2 (the exact ceiling), IndexIVFFlat,
// IndexIVFScalarQuantizer (8-bit), IndexIVFPQ wrapped in IndexRefineFlat and, with fast_scan,
// IndexIVFPQFastScan (4-bit codes, FAISS's strongest IVF) wrapped in IndexRefineFlat. IVF variants
// train with the same nlist and k-means iterations as Shoal; the knob is nprobe.
//
// Thread-safety: as Target (FAISS searches are const and thread-safe). Each Search() call sets
// OpenMP's thread count for its own thread only.
#pragma once

#include <faiss/Index.h>

#include <memory>

#include "bench/harness/in_process_target.h"
#include "client/client.h"

namespace shoal::bench {

struct FaissParams {
  IndexType index = IndexType::kIvfFlat;  // the FAISS index standing for Shoal's of this type
  uint32_t nlist = 1024;
  uint32_t pq_m = 0;           // IVF_PQ sub-quantizers (must divide dim)
  uint32_t refine_factor = 4;  // IVF_PQ: re-rank k * refine_factor candidates exactly
  bool fast_scan = false;      // IVF_PQ: IndexIVFPQFastScan, 4-bit codes ("faiss:ivf_pqfs")
  int build_threads = 1;
};

class FaissTarget final : public InProcessTarget {
 public:
  explicit FaissTarget(FaissParams params) : params_(params) {}
  ~FaissTarget() override;

  std::string name() const override;
  std::string knob_name() const override;
  absl::Status Build(const Dataset& d) override;
  void SetKnob(uint32_t value) override;
  absl::Status Search(const float* queries, size_t count, uint32_t k, int threads,
                      int64_t* ids) override;

 private:
  const FaissParams params_;
  std::unique_ptr<faiss::Index> quantizer_;
  std::unique_ptr<faiss::Index> ivf_;    // the IVF index (or the flat one)
  std::unique_ptr<faiss::Index> outer_;  // IndexRefineFlat around ivf_, for IVF_PQ
  faiss::Index* searched_ = nullptr;
};

}  // namespace shoal::bench
