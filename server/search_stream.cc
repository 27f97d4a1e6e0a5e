// The SearchStream reactor: many searches over one bidirectional stream.
//
// Reading: one read at a time. Each message is parsed and handed to ShoalService::RunSearch
// (as a unary Search is, without the connection's per-peer share), and the next message is read
// while fewer than search.stream_max_inflight of the stream's searches are running or waiting
// to be written; past that the reactor stops reading and HTTP/2 flow control pushes back on the
// client.
//
// Answering: each search's answer — its results, or its error in SearchResponse.error — is
// serialised when it completes and queued; one write at a time, in completion order. A message
// that does not parse is answered with INVALID_ARGUMENT (tag 0: it has none) and the stream goes
// on.
//
// Metrics: the stream is method "SearchStream" (its own status, from open to close), and each
// message "SearchStream.Search" (the message's code, latency from its read to its answer).
//
// Deadlines and cancellation: a message's token expires at its timeout_ms or the call's
// deadline, whichever is first; the client cancelling the call cancels every running search.
//
// Ending: after the client half-closes, once every search has answered and every answer is
// written, the stream finishes OK. A stream refused at admission (authentication, shutdown)
// finishes with that status at once; one whose writes fail (the client went away) finishes
// once its running searches have answered, since they refer to the reactor.
//
// Locking: mu_ guards the state. RunSearch() and CancelToken::Cancel() are called without mu_
// (a search may answer inline, which takes mu_), and so is Finish(): after it gRPC may run
// OnDone() on another thread at once, and whichever of the two ends last deletes the reactor.
#include <chrono>
#include <deque>
#include <list>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/convert.h"
#include "server/reactor_lifetime.h"
#include "server/shoal_service.h"
#include "server/unary_reactor.h"

namespace shoal::server {
namespace {

class SearchStreamReactor final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  SearchStreamReactor(ShoalService* service, grpc::CallbackServerContext* ctx)
      : service_(service),
        call_token_(CancelTokenFor(*ctx)),
        max_inflight_(size_t(std::max(1, service->options().stream_max_inflight))),
        start_(std::chrono::steady_clock::now()) {
    service_->metrics()->RpcStarted();
    absl::Status admitted = service_->Admit(ctx);
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      if (!admitted.ok()) {
        error_ = admitted;
        input_done_ = true;
        finish = MaybeFinishLocked();
      } else {
        reading_ = true;
        StartRead(&raw_);
      }
    }
    if (finish) FinishStream(*finish);
  }

  void OnReadDone(bool ok) override {
    Message* message = nullptr;
    absl::Status parsed;
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      reading_ = false;
      if (!ok) {  // the client half-closed (or the call broke)
        input_done_ = true;
        finish = MaybeFinishLocked();
      } else {
        running_.emplace_back();
        message = &running_.back();
        message->self = std::prev(running_.end());
        parsed = ParseCatching(message);
        raw_.Clear();
        handing_over_ = true;  // the call cannot finish before this OnReadDone returns
      }
    }
    if (finish) return FinishStream(*finish);
    if (message == nullptr) return;
    if (!parsed.ok()) {
      OnSearchDone(message, parsed);
    } else {
      ShoalService::SearchCall call;
      call.req = &message->request;
      call.resp = &message->response;
      call.cancel = message->token;
      service_->RunSearch(std::move(call),
                          [this, message](absl::Status status) { OnSearchDone(message, status); });
    }
    {
      absl::MutexLock lock(&mu_);
      handing_over_ = false;
      MaybeReadNextLocked();
      finish = MaybeFinishLocked();
    }
    if (finish) FinishStream(*finish);
  }

  void OnWriteDone(bool ok) override {
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      writes_.pop_front();
      if (!ok) {  // the client is gone: stop reading, drop what is queued
        broken_ = true;
        writes_.clear();
      }
      MaybeWriteNextLocked();
      MaybeReadNextLocked();
      finish = MaybeFinishLocked();
    }
    if (finish) FinishStream(*finish);
  }

  // The client cancelled (or the call's deadline passed): every running search stops.
  void OnCancel() override {
    std::vector<std::shared_ptr<core::CancelToken>> tokens;
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      for (const Message& m : running_) tokens.push_back(m.token);
    }
    for (const auto& token : tokens) token->Cancel();
  }

  void OnDone() override {
    service_->metrics()->RpcDone();
    // gRPC runs OnDone after OnCancel, ordered inside libgrpc where TSan cannot see it: taking
    // mu_ (which OnCancel held) makes that order visible before the reactor may be deleted.
    { absl::MutexLock lock(&mu_); }
    if (lifetime_.Done()) delete this;
  }

 private:
  // Finish(), then delete this if OnDone() already ran (server/reactor_lifetime.h).
  void FinishStream(const grpc::Status& status) {
    if (lifetime_.Finished([&] { Finish(status); })) delete this;
  }

  // One search of the stream, from its read to its answer's serialisation.
  struct Message {
    v1::SearchRequest request;
    v1::SearchResponse response;
    std::shared_ptr<core::CancelToken> token;
    std::chrono::steady_clock::time_point read_at = std::chrono::steady_clock::now();
    std::list<Message>::iterator self;  // its place in running_
  };

  // Parses the message just read and sets its token; an exception (an allocation failure on a
  // huge message) is that message's error, not the stream's.
  absl::Status ParseCatching(Message* m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    try {
      absl::Status s = ParseRaw(raw_, &m->request);
      const uint32_t timeout_ms = s.ok() ? m->request.timeout_ms() : 0;
      auto deadline = call_token_->deadline();
      if (timeout_ms > 0) {
        deadline = std::min(
            deadline, core::CancelToken::Clock::now() + std::chrono::milliseconds(timeout_ms));
      }
      m->token = std::make_shared<core::CancelToken>(deadline);
      if (cancelled_) m->token->Cancel();  // no callbacks yet: nothing runs under mu_
      return s;
    } catch (const std::exception& e) {
      if (!m->token) m->token = std::make_shared<core::CancelToken>();
      return InternalErrorIn("SearchStream", e.what());
    }
  }

  // A search answered (any thread, possibly inline in RunSearch): its answer joins the queue.
  void OnSearchDone(Message* m, absl::Status status) {
    grpc::ByteBuffer wire;
    std::optional<absl::Status> broken_answer;
    try {
      if (!status.ok()) {
        const uint64_t tag = m->request.tag();
        m->response.Clear();
        m->response.set_tag(tag);
        m->response.mutable_error()->set_code(int(ToGrpc(status).error_code()));
        m->response.mutable_error()->set_message(std::string(status.message()));
      }
      bool own_buffer = false;
      grpc::Status s =
          grpc::SerializationTraits<v1::SearchResponse>::Serialize(m->response, &wire, &own_buffer);
      if (!s.ok())
        broken_answer = absl::InternalError("SearchStream: an answer does not serialise");
    } catch (const std::exception& e) {
      broken_answer = InternalErrorIn("SearchStream", e.what());
    }
    // Each message counts as method "SearchStream.Search": its code and latency from its read.
    service_->metrics()->ObserveRpc(
        "SearchStream.Search", int(status.code()),
        std::chrono::duration<double>(std::chrono::steady_clock::now() - m->read_at).count());
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      running_.erase(m->self);
      if (broken_answer) {
        if (error_.ok()) error_ = *broken_answer;
        input_done_ = true;
      } else if (!broken_) {
        writes_.push_back(std::move(wire));
        MaybeWriteNextLocked();
      }
      MaybeReadNextLocked();
      finish = MaybeFinishLocked();
    }
    if (finish) FinishStream(*finish);
  }

  void MaybeWriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || writes_.empty()) return;
    writing_ = true;
    StartWrite(&writes_.front());  // deque: the front stays put while more are queued
  }

  // One read at a time, and only while the stream holds fewer than max_inflight_ searches
  // (running or waiting to be written).
  void MaybeReadNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (input_done_ || reading_ || broken_ || cancelled_) return;
    if (running_.size() + writes_.size() >= max_inflight_) return;
    reading_ = true;
    StartRead(&raw_);
  }

  // The status to finish with, once: input done, no search running, every answer written.
  std::optional<grpc::Status> MaybeFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || reading_ || writing_ || handing_over_ || !running_.empty())
      return std::nullopt;
    if (!(input_done_ || broken_ || cancelled_)) return std::nullopt;
    if (!writes_.empty() && !broken_ && !cancelled_) return std::nullopt;
    finished_ = true;
    absl::Status status = error_;
    if (status.ok() && (broken_ || cancelled_)) status = absl::CancelledError("stream cancelled");
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    service_->metrics()->ObserveRpc("SearchStream", int(status.code()), seconds);
    return ToGrpc(status);
  }

  ShoalService* const service_;
  const std::shared_ptr<core::CancelToken> call_token_;  // the call's deadline
  const size_t max_inflight_;
  const std::chrono::steady_clock::time_point start_;

  ReactorLifetime lifetime_;
  absl::Mutex mu_;
  grpc::ByteBuffer raw_ ABSL_GUARDED_BY(mu_);                 // the message being read
  std::list<Message> running_ ABSL_GUARDED_BY(mu_);           // read, not yet answered
  std::deque<grpc::ByteBuffer> writes_ ABSL_GUARDED_BY(mu_);  // answers; front is being written
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  bool handing_over_ ABSL_GUARDED_BY(mu_) = false;  // OnReadDone is starting a search
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool input_done_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;  // a write failed
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);  // the stream's own failure
};

}  // namespace

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* ShoalService::SearchStream(
    grpc::CallbackServerContext* ctx) {
  return new SearchStreamReactor(this, ctx);
}

}  // namespace shoal::server
