#include "client/client.h"

#include <grpcpp/grpcpp.h>

#include <random>
#include <thread>

#include "grpc/health/v1/health.grpc.pb.h"
#include "shoal/v1/shoal.grpc.pb.h"

namespace shoal {
namespace {

absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

v1::Metric ToProto(Metric m) {
  switch (m) {
    case Metric::kInnerProduct:
      return v1::METRIC_INNER_PRODUCT;
    case Metric::kCosine:
      return v1::METRIC_COSINE;
    case Metric::kL2:
      break;
  }
  return v1::METRIC_L2;
}

Metric FromProto(v1::Metric m) {
  if (m == v1::METRIC_INNER_PRODUCT) return Metric::kInnerProduct;
  if (m == v1::METRIC_COSINE) return Metric::kCosine;
  return Metric::kL2;
}

IndexType FromProto(v1::IndexType t) {
  switch (t) {
    case v1::INDEX_IVF_FLAT:
      return IndexType::kIvfFlat;
    case v1::INDEX_IVF_SQ8:
      return IndexType::kIvfSq8;
    case v1::INDEX_IVF_PQ:
      return IndexType::kIvfPq;
    default:
      return IndexType::kFlat;
  }
}

v1::IndexType ToProto(IndexType t) {
  switch (t) {
    case IndexType::kIvfFlat:
      return v1::INDEX_IVF_FLAT;
    case IndexType::kIvfSq8:
      return v1::INDEX_IVF_SQ8;
    case IndexType::kIvfPq:
      return v1::INDEX_IVF_PQ;
    case IndexType::kFlat:
      break;
  }
  return v1::INDEX_FLAT;
}

void ToProto(const Attributes& attrs, google::protobuf::Map<std::string, v1::Value>* out) {
  for (const auto& [key, value] : attrs) {
    v1::Value& v = (*out)[key];
    if (const auto* i = std::get_if<int64_t>(&value)) v.set_int_value(*i);
    if (const auto* d = std::get_if<double>(&value)) v.set_double_value(*d);
    if (const auto* s = std::get_if<std::string>(&value)) v.set_string_value(*s);
    if (const auto* b = std::get_if<bool>(&value)) v.set_bool_value(*b);
  }
}

Attributes FromProto(const google::protobuf::Map<std::string, v1::Value>& attrs) {
  Attributes out;
  for (const auto& [key, v] : attrs) {
    switch (v.kind_case()) {
      case v1::Value::kIntValue:
        out[key] = int64_t(v.int_value());
        break;
      case v1::Value::kDoubleValue:
        out[key] = v.double_value();
        break;
      case v1::Value::kStringValue:
        out[key] = v.string_value();
        break;
      case v1::Value::kBoolValue:
        out[key] = v.bool_value();
        break;
      case v1::Value::KIND_NOT_SET:
        break;
    }
  }
  return out;
}

void ToProto(const Point& p, v1::Point* out) {
  out->set_id(p.id);
  out->mutable_vector()->Assign(p.vector.begin(), p.vector.end());
  ToProto(p.attributes, out->mutable_attributes());
}

CollectionInfo FromProto(const v1::CollectionInfo& in) {
  CollectionInfo out;
  out.name = in.name();
  out.dim = in.dim();
  out.metric = FromProto(in.metric());
  out.index = {FromProto(in.index().type()), in.index().nlist(), in.index().pq_m(),
               in.index().default_nprobe()};
  out.num_vectors = in.num_vectors();
  out.num_indexed = in.num_indexed();
  out.num_segments = in.num_segments();
  switch (in.index_state()) {
    case v1::INDEX_STATE_BUILDING:
      out.index_state = "building";
      break;
    case v1::INDEX_STATE_READY:
      out.index_state = "ready";
      break;
    case v1::INDEX_STATE_BROKEN:
      out.index_state = "broken";
      break;
    default:
      out.index_state = "none";
  }
  out.disk_bytes = in.disk_bytes();
  out.error = in.error();
  return out;
}

SearchResult FromProto(const v1::SearchResult& in) {
  SearchResult out;
  if (in.hits_size() == 0) {  // packed_results without per-hit data
    out.hits.reserve(in.ids_size());
    for (int i = 0; i < in.ids_size() && i < in.distances_size(); ++i) {
      out.hits.push_back(Hit{.id = in.ids(i), .distance = in.distances(i)});
    }
  }
  for (const v1::SearchHit& h : in.hits()) {
    Hit hit;
    hit.id = h.id();
    hit.distance = h.distance();
    hit.vector.assign(h.vector().begin(), h.vector().end());
    hit.attributes = FromProto(h.attributes());
    out.hits.push_back(std::move(hit));
  }
  const v1::QueryStats& s = in.stats();
  out.stats = {s.partitions_probed(),
               s.partitions_cached(),
               s.bytes_read(),
               s.vectors_scanned(),
               s.queue_us(),
               s.io_us(),
               s.cpu_us()};
  return out;
}

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

}  // namespace

// Index builds and flushes run as long as they need; the server reports progress in
// DescribeCollection meanwhile.
constexpr std::chrono::milliseconds kMaintenanceTimeout = std::chrono::hours(2);

struct Client::Impl {
  ClientOptions options;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Shoal::Stub> stub;
  std::unique_ptr<grpc::health::v1::Health::Stub> health;

  void Prepare(grpc::ClientContext* ctx, std::chrono::milliseconds timeout) const {
    ctx->set_deadline(std::chrono::system_clock::now() + timeout);
    if (!options.api_key.empty()) ctx->AddMetadata("authorization", "Bearer " + options.api_key);
  }

  // Runs `rpc` with a fresh context per attempt, retrying UNAVAILABLE with jittered backoff.
  template <typename Rpc>
  absl::Status Call(Rpc&& rpc, std::chrono::milliseconds timeout = {}) const {
    auto backoff = options.initial_backoff;
    thread_local std::mt19937 rng{std::random_device{}()};
    for (int attempt = 0;; ++attempt) {
      grpc::ClientContext ctx;
      Prepare(&ctx, timeout.count() ? timeout : options.timeout);
      grpc::Status s = rpc(&ctx);
      if (s.error_code() != grpc::StatusCode::UNAVAILABLE || attempt >= options.max_retries) {
        return FromGrpc(s);
      }
      std::uniform_int_distribution<int64_t> jitter(backoff.count() / 2, backoff.count());
      std::this_thread::sleep_for(std::chrono::milliseconds(jitter(rng)));
      backoff *= 2;
    }
  }
};

Client::Client(const std::string& target, ClientOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(impl_->options.max_message_bytes);
  args.SetMaxSendMessageSize(impl_->options.max_message_bytes);
  impl_->channel = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  impl_->stub = v1::Shoal::NewStub(impl_->channel);
  impl_->health = grpc::health::v1::Health::NewStub(impl_->channel);
}

Client::~Client() = default;

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
  v1::CreateCollectionResponse resp;
  return impl_->Call(
      [&](grpc::ClientContext* ctx) { return impl_->stub->CreateCollection(ctx, req, &resp); });
}

absl::Status Client::DropCollection(const std::string& name) {
  v1::DropCollectionRequest req;
  req.set_name(name);
  v1::DropCollectionResponse resp;
  return impl_->Call(
      [&](grpc::ClientContext* ctx) { return impl_->stub->DropCollection(ctx, req, &resp); });
}

absl::StatusOr<std::vector<CollectionInfo>> Client::ListCollections() {
  v1::ListCollectionsRequest req;
  v1::ListCollectionsResponse resp;
  absl::Status s = impl_->Call(
      [&](grpc::ClientContext* ctx) { return impl_->stub->ListCollections(ctx, req, &resp); });
  if (!s.ok()) return s;
  std::vector<CollectionInfo> out;
  for (const auto& c : resp.collections()) out.push_back(FromProto(c));
  return out;
}

absl::StatusOr<CollectionInfo> Client::DescribeCollection(const std::string& name) {
  v1::DescribeCollectionRequest req;
  req.set_name(name);
  v1::CollectionInfo resp;
  absl::Status s = impl_->Call(
      [&](grpc::ClientContext* ctx) { return impl_->stub->DescribeCollection(ctx, req, &resp); });
  if (!s.ok()) return s;
  return FromProto(resp);
}

absl::StatusOr<uint64_t> Client::Upsert(const std::string& collection,
                                        const std::vector<Point>& points) {
  v1::UpsertRequest req;
  req.set_collection(collection);
  for (const Point& p : points) ToProto(p, req.add_points());
  v1::UpsertResponse resp;
  absl::Status s =
      impl_->Call([&](grpc::ClientContext* ctx) { return impl_->stub->Upsert(ctx, req, &resp); });
  if (!s.ok()) return s;
  return resp.upserted();
}

absl::StatusOr<std::unique_ptr<UpsertWriter>> Client::OpenUpsertStream(
    const std::string& collection, std::chrono::milliseconds timeout) {
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
  absl::Status s =
      impl_->Call([&](grpc::ClientContext* ctx) { return impl_->stub->Delete(ctx, req, &resp); });
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
  absl::Status s =
      impl_->Call([&](grpc::ClientContext* ctx) { return impl_->stub->Get(ctx, req, &resp); });
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
  v1::SearchRequest req;
  req.set_collection(collection);
  for (const auto& q : queries) req.add_queries()->mutable_values()->Assign(q.begin(), q.end());
  req.set_k(options.k);
  req.set_nprobe(options.nprobe);
  req.set_refine_factor(options.refine_factor);
  req.set_include_vectors(options.include_vectors);
  req.set_include_attributes(options.include_attributes);
  req.set_packed_results(true);  // smaller on the wire; hits still come for per-hit data
  v1::SearchResponse resp;
  absl::Status s =
      impl_->Call([&](grpc::ClientContext* ctx) { return impl_->stub->Search(ctx, req, &resp); });
  if (!s.ok()) return s;
  std::vector<SearchResult> out;
  for (const auto& r : resp.results()) out.push_back(FromProto(r));
  return out;
}

absl::StatusOr<std::string> Client::BuildIndex(const std::string& collection) {
  v1::BuildIndexRequest req;
  req.set_collection(collection);
  v1::BuildIndexResponse resp;
  absl::Status s = impl_->Call(
      [&](grpc::ClientContext* ctx) { return impl_->stub->BuildIndex(ctx, req, &resp); },
      kMaintenanceTimeout);
  if (!s.ok()) return s;
  return resp.message();
}

absl::StatusOr<std::string> Client::Flush(const std::string& collection) {
  v1::FlushRequest req;
  req.set_collection(collection);
  v1::FlushResponse resp;
  absl::Status s =
      impl_->Call([&](grpc::ClientContext* ctx) { return impl_->stub->Flush(ctx, req, &resp); },
                  kMaintenanceTimeout);
  if (!s.ok()) return s;
  return resp.message();
}

absl::StatusOr<HealthStatus> Client::Health(const std::string& collection) {
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(collection.empty() ? "" : "shoal.v1.Shoal/" + collection);
  grpc::health::v1::HealthCheckResponse resp;
  absl::Status s =
      impl_->Call([&](grpc::ClientContext* ctx) { return impl_->health->Check(ctx, req, &resp); });
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
