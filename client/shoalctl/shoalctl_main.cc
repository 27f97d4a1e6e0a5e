// shoalctl: command-line client for shoald. `shoalctl --help` lists the commands, the global
// flags and the exit codes; `shoalctl <command> --help` a command's flags. Read commands print
// a table, or JSON with --output json; docs/shoalctl.md is the reference.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <future>
#include <iostream>
#include <set>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/client.h"
#include "client/shoalctl/output.h"
#include "client/shoalctl/progress.h"
#include "dataset/vector_reader.h"

namespace {

using shoal::Client;
using shoal::ctl::Fail;
using shoal::ctl::Format;
using shoal::ctl::UsageError;

// Everything the command line sets; one struct so the commands' functions stay small.
struct Args {
  std::string addr = "127.0.0.1:7700";
  std::string api_key;
  bool tls = false;  // TLS with the system's roots unless tls_ca is set
  std::string tls_ca, tls_cert, tls_key, tls_server_name;
  int timeout_ms = 30000;
  std::string output = "table";
  std::string name, metric = "l2", index = "flat", path, vector_text, query_file, filter;
  uint32_t dim = 0, nlist = 0, pq_m = 0, pq_bits = 0, nprobe = 0, k = 10, refine = 0;
  size_t batch = 1000, query_index = 0, num_queries = 1;
  uint64_t start_id = 0, limit = 0;
  std::vector<uint64_t> ids;
  bool include_vectors = false, stats = false, print_command = false;
  std::string bench_out = "shoal-bench-quick";
  Format format() const { return output == "json" ? Format::kJson : Format::kTable; }
};

absl::StatusOr<shoal::Metric> ParseMetric(const std::string& name) {
  if (name == "l2") return shoal::Metric::kL2;
  if (name == "ip" || name == "inner_product") return shoal::Metric::kInnerProduct;
  if (name == "cosine") return shoal::Metric::kCosine;
  return absl::InvalidArgumentError("--metric: want l2, ip or cosine");
}

absl::StatusOr<shoal::IndexType> ParseIndex(const std::string& name) {
  if (std::optional<shoal::IndexType> t = shoal::IndexTypeFromName(name)) return *t;
  return absl::InvalidArgumentError("--index: want flat, ivf_flat, ivf_sq8 or ivf_pq");
}

int Create(Client& client, const Args& a) {
  auto m = ParseMetric(a.metric);
  if (!m.ok()) return UsageError(m.status());
  auto t = ParseIndex(a.index);
  if (!t.ok()) return UsageError(t.status());
  absl::Status s =
      client.CreateCollection({a.name, a.dim, *m, {*t, a.nlist, a.pq_m, a.nprobe, a.pq_bits}});
  if (!s.ok()) return Fail(s);
  shoal::ctl::PrintMessage(a.format(), absl::StrCat("created collection '", a.name, "'"));
  return 0;
}

int Load(Client& client, const Args& a) {
  auto reader = shoal::dataset::VectorReader::Open(a.path);
  if (!reader.ok()) return UsageError(reader.status());
  auto info = client.DescribeCollection(a.name);
  if (!info.ok()) return Fail(info.status());
  const uint32_t dim = (*reader)->dim();
  if (info->dim != dim) {
    return UsageError(absl::InvalidArgumentError(
        absl::StrCat(a.path, " has dim ", dim, ", collection '", a.name, "' has dim ", info->dim)));
  }
  std::optional<uint64_t> total = (*reader)->size_hint();
  if (a.limit > 0) total = total ? std::min(*total, a.limit) : a.limit;
  auto writer = client.OpenUpsertStream(a.name);
  if (!writer.ok()) return Fail(writer.status());
  shoal::ctl::Progress progress("loading", total);
  const size_t batch = std::max<size_t>(1, a.batch);
  uint64_t sent = 0;
  std::vector<float> buffer;
  while (a.limit == 0 || sent < a.limit) {
    buffer.clear();
    const size_t want = a.limit == 0 ? batch : size_t(std::min<uint64_t>(batch, a.limit - sent));
    auto n = (*reader)->Read(want, &buffer);
    if (!n.ok()) return UsageError(n.status());
    if (*n == 0) break;
    std::vector<shoal::Point> points(*n);
    for (size_t i = 0; i < *n; ++i) {
      points[i].id = a.start_id + sent + i;
      points[i].vector.assign(buffer.begin() + i * dim, buffer.begin() + (i + 1) * dim);
    }
    if (!(*writer)->Write(points).ok()) break;  // Finish() reports why
    sent += *n;
    progress.Update(sent);
  }
  auto upserted = (*writer)->Finish();
  if (!upserted.ok()) return Fail(upserted.status());
  progress.Finish(*upserted);
  shoal::ctl::PrintMessage(a.format(),
                           absl::StrCat("loaded ", *upserted, " vectors into '", a.name, "'"));
  return 0;
}

absl::StatusOr<std::vector<std::vector<float>>> Queries(const Args& a) {
  std::vector<std::vector<float>> queries;
  if (!a.vector_text.empty()) {
    std::vector<float> q;
    for (absl::string_view part :
         absl::StrSplit(a.vector_text, absl::ByAnyChar(", "), absl::SkipWhitespace())) {
      float v;
      if (!absl::SimpleAtof(part, &v)) {
        return absl::InvalidArgumentError(absl::StrCat("--vector: '", part, "' is not a number"));
      }
      q.push_back(v);
    }
    queries.push_back(std::move(q));
    return queries;
  }
  if (a.query_file.empty()) return absl::InvalidArgumentError("give --vector or --query-file");
  uint32_t dim;
  const size_t count = std::max<size_t>(1, a.num_queries);
  auto data = shoal::dataset::ReadAllVectors(a.query_file, a.query_index + count, &dim);
  if (!data.ok()) return data.status();
  for (size_t i = a.query_index; i < data->size() / dim; ++i) {
    queries.emplace_back(data->begin() + i * dim, data->begin() + (i + 1) * dim);
  }
  if (queries.empty()) return absl::InvalidArgumentError("--query-file: no query at that index");
  return queries;
}

int Search(Client& client, const Args& a) {
  auto queries = Queries(a);
  if (!queries.ok()) return UsageError(queries.status());
  // Many queries go out as batches of 100 with 4 requests in flight (Client::SearchMany).
  auto results = client.SearchMany(
      a.name, *queries,
      {.k = a.k, .nprobe = a.nprobe, .refine_factor = a.refine, .filter = a.filter},
      {.batch = 100, .in_flight = 4});
  if (!results.ok()) return Fail(results.status());
  shoal::ctl::PrintSearchResults(a.format(), *results, a.query_index, a.stats);
  return 0;
}

// BuildIndex blocks for the whole build; meanwhile DescribeCollection's phase and percent
// drive one progress bar per phase.
int BuildIndex(Client& client, const Args& a) {
  auto build = std::async(std::launch::async, [&] { return client.BuildIndex(a.name); });
  std::unique_ptr<shoal::ctl::Progress> bar;
  std::string phase;
  while (build.wait_for(std::chrono::milliseconds(250)) != std::future_status::ready) {
    auto info = client.DescribeCollection(a.name);
    if (!info.ok() || info->index_state != "building" || info->build_phase.empty()) continue;
    if (info->build_phase != phase) {
      if (bar) bar->Finish(100);
      phase = info->build_phase;
      bar = std::make_unique<shoal::ctl::Progress>(absl::StrCat("build-index ", phase), 100, "%");
    }
    bar->Update(info->build_percent);
  }
  if (bar) bar->Finish(100);
  auto message = build.get();
  if (!message.ok()) return Fail(message.status());
  shoal::ctl::PrintMessage(a.format(), *message);
  return 0;
}

int Health(Client& client, const Args& a) {
  auto status = client.Health(a.name);
  if (!status.ok()) return Fail(status.status());
  static const char* kNames[] = {"UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"};
  shoal::ctl::PrintHealth(a.format(), kNames[int(*status)]);
  switch (*status) {
    case shoal::HealthStatus::kServing:
      return shoal::ctl::kExitOk;
    case shoal::HealthStatus::kServiceUnknown:
      return shoal::ctl::kExitNotFound;
    default:
      return shoal::ctl::kExitUnavailable;
  }
}

// The quick mode of `make bench-quick`: a small synthetic set, Shoal vs FAISS vs hnswlib.
const std::vector<std::string> kBenchQuick = {
    "--dataset", "synthetic:n=20000,dim=64,clusters=100,seed=1",
    "--queries", "500",
    "--nprobe",  "1,4,16,64",
    "--ef",      "10,40,160",
    "--clients", "1,8",
    "--batch",   "50",
    "--rate",    "500",
    "--targets", "shoal:ivf_flat,faiss:ivf_flat,hnsw"};

// shoal-bench next to this binary, else on PATH; "" when neither.
std::string FindSibling(const std::string& binary) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto sibling = self.parent_path() / binary;
    if (access(sibling.c_str(), X_OK) == 0) return sibling.string();
  }
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path ? path : "", ':', absl::SkipEmpty())) {
    const std::string candidate = absl::StrCat(dir, "/", binary);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// Execs shoal-bench's quick mode (shoalctl does not link the harness).
int Bench(const Args& a, const std::vector<std::string>& extra) {
  const std::string bench = FindSibling("shoal-bench");
  if (bench.empty()) {
    return UsageError(absl::NotFoundError("shoal-bench not found next to shoalctl or on PATH"));
  }
  std::vector<std::string> defaults = {"--out", a.bench_out, "--data-dir",
                                       absl::StrCat(a.bench_out, "/data")};
  defaults.insert(defaults.end(), kBenchQuick.begin(), kBenchQuick.end());
  if (std::string shoald = FindSibling("shoald"); !shoald.empty()) {
    defaults.insert(defaults.end(), {"--shoald", shoald});
  }
  // shoal-bench refuses a flag given twice: the user's flags replace the quick mode's.
  std::set<std::string> given;
  for (const std::string& e : extra) {
    if (absl::StartsWith(e, "--")) given.insert(std::string(e.substr(0, e.find('='))));
  }
  std::vector<std::string> args = {bench};
  for (size_t i = 0; i + 1 < defaults.size(); i += 2) {
    if (!given.contains(defaults[i])) args.insert(args.end(), {defaults[i], defaults[i + 1]});
  }
  args.insert(args.end(), extra.begin(), extra.end());
  if (a.print_command) {
    std::printf("%s\n", absl::StrJoin(args, " ").c_str());
    return 0;
  }
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  execv(bench.c_str(), argv.data());
  return Fail(absl::InternalError(absl::StrCat("exec ", bench, ": ", std::strerror(errno))));
}

}  // namespace

namespace {

void AddGlobalFlags(CLI::App& app, Args& a) {
  if (const char* env = std::getenv("SHOAL_ADDR")) a.addr = env;
  if (const char* env = std::getenv("SHOAL_API_KEY")) a.api_key = env;
  // Not SHOAL_TLS_CERT / SHOAL_TLS_KEY: those are shoald's own (a container sets both).
  if (const char* env = std::getenv("SHOAL_TLS_CA")) a.tls_ca = env;
  if (const char* env = std::getenv("SHOAL_TLS_CLIENT_CERT")) a.tls_cert = env;
  if (const char* env = std::getenv("SHOAL_TLS_CLIENT_KEY")) a.tls_key = env;
  if (const char* env = std::getenv("SHOAL_TLS_SERVER_NAME")) a.tls_server_name = env;
  app.add_option("--addr", a.addr, "server address host:port (env SHOAL_ADDR)")
      ->capture_default_str();
  app.add_option("--api-key", a.api_key, "API key (env SHOAL_API_KEY)");
  app.add_flag("--tls", a.tls, "TLS with the system's CA roots (implied by --tls-ca)");
  app.add_option("--tls-ca", a.tls_ca, "PEM CA that signs shoald's certificate (env SHOAL_TLS_CA)");
  app.add_option("--tls-cert", a.tls_cert,
                 "PEM client certificate, for mutual TLS (env SHOAL_TLS_CLIENT_CERT)");
  app.add_option("--tls-key", a.tls_key, "its private key (env SHOAL_TLS_CLIENT_KEY)");
  app.add_option("--tls-server-name", a.tls_server_name,
                 "name to check in shoald's certificate, when not --addr's host "
                 "(env SHOAL_TLS_SERVER_NAME)");
  app.add_option("--timeout-ms", a.timeout_ms, "deadline of each call")->capture_default_str();
  app.add_option("-o,--output", a.output, "table or json (read commands; json for scripts)")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
}

// Every command names its collection with the positional NAME; flags are the same across
// commands (-k, --nprobe, --batch, ...).
void AddCommands(CLI::App& app, Args& a) {
  auto* create = app.add_subcommand("create", "create a collection");
  create->add_option("name", a.name, "collection")->required();
  create->add_option("--dim", a.dim, "vector dimension")->required();
  create->add_option("--metric", a.metric, "l2, ip or cosine")->capture_default_str();
  create->add_option("--index", a.index, "flat, ivf_flat, ivf_sq8 or ivf_pq")
      ->capture_default_str();
  create->add_option("--nlist", a.nlist, "IVF partitions (0 = automatic)");
  create->add_option("--pq-m", a.pq_m, "PQ sub-quantizers (ivf_pq)");
  create->add_option("--pq-bits", a.pq_bits, "PQ code bits: 8 (default) or 4 = fast-scan (ivf_pq)");
  create->add_option("--nprobe", a.nprobe, "default nprobe of searches");
  app.add_subcommand("drop", "drop a collection and its data")
      ->add_option("name", a.name, "collection")
      ->required();
  app.add_subcommand("list", "list collections (read: --output)");
  app.add_subcommand("describe", "describe a collection (read: --output)")
      ->add_option("name", a.name, "collection")
      ->required();
  auto* load = app.add_subcommand(
      "load", "bulk-load vectors (fvecs, bvecs, ivecs, IDX, npy; .gz ok), with a progress bar");
  load->add_option("name", a.name, "collection")->required();
  load->add_option("file", a.path, "vector file")->required();
  load->add_option("--batch", a.batch, "vectors per message")->capture_default_str();
  load->add_option("--start-id", a.start_id, "id of the first vector")->capture_default_str();
  load->add_option("--limit", a.limit, "load at most this many (0 = all)");
  auto* search = app.add_subcommand("search", "search a collection (read: --output)");
  search->add_option("name", a.name, "collection")->required();
  search->add_option("--vector", a.vector_text, "one query: comma-separated floats");
  search->add_option("--query-file", a.query_file, "queries from a vector file");
  search->add_option("--query-index", a.query_index, "first query of the file to use");
  search->add_option("--num-queries", a.num_queries, "how many queries of the file")
      ->capture_default_str();
  search->add_option("-k", a.k, "neighbours per query")->capture_default_str();
  search->add_option("--nprobe", a.nprobe, "IVF partitions to probe (0 = default)");
  search->add_option("--refine-factor", a.refine,
                     "SQ8/PQ: re-rank k * this many candidates exactly");
  search->add_option("--filter", a.filter,
                     "only points that satisfy this filter, e.g. 'tenant = 42 and year >= 2024'");
  search->add_flag("--stats", a.stats,
                   "per query: partitions probed, from cache, bytes read, vectors scanned");
  auto* count = app.add_subcommand("count", "count the points that satisfy a filter (read)");
  count->add_option("name", a.name, "collection")->required();
  count->add_option("--filter", a.filter, "the filter (none: every live point)");
  auto* get = app.add_subcommand("get", "fetch points by id (read: --output)");
  get->add_option("name", a.name, "collection")->required();
  get->add_option("ids", a.ids, "point ids")->required();
  get->add_flag("--vectors", a.include_vectors, "include the vectors");
  auto* del = app.add_subcommand("delete", "delete points by id");
  del->add_option("name", a.name, "collection")->required();
  del->add_option("ids", a.ids, "point ids")->required();
  app.add_subcommand("build-index", "build the collection's IVF index, with a progress bar")
      ->add_option("name", a.name, "collection")
      ->required();
  app.add_subcommand("flush", "flush the memtable to a segment")
      ->add_option("name", a.name, "collection")
      ->required();
  app.add_subcommand("health", "grpc.health.v1 check of the server or a collection (read)")
      ->add_option("name", a.name, "collection (none = the whole server)");
  auto* bench =
      app.add_subcommand("bench",
                         "run shoal-bench's quick mode (Shoal vs FAISS vs hnswlib, < 2 min); "
                         "arguments after -- go to shoal-bench");
  bench->add_option("--out", a.bench_out, "report directory")->capture_default_str();
  bench->add_flag("--print-command", a.print_command, "print the shoal-bench command, run nothing");
  bench->allow_extras();
}

int Run(const std::string& command, CLI::App& app, Args& a) {
  // CLI11 hands arguments after `--` to the top-level app: they are shoal-bench's.
  const std::vector<std::string> extra = app.remaining(true);
  if (command == "bench") return Bench(a, extra);
  if (!extra.empty()) {
    return UsageError(absl::InvalidArgumentError(
        absl::StrCat("unexpected arguments: ", absl::StrJoin(extra, " "))));
  }
  shoal::ClientOptions options;
  options.timeout = std::chrono::milliseconds(a.timeout_ms);
  options.api_key = a.api_key;
  if (a.tls || !a.tls_ca.empty() || !a.tls_cert.empty() || !a.tls_key.empty() ||
      !a.tls_server_name.empty()) {
    options.tls = shoal::TlsOptions{a.tls_ca, a.tls_cert, a.tls_key, a.tls_server_name};
  }
  Client client(a.addr, options);
  const Format f = a.format();
  if (command == "create") return Create(client, a);
  if (command == "load") return Load(client, a);
  if (command == "search") return Search(client, a);
  if (command == "build-index") return BuildIndex(client, a);
  if (command == "health") return Health(client, a);
  if (command == "drop") {
    if (absl::Status s = client.DropCollection(a.name); !s.ok()) return Fail(s);
    shoal::ctl::PrintMessage(f, absl::StrCat("dropped collection '", a.name, "'"));
  } else if (command == "list") {
    auto all = client.ListCollections();
    if (!all.ok()) return Fail(all.status());
    shoal::ctl::PrintCollections(f, *all);
  } else if (command == "count") {
    auto n = client.Count(a.name, a.filter);
    if (!n.ok()) return Fail(n.status());
    shoal::ctl::PrintCount(f, *n);
  } else if (command == "describe") {
    auto info = client.DescribeCollection(a.name);
    if (!info.ok()) return Fail(info.status());
    shoal::ctl::PrintCollection(f, *info);
  } else if (command == "get") {
    auto points = client.Get(a.name, a.ids, a.include_vectors);
    if (!points.ok()) return Fail(points.status());
    shoal::ctl::PrintPoints(f, *points, a.include_vectors);
  } else if (command == "delete") {
    auto n = client.Delete(a.name, a.ids);
    if (!n.ok()) return Fail(n.status());
    shoal::ctl::PrintMessage(f, absl::StrCat("deleted ", *n, " of ", a.ids.size(), " ids"));
  } else if (command == "flush") {
    auto message = client.Flush(a.name);
    if (!message.ok()) return Fail(message.status());
    shoal::ctl::PrintMessage(f, *message);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shoalctl: command-line client for the Shoal vector search server"};
  app.footer(shoal::ctl::kExitCodesHelp);
  app.require_subcommand(1);
  app.fallthrough();   // global flags may also follow the command: `shoalctl list -o json`
  app.allow_extras();  // only `bench` takes them (Run refuses them elsewhere)
  Args a;
  AddGlobalFlags(app, a);
  AddCommands(app, a);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help (code 0) or the error
    return code == 0 ? 0 : shoal::ctl::kExitUsage;
  }
  return Run(app.get_subcommands().front()->get_name(), app, a);
}
