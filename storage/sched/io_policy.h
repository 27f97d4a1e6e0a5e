// IoPolicy: which queued reads go to the kernel next — the scheduling *policy* of the I/O
// scheduler, with no threads, no clock of its own and no I/O, so it can be tested
// deterministically (Seastar's fair_queue habit). The mechanism (io_uring or pread threads)
// lives behind IoBackend; IoScheduler glues the two.
//
// Order: earlier deadline first, then the older query (arrival), then the lower partition rank
// (nearer partitions first), then submission order.
// Limits: requests in flight (`io.queue_depth`) and bytes in flight (`io.max_inflight_bytes`).
// Progress (I-4): the oldest query with queued reads and nothing in flight gets its next read
// admitted even over budget (one such read at a time), so a budget smaller than one read — or
// one filled by younger queries — can never stall everyone.
// Coalescing: queued reads of adjacent ranges of one file (gaps up to `max_coalesce_gap` bytes,
// the O_DIRECT padding) are merged into one submission of at most `io.max_request_bytes`.
// Cancellation and deadlines: a queued read that is cancelled or expired is dropped (it never
// took budget); a read already in flight completes and its caller discards it.
//
// Thread-safety: none. IoScheduler calls it under its own mutex.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace shoal::storage {

struct IoLimits {
  uint32_t max_requests_in_flight = 64;         // io.queue_depth
  uint64_t max_bytes_in_flight = 256ull << 20;  // io.max_inflight_bytes
  uint32_t max_request_bytes = 16u << 20;       // io.max_request_bytes (coalescing cap)
  // Ranges this close are still merged, the gap read and dropped: segment files pad each
  // partition to 4 KiB for O_DIRECT, so neighbours are never byte-adjacent, yet one aligned
  // read covers both.
  uint32_t max_coalesce_gap = 4095;
};

using IoClock = std::chrono::steady_clock;

struct IoRequest {
  uint64_t id = 0;    // unique, chosen by the caller
  uint64_t file = 0;  // caller's file handle
  uint64_t offset = 0;
  uint32_t length = 0;
  uint64_t query = 0;  // the query that wants it; smaller = arrived earlier
  uint32_t rank = 0;   // partition rank within the query (0 = nearest)
  IoClock::time_point deadline = IoClock::time_point::max();
};

// One read to issue: a contiguous range covering one or more requests.
struct IoSubmission {
  uint64_t id = 0;  // assigned by the policy; pass it back to Complete()
  uint64_t file = 0;
  uint64_t offset = 0;
  uint32_t length = 0;
  std::vector<IoRequest> requests;  // in offset order
};

class IoPolicy {
 public:
  explicit IoPolicy(IoLimits limits) : limits_(limits) {}

  void Enqueue(const IoRequest& request);
  // Drops a queued request; false if it is unknown or already submitted.
  bool Cancel(uint64_t request_id);
  // Drops every queued request of `query`; returns their ids. Submitted ones are untouched.
  std::vector<uint64_t> CancelQuery(uint64_t query);

  // Takes the requests that may start now, coalesced. Queued requests whose deadline is at or
  // before `now` are removed and appended to `expired`.
  std::vector<IoSubmission> Dispatch(IoClock::time_point now, std::vector<IoRequest>* expired);

  // Returns a submission's budget.
  void Complete(uint64_t submission_id);

  size_t queued() const { return queue_.size(); }
  uint32_t requests_in_flight() const { return uint32_t(in_flight_.size()); }
  uint64_t bytes_in_flight() const { return bytes_in_flight_; }

 private:
  // deadline, query, rank, id: the total order of queued requests.
  using Key = std::tuple<IoClock::time_point, uint64_t, uint32_t, uint64_t>;
  static Key KeyOf(const IoRequest& r) { return {r.deadline, r.query, r.rank, r.id}; }

  bool MayStart(const IoRequest& head) const;
  IoSubmission Coalesce(const IoRequest& head);
  void Remove(const IoRequest& r);

  const IoLimits limits_;
  std::map<Key, IoRequest> queue_;
  std::unordered_map<uint64_t, Key> key_of_;  // request id -> key
  // file -> (offset, request id): finds adjacent ranges for coalescing.
  std::map<uint64_t, std::set<std::pair<uint64_t, uint64_t>>> by_offset_;
  std::map<uint64_t, std::set<Key>> by_query_;  // query -> its queued requests, best first
  std::unordered_map<uint64_t, uint32_t> in_flight_per_query_;
  std::unordered_map<uint64_t, IoSubmission> in_flight_;  // submission id -> submission
  uint64_t bytes_in_flight_ = 0;
  uint64_t next_submission_ = 1;
  uint64_t forced_in_flight_ = 0;  // the over-budget submission in flight, 0 = none
};

}  // namespace shoal::storage
