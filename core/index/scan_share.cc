#include "core/index/scan_share.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "core/base/seeded_bug.h"

namespace shoal::core {

ScanShare::Registration ScanShare::Register(const ScanKey& key,
                                            std::shared_ptr<PartitionSource> source,
                                            Ticket ticket) {
  SeedableMutexLock lock(&mu_, "scan_share.register_unlocked");
  const size_t n = ticket.num_queries;
  if (options_.share_scans) {
    auto it = open_.find(key);
    if (it != open_.end()) {
      SharedScan& e = *it->second;
      e.AssertGuardHeld();
      if (!e.closed_ && e.oldest_seq_ <= ticket.query_seq &&
          e.queries_ + n <= options_.max_queries_per_scan) {
        e.queries_ += n;
        e.tickets_.push_back(std::move(ticket));
        return {it->second, false};
      }
    }
  }
  auto entry = std::make_shared<SharedScan>(shared_from_this(), key, std::move(source));
  entry->AssertGuardHeld();
  entry->queries_ = n;
  entry->oldest_seq_ = ticket.query_seq;
  entry->issuer_ = ticket.fetch;
  entry->tickets_.push_back(std::move(ticket));
  if (options_.share_scans) open_[key] = entry;  // an older query's entry replaces the slot
  return {std::move(entry), true};
}

std::vector<Ticket> ScanShare::Close(const std::shared_ptr<SharedScan>& entry) {
  absl::MutexLock lock(&mu_);
  entry->AssertGuardHeld();
  entry->closed_ = true;
  EraseLocked(entry.get());
  return std::exchange(entry->tickets_, {});
}

bool ScanShare::Leave(const std::shared_ptr<SharedScan>& entry, const ScanMember* job,
                      size_t work) {
  absl::MutexLock lock(&mu_);
  entry->AssertGuardHeld();
  if (entry->closed_) return false;
  std::vector<Ticket>& tickets = entry->tickets_;
  auto it = std::find_if(tickets.begin(), tickets.end(),
                         [&](const Ticket& t) { return t.job.get() == job && t.work == work; });
  if (it == tickets.end()) return false;  // being offered the data: the answer will come
  if (it->query_seq == entry->issuer_.query_seq) entry->issuer_left_ = true;
  tickets.erase(it);
  return true;
}

size_t ScanShare::open_entries() const {
  absl::MutexLock lock(&mu_);
  return open_.size();
}

size_t ScanShare::MaxOpenTicketsPerQuery() const {
  absl::MutexLock lock(&mu_);
  absl::flat_hash_map<uint64_t, size_t> per_query;
  size_t most = 0;
  for (const auto& [key, entry] : open_) {
    entry->AssertGuardHeld();
    for (const Ticket& t : entry->tickets_) most = std::max(most, ++per_query[t.query_seq]);
  }
  return most;
}

void ScanShare::EraseLocked(SharedScan* entry) {
  auto it = open_.find(entry->key_);
  if (it != open_.end() && it->second.get() == entry) open_.erase(it);
}

void SharedScan::Issue(const PartitionFetch& fetch) {
  share_->in_flight_fetches_.fetch_add(1, std::memory_order_relaxed);
  source_->Fetch(fetch, [self = shared_from_this()](absl::StatusOr<PartitionData> data) {
    // Deliver consumes the data (dropped if nobody takes it) and may re-issue (++ first), so
    // the count reaches 0 only once no fetch of any entry can call back.
    self->Deliver(std::move(data));
    self->share_->in_flight_fetches_.fetch_sub(1, std::memory_order_acq_rel);
  });
}

void SharedScan::AssertGuardHeld() const {
  if (!SHOAL_SEEDED_BUG("scan_share.register_unlocked")) share_->mu_.AssertHeld();
}

bool SharedScan::IssuerStoppedLocked() const {
  return issuer_left_ || (issuer_.cancel && !issuer_.cancel->Check().ok());
}

void SharedScan::Deliver(absl::StatusOr<PartitionData> data) {
  const std::shared_ptr<SharedScan> self = shared_from_this();
  if (data.ok()) {
    // Oldest first; an offered ticket leaves the entry whatever its job answers.
    for (;;) {
      Ticket ticket;
      {
        absl::MutexLock lock(&share_->mu_);
        if (tickets_.empty()) {
          closed_ = true;
          share_->EraseLocked(this);
          return;  // nobody left: the data (and its pin) is dropped
        }
        auto oldest = std::min_element(
            tickets_.begin(), tickets_.end(),
            [](const Ticket& a, const Ticket& b) { return a.query_seq < b.query_seq; });
        ticket = std::move(*oldest);
        tickets_.erase(oldest);
      }
      if (ticket.job->AcceptShared(ticket.work, self, *data)) return;
    }
  }
  const absl::Status status = data.status();
  std::optional<PartitionFetch> reissue;
  std::vector<Ticket> failed;
  {
    absl::MutexLock lock(&share_->mu_);
    // The issuer's cancellation (CancelQuery dropped its queued read) must not fail the others.
    // No cap on re-issues is needed: a re-issue happens only when the issuer stopped (its token
    // cancelled or expired, or it left) and goes to a ticket whose token is fine now. A stopped
    // ticket never becomes live again, so every re-issue consumes a distinct ticket, and an
    // entry's tickets are finite (joins stop at max_queries_per_scan queries ever registered).
    // A cap would fail live tickets whose own token is fine.
    const bool stopped_by_issuer =
        (absl::IsCancelled(status) || absl::IsDeadlineExceeded(status)) && IssuerStoppedLocked();
    if (stopped_by_issuer) {
      const Ticket* live = nullptr;
      for (const Ticket& t : tickets_) {
        if (t.fetch.cancel && !t.fetch.cancel->Check().ok()) continue;
        if (!live || t.query_seq < live->query_seq) live = &t;
      }
      if (live) {
        issuer_ = live->fetch;
        // Joiners must not be older than the query whose priority the read now has.
        oldest_seq_ = live->query_seq;
        issuer_left_ = false;
        reissue = issuer_;
      }
    }
    if (!reissue) {
      closed_ = true;
      share_->EraseLocked(this);
      failed = std::exchange(tickets_, {});
    }
  }
  if (reissue) return Issue(*reissue);
  for (Ticket& t : failed) t.job->FailShared(t.work, status);
}

}  // namespace shoal::core
