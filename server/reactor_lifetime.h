// ReactorLifetime: when a self-deleting gRPC callback reactor may delete itself.
//
// grpc::Server*Reactor::Finish() still reads the reactor after it has handed the call to gRPC,
// and gRPC may run OnDone() on another thread meanwhile, so OnDone() alone must not delete it:
// the reactor calls Ended() once its Finish() has returned and once in OnDone(), and deletes
// itself when Ended() returns true (the later of the two). The atomic orders both threads'
// accesses before the delete, which TSan can see (gRPC's own ordering it cannot).
//
// Thread-safety: Ended() may be called from any thread, exactly twice in all.
#pragma once

#include <atomic>

namespace shoal::server {

class ReactorLifetime {
 public:
  // True for the second call: the caller deletes the reactor.
  bool Ended() noexcept { return refs_.fetch_sub(1, std::memory_order_acq_rel) == 1; }

 private:
  std::atomic<int> refs_{2};
};

}  // namespace shoal::server
