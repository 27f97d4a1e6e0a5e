// RecordingIoBackend: an IoBackend decorator for tests that records every Submit() call — how
// many reads each handed over, and their offsets in order — and passes the reads on to the
// real backend unchanged. Tests use it to assert how the scheduler batches reads.
//
// Thread-safety: as the wrapped backend; submissions() is thread-safe.
#pragma once

#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "storage/io/io_backend.h"

namespace shoal::testing {

class RecordingIoBackend final : public storage::IoBackend {
 public:
  explicit RecordingIoBackend(std::unique_ptr<storage::IoBackend> target)
      : target_(std::move(target)) {}

  void Submit(std::vector<storage::IoRead> reads) override {
    {
      absl::MutexLock lock(&mu_);
      std::vector<uint64_t> offsets;
      for (const storage::IoRead& r : reads) offsets.push_back(r.offset);
      submissions_.push_back(std::move(offsets));
    }
    target_->Submit(std::move(reads));
  }
  std::string_view name() const override { return target_->name(); }

  // One entry per Submit() call: the offsets of its reads, in the order handed over.
  std::vector<std::vector<uint64_t>> submissions() const {
    absl::MutexLock lock(&mu_);
    return submissions_;
  }

 private:
  std::unique_ptr<storage::IoBackend> target_;
  mutable absl::Mutex mu_;
  std::vector<std::vector<uint64_t>> submissions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shoal::testing
