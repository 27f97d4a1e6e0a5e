#include "bench/harness/faiss_target.h"

#include <faiss/IndexFlat.h>
#include <faiss/IndexIVFFlat.h>
#include <faiss/IndexIVFPQ.h>
#include <faiss/IndexIVFPQFastScan.h>
#include <faiss/IndexRefine.h>
#include <faiss/IndexScalarQuantizer.h>
#include <omp.h>

#include <vector>

#include "absl/strings/str_cat.h"

namespace shoal::bench {
namespace {

constexpr int kKmeansIterations = 10;  // what Shoal's TrainIvfModel runs

// Restores the calling thread's OpenMP thread count on scope exit.
class OmpThreads {
 public:
  explicit OmpThreads(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~OmpThreads() { omp_set_num_threads(saved_); }

 private:
  const int saved_;
};

}  // namespace

FaissTarget::~FaissTarget() {
  // Destruction order: the refine wrapper, the IVF index, then its quantizer.
  outer_.reset();
  ivf_.reset();
  quantizer_.reset();
}

std::string FaissTarget::name() const {
  if (params_.index == IndexType::kIvfPq) {
    return absl::StrCat(params_.fast_scan ? "faiss:ivf_pqfs_m" : "faiss:ivf_pq_m", params_.pq_m,
                        "_r", params_.refine_factor);
  }
  return "faiss:" + IndexTypeName(params_.index);
}

std::string FaissTarget::knob_name() const {
  return params_.index == IndexType::kFlat ? "" : "nprobe";
}

absl::Status FaissTarget::Build(const Dataset& d) {
  MarkBuildStart();
  OmpThreads threads(params_.build_threads);
  const int dim = int(d.dim);
  if (params_.index == IndexType::kFlat) {
    ivf_ = std::make_unique<faiss::IndexFlatL2>(dim);
  } else {
    if (d.n < params_.nlist) {
      return absl::InvalidArgumentError(absl::StrCat("nlist ", params_.nlist, " > ", d.n, " rows"));
    }
    quantizer_ = std::make_unique<faiss::IndexFlatL2>(dim);
    std::unique_ptr<faiss::IndexIVF> ivf;
    switch (params_.index) {
      case IndexType::kIvfFlat:
        ivf = std::make_unique<faiss::IndexIVFFlat>(quantizer_.get(), d.dim, params_.nlist);
        break;
      case IndexType::kIvfSq8:
        ivf = std::make_unique<faiss::IndexIVFScalarQuantizer>(
            quantizer_.get(), d.dim, params_.nlist, faiss::ScalarQuantizer::QT_8bit);
        break;
      default:
        if (params_.pq_m == 0 || d.dim % params_.pq_m != 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("pq_m ", params_.pq_m, " does not divide dim ", d.dim));
        }
        if (params_.fast_scan && params_.pq_m % 2 != 0) {
          return absl::InvalidArgumentError(absl::StrCat("pq_m ", params_.pq_m, " is odd"));
        }
        try {
          if (params_.fast_scan) {
            ivf = std::make_unique<faiss::IndexIVFPQFastScan>(quantizer_.get(), d.dim,
                                                              params_.nlist, params_.pq_m, 4);
          } else {
            ivf = std::make_unique<faiss::IndexIVFPQ>(quantizer_.get(), d.dim, params_.nlist,
                                                      params_.pq_m, 8);
          }
        } catch (const std::exception& e) {
          return absl::InternalError(absl::StrCat("faiss: ", e.what()));
        }
    }
    ivf->cp.niter = kKmeansIterations;
    ivf_ = std::move(ivf);
  }
  try {
    ivf_->train(faiss::Index::idx_t(d.n), d.base.data());
    if (params_.index == IndexType::kIvfPq) {
      auto refine = std::make_unique<faiss::IndexRefineFlat>(ivf_.get());
      refine->k_factor = float(params_.refine_factor);
      refine->add(faiss::Index::idx_t(d.n), d.base.data());
      outer_ = std::move(refine);
      searched_ = outer_.get();
    } else {
      ivf_->add(faiss::Index::idx_t(d.n), d.base.data());
      searched_ = ivf_.get();
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("faiss: ", e.what()));
  }
  return absl::OkStatus();
}

void FaissTarget::SetKnob(uint32_t value) {
  if (auto* ivf = dynamic_cast<faiss::IndexIVF*>(ivf_.get())) ivf->nprobe = value;
}

absl::Status FaissTarget::Search(const float* queries, size_t count, uint32_t k, int threads,
                                 int64_t* ids) {
  if (searched_ == nullptr) return absl::FailedPreconditionError("not built");
  OmpThreads scope(threads);
  std::vector<float> dist(count * k);
  std::vector<faiss::Index::idx_t> labels(count * k);
  searched_->search(faiss::Index::idx_t(count), queries, k, dist.data(), labels.data());
  std::copy(labels.begin(), labels.end(), ids);
  return absl::OkStatus();
}

}  // namespace shoal::bench
