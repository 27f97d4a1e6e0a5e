#include "server/convert.h"

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

core::Attributes FromProto(const google::protobuf::Map<std::string, v1::Value>& attributes) {
  core::Attributes out;
  for (const auto& [key, value] : attributes) {
    switch (value.kind_case()) {
      case v1::Value::kIntValue:
        out[key] = int64_t(value.int_value());
        break;
      case v1::Value::kDoubleValue:
        out[key] = value.double_value();
        break;
      case v1::Value::kStringValue:
        out[key] = value.string_value();
        break;
      case v1::Value::kBoolValue:
        out[key] = value.bool_value();
        break;
      case v1::Value::KIND_NOT_SET:
        break;
    }
  }
  return out;
}

void ToProto(const core::Attributes& attributes,
             google::protobuf::Map<std::string, v1::Value>* out) {
  for (const auto& [key, value] : attributes) {
    v1::Value& v = (*out)[key];
    if (const auto* i = std::get_if<int64_t>(&value)) v.set_int_value(*i);
    if (const auto* d = std::get_if<double>(&value)) v.set_double_value(*d);
    if (const auto* s = std::get_if<std::string>(&value)) v.set_string_value(*s);
    if (const auto* b = std::get_if<bool>(&value)) v.set_bool_value(*b);
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
