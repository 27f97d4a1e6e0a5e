#include "client/client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <sstream>

#include "client/client_impl.h"
#include "client/convert.h"

namespace shoal {
namespace {

using client_internal::FromGrpc;
using client_internal::FromProto;
using client_internal::ToProto;

class StreamWriter final : public UpsertWriter {
 public:
  StreamWriter(std::unique_ptr<grpc::ClientContext> ctx, v1::Shoal::Stub* stub,
               std::string collection)
      : ctx_(std::move(ctx)), collection_(std::move(collection)) {
    writer_ = stub->UpsertStream(ctx_.get(), &response_);
  }

  absl::Status Write(const std::vector<Point>& points) override {
    v1::UpsertRequest req;
    req.set_collection(collection_);
    for (const Point& p : points) ToProto(p, req.add_points());
    if (!writer_->Write(req)) {
      return absl::UnavailableError("upsert stream closed by the server; Finish() has the reason");
    }
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> Finish() override {
    writer_->WritesDone();
    absl::Status s = FromGrpc(writer_->Finish());
    if (!s.ok()) return s;
    return response_.upserted();
  }

 private:
  std::unique_ptr<grpc::ClientContext> ctx_;
  const std::string collection_;
  v1::UpsertResponse response_;
  std::unique_ptr<grpc::ClientWriter<v1::UpsertRequest>> writer_;
};

// The whole file, or INVALID_ARGUMENT naming the option.
absl::StatusOr<std::string> ReadFile(const std::string& path, const char* option) {
  std::ifstream in(path, std::ios::binary);
  if (!in.is_open()) {
    return absl::InvalidArgumentError(std::string("ClientOptions.tls.") + option +
                                      ": cannot open '" + path + "'");
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// TLS channel credentials from the PEM files (system roots when ca_file is empty).
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> TlsCredentials(const TlsOptions& tls) {
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError("ClientOptions.tls: cert_file and key_file go together");
  }
  grpc::SslCredentialsOptions ssl;
  const std::pair<const std::string*, std::string*> files[] = {
      {&tls.ca_file, &ssl.pem_root_certs},
      {&tls.cert_file, &ssl.pem_cert_chain},
      {&tls.key_file, &ssl.pem_private_key}};
  const char* names[] = {"ca_file", "cert_file", "key_file"};
  for (size_t i = 0; i < 3; ++i) {
    if (files[i].first->empty()) continue;
    auto pem = ReadFile(*files[i].first, names[i]);
    if (!pem.ok()) return pem.status();
    *files[i].second = *std::move(pem);
  }
  return grpc::SslCredentials(ssl);
}

}  // namespace

// Index builds and flushes run as long as they need; the server reports progress in
// DescribeCollection meanwhile.
constexpr std::chrono::milliseconds kMaintenanceTimeout = std::chrono::hours(2);

Client::Impl::Impl(const std::string& target, ClientOptions opts) : options(std::move(opts)) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  const KeepaliveOptions& keepalive = options.keepalive;
  if (keepalive.time.count() > 0) {
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, int(keepalive.time.count()));
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, int(keepalive.timeout.count()));
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, keepalive.permit_without_calls ? 1 : 0);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);  // long quiet streams keep pinging
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (options.tls) {
    if (!options.tls->server_name.empty()) {
      args.SetSslTargetNameOverride(options.tls->server_name);
    }
    auto tls = TlsCredentials(*options.tls);
    if (tls.ok()) {
      credentials = *std::move(tls);
    } else {
      init_status = tls.status();
      return;  // no channel: nothing, least of all the API key, may go out in plaintext
    }
  }
  channel = grpc::CreateCustomChannel(target, credentials, args);
  stub = v1::Shoal::NewStub(channel);
  health = grpc::health::v1::Health::NewStub(channel);
}

void Client::Impl::Prepare(grpc::ClientContext* ctx, std::chrono::milliseconds timeout) const {
  ctx->set_deadline(std::chrono::system_clock::now() + timeout);
  if (!options.api_key.empty()) ctx->AddMetadata("authorization", "Bearer " + options.api_key);
}

bool Client::Impl::ShouldRetry(grpc::StatusCode code, int attempt, Idempotency idempotency) const {
  return code == grpc::StatusCode::UNAVAILABLE && idempotency == Idempotency::kIdempotent &&
         attempt < options.retry.max_retries;
}

std::chrono::milliseconds Client::Impl::Backoff(int attempt) const {
  const RetryPolicy& p = options.retry;
  double ms = double(p.initial_backoff.count());
  for (int i = 0; i < attempt && ms < double(p.max_backoff.count()); ++i) ms *= p.multiplier;
  const int64_t cap = std::max<int64_t>(1, std::min<int64_t>(int64_t(ms), p.max_backoff.count()));
  thread_local std::mt19937 rng{std::random_device{}()};
  std::uniform_int_distribution<int64_t> jitter(cap / 2, cap);
  return std::chrono::milliseconds(jitter(rng));
}

void Client::Impl::BeginAsync() {
  absl::MutexLock l(&mu_);
  ++outstanding_;
}

void Client::Impl::EndAsync() {
  absl::MutexLock l(&mu_);
  --outstanding_;
}

void Client::Impl::WaitForAsyncCalls() {
  absl::MutexLock l(&mu_);
  mu_.Await(absl::Condition(
      +[](int* n) { return *n == 0; }, &outstanding_));
}

Client::Client(const std::string& target, ClientOptions options)
    : impl_(std::make_unique<Impl>(target, std::move(options))) {}

Client::~Client() { impl_->WaitForAsyncCalls(); }

absl::Status Client::CreateCollection(const CollectionSpec& spec) {
  v1::CreateCollectionRequest req;
  req.set_name(spec.name);
  req.set_dim(spec.dim);
  req.set_metric(ToProto(spec.metric));
  v1::IndexSpec* index = req.mutable_index();
  index->set_type(ToProto(spec.index.type));
  index->set_nlist(spec.index.nlist);
  index->set_pq_m(spec.index.pq_m);
  index->set_default_nprobe(spec.index.default_nprobe);
  index->set_pq_bits(spec.index.pq_bits);
  v1::CreateCollectionResponse resp;
  return impl_->Call(Idempotency::kNotIdempotent, [&](grpc::ClientContext* ctx) {
    return impl_->stub->CreateCollection(ctx, req, &resp);
  });
}

absl::Status Client::DropCollection(const std::string& name) {
  v1::DropCollectionRequest req;
  req.set_name(name);
  v1::DropCollectionResponse resp;
  return impl_->Call(Idempotency::kNotIdempotent, [&](grpc::ClientContext* ctx) {
    return impl_->stub->DropCollection(ctx, req, &resp);
  });
}

absl::StatusOr<std::vector<CollectionInfo>> Client::ListCollections() {
  v1::ListCollectionsRequest req;
  v1::ListCollectionsResponse resp;
  absl::Status s = impl_->Call(Idempotency::kIdempotent, [&](grpc::ClientContext* ctx) {
    return impl_->stub->ListCollections(ctx, req, &resp);
  });
  if (!s.ok()) return s;
  std::vector<CollectionInfo> out;
  for (const auto& c : resp.collections()) out.push_back(FromProto(c));
  return out;
}

absl::StatusOr<CollectionInfo> Client::DescribeCollection(const std::string& name) {
  v1::DescribeCollectionRequest req;
  req.set_name(name);
  v1::CollectionInfo resp;
  absl::Status s = impl_->Call(Idempotency::kIdempotent, [&](grpc::ClientContext* ctx) {
    return impl_->stub->DescribeCollection(ctx, req, &resp);
  });
  if (!s.ok()) return s;
  return FromProto(resp);
}

absl::StatusOr<uint64_t> Client::Count(const std::string& collection, const std::string& filter) {
  v1::CountRequest req;
  req.set_collection(collection);
  req.set_filter(filter);
  v1::CountResponse resp;
  absl::Status s = impl_->Call(Idempotency::kIdempotent, [&](grpc::ClientContext* ctx) {
    return impl_->stub->Count(ctx, req, &resp);
  });
  if (!s.ok()) return s;
  return resp.count();
}

absl::StatusOr<uint64_t> Client::Upsert(const std::string& collection,
                                        const std::vector<Point>& points) {
  v1::UpsertRequest req;
  req.set_collection(collection);
  for (const Point& p : points) ToProto(p, req.add_points());
  v1::UpsertResponse resp;
  absl::Status s = impl_->Call(Idempotency::kIdempotent, [&](grpc::ClientContext* ctx) {
    return impl_->stub->Upsert(ctx, req, &resp);
  });
  if (!s.ok()) return s;
  return resp.upserted();
}

absl::StatusOr<std::unique_ptr<UpsertWriter>> Client::OpenUpsertStream(
    const std::string& collection, std::chrono::milliseconds timeout) {
  if (!impl_->init_status.ok()) return impl_->init_status;
  auto ctx = std::make_unique<grpc::ClientContext>();
  impl_->Prepare(ctx.get(), timeout);
  return std::unique_ptr<UpsertWriter>(
      new StreamWriter(std::move(ctx), impl_->stub.get(), collection));
}

absl::StatusOr<uint64_t> Client::Delete(const std::string& collection,
                                        const std::vector<uint64_t>& ids) {
  v1::DeleteRequest req;
  req.set_collection(collection);
  req.mutable_ids()->Assign(ids.begin(), ids.end());
  v1::DeleteResponse resp;
  absl::Status s = impl_->Call(Idempotency::kIdempotent, [&](grpc::ClientContext* ctx) {
    return impl_->stub->Delete(ctx, req, &resp);
  });
  if (!s.ok()) return s;
  return resp.deleted();
}

absl::StatusOr<std::vector<Point>> Client::Get(const std::string& collection,
                                               const std::vector<uint64_t>& ids,
                                               bool include_vectors) {
  v1::GetRequest req;
  req.set_collection(collection);
  req.mutable_ids()->Assign(ids.begin(), ids.end());
  req.set_include_vectors(include_vectors);
  v1::GetResponse resp;
  absl::Status s = impl_->Call(Idempotency::kIdempotent, [&](grpc::ClientContext* ctx) {
    return impl_->stub->Get(ctx, req, &resp);
  });
  if (!s.ok()) return s;
  std::vector<Point> out;
  for (const v1::Point& p : resp.points()) {
    out.push_back({p.id(), {p.vector().begin(), p.vector().end()}, FromProto(p.attributes())});
  }
  return out;
}

absl::StatusOr<SearchResult> Client::Search(const std::string& collection,
                                            const std::vector<float>& query,
                                            const SearchOptions& options) {
  auto results = SearchBatch(collection, {query}, options);
  if (!results.ok()) return results.status();
  if (results->size() != 1) return absl::InternalError("server returned no result for the query");
  return std::move((*results)[0]);
}

absl::StatusOr<std::vector<SearchResult>> Client::SearchBatch(
    const std::string& collection, const std::vector<std::vector<float>>& queries,
    const SearchOptions& options) {
  const v1::SearchRequest req =
      client_internal::MakeSearchRequest(collection, queries, 0, queries.size(), options);
  v1::SearchResponse resp;
  absl::Status s = impl_->Call(Idempotency::kIdempotent, [&](grpc::ClientContext* ctx) {
    return impl_->stub->Search(ctx, req, &resp);
  });
  if (!s.ok()) return s;
  return FromProto(resp, queries.size());
}

absl::StatusOr<std::string> Client::BuildIndex(const std::string& collection) {
  v1::BuildIndexRequest req;
  req.set_collection(collection);
  v1::BuildIndexResponse resp;
  absl::Status s = impl_->Call(
      Idempotency::kNotIdempotent,
      [&](grpc::ClientContext* ctx) { return impl_->stub->BuildIndex(ctx, req, &resp); },
      kMaintenanceTimeout);
  if (!s.ok()) return s;
  return resp.message();
}

absl::StatusOr<std::string> Client::Flush(const std::string& collection) {
  v1::FlushRequest req;
  req.set_collection(collection);
  v1::FlushResponse resp;
  absl::Status s = impl_->Call(
      Idempotency::kIdempotent,
      [&](grpc::ClientContext* ctx) { return impl_->stub->Flush(ctx, req, &resp); },
      kMaintenanceTimeout);
  if (!s.ok()) return s;
  return resp.message();
}

absl::StatusOr<HealthStatus> Client::Health(const std::string& collection) {
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(collection.empty() ? "" : "shoal.v1.Shoal/" + collection);
  grpc::health::v1::HealthCheckResponse resp;
  absl::Status s = impl_->Call(Idempotency::kIdempotent, [&](grpc::ClientContext* ctx) {
    return impl_->health->Check(ctx, req, &resp);
  });
  if (absl::IsNotFound(s)) return HealthStatus::kServiceUnknown;
  if (!s.ok()) return s;
  switch (resp.status()) {
    case grpc::health::v1::HealthCheckResponse::SERVING:
      return HealthStatus::kServing;
    case grpc::health::v1::HealthCheckResponse::NOT_SERVING:
      return HealthStatus::kNotServing;
    case grpc::health::v1::HealthCheckResponse::SERVICE_UNKNOWN:
      return HealthStatus::kServiceUnknown;
    default:
      return HealthStatus::kUnknown;
  }
}

std::string MetricName(Metric metric) {
  switch (metric) {
    case Metric::kInnerProduct:
      return "ip";
    case Metric::kCosine:
      return "cosine";
    case Metric::kL2:
      break;
  }
  return "l2";
}

std::optional<IndexType> IndexTypeFromName(std::string_view name) {
  for (IndexType t :
       {IndexType::kFlat, IndexType::kIvfFlat, IndexType::kIvfSq8, IndexType::kIvfPq}) {
    if (IndexTypeName(t) == name) return t;
  }
  return std::nullopt;
}

std::string IndexTypeName(IndexType type) {
  switch (type) {
    case IndexType::kIvfFlat:
      return "ivf_flat";
    case IndexType::kIvfSq8:
      return "ivf_sq8";
    case IndexType::kIvfPq:
      return "ivf_pq";
    case IndexType::kFlat:
      break;
  }
  return "flat";
}

}  // namespace shoal
