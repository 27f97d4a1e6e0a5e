// shoal::Client: the C++ SDK for shoald. Installed as <shoal/client.h>; an outside project
// uses it with find_package(shoal CONFIG) and target_link_libraries(app shoal::client).
//
//   shoal::Client c("localhost:7700");
//   auto result = c.Search("fmnist", query, {.k = 10, .nprobe = 16});       // blocking
//   c.SearchAsync("fmnist", query, {.k = 10}, [](absl::StatusOr<shoal::SearchResult> r) {...});
//   std::future<absl::StatusOr<shoal::SearchResult>> f = c.SearchAsync("fmnist", query);
//   auto all = c.SearchMany("fmnist", queries, {.k = 10}, {.batch = 100, .in_flight = 4});
//
// Every call carries a deadline (ClientOptions::timeout unless given). Idempotent calls
// (searches, reads, upserts — keyed by id —, deletes, flushes, health) are retried with
// jittered exponential backoff when the server answers UNAVAILABLE (RetryPolicy). Create,
// Drop and BuildIndex are NOT idempotent and never retried: after UNAVAILABLE the caller cannot
// know whether the server acted (a repeated Create would answer ALREADY_EXISTS for a
// collection this caller made, a repeated BuildIndex would build twice). Errors come back as
// absl::Status with the server's code and message. No protobuf type appears in this header.
//
// Asynchronous calls run on gRPC's callback API: no thread of the caller waits. Their
// callbacks run on a gRPC thread and must not block (hand long work to your own executor).
// ~Client waits for the asynchronous calls it started to finish (each has a deadline), so a
// callback never outlives its Client; a callback must therefore not destroy its Client.
//
// Thread-safety: a Client is thread-safe and meant to be shared; an UpsertWriter is not.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"

namespace shoal {

enum class Metric { kL2, kInnerProduct, kCosine };
enum class IndexType { kFlat, kIvfFlat, kIvfSq8, kIvfPq };

// An attribute is a scalar or a list of scalars (several tags on one point; a filter's
// comparison on a list is true when any element satisfies it).
using AttributeScalar = std::variant<int64_t, double, std::string, bool>;
using AttributeList = std::vector<AttributeScalar>;
using AttributeValue = std::variant<int64_t, double, std::string, bool, AttributeList>;
using Attributes = std::map<std::string, AttributeValue>;

struct IndexSpec {
  IndexType type = IndexType::kFlat;
  uint32_t nlist = 0;
  uint32_t pq_m = 0;
  uint32_t default_nprobe = 0;
  uint32_t pq_bits = 0;  // IVF_PQ: 0 or 8 = 8-bit codes; 4 = fast-scan (pq_m even)
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
  std::string error;                    // when "broken": why it did not open, naming the file
  std::string build_phase;              // while "building": "training", "assigning", "writing", ...
  uint32_t build_percent = 0;           // progress of build_phase, 0..100
  uint64_t attribute_memory_bytes = 0;  // attributes' columns for filtering, in memory
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
  // Only points that satisfy this filter (docs/filtering.md), e.g. "tenant = 42 and year >=
  // 2024"; empty: none. Every query gets min(k, matching points) hits.
  std::string filter;
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
  // Filtered searches: "exact_matches", "selective_ivf" or "ivf_bitmap" (empty without a
  // filter), the points that satisfy the filter, the partitions passed over, the matching
  // points scanned.
  std::string plan;
  uint64_t rows_matched = 0;
  uint32_t partitions_skipped = 0;
  uint64_t matching_rows_scanned = 0;
};

struct SearchResult {
  std::vector<Hit> hits;
  QueryStats stats;
};

enum class HealthStatus { kUnknown, kServing, kNotServing, kServiceUnknown };

// How idempotent calls are retried after UNAVAILABLE: attempt n+1 waits a random time in
// [b/2, b] with b = min(initial_backoff * multiplier^n, max_backoff).
struct RetryPolicy {
  int max_retries = 3;  // 0 = never retry
  std::chrono::milliseconds initial_backoff{100};
  std::chrono::milliseconds max_backoff{5000};
  double multiplier = 2.0;
};

// HTTP/2 keepalive pings, so a connection through a NAT or load balancer that silently drops
// idle flows is noticed before the next call hangs on it. shoald accepts pings every 10 s or
// slower; a shorter `time` makes it close the connection (GOAWAY too_many_pings).
struct KeepaliveOptions {
  std::chrono::milliseconds time{60000};     // ping after this long without traffic; 0 = off
  std::chrono::milliseconds timeout{20000};  // the connection is dead without an ack by then
  bool permit_without_calls = false;         // also ping while no call is active
};

// TLS towards shoald (its server.tls_cert). The files are PEM; they are read when the Client
// is made, and a file that cannot be read makes every call return INVALID_ARGUMENT naming it.
struct TlsOptions {
  std::string ca_file;    // roots that sign the server's certificate; empty: the system's roots
  std::string cert_file;  // client certificate chain, for mutual TLS (with key_file)
  std::string key_file;   // its private key (unencrypted)
  // The name checked in the server's certificate when it is not the target's host (tests,
  // connecting by IP address to a certificate made for a DNS name). Empty: the target's host.
  std::string server_name;
};

struct ClientOptions {
  std::chrono::milliseconds timeout{30000};  // default deadline of each call (and attempt)
  RetryPolicy retry;
  KeepaliveOptions keepalive;
  std::string api_key;            // sent as "authorization: Bearer <key>" when set
  std::optional<TlsOptions> tls;  // unset: plaintext
  int max_message_bytes = 64 << 20;
};

// How SearchMany splits its queries: `batch` queries per message, at most `in_flight` messages
// unanswered at once (keep it at most the server's search.stream_max_inflight, default 32).
struct SearchManyOptions {
  size_t batch = 100;
  size_t in_flight = 4;
};

using SearchCallback = std::function<void(absl::StatusOr<SearchResult>)>;
using SearchBatchCallback = std::function<void(absl::StatusOr<std::vector<SearchResult>>)>;

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

  // Not idempotent: never retried.
  absl::Status CreateCollection(const CollectionSpec& spec);
  absl::Status DropCollection(const std::string& name);
  absl::StatusOr<std::vector<CollectionInfo>> ListCollections();
  absl::StatusOr<CollectionInfo> DescribeCollection(const std::string& name);
  // Live points that satisfy `filter` (empty: every live point), exactly.
  absl::StatusOr<uint64_t> Count(const std::string& collection, const std::string& filter = "");

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

  // Asynchronous Search: returns at once; `done` runs exactly once, on a gRPC thread.
  void SearchAsync(const std::string& collection, const std::vector<float>& query,
                   const SearchOptions& options, SearchCallback done);
  std::future<absl::StatusOr<SearchResult>> SearchAsync(const std::string& collection,
                                                        const std::vector<float>& query,
                                                        const SearchOptions& options = {});
  // Asynchronous SearchBatch: one request, one result per query, in order.
  void SearchBatchAsync(const std::string& collection,
                        const std::vector<std::vector<float>>& queries,
                        const SearchOptions& options, SearchBatchCallback done);

  // A large query set over one SearchStream: messages of `many.batch` queries with at most
  // `many.in_flight` unanswered; one result per query, in query order. The first failed
  // message's status is the answer (no further message is sent). A server without
  // SearchStream is asked with unary requests, `many.in_flight` at a time.
  absl::StatusOr<std::vector<SearchResult>> SearchMany(
      const std::string& collection, const std::vector<std::vector<float>>& queries,
      const SearchOptions& options = {}, const SearchManyOptions& many = {});

  // Not idempotent: never retried.
  absl::StatusOr<std::string> BuildIndex(const std::string& collection);
  absl::StatusOr<std::string> Flush(const std::string& collection);

  // grpc.health.v1 Check: "" for the whole server, a collection name for that collection.
  absl::StatusOr<HealthStatus> Health(const std::string& collection = "");

  struct Impl;  // opaque: the channel, stubs and retry loop (not installed)

 private:
  std::unique_ptr<Impl> impl_;  // REQUIRES: outlives every asynchronous call (see ~Client)
};

std::string MetricName(Metric metric);
std::string IndexTypeName(IndexType type);
// The index type IndexTypeName() spells `name` ("flat", "ivf_flat", "ivf_sq8", "ivf_pq").
std::optional<IndexType> IndexTypeFromName(std::string_view name);

}  // namespace shoal
