// Shared by shoal-overload and shoal-soak (bench/load/README.md): shoald's memory from /proc,
// one sample of its /metrics, a channel that is its own TCP connection, and the bulk load.
//
// Thread-safety: stateless functions.
#pragma once

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "bench/harness/dataset.h"
#include "client/client.h"

namespace shoal::bench {

// VmRSS of `pid` in bytes (0 when unreadable).
uint64_t RssBytes(pid_t pid);

// The value of the first sample of /metrics on 127.0.0.1:<http_port> whose line starts with
// `series` (a name with its labels, e.g. `shoal_cache_bytes{state="used"}`); -1 when absent.
double ScrapeSample(int http_port, const std::string& series);

// A channel to `addr` with its own connection (gRPC shares one between channels of a process
// created with equal arguments; shoald's limits are per connection).
std::shared_ptr<grpc::Channel> OwnChannel(const std::string& addr);

// Upserts the rows of `data` (ids 0..n-1) through one upsert stream.
absl::Status LoadRows(Client& client, const std::string& collection, const Dataset& data);

std::string Ms(double ns);  // "12.3 ms"
std::string MiB(double b);  // "12.3 MiB"

}  // namespace shoal::bench
