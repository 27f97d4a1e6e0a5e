// SHOAL_SKIP_ONLY_IF_URING_REFUSED: the one skip a test parameterised over the I/O backends may
// take. The kernel may refuse an io_uring ring (seccomp in containers, old kernels; STYLE.md:
// such tests skip), but the pread backend needs nothing it can refuse: a pread backend or
// scheduler that cannot be made is a failure, never a skip.
//
// Use in a test body, SetUp() or a void helper; like ASSERT_*, it returns from that function
// (the caller of a helper checks that it got what it needed).
#pragma once

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "storage/io/io_backend.h"

#define SHOAL_SKIP_ONLY_IF_URING_REFUSED(kind, status)                              \
  do {                                                                              \
    const ::absl::Status shoal_backend_status_ = (status);                          \
    if (!shoal_backend_status_.ok()) {                                              \
      if ((kind) != ::shoal::storage::IoBackendKind::kUring) {                      \
        FAIL() << "the pread backend could not be made: " << shoal_backend_status_; \
      }                                                                             \
      GTEST_SKIP() << "io_uring refused by this kernel: " << shoal_backend_status_; \
    }                                                                               \
  } while (0)
