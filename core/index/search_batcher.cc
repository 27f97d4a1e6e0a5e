#include "core/index/search_batcher.h"

#include <algorithm>
#include <exception>
#include <new>
#include <utility>

#include "absl/types/span.h"

namespace shoal::core {

// A search's life: kWaiting in its key's queue, kRunning in a batch, kStopped when cancelled
// in a batch (answered when the batch answers), kAnswered once one thread has taken the duty to
// call its done (it marks `reply` under the mutex and calls done after releasing it, so that
// nothing is allocated while the mutex is held and an allocation failure loses no answer).
struct SearchBatcher::Member {
  enum class State : uint8_t { kWaiting, kRunning, kStopped, kAnswered };
  // What the thread that moved it to kAnswered owes it.
  enum class Reply : uint8_t { kNone, kStopped, kResults };
  explicit Member(Search s) : search(std::move(s)) {}
  Search search;
  uint64_t seq = 0;               // arrival order; guarded by the batcher's mu_
  State state = State::kWaiting;  // guarded by the batcher's mu_
  Reply reply = Reply::kNone;     // set with kAnswered; then owned by the answering thread
  std::weak_ptr<Batch> batch;     // kRunning: set by Start; guarded by mu_
};

struct SearchBatcher::Batch {
  std::shared_ptr<CancelToken> token;  // the engine request's: cancelled when no member is left
  std::vector<std::shared_ptr<Member>> members;
  std::vector<size_t> first_query;  // per member: its first query in the engine request
  size_t live = 0;                  // members not answered; guarded by the batcher's mu_
  bool holds_slot = true;           // counted in running_; guarded by the batcher's mu_
};

namespace {

absl::Status StoppedStatus(const CancelToken& token) {
  absl::Status s = token.Check();
  return s.ok() ? absl::CancelledError("request cancelled") : s;
}

}  // namespace

SearchBatcher::SearchBatcher(Engine engine, Options options)
    : engine_(std::move(engine)), options_(std::move(options)) {}

size_t SearchBatcher::waiting() const {
  absl::MutexLock lock(&mu_);
  return waiting_;
}

void SearchBatcher::Submit(Search search) {
  std::shared_ptr<Member> member;
  try {
    member = std::make_shared<Member>(std::move(search));
  } catch (const std::bad_alloc&) {
    return std::move(search.done)(absl::ResourceExhaustedError("out of memory queueing a search"));
  }
  bool run_now = false;
  try {
    absl::MutexLock lock(&mu_);
    member->seq = next_seq_++;
    if (running_ < std::max<size_t>(1, options_.max_running)) {
      ++running_;
      member->state = Member::State::kRunning;
      run_now = true;
    } else {
      queues_[member->search.key].push_back(member);  // may throw: then nothing changed
      ++waiting_;
    }
  } catch (const std::bad_alloc&) {
    return std::move(member->search.done)(
        absl::ResourceExhaustedError("out of memory queueing a search"));
  }
  // Registered once the member is queued or running; it may run at once, on this thread.
  std::shared_ptr<const CancelToken> token = member->search.cancel;
  if (run_now) {
    Batches first;
    try {
      first.emplace_back(1, member);
    } catch (const std::bad_alloc&) {
      FailUnstarted(absl::MakeConstSpan(&member, 1),
                    absl::ResourceExhaustedError("out of memory starting a search"));
    }
    if (member->search.heavy_prepare) {
      DispatchLater(std::move(first));
    } else {
      DispatchAll(std::move(first));  // a snapshot: cheaper than a hop to the arena
    }
  }
  token->OnCancel([weak_self = weak_from_this(), weak_member = std::weak_ptr<Member>(member)] {
    auto self = weak_self.lock();
    auto m = weak_member.lock();
    if (self && m) self->OnMemberCancelled(m);
  });
}

void SearchBatcher::TakeBatchesLocked(Batches* next) {
  // `next` has room for max_running batches (reserved by the caller), so only a batch's own
  // member list allocates here; if that fails its members stay queued for the next batch that
  // answers (or for their cancellation).
  try {
    while (running_ < std::max<size_t>(1, options_.max_running) && waiting_ > 0 &&
           next->size() < next->capacity()) {
      next->push_back(TakeBatchLocked());
      ++running_;
    }
  } catch (const std::bad_alloc&) {
  }
}

std::vector<std::shared_ptr<SearchBatcher::Member>> SearchBatcher::TakeBatchLocked() {
  auto oldest = queues_.end();
  for (auto it = queues_.begin(); it != queues_.end(); ++it) {
    if (oldest == queues_.end() || it->second.front()->seq < oldest->second.front()->seq) {
      oldest = it;
    }
  }
  std::vector<std::shared_ptr<Member>> members;
  if (oldest == queues_.end()) return members;
  std::deque<std::shared_ptr<Member>>& queue = oldest->second;
  size_t count = 0, queries = 0;
  for (const auto& m : queue) {
    if (count > 0 && queries + m->search.num_queries > options_.max_batch_queries) break;
    queries += m->search.num_queries;
    ++count;
  }
  members.reserve(count);  // may throw: nothing has changed yet
  for (size_t i = 0; i < count; ++i) {
    queue.front()->state = Member::State::kRunning;
    members.push_back(std::move(queue.front()));
    queue.pop_front();
  }
  waiting_ -= count;
  if (queue.empty()) queues_.erase(oldest);
  return members;
}

void SearchBatcher::DispatchAll(Batches batches) {
  // A loop, not recursion: a batch that cannot start answers at once and frees its slot for the
  // next waiting one, as many times in a row as it happens.
  while (!batches.empty()) {
    std::vector<std::shared_ptr<Member>> members = std::move(batches.back());
    batches.pop_back();
    std::shared_ptr<Batch> batch;
    absl::Status not_started;
    try {
      batch = std::make_shared<Batch>();
    } catch (const std::bad_alloc&) {
      not_started = absl::ResourceExhaustedError("out of memory starting a search batch");
    }
    if (batch) {
      not_started = Start(batch, std::move(members));
    } else {
      // No Batch to answer through: answer these members and free the slot by hand.
      FailUnstarted(members, not_started);
      continue;
    }
    if (!not_started.ok()) {
      for (auto& more : Finish(batch, std::move(not_started))) batches.push_back(std::move(more));
    }
  }
}

void SearchBatcher::DispatchLater(Batches batches) {
  if (batches.empty()) return;
  if (options_.run_later) {
    try {
      auto shared = std::make_shared<Batches>(std::move(batches));
      options_.run_later(
          [self = shared_from_this(), shared] { self->DispatchAll(std::move(*shared)); });
      return;
    } catch (const std::bad_alloc&) {
      // Not posted (the batches were not moved out if make_shared failed): start them here.
    }
  }
  DispatchAll(std::move(batches));
}

void SearchBatcher::FailUnstarted(absl::Span<const std::shared_ptr<Member>> members,
                                  const absl::Status& status) {
  Batches next;
  try {
    next.reserve(std::max<size_t>(1, options_.max_running));
  } catch (const std::bad_alloc&) {
  }
  {
    absl::MutexLock lock(&mu_);
    for (const auto& m : members) {
      m->reply =
          m->state == Member::State::kStopped ? Member::Reply::kStopped : Member::Reply::kResults;
      m->state = Member::State::kAnswered;
    }
    --running_;
    TakeBatchesLocked(&next);
  }
  for (const auto& m : members) {
    std::move(m->search.done)(m->reply == Member::Reply::kStopped
                                  ? StoppedStatus(*m->search.cancel)
                                  : absl::StatusOr<std::vector<QueryResult>>(status));
  }
  DispatchAll(std::move(next));
}

absl::Status SearchBatcher::Start(const std::shared_ptr<Batch>& batch,
                                  std::vector<std::shared_ptr<Member>> members) {
  try {
    batch->members.reserve(members.size());
    batch->first_query.reserve(members.size());
    // The batch runs to its latest member's deadline.
    auto deadline = CancelToken::Clock::time_point::min();
    for (const auto& m : members) deadline = std::max(deadline, m->search.cancel->deadline());
    batch->token = std::make_shared<CancelToken>(deadline);
  } catch (const std::bad_alloc&) {
    batch->members = std::move(members);  // Finish answers them with this status
    return absl::ResourceExhaustedError("out of memory starting a search batch");
  }
  size_t total = 0;
  {
    // Members whose deadline passed while they waited, or that were cancelled before the batch
    // took them, answer now (no engine work was done for them); the rest join the batch.
    absl::MutexLock lock(&mu_);
    for (std::shared_ptr<Member>& m : members) {
      if (m->state == Member::State::kStopped || !m->search.cancel->Check().ok()) {
        m->state = Member::State::kAnswered;
        m->reply = Member::Reply::kStopped;
        continue;
      }
      m->batch = batch;
      batch->members.push_back(m);
      batch->first_query.push_back(total);
      total += m->search.num_queries;
    }
    batch->live = batch->members.size();
  }
  for (std::shared_ptr<Member>& m : members) {
    if (m->reply == Member::Reply::kStopped) {
      std::move(m->search.done)(StoppedStatus(*m->search.cancel));
    }
  }
  if (batch->members.empty()) return absl::CancelledError("no search left in the batch");
  IvfSearchRequest request;
  try {
    request = BuildRequest(batch, total);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory batching searches");
  } catch (const std::exception& e) {
    return absl::InternalError(std::string("batching searches: ") + e.what());
  }
  bool none_left = false;
  {
    // Every member may have been cancelled since the first lock: then so is the batch.
    absl::MutexLock lock(&mu_);
    none_left = batch->live == 0;
  }
  if (none_left) batch->token->Cancel();
  if (options_.observe_batch) options_.observe_batch(batch->members.size(), total);
  try {
    engine_(std::move(request),
            [self = shared_from_this(), batch](absl::StatusOr<std::vector<QueryResult>> results) {
              self->DispatchAll(self->Finish(batch, std::move(results)));
            });
  } catch (const std::bad_alloc&) {
    // REQUIRES of Engine: when it throws, it has not called and will not call done.
    return absl::ResourceExhaustedError("out of memory starting a search batch");
  } catch (const std::exception& e) {
    return absl::InternalError(std::string("starting a search batch: ") + e.what());
  }
  return absl::OkStatus();
}

IvfSearchRequest SearchBatcher::BuildRequest(const std::shared_ptr<Batch>& shared_batch,
                                             size_t total_queries) {
  const Batch& batch = *shared_batch;
  IvfSearchRequest request = batch.members.front()->search.prepare();
  request.num_queries = total_queries;
  if (batch.members.size() == 1) {
    request.queries = std::move(batch.members.front()->search.queries);
  } else {
    request.queries.resize(total_queries * request.dim);
    for (size_t i = 0; i < batch.members.size(); ++i) {
      const std::vector<float>& q = batch.members[i]->search.queries;
      std::copy(q.begin(), q.end(), request.queries.begin() + batch.first_query[i] * request.dim);
    }
  }
  request.cancel = batch.token;
  // A batch waiting for the disk leaves the CPU to the next one: it no longer counts against
  // max_running (it still answers through Finish).
  request.on_io_wait = [weak_self = weak_from_this(),
                        weak_batch = std::weak_ptr<Batch>(shared_batch)] {
    auto self = weak_self.lock();
    auto b = weak_batch.lock();
    if (self && b) self->DispatchLater(self->ReleaseSlot(*b));
  };
  return request;
}

SearchBatcher::Batches SearchBatcher::ReleaseSlot(Batch& batch) {
  Batches next;
  try {
    next.reserve(std::max<size_t>(1, options_.max_running));
  } catch (const std::bad_alloc&) {
    return next;  // the slot stays held until Finish
  }
  absl::MutexLock lock(&mu_);
  if (!batch.holds_slot) return next;
  batch.holds_slot = false;
  --running_;
  TakeBatchesLocked(&next);
  return next;
}

SearchBatcher::Batches SearchBatcher::Finish(const std::shared_ptr<Batch>& batch,
                                             absl::StatusOr<std::vector<QueryResult>> results) {
  Batches next;
  try {
    next.reserve(std::max<size_t>(1, options_.max_running));
  } catch (const std::bad_alloc&) {
    // TakeBatchesLocked takes none: the waiting searches go with the next batch to answer.
  }
  {
    absl::MutexLock lock(&mu_);
    for (const std::shared_ptr<Member>& m : batch->members) {
      if (m->state == Member::State::kAnswered) continue;
      m->reply =
          m->state == Member::State::kStopped ? Member::Reply::kStopped : Member::Reply::kResults;
      m->state = Member::State::kAnswered;
    }
    if (std::exchange(batch->holds_slot, false)) --running_;
    TakeBatchesLocked(&next);
  }
  // Each member's slice of the results (or the batch's error, or its own stop).
  for (size_t i = 0; i < batch->members.size(); ++i) {
    Member& m = *batch->members[i];
    const Member::Reply reply = std::exchange(m.reply, Member::Reply::kNone);
    if (reply == Member::Reply::kNone) continue;  // answered by someone else
    absl::StatusOr<std::vector<QueryResult>> result = absl::CancelledError("request cancelled");
    if (reply == Member::Reply::kStopped) {
      result = StoppedStatus(*m.search.cancel);
    } else if (!results.ok()) {
      result = results.status();
    } else if (absl::Status s = m.search.cancel->Check(); !s.ok()) {
      result = std::move(s);
    } else if (i < batch->first_query.size()) {
      try {
        auto begin = results->begin() + ptrdiff_t(batch->first_query[i]);
        result = std::vector<QueryResult>(
            std::make_move_iterator(begin),
            std::make_move_iterator(begin + ptrdiff_t(m.search.num_queries)));
      } catch (const std::bad_alloc&) {
        result = absl::ResourceExhaustedError("out of memory answering a search");
      }
    }
    std::move(m.search.done)(std::move(result));
  }
  return next;
}

void SearchBatcher::OnMemberCancelled(const std::shared_ptr<Member>& member) {
  std::shared_ptr<Batch> stop;
  bool answer_now = false;
  {
    absl::MutexLock lock(&mu_);
    switch (member->state) {
      case Member::State::kAnswered:
      case Member::State::kStopped:
        return;
      case Member::State::kWaiting: {
        auto it = queues_.find(member->search.key);
        if (it != queues_.end()) {
          auto& queue = it->second;
          queue.erase(std::remove(queue.begin(), queue.end(), member), queue.end());
          if (queue.empty()) queues_.erase(it);
        }
        --waiting_;
        member->state = Member::State::kAnswered;
        answer_now = true;
        break;
      }
      case Member::State::kRunning:
        // The engine may be working on its queries: it answers when the batch does, so that
        // its request's slots and memory stay accounted until then (and shutdown, which waits
        // for every RPC, never frees what a running batch uses).
        member->state = Member::State::kStopped;
        if (auto batch = member->batch.lock(); batch && --batch->live == 0) stop = batch;
        break;
    }
  }
  if (stop) stop->token->Cancel();
  if (answer_now) std::move(member->search.done)(StoppedStatus(*member->search.cancel));
}

}  // namespace shoal::core
