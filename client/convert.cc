#include "client/convert.h"

#include <type_traits>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"

namespace shoal::client_internal {

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

namespace {

void ScalarToProto(const AttributeScalar& value, v1::Value* out) {
  if (const auto* i = std::get_if<int64_t>(&value)) out->set_int_value(*i);
  if (const auto* d = std::get_if<double>(&value)) out->set_double_value(*d);
  if (const auto* s = std::get_if<std::string>(&value)) out->set_string_value(*s);
  if (const auto* b = std::get_if<bool>(&value)) out->set_bool_value(*b);
}

// False: not a scalar (unset, or a list).
bool ScalarFromProto(const v1::Value& v, AttributeScalar* out) {
  switch (v.kind_case()) {
    case v1::Value::kIntValue:
      *out = int64_t(v.int_value());
      return true;
    case v1::Value::kDoubleValue:
      *out = v.double_value();
      return true;
    case v1::Value::kStringValue:
      *out = v.string_value();
      return true;
    case v1::Value::kBoolValue:
      *out = v.bool_value();
      return true;
    default:
      return false;
  }
}

}  // namespace

void ToProto(const Attributes& attrs, google::protobuf::Map<std::string, v1::Value>* out) {
  for (const auto& [key, value] : attrs) {
    v1::Value& v = (*out)[key];
    if (const auto* list = std::get_if<AttributeList>(&value)) {
      v1::ValueList* values = v.mutable_list_value();
      for (const AttributeScalar& element : *list) ScalarToProto(element, values->add_values());
      continue;
    }
    std::visit(
        [&v](const auto& scalar) {
          if constexpr (!std::is_same_v<std::decay_t<decltype(scalar)>, AttributeList>) {
            ScalarToProto(scalar, &v);
          }
        },
        value);
  }
}

Attributes FromProto(const google::protobuf::Map<std::string, v1::Value>& attrs) {
  Attributes out;
  for (const auto& [key, v] : attrs) {
    AttributeScalar scalar;
    if (ScalarFromProto(v, &scalar)) {
      std::visit([&out, &k = key](auto&& s) { out[k] = std::move(s); }, std::move(scalar));
    } else if (v.kind_case() == v1::Value::kListValue) {
      AttributeList list;
      for (const v1::Value& element : v.list_value().values()) {
        if (ScalarFromProto(element, &scalar)) list.push_back(std::move(scalar));
      }
      out[key] = std::move(list);
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
               in.index().default_nprobe(), in.index().pq_bits()};
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
  out.attribute_memory_bytes = in.attribute_memory_bytes();
  out.error = in.error();
  out.build_phase = in.build_phase();
  out.build_percent = in.build_percent();
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
               s.cpu_us(),
               s.plan(),
               s.rows_matched(),
               s.partitions_skipped(),
               s.matching_rows_scanned()};
  return out;
}

v1::SearchRequest MakeSearchRequest(const std::string& collection,
                                    const std::vector<std::vector<float>>& queries, size_t first,
                                    size_t count, const SearchOptions& options) {
  v1::SearchRequest req;
  req.set_collection(collection);
  for (size_t i = first; i < first + count && i < queries.size(); ++i) {
    req.add_queries()->mutable_values()->Assign(queries[i].begin(), queries[i].end());
  }
  req.set_k(options.k);
  req.set_nprobe(options.nprobe);
  req.set_refine_factor(options.refine_factor);
  req.set_include_vectors(options.include_vectors);
  req.set_include_attributes(options.include_attributes);
  req.set_filter(options.filter);
  req.set_packed_results(true);  // smaller on the wire; hits still come for per-hit data
  return req;
}

absl::StatusOr<std::vector<SearchResult>> FromProto(const v1::SearchResponse& resp,
                                                    size_t num_queries) {
  if (size_t(resp.results_size()) != num_queries) {
    return absl::InternalError(absl::StrCat("server answered ", resp.results_size(),
                                            " results for ", num_queries, " queries"));
  }
  std::vector<SearchResult> out;
  out.reserve(num_queries);
  for (const auto& r : resp.results()) out.push_back(FromProto(r));
  return out;
}

}  // namespace shoal::client_internal
