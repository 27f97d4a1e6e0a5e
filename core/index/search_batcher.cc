#include "core/index/search_batcher.h"

#include <algorithm>
#include <exception>
#include <new>
#include <utility>

namespace shoal::core {

// A search's life: kWaiting in its key's queue, kRunning in a batch, kStopped when cancelled
// in a batch (answered when the batch answers), kAnswered once its done has been taken (exactly
// one thread moves it to kAnswered and calls done).
struct SearchBatcher::Member {
  enum class State : uint8_t { kWaiting, kRunning, kStopped, kAnswered };
  explicit Member(Search s) : search(std::move(s)) {}
  Search search;
  uint64_t seq = 0;               // arrival order; guarded by the batcher's mu_
  State state = State::kWaiting;  // guarded by the batcher's mu_
  std::weak_ptr<Batch> batch;     // kRunning: set by Dispatch; guarded by mu_
};

struct SearchBatcher::Batch {
  std::shared_ptr<CancelToken> token;  // the engine request's: cancelled when no member is left
  std::vector<std::shared_ptr<Member>> members;
  std::vector<size_t> first_query;  // per member: its first query in the engine request
  size_t live = 0;                  // members not answered; guarded by the batcher's mu_
};

namespace {

// One answer to deliver once the batcher's mutex is released.
struct Answer {
  SearchDone done;
  absl::StatusOr<std::vector<QueryResult>> result;
};

void Deliver(std::vector<Answer>& answers) {
  for (Answer& a : answers) std::move(a.done)(std::move(a.result));
}

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
  auto member = std::make_shared<Member>(std::move(search));
  bool run_now = false;
  {
    absl::MutexLock lock(&mu_);
    member->seq = next_seq_++;
    if (running_ < std::max<size_t>(1, options_.max_running)) {
      ++running_;
      member->state = Member::State::kRunning;
      run_now = true;
    } else {
      queues_[member->search.key].push_back(member);
      ++waiting_;
    }
  }
  // Registered once the member is queued or running; it may run at once, on this thread.
  std::shared_ptr<const CancelToken> token = member->search.cancel;
  if (run_now) DispatchAll({{member}});
  token->OnCancel([weak_self = weak_from_this(), weak_member = std::weak_ptr<Member>(member)] {
    auto self = weak_self.lock();
    auto m = weak_member.lock();
    if (self && m) self->OnMemberCancelled(m);
  });
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
  size_t queries = 0;
  while (!queue.empty() && (members.empty() || queries + queue.front()->search.num_queries <=
                                                   options_.max_batch_queries)) {
    queries += queue.front()->search.num_queries;
    queue.front()->state = Member::State::kRunning;
    members.push_back(std::move(queue.front()));
    queue.pop_front();
    --waiting_;
  }
  if (queue.empty()) queues_.erase(oldest);
  return members;
}

void SearchBatcher::DispatchAll(std::vector<std::vector<std::shared_ptr<Member>>> batches) {
  // A loop, not recursion: a batch that cannot start answers at once and frees its slot for the
  // next waiting one, as many times in a row as it happens.
  while (!batches.empty()) {
    std::vector<std::shared_ptr<Member>> members = std::move(batches.back());
    batches.pop_back();
    auto batch = std::make_shared<Batch>();
    absl::Status not_started = Start(batch, std::move(members));
    if (!not_started.ok()) {
      for (auto& more : Finish(batch, std::move(not_started))) batches.push_back(std::move(more));
    }
  }
}

absl::Status SearchBatcher::Start(const std::shared_ptr<Batch>& batch,
                                  std::vector<std::shared_ptr<Member>> members) {
  std::vector<Answer> answers;
  size_t total = 0;
  {
    // Members whose deadline passed while they waited, or that were cancelled before the batch
    // took them, answer now (no engine work was done for them); the rest join the batch, which
    // runs to the latest deadline.
    absl::MutexLock lock(&mu_);
    auto deadline = CancelToken::Clock::time_point::min();
    for (std::shared_ptr<Member>& m : members) {
      absl::Status s = m->search.cancel->Check();
      if (m->state == Member::State::kStopped && s.ok()) s = absl::CancelledError("cancelled");
      if (!s.ok()) {
        m->state = Member::State::kAnswered;
        answers.push_back({std::move(m->search.done), std::move(s)});
        continue;
      }
      m->batch = batch;
      batch->members.push_back(m);
      batch->first_query.push_back(total);
      total += m->search.num_queries;
      deadline = std::max(deadline, m->search.cancel->deadline());
    }
    batch->live = batch->members.size();
    batch->token = std::make_shared<CancelToken>(deadline);
  }
  Deliver(answers);
  if (batch->members.empty()) return absl::CancelledError("no search left in the batch");
  IvfSearchRequest request;
  try {
    request = batch->members.front()->search.prepare();
    request.num_queries = total;
    request.queries.resize(total * request.dim);
    for (size_t i = 0; i < batch->members.size(); ++i) {
      const std::vector<float>& q = batch->members[i]->search.queries;
      std::copy(q.begin(), q.end(), request.queries.begin() + batch->first_query[i] * request.dim);
    }
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory batching searches");
  } catch (const std::exception& e) {
    return absl::InternalError(std::string("batching searches: ") + e.what());
  }
  request.cancel = batch->token;
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

std::vector<std::vector<std::shared_ptr<SearchBatcher::Member>>> SearchBatcher::Finish(
    const std::shared_ptr<Batch>& batch, absl::StatusOr<std::vector<QueryResult>> results) {
  std::vector<Answer> answers;
  std::vector<size_t> firsts;
  std::vector<std::vector<std::shared_ptr<Member>>> next;
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < batch->members.size(); ++i) {
      Member& m = *batch->members[i];
      if (m.state == Member::State::kAnswered) continue;
      const bool stopped = m.state == Member::State::kStopped;
      m.state = Member::State::kAnswered;
      answers.push_back({std::move(m.search.done), std::vector<QueryResult>{}});
      if (stopped) answers.back().result = StoppedStatus(*m.search.cancel);
      firsts.push_back(stopped ? SIZE_MAX : i);
    }
    --running_;
    while (running_ < std::max<size_t>(1, options_.max_running) && waiting_ > 0) {
      next.push_back(TakeBatchLocked());
      ++running_;
    }
  }
  // Each member's slice of the results (or the batch's error, or its own stop).
  for (size_t a = 0; a < answers.size(); ++a) {
    const size_t i = firsts[a];
    if (i == SIZE_MAX) continue;  // stopped inside the batch: its status is set
    const Member& m = *batch->members[i];
    if (!results.ok()) {
      answers[a].result = results.status();
    } else if (absl::Status s = m.search.cancel->Check(); !s.ok()) {
      answers[a].result = std::move(s);
    } else {
      auto begin = results->begin() + ptrdiff_t(batch->first_query[i]);
      answers[a].result = std::vector<QueryResult>(
          std::make_move_iterator(begin),
          std::make_move_iterator(begin + ptrdiff_t(m.search.num_queries)));
    }
  }
  Deliver(answers);
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
