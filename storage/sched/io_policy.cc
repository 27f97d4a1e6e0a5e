#include "storage/sched/io_policy.h"

#include <algorithm>

namespace shoal::storage {

void IoPolicy::Enqueue(const IoRequest& request) {
  const Key key = KeyOf(request);
  queue_.emplace(key, request);
  key_of_[request.id] = key;
  by_offset_[request.file].insert({request.offset, request.id});
  by_query_[request.query].insert(key);
}

void IoPolicy::Remove(const IoRequest& r) {
  const Key key = KeyOf(r);
  key_of_.erase(r.id);
  auto file = by_offset_.find(r.file);
  file->second.erase({r.offset, r.id});
  if (file->second.empty()) by_offset_.erase(file);
  auto query = by_query_.find(r.query);
  query->second.erase(key);
  if (query->second.empty()) by_query_.erase(query);
  queue_.erase(key);
}

bool IoPolicy::Cancel(uint64_t request_id) {
  auto it = key_of_.find(request_id);
  if (it == key_of_.end()) return false;
  const IoRequest r = queue_.at(it->second);
  Remove(r);
  return true;
}

std::vector<uint64_t> IoPolicy::CancelQuery(uint64_t query) {
  std::vector<uint64_t> ids;
  auto it = by_query_.find(query);
  if (it == by_query_.end()) return ids;
  for (const Key& key : it->second) ids.push_back(std::get<3>(key));
  for (uint64_t id : ids) Cancel(id);  // the last one erases `it`
  return ids;
}

bool IoPolicy::MayStart(const IoRequest& head) const {
  return in_flight_.size() < limits_.max_requests_in_flight &&
         bytes_in_flight_ + head.length <= limits_.max_bytes_in_flight;
}

// Grows a submission from `head` over queued requests of the same file that start inside or
// at most max_coalesce_gap bytes after the range, while the merged read stays within
// max_request_bytes and the budget.
IoSubmission IoPolicy::Coalesce(const IoRequest& head) {
  IoSubmission sub;
  sub.id = next_submission_++;
  sub.file = head.file;
  sub.offset = head.offset;
  uint64_t end = head.offset + head.length;
  std::vector<IoRequest> taken = {head};
  const auto& index = by_offset_.at(head.file);
  for (auto it = index.lower_bound({head.offset, 0}); it != index.end(); ++it) {
    if (it->second == head.id) continue;
    if (it->first > end + limits_.max_coalesce_gap) break;  // a real gap: stop
    const IoRequest& next = queue_.at(key_of_.at(it->second));
    const uint64_t new_end = std::max(end, next.offset + next.length);
    if (new_end - sub.offset > limits_.max_request_bytes) break;
    if (bytes_in_flight_ + (new_end - sub.offset) > limits_.max_bytes_in_flight) break;
    taken.push_back(next);
    end = new_end;
  }
  sub.length = uint32_t(end - sub.offset);
  for (const IoRequest& r : taken) Remove(r);
  std::sort(taken.begin(), taken.end(),
            [](const IoRequest& a, const IoRequest& b) { return a.offset < b.offset; });
  sub.requests = std::move(taken);
  return sub;
}

std::vector<IoSubmission> IoPolicy::Dispatch(IoClock::time_point now,
                                             std::vector<IoRequest>* expired) {
  // Deadlines lead the order, so expired requests form a prefix of the queue.
  while (!queue_.empty() && queue_.begin()->second.deadline <= now) {
    const IoRequest r = queue_.begin()->second;
    Remove(r);
    if (expired) expired->push_back(r);
  }
  std::vector<IoSubmission> out;
  while (!queue_.empty()) {
    const IoRequest head = queue_.begin()->second;
    IoSubmission sub;
    if (MayStart(head)) {
      sub = Coalesce(head);
    } else {
      // Over budget. The oldest query, if it has nothing in flight, still gets its next read
      // (alone, uncoalesced): whatever the budget, the oldest query always progresses. One
      // forced read at a time, so the overshoot is bounded by one read.
      if (forced_in_flight_ != 0) break;
      const auto& [oldest, keys] = *by_query_.begin();
      auto flying = in_flight_per_query_.find(oldest);
      if (flying != in_flight_per_query_.end() && flying->second > 0) break;
      const IoRequest forced = queue_.at(*keys.begin());
      Remove(forced);
      sub.id = next_submission_++;
      sub.file = forced.file;
      sub.offset = forced.offset;
      sub.length = forced.length;
      sub.requests = {forced};
      forced_in_flight_ = sub.id;
    }
    bytes_in_flight_ += sub.length;
    for (const IoRequest& r : sub.requests) ++in_flight_per_query_[r.query];
    out.push_back(sub);
    in_flight_.emplace(sub.id, std::move(sub));
  }
  return out;
}

void IoPolicy::Complete(uint64_t submission_id) {
  auto it = in_flight_.find(submission_id);
  if (it == in_flight_.end()) return;
  bytes_in_flight_ -= it->second.length;
  if (forced_in_flight_ == submission_id) forced_in_flight_ = 0;
  for (const IoRequest& r : it->second.requests) {
    auto q = in_flight_per_query_.find(r.query);
    if (--q->second == 0) in_flight_per_query_.erase(q);
  }
  in_flight_.erase(it);
}

}  // namespace shoal::storage
