// The io_uring backend.
//
// Design: one ring and one I/O thread. Other threads never touch the ring: Submit() appends to
// a mutex-guarded queue and writes to an eventfd. The I/O thread keeps a read of that eventfd
// armed *in the ring itself*, so a single blocking io_uring_submit_and_wait() wakes for either
// a completion or new work — no polling, no spinning, nothing to tune on a 1-CPU host.
//
// Each read is an Op owned by the I/O thread from submission to completion. A short read (the
// kernel may return less than asked, e.g. on buffered files or signals) is resubmitted for the
// remainder; 0 bytes means EOF and completes the read with what it has; -EAGAIN/-EINTR are
// retried; any other negative result fails that read alone. Ops beyond the ring's capacity
// wait in `waiting_` until completions free slots.
//
// Shutdown: the destructor sets `stopping_` and wakes the thread, which stops re-arming the
// eventfd once the queue is drained and exits when no op is in flight, so every submitted read
// gets its callback.
#include <liburing.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/base/logging.h"
#include "storage/io/io_backend.h"

namespace shoal::storage {
namespace {

constexpr uint64_t kWakeTag = 0;  // user_data of the eventfd read; ops use their address

struct Op {
  IoRead read;
  uint32_t done = 0;
  std::chrono::steady_clock::time_point start;
};

class UringBackend final : public IoBackend {
 public:
  UringBackend(IoCallback callback, unsigned entries, io_uring ring, int event_fd)
      : callback_(std::move(callback)), capacity_(entries - 1), ring_(ring), event_fd_(event_fd) {
    thread_ = std::thread([this] { Run(); });
  }

  ~UringBackend() override {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    Wake();
    thread_.join();
    io_uring_queue_exit(&ring_);
    ::close(event_fd_);
  }

  void Submit(std::vector<IoRead> reads) override {
    {
      absl::MutexLock lock(&mu_);
      for (IoRead& r : reads) submitted_.push_back(r);
    }
    // From a completion callback (the I/O thread itself) no wake-up is needed: the thread
    // collects submissions before it waits again. This saves a write and a CQE per read in
    // closed-loop use.
    if (std::this_thread::get_id() != io_thread_id_) Wake();
  }

  std::string_view name() const override { return "uring"; }

 private:
  void Wake() {
    const uint64_t one = 1;
    ssize_t rc;
    do {
      rc = ::write(event_fd_, &one, sizeof(one));
    } while (rc < 0 && errno == EINTR);
  }

  void ArmWake() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    io_uring_prep_read(sqe, event_fd_, &wake_buffer_, sizeof(wake_buffer_), 0);
    io_uring_sqe_set_data64(sqe, kWakeTag);
  }

  void Prepare(Op* op) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    io_uring_prep_read(sqe, op->read.fd, op->read.buffer + op->done, op->read.length - op->done,
                       op->read.offset + op->done);
    io_uring_sqe_set_data(sqe, op);
    ++in_flight_;
  }

  void Finish(Op* op, absl::Status status) {
    IoResult result;
    result.tag = op->read.tag;
    result.status = std::move(status);
    result.bytes = op->done;
    result.kernel_us = uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(
                                    std::chrono::steady_clock::now() - op->start)
                                    .count());
    delete op;
    callback_(std::move(result));
  }

  // Moves newly submitted reads into `waiting_`; true while the thread should keep running.
  bool TakeSubmitted() {
    absl::MutexLock lock(&mu_);
    for (const IoRead& r : submitted_) {
      waiting_.push_back(new Op{r, 0, std::chrono::steady_clock::now()});
    }
    submitted_.clear();
    return !stopping_;
  }

  void OnCompletion(io_uring_cqe* cqe) {
    Op* op = static_cast<Op*>(io_uring_cqe_get_data(cqe));
    --in_flight_;
    const int res = cqe->res;
    if (res == -EAGAIN || res == -EINTR) {
      waiting_.push_front(op);
    } else if (res < 0) {
      Finish(op, absl::InternalError(absl::StrCat("io_uring read at offset ",
                                                  op->read.offset + op->done, ": ",
                                                  std::strerror(-res))));
    } else if (res == 0 || op->done + uint32_t(res) == op->read.length) {
      op->done += uint32_t(res);
      Finish(op, absl::OkStatus());
    } else {
      op->done += uint32_t(res);  // short read: go again for the rest
      waiting_.push_front(op);
    }
  }

  void Run() {
    io_thread_id_ = std::this_thread::get_id();
    bool running = true;
    bool wake_armed = false;
    while (true) {
      if (!wake_armed && running) {
        ArmWake();
        wake_armed = true;
      }
      while (!waiting_.empty() && in_flight_ < capacity_) {
        Prepare(waiting_.front());
        waiting_.pop_front();
      }
      if (!running && in_flight_ == 0 && waiting_.empty() && !wake_armed) break;
      io_uring_submit_and_wait(&ring_, 1);
      io_uring_cqe* cqe;
      unsigned head, seen = 0;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        ++seen;
        if (io_uring_cqe_get_data64(cqe) == kWakeTag) {
          wake_armed = false;
          running = TakeSubmitted();
        } else {
          OnCompletion(cqe);
        }
      }
      io_uring_cq_advance(&ring_, seen);
      // Submissions made by callbacks on this thread, and late ones during shutdown.
      if (!TakeSubmitted()) running = false;
    }
  }

  const IoCallback callback_;
  const unsigned capacity_;  // ring slots for reads; one is kept for the eventfd read
  io_uring ring_;
  const int event_fd_;
  uint64_t wake_buffer_ = 0;

  absl::Mutex mu_;
  std::vector<IoRead> submitted_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  // I/O thread only.
  std::deque<Op*> waiting_;
  unsigned in_flight_ = 0;
  std::atomic<std::thread::id> io_thread_id_{};
  std::thread thread_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<IoBackend>> NewUringBackend(IoCallback callback, unsigned entries) {
  entries = std::max(4u, entries);
  io_uring ring;
  const int rc = io_uring_queue_init(entries, &ring, 0);
  if (rc < 0) {
    return absl::UnavailableError(absl::StrCat("io_uring_queue_init: ", std::strerror(-rc)));
  }
  const int event_fd = ::eventfd(0, EFD_CLOEXEC);
  if (event_fd < 0) {
    io_uring_queue_exit(&ring);
    return absl::UnavailableError(absl::StrCat("eventfd: ", std::strerror(errno)));
  }
  return std::unique_ptr<IoBackend>(new UringBackend(std::move(callback), entries, ring, event_fd));
}

absl::StatusOr<std::unique_ptr<IoBackend>> NewIoBackend(IoBackendKind kind, IoCallback callback,
                                                        unsigned queue_depth) {
  if (kind == IoBackendKind::kPread) {
    return NewPreadBackend(std::move(callback), int(std::clamp(queue_depth / 8, 2u, 16u)));
  }
  auto uring = NewUringBackend(callback, queue_depth + 1);
  if (uring.ok() || kind == IoBackendKind::kUring) return uring;
  static std::once_flag logged;
  std::call_once(logged, [&] {
    core::Logger("io")->warn("io_uring unavailable ({}); using the pread backend",
                             uring.status().ToString());
  });
  return NewPreadBackend(std::move(callback), int(std::clamp(queue_depth / 8, 2u, 16u)));
}

}  // namespace shoal::storage
