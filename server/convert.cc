#include "server/convert.h"

#include <type_traits>
#include <variant>

namespace shoal::server {

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

core::Metric FromProto(v1::Metric metric) {
  switch (metric) {
    case v1::METRIC_INNER_PRODUCT:
      return core::Metric::kInnerProduct;
    case v1::METRIC_COSINE:
      return core::Metric::kCosine;
    default:
      return core::Metric::kL2;
  }
}

v1::Metric ToProto(core::Metric metric) {
  switch (metric) {
    case core::Metric::kInnerProduct:
      return v1::METRIC_INNER_PRODUCT;
    case core::Metric::kCosine:
      return v1::METRIC_COSINE;
    case core::Metric::kL2:
      break;
  }
  return v1::METRIC_L2;
}

core::IndexSpec FromProto(const v1::IndexSpec& spec) {
  core::IndexSpec out;
  switch (spec.type()) {
    case v1::INDEX_IVF_FLAT:
      out.type = core::IndexType::kIvfFlat;
      break;
    case v1::INDEX_IVF_SQ8:
      out.type = core::IndexType::kIvfSq8;
      break;
    case v1::INDEX_IVF_PQ:
      out.type = core::IndexType::kIvfPq;
      break;
    default:
      out.type = core::IndexType::kFlat;
  }
  out.nlist = spec.nlist();
  out.pq_m = spec.pq_m();
  out.pq_bits = spec.pq_bits();
  out.default_nprobe = spec.default_nprobe();
  return out;
}

v1::IndexSpec ToProto(const core::IndexSpec& spec) {
  v1::IndexSpec out;
  out.set_type(static_cast<v1::IndexType>(static_cast<int>(spec.type)));
  out.set_nlist(spec.nlist);
  out.set_pq_m(spec.pq_m);
  out.set_pq_bits(spec.pq_bits);
  out.set_default_nprobe(spec.default_nprobe);
  return out;
}

namespace {

// REQUIRES: a validated scalar (set, not a list).
core::AttributeScalar ScalarFromProto(const v1::Value& value) {
  switch (value.kind_case()) {
    case v1::Value::kIntValue:
      return int64_t(value.int_value());
    case v1::Value::kDoubleValue:
      return value.double_value();
    case v1::Value::kStringValue:
      return value.string_value();
    default:
      return value.bool_value();
  }
}

void ScalarToProto(const core::AttributeScalar& value, v1::Value* out) {
  if (const auto* i = std::get_if<int64_t>(&value)) out->set_int_value(*i);
  if (const auto* d = std::get_if<double>(&value)) out->set_double_value(*d);
  if (const auto* s = std::get_if<std::string>(&value)) out->set_string_value(*s);
  if (const auto* b = std::get_if<bool>(&value)) out->set_bool_value(*b);
}

}  // namespace

core::Attributes FromProto(const google::protobuf::Map<std::string, v1::Value>& attributes) {
  core::Attributes out;
  for (const auto& [key, value] : attributes) {
    if (value.kind_case() == v1::Value::KIND_NOT_SET) continue;
    if (value.kind_case() != v1::Value::kListValue) {
      std::visit([&out, &k = key](auto&& v) { out[k] = std::move(v); }, ScalarFromProto(value));
      continue;
    }
    core::AttributeList list;
    list.reserve(size_t(value.list_value().values_size()));
    for (const v1::Value& element : value.list_value().values()) {
      if (element.kind_case() == v1::Value::KIND_NOT_SET) continue;
      if (element.kind_case() == v1::Value::kListValue) continue;
      list.push_back(ScalarFromProto(element));
    }
    out[key] = std::move(list);
  }
  return out;
}

void ToProto(const core::Attributes& attributes,
             google::protobuf::Map<std::string, v1::Value>* out) {
  for (const auto& [key, value] : attributes) {
    v1::Value& v = (*out)[key];
    if (const auto* list = std::get_if<core::AttributeList>(&value)) {
      v1::ValueList* values = v.mutable_list_value();
      for (const core::AttributeScalar& element : *list)
        ScalarToProto(element, values->add_values());
      continue;
    }
    std::visit(
        [&v](const auto& scalar) {
          if constexpr (!std::is_same_v<std::decay_t<decltype(scalar)>, core::AttributeList>) {
            ScalarToProto(scalar, &v);
          }
        },
        value);
  }
}

void ToProto(const core::QueryStats& stats, v1::QueryStats* out) {
  out->set_partitions_probed(stats.partitions_probed);
  out->set_partitions_cached(stats.partitions_cached);
  out->set_bytes_read(stats.bytes_read);
  out->set_vectors_scanned(stats.vectors_scanned);
  out->set_queue_us(stats.queue_us);
  out->set_io_us(stats.io_us);
  out->set_cpu_us(stats.cpu_us);
  switch (stats.plan) {
    case core::FilterPlan::kNone:
      return;
    case core::FilterPlan::kExactMatches:
      out->set_plan("exact_matches");
      break;
    case core::FilterPlan::kIvfBitmap:
      out->set_plan("ivf_bitmap");
      break;
    case core::FilterPlan::kSelectiveIvf:
      out->set_plan("selective_ivf");
      break;
  }
  out->set_rows_matched(stats.rows_matched);
  out->set_partitions_skipped(stats.partitions_skipped);
  out->set_matching_rows_scanned(stats.matching_rows_scanned);
}

std::vector<storage::PointRecord> ToPointRecords(const v1::UpsertRequest& req) {
  std::vector<storage::PointRecord> points(req.points_size());
  for (int i = 0; i < req.points_size(); ++i) {
    const v1::Point& p = req.points(i);
    points[i].id = p.id();
    points[i].vector.assign(p.vector().begin(), p.vector().end());
    if (!p.attributes().empty()) {
      points[i].attributes = storage::EncodeAttributes(FromProto(p.attributes()));
    }
  }
  return points;
}

}  // namespace shoal::server
