// Request limits (DESIGN I-9): what one request may make the server hold, estimated from its
// fields and the collection's shape before any work starts, and what all requests running at
// once may hold together.
//
//   - k * refine_factor candidates per query: past limits.max_candidates_per_query the field is
//     wrong for any server, so INVALID_ARGUMENT names refine_factor (or k).
//   - the working memory of one Search or Get (query copies, candidate heaps, per-segment query
//     tables such as PQ's nq x m x 256 floats, the plan's (query, routing key) per probed
//     partition, refine's k * refine_factor raw vectors per query, the response as objects): past
//     limits.max_request_bytes, RESOURCE_EXHAUSTED naming the limit and the estimate.
//   - the serialised response: past server.max_message_bytes it could not be sent anyway, so
//     it is refused before the work rather than after it.
//   - InflightBytes: the estimates of every Search and Get running at once, bounded by
//     limits.max_inflight_request_bytes; past it, RESOURCE_EXHAUSTED (retry with backoff).
//   - PeerSlots: the Searches and Gets one client connection has running at once, bounded by
//     server.max_inflight_per_peer, so one greedy connection cannot take every search slot
//     (search.max_inflight) and starve the others; past it, RESOURCE_EXHAUSTED.
//
// The estimates are upper bounds of what the engine allocates per request; the scan scratch
// of a task is bounded separately by the engine (core/index/ivf_search.cc) and is per thread.
//
// Thread-safety: the functions are pure; InflightBytes and PeerSlots are thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal::server {

struct RequestLimits {
  uint64_t max_candidates_per_query = 100000;
  uint64_t max_request_bytes = 256ull << 20;
  uint64_t max_response_bytes = 64ull << 20;  // server.max_message_bytes
};

// What a search's cost depends on besides the request.
struct SearchShape {
  uint32_t dim = 0;
  uint64_t table_bytes_per_query = 0;  // per-query prepared state, summed over segments
  // Partitions the plan holds per query, summed over segments: the effective nprobe of each
  // IVF segment, every partition of an exact one.
  uint64_t plan_entries_per_query = 0;
  // The refine factor the engine uses when the request sets none (a 4-bit fast-scan segment's
  // default, core::kDefaultFastScanRefine), so its candidates are priced too; 0 = none.
  uint32_t default_refine = 0;
  // Some segment stores codes (SQ8/PQ), not floats: a refine (the request's refine_factor or
  // default_refine) then reads k * refine raw vectors per query through ReadRaw, priced with
  // the request. False when every segment is FLAT (no refine runs); true unless known.
  bool refine_reads_raw = true;
  // A filtered search's row selections (one bit per row of every segment and the memtable,
  // and a count per partition), held once per request.
  uint64_t selection_bytes = 0;
};

// Estimated bytes the request will hold, or the error that refuses it.
absl::StatusOr<uint64_t> SearchCost(const v1::SearchRequest& req, const SearchShape& shape,
                                    const RequestLimits& limits);
absl::StatusOr<uint64_t> GetCost(const v1::GetRequest& req, uint32_t dim,
                                 const RequestLimits& limits);

// The byte budget shared by the requests running at once.
class InflightBytes {
 public:
  explicit InflightBytes(uint64_t budget) : budget_(budget) {}

  // Bytes held until destroyed (move-only).
  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& other) noexcept
        : owner_(std::exchange(other.owner_, nullptr)), bytes_(other.bytes_) {}
    Reservation& operator=(Reservation&& other) noexcept {
      std::swap(owner_, other.owner_);
      std::swap(bytes_, other.bytes_);
      return *this;
    }
    ~Reservation() { Release(); }
    // Returns the bytes now (before the call is answered: a client's next request must find
    // them free, and the budget may be gone once the call is finished).
    void Release() {
      if (InflightBytes* owner = std::exchange(owner_, nullptr)) {
        owner->used_.fetch_sub(bytes_, std::memory_order_relaxed);
      }
    }

   private:
    friend class InflightBytes;
    Reservation(InflightBytes* owner, uint64_t bytes) : owner_(owner), bytes_(bytes) {}
    InflightBytes* owner_ = nullptr;
    uint64_t bytes_ = 0;
  };

  // Reserves `bytes`, or RESOURCE_EXHAUSTED when the budget cannot hold them now. A request
  // alone is always admitted, so one larger than the budget cannot wait forever.
  absl::StatusOr<Reservation> Acquire(uint64_t bytes);
  uint64_t used() const { return used_.load(std::memory_order_relaxed); }

 private:
  const uint64_t budget_;
  std::atomic<uint64_t> used_{0};
};

// Requests in flight per client connection. The key is the gRPC peer (`context->peer()`,
// "ipv4:127.0.0.1:51234"): one TCP connection, i.e. one channel (gRPC shares a connection
// between channels of one process created with the same target and arguments).
//
// Two policies. A hard cap (capacity 0): at most `per_peer` requests of one peer at once. A
// share (capacity > 0, the server's slots): a peer within `per_peer` is always admitted here;
// past it, only while `per_peer` of the `capacity` slots stay free afterwards. So one client
// alone may use all but one share of the server (an application's single channel is not held
// to a quarter of an idle server), while a newcomer always finds a share's room and, once the
// server is that full, a greedy connection's excess is refused.
class PeerSlots {
 public:
  explicit PeerSlots(int per_peer, int capacity = 0)
      : per_peer_(per_peer < 1 ? 1 : per_peer), capacity_(capacity < 0 ? 0 : capacity) {}

  // One request of one peer, held until destroyed (move-only).
  class Slot {
   public:
    Slot() = default;
    Slot(Slot&& other) noexcept
        : owner_(std::exchange(other.owner_, nullptr)), peer_(std::move(other.peer_)) {}
    Slot& operator=(Slot&& other) noexcept {
      std::swap(owner_, other.owner_);
      std::swap(peer_, other.peer_);
      return *this;
    }
    ~Slot() { Release(); }
    void Release();

   private:
    friend class PeerSlots;
    Slot(PeerSlots* owner, std::string peer) : owner_(owner), peer_(std::move(peer)) {}
    PeerSlots* owner_ = nullptr;
    std::string peer_;
  };

  // A slot for `peer`, or RESOURCE_EXHAUSTED naming the peer and server.max_inflight_per_peer
  // when it already holds per_peer() of them.
  absl::StatusOr<Slot> Acquire(const std::string& peer);
  int per_peer() const { return per_peer_; }
  // Slots `peer` holds now; peers holding none take no memory.
  int held(const std::string& peer) const;
  size_t peers() const;

 private:
  const int per_peer_;
  const int capacity_;  // 0: per_peer_ is a hard cap
  mutable absl::Mutex mu_;
  std::unordered_map<std::string, int> held_ ABSL_GUARDED_BY(mu_);
  int total_ ABSL_GUARDED_BY(mu_) = 0;  // held_, summed
};

}  // namespace shoal::server
