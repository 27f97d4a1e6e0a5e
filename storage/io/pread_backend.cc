// The pread fallback: a small fixed pool of threads, each taking one read at a time.
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
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
    const ssize_t n = ::pread(read.fd, read.buffer + done, read.length - done,
                              off_t(read.offset + done));
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
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  void Submit(std::vector<IoRead> reads) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (IoRead& r : reads) queue_.push_back(r);
    }
    cv_.notify_all();
  }

  std::string_view name() const override { return "pread"; }

 private:
  void Run() {
    while (true) {
      IoRead read;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping and drained
        read = queue_.front();
        queue_.pop_front();
      }
      callback_(PreadFully(read));
    }
  }

  const IoCallback callback_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<IoRead> queue_;  // guarded by mu_
  bool stopping_ = false;     // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace

std::unique_ptr<IoBackend> NewPreadBackend(IoCallback callback, int threads) {
  return std::make_unique<PreadBackend>(std::move(callback), threads);
}

}  // namespace shoal::storage
