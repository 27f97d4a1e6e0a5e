// Conversions between the API's protobuf messages and Shoal's own types, and between
// absl::Status and grpc::Status (their codes are numerically the same).
//
// Thread-safety: pure functions.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "core/base/attributes.h"
#include "core/index/search_types.h"
#include "shoal/v1/shoal.pb.h"
#include "storage/format/manifest_format.h"
#include "storage/format/wal_format.h"

namespace shoal::server {

grpc::Status ToGrpc(const absl::Status& status);

core::Metric FromProto(v1::Metric metric);
v1::Metric ToProto(core::Metric metric);
core::IndexSpec FromProto(const v1::IndexSpec& spec);
v1::IndexSpec ToProto(const core::IndexSpec& spec);

core::Attributes FromProto(const google::protobuf::Map<std::string, v1::Value>& attributes);
void ToProto(const core::Attributes& attributes,
             google::protobuf::Map<std::string, v1::Value>* out);

void ToProto(const core::QueryStats& stats, v1::QueryStats* out);

// The points of an upsert as WAL records (attributes encoded).
std::vector<storage::PointRecord> ToPointRecords(const v1::UpsertRequest& req);

}  // namespace shoal::server
