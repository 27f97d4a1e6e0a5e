#include "storage/sched/io_scheduler.h"

#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "tests/fakes/held_io_backend.h"
#include "tests/fakes/io_backend_skip.h"
#include "tests/fakes/recording_io_backend.h"
#include "tests/fakes/temp_dir.h"
#include "tests/fakes/watchdog.h"

namespace shoal::storage::io_scheduler_test {
namespace {

std::string MakeFile(const std::string& path, size_t size, uint32_t seed = 1) {
  std::string data(size, '\0');
  std::mt19937 rng(seed);
  for (char& c : data) c = char(rng());
  std::ofstream(path, std::ios::binary).write(data.data(), std::streamsize(size));
  return data;
}

// Counts answers and lets the test wait for all of them.
struct Answers {
  absl::Mutex mu;
  int count ABSL_GUARDED_BY(mu) = 0;
  void Done() {
    absl::MutexLock lock(&mu);
    ++count;
  }
  void WaitFor(int n) {
    absl::MutexLock lock(&mu);
    auto enough = [this, n]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return count >= n; };
    mu.Await(absl::Condition(&enough));
  }
};

class IoSchedulerTest : public ::testing::TestWithParam<IoBackendKind> {
 protected:
  // Null when the scheduler could not be made; create_status_ says why.
  std::unique_ptr<IoScheduler> Make(IoLimits limits = {}) {
    auto s = IoScheduler::Create({limits, GetParam(), true});
    create_status_ = s.status();
    if (!s.ok()) return nullptr;
    return *std::move(s);
  }
  // A scheduler whose completions wait in `held` until the test releases them. Its destructor
  // sets held_state_->owner_waits when it waits for a Submit().
  std::unique_ptr<IoScheduler> MakeHeld(IoLimits limits, testing::HeldIoBackend** held) {
    IoSchedulerOptions options;
    options.limits = limits;
    options.on_close_waiting_for_submit = [state = held_state_] {
      absl::MutexLock lock(&state->mu);
      state->owner_waits = true;
    };
    options.make_backend = [&](IoCallback cb) -> absl::StatusOr<std::unique_ptr<IoBackend>> {
      auto backend = testing::HeldIoBackend::Make(GetParam(), std::move(cb), held_state_);
      if (backend.ok()) *held = static_cast<testing::HeldIoBackend*>(backend->get());
      return backend;
    };
    auto s = IoScheduler::Create(options);
    create_status_ = s.status();
    if (!s.ok()) return nullptr;
    return *std::move(s);
  }
  absl::Status create_status_;
  std::shared_ptr<testing::HeldIoBackend::State> held_state_ =
      std::make_shared<testing::HeldIoBackend::State>();
};

TEST_P(IoSchedulerTest, ReadsExactRangesThroughDirectIoAndCoalesces) {
  testing::TempDir dir;
  const std::string data = MakeFile(dir.Sub("f"), 1 << 20);
  auto s = Make({.max_requests_in_flight = 1, .max_bytes_in_flight = 1 << 30});
  SHOAL_SKIP_ONLY_IF_URING_REFUSED(GetParam(), create_status_);
  auto file = s->OpenFile(dir.Sub("f"));
  ASSERT_TRUE(file.ok());
  Answers answers;
  // Unaligned, adjacent ranges: widened to 4 KiB internally, coalesced while one read flies.
  const int n = 64;
  for (int i = 0; i < n; ++i) {
    const uint64_t offset = 1000 + uint64_t(i) * 3000;
    s->Read({*file, offset, 3000, 1, uint32_t(i)}, [&, offset](absl::StatusOr<ReadResult> r) {
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->size, 3000u);
      EXPECT_EQ(std::memcmp(r->data, data.data() + offset, 3000), 0) << offset;
      answers.Done();
    });
  }
  answers.WaitFor(n);
  const IoSchedulerStats stats = s->stats();
  EXPECT_EQ(stats.reads, uint64_t(n));
  EXPECT_LT(stats.submissions, uint64_t(n));  // coalesced
  EXPECT_GT(stats.kernel_us, 0u);             // O_DIRECT device reads: shoal_io_read_seconds_total
  EXPECT_EQ(s->pending(), 0u);
}

TEST_P(IoSchedulerTest, PluggedReadsWaitForUnplugAndReachTheBackendInOneSubmission) {
  testing::TempDir dir;
  const std::string data = MakeFile(dir.Sub("f"), 1 << 20);
  testing::RecordingIoBackend* recorder = nullptr;
  IoSchedulerOptions options;
  options.limits = {.max_requests_in_flight = 64, .max_bytes_in_flight = 1 << 30};
  options.make_backend = [&](IoCallback cb) -> absl::StatusOr<std::unique_ptr<IoBackend>> {
    auto real = NewIoBackend(GetParam(), std::move(cb), 64);
    if (!real.ok()) return real.status();
    auto recording = std::make_unique<testing::RecordingIoBackend>(*std::move(real));
    recorder = recording.get();
    return std::unique_ptr<IoBackend>(std::move(recording));
  };
  auto created = IoScheduler::Create(options);
  SHOAL_SKIP_ONLY_IF_URING_REFUSED(GetParam(), created.status());
  auto s = *std::move(created);
  auto file = s->OpenFile(dir.Sub("f"));
  ASSERT_TRUE(file.ok());
  Answers answers;
  // Eight reads 64 KiB apart (never adjacent), queued farthest rank first.
  s->Plug();
  s->Plug();  // nested: only the outer Unplug dispatches
  for (uint32_t i = 0; i < 8; ++i) {
    const uint64_t offset = uint64_t(7 - i) * (64 << 10);
    s->Read({*file, offset, 4096, 1, 7 - i}, [&, offset](absl::StatusOr<ReadResult> r) {
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(std::memcmp(r->data, data.data() + offset, 4096), 0) << offset;
      answers.Done();
    });
  }
  s->Unplug();
  EXPECT_TRUE(recorder->submissions().empty());
  EXPECT_EQ(s->queued(), 8u);
  s->Unplug();
  const auto submissions = recorder->submissions();
  ASSERT_EQ(submissions.size(), 1u);
  std::vector<uint64_t> nearest_first;
  for (uint64_t i = 0; i < 8; ++i) nearest_first.push_back(i * (64 << 10));
  EXPECT_EQ(submissions[0], nearest_first);
  answers.WaitFor(8);
  // Not plugged: a read goes out at once, on its own.
  s->Read({*file, 0, 4096, 2, 0}, [&](absl::StatusOr<ReadResult> r) {
    EXPECT_TRUE(r.ok());
    answers.Done();
  });
  EXPECT_EQ(recorder->submissions().size(), 2u);
  answers.WaitFor(9);
  // A scope left by an exception unplugs too: the next read still goes out at once.
  try {
    IoScheduler::ScopedPlug plug(s.get());
    throw std::runtime_error("a fetch threw while plugged");
  } catch (const std::runtime_error&) {
  }
  s->Read({*file, 0, 4096, 3, 0}, [&](absl::StatusOr<ReadResult> r) {
    EXPECT_TRUE(r.ok());
    answers.Done();
  });
  EXPECT_EQ(recorder->submissions().size(), 3u);
  answers.WaitFor(10);
}

TEST_P(IoSchedulerTest, AReadSubmittedAloneLandsInABufferOfExactlyItsAlignedSize) {
  // The partition cache holds such a buffer as it is; a pooled power-of-two buffer (or a
  // coalesced one) it would have to copy out of.
  testing::TempDir dir;
  MakeFile(dir.Sub("f"), 1 << 20);
  auto s = Make();
  SHOAL_SKIP_ONLY_IF_URING_REFUSED(GetParam(), create_status_);
  auto file = s->OpenFile(dir.Sub("f"));
  ASSERT_TRUE(file.ok());
  Answers answers;
  s->Read({*file, 8192, 150000, 1, 0}, [&](absl::StatusOr<ReadResult> r) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->buffer->capacity(), AlignUp(150000));
    answers.Done();
  });
  answers.WaitFor(1);
}

TEST_P(IoSchedulerTest, BufferedFilesBypassDirectIo) {
  testing::TempDir dir;
  const std::string data = MakeFile(dir.Sub("f"), 64 << 10);
  auto s = Make();
  SHOAL_SKIP_ONLY_IF_URING_REFUSED(GetParam(), create_status_);
  auto buffered = s->OpenFile(dir.Sub("f"), ReadMode::kBuffered);
  ASSERT_TRUE(buffered.ok());
  EXPECT_FALSE(s->is_direct(*buffered));
  Answers answers;
  s->Read({*buffered, 5, 100, 1, 0}, [&](absl::StatusOr<ReadResult> r) {
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->size, 100u);
    EXPECT_EQ(std::memcmp(r->data, data.data() + 5, 100), 0);
    answers.Done();
  });
  answers.WaitFor(1);
}

TEST_P(IoSchedulerTest, TenThousandConcurrentReadsWithRandomCancellation) {
  testing::Watchdog watchdog(std::chrono::seconds(180), "10000 reads");
  testing::TempDir dir;
  const std::string data = MakeFile(dir.Sub("f"), 4 << 20);
  auto s = Make({.max_requests_in_flight = 32, .max_bytes_in_flight = 1 << 20});
  SHOAL_SKIP_ONLY_IF_URING_REFUSED(GetParam(), create_status_);
  auto file = s->OpenFile(dir.Sub("f"));
  ASSERT_TRUE(file.ok());
  Answers answers;
  std::atomic<int> ok{0}, cancelled{0}, other{0};
  std::mt19937 rng(9);
  std::vector<uint64_t> ids;
  for (int i = 0; i < 10000; ++i) {
    const uint32_t length = 1 + rng() % 65536;
    const uint64_t offset = rng() % (data.size() - length);
    ids.push_back(s->Read({*file, offset, length, uint64_t(i % 97), uint32_t(i % 7)},
                          [&, offset, length](absl::StatusOr<ReadResult> r) {
                            if (r.ok()) {
                              if (r->size == length &&
                                  std::memcmp(r->data, data.data() + offset, length) == 0) {
                                ok++;
                              } else {
                                other++;
                              }
                            } else if (absl::IsCancelled(r.status())) {
                              cancelled++;
                            } else {
                              other++;
                            }
                            answers.Done();
                          }));
    if (rng() % 4 == 0) s->Cancel(ids[rng() % ids.size()]);
  }
  answers.WaitFor(10000);
  EXPECT_EQ(ok + cancelled, 10000);
  EXPECT_EQ(other.load(), 0);
  EXPECT_GT(cancelled.load(), 0);
  EXPECT_EQ(s->pending(), 0u);
  EXPECT_EQ(s->stats().cancelled, uint64_t(cancelled.load()));
}

TEST_P(IoSchedulerTest, ExpiredPastEndAndUnknownFileReadsFailClearly) {
  testing::TempDir dir;
  MakeFile(dir.Sub("f"), 10000);
  auto s = Make();
  SHOAL_SKIP_ONLY_IF_URING_REFUSED(GetParam(), create_status_);
  auto file = s->OpenFile(dir.Sub("f"));
  ASSERT_TRUE(file.ok());
  Answers answers;
  absl::Status expired, past_end, unknown;
  s->Read({*file, 0, 100, 1, 0, IoClock::now() - std::chrono::seconds(1)},
          [&](absl::StatusOr<ReadResult> r) {
            expired = r.status();
            answers.Done();
          });
  s->Read({*file, 9000, 4000, 1, 0}, [&](absl::StatusOr<ReadResult> r) {
    past_end = r.status();
    answers.Done();
  });
  s->Read({999, 0, 10, 1, 0}, [&](absl::StatusOr<ReadResult> r) {
    unknown = r.status();
    answers.Done();
  });
  answers.WaitFor(3);
  EXPECT_EQ(expired.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(past_end.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(s->OpenFile(dir.Sub("missing")).ok());
}

// Completions are held until the backend is destroyed, so the outcome is exact: queued reads
// are answered CANCELLED by the destructor, reads in flight when it starts are answered
// CANCELLED when their completions arrive during the backend's destruction.
TEST_P(IoSchedulerTest, DestructionAnswersQueuedReadsWithCancelled) {
  testing::Watchdog watchdog(std::chrono::seconds(60), "scheduler destruction");
  testing::TempDir dir;
  MakeFile(dir.Sub("f"), 1 << 20);
  testing::HeldIoBackend* held = nullptr;
  auto s = MakeHeld({.max_requests_in_flight = 1, .max_bytes_in_flight = 4096}, &held);
  SHOAL_SKIP_ONLY_IF_URING_REFUSED(GetParam(), create_status_);
  auto file = s->OpenFile(dir.Sub("f"));
  ASSERT_TRUE(file.ok());
  std::atomic<int> answered{0}, cancelled{0};
  for (int i = 0; i < 200; ++i) {
    s->Read({*file, uint64_t(i) * 5000, 4096, uint64_t(i), 0}, [&](absl::StatusOr<ReadResult> r) {
      if (absl::IsCancelled(r.status())) cancelled++;
      answered++;
    });
  }
  const size_t in_flight = s->pending() - s->queued();
  ASSERT_GE(in_flight, 1u);
  held->WaitHeld(in_flight);  // the kernel is done with them; the scheduler does not know yet
  s.reset();
  EXPECT_EQ(answered.load(), 200);
  EXPECT_EQ(cancelled.load(), 200);
  EXPECT_EQ(held_state_->late_calls.load(), 0);
}

// The CI failure (ASan, Uring): a completion dispatched the next read, released the lock, and
// called backend_->Submit while the destructor was resetting backend_. Here the completion is
// stopped inside Submit, the destructor runs meanwhile; the backend must not be destroyed until
// that Submit has returned, and no read is submitted after destruction began.
TEST_P(IoSchedulerTest, ACompletionSubmittingDuringDestructionFinishesBeforeTheBackendGoes) {
  testing::Watchdog watchdog(std::chrono::seconds(60), "completion racing destruction");
  testing::TempDir dir;
  MakeFile(dir.Sub("f"), 1 << 20);
  testing::HeldIoBackend* held = nullptr;
  auto s = MakeHeld({.max_requests_in_flight = 1, .max_bytes_in_flight = 1 << 20}, &held);
  SHOAL_SKIP_ONLY_IF_URING_REFUSED(GetParam(), create_status_);
  auto file = s->OpenFile(dir.Sub("f"));
  ASSERT_TRUE(file.ok());
  absl::Mutex mu;
  int ok = 0, cancelled = 0;
  bool third_cancelled = false;
  auto count = [&](absl::StatusOr<ReadResult> r) {
    absl::MutexLock lock(&mu);
    (r.ok() ? ok : cancelled)++;
  };
  // One query, gaps between the reads: one read in flight at a time, no coalescing.
  s->Read({*file, 0, 4096, 1, 0}, count);
  s->Read({*file, 8192, 4096, 1, 1}, count);
  s->Read({*file, 16384, 4096, 1, 2}, [&](absl::StatusOr<ReadResult> r) {
    absl::MutexLock lock(&mu);
    third_cancelled = absl::IsCancelled(r.status());
    ++cancelled;
  });
  ASSERT_EQ(s->queued(), 2u);
  held->WaitHeld(1);
  // The completion's Submit of the second read waits until the destructor has answered the
  // third (queued) read: the destructor is then past `closing_` and heading for the backend.
  // It then waits until the destructor has decided: a correct one says it waits for this
  // Submit (owner_waits), a broken one starts destroying the backend under it (flagged in
  // late_calls). Either way the outcome is fixed before the Submit goes on; no timing.
  held->GateNextSubmit([&, state = held_state_] {
    {
      absl::MutexLock lock(&mu);
      mu.Await(absl::Condition(&third_cancelled));
    }
    testing::HeldIoBackend::WaitForDestructionOrOwnerWaiting(state);
  });
  std::thread completion([&] { EXPECT_EQ(held->Release(1), 1); });
  held->WaitAtGate();
  std::thread destroy([&] { s.reset(); });
  destroy.join();
  completion.join();
  EXPECT_EQ(held_state_->late_calls.load(), 0);
  absl::MutexLock lock(&mu);
  EXPECT_TRUE(third_cancelled);
  EXPECT_EQ(ok, 1);
  EXPECT_EQ(ok + cancelled, 3);
}

// A stopped query's queued reads leave the queue at once, answered CANCELLED; reads of other
// queries and reads in flight are untouched.
TEST_P(IoSchedulerTest, CancelQueryAnswersItsQueuedReadsAndLeavesOthersAlone) {
  testing::Watchdog watchdog(std::chrono::seconds(60), "CancelQuery");
  testing::TempDir dir;
  MakeFile(dir.Sub("f"), 1 << 20);
  testing::HeldIoBackend* held = nullptr;
  auto s = MakeHeld({.max_requests_in_flight = 1, .max_bytes_in_flight = 1 << 20}, &held);
  SHOAL_SKIP_ONLY_IF_URING_REFUSED(GetParam(), create_status_);
  auto file = s->OpenFile(dir.Sub("f"));
  ASSERT_TRUE(file.ok());
  std::atomic<int> cancelled{0}, ok{0};
  auto count = [&](absl::StatusOr<ReadResult> r) {
    if (r.ok()) ok++;
    if (absl::IsCancelled(r.status())) cancelled++;
  };
  s->Read({*file, 0, 4096, 1, 0}, count);  // query 1: in flight
  for (uint32_t i = 1; i <= 10; ++i) s->Read({*file, i * 8192, 4096, 1, i}, count);
  for (uint32_t i = 0; i < 5; ++i) s->Read({*file, 200000 + i * 8192, 4096, 2, i}, count);
  ASSERT_EQ(s->pending(), 16u);
  s->CancelQuery(1);
  EXPECT_EQ(cancelled.load(), 10);
  EXPECT_EQ(s->pending(), 6u);  // query 1's read in flight and query 2's five
  EXPECT_LE(s->queued(), 5u);
  s->CancelQuery(1);  // nothing left: a no-op
  s->CancelQuery(42);
  EXPECT_EQ(cancelled.load(), 10);
  // Query 2 completes normally.
  while (ok.load() < 6) {
    held->WaitHeld(1);
    held->ReleaseAll();
  }
  EXPECT_EQ(s->pending(), 0u);
  EXPECT_EQ(s->stats().cancelled, 10u);
}

TEST_P(IoSchedulerTest, AReadLeftForTheNextCompletionIsSubmittedByItOrAtOnceWhenNoneFlies) {
  testing::Watchdog watchdog(std::chrono::seconds(60), "dispatch_on_completion");
  testing::TempDir dir;
  MakeFile(dir.Sub("f"), 1 << 20);
  testing::HeldIoBackend* held = nullptr;
  auto s = MakeHeld({}, &held);
  SHOAL_SKIP_ONLY_IF_URING_REFUSED(GetParam(), create_status_);
  auto file = s->OpenFile(dir.Sub("f"));
  ASSERT_TRUE(file.ok());
  std::atomic<int> ok{0};
  auto count = [&](absl::StatusOr<ReadResult> r) {
    if (r.ok()) ok++;
  };
  s->Read({*file, 0, 4096, 1, 0}, count);  // in flight
  ReadRequest later{*file, 65536, 4096, 2, 0};
  later.dispatch_on_completion = true;
  s->Read(later, count);
  EXPECT_EQ(s->queued(), 1u);  // not submitted by this thread: a completion is coming
  held->WaitHeld(1);
  EXPECT_EQ(held->Release(1), 1);  // that completion submits it, on the releasing thread
  EXPECT_EQ(s->queued(), 0u);
  held->WaitHeld(1);
  held->ReleaseAll();
  EXPECT_EQ(ok.load(), 2);
  // Nothing in flight: no completion would come, so it is submitted at once.
  later.query = 3;
  s->Read(later, count);
  EXPECT_EQ(s->queued(), 0u);
  held->WaitHeld(1);
  held->ReleaseAll();
  EXPECT_EQ(ok.load(), 3);
  EXPECT_EQ(s->pending(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Backends, IoSchedulerTest,
                         ::testing::Values(IoBackendKind::kPread, IoBackendKind::kUring),
                         [](const auto& info) {
                           return info.param == IoBackendKind::kUring ? "Uring" : "Pread";
                         });

}  // namespace
}  // namespace shoal::storage::io_scheduler_test

#include "tests/fakes/faulty_io_backend.h"

namespace shoal::storage::io_scheduler_test {
namespace {

// EIO and short reads injected under the scheduler: the affected reads fail clearly (INTERNAL
// with the errno text, OUT_OF_RANGE for a short read), every other read is intact, and nothing
// leaks or hangs.
TEST(IoSchedulerFaults, InjectedEioAndShortReadsFailOnlyTheReadsTheyHit) {
  testing::Watchdog watchdog(std::chrono::seconds(120), "faulty backend");
  testing::TempDir dir;
  const std::string data = MakeFile(dir.Sub("f"), 8 << 20);
  for (IoBackendKind kind : {IoBackendKind::kPread, IoBackendKind::kUring}) {
    IoSchedulerOptions options;
    options.limits = {.max_requests_in_flight = 8, .max_bytes_in_flight = 1 << 20};
    testing::FaultyIoBackend* faulty = nullptr;
    options.make_backend = [&](IoCallback cb) -> absl::StatusOr<std::unique_ptr<IoBackend>> {
      auto real = NewIoBackend(kind, cb, 8);
      if (!real.ok()) return real.status();
      auto wrapper = std::make_unique<testing::FaultyIoBackend>(*std::move(real), cb, 7, 11);
      faulty = wrapper.get();
      return std::unique_ptr<IoBackend>(std::move(wrapper));
    };
    auto s = IoScheduler::Create(options);
    if (!s.ok()) {  // only a ring may be refused (by the kernel); pread must work
      ASSERT_EQ(kind, IoBackendKind::kUring) << "the pread scheduler: " << s.status();
      continue;
    }
    auto file = (*s)->OpenFile(dir.Sub("f"));
    ASSERT_TRUE(file.ok());
    Answers answers;
    std::atomic<int> ok{0}, eio{0}, short_reads{0}, other{0};
    for (int i = 0; i < 500; ++i) {
      const uint64_t offset = uint64_t(i) * 8192;  // gaps: no coalescing, one read per request
      (*s)->Read({*file, offset, 4096, uint64_t(i), 0}, [&, offset](absl::StatusOr<ReadResult> r) {
        if (r.ok() && std::memcmp(r->data, data.data() + offset, 4096) == 0) {
          ok++;
        } else if (absl::IsInternal(r.status()) &&
                   r.status().message().find("Input/output error") != std::string::npos) {
          eio++;
        } else if (absl::IsOutOfRange(r.status())) {
          short_reads++;
        } else {
          other++;
        }
        answers.Done();
      });
    }
    answers.WaitFor(500);
    EXPECT_EQ(eio.load(), faulty->failed.load());
    EXPECT_EQ(short_reads.load(), faulty->shortened.load());
    EXPECT_GT(eio.load(), 0);
    EXPECT_GT(short_reads.load(), 0);
    EXPECT_EQ(other.load(), 0);
    EXPECT_EQ(ok + eio + short_reads, 500);
    EXPECT_EQ((*s)->pending(), 0u);
  }
}

}  // namespace
}  // namespace shoal::storage::io_scheduler_test
