// In-memory IVF segments and a PartitionSource over them whose completions the test controls:
// answered inline, held until the test releases them (in any order), or answered by a task
// submitted to a given executor (so the answer needs a free arena thread).
//
// Every PartitionData pin is counted, so tests can check that nothing stays pinned.
#pragma once

#include <atomic>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/exec/executor.h"
#include "core/index/ivf_model.h"
#include "core/index/ivf_search.h"

namespace shoal::testing {

struct InMemorySegment {
  std::shared_ptr<const core::IvfModel> model;
  std::vector<std::vector<uint8_t>> codes;  // per partition
  std::vector<std::vector<uint64_t>> ids;
  std::vector<std::vector<float>> raw;

  InMemorySegment(std::shared_ptr<const core::IvfModel> m, const float* vectors,
                  const uint64_t* row_ids, size_t n)
      : model(std::move(m)) {
    const size_t nlist = model->nlist(), dim = model->dim, cs = model->CodeSize();
    codes.resize(nlist);
    ids.resize(nlist);
    raw.resize(nlist);
    std::vector<uint32_t> assign(n);
    if (!core::AssignToCentroids(*model, vectors, n, assign.data()).ok()) std::abort();
    std::vector<uint8_t> code(cs);
    for (size_t i = 0; i < n; ++i) {
      const uint32_t p = assign[i];
      if (!core::EncodeVectors(*model, vectors + i * dim, 1, &p, code.data()).ok()) std::abort();
      codes[p].insert(codes[p].end(), code.begin(), code.end());
      ids[p].push_back(row_ids[i]);
      raw[p].insert(raw[p].end(), vectors + i * dim, vectors + (i + 1) * dim);
    }
  }
};

class FakePartitionSource final : public core::PartitionSource {
 public:
  enum class Mode { kInline, kHeld, kOnExecutor };

  FakePartitionSource(std::shared_ptr<const InMemorySegment> segment, Mode mode,
                      core::Executor* executor = nullptr)
      : segment_(std::move(segment)), mode_(mode), executor_(executor) {}

  core::IvfSegmentRef Ref(std::shared_ptr<FakePartitionSource> self,
                          std::shared_ptr<const core::IdFilter> dead = nullptr) const {
    core::IvfSegmentRef ref;
    ref.model = segment_->model;
    for (size_t p = 0; p < segment_->ids.size(); ++p) {
      ref.partition_rows.push_back(segment_->ids[p].size());
      ref.partition_bytes.push_back(segment_->codes[p].size() + 8 * segment_->ids[p].size());
    }
    ref.source = std::move(self);
    ref.dead = std::move(dead);
    return ref;
  }

  void Fetch(const core::PartitionFetch& fetch, FetchDone done) override {
    fetches_.fetch_add(1);
    const uint32_t p = fetch.partition;
    auto answer = [this, p, done = std::move(done)]() mutable {
      live_pins_.fetch_add(1);
      core::PartitionData data;
      data.codes = segment_->codes[p].data();
      data.ids = segment_->ids[p].data();
      data.count = segment_->ids[p].size();
      data.pin =
          std::shared_ptr<const void>(this, [this](const void*) { live_pins_.fetch_sub(1); });
      std::move(done)(std::move(data));
    };
    Dispatch(std::move(answer));
  }

  void ReadRaw(std::vector<core::RowRef> rows, const core::PartitionFetch&, RawDone done) override {
    auto answer = [this, rows = std::move(rows), done = std::move(done)]() mutable {
      const size_t dim = segment_->model->dim;
      core::RawRows out;
      for (const core::RowRef& r : rows) {
        const float* v = segment_->raw[r.partition].data() + size_t(r.row) * dim;
        out.rows.emplace_back(std::shared_ptr<const void>(), v);  // the segment's own rows
      }
      std::move(done)(std::move(out));
    };
    Dispatch(std::move(answer));
  }

  // Answers up to `n` held calls, chosen at random; returns how many were answered.
  size_t ReleaseSome(size_t n, std::mt19937& rng) {
    std::vector<std::function<void()>> picked;
    {
      absl::MutexLock lock(&mu_);
      while (!held_.empty() && picked.size() < n) {
        const size_t i = std::uniform_int_distribution<size_t>(0, held_.size() - 1)(rng);
        picked.push_back(std::move(held_[i]));
        held_.erase(held_.begin() + long(i));
      }
    }
    for (auto& f : picked) f();
    return picked.size();
  }

  size_t held() const {
    absl::MutexLock lock(&mu_);
    return held_.size();
  }
  int live_pins() const { return live_pins_.load(); }
  uint64_t fetches() const { return fetches_.load(); }

 private:
  template <typename F>
  void Dispatch(F answer) {
    auto shared = std::make_shared<F>(std::move(answer));
    switch (mode_) {
      case Mode::kInline:
        (*shared)();
        return;
      case Mode::kHeld: {
        absl::MutexLock lock(&mu_);
        held_.push_back([shared] { (*shared)(); });
        return;
      }
      case Mode::kOnExecutor:
        executor_->Submit([shared] { (*shared)(); });
        return;
    }
  }

  const std::shared_ptr<const InMemorySegment> segment_;
  const Mode mode_;
  core::Executor* const executor_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> held_ ABSL_GUARDED_BY(mu_);
  std::atomic<int> live_pins_{0};
  std::atomic<uint64_t> fetches_{0};
};

}  // namespace shoal::testing
