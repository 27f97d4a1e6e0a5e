// shoalctl: command-line client for shoald. `shoalctl --help` lists the commands.
#include <cstdio>
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/client.h"
#include "client/shoalctl/progress.h"
#include "dataset/vector_reader.h"

namespace {

using shoal::Client;

int Fail(const absl::Status& s) {
  std::cerr << "shoalctl: " << absl::StatusCodeToString(s.code()) << ": " << s.message() << "\n";
  return 1;
}

absl::StatusOr<shoal::Metric> ParseMetric(const std::string& name) {
  if (name == "l2") return shoal::Metric::kL2;
  if (name == "ip" || name == "inner_product") return shoal::Metric::kInnerProduct;
  if (name == "cosine") return shoal::Metric::kCosine;
  return absl::InvalidArgumentError("--metric: want l2, ip or cosine");
}

absl::StatusOr<shoal::IndexType> ParseIndex(const std::string& name) {
  if (name == "flat") return shoal::IndexType::kFlat;
  if (name == "ivf_flat") return shoal::IndexType::kIvfFlat;
  if (name == "ivf_sq8") return shoal::IndexType::kIvfSq8;
  if (name == "ivf_pq") return shoal::IndexType::kIvfPq;
  return absl::InvalidArgumentError("--index: want flat, ivf_flat, ivf_sq8 or ivf_pq");
}

void PrintInfo(const shoal::CollectionInfo& c) {
  std::printf(
      "%-20s dim=%-6u metric=%-6s index=%-8s vectors=%-10llu indexed=%-10llu state=%s "
      "disk=%.1fMiB\n",
      c.name.c_str(), c.dim, shoal::MetricName(c.metric).c_str(),
      shoal::IndexTypeName(c.index.type).c_str(), (unsigned long long)c.num_vectors,
      (unsigned long long)c.num_indexed, c.index_state.c_str(), double(c.disk_bytes) / (1 << 20));
  if (!c.error.empty()) std::printf("%-20s error: %s\n", "", c.error.c_str());
}

int Load(Client& client, const std::string& name, const std::string& path, size_t batch,
         uint64_t start_id, uint64_t limit) {
  auto reader = shoal::dataset::VectorReader::Open(path);
  if (!reader.ok()) return Fail(reader.status());
  auto info = client.DescribeCollection(name);
  if (!info.ok()) return Fail(info.status());
  if (info->dim != (*reader)->dim()) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        path, " has dim ", (*reader)->dim(), ", collection '", name, "' has dim ", info->dim)));
  }
  std::optional<uint64_t> total = (*reader)->size_hint();
  if (limit > 0) total = total ? std::min(*total, limit) : limit;
  auto writer = client.OpenUpsertStream(name);
  if (!writer.ok()) return Fail(writer.status());
  shoal::ctl::Progress progress("loading", total);
  const uint32_t dim = (*reader)->dim();
  uint64_t sent = 0;
  std::vector<float> buffer;
  while (limit == 0 || sent < limit) {
    buffer.clear();
    const size_t want = limit == 0 ? batch : size_t(std::min<uint64_t>(batch, limit - sent));
    auto n = (*reader)->Read(want, &buffer);
    if (!n.ok()) return Fail(n.status());
    if (*n == 0) break;
    std::vector<shoal::Point> points(*n);
    for (size_t i = 0; i < *n; ++i) {
      points[i].id = start_id + sent + i;
      points[i].vector.assign(buffer.begin() + i * dim, buffer.begin() + (i + 1) * dim);
    }
    if (!(*writer)->Write(points).ok()) break;  // Finish() reports why
    sent += *n;
    progress.Update(sent);
  }
  auto upserted = (*writer)->Finish();
  if (!upserted.ok()) return Fail(upserted.status());
  progress.Finish(*upserted);
  std::printf("loaded %llu vectors into '%s'\n", (unsigned long long)*upserted, name.c_str());
  return 0;
}

absl::StatusOr<std::vector<std::vector<float>>> Queries(const std::string& vector_text,
                                                        const std::string& file, size_t first,
                                                        size_t count) {
  std::vector<std::vector<float>> queries;
  if (!vector_text.empty()) {
    std::vector<float> q;
    for (absl::string_view part :
         absl::StrSplit(vector_text, absl::ByAnyChar(", "), absl::SkipWhitespace())) {
      float v;
      if (!absl::SimpleAtof(part, &v)) {
        return absl::InvalidArgumentError(absl::StrCat("--vector: '", part, "' is not a number"));
      }
      q.push_back(v);
    }
    queries.push_back(std::move(q));
    return queries;
  }
  if (file.empty()) return absl::InvalidArgumentError("give --vector or --query-file");
  uint32_t dim;
  auto data = shoal::dataset::ReadAllVectors(file, first + count, &dim);
  if (!data.ok()) return data.status();
  for (size_t i = first; i < data->size() / dim; ++i) {
    queries.emplace_back(data->begin() + i * dim, data->begin() + (i + 1) * dim);
  }
  if (queries.empty()) return absl::InvalidArgumentError("--query-file: no query at that index");
  return queries;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shoalctl: command-line client for the Shoal vector search server"};
  app.require_subcommand(1);
  std::string addr = "127.0.0.1:7700";
  if (const char* env = std::getenv("SHOAL_ADDR")) addr = env;
  std::string api_key;
  if (const char* env = std::getenv("SHOAL_API_KEY")) api_key = env;
  int timeout_ms = 30000;
  app.add_option("--addr", addr, "server address (env SHOAL_ADDR)")->capture_default_str();
  app.add_option("--api-key", api_key, "API key (env SHOAL_API_KEY)");
  app.add_option("--timeout-ms", timeout_ms, "deadline of each call")->capture_default_str();

  std::string name, metric = "l2", index = "flat", path, vector_text, query_file;
  uint32_t dim = 0, nlist = 0, pq_m = 0, nprobe = 0, k = 10, refine = 0;
  size_t batch = 1000, query_index = 0, num_queries = 1;
  uint64_t start_id = 0, limit = 0;
  std::vector<uint64_t> ids;
  bool include_vectors = false, stats = false;

  auto* create = app.add_subcommand("create", "create a collection");
  create->add_option("name", name)->required();
  create->add_option("--dim", dim, "vector dimension")->required();
  create->add_option("--metric", metric, "l2, ip or cosine")->capture_default_str();
  create->add_option("--index", index, "flat, ivf_flat, ivf_sq8 or ivf_pq")->capture_default_str();
  create->add_option("--nlist", nlist, "IVF partitions (0 = automatic)");
  create->add_option("--pq-m", pq_m, "PQ sub-quantizers (IVF_PQ)");
  create->add_option("--nprobe", nprobe, "default nprobe");
  auto* drop = app.add_subcommand("drop", "drop a collection and its data");
  drop->add_option("name", name)->required();
  auto* list = app.add_subcommand("list", "list collections");
  auto* describe = app.add_subcommand("describe", "describe a collection");
  describe->add_option("name", name)->required();
  auto* load =
      app.add_subcommand("load", "bulk-load vectors (fvecs, bvecs, ivecs, IDX, npy; .gz ok)");
  load->add_option("name", name)->required();
  load->add_option("file", path)->required();
  load->add_option("--batch", batch, "vectors per message")->capture_default_str();
  load->add_option("--start-id", start_id, "id of the first vector")->capture_default_str();
  load->add_option("--limit", limit, "load at most this many (0 = all)");
  auto* search = app.add_subcommand("search", "search a collection");
  search->add_option("name", name)->required();
  search->add_option("--vector", vector_text, "one query: comma-separated floats");
  search->add_option("--query-file", query_file, "queries from a vector file");
  search->add_option("--query-index", query_index, "first query of the file to use");
  search->add_option("--num-queries", num_queries, "how many queries of the file")
      ->capture_default_str();
  search->add_option("-k", k, "neighbours per query")->capture_default_str();
  search->add_option("--nprobe", nprobe, "IVF partitions to probe (0 = default)");
  search->add_option("--refine-factor", refine, "SQ8/PQ: re-rank k * this many candidates exactly");
  search->add_flag("--stats", stats, "print per-query statistics");
  auto* get = app.add_subcommand("get", "fetch points by id");
  get->add_option("name", name)->required();
  get->add_option("ids", ids)->required();
  get->add_flag("--vectors", include_vectors, "print the vectors");
  auto* del = app.add_subcommand("delete", "delete points by id");
  del->add_option("name", name)->required();
  del->add_option("ids", ids)->required();
  auto* build = app.add_subcommand("build-index", "build the collection's IVF index");
  build->add_option("name", name)->required();
  auto* flush = app.add_subcommand("flush", "flush the memtable to a segment");
  flush->add_option("name", name)->required();
  auto* health = app.add_subcommand("health", "grpc.health.v1 check of the server or a collection");
  health->add_option("name", name, "collection (empty = whole server)");

  CLI11_PARSE(app, argc, argv);

  shoal::ClientOptions options;
  options.timeout = std::chrono::milliseconds(timeout_ms);
  options.api_key = api_key;
  Client client(addr, options);

  if (create->parsed()) {
    auto m = ParseMetric(metric);
    if (!m.ok()) return Fail(m.status());
    auto t = ParseIndex(index);
    if (!t.ok()) return Fail(t.status());
    absl::Status s = client.CreateCollection({name, dim, *m, {*t, nlist, pq_m, nprobe}});
    if (!s.ok()) return Fail(s);
    std::printf("created collection '%s'\n", name.c_str());
  } else if (drop->parsed()) {
    if (absl::Status s = client.DropCollection(name); !s.ok()) return Fail(s);
    std::printf("dropped collection '%s'\n", name.c_str());
  } else if (list->parsed()) {
    auto all = client.ListCollections();
    if (!all.ok()) return Fail(all.status());
    for (const auto& c : *all) PrintInfo(c);
    if (all->empty()) std::printf("no collections\n");
  } else if (describe->parsed()) {
    auto info = client.DescribeCollection(name);
    if (!info.ok()) return Fail(info.status());
    PrintInfo(*info);
  } else if (load->parsed()) {
    return Load(client, name, path, std::max<size_t>(1, batch), start_id, limit);
  } else if (search->parsed()) {
    auto queries = Queries(vector_text, query_file, query_index, std::max<size_t>(1, num_queries));
    if (!queries.ok()) return Fail(queries.status());
    auto results =
        client.SearchBatch(name, *queries, {.k = k, .nprobe = nprobe, .refine_factor = refine});
    if (!results.ok()) return Fail(results.status());
    for (size_t q = 0; q < results->size(); ++q) {
      const shoal::SearchResult& r = (*results)[q];
      std::printf("query %zu:\n", query_index + q);
      for (const shoal::Hit& h : r.hits) {
        std::printf("  id=%-10llu distance=%g\n", (unsigned long long)h.id, h.distance);
      }
      if (stats) {
        std::printf(
            "  stats: scanned=%llu partitions=%u cached=%u bytes_read=%llu queue=%lluus "
            "io=%lluus cpu=%lluus\n",
            (unsigned long long)r.stats.vectors_scanned, r.stats.partitions_probed,
            r.stats.partitions_cached, (unsigned long long)r.stats.bytes_read,
            (unsigned long long)r.stats.queue_us, (unsigned long long)r.stats.io_us,
            (unsigned long long)r.stats.cpu_us);
      }
    }
  } else if (get->parsed()) {
    auto points = client.Get(name, ids, include_vectors);
    if (!points.ok()) return Fail(points.status());
    for (const shoal::Point& p : *points) {
      std::printf("id=%llu", (unsigned long long)p.id);
      if (include_vectors) std::printf(" vector=[%s]", absl::StrJoin(p.vector, ",").c_str());
      std::printf("\n");
    }
  } else if (del->parsed()) {
    auto n = client.Delete(name, ids);
    if (!n.ok()) return Fail(n.status());
    std::printf("deleted %llu of %zu ids\n", (unsigned long long)*n, ids.size());
  } else if (build->parsed()) {
    auto message = client.BuildIndex(name);
    if (!message.ok()) return Fail(message.status());
    std::printf("%s\n", message->c_str());
  } else if (flush->parsed()) {
    auto message = client.Flush(name);
    if (!message.ok()) return Fail(message.status());
    std::printf("%s\n", message->c_str());
  } else if (health->parsed()) {
    auto status = client.Health(name);
    if (!status.ok()) return Fail(status.status());
    static const char* kNames[] = {"UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"};
    std::printf("%s\n", kNames[int(*status)]);
    return *status == shoal::HealthStatus::kServing ? 0 : 3;
  }
  return 0;
}
