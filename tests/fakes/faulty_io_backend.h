// FaultyIoBackend: an IoBackend decorator for tests. Every `fail_every`-th read is answered
// with EIO without reaching the kernel; every `short_every`-th read is passed on with its
// length halved, as a device returning a short read would. Everything else goes to the real
// backend unchanged.
//
// Thread-safety: as the wrapped backend.
#pragma once

#include <atomic>
#include <memory>

#include "storage/io/io_backend.h"

namespace shoal::testing {

class FaultyIoBackend final : public storage::IoBackend {
 public:
  FaultyIoBackend(std::unique_ptr<storage::IoBackend> target, storage::IoCallback callback,
                  int fail_every, int short_every)
      : target_(std::move(target)),
        callback_(std::move(callback)),
        fail_every_(fail_every),
        short_every_(short_every) {}

  void Submit(std::vector<storage::IoRead> reads) override {
    std::vector<storage::IoRead> pass;
    for (storage::IoRead& r : reads) {
      const int n = ++count_;
      if (fail_every_ > 0 && n % fail_every_ == 0) {
        ++failed;
        callback_({r.tag, absl::InternalError("pread: Input/output error (injected EIO)"), 0, 0});
        continue;
      }
      if (short_every_ > 0 && n % short_every_ == 0) {
        ++shortened;
        r.length /= 2;
      }
      pass.push_back(r);
    }
    if (!pass.empty()) target_->Submit(std::move(pass));
  }
  std::string_view name() const override { return target_->name(); }

  std::atomic<int> failed{0};
  std::atomic<int> shortened{0};

 private:
  std::unique_ptr<storage::IoBackend> target_;
  storage::IoCallback callback_;
  const int fail_every_;
  const int short_every_;
  std::atomic<int> count_{0};
};

}  // namespace shoal::testing
