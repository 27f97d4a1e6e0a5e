// The pread fallback: a small fixed pool of threads, each taking one read at a time.
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "storage/io/io_backend.h"

namespace shoal::storage {
namespace {

// Reads until `length` bytes or EOF, retrying EINTR; shared by both backends' semantics.
IoResult PreadFully(const IoRead& read) {
  IoResult result;
  result.tag = read.tag;
  const auto start = std::chrono::steady_clock::now();
  uint32_t done = 0;
  while (done < read.length) {
    const ssize_t n =
        ::pread(read.fd, read.buffer + done, read.length - done, off_t(read.offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      result.status = absl::InternalError(
          absl::StrCat("pread at offset ", read.offset + done, ": ", std::strerror(errno)));
      break;
    }
    if (n == 0) break;  // EOF
    done += uint32_t(n);
  }
  result.bytes = done;
  result.kernel_us = uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(
                                  std::chrono::steady_clock::now() - start)
                                  .count());
  return result;
}

class PreadBackend final : public IoBackend {
 public:
  PreadBackend(IoCallback callback, int threads) : callback_(std::move(callback)) {
    for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { Run(); });
  }

  ~PreadBackend() override {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    for (std::thread& t : threads_) t.join();
  }

  void Submit(std::vector<IoRead> reads) override {
    absl::MutexLock lock(&mu_);
    for (IoRead& r : reads) queue_.push_back(r);
  }

  std::string_view name() const override { return "pread"; }

 private:
  void Run() {
    while (true) {
      IoRead read;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(this, &PreadBackend::HasWorkOrStopping));
        if (queue_.empty()) return;  // stopping and drained
        read = queue_.front();
        queue_.pop_front();
      }
      callback_(PreadFully(read));
    }
  }

  bool HasWorkOrStopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || !queue_.empty();
  }

  const IoCallback callback_;
  absl::Mutex mu_;
  std::deque<IoRead> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace

std::unique_ptr<IoBackend> NewPreadBackend(IoCallback callback, int threads) {
  return std::make_unique<PreadBackend>(std::move(callback), threads);
}

}  // namespace shoal::storage
