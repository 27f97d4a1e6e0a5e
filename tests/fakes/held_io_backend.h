// HeldIoBackend: an IoBackend decorator for tests whose completions the test controls. Reads go
// to the real backend (io_uring or pread) unchanged, but each completion is held until the
// test releases it, on a thread the test chooses — so a completion racing the scheduler's
// destructor or a cancellation happens exactly when the test says.
//
// A Submit() can also be held at a gate (see GateSubmits) to stop a completion thread inside
// the backend while another thread acts. The decorator records any call that touches it after
// its destruction began (`late_calls`), which a correct scheduler never makes.
//
// Destruction: waits for any thread inside ReleaseAll() (as a real backend joins its completion
// thread), destroys the real backend (it waits for its reads), then delivers every held
// completion, as a real backend's destructor runs the callbacks of its reads.
//
// Thread-safety: as the wrapped backend; Release*/Wait* are thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <limits>
#include <memory>

#include "absl/synchronization/mutex.h"
#include "storage/io/io_backend.h"

namespace shoal::testing {

class HeldIoBackend final : public storage::IoBackend {
 public:
  struct State {
    absl::Mutex mu;
    std::deque<storage::IoResult> held ABSL_GUARDED_BY(mu);
    int submitted ABSL_GUARDED_BY(mu) = 0;  // reads handed to the real backend
    bool destroying ABSL_GUARDED_BY(mu) = false;
    // Gate: while set, Submit() waits in `gate` before passing reads on.
    std::function<void()> gate ABSL_GUARDED_BY(mu);
    int at_gate ABSL_GUARDED_BY(mu) = 0;
    int releasing ABSL_GUARDED_BY(mu) = 0;  // threads inside ReleaseAll()
    // Set by the test (IoSchedulerOptions::on_close_waiting_for_submit): the scheduler's
    // destructor waits for a Submit() held at the gate.
    bool owner_waits ABSL_GUARDED_BY(mu) = false;
    std::atomic<int> late_calls{0};
  };

  // Builds the real backend of `kind` with a callback that holds completions.
  static absl::StatusOr<std::unique_ptr<storage::IoBackend>> Make(storage::IoBackendKind kind,
                                                                  storage::IoCallback callback,
                                                                  std::shared_ptr<State> state) {
    auto real = storage::NewIoBackend(
        kind,
        [state](storage::IoResult r) {
          absl::MutexLock lock(&state->mu);
          state->held.push_back(std::move(r));
        },
        8);
    if (!real.ok()) return real.status();
    return std::unique_ptr<storage::IoBackend>(
        new HeldIoBackend(*std::move(real), std::move(callback), std::move(state)));
  }

  ~HeldIoBackend() override {
    {
      absl::MutexLock lock(&state_->mu);
      state_->destroying = true;
      if (state_->at_gate > 0) state_->late_calls++;  // destroyed under a running Submit
      // A real backend joins its completion thread; the test's releasing thread stands in.
      State* s = state_.get();
      auto idle = [s]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return s->releasing == 0; };
      state_->mu.Await(absl::Condition(&idle));
    }
    real_.reset();
    for (;;) {
      storage::IoResult r;
      {
        absl::MutexLock lock(&state_->mu);
        if (state_->held.empty()) break;
        r = std::move(state_->held.front());
        state_->held.pop_front();
      }
      callback_(std::move(r));
    }
  }

  void Submit(std::vector<storage::IoRead> reads) override {
    std::shared_ptr<State> state = state_;  // `this` must not be needed after the gate
    std::function<void()> gate;
    {
      absl::MutexLock lock(&state->mu);
      if (state->destroying) {
        state->late_calls++;
        return;
      }
      gate = std::move(state->gate);
      state->gate = nullptr;
      if (gate) ++state->at_gate;
    }
    if (gate) {
      gate();
      absl::MutexLock lock(&state->mu);
      --state->at_gate;
      if (state->destroying) {
        state->late_calls++;
        return;
      }
    }
    {
      absl::MutexLock lock(&state->mu);
      state->submitted += int(reads.size());
    }
    real_->Submit(std::move(reads));
  }
  std::string_view name() const override { return real_->name(); }

  // Blocks until `n` completions are held.
  void WaitHeld(size_t n) {
    State* s = state_.get();
    absl::MutexLock lock(&s->mu);
    auto enough = [s, n]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return s->held.size() >= n; };
    s->mu.Await(absl::Condition(&enough));
  }
  size_t held() const {
    absl::MutexLock lock(&state_->mu);
    return state_->held.size();
  }

  // Delivers every held completion on the calling thread; returns how many.
  int ReleaseAll() { return Release(std::numeric_limits<int>::max()); }

  // Delivers up to `max` held completions, oldest first, on the calling thread.
  int Release(int max) {
    {
      absl::MutexLock lock(&state_->mu);
      ++state_->releasing;
    }
    int n = 0;
    for (;;) {
      storage::IoResult r;
      {
        absl::MutexLock lock(&state_->mu);
        if (state_->held.empty() || n == max) {
          --state_->releasing;
          return n;
        }
        r = std::move(state_->held.front());
        state_->held.pop_front();
      }
      callback_(std::move(r));
      ++n;
    }
  }

  // The next Submit() runs `gate` (on its own thread) before passing its reads on.
  void GateNextSubmit(std::function<void()> gate) {
    absl::MutexLock lock(&state_->mu);
    state_->gate = std::move(gate);
  }
  // Blocks until either the backend's destruction began or `owner_waits` is set: what a gate
  // waits for to learn whether its owner waits for the gated Submit() (correct) or destroys
  // the backend under it (a bug, counted in late_calls). Only uses `state`, not the backend.
  static void WaitForDestructionOrOwnerWaiting(const std::shared_ptr<State>& state) {
    State* s = state.get();
    absl::MutexLock lock(&s->mu);
    auto decided = [s]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return s->destroying || s->owner_waits; };
    s->mu.Await(absl::Condition(&decided));
  }
  // Blocks until a Submit() is inside its gate.
  void WaitAtGate() {
    State* s = state_.get();
    absl::MutexLock lock(&s->mu);
    auto inside = [s]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return s->at_gate > 0; };
    s->mu.Await(absl::Condition(&inside));
  }

 private:
  HeldIoBackend(std::unique_ptr<storage::IoBackend> real, storage::IoCallback callback,
                std::shared_ptr<State> state)
      : real_(std::move(real)), callback_(std::move(callback)), state_(std::move(state)) {}

  std::unique_ptr<storage::IoBackend> real_;
  storage::IoCallback callback_;
  std::shared_ptr<State> state_;
};

}  // namespace shoal::testing
