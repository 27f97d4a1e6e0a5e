#include "server/shoal_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/base/logging.h"
#include "core/index/fastscan_model.h"
#include "core/index/ivf_search.h"
#include "core/index/partition_scan.h"
#include "server/convert.h"
#include "server/unary_reactor.h"
#include "server/validation.h"
#include "storage/format/wal_format.h"

namespace shoal::server {
namespace {

// A request's filter, parsed; an empty one is none (null). INVALID_ARGUMENT names the byte.
absl::StatusOr<std::shared_ptr<const core::filter::Filter>> ParseFilter(const std::string& text) {
  if (text.empty()) return nullptr;
  absl::StatusOr<core::filter::Filter> parsed = core::filter::Filter::Parse(text);
  if (!parsed.ok()) return parsed.status();
  return std::make_shared<const core::filter::Filter>(*std::move(parsed));
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

std::string CollectionHealthName(const std::string& collection) {
  return absl::StrCat("shoal.v1.Shoal/", collection);
}

ShoalService::ShoalService(storage::Catalog* catalog, core::Executor* cpu, core::Executor* admin,
                           Metrics* metrics, Options options)
    : catalog_(catalog),
      cpu_(cpu),
      admin_(admin),
      metrics_(metrics),
      options_(std::move(options)),
      scan_share_(std::make_shared<core::ScanShare>(
          core::ScanShare::Options{options_.share_scans, options_.max_queries_per_scan,
                                   [metrics](size_t queries) {
                                     if (metrics) metrics->ObserveQueriesPerScan(queries);
                                   }})),
      batcher_(options_.batch_requests
                   ? std::make_shared<core::SearchBatcher>(
                         [cpu](core::IvfSearchRequest request, core::SearchDone done) {
                           core::IvfSearch(*cpu, std::move(request), std::move(done));
                         },
                         core::SearchBatcher::Options{
                             size_t(std::max(1, cpu->concurrency())), options_.max_batch_queries,
                             [metrics](size_t searches, size_t) {
                               if (metrics) metrics->ObserveRequestsPerBatch(searches);
                             },
                             [cpu](std::function<void()> start) { cpu->Submit(std::move(start)); }})
                   : nullptr),
      inflight_bytes_(options_.max_inflight_request_bytes),
      // An explicit server.max_inflight_per_peer is a hard cap; the default is a quarter of the
      // server's slots as a share that an otherwise idle server lends out (PeerSlots).
      peer_slots_(options_.max_inflight_per_peer > 0
                      ? options_.max_inflight_per_peer
                      : std::max(1, options_.max_inflight_searches / 4),
                  options_.max_inflight_per_peer > 0 ? 0 : options_.max_inflight_searches) {}

void ShoalService::SetCollectionServing(const std::string& collection, bool serving) {
  if (health_) health_->SetServingStatus(CollectionHealthName(collection), serving);
}

absl::Status ShoalService::Admit(CallbackServerContext* ctx) const {
  if (!admitting_.load()) return absl::UnavailableError("server is shutting down");
  if (options_.api_keys == nullptr || !options_.api_keys->enabled()) return absl::OkStatus();
  const auto& metadata = ctx->client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return absl::UnauthenticatedError("missing 'authorization: Bearer <api key>' metadata");
  }
  // The message says no more than "wrong": not which keys exist, nor how close the guess was.
  if (!options_.api_keys->AcceptsAuthorization(
          absl::string_view(it->second.data(), it->second.size()))) {
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
  auto collection = catalog_->Find(name);  // NOT_FOUND, or DATA_LOSS for a broken collection
  if (!collection.ok()) {
    return absl::Status(collection.status().code(),
                        absl::StrCat(field, ": ", collection.status().message()));
  }
  return collection;
}

bool ShoalService::FillBrokenInfo(const std::string& name, v1::CollectionInfo* info) const {
  for (const storage::BrokenCollection& b : catalog_->Broken()) {
    if (b.name != name) continue;
    info->set_name(b.name);
    if (b.manifest) {
      info->set_dim(b.manifest->dim);
      info->set_metric(ToProto(b.manifest->metric));
      *info->mutable_index() = ToProto(b.manifest->index);
    }
    info->set_index_state(v1::INDEX_STATE_BROKEN);
    info->set_error(std::string(b.error.message()));
    return true;
  }
  return false;
}

void ShoalService::AddBrokenInfos(v1::ListCollectionsResponse* resp) const {
  for (const storage::BrokenCollection& b : catalog_->Broken()) {
    FillBrokenInfo(b.name, resp->add_collections());
  }
  auto* list = resp->mutable_collections();
  std::sort(list->pointer_begin(), list->pointer_end(),
            [](const v1::CollectionInfo* a, const v1::CollectionInfo* b) {
              return a->name() < b->name();
            });
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
  info->set_attribute_memory_bytes(stats.attribute_memory_bytes);
}

void ShoalService::CreateCollection(CallbackServerContext* ctx, UnaryReactor* r,
                                    const v1::CreateCollectionRequest* req,
                                    v1::CreateCollectionResponse*) {
  absl::Status s = Admit(ctx);
  if (s.ok()) s = ValidateCreate(*req);
  if (!s.ok()) {
    r->FinishWith(s);
    return;
  }
  storage::CollectionManifest manifest;
  manifest.name = req->name();
  manifest.dim = req->dim();
  manifest.metric = FromProto(req->metric());
  manifest.index = FromProto(req->index());
  admin_->Submit(Guarded(r, [this, r, manifest = std::move(manifest)]() mutable {
    const std::string name = manifest.name;
    auto created = catalog_->Create(std::move(manifest));
    if (created.ok()) {
      SetCollectionServing(name, true);
      core::Logger("server")->info("created collection '{}'", name);
    }
    r->FinishWith(created.status());
  }));
}

void ShoalService::DropCollection(CallbackServerContext* ctx, UnaryReactor* r,
                                  const v1::DropCollectionRequest* req,
                                  v1::DropCollectionResponse*) {
  absl::Status s = Admit(ctx);
  if (s.ok()) s = ValidateCollectionName(req->name(), "name");
  if (!s.ok()) {
    r->FinishWith(s);
    return;
  }
  admin_->Submit(Guarded(r, [this, r, name = req->name()] {
    absl::Status dropped = catalog_->Drop(name);
    if (dropped.ok()) {
      SetCollectionServing(name, false);
      core::Logger("server")->info("dropped collection '{}'", name);
    }
    r->FinishWith(dropped);
  }));
}

void ShoalService::ListCollections(CallbackServerContext* ctx, UnaryReactor* r,
                                   const v1::ListCollectionsRequest*,
                                   v1::ListCollectionsResponse* resp) {
  absl::Status s = Admit(ctx);
  if (s.ok()) {
    for (const auto& c : catalog_->List()) FillInfo(*c, resp->add_collections());
    AddBrokenInfos(resp);
  }
  r->FinishWith(s);
}

void ShoalService::DescribeCollection(CallbackServerContext* ctx, UnaryReactor* r,
                                      const v1::DescribeCollectionRequest* req,
                                      v1::CollectionInfo* resp) {
  auto c = AdmitAndLookup(ctx, req->name(), "name");
  if (c.ok()) FillInfo(**c, resp);
  // A broken collection is described (state and reason), not refused.
  const bool broken = absl::IsDataLoss(c.status()) && FillBrokenInfo(req->name(), resp);
  r->FinishWith(broken ? absl::OkStatus() : c.status());
}

void ShoalService::Upsert(CallbackServerContext* ctx, UnaryReactor* r, const v1::UpsertRequest* req,
                          v1::UpsertResponse* resp) {
  auto c = AdmitAndLookup(ctx, req->collection(), "collection");
  absl::Status s = c.status();
  if (s.ok()) s = ValidateUpsert(*req, (*c)->dim());
  if (!s.ok()) {
    r->FinishWith(s);
    return;
  }
  (*c)->Upsert(ToPointRecords(*req), [this, r, resp, collection = *c](absl::StatusOr<uint64_t> n) {
    // Before the call finishes: once it has, the server may be shutting down and its
    // maintenance executor gone.
    if (n.ok()) MaybeFlush(collection);
    Guarded(r, [&] {
      if (n.ok()) resp->set_upserted(*n);
      r->FinishWith(n.status());
    })();
  });
}

void ShoalService::Delete(CallbackServerContext* ctx, UnaryReactor* r, const v1::DeleteRequest* req,
                          v1::DeleteResponse* resp) {
  auto c = AdmitAndLookup(ctx, req->collection(), "collection");
  absl::Status s = c.status();
  if (s.ok()) s = ValidateIds(req->ids());
  if (!s.ok()) {
    r->FinishWith(s);
    return;
  }
  std::vector<uint64_t> ids(req->ids().begin(), req->ids().end());
  (*c)->Delete(std::move(ids), Guarded(r, [r, resp](absl::StatusOr<uint64_t> n) {
                 if (n.ok()) resp->set_deleted(*n);
                 r->FinishWith(n.status());
               }));
}

void ShoalService::Get(CallbackServerContext* ctx, UnaryReactor* r, const v1::GetRequest* req,
                       v1::GetResponse* resp) {
  auto c = AdmitAndLookup(ctx, req->collection(), "collection");
  absl::Status s = c.status();
  if (s.ok()) s = ValidateIds(req->ids());
  absl::StatusOr<uint64_t> cost = s.ok() ? GetCost(*req, (*c)->dim(), options_.limits) : s;
  if (!cost.ok()) {
    r->FinishWith(cost.status());
    return;
  }
  absl::StatusOr<Shares> shares = TakeShares(ctx->peer(), *cost);
  if (!shares.ok()) {
    r->FinishWith(shares.status());
    return;
  }
  // Rows in segments are read with blocking preads: off the gRPC thread, off the arena.
  admin_->Submit(
      Guarded(r, [this, r, req, resp, collection = *c, peer_slot = std::move(shares->peer_slot),
                  reservation = std::move(shares->reservation)]() mutable {
        std::vector<uint64_t> ids(req->ids().begin(), req->ids().end());
        absl::Status status;
        uint64_t wire_bytes = 0;
        for (const auto& p : collection->Get(ids, req->include_vectors())) {
          // Attributes are not in the estimate: count the real size as the response grows.
          wire_bytes += p.vector.size() * sizeof(float) + p.attributes.size() + 16;
          if (wire_bytes > options_.limits.max_response_bytes) {
            status = absl::ResourceExhaustedError(absl::StrCat(
                "the response would be over server.max_message_bytes (",
                options_.limits.max_response_bytes, " bytes); ask for fewer ids per request"));
            break;
          }
          StoredPointToProto(p, resp->add_points());
        }
        reservation.Release();
        peer_slot.Release();
        r->FinishWith(status);
      }));
}

absl::StatusOr<ShoalService::Shares> ShoalService::TakeShares(const std::string& peer,
                                                              uint64_t bytes) {
  absl::StatusOr<PeerSlots::Slot> peer_slot = peer_slots_.Acquire(peer);
  if (!peer_slot.ok()) {
    metrics_->CountRefusal(Refusal::kPeerSlots);
    return peer_slot.status();
  }
  absl::StatusOr<InflightBytes::Reservation> reservation = inflight_bytes_.Acquire(bytes);
  if (!reservation.ok()) {
    metrics_->CountRefusal(Refusal::kInflightBytes);
    return reservation.status();
  }
  return Shares{*std::move(peer_slot), *std::move(reservation)};
}

void ShoalService::Count(CallbackServerContext* ctx, UnaryReactor* r, const v1::CountRequest* req,
                         v1::CountResponse* resp) {
  auto c = AdmitAndLookup(ctx, req->collection(), "collection");
  absl::StatusOr<std::shared_ptr<const core::filter::Filter>> filter =
      c.ok() ? ParseFilter(req->filter()) : c.status();
  if (!filter.ok()) {
    r->FinishWith(filter.status());
    return;
  }
  // The filter's bitsets over every row, dead ones too (I-9), as a search prices them.
  const uint64_t rows = (*c)->Stats().stored_rows;
  const uint64_t cost =
      *filter ? (2 + storage::AttributeColumns::BitsetsToSelect(**filter)) * (rows / 8 + 64) : 0;
  absl::StatusOr<Shares> shares = TakeShares(ctx->peer(), cost);
  if (!shares.ok()) {
    r->FinishWith(shares.status());
    return;
  }
  // A pass over every row's attribute columns: CPU work off the gRPC thread (and off the
  // arena, whose threads are the searches').
  admin_->Submit(Guarded(r, [r, resp, collection = *c, filter = *std::move(filter),
                             peer_slot = std::move(shares->peer_slot),
                             reservation = std::move(shares->reservation)]() mutable {
    resp->set_count(collection->Count(filter.get()));
    reservation.Release();
    peer_slot.Release();
    r->FinishWith(absl::OkStatus());
  }));
}

namespace {

// The search as the engine takes it, without its queries: the collection's snapshot and the
// request's parameters.
core::IvfSearchRequest ToEngineRequest(const storage::Collection& collection,
                                       storage::SearchSnapshot snapshot, size_t k, uint32_t nprobe,
                                       uint32_t refine_factor) {
  core::IvfSearchRequest search;
  search.segments = std::move(snapshot.segments);
  search.memtable = std::move(snapshot.memtable);
  search.dim = collection.dim();
  search.k = k;
  search.metric = collection.metric();
  search.nprobe = nprobe;
  search.refine_factor = refine_factor;
  search.filtered = snapshot.memtable_selection != nullptr;
  search.memtable_selection = std::move(snapshot.memtable_selection);
  return search;
}

// The request's queries, row-major (cosine: normalised).
std::vector<float> EngineQueries(const storage::Collection& collection,
                                 const v1::SearchRequest& req) {
  const uint32_t dim = collection.dim();
  std::vector<float> queries(size_t(req.queries_size()) * dim);
  for (int i = 0; i < req.queries_size(); ++i) {
    float* q = queries.data() + size_t(i) * dim;
    std::copy(req.queries(i).values().begin(), req.queries(i).values().end(), q);
    if (collection.metric() == core::Metric::kCosine) core::NormalizeInPlace(q, dim);
  }
  return queries;
}

// `filter` may be null.
SearchShape ShapeOf(const storage::Collection& collection, const storage::SearchSnapshot& snapshot,
                    uint32_t nprobe, const core::filter::Filter* filter) {
  const bool filtered = filter != nullptr;
  // Evaluating the filter holds this many bitsets of a segment's rows, the selection one, and
  // deletes of selected rows one more (the copy they are cleared from, Segment::Select; a copy
  // of a selection's kept vectors goes into the filter cache, under its budget).
  const uint64_t bitsets = filtered ? 2 + storage::AttributeColumns::BitsetsToSelect(*filter) : 0;
  SearchShape shape;
  shape.dim = collection.dim();
  shape.refine_reads_raw = false;
  for (const core::IvfSegmentRef& seg : snapshot.segments) {
    shape.table_bytes_per_query += core::PreparedQueries::BytesPerQuery(*seg.model);
    if (core::IsFastScan(*seg.model)) shape.default_refine = core::kDefaultFastScanRefine;
    if (seg.model->encoding != core::VectorEncoding::kFlat) shape.refine_reads_raw = true;
    // As the engine plans each segment: exact ones whole, IVF ones at nprobe (filtered: every
    // partition ranked).
    const uint64_t nlist = seg.model->nlist();
    shape.plan_entries_per_query += seg.model->exact || filtered
                                        ? nlist
                                        : std::min<uint64_t>(std::max<uint32_t>(1, nprobe), nlist);
    if (filtered) {
      uint64_t rows = 0;
      for (uint64_t n : seg.partition_rows) rows += n;
      // Few matches are also listed, by id and by row (the exact_matches plan).
      const uint64_t listed = std::min<uint64_t>(rows, core::RowSelection::kMaxListed);
      shape.selection_bytes +=
          bitsets * (rows / 8 + 8) + 16 * nlist + listed * (8 + sizeof(core::RowRef));
    }
  }
  if (filtered) {
    shape.selection_bytes +=
        bitsets * (snapshot.memtable.rows() / 8 + 8) + 16 * snapshot.memtable.blocks.size();
  }
  return shape;
}

// The engine's results as the response carries them: packed ids and distances, per-hit
// entries (always with vectors or attributes, which are attached to the hits later), or both.
void AppendResults(const std::vector<core::QueryResult>& results, const v1::SearchRequest& req,
                   v1::SearchResponse* resp) {
  for (const core::QueryResult& result : results) {
    v1::SearchResult* out = resp->add_results();
    ToProto(result.stats, out->mutable_stats());
    const bool per_hit = !req.packed_results() || req.include_vectors() || req.include_attributes();
    if (req.packed_results()) {
      out->mutable_ids()->Reserve(int(result.neighbors.size()));
      out->mutable_distances()->Reserve(int(result.neighbors.size()));
    }
    for (const core::Neighbor& n : result.neighbors) {
      if (req.packed_results()) {
        out->add_ids(n.id);
        out->add_distances(n.distance);
      }
      if (!per_hit) continue;
      v1::SearchHit* hit = out->add_hits();
      hit->set_id(n.id);
      hit->set_distance(n.distance);
    }
  }
}

}  // namespace

// The token of one search: the call's, or, with timeout_ms, one that also expires then.
std::shared_ptr<core::CancelToken> SearchToken(std::shared_ptr<core::CancelToken> call,
                                               uint32_t timeout_ms) {
  if (timeout_ms == 0) return call;
  const auto deadline = std::min(
      call->deadline(), core::CancelToken::Clock::now() + std::chrono::milliseconds(timeout_ms));
  auto token = std::make_shared<core::CancelToken>(deadline);
  // The call's cancellation reaches the search (one callback per search, as the token asks).
  call->OnCancel([token] { token->Cancel(); });
  return token;
}

void ShoalService::Search(CallbackServerContext* ctx, UnaryReactor* r, const v1::SearchRequest* req,
                          v1::SearchResponse* resp) {
  if (absl::Status admitted = Admit(ctx); !admitted.ok()) return r->FinishWith(admitted);
  SearchCall call;
  call.req = req;
  call.resp = resp;
  call.cancel = SearchToken(r->cancel_token(), req->timeout_ms());
  call.peer = ctx->peer();
  RunSearch(std::move(call), Guarded(r, [r](absl::Status status) { r->FinishWith(status); }));
}

// A SearchDone that runs once: an exception after the search answered must not answer again.
class OnceDone {
 public:
  explicit OnceDone(ShoalService::SearchDone done) : done_(std::move(done)) {}
  void operator()(absl::Status status) {
    if (!called_.exchange(true)) std::move(done_)(std::move(status));
  }

 private:
  std::atomic<bool> called_{false};
  ShoalService::SearchDone done_;
};

namespace {

// Wraps work that ends in `once`: an exception answers INTERNAL instead of escaping.
template <typename Fn>
auto GuardedSearch(std::shared_ptr<OnceDone> once, Fn fn) {
  return [once = std::move(once), fn = std::move(fn)](auto&&... args) mutable {
    try {
      fn(std::forward<decltype(args)>(args)...);
    } catch (const std::exception& e) {
      (*once)(InternalErrorIn("Search", e.what()));
    } catch (...) {
      (*once)(InternalErrorIn("Search", "unknown exception"));
    }
  };
}

}  // namespace

void ShoalService::RunSearch(SearchCall call, SearchDone done) {
  auto once = std::make_shared<OnceDone>(std::move(done));
  const v1::SearchRequest* req = call.req;
  call.resp->set_tag(req->tag());
  if (!admitting_.load()) return (*once)(absl::UnavailableError("the server is shutting down"));
  if (absl::Status s = call.cancel->Check(); !s.ok()) return (*once)(s);
  auto found = Lookup(req->collection(), "collection");
  absl::Status s = found.status();
  if (s.ok()) s = ValidateSearch(*req, (*found)->dim());
  if (!s.ok()) return (*once)(s);
  absl::StatusOr<std::shared_ptr<const core::filter::Filter>> filter = ParseFilter(req->filter());
  if (!filter.ok()) return (*once)(filter.status());
  std::shared_ptr<storage::Collection> collection = *std::move(found);
  const uint32_t collection_nprobe = collection->manifest()->index.default_nprobe;
  const uint32_t nprobe = req->nprobe()       ? req->nprobe()
                          : collection_nprobe ? collection_nprobe
                                              : options_.default_nprobe;
  storage::SearchSnapshot snapshot = collection->SearchView();
  absl::StatusOr<uint64_t> cost =
      SearchCost(*req, ShapeOf(*collection, snapshot, nprobe, filter->get()), options_.limits);
  if (!cost.ok()) return (*once)(cost.status());
  // This connection's share first: a greedy client is refused before it takes a server slot.
  PeerSlots::Slot peer_slot;
  if (call.peer) {
    absl::StatusOr<PeerSlots::Slot> acquired = peer_slots_.Acquire(*call.peer);
    if (!acquired.ok()) {
      metrics_->CountRefusal(Refusal::kPeerSlots);
      return (*once)(acquired.status());
    }
    peer_slot = *std::move(acquired);
  }
  if (inflight_searches_.fetch_add(1) >= options_.max_inflight_searches) {
    inflight_searches_.fetch_sub(1);
    metrics_->CountRefusal(Refusal::kServerSlots);
    return (*once)(absl::ResourceExhaustedError(absl::StrCat(
        "too many searches in flight (search.max_inflight = ", options_.max_inflight_searches,
        "); retry with backoff")));
  }
  // From here the slot is returned on every path, an exception's included.
  SearchSlot slot(this);
  auto reservation = inflight_bytes_.Acquire(*cost);
  if (!reservation.ok()) {
    metrics_->CountRefusal(Refusal::kInflightBytes);
    return (*once)(reservation.status());
  }
  // The engine request of this search's batch, built when the batch starts (a snapshot as new
  // as every search in it).
  auto prepare = [this, collection, filter = *filter, k = size_t(req->k()), nprobe,
                  refine = req->refine_factor()] {
    core::IvfSearchRequest search =
        ToEngineRequest(*collection, collection->SearchView(filter.get()), k, nprobe, refine);
    search.options.batch_partitions = options_.batch_partitions;
    search.options.batch_bytes = options_.batch_bytes;
    search.options.max_pinned_bytes = options_.max_pinned_bytes;
    search.share = scan_share_;
    return search;
  };
  auto finish = [this, once, req, resp = call.resp, collection, slot = std::move(slot),
                 peer_slot = std::move(peer_slot), reservation = *std::move(reservation)](
                    absl::StatusOr<std::vector<core::QueryResult>> results) mutable {
    slot.Release();
    FinishSearch(once, req, resp, collection, std::move(peer_slot), std::move(reservation),
                 std::move(results));
  };
  std::vector<float> queries = EngineQueries(*collection, *req);
  const bool filtered = *filter != nullptr;
  if (!batcher_) {
    auto start = [this, prepare = std::move(prepare), queries = std::move(queries),
                  n = size_t(req->queries_size()), cancel = call.cancel,
                  done = GuardedSearch(once, std::move(finish))]() mutable {
      core::IvfSearchRequest search = prepare();
      search.queries = std::move(queries);
      search.num_queries = n;
      search.cancel = std::move(cancel);
      core::IvfSearch(*cpu_, std::move(search), std::move(done));
    };
    // A filter's evaluation is CPU work: on the arena, not this thread (a snapshot alone is
    // cheaper than the hop).
    if (filtered) return cpu_->Submit(GuardedSearch(once, std::move(start)));
    return GuardedSearch(once, std::move(start))();
  }
  core::SearchBatcher::Search search{core::BatchKey{collection.get(), size_t(req->k()), nprobe,
                                                    req->refine_factor(), req->filter()},
                                     std::move(prepare),
                                     filtered,
                                     std::move(queries),
                                     size_t(req->queries_size()),
                                     call.cancel,
                                     GuardedSearch(once, std::move(finish))};
  batcher_->Submit(std::move(search));
}

void ShoalService::FinishSearch(const std::shared_ptr<OnceDone>& once, const v1::SearchRequest* req,
                                v1::SearchResponse* resp,
                                const std::shared_ptr<storage::Collection>& collection,
                                PeerSlots::Slot peer_slot, InflightBytes::Reservation reservation,
                                absl::StatusOr<std::vector<core::QueryResult>> results) {
  if (!results.ok()) {
    reservation.Release();
    peer_slot.Release();
    return (*once)(results.status());
  }
  AppendResults(*results, *req, resp);
  if (!req->include_vectors() && !req->include_attributes()) {
    reservation.Release();
    peer_slot.Release();
    return (*once)(absl::OkStatus());
  }
  // Vectors and attributes may live in segments (blocking reads): not on the arena.
  admin_->Submit(
      GuardedSearch(once, [this, once, req, resp, collection, peer_slot = std::move(peer_slot),
                           reservation = std::move(reservation)]() mutable {
        absl::Status attached =
            AttachPoints(*collection, *req, options_.limits.max_response_bytes, resp);
        reservation.Release();
        peer_slot.Release();
        (*once)(attached);
      }));
}

ShoalService::SearchSlot::SearchSlot(ShoalService* service) : service_(service) {
  service_->metrics_->search_inflight().Increment();
}

void ShoalService::SearchSlot::Release() {
  if (ShoalService* s = std::exchange(service_, nullptr)) {
    s->inflight_searches_.fetch_sub(1);
    s->metrics_->search_inflight().Decrement();
  }
}

absl::Status ShoalService::AttachPoints(const storage::Collection& collection,
                                        const v1::SearchRequest& req, uint64_t max_response_bytes,
                                        v1::SearchResponse* resp) {
  // Attributes are not in the request's estimate: count what is attached as it grows.
  uint64_t wire_bytes = resp->ByteSizeLong();
  for (v1::SearchResult& result : *resp->mutable_results()) {
    for (v1::SearchHit& hit : *result.mutable_hits()) {
      const uint64_t id = hit.id();
      for (const auto& p : collection.Get({&id, 1}, req.include_vectors())) {
        wire_bytes += p.vector.size() * sizeof(float) + p.attributes.size() + 8;
        if (wire_bytes > max_response_bytes) {
          return absl::ResourceExhaustedError(absl::StrCat(
              "the response with vectors and attributes would be over server.max_message_bytes (",
              max_response_bytes, " bytes); ask for fewer queries, a smaller k or no attributes"));
        }
        hit.mutable_vector()->Assign(p.vector.begin(), p.vector.end());
        if (req.include_attributes() && !p.attributes.empty()) {
          if (auto attrs = storage::DecodeAttributes(p.attributes); attrs.ok()) {
            ToProto(*attrs, hit.mutable_attributes());
          }
        }
      }
    }
  }
  return absl::OkStatus();
}

// BuildIndex and Flush: block a maintenance thread for the work (never an admin one, so a build
// cannot starve Get or create/drop); the CPU part runs on the arena (I-2), so no arena thread
// waits.
template <typename Response>
void ShoalService::RunMaintenance(
    CallbackServerContext* ctx, UnaryReactor* r, const std::string& name, Response* resp,
    absl::StatusOr<std::string> (storage::Collection::*op)(core::Executor&)) {
  auto c = AdmitAndLookup(ctx, name, "collection");
  if (!c.ok()) {
    r->FinishWith(c.status());
    return;
  }
  maintenance()->Submit(Guarded(r, [this, r, resp, op, collection = *c] {
    auto message = ((*collection).*op)(*cpu_);
    if (message.ok()) resp->set_message(*message);
    r->FinishWith(message.status());
  }));
}

void ShoalService::BuildIndex(CallbackServerContext* ctx, UnaryReactor* r,
                              const v1::BuildIndexRequest* req, v1::BuildIndexResponse* resp) {
  RunMaintenance(ctx, r, req->collection(), resp, &storage::Collection::BuildIndex);
}

void ShoalService::Flush(CallbackServerContext* ctx, UnaryReactor* r, const v1::FlushRequest* req,
                         v1::FlushResponse* resp) {
  RunMaintenance(ctx, r, req->collection(), resp, &storage::Collection::Flush);
}
void ShoalService::MaybeFlush(const std::shared_ptr<storage::Collection>& collection) noexcept {
  try {
    QueueFlushIfDue(collection);
  } catch (const std::exception& e) {
    core::Logger("server")->error("{}: queueing a background flush: {}", collection->name(),
                                  e.what());
  }
}

void ShoalService::QueueFlushIfDue(const std::shared_ptr<storage::Collection>& collection) {
  const storage::CollectionStats stats = collection->Stats();
  // Every collection flushes, FLAT ones (and IVF ones never built) into exact segments.
  if (stats.memtable_rows < options_.flush_rows) return;
  {
    absl::MutexLock lock(&flush_mu_);
    if (!flushing_.insert(collection->name()).second) return;
  }
  maintenance()->Submit([this, collection] {
    absl::Status flushed;
    try {
      flushed = collection->Flush(*cpu_).status();
    } catch (const std::exception& e) {  // e.g. bad_alloc: the flag below must still clear
      flushed = absl::InternalError(e.what());
    }
    if (!flushed.ok()) {
      core::Logger("server")->error("{}: background flush failed: {}", collection->name(),
                                    flushed.ToString());
    }
    {
      absl::MutexLock lock(&flush_mu_);
      flushing_.erase(collection->name());
    }
    // Rows that arrived during this flush asked for one and were turned away above: look again
    // (a bulk load that ends mid-flush would otherwise leave them in the memtable).
    if (flushed.ok()) MaybeFlush(collection);
  });
}

}  // namespace shoal::server
