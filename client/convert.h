// Conversions between the SDK's plain structs (client/client.h) and the wire messages.
// Internal to shoal_client: not installed.
//
// Thread-safety: pure functions.
#pragma once

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "client/client.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal::client_internal {

absl::Status FromGrpc(const grpc::Status& s);
v1::Metric ToProto(Metric m);
Metric FromProto(v1::Metric m);
IndexType FromProto(v1::IndexType t);
v1::IndexType ToProto(IndexType t);
void ToProto(const Attributes& attrs, google::protobuf::Map<std::string, v1::Value>* out);
Attributes FromProto(const google::protobuf::Map<std::string, v1::Value>& attrs);
void ToProto(const Point& p, v1::Point* out);
CollectionInfo FromProto(const v1::CollectionInfo& in);
SearchResult FromProto(const v1::SearchResult& in);

// A SearchRequest for queries[first, first + count), asking for packed results.
v1::SearchRequest MakeSearchRequest(const std::string& collection,
                                    const std::vector<std::vector<float>>& queries, size_t first,
                                    size_t count, const SearchOptions& options);

// One result per query of the request, or INTERNAL when the server answered another count.
absl::StatusOr<std::vector<SearchResult>> FromProto(const v1::SearchResponse& resp,
                                                    size_t num_queries);

}  // namespace shoal::client_internal
