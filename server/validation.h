// Request validation (I-7): every RPC is checked here before any work starts. Errors are
// INVALID_ARGUMENT with a message that names the offending field, e.g.
// "queries[3].values[17]: not a finite number", or "queries[3].values: squared norm ... is above
// ..." for a vector whose distances would overflow float.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal::server {

inline constexpr uint32_t kMaxDim = 65536;
inline constexpr uint32_t kMaxK = 10000;
inline constexpr uint32_t kMaxNlist = 65536;
inline constexpr int kMaxQueriesPerRequest = 10000;
inline constexpr int kMaxIdsPerRequest = 100000;
inline constexpr int kMaxListValues = 1024;  // scalars in one list attribute value
// Largest squared L2 norm of a query or stored vector: FLT_MAX / 8 (about 4.25e37), so no
// distance or inner product between two accepted vectors overflows float.
inline constexpr double kMaxSquaredNorm = double(std::numeric_limits<float>::max()) / 8;

absl::Status ValidateCollectionName(const std::string& name, const char* field);
absl::Status ValidateCreate(const v1::CreateCollectionRequest& req);
absl::Status ValidateUpsert(const v1::UpsertRequest& req, uint32_t dim);
absl::Status ValidateIds(const google::protobuf::RepeatedField<uint64_t>& ids);
absl::Status ValidateSearch(const v1::SearchRequest& req, uint32_t dim);

}  // namespace shoal::server
