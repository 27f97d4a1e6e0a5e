#include "bench/harness/hnsw_target.h"

#include <hnswlib/hnswlib.h>

#include <atomic>
#include <filesystem>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace shoal::bench {

struct HnswTarget::Impl {
  std::unique_ptr<hnswlib::L2Space> space;
  std::unique_ptr<hnswlib::HierarchicalNSW<float>> index;
};

HnswTarget::HnswTarget(HnswParams params) : params_(std::move(params)), impl_(new Impl) {}
HnswTarget::~HnswTarget() = default;

namespace {

// Runs fn(i) for i in [0, n) on `threads` threads.
template <typename Fn>
void ParallelFor(size_t n, int threads, Fn&& fn) {
  if (threads <= 1 || n <= 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < n;) fn(i);
    });
  }
  for (auto& th : pool) th.join();
}

}  // namespace

absl::Status HnswTarget::Build(const Dataset& d) {
  MarkBuildStart();
  impl_->space = std::make_unique<hnswlib::L2Space>(d.dim);
  const std::string cache =
      params_.cache_dir.empty()
          ? ""
          : absl::StrFormat("%s/%s-%016x.hnsw-M%u-efc%u", params_.cache_dir, d.name, d.checksum,
                            params_.m, params_.ef_construction);
  try {
    if (!cache.empty() && std::filesystem::exists(cache)) {
      impl_->index = std::make_unique<hnswlib::HierarchicalNSW<float>>(impl_->space.get(), cache);
      if (impl_->index->cur_element_count == d.n) {
        return absl::OkStatus();
      }
    }
    impl_->index = std::make_unique<hnswlib::HierarchicalNSW<float>>(
        impl_->space.get(), d.n, params_.m, params_.ef_construction);
    // The first point alone, as hnswlib's own Python binding does, then the rest in parallel.
    impl_->index->addPoint(d.row(0), 0);
    ParallelFor(d.n - 1, params_.build_threads,
                [&](size_t i) { impl_->index->addPoint(d.row(i + 1), i + 1); });
    if (!cache.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(params_.cache_dir, ec);
      impl_->index->saveIndex(cache + ".tmp");
      std::filesystem::rename(cache + ".tmp", cache, ec);
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("hnswlib: ", e.what()));
  }
  return absl::OkStatus();
}

void HnswTarget::SetKnob(uint32_t value) { impl_->index->setEf(value); }

absl::Status HnswTarget::Search(const float* queries, size_t count, uint32_t k, int threads,
                                int64_t* ids) {
  if (!impl_->index) return absl::FailedPreconditionError("not built");
  const size_t dim = *static_cast<size_t*>(impl_->space->get_dist_func_param());
  ParallelFor(count, threads, [&](size_t i) {
    auto heap = impl_->index->searchKnn(queries + i * dim, k);  // farthest on top
    int64_t* out = ids + i * k;
    std::fill(out, out + k, -1);
    for (size_t j = heap.size(); j-- > 0; heap.pop()) out[j] = int64_t(heap.top().second);
  });
  return absl::OkStatus();
}

}  // namespace shoal::bench
