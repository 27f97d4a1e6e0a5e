#include "bench/load/load_common.h"

#include <httplib.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"

namespace shoal::bench {

uint64_t RssBytes(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

double ScrapeSample(int http_port, const std::string& series) {
  httplib::Client http("127.0.0.1", http_port);
  auto res = http.Get("/metrics");
  if (!res) return -1;
  std::istringstream in(res->body);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(series + " ", 0) != 0) continue;
    double value = 0;
    if (absl::SimpleAtod(line.substr(series.size() + 1), &value)) return value;
  }
  return -1;
}

std::shared_ptr<grpc::Channel> OwnChannel(const std::string& addr) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(addr, grpc::InsecureChannelCredentials(), args);
}

absl::Status LoadRows(Client& client, const std::string& collection, const Dataset& data) {
  auto writer = client.OpenUpsertStream(collection);
  if (!writer.ok()) return writer.status();
  constexpr size_t kBatch = 1000;
  for (size_t first = 0; first < data.n; first += kBatch) {
    std::vector<Point> points;
    for (size_t i = first; i < std::min(data.n, first + kBatch); ++i) {
      points.push_back({i, std::vector<float>(data.row(i), data.row(i) + data.dim), {}});
    }
    if (!(*writer)->Write(points).ok()) break;  // Finish() says why
  }
  return (*writer)->Finish().status();
}

std::string Ms(double ns) { return absl::StrFormat("%.2f ms", ns / 1e6); }
std::string MiB(double b) { return absl::StrFormat("%.1f MiB", b / (1 << 20)); }

}  // namespace shoal::bench
