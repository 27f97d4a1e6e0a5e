// ReactorLifetime: when a self-deleting gRPC callback reactor may delete itself, with the order
// of its Finish() before its OnDone() made visible to ThreadSanitizer.
//
// grpc::Server*Reactor::Finish() still reads the call's state (its context) and the reactor
// after it has handed the call to gRPC, and gRPC may run OnDone() on another thread meanwhile —
// and delete the call's state right after it — so OnDone() alone must not delete the reactor:
// the reactor finishes through Finished() and calls Done() in OnDone(), and deletes itself
// when either returns true (the later of the two).
//
// gRPC runs OnDone() only after Finish()'s last read, but orders the two inside libgrpc, where
// TSan cannot see it (a stream finished from an arena thread showed TSan gRPC's delete of the
// call's context against Finish()'s read of it). Finished() runs Finish() under a mutex that
// Done() takes too, so the order is visible: uncontended, unless OnDone() starts while
// Finish() is still returning, and then it waits for that. gRPC never runs a user reactor's
// OnDone() inline inside Finish(), so Done() never waits on its own thread.
//
// Thread-safety: Finished() and Done() may be called from any thread, once each.
#pragma once

#include <atomic>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace shoal::server {

class ReactorLifetime {
 public:
  // Calls `finish` (the reactor's Finish()); true when the caller deletes the reactor.
  template <typename FinishFn>
  bool Finished(FinishFn&& finish) {
    {
      absl::MutexLock lock(&mu_);
      std::forward<FinishFn>(finish)();
    }
    return Ended();
  }
  // In OnDone(); true when the caller deletes the reactor.
  bool Done() {
    { absl::MutexLock lock(&mu_); }
    return Ended();
  }

 private:
  bool Ended() noexcept { return refs_.fetch_sub(1, std::memory_order_acq_rel) == 1; }

  absl::Mutex mu_;
  std::atomic<int> refs_{2};
};

}  // namespace shoal::server
