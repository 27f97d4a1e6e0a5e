// SearchBatcher: dynamic batching across requests (issue #23). Searches that arrive while the
// engine is busy wait here; when a batch answers, the waiting searches of one group (the same
// collection, k, nprobe and refine factor) are merged into one engine request — one routing
// sgemm instead of one pass over the centroids per request, one plan in which a partition that
// several of them probe is fetched and scanned once, one set of tasks — and each search gets
// its own queries' results. While fewer than `max_running` batches are in the engine a search
// starts at once, alone: batching never makes an idle server wait. A batch that waits for the
// disk (IvfSearchRequest::on_io_wait) stops counting against `max_running`, so searches the
// cache can answer are not held behind one that waits for reads.
//
// A batch's engine request is built when it is dispatched (Search::prepare, e.g. a collection
// snapshot), which is after every member arrived: each member sees every write acknowledged
// before it was sent, as it would alone.
//
// Stopping: a member whose token is cancelled while it waits leaves the queue and answers at
// once. One cancelled inside a batch answers when the batch answers, with its CANCELLED (the
// engine may be using its queries until then, so its request's slots stay held, and a server
// that waits for every RPC before it frees the engine's cache and I/O scheduler never frees them
// under a running batch), and the batch is cancelled once every member has stopped. A member
// whose deadline passes answers DEADLINE_EXCEEDED: at once if it is still waiting when its
// batch starts, else when the batch answers; a batch runs to its latest member's deadline at
// most. (A gRPC deadline also cancels the call's token, which stops a waiting member at once.)
//
// Thread-safety: thread-safe. `done` callbacks run without the batcher's mutex, on the thread
// that answered (the engine's, or the cancelling thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "core/index/ivf_search.h"

namespace shoal::core {

// Searches with equal keys may share a batch. `owner` identifies what is searched (a
// collection); it must stay unique while a search with it waits (the search's prepare holds it).
struct BatchKey {
  const void* owner = nullptr;
  size_t k = 0;
  uint32_t nprobe = 0;
  uint32_t refine_factor = 0;
  std::string filter;  // the filter's text: searches with different filters batch apart
  friend bool operator==(const BatchKey&, const BatchKey&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const BatchKey& key) {
    return H::combine(std::move(h), key.owner, key.k, key.nprobe, key.refine_factor, key.filter);
  }
};

class SearchBatcher : public std::enable_shared_from_this<SearchBatcher> {
 public:
  // The engine: IvfSearch on an executor, or a fake in tests. It calls done once, later (never
  // when it throws).
  using Engine = std::function<void(IvfSearchRequest, SearchDone)>;

  struct Options {
    size_t max_running = 1;          // batches in the engine at once (at least 1)
    size_t max_batch_queries = 256;  // queries merged into one batch (a bigger search runs alone)
    // Called for every batch dispatched with its searches and queries.
    std::function<void(size_t searches, size_t queries)> observe_batch;
    // Runs `start` later on the engine's executor. A heavy prepare (a filter's evaluation) is
    // CPU work for the arena (I-2), not for the thread that submitted the search (a gRPC
    // reactor), and no prepare runs on a thread that reported an I/O wait (an I/O or
    // cancelling thread). Empty: at once, on that thread (tests). Batches that start when one
    // answers are prepared inline: the engine answers on its executor.
    std::function<void(std::function<void()> start)> run_later;
  };

  struct Search {
    BatchKey key;
    // The engine request of a batch of this key, without queries and token: built at dispatch,
    // from the first member of the batch. Equal keys must prepare equivalent requests.
    std::function<IvfSearchRequest()> prepare;
    // prepare does real CPU work (a filter's evaluation): a search that starts at once is then
    // prepared through Options::run_later, not on the submitting thread.
    bool heavy_prepare = false;
    std::vector<float> queries;  // num_queries x the request's dim (cosine: normalised)
    size_t num_queries = 0;
    std::shared_ptr<const CancelToken> cancel;  // not null
    SearchDone done;                            // runs once
  };

  // REQUIRES: owned by a shared_ptr (batches and cancellation callbacks refer to it).
  SearchBatcher(Engine engine, Options options);
  SearchBatcher(const SearchBatcher&) = delete;
  SearchBatcher& operator=(const SearchBatcher&) = delete;

  void Submit(Search search);

  // Searches waiting for a batch (for tests and metrics).
  size_t waiting() const;

 private:
  struct Member;
  struct Batch;

  using Batches = std::vector<std::vector<std::shared_ptr<Member>>>;

  // REQUIRES: mu_ held. Takes the next batch off the queues: the group of the oldest waiting
  // member, in arrival order, up to max_batch_queries (always at least one member).
  std::vector<std::shared_ptr<Member>> TakeBatchLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // REQUIRES: mu_ held. Takes batches into `next` (each with one of running_) while slots are
  // free, at most next->capacity() in all: the caller reserves it before taking the lock.
  void TakeBatchesLocked(Batches* next) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts each batch (each holds one of running_); one that cannot start is finished at once.
  void DispatchAll(Batches batches);
  // DispatchAll through options_.run_later (inline when it is empty or throws).
  void DispatchLater(Batches batches);
  // Builds `batch` from `members` and hands it to the engine; not OK: it did not start (no
  // member left, or building it failed) and the caller finishes it with that status.
  absl::Status Start(const std::shared_ptr<Batch>& batch,
                     std::vector<std::shared_ptr<Member>> members);
  // The engine request of a started batch: the members' queries, its token, and on_io_wait.
  IvfSearchRequest BuildRequest(const std::shared_ptr<Batch>& batch, size_t total_queries);
  // Answers members that hold one of running_ but have no Batch (its allocation failed) with
  // `status`, frees their slot and dispatches what may start.
  void FailUnstarted(absl::Span<const std::shared_ptr<Member>> members, const absl::Status& status);
  // The batch waits for the disk: it gives up its slot (once) and returns what may now start.
  Batches ReleaseSlot(Batch& batch);
  // Answers every member of `batch` not answered yet, frees its slot if it still holds one, and
  // returns the batches that now may start.
  Batches Finish(const std::shared_ptr<Batch>& batch,
                 absl::StatusOr<std::vector<QueryResult>> results);
  void OnMemberCancelled(const std::shared_ptr<Member>& member);

  const Engine engine_;
  const Options options_;
  mutable absl::Mutex mu_;
  size_t running_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  size_t waiting_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<BatchKey, std::deque<std::shared_ptr<Member>>> queues_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shoal::core
