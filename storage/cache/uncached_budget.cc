#include "storage/cache/uncached_budget.h"

#include <deque>
#include <iterator>

#include "absl/status/status.h"
#include "core/base/seeded_bug.h"

namespace shoal::storage {

// One grant's bytes; returns them when destroyed.
class UncachedBudget::Token {
 public:
  Token(UncachedBudget* budget, uint64_t query, uint64_t bytes, bool forced)
      : budget_(budget), query_(query), bytes_(bytes), forced_(forced) {}
  ~Token() { budget_->Release(query_, bytes_, forced_); }
  Token(const Token&) = delete;
  Token& operator=(const Token&) = delete;

 private:
  UncachedBudget* const budget_;
  const uint64_t query_, bytes_;
  const bool forced_;
};

UncachedBudget::~UncachedBudget() {
  std::vector<GrantDone> cancelled;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [key, w] : waiting_) cancelled.push_back(std::move(w.done));
    waiting_.clear();
  }
  for (GrantDone& done : cancelled) std::move(done)(absl::CancelledError("shutting down"));
}

void UncachedBudget::Acquire(uint64_t query, uint64_t bytes, GrantDone done) {
  Answers answers;
  {
    core::SeedableMutexLock lock(&mu_, "uncached_budget.acquire_unlocked");
    const std::pair<uint64_t, uint64_t> key(query, next_arrival_++);
    waiting_.emplace(key, Waiter{bytes, std::move(done)});
    GrantLocked(&answers);
    if (waiting_.contains(key)) ++stats_.waited;
    stats_.waiting = waiting_.size();
  }
  Run(std::move(answers));
}

void UncachedBudget::CancelQuery(uint64_t query) {
  std::vector<GrantDone> cancelled;
  Answers answers;
  {
    absl::MutexLock lock(&mu_);
    auto it = waiting_.lower_bound({query, 0});
    while (it != waiting_.end() && it->first.first == query) {
      cancelled.push_back(std::move(it->second.done));
      it = waiting_.erase(it);
    }
    if (cancelled.empty()) return;
    GrantLocked(&answers);  // the head may have changed
    stats_.waiting = waiting_.size();
  }
  for (GrantDone& done : cancelled) {
    std::move(done)(absl::CancelledError("uncached read cancelled: its query stopped"));
  }
  Run(std::move(answers));
}

void UncachedBudget::Release(uint64_t query, uint64_t bytes, bool forced) {
  Answers answers;
  {
    absl::MutexLock lock(&mu_);
    stats_.held_bytes -= bytes;
    if (bytes > 0) {
      auto it = held_by_query_.find(query);
      if ((it->second -= bytes) == 0) held_by_query_.erase(it);
    }
    if (forced) forced_out_ = false;
    GrantLocked(&answers);
    stats_.waiting = waiting_.size();
  }
  Run(std::move(answers));
}

void UncachedBudget::GrantLocked(Answers* out) {
  while (!waiting_.empty()) {
    auto head = waiting_.begin();
    const uint64_t query = head->first.first, bytes = head->second.bytes;
    bool forced = false;
    if (stats_.held_bytes + bytes > budget_) {
      // Past the budget: only the oldest query, holding nothing here, one read at a time.
      if (forced_out_ || held_by_query_.contains(query)) break;
      forced = true;
      forced_out_ = true;
      ++stats_.forced;
    }
    stats_.held_bytes += bytes;
    if (bytes > 0) held_by_query_[query] += bytes;  // a zero-byte grant holds nothing
    ++stats_.granted;
    // A zero-byte grant still carries a token: it releases nothing, but keeps the code uniform.
    out->emplace_back(std::move(head->second.done),
                      std::make_shared<const Token>(this, query, bytes, forced));
    waiting_.erase(head);
  }
}

// An answer often drops its grant before it returns (a cache hit after waiting, a cancelled
// token, a failed read), which releases bytes and grants the next waiter, whose answer does the
// same: run inline, that chain would recurse once per waiter. So answers run from one loop per
// thread: a Run inside an answer only queues them for the outermost Run on this thread.
void UncachedBudget::Run(Answers answers) {
  thread_local std::deque<std::pair<GrantDone, Grant>>* running = nullptr;
  if (running) {
    for (auto& answer : answers) running->push_back(std::move(answer));
    return;
  }
  std::deque<std::pair<GrantDone, Grant>> queue(std::make_move_iterator(answers.begin()),
                                                std::make_move_iterator(answers.end()));
  running = &queue;
  struct Reset {
    ~Reset() { running = nullptr; }
  } reset;
  while (!queue.empty()) {
    auto [done, grant] = std::move(queue.front());
    queue.pop_front();
    std::move(done)(std::move(grant));
  }
}

UncachedBudgetStats UncachedBudget::stats() const {
  absl::MutexLock lock(&mu_);
  UncachedBudgetStats s = stats_;
  s.budget = budget_;
  return s;
}

}  // namespace shoal::storage
