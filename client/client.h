// shoal::Client: the C++ SDK for shoald.
//
//   shoal::Client c("localhost:7700");
//   auto result = c.Search("fmnist", query, {.k = 10, .nprobe = 16});
//
// Every call carries a deadline (ClientOptions::timeout unless given) and is retried with
// exponential backoff when the server answers UNAVAILABLE (every Shoal RPC is idempotent:
// upserts are keyed by id). Errors come back as absl::Status with the server's code and
// message. No protobuf type appears in this header.
//
// Thread-safety: a Client is thread-safe and meant to be shared; an UpsertWriter is not.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"

namespace shoal {

enum class Metric { kL2, kInnerProduct, kCosine };
enum class IndexType { kFlat, kIvfFlat, kIvfSq8, kIvfPq };

using AttributeValue = std::variant<int64_t, double, std::string, bool>;
using Attributes = std::map<std::string, AttributeValue>;

struct IndexSpec {
  IndexType type = IndexType::kFlat;
  uint32_t nlist = 0;
  uint32_t pq_m = 0;
  uint32_t default_nprobe = 0;
};

struct CollectionSpec {
  std::string name;
  uint32_t dim = 0;
  Metric metric = Metric::kL2;
  IndexSpec index;
};

struct CollectionInfo {
  std::string name;
  uint32_t dim = 0;
  Metric metric = Metric::kL2;
  IndexSpec index;
  uint64_t num_vectors = 0;
  uint64_t num_indexed = 0;
  uint32_t num_segments = 0;
  std::string index_state;  // "none", "building", "ready", "broken"
  uint64_t disk_bytes = 0;
  std::string error;  // when "broken": why it did not open, naming the file
};

struct Point {
  uint64_t id = 0;
  std::vector<float> vector;
  Attributes attributes;
};

struct SearchOptions {
  uint32_t k = 10;
  uint32_t nprobe = 0;  // 0 = the collection's default
  uint32_t refine_factor = 0;
  bool include_vectors = false;
  bool include_attributes = false;
};

struct Hit {
  uint64_t id = 0;
  float distance = 0;  // L2: squared distance, ascending; IP/cosine: similarity, descending
  std::vector<float> vector;
  Attributes attributes;
};

struct QueryStats {
  uint32_t partitions_probed = 0;
  uint32_t partitions_cached = 0;
  uint64_t bytes_read = 0;
  uint64_t vectors_scanned = 0;
  uint64_t queue_us = 0;
  uint64_t io_us = 0;
  uint64_t cpu_us = 0;
};

struct SearchResult {
  std::vector<Hit> hits;
  QueryStats stats;
};

enum class HealthStatus { kUnknown, kServing, kNotServing, kServiceUnknown };

struct ClientOptions {
  std::chrono::milliseconds timeout{30000};  // deadline of each call
  int max_retries = 3;                       // on UNAVAILABLE only
  std::chrono::milliseconds initial_backoff{100};
  std::string api_key;  // sent as "authorization: Bearer <key>" when set
  int max_message_bytes = 64 << 20;
};

// Streams points into one collection (UpsertStream); durable when Finish() returns OK.
class UpsertWriter {
 public:
  virtual ~UpsertWriter() = default;
  // Sends one message. A false-y status means the stream broke; Finish() tells why.
  virtual absl::Status Write(const std::vector<Point>& points) = 0;
  // Half-closes and waits for the server: the number of points upserted.
  virtual absl::StatusOr<uint64_t> Finish() = 0;
};

class Client {
 public:
  explicit Client(const std::string& target, ClientOptions options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  absl::Status CreateCollection(const CollectionSpec& spec);
  absl::Status DropCollection(const std::string& name);
  absl::StatusOr<std::vector<CollectionInfo>> ListCollections();
  absl::StatusOr<CollectionInfo> DescribeCollection(const std::string& name);

  absl::StatusOr<uint64_t> Upsert(const std::string& collection, const std::vector<Point>& points);
  // The stream's deadline is `timeout` (default: 1 hour, for bulk loads).
  absl::StatusOr<std::unique_ptr<UpsertWriter>> OpenUpsertStream(
      const std::string& collection, std::chrono::milliseconds timeout = std::chrono::hours(1));
  absl::StatusOr<uint64_t> Delete(const std::string& collection, const std::vector<uint64_t>& ids);
  absl::StatusOr<std::vector<Point>> Get(const std::string& collection,
                                         const std::vector<uint64_t>& ids,
                                         bool include_vectors = false);

  absl::StatusOr<SearchResult> Search(const std::string& collection,
                                      const std::vector<float>& query,
                                      const SearchOptions& options = {});
  // Several queries in one request; one result per query, in order.
  absl::StatusOr<std::vector<SearchResult>> SearchBatch(
      const std::string& collection, const std::vector<std::vector<float>>& queries,
      const SearchOptions& options = {});

  absl::StatusOr<std::string> BuildIndex(const std::string& collection);
  absl::StatusOr<std::string> Flush(const std::string& collection);

  // grpc.health.v1 Check: "" for the whole server, a collection name for that collection.
  absl::StatusOr<HealthStatus> Health(const std::string& collection = "");

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

std::string MetricName(Metric metric);
std::string IndexTypeName(IndexType type);

}  // namespace shoal
