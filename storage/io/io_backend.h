// IoBackend: the kernel *mechanism* for reads — io_uring (preferred) or a pread thread pool
// (fallback, I-8) — behind one small contract.
//
// Submit() hands over reads and returns at once; each read's completion is reported exactly
// once through the backend's callback, on the backend's own I/O thread(s). Short reads are
// continued until the requested length or EOF (a read past EOF reports the bytes it got).
// Errors are per read (EIO -> DATA_LOSS-free INTERNAL with the errno text; bad fd -> INTERNAL).
// The I/O threads never run search work: callbacks must be short and must not block.
//
// Thread-safety: Submit() is thread-safe. The destructor waits for every submitted read.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace shoal::storage {

struct IoRead {
  int fd = -1;
  uint64_t offset = 0;
  uint32_t length = 0;
  char* buffer = nullptr;  // at least `length` bytes; aligned when fd is O_DIRECT
  uint64_t tag = 0;        // the caller's, echoed in the result
};

struct IoResult {
  uint64_t tag = 0;
  absl::Status status;
  uint32_t bytes = 0;       // bytes read (less than asked only at EOF)
  uint64_t kernel_us = 0;   // submission to completion
};

using IoCallback = std::function<void(IoResult)>;

enum class IoBackendKind { kAuto, kUring, kPread };

class IoBackend {
 public:
  virtual ~IoBackend() = default;
  virtual void Submit(std::vector<IoRead> reads) = 0;
  virtual std::string_view name() const = 0;  // "uring" or "pread"
};

// A pread thread pool with `threads` threads.
std::unique_ptr<IoBackend> NewPreadBackend(IoCallback callback, int threads);

// One io_uring with `entries` slots and its I/O thread. UNAVAILABLE when the kernel refuses a
// ring (EPERM under Docker's default seccomp profile, ENOSYS on old kernels).
absl::StatusOr<std::unique_ptr<IoBackend>> NewUringBackend(IoCallback callback,
                                                           unsigned entries);

// kAuto: io_uring if the kernel allows a ring, otherwise pread, saying so once in the log.
absl::StatusOr<std::unique_ptr<IoBackend>> NewIoBackend(IoBackendKind kind, IoCallback callback,
                                                        unsigned queue_depth);

}  // namespace shoal::storage
