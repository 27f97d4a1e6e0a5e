#include "storage/sched/io_scheduler.h"

#include <fcntl.h>
#include <unistd.h>

#include <cassert>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace shoal::storage {
namespace {

uint64_t Micros(IoClock::duration d) {
  return uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(d).count());
}

}  // namespace

struct IoScheduler::Pending {
  ReadRequest request;
  ReadCallback callback;
  IoClock::time_point enqueued;
  IoClock::time_point submitted;
  bool in_flight = false;
  bool cancelled = false;
};

absl::StatusOr<std::unique_ptr<IoScheduler>> IoScheduler::Create(IoSchedulerOptions options) {
  std::unique_ptr<IoScheduler> s(new IoScheduler(options));
  IoCallback on_complete = [raw = s.get()](IoResult r) { raw->OnComplete(std::move(r)); };
  auto backend = options.make_backend ? options.make_backend(std::move(on_complete))
                                      : NewIoBackend(options.backend, std::move(on_complete),
                                                     options.limits.max_requests_in_flight);
  if (!backend.ok()) return backend.status();
  s->backend_ = *std::move(backend);
  return s;
}

IoScheduler::IoScheduler(IoSchedulerOptions options)
    : options_(options), pool_(std::make_shared<BufferPool>()), policy_(options.limits) {}

IoScheduler::~IoScheduler() {
  std::vector<ReadCallback> cancelled;
  {
    absl::MutexLock lock(&mu_);
    // From here nothing is dispatched, so no completion submits more reads.
    closing_ = true;
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second->in_flight) {
        it->second->cancelled = true;
        ++it;
        continue;
      }
      policy_.Cancel(it->first);
      cancelled.push_back(std::move(it->second->callback));
      it = pending_.erase(it);
    }
  }
  for (ReadCallback& cb : cancelled) std::move(cb)(absl::CancelledError("I/O scheduler closing"));
  {
    // A completion that dispatched before closing_ may still be inside backend_->Submit() (or
    // about to enter it): the backend must outlive that call. (ASan: a uring completion thread
    // called Submit on backend_ as reset() below cleared it.)
    bool submitters;  // closing_ is set: their number only goes down
    {
      absl::MutexLock lock(&mu_);
      submitters = !NoSubmitters();
    }
    if (submitters && options_.on_close_waiting_for_submit) options_.on_close_waiting_for_submit();
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &IoScheduler::NoSubmitters));
  }
  backend_.reset();  // waits for reads in flight; their callbacks run and submit nothing
  absl::MutexLock lock(&mu_);
  for (auto& [id, file] : files_) ::close(file.fd);
}

absl::StatusOr<uint64_t> IoScheduler::OpenFile(const std::string& path, ReadMode mode) {
  int fd = -1;
  bool direct = false;
  if (options_.direct_io && mode == ReadMode::kDirect) {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    direct = fd >= 0;
    if (fd < 0 && errno != EINVAL) {
      return absl::NotFoundError(absl::StrCat("open ", path, ": ", std::strerror(errno)));
    }
  }
  if (fd < 0) {  // the filesystem refuses O_DIRECT (tmpfs, some overlays): buffered reads
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return absl::NotFoundError(absl::StrCat("open ", path, ": ", std::strerror(errno)));
  }
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_file_++;
  files_[id] = {fd, direct};
  return id;
}

void IoScheduler::CloseFile(uint64_t file) {
  absl::MutexLock lock(&mu_);
  auto it = files_.find(file);
  if (it == files_.end()) return;
  ::close(it->second.fd);
  files_.erase(it);
}

bool IoScheduler::is_direct(uint64_t file) const {
  absl::MutexLock lock(&mu_);
  auto it = files_.find(file);
  return it != files_.end() && it->second.direct;
}

int& IoScheduler::PlugDepth() {
  // Per thread: the schedulers it has plugged and how deeply (a thread rarely plugs more than
  // one, so a short vector).
  thread_local std::vector<std::pair<const IoScheduler*, int>> plugs;
  for (auto& [scheduler, depth] : plugs) {
    if (scheduler == this) return depth;
  }
  for (auto& entry : plugs) {
    if (entry.second == 0) {
      entry.first = this;
      return entry.second;
    }
  }
  plugs.emplace_back(this, 0);
  return plugs.back().second;
}

void IoScheduler::Plug() { ++PlugDepth(); }

void IoScheduler::Unplug() {
  int& depth = PlugDepth();
  assert(depth > 0 && "Unplug() without Plug()");
  if (depth <= 0 || --depth > 0) return;
  std::vector<IoRead> reads;
  std::vector<std::function<void()>> answers;
  {
    absl::MutexLock lock(&mu_);
    DispatchLocked(&reads, &answers);
  }
  if (!reads.empty()) Submit(std::move(reads));
  for (auto& answer : answers) answer();
}

uint64_t IoScheduler::Read(const ReadRequest& request, ReadCallback callback) {
  std::vector<IoRead> reads;
  std::vector<std::function<void()>> answers;
  uint64_t id;
  const bool plugged = PlugDepth() > 0;
  {
    absl::MutexLock lock(&mu_);
    id = next_id_++;
    if (!files_.count(request.file)) {
      auto cb = std::make_shared<ReadCallback>(std::move(callback));
      answers.push_back(
          [cb] { std::move (*cb)(absl::InvalidArgumentError("unknown file handle")); });
    } else {
      auto p = std::make_unique<Pending>();
      p->request = request;
      p->callback = std::move(callback);
      p->enqueued = IoClock::now();
      pending_[id] = std::move(p);
      policy_.Enqueue({id, request.file, request.offset, request.length, request.query,
                       request.rank, request.deadline});
      // A completion is coming when a read is in flight: it dispatches this one too.
      const bool deferred = request.dispatch_on_completion && !flights_.empty();
      if (!plugged && !deferred) DispatchLocked(&reads, &answers);
    }
  }
  if (!reads.empty()) Submit(std::move(reads));
  for (auto& answer : answers) answer();
  return id;
}

void IoScheduler::Submit(std::vector<IoRead> reads) {
  backend_->Submit(std::move(reads));
  absl::MutexLock lock(&mu_);
  --submitting_;
}

void IoScheduler::Cancel(uint64_t id) {
  ReadCallback callback;
  {
    absl::MutexLock lock(&mu_);
    auto it = pending_.find(id);
    if (it == pending_.end()) return;
    if (it->second->in_flight) {
      it->second->cancelled = true;
      return;
    }
    policy_.Cancel(id);
    callback = std::move(it->second->callback);
    pending_.erase(it);
    ++stats_.cancelled;
  }
  std::move(callback)(absl::CancelledError("read cancelled"));
}

void IoScheduler::CancelQuery(uint64_t query) {
  std::vector<ReadCallback> cancelled;
  std::vector<IoRead> reads;
  std::vector<std::function<void()>> answers;
  {
    absl::MutexLock lock(&mu_);
    for (uint64_t id : policy_.CancelQuery(query)) {
      auto node = pending_.extract(id);
      cancelled.push_back(std::move(node.mapped()->callback));
      ++stats_.cancelled;
    }
    // The oldest query may have changed: its next read may now start over budget (I-4).
    if (!cancelled.empty()) DispatchLocked(&reads, &answers);
  }
  if (!reads.empty()) Submit(std::move(reads));
  for (ReadCallback& cb : cancelled) {
    std::move(cb)(absl::CancelledError("read cancelled: its query stopped"));
  }
  for (auto& answer : answers) answer();
}

void IoScheduler::DispatchLocked(std::vector<IoRead>* reads,
                                 std::vector<std::function<void()>>* answers) {
  if (closing_) return;
  const IoClock::time_point now = IoClock::now();
  std::vector<IoRequest> expired;
  std::vector<IoSubmission> subs = policy_.Dispatch(now, &expired);
  for (const IoRequest& r : expired) {
    auto node = pending_.extract(r.id);
    ++stats_.expired;
    auto cb = std::make_shared<ReadCallback>(std::move(node.mapped()->callback));
    answers->push_back([cb] {
      std::move (*cb)(absl::DeadlineExceededError("read expired before it was issued"));
    });
  }
  for (IoSubmission& sub : subs) {
    const File& file = files_.at(sub.file);
    const uint64_t begin = file.direct ? AlignDown(sub.offset) : sub.offset;
    const uint64_t end = file.direct ? AlignUp(sub.offset + sub.length) : sub.offset + sub.length;
    std::shared_ptr<AlignedBuffer> buffer;
    if (sub.requests.size() == 1) {
      // One read: exactly its aligned bytes, so a caller that keeps them (the partition cache)
      // can hold this buffer as it is instead of copying out of a larger pooled one.
      buffer = std::make_shared<AlignedBuffer>(AlignUp(end - begin));
    } else {
      std::shared_ptr<BufferPool> pool = pool_;
      buffer = std::shared_ptr<AlignedBuffer>(new AlignedBuffer(pool_->Get(end - begin)),
                                              [pool](AlignedBuffer* b) {
                                                pool->Put(std::move(*b));
                                                delete b;
                                              });
    }
    for (const IoRequest& r : sub.requests) {
      Pending& p = *pending_.at(r.id);
      p.in_flight = true;
      p.submitted = now;
    }
    reads->push_back({file.fd, begin, uint32_t(end - begin), buffer->data(), sub.id});
    ++stats_.submissions;
    flights_.emplace(sub.id, Flight{std::move(sub), std::move(buffer), begin, now});
  }
  if (!reads->empty()) ++submitting_;
}

void IoScheduler::OnComplete(IoResult result) {
  std::vector<IoRead> reads;
  std::vector<std::function<void()>> answers;
  {
    absl::MutexLock lock(&mu_);
    auto node = flights_.extract(result.tag);
    Flight& flight = node.mapped();
    policy_.Complete(result.tag);
    stats_.bytes_read += result.bytes;
    stats_.kernel_us += result.kernel_us;
    std::shared_ptr<const AlignedBuffer> buffer = flight.buffer;
    for (const IoRequest& r : flight.submission.requests) {
      auto p = std::move(pending_.extract(r.id).mapped());
      auto cb = std::make_shared<ReadCallback>(std::move(p->callback));
      absl::StatusOr<ReadResult> answer;
      const uint64_t rel = r.offset - flight.aligned_offset;
      if (p->cancelled) {
        ++stats_.cancelled;
        answer = absl::CancelledError("read cancelled");
      } else if (!result.status.ok()) {
        ++stats_.errors;
        answer = result.status;
      } else if (rel + r.length > result.bytes) {
        ++stats_.errors;
        answer = absl::OutOfRangeError(absl::StrCat("read of ", r.length, " bytes at offset ",
                                                    r.offset, " goes past the end of the file"));
      } else {
        ++stats_.reads;
        answer = ReadResult{buffer, buffer->data() + rel, r.length,
                            Micros(p->submitted - p->enqueued), result.kernel_us};
      }
      answers.push_back(
          [cb, answer = std::move(answer)]() mutable { std::move (*cb)(std::move(answer)); });
    }
    DispatchLocked(&reads, &answers);
  }
  if (!reads.empty()) Submit(std::move(reads));
  for (auto& answer : answers) answer();
}

IoSchedulerStats IoScheduler::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

size_t IoScheduler::pending() const {
  absl::MutexLock lock(&mu_);
  return pending_.size();
}

size_t IoScheduler::queued() const {
  absl::MutexLock lock(&mu_);
  return policy_.queued();
}

}  // namespace shoal::storage
