#include "server/validation.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace shoal::server {
namespace {

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

// Checks length and finiteness of a packed float field, and that its squared norm leaves every
// distance to another accepted vector finite in float: |a - b|^2 <= (|a| + |b|)^2 <= 4 max
// (|a|^2, |b|^2) and |<a, b>| <= max(|a|^2, |b|^2), so a norm^2 of at most kMaxSquaredNorm
// (FLT_MAX / 8, a factor 2 of margin for rounding) keeps scores, and a cosine query's
// normalisation, finite. Summed in double, which cannot overflow for float inputs.
absl::Status ValidateVector(const google::protobuf::RepeatedField<float>& v, uint32_t dim,
                            const std::string& field) {
  if (uint32_t(v.size()) != dim) {
    return Invalid(
        absl::StrCat(field, ": has ", v.size(), " values, the collection's dim is ", dim));
  }
  double norm2 = 0;
  for (int i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) return Invalid(absl::StrCat(field, "[", i, "]: not a finite number"));
    norm2 += double(v[i]) * double(v[i]);
  }
  if (norm2 > kMaxSquaredNorm) {
    return Invalid(absl::StrCat(field, ": squared norm ", norm2, " is above ", kMaxSquaredNorm,
                                " (distances to it would overflow float)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateCollectionName(const std::string& name, const char* field) {
  if (name.empty()) return Invalid(absl::StrCat(field, ": required"));
  if (name.size() > 64) return Invalid(absl::StrCat(field, ": longer than 64 characters"));
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return Invalid(absl::StrCat(field, ": must match [A-Za-z0-9_-]{1,64}"));
  }
  return absl::OkStatus();
}

absl::Status ValidateCreate(const v1::CreateCollectionRequest& req) {
  if (auto s = ValidateCollectionName(req.name(), "name"); !s.ok()) return s;
  if (req.dim() == 0 || req.dim() > kMaxDim) {
    return Invalid(absl::StrCat("dim: must be between 1 and ", kMaxDim, ", got ", req.dim()));
  }
  if (!v1::Metric_IsValid(req.metric()) || req.metric() == v1::METRIC_UNSPECIFIED) {
    return Invalid("metric: required: METRIC_L2, METRIC_INNER_PRODUCT or METRIC_COSINE");
  }
  const v1::IndexSpec& index = req.index();
  if (!v1::IndexType_IsValid(index.type())) return Invalid("index.type: unknown index type");
  if (index.nlist() > kMaxNlist) {
    return Invalid(absl::StrCat("index.nlist: must be at most ", kMaxNlist));
  }
  if (index.default_nprobe() > kMaxNlist) {
    return Invalid(absl::StrCat("index.default_nprobe: must be at most ", kMaxNlist));
  }
  if (index.type() == v1::INDEX_IVF_PQ) {
    if (index.pq_m() == 0 || req.dim() % index.pq_m() != 0) {
      return Invalid(absl::StrCat("index.pq_m: must be > 0 and divide dim ", req.dim()));
    }
    if (index.pq_bits() != 0 && index.pq_bits() != 4 && index.pq_bits() != 8) {
      return Invalid(absl::StrCat("index.pq_bits: must be 0, 4 or 8, got ", index.pq_bits()));
    }
    if (index.pq_bits() == 4 && index.pq_m() % 2 != 0) {
      return Invalid(absl::StrCat("index.pq_m: must be even for pq_bits 4, got ", index.pq_m()));
    }
  } else if (index.pq_m() != 0) {
    return Invalid("index.pq_m: only valid for INDEX_IVF_PQ");
  } else if (index.pq_bits() != 0) {
    return Invalid("index.pq_bits: only valid for INDEX_IVF_PQ");
  }
  return absl::OkStatus();
}

// A list holds at most kMaxListValues set scalars.
absl::Status ValidateValue(const v1::Value& value, const std::string& field) {
  if (value.kind_case() == v1::Value::KIND_NOT_SET) return Invalid(field + ": value not set");
  if (value.kind_case() != v1::Value::kListValue) return absl::OkStatus();
  const auto& values = value.list_value().values();
  if (values.size() > kMaxListValues) {
    return Invalid(absl::StrCat(field, ": a list holds at most ", kMaxListValues, " values"));
  }
  for (int i = 0; i < values.size(); ++i) {
    if (values[i].kind_case() == v1::Value::KIND_NOT_SET) {
      return Invalid(absl::StrCat(field, "[", i, "]: value not set"));
    }
    if (values[i].kind_case() == v1::Value::kListValue) {
      return Invalid(absl::StrCat(field, "[", i, "]: lists do not nest"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateUpsert(const v1::UpsertRequest& req, uint32_t dim) {
  if (req.points().empty()) return Invalid("points: empty");
  for (int i = 0; i < req.points_size(); ++i) {
    const v1::Point& p = req.points(i);
    const std::string field = absl::StrCat("points[", i, "]");
    if (auto s = ValidateVector(p.vector(), dim, field + ".vector"); !s.ok()) return s;
    for (const auto& [key, value] : p.attributes()) {
      if (key.empty() || key.size() > 256) {
        return Invalid(field + ".attributes: keys must be 1 to 256 bytes");
      }
      if (auto s = ValidateValue(value, absl::StrCat(field, ".attributes[", key, "]")); !s.ok()) {
        return s;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateIds(const google::protobuf::RepeatedField<uint64_t>& ids) {
  if (ids.empty()) return Invalid("ids: empty");
  if (ids.size() > kMaxIdsPerRequest) {
    return Invalid(absl::StrCat("ids: more than ", kMaxIdsPerRequest, " in one request"));
  }
  return absl::OkStatus();
}

absl::Status ValidateSearch(const v1::SearchRequest& req, uint32_t dim) {
  if (req.k() == 0 || req.k() > kMaxK) {
    return Invalid(absl::StrCat("k: must be between 1 and ", kMaxK, ", got ", req.k()));
  }
  if (req.nprobe() > kMaxNlist) {
    return Invalid(absl::StrCat("nprobe: must be at most ", kMaxNlist));
  }
  if (req.queries().empty()) return Invalid("queries: empty");
  if (req.queries_size() > kMaxQueriesPerRequest) {
    return Invalid(absl::StrCat("queries: more than ", kMaxQueriesPerRequest, " in one request"));
  }
  for (int i = 0; i < req.queries_size(); ++i) {
    auto s = ValidateVector(req.queries(i).values(), dim, absl::StrCat("queries[", i, "].values"));
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace shoal::server
