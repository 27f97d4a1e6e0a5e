// The UpsertStream reactor: bulk load over one client stream.
//
// Each message is validated and handed to the collection's WAL like a unary Upsert. Up to
// kMaxOutstanding messages may wait for their group commit at once; past that the reactor
// stops reading (flow control reaches the client through HTTP/2) and resumes when a commit
// completes. The single response is sent when the client has half-closed and every message
// is durable, or at the first error.
#include <mutex>

#include "absl/strings/str_cat.h"
#include "server/convert.h"
#include "server/shoal_service.h"
#include "server/validation.h"
#include "storage/format/wal_format.h"

namespace shoal::server {
namespace {

constexpr int kMaxOutstanding = 4;

class UpsertStreamReactor final : public grpc::ServerReadReactor<v1::UpsertRequest> {
 public:
  UpsertStreamReactor(ShoalService* service, grpc::CallbackServerContext* ctx,
                      v1::UpsertResponse* resp)
      : service_(service), resp_(resp), start_(std::chrono::steady_clock::now()) {
    service_->metrics()->RpcStarted();
    absl::Status admitted = service_->Admit(ctx);
    std::lock_guard<std::mutex> lock(mu_);
    if (!admitted.ok()) {
      FailLocked(admitted);
      return;
    }
    reading_ = true;
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    reading_ = false;
    if (!ok) {  // the client half-closed (or the call broke)
      input_done_ = true;
      MaybeFinishLocked();
      return;
    }
    if (!error_.ok()) return;
    absl::Status s = Accept();
    if (!s.ok()) {
      FailLocked(s);
      return;
    }
    ++outstanding_;
    ++message_index_;
    collection_->Upsert(ToPointRecords(request_), [this](absl::StatusOr<uint64_t> n) { OnCommitted(n); });
    if (outstanding_ < kMaxOutstanding) ReadNextLocked();
  }

  void OnDone() override {
    service_->metrics()->RpcDone();
    delete this;
  }

 private:
  // Validates request_ and binds the stream to its collection on the first message.
  absl::Status Accept() {
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

  void OnCommitted(absl::StatusOr<uint64_t> n) {
    std::lock_guard<std::mutex> lock(mu_);
    --outstanding_;
    if (!n.ok()) {
      FailLocked(n.status());
      return;
    }
    upserted_ += *n;
    if (!input_done_ && !reading_ && error_.ok()) ReadNextLocked();
    MaybeFinishLocked();
  }

  void ReadNextLocked() {
    reading_ = true;
    StartRead(&request_);
  }

  void FailLocked(const absl::Status& s) {
    if (error_.ok()) error_ = s;
    input_done_ = true;  // stop reading; finish once commits in flight have reported
    MaybeFinishLocked();
  }

  void MaybeFinishLocked() {
    if (finished_ || !input_done_ || outstanding_ > 0) return;
    finished_ = true;
    if (error_.ok()) resp_->set_upserted(upserted_);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    service_->metrics()->ObserveRpc("UpsertStream", int(error_.code()), seconds);
    Finish(ToGrpc(error_));
  }

  ShoalService* const service_;
  v1::UpsertResponse* const resp_;
  const std::chrono::steady_clock::time_point start_;

  std::mutex mu_;  // guards everything below
  v1::UpsertRequest request_;
  std::shared_ptr<storage::Collection> collection_;
  bool reading_ = false;
  bool input_done_ = false;
  bool finished_ = false;
  int outstanding_ = 0;
  uint64_t message_index_ = 0;
  uint64_t upserted_ = 0;
  absl::Status error_;
};

}  // namespace

grpc::ServerReadReactor<v1::UpsertRequest>* ShoalService::UpsertStream(
    grpc::CallbackServerContext* ctx, v1::UpsertResponse* resp) {
  return new UpsertStreamReactor(this, ctx, resp);
}

}  // namespace shoal::server
