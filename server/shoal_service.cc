#include "server/shoal_service.h"

#include <openssl/crypto.h>

#include "absl/strings/str_cat.h"
#include "core/base/logging.h"
#include "core/index/ivf_search.h"
#include "server/convert.h"
#include "server/unary_reactor.h"
#include "server/validation.h"
#include "storage/format/wal_format.h"

namespace shoal::server {
namespace {

using grpc::CallbackServerContext;
using grpc::ServerUnaryReactor;

// The client's deadline as a CancelToken (no deadline: a token that never expires).
std::shared_ptr<core::CancelToken> TokenFor(const CallbackServerContext* ctx) {
  const auto deadline = ctx->deadline();
  const auto left = deadline - std::chrono::system_clock::now();
  if (left > std::chrono::hours(24 * 365)) return std::make_shared<core::CancelToken>();
  return std::make_shared<core::CancelToken>(
      std::chrono::steady_clock::now() +
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(left));
}

void StoredPointToProto(const storage::StoredPoint& stored, v1::Point* out) {
  out->set_id(stored.id);
  out->mutable_vector()->Assign(stored.vector.begin(), stored.vector.end());
  if (!stored.attributes.empty()) {
    if (auto attrs = storage::DecodeAttributes(stored.attributes); attrs.ok()) {
      ToProto(*attrs, out->mutable_attributes());
    }
  }
}

}  // namespace

UnaryReactor* ShoalService::NewReactor(CallbackServerContext* ctx, const char* method) const {
  return new UnaryReactor(metrics_, method, TokenFor(ctx));
}

std::string CollectionHealthName(const std::string& collection) {
  return absl::StrCat("shoal.v1.Shoal/", collection);
}

ShoalService::ShoalService(storage::Catalog* catalog, core::Executor* cpu, core::Executor* admin,
                           Metrics* metrics, Options options)
    : catalog_(catalog),
      cpu_(cpu),
      admin_(admin),
      metrics_(metrics),
      options_(std::move(options)) {}

void ShoalService::SetCollectionServing(const std::string& collection, bool serving) {
  if (health_) health_->SetServingStatus(CollectionHealthName(collection), serving);
}

absl::Status ShoalService::Admit(CallbackServerContext* ctx) const {
  if (!admitting_.load()) return absl::UnavailableError("server is shutting down");
  if (options_.api_key.empty()) return absl::OkStatus();
  const std::string expected = "Bearer " + options_.api_key;
  const auto& metadata = ctx->client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return absl::UnauthenticatedError("missing 'authorization: Bearer <api key>' metadata");
  }
  const grpc::string_ref got = it->second;
  // Constant-time compare, so the key cannot be guessed byte by byte from response times.
  if (got.size() != expected.size() ||
      CRYPTO_memcmp(got.data(), expected.data(), expected.size()) != 0) {
    return absl::UnauthenticatedError("invalid API key");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<storage::Collection>> ShoalService::AdmitAndLookup(
    CallbackServerContext* ctx, const std::string& name, const char* field) const {
  if (absl::Status s = Admit(ctx); !s.ok()) return s;
  return Lookup(name, field);
}

absl::StatusOr<std::shared_ptr<storage::Collection>> ShoalService::Lookup(const std::string& name,
                                                                          const char* field) const {
  if (auto s = ValidateCollectionName(name, field); !s.ok()) return s;
  auto collection = catalog_->Find(name);
  if (!collection) {
    return absl::NotFoundError(absl::StrCat(field, ": collection '", name, "' does not exist"));
  }
  return collection;
}

void ShoalService::FillInfo(const storage::Collection& c, v1::CollectionInfo* info) const {
  const std::shared_ptr<const storage::CollectionManifest> manifest = c.manifest();
  const storage::CollectionManifest& m = *manifest;
  const storage::CollectionStats stats = c.Stats();
  info->set_name(m.name);
  info->set_dim(m.dim);
  info->set_metric(ToProto(m.metric));
  *info->mutable_index() = ToProto(m.index);
  info->set_num_vectors(stats.num_vectors);
  info->set_num_indexed(stats.num_indexed);
  info->set_num_segments(stats.num_segments);
  const storage::BuildProgress progress = c.progress();
  if (progress.running) {
    info->set_index_state(v1::INDEX_STATE_BUILDING);
    info->set_build_phase(progress.phase);
    info->set_build_percent(progress.percent);
  } else {
    info->set_index_state(stats.num_segments > 0 ? v1::INDEX_STATE_READY : v1::INDEX_STATE_NONE);
  }
  info->set_disk_bytes(stats.disk_bytes);
}

ServerUnaryReactor* ShoalService::CreateCollection(CallbackServerContext* ctx,
                                                   const v1::CreateCollectionRequest* req,
                                                   v1::CreateCollectionResponse*) {
  auto* r = NewReactor(ctx, "CreateCollection");
  absl::Status s = Admit(ctx);
  if (s.ok()) s = ValidateCreate(*req);
  if (!s.ok()) {
    r->FinishWith(s);
    return r;
  }
  storage::CollectionManifest manifest;
  manifest.name = req->name();
  manifest.dim = req->dim();
  manifest.metric = FromProto(req->metric());
  manifest.index = FromProto(req->index());
  admin_->Submit([this, r, manifest = std::move(manifest)]() mutable {
    const std::string name = manifest.name;
    auto created = catalog_->Create(std::move(manifest));
    if (created.ok()) {
      SetCollectionServing(name, true);
      core::Logger("server")->info("created collection '{}'", name);
    }
    r->FinishWith(created.status());
  });
  return r;
}

ServerUnaryReactor* ShoalService::DropCollection(CallbackServerContext* ctx,
                                                 const v1::DropCollectionRequest* req,
                                                 v1::DropCollectionResponse*) {
  auto* r = NewReactor(ctx, "DropCollection");
  absl::Status s = Admit(ctx);
  if (s.ok()) s = ValidateCollectionName(req->name(), "name");
  if (!s.ok()) {
    r->FinishWith(s);
    return r;
  }
  admin_->Submit([this, r, name = req->name()] {
    absl::Status dropped = catalog_->Drop(name);
    if (dropped.ok()) {
      SetCollectionServing(name, false);
      core::Logger("server")->info("dropped collection '{}'", name);
    }
    r->FinishWith(dropped);
  });
  return r;
}

ServerUnaryReactor* ShoalService::ListCollections(CallbackServerContext* ctx,
                                                  const v1::ListCollectionsRequest*,
                                                  v1::ListCollectionsResponse* resp) {
  auto* r = NewReactor(ctx, "ListCollections");
  absl::Status s = Admit(ctx);
  if (s.ok()) {
    for (const auto& c : catalog_->List()) FillInfo(*c, resp->add_collections());
  }
  r->FinishWith(s);
  return r;
}

ServerUnaryReactor* ShoalService::DescribeCollection(CallbackServerContext* ctx,
                                                     const v1::DescribeCollectionRequest* req,
                                                     v1::CollectionInfo* resp) {
  auto* r = NewReactor(ctx, "DescribeCollection");
  auto c = AdmitAndLookup(ctx, req->name(), "name");
  if (c.ok()) FillInfo(**c, resp);
  r->FinishWith(c.status());
  return r;
}

ServerUnaryReactor* ShoalService::Upsert(CallbackServerContext* ctx, const v1::UpsertRequest* req,
                                         v1::UpsertResponse* resp) {
  auto* r = NewReactor(ctx, "Upsert");
  auto c = AdmitAndLookup(ctx, req->collection(), "collection");
  absl::Status s = c.status();
  if (s.ok()) s = ValidateUpsert(*req, (*c)->dim());
  if (!s.ok()) {
    r->FinishWith(s);
    return r;
  }
  (*c)->Upsert(ToPointRecords(*req), [this, r, resp, collection = *c](absl::StatusOr<uint64_t> n) {
    if (n.ok()) resp->set_upserted(*n);
    r->FinishWith(n.status());
    if (n.ok()) MaybeFlush(collection);
  });
  return r;
}

ServerUnaryReactor* ShoalService::Delete(CallbackServerContext* ctx, const v1::DeleteRequest* req,
                                         v1::DeleteResponse* resp) {
  auto* r = NewReactor(ctx, "Delete");
  auto c = AdmitAndLookup(ctx, req->collection(), "collection");
  absl::Status s = c.status();
  if (s.ok()) s = ValidateIds(req->ids());
  if (!s.ok()) {
    r->FinishWith(s);
    return r;
  }
  std::vector<uint64_t> ids(req->ids().begin(), req->ids().end());
  (*c)->Delete(std::move(ids), [r, resp](absl::StatusOr<uint64_t> n) {
    if (n.ok()) resp->set_deleted(*n);
    r->FinishWith(n.status());
  });
  return r;
}

ServerUnaryReactor* ShoalService::Get(CallbackServerContext* ctx, const v1::GetRequest* req,
                                      v1::GetResponse* resp) {
  auto* r = NewReactor(ctx, "Get");
  auto c = AdmitAndLookup(ctx, req->collection(), "collection");
  absl::Status s = c.status();
  if (s.ok()) s = ValidateIds(req->ids());
  if (!s.ok()) {
    r->FinishWith(s);
    return r;
  }
  // Rows in segments are read with blocking preads: off the gRPC thread, off the arena.
  admin_->Submit([r, req, resp, collection = *c] {
    std::vector<uint64_t> ids(req->ids().begin(), req->ids().end());
    for (const auto& p : collection->Get(ids, req->include_vectors())) {
      StoredPointToProto(p, resp->add_points());
    }
    r->FinishWith(absl::OkStatus());
  });
  return r;
}

ServerUnaryReactor* ShoalService::Search(CallbackServerContext* ctx, const v1::SearchRequest* req,
                                         v1::SearchResponse* resp) {
  auto* r = NewReactor(ctx, "Search");
  auto found = AdmitAndLookup(ctx, req->collection(), "collection");
  absl::Status s = found.status();
  if (s.ok()) s = ValidateSearch(*req, (*found)->dim());
  if (s.ok() && inflight_searches_.fetch_add(1) >= options_.max_inflight_searches) {
    inflight_searches_.fetch_sub(1);
    s = absl::ResourceExhaustedError(absl::StrCat(
        "too many searches in flight (search.max_inflight = ", options_.max_inflight_searches,
        "); retry with backoff"));
  }
  if (!s.ok()) {
    r->FinishWith(s);
    return r;
  }
  metrics_->search_inflight().Increment();
  std::shared_ptr<storage::Collection> collection = *std::move(found);
  const std::shared_ptr<core::CancelToken>& token = r->cancel_token();

  core::IvfSearchRequest search;
  storage::SearchSnapshot snapshot = collection->SearchView();
  const uint32_t dim = collection->dim();
  search.segments = std::move(snapshot.segments);
  search.memtable = std::move(snapshot.memtable);
  search.dim = dim;
  search.num_queries = size_t(req->queries_size());
  search.queries.resize(search.num_queries * dim);
  for (int i = 0; i < req->queries_size(); ++i) {
    float* q = search.queries.data() + size_t(i) * dim;
    std::copy(req->queries(i).values().begin(), req->queries(i).values().end(), q);
    if (collection->metric() == core::Metric::kCosine) core::NormalizeInPlace(q, dim);
  }
  search.k = req->k();
  search.metric = collection->metric();
  const uint32_t collection_nprobe = collection->manifest()->index.default_nprobe;
  search.nprobe = req->nprobe()       ? req->nprobe()
                  : collection_nprobe ? collection_nprobe
                                      : options_.default_nprobe;
  search.refine_factor = req->refine_factor();
  search.cancel = token;
  search.options.batch_partitions = options_.batch_partitions;
  search.options.batch_bytes = options_.batch_bytes;
  search.options.max_pinned_bytes = options_.max_pinned_bytes;
  core::IvfSearch(
      *cpu_, std::move(search),
      [this, r, req, resp, collection](absl::StatusOr<std::vector<core::QueryResult>> results) {
        inflight_searches_.fetch_sub(1);
        metrics_->search_inflight().Decrement();
        if (!results.ok()) return r->FinishWith(results.status());
        const bool want_points = req->include_vectors() || req->include_attributes();
        for (const core::QueryResult& result : *results) {
          v1::SearchResult* out = resp->add_results();
          ToProto(result.stats, out->mutable_stats());
          for (const core::Neighbor& n : result.neighbors) {
            v1::SearchHit* hit = out->add_hits();
            hit->set_id(n.id);
            hit->set_distance(n.distance);
          }
        }
        if (!want_points) return r->FinishWith(absl::OkStatus());
        // Vectors and attributes may live in segments (blocking reads): not on the arena.
        admin_->Submit([r, req, resp, collection] {
          for (v1::SearchResult& result : *resp->mutable_results()) {
            for (v1::SearchHit& hit : *result.mutable_hits()) {
              const uint64_t id = hit.id();
              for (const auto& p : collection->Get({&id, 1}, req->include_vectors())) {
                hit.mutable_vector()->Assign(p.vector.begin(), p.vector.end());
                if (req->include_attributes() && !p.attributes.empty()) {
                  if (auto attrs = storage::DecodeAttributes(p.attributes); attrs.ok()) {
                    ToProto(*attrs, hit.mutable_attributes());
                  }
                }
              }
            }
          }
          r->FinishWith(absl::OkStatus());
        });
      });
  return r;
}

// BuildIndex and Flush: block an admin thread for the work; the CPU part runs on the arena
// (I-2), so no arena thread waits.
template <typename Response>
ServerUnaryReactor* ShoalService::RunMaintenance(
    CallbackServerContext* ctx, const char* method, const std::string& name, Response* resp,
    absl::StatusOr<std::string> (storage::Collection::*op)(core::Executor&)) {
  auto* r = NewReactor(ctx, method);
  auto c = AdmitAndLookup(ctx, name, "collection");
  if (!c.ok()) {
    r->FinishWith(c.status());
    return r;
  }
  admin_->Submit([this, r, resp, op, collection = *c] {
    auto message = ((*collection).*op)(*cpu_);
    if (message.ok()) resp->set_message(*message);
    r->FinishWith(message.status());
  });
  return r;
}

ServerUnaryReactor* ShoalService::BuildIndex(CallbackServerContext* ctx,
                                             const v1::BuildIndexRequest* req,
                                             v1::BuildIndexResponse* resp) {
  return RunMaintenance(ctx, "BuildIndex", req->collection(), resp,
                        &storage::Collection::BuildIndex);
}

ServerUnaryReactor* ShoalService::Flush(CallbackServerContext* ctx, const v1::FlushRequest* req,
                                        v1::FlushResponse* resp) {
  return RunMaintenance(ctx, "Flush", req->collection(), resp, &storage::Collection::Flush);
}

void ShoalService::MaybeFlush(const std::shared_ptr<storage::Collection>& collection) {
  const storage::CollectionStats stats = collection->Stats();
  if (stats.num_segments == 0 || stats.memtable_rows < options_.flush_rows) return;
  {
    std::lock_guard<std::mutex> lock(flush_mu_);
    if (!flushing_.insert(collection->name()).second) return;
  }
  admin_->Submit([this, collection] {
    auto flushed = collection->Flush(*cpu_);
    if (!flushed.ok()) {
      core::Logger("server")->error("{}: background flush failed: {}", collection->name(),
                                    flushed.status().ToString());
    }
    std::lock_guard<std::mutex> lock(flush_mu_);
    flushing_.erase(collection->name());
  });
}

}  // namespace shoal::server
