#include "server/request_limits.h"

#include <algorithm>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/index/coarse_router.h"
#include "core/index/partition_scan.h"

namespace shoal::server {
namespace {

// Per-object overheads, measured on libstdc++ / protobuf 3.21 and rounded up.
constexpr uint64_t kCandidateBytes = 24;  // core::Candidate in a heap
constexpr uint64_t kNeighborBytes = 16;   // core::Neighbor in a result
constexpr uint64_t kHitObjectBytes = 64;  // v1::SearchHit plus its pointer in the repeated field
constexpr uint64_t kHitWireBytes = 18;    // id and distance, tagged
constexpr uint64_t kPackedHitBytes = 14;  // packed_results: a varint id and a float, both ways
constexpr uint64_t kPointObjectBytes = 96;
constexpr uint64_t kPointWireBytes = 16;
// One plan entry (a query probing a partition), as core/index/ivf_search.cc holds it at once:
// the router's Probe; Work::queries and Work::coarse_keys (a uint32 and a float, grown by
// push_back, so up to twice that); and Work::scan's ScanQuery. 40 bytes.
constexpr uint64_t kPlanEntryBytes =
    sizeof(core::Probe) + 2 * (sizeof(uint32_t) + sizeof(float)) + sizeof(core::ScanQuery);
// One refined candidate besides its raw vector: its RowRef and its (query, candidate) owner.
constexpr uint64_t kRefineRowBytes = 40;

std::string MiB(uint64_t bytes) { return absl::StrFormat("%.1f MiB", double(bytes) / (1 << 20)); }

absl::Status CheckResponse(uint64_t wire_bytes, const RequestLimits& limits, const char* advice) {
  if (wire_bytes <= limits.max_response_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat("the response would be about ", MiB(wire_bytes),
                                                   ", over server.max_message_bytes (",
                                                   MiB(limits.max_response_bytes), "); ", advice));
}

absl::Status CheckRequest(uint64_t bytes, const RequestLimits& limits, const std::string& what) {
  if (bytes <= limits.max_request_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat("this request would hold about ", MiB(bytes),
                                                   " (", what, "), over limits.max_request_bytes (",
                                                   MiB(limits.max_request_bytes), ")"));
}

}  // namespace

absl::StatusOr<uint64_t> SearchCost(const v1::SearchRequest& req, const SearchShape& shape,
                                    const RequestLimits& limits) {
  const uint64_t nq = uint64_t(req.queries_size()), k = req.k();
  const uint64_t refine =
      std::max<uint64_t>(1, req.refine_factor() ? req.refine_factor() : shape.default_refine);
  const uint64_t per_query = k * refine;  // k <= 10000 and refine < 2^32: no overflow
  if (per_query > limits.max_candidates_per_query) {
    return absl::InvalidArgumentError(absl::StrCat(
        req.refine_factor() > 1 ? "refine_factor" : "k", ": k * refine_factor = ", per_query,
        " candidates per query, over limits.max_candidates_per_query (",
        limits.max_candidates_per_query, ")"));
  }
  const uint64_t vector_bytes = uint64_t(shape.dim) * sizeof(float);
  // packed_results adds two packed arrays; the per-hit objects are then only built for per-hit
  // data (ShoalService::Search), so a plain packed answer costs the arrays alone.
  const bool per_hit = !req.packed_results() || req.include_vectors() || req.include_attributes();
  const uint64_t packed = req.packed_results() ? kPackedHitBytes : 0;
  const uint64_t wire_hit =
      packed + (per_hit ? kHitWireBytes + (req.include_vectors() ? vector_bytes + 6 : 0) : 0);
  if (auto s = CheckResponse(nq * k * wire_hit, limits,
                             "send fewer queries per request or ask for a smaller k");
      !s.ok()) {
    return s;
  }
  const uint64_t queries = nq * vector_bytes;
  const uint64_t candidates = nq * per_query * kCandidateBytes;
  const uint64_t tables = nq * shape.table_bytes_per_query;
  const uint64_t plan = nq * shape.plan_entries_per_query * kPlanEntryBytes;
  // Refine reads every candidate's raw vector (PartitionSource::ReadRaw) into one buffer.
  const bool refines = shape.refine_reads_raw && (req.refine_factor() > 0 || shape.default_refine);
  const uint64_t refine_bytes = refines ? nq * per_query * (vector_bytes + kRefineRowBytes) : 0;
  const uint64_t response =
      nq * k *
      (kNeighborBytes + packed +
       (per_hit ? kHitObjectBytes + (req.include_vectors() ? vector_bytes : 0) : 0));
  const uint64_t total =
      queries + candidates + tables + plan + refine_bytes + response + shape.selection_bytes;
  if (auto s =
          CheckRequest(total, limits,
                       absl::StrCat(nq, " queries x ", per_query, " candidates: ", MiB(candidates),
                                    " of candidates, ", MiB(tables), " of query tables, ",
                                    MiB(plan), " of plan, ", MiB(refine_bytes),
                                    " of refine vectors, ", MiB(response), " of response"));
      !s.ok()) {
    return s;
  }
  return total;
}

absl::StatusOr<uint64_t> GetCost(const v1::GetRequest& req, uint32_t dim,
                                 const RequestLimits& limits) {
  const uint64_t n = uint64_t(req.ids_size());
  const uint64_t vector_bytes = req.include_vectors() ? uint64_t(dim) * sizeof(float) : 0;
  if (auto s = CheckResponse(n * (kPointWireBytes + vector_bytes), limits,
                             "ask for fewer ids per request");
      !s.ok()) {
    return s;
  }
  const uint64_t total = n * (kPointObjectBytes + 2 * vector_bytes);  // stored copy + proto
  if (auto s = CheckRequest(total, limits, absl::StrCat(n, " points")); !s.ok()) return s;
  return total;
}

absl::StatusOr<InflightBytes::Reservation> InflightBytes::Acquire(uint64_t bytes) {
  uint64_t used = used_.load(std::memory_order_relaxed);
  do {
    if (used + bytes > budget_ && used > 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat("requests in flight hold about ", MiB(used), "; this one needs ", MiB(bytes),
                       " more, over limits.max_inflight_request_bytes (", MiB(budget_),
                       "); retry with backoff"));
    }
  } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  return Reservation(this, bytes);
}

absl::StatusOr<PeerSlots::Slot> PeerSlots::Acquire(const std::string& peer) {
  absl::MutexLock lock(&mu_);
  auto it = held_.find(peer);
  const int held = it == held_.end() ? 0 : it->second;
  const bool may_borrow = capacity_ > 0 && capacity_ - (total_ + 1) >= per_peer_;
  if (held >= per_peer_ && !may_borrow) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this connection (", peer, ") already has ", held, " searches and gets in flight (",
        capacity_ > 0 ? "past its share of " : "", "server.max_inflight_per_peer = ", per_peer_,
        capacity_ > 0 ? " while the server is busy" : "",
        "); wait for their answers or retry with backoff"));
  }
  ++held_[peer];
  ++total_;
  return Slot(this, peer);
}

void PeerSlots::Slot::Release() {
  PeerSlots* owner = std::exchange(owner_, nullptr);
  if (owner == nullptr) return;
  absl::MutexLock lock(&owner->mu_);
  auto it = owner->held_.find(peer_);
  if (it == owner->held_.end()) return;
  --owner->total_;
  if (--it->second <= 0) owner->held_.erase(it);
}

int PeerSlots::held(const std::string& peer) const {
  absl::MutexLock lock(&mu_);
  auto it = held_.find(peer);
  return it == held_.end() ? 0 : it->second;
}

size_t PeerSlots::peers() const {
  absl::MutexLock lock(&mu_);
  return held_.size();
}

}  // namespace shoal::server
