// The UpsertStream reactor: bulk load over one client stream.
//
// Each message is validated and handed to the collection's WAL like a unary Upsert, in stream
// order (the next message is read only once this one is handed over). Up to
// kMaxOutstanding messages may wait for their group commit at once; past that the reactor
// stops reading (flow control reaches the client through HTTP/2) and resumes when a commit
// completes. The single response is sent when the client has half-closed and every message
// is durable, or at the first error.
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/convert.h"
#include "server/reactor_lifetime.h"
#include "server/shoal_service.h"
#include "server/unary_reactor.h"
#include "server/validation.h"
#include "storage/format/wal_format.h"

namespace shoal::server {
namespace {

constexpr int kMaxOutstanding = 4;

// Locking rule: mu_ guards the state, but Finish() and Collection::Upsert() are always called
// with mu_ released. After Finish() gRPC may run OnDone() on another thread at once (and
// whichever of the two ends last deletes the reactor), so nothing touches the reactor after calling
// it; and a WAL that refuses a write calls back inline, which must not find mu_ held.
class UpsertStreamReactor final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  UpsertStreamReactor(ShoalService* service, grpc::CallbackServerContext* ctx,
                      grpc::ByteBuffer* wire_response)
      : service_(service), wire_response_(wire_response), start_(std::chrono::steady_clock::now()) {
    service_->metrics()->RpcStarted();
    absl::Status admitted = service_->Admit(ctx);
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      if (!admitted.ok()) {
        FailLocked(admitted);
        finish = MaybeFinishLocked();
      } else {
        reading_ = true;
        StartRead(&raw_);
      }
    }
    if (finish) FinishStream(*finish);
  }

  void OnReadDone(bool ok) override {
    std::optional<grpc::Status> finish;
    std::shared_ptr<storage::Collection> target;
    std::vector<storage::PointRecord> records;
    {
      absl::MutexLock lock(&mu_);
      reading_ = false;
      if (!ok) {  // the client half-closed (or the call broke)
        input_done_ = true;
        finish = MaybeFinishLocked();
      } else if (error_.ok()) {
        absl::Status s = AcceptCatching(&records);
        if (!s.ok()) {
          FailLocked(s);
          finish = MaybeFinishLocked();
        } else {
          // Counted before the write is handed over, so the call cannot finish (and the
          // reactor cannot be deleted) until this write has reported back.
          ++outstanding_;
          ++message_index_;
          handing_over_ = true;
          target = collection_;
        }
      }
    }
    if (finish) {
      FinishStream(*finish);
      return;
    }
    if (target) HandOver(std::move(target), std::move(records));
  }

  void OnDone() override {
    service_->metrics()->RpcDone();
    if (lifetime_.Done()) delete this;
  }

 private:
  // Finish(), then delete this if OnDone() already ran (server/reactor_lifetime.h).
  void FinishStream(const grpc::Status& status) {
    if (lifetime_.Finished([&] { Finish(status); })) delete this;
  }

  // Accept(), then the message's WAL records; an exception (an allocation failure on a large
  // message) fails the stream with INTERNAL instead of reaching gRPC.
  absl::Status AcceptCatching(std::vector<storage::PointRecord>* records)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    try {
      absl::Status s = Accept();
      if (s.ok()) *records = ToPointRecords(request_);
      return s;
    } catch (const std::exception& e) {
      return InternalErrorIn("UpsertStream", e.what());
    }
  }

  // Parses and validates the message just read and binds the stream to its collection on the
  // first one.
  absl::Status Accept() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    request_.Clear();
    if (absl::Status parsed = ParseRaw(raw_, &request_); !parsed.ok()) {
      return absl::Status(parsed.code(),
                          absl::StrCat("message ", message_index_, ": ", parsed.message()));
    }
    if (!collection_) {
      auto c = service_->Lookup(request_.collection(), "collection");
      if (!c.ok()) return c.status();
      collection_ = *std::move(c);
    } else if (request_.collection() != collection_->name()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "collection: every message of a stream must name '", collection_->name(), "'"));
    }
    absl::Status s = ValidateUpsert(request_, collection_->dim());
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("message ", message_index_, ": ", s.message()));
    }
    return absl::OkStatus();
  }

  // Gives one message to the WAL, then reads the next: messages reach the collection in stream
  // order, so a later value for an id always wins. (Reading the next message before this one
  // was handed over let two OnReadDone calls race into Upsert.) handing_over_ keeps the call
  // from finishing while this runs without mu_, as a commit may report back inline.
  void HandOver(std::shared_ptr<storage::Collection> target,
                std::vector<storage::PointRecord> records) ABSL_LOCKS_EXCLUDED(mu_) {
    std::shared_ptr<storage::Collection> written = target;
    target->Upsert(std::move(records), [this, written](absl::StatusOr<uint64_t> n) {
      // Bulk loads past collection.flush_rows flush in the background, as unary upserts do.
      // Before OnCommitted: once it runs, the call may finish and the server shut down.
      if (n.ok()) service_->MaybeFlush(written);
      OnCommitted(n);
    });
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      handing_over_ = false;
      MaybeReadNextLocked();
      finish = MaybeFinishLocked();
    }
    if (finish) FinishStream(*finish);
  }

  void OnCommitted(absl::StatusOr<uint64_t> n) {
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      --outstanding_;
      if (!n.ok()) {
        FailLocked(n.status());
      } else {
        upserted_ += *n;
        MaybeReadNextLocked();
      }
      finish = MaybeFinishLocked();
    }
    if (finish) FinishStream(*finish);
  }

  // One read at a time, none while a message is being handed over, and at most
  // kMaxOutstanding messages waiting for their commit.
  void MaybeReadNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (input_done_ || reading_ || handing_over_ || !error_.ok()) return;
    if (outstanding_ >= kMaxOutstanding) return;
    reading_ = true;
    StartRead(&raw_);
  }

  void FailLocked(const absl::Status& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (error_.ok()) error_ = s;
    input_done_ = true;  // stop reading; finish once commits in flight have reported
  }

  // The status to finish with, once: when input is done and no commit is outstanding.
  std::optional<grpc::Status> MaybeFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || !input_done_ || outstanding_ > 0 || handing_over_) return std::nullopt;
    finished_ = true;
    if (error_.ok()) {
      v1::UpsertResponse response;
      response.set_upserted(upserted_);
      bool own_buffer = false;
      grpc::Status s = grpc::SerializationTraits<v1::UpsertResponse>::Serialize(
          response, wire_response_, &own_buffer);
      if (!s.ok()) error_ = absl::InternalError("UpsertStream: the response does not serialise");
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    service_->metrics()->ObserveRpc("UpsertStream", int(error_.code()), seconds);
    return ToGrpc(error_);
  }

  ShoalService* const service_;
  grpc::ByteBuffer* const wire_response_;
  const std::chrono::steady_clock::time_point start_;

  ReactorLifetime lifetime_;
  absl::Mutex mu_;
  grpc::ByteBuffer raw_ ABSL_GUARDED_BY(mu_);  // the message being read
  v1::UpsertRequest request_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<storage::Collection> collection_ ABSL_GUARDED_BY(mu_);
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  bool handing_over_ ABSL_GUARDED_BY(mu_) = false;  // HandOver() is giving a message to the WAL
  bool input_done_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  int outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t message_index_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t upserted_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

grpc::ServerReadReactor<grpc::ByteBuffer>* ShoalService::UpsertStream(
    grpc::CallbackServerContext* ctx, grpc::ByteBuffer* resp) {
  return new UpsertStreamReactor(this, ctx, resp);
}

}  // namespace shoal::server
