#include "core/index/search_batcher.h"

#include <algorithm>
#include <exception>
#include <new>
#include <utility>

namespace shoal::core {

// A search's life: kWaiting in its key's queue, kRunning in a batch, kAnswered once its done
// has been taken (exactly one thread moves it to kAnswered and calls done).
struct SearchBatcher::Member {
  enum class State : uint8_t { kWaiting, kRunning, kAnswered };
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
  if (run_now) Dispatch({member});
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

void SearchBatcher::Dispatch(std::vector<std::shared_ptr<Member>> members) {
  auto batch = std::make_shared<Batch>();
  std::vector<Answer> answers;
  size_t total = 0;
  {
    // Members whose deadline passed while they waited answer now (a deadline calls no
    // OnCancel callback); the rest join the batch, which runs to the latest deadline.
    absl::MutexLock lock(&mu_);
    auto deadline = CancelToken::Clock::time_point::min();
    for (std::shared_ptr<Member>& m : members) {
      if (m->state == Member::State::kAnswered) continue;  // cancelled before this lock
      if (absl::Status s = m->search.cancel->Check(); !s.ok()) {
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
  if (batch->members.empty()) return OnBatchDone(batch, absl::CancelledError("no search left"));
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
    return OnBatchDone(batch, absl::ResourceExhaustedError("out of memory batching searches"));
  } catch (const std::exception& e) {
    return OnBatchDone(batch, absl::InternalError(std::string("batching searches: ") + e.what()));
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
  engine_(std::move(request),
          [self = shared_from_this(), batch](absl::StatusOr<std::vector<QueryResult>> results) {
            self->OnBatchDone(batch, std::move(results));
          });
}

void SearchBatcher::OnBatchDone(const std::shared_ptr<Batch>& batch,
                                absl::StatusOr<std::vector<QueryResult>> results) {
  std::vector<Answer> answers;
  std::vector<size_t> firsts;
  std::vector<std::vector<std::shared_ptr<Member>>> next;
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < batch->members.size(); ++i) {
      Member& m = *batch->members[i];
      if (m.state == Member::State::kAnswered) continue;
      m.state = Member::State::kAnswered;
      answers.push_back({std::move(m.search.done), std::vector<QueryResult>{}});
      firsts.push_back(i);
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
  for (auto& members : next) Dispatch(std::move(members));
}

void SearchBatcher::OnMemberCancelled(const std::shared_ptr<Member>& member) {
  std::shared_ptr<Batch> stop;
  {
    absl::MutexLock lock(&mu_);
    switch (member->state) {
      case Member::State::kAnswered:
        return;
      case Member::State::kWaiting: {
        auto it = queues_.find(member->search.key);
        if (it != queues_.end()) {
          auto& queue = it->second;
          queue.erase(std::remove(queue.begin(), queue.end(), member), queue.end());
          if (queue.empty()) queues_.erase(it);
        }
        --waiting_;
        break;
      }
      case Member::State::kRunning:
        if (auto batch = member->batch.lock(); batch && --batch->live == 0) stop = batch;
        break;
    }
    member->state = Member::State::kAnswered;
  }
  std::move(member->search.done)(StoppedStatus(*member->search.cancel));
  if (stop) stop->token->Cancel();
}

}  // namespace shoal::core
