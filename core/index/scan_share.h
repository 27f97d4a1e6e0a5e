// ScanShare: shared partition scans across requests (issue #16). Queries of different requests
// that probe the same partition of the same segment register on one entry (SharedScan); one
// fetch answers the entry, and one scan task scores every registered query in one batched
// ScorePartition call (core/index/partition_scan.h), handing each request its candidates.
//
// The protocol (the model in tests/model mirrors these names):
//   Register(key, ticket)  a request's job registers one work item (one partition of one
//                          segment). It JOINS the open entry for `key` when there is one, that
//                          entry is not closed, the entry's oldest ticket is not younger than the
//                          new one (an older query never rides a younger query's I/O priority)
//                          and the entry stays within max_queries_per_scan; otherwise it LEADS a
//                          new entry (in the map only when sharing is on; it replaces the map
//                          slot) and the caller issues the entry's fetch with SharedScan::Issue.
//   SharedScan::Deliver    the fetch's callback (I/O thread or inline). Data: offered to the
//                          tickets oldest first through ScanMember::AcceptShared; an offered
//                          ticket leaves the entry whatever the job answers; the first job that
//                          accepts owns the data (and its pin) and will Close the entry when its
//                          scan task runs. Nobody left: the entry closes, the data is dropped.
//                          CANCELLED / DEADLINE_EXCEEDED because the ticket that issued the fetch
//                          stopped (its token, or it left): the fetch is re-issued with the
//                          oldest live ticket's PartitionFetch. Any other error (or no live
//                          ticket): the entry closes and every ticket's job gets FailShared.
//   Close(entry)           the accepting job's scan task takes the remaining tickets; no ticket
//                          joins after. It scores them with its own queries and hands back
//                          (ScanMember::OnHandBack).
//   Leave(entry, ...)      a failing job withdraws a ticket not yet offered or closed; true if it
//                          left (the job counts the work answered), false if an answer
//                          (AcceptShared, FailShared or a hand-back) will still come.
// A job that accepted data but fails before scanning it passes the data on with Deliver again.
//
// Accounting (DESIGN I-9): each job charges its own pinned bytes and prefetch depth for every
// ticket it registers, lead or join, until that ticket is answered. The pin belongs to the entry
// until a job accepts the data, then to that job's ready item.
//
// Fetches outlive requests: a request that left every ticket of an entry (cancelled, failed)
// answers while the entry's fetch may still be at the disk (CancelQuery only drops queued
// reads); the entry owns that fetch and drops its data when it answers. InFlightFetches()
// counts such fetches (every entry's, across re-issues) so that a server shuts its cache and
// I/O scheduler down only once none is left (server/server.cc).
//
// Thread-safety: thread-safe. One mutex guards every entry; it is never held while calling into
// a job, the source or the observer.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/index/partition_scan.h"
#include "core/index/partition_source.h"
#include "core/index/row_selection.h"

namespace shoal::core {

class IdFilter;
class SharedScan;
struct HandBack;  // core/index/ivf_scan.h: a ticket's candidates from another job's scan

// The side of a request's job that an entry calls (IvfSearchJob implements it). Never called
// with the ScanShare's mutex held.
class ScanMember {
 public:
  virtual ~ScanMember() = default;
  // The entry's data for this member's work item `work`. True: the member took `data` (moved
  // from) and will Close `entry` when it scans it. False (the member has failed): the member
  // counted the work answered; `data` is untouched.
  virtual bool AcceptShared(size_t work, const std::shared_ptr<SharedScan>& entry,
                            PartitionData& data) = 0;
  // The entry's fetch failed: the member counts the work answered and fails.
  virtual void FailShared(size_t work, absl::Status status) = 0;
  // Another member's scan task scored this member's ticket for `work` (a closed ticket): the
  // member merges the candidates and counts the work answered. Never waits.
  virtual void OnHandBack(size_t work, HandBack results) = 0;
};

// One registration: one request's queries on one partition.
struct Ticket {
  std::shared_ptr<ScanMember> job;     // alive while the ticket is registered
  size_t work = 0;                     // index in that job's work items
  uint32_t segment = 0;                // index in that job's request segments (for refine)
  const ScanQuery* queries = nullptr;  // into the job's immutable plan
  size_t num_queries = 0;
  size_t limit = 0;                      // candidates kept per query
  const IdFilter* dead = nullptr;        // may be null
  const RowSelection* select = nullptr;  // the job's filtered rows of this segment; null: all
  uint64_t query_seq = 0;
  PartitionFetch fetch;  // priority and cancel token of this job's fetch
};

// One partition of one segment: the key of an entry. The entry holds the source, so the
// pointer cannot be reused by another segment while the entry is in the map.
struct ScanKey {
  const PartitionSource* source = nullptr;
  uint32_t partition = 0;
  friend bool operator==(const ScanKey& a, const ScanKey& b) {
    return a.source == b.source && a.partition == b.partition;
  }
  template <typename H>
  friend H AbslHashValue(H h, const ScanKey& k) {
    return H::combine(std::move(h), k.source, k.partition);
  }
};

class ScanShare : public std::enable_shared_from_this<ScanShare> {
 public:
  struct Options {
    bool share_scans = true;           // false: every entry has exactly one ticket
    size_t max_queries_per_scan = 64;  // queries of one entry, at most (a lone ticket may exceed)
    // Called after every partition scan with the number of queries it scored (all tickets).
    std::function<void(size_t)> observe_queries_per_scan;
  };

  // REQUIRES: owned by a shared_ptr (entries hold it).
  explicit ScanShare(Options options) : options_(std::move(options)) {}
  ScanShare(const ScanShare&) = delete;
  ScanShare& operator=(const ScanShare&) = delete;

  struct Registration {
    std::shared_ptr<SharedScan> entry;
    bool lead = false;  // true: the caller must call entry->Issue(ticket's fetch)
  };
  Registration Register(const ScanKey& key, std::shared_ptr<PartitionSource> source, Ticket ticket);
  // The remaining tickets of `entry`, which closes (REQUIRES: the caller accepted its data).
  std::vector<Ticket> Close(const std::shared_ptr<SharedScan>& entry);
  // Withdraws `job`'s ticket for `work` from `entry`; see the protocol above.
  bool Leave(const std::shared_ptr<SharedScan>& entry, const ScanMember* job, size_t work);

  void ObserveScan(size_t queries) const {
    if (options_.observe_queries_per_scan) options_.observe_queries_per_scan(queries);
  }
  // Entries whose fetch has been issued and has not yet answered (its Deliver returned).
  // Non-blocking: shutdown polls it until 0 before it frees what the fetches call into.
  size_t InFlightFetches() const { return in_flight_fetches_.load(std::memory_order_acquire); }

  // For tests only: entries in the map, and the most tickets one query has registered on them.
  size_t open_entries() const;
  size_t MaxOpenTicketsPerQuery() const;

 private:
  friend class SharedScan;
  // REQUIRES: mu_ held. Takes `entry` out of the map if it is still its key's entry.
  void EraseLocked(SharedScan* entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  // ++ by SharedScan::Issue, -- once the fetch's callback (Deliver) has returned
  std::atomic<size_t> in_flight_fetches_{0};
  mutable absl::Mutex mu_;
  absl::flat_hash_map<ScanKey, std::shared_ptr<SharedScan>> open_ ABSL_GUARDED_BY(mu_);
};

class SharedScan : public std::enable_shared_from_this<SharedScan> {
 public:
  SharedScan(std::shared_ptr<ScanShare> share, ScanKey key, std::shared_ptr<PartitionSource> source)
      : share_(std::move(share)), key_(key), source_(std::move(source)) {}

  // Issues the entry's fetch with `fetch`'s priority; the answer goes to Deliver. The fetch
  // counts in the share's InFlightFetches() until that Deliver returns.
  void Issue(const PartitionFetch& fetch);
  void Deliver(absl::StatusOr<PartitionData> data);

 private:
  friend class ScanShare;

  // REQUIRES: share_->mu_ held (checked at run time). Tells the thread-safety analysis what it
  // cannot see, that share_->mu_ is the mutex a ScanShare method locked. Not checked while the
  // seeded bug that skips Register's lock is on (core/base/seeded_bug.h): it is there for TSan.
  void AssertGuardHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK(share_->mu_);

  // REQUIRES: share_->mu_ held. Whether the ticket that issued the fetch stopped.
  bool IssuerStoppedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(share_->mu_);

  const std::shared_ptr<ScanShare> share_;  // an entry may outlive every request on it
  const ScanKey key_;
  const std::shared_ptr<PartitionSource> source_;
  // Guarded by share_->mu_ (one mutex for every entry).
  std::vector<Ticket> tickets_ ABSL_GUARDED_BY(share_->mu_);
  bool closed_ ABSL_GUARDED_BY(share_->mu_) = false;
  // queries of every ticket ever registered
  size_t queries_ ABSL_GUARDED_BY(share_->mu_) = 0;
  // the issuer's query_seq (the leader's, or a re-issue's): joiners are never older
  uint64_t oldest_seq_ ABSL_GUARDED_BY(share_->mu_) = 0;
  // the fetch in flight was issued with this
  PartitionFetch issuer_ ABSL_GUARDED_BY(share_->mu_);
  bool issuer_left_ ABSL_GUARDED_BY(share_->mu_) = false;
};

}  // namespace shoal::core
