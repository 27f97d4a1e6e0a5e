#include "bench/harness/shoal_target.h"

#include <fcntl.h>
#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "bench/harness/process_usage.h"
#include "bench/harness/prometheus.h"

namespace shoal::bench {
namespace {

constexpr size_t kUploadBatch = 1000;  // points per upsert-stream message

// Drops the page cache of every file under `dir` (clean pages only; nothing is lost).
void DropPageCache(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir, ec)) {
    if (!entry.is_regular_file(ec)) continue;
    const int fd = open(entry.path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
  }
}

std::optional<uint64_t> Count(std::optional<double> v) {
  return v ? std::optional<uint64_t>(uint64_t(*v)) : std::nullopt;
}

bool ValidKey(std::string_view key) {
  if (key.empty() || key.front() == '.' || key.back() == '.' || key.find("..") != key.npos) {
    return false;
  }
  return std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
  });
}

struct YamlNode {
  std::string name, value;
  std::vector<YamlNode> children;
};

void Insert(YamlNode* node, const std::vector<std::string>& parts, size_t i,
            const std::string& value) {
  if (i == parts.size()) {
    node->value = value;
    return;
  }
  auto it = std::find_if(node->children.begin(), node->children.end(),
                         [&](const YamlNode& c) { return c.name == parts[i]; });
  if (it == node->children.end()) {
    node->children.push_back({parts[i], "", {}});
    it = node->children.end() - 1;
  }
  Insert(&*it, parts, i + 1, value);
}

void Emit(const YamlNode& node, size_t indent, std::string* out) {
  for (const YamlNode& c : node.children) {
    absl::StrAppend(out, std::string(indent, ' '), c.name, ":");
    if (c.children.empty()) {
      std::string quoted = absl::StrReplaceAll(c.value, {{"\\", "\\\\"}, {"\"", "\\\""}});
      absl::StrAppend(out, " \"", quoted, "\"\n");
    } else {
      absl::StrAppend(out, "\n");
      Emit(c, indent + 2, out);
    }
  }
}

// 'text' for /bin/sh.
std::string ShellQuote(const std::string& text) {
  return absl::StrCat("'", absl::StrReplaceAll(text, {{"'", "'\\''"}}), "'");
}

// What `binary --config path --print-config` prints (stdout), or why it failed.
absl::StatusOr<std::string> PrintConfig(const std::string& binary, const std::string& path) {
  const std::string command =
      absl::StrCat(ShellQuote(binary), " --config ", ShellQuote(path), " --print-config 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return absl::InternalError("cannot run " + command);
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
  if (pclose(pipe) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(command, " failed: ", out));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::pair<std::string, std::vector<ConfigOverride>>> SplitTargetOverrides(
    std::string_view spec) {
  const std::vector<std::string> parts = absl::StrSplit(std::string(spec), '@');
  std::vector<ConfigOverride> overrides;
  for (size_t i = 1; i < parts.size(); ++i) {
    const size_t eq = parts[i].find('=');
    const std::string key = parts[i].substr(0, eq);
    if (eq == std::string::npos || !ValidKey(key)) {
      return absl::InvalidArgumentError(
          absl::StrCat("target ", std::string(spec), ": '", parts[i],
                       "' is not key=value with a dotted config key (e.g. search.nprobe=8)"));
    }
    overrides.push_back({key, parts[i].substr(eq + 1)});
  }
  return std::make_pair(parts[0], std::move(overrides));
}

std::string OverridesYaml(const std::vector<ConfigOverride>& overrides) {
  YamlNode root;
  for (const ConfigOverride& o : overrides) {
    const std::vector<std::string> parts = absl::StrSplit(o.key, '.');
    Insert(&root, parts, 0, o.value);
  }
  std::string out = "# shoal-bench config overrides\n";
  Emit(root, 0, &out);
  return out;
}

ShoalTarget::ShoalTarget(ShoalParams params) : params_(std::move(params)) {}
ShoalTarget::~ShoalTarget() {
  client_.reset();
  server_.reset();  // SIGTERM and wait
}

std::string ShoalTarget::name() const {
  std::string name = BaseName();
  for (const ConfigOverride& o : params_.config_overrides) {
    absl::StrAppend(&name, "@", o.key, "=", o.value);
  }
  return name;
}

std::string ShoalTarget::BaseName() const {
  std::string name = "shoal:" + IndexTypeName(params_.index);
  if (params_.index == IndexType::kIvfPq) {
    if (params_.pq_bits == 4) name += "4";
    absl::StrAppend(&name, "_m", params_.pq_m);
  }
  if (params_.refine_factor > 0 && params_.index != IndexType::kFlat &&
      params_.index != IndexType::kIvfFlat) {
    absl::StrAppend(&name, "_r", params_.refine_factor);
  }
  return name;
}

std::string ShoalTarget::knob_name() const {
  return params_.index == IndexType::kFlat ? "" : "nprobe";
}

absl::Status ShoalTarget::StartServer() {
  client_.reset();
  if (!params_.external_addr.empty()) {
    client_ = std::make_unique<Client>(params_.external_addr);
    return absl::OkStatus();
  }
  std::error_code ec;
  std::filesystem::create_directories(data_dir_, ec);
  std::vector<std::string> args = params_.server_args;
  if (!overrides_path_.empty()) args.push_back("--config=" + overrides_path_);
  auto server = LocalShoald::Start(
      {.binary = params_.shoald_binary, .data_dir = data_dir_, .extra_args = std::move(args)});
  if (!server.ok()) return server.status();
  server_ = *std::move(server);
  client_ = std::make_unique<Client>(server_->grpc_addr());
  return absl::OkStatus();
}

// Writes the overrides' YAML beside the data directory and checks, with the same binary's
// --print-config, that shoald knows every key: its config loader skips unknown ones, and an
// "off" run that silently ran "on" would measure nothing.
absl::Status ShoalTarget::WriteOverrides() {
  if (params_.config_overrides.empty()) return absl::OkStatus();
  if (!params_.external_addr.empty()) {
    return absl::InvalidArgumentError(
        "config overrides need the harness's own shoald, not --target");
  }
  std::error_code ec;
  std::filesystem::create_directories(params_.data_root, ec);
  overrides_path_ = data_dir_ + ".overrides.yaml";
  std::ofstream(overrides_path_) << OverridesYaml(params_.config_overrides);
  auto printed = PrintConfig(params_.shoald_binary, overrides_path_);
  if (!printed.ok()) return printed.status();
  const std::set<std::string> known = YamlLeafKeys(*printed);
  for (const ConfigOverride& o : params_.config_overrides) {
    if (!known.contains(o.key)) {
      return absl::InvalidArgumentError(absl::StrCat(params_.shoald_binary, " has no setting ",
                                                     o.key, " (see its --print-config)"));
    }
  }
  return absl::OkStatus();
}

absl::Status ShoalTarget::Build(const Dataset& d) {
  dim_ = d.dim;
  // The collection does not depend on the overrides: "@..." variants search the same index.
  collection_ =
      absl::StrFormat("bench_%s_%s_%08x%s", d.name, BaseName().substr(6), uint32_t(d.checksum),
                      params_.attributes_tag.empty() ? "" : "_" + params_.attributes_tag);
  for (char& c : collection_) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
  }
  data_dir_ = params_.data_root + "/" + collection_;
  if (absl::Status s = WriteOverrides(); !s.ok()) return s;
  if (absl::Status s = StartServer(); !s.ok()) return s;
  auto info = client_->DescribeCollection(collection_);
  const bool needs_index = params_.index != IndexType::kFlat;
  const bool reusable =
      info.ok() && info->num_vectors == d.n &&
      (!needs_index || (info->index_state == "ready" && info->num_indexed == d.n));
  if (!reusable) {
    if (info.ok()) (void)client_->DropCollection(collection_);
    if (absl::Status s = Load(d); !s.ok()) return s;
  }
  // Memory while searching: the load and the k-means are behind us.
  if (server_) ResetPeakRss(server_->pid());
  return absl::OkStatus();
}

absl::Status ShoalTarget::Load(const Dataset& d) {
  CollectionSpec spec{
      .name = collection_, .dim = d.dim, .metric = Metric::kL2, .index = {.type = params_.index}};
  if (params_.index != IndexType::kFlat) spec.index.nlist = params_.nlist;
  if (params_.index == IndexType::kIvfPq) {
    spec.index.pq_m = params_.pq_m;
    spec.index.pq_bits = params_.pq_bits;
  }
  if (absl::Status s = client_->CreateCollection(spec); !s.ok()) return s;
  auto writer = client_->OpenUpsertStream(collection_);
  if (!writer.ok()) return writer.status();
  for (size_t first = 0; first < d.n; first += kUploadBatch) {
    std::vector<Point> points;
    for (size_t i = first; i < std::min(d.n, first + kUploadBatch); ++i) {
      points.push_back({.id = i, .vector = {d.row(i), d.row(i) + d.dim}});
      if (params_.attributes) points.back().attributes = params_.attributes(i);
    }
    if (!(*writer)->Write(points).ok()) break;  // Finish() says why
  }
  auto written = (*writer)->Finish();
  if (!written.ok()) return written.status();
  if (params_.index == IndexType::kFlat) return absl::OkStatus();
  return client_->BuildIndex(collection_).status();
}

absl::Status ShoalTarget::Search(const float* queries, size_t count, uint32_t k, int /*threads*/,
                                 int64_t* ids) {
  return SearchFiltered(queries, count, k, "", ids, nullptr, nullptr);
}

absl::Status ShoalTarget::SearchFiltered(const float* queries, size_t count, uint32_t k,
                                         const std::string& filter, int64_t* ids, QueryStats* stats,
                                         size_t* hits) {
  const SearchOptions options{
      .k = k, .nprobe = nprobe_, .refine_factor = params_.refine_factor, .filter = filter};
  std::fill(ids, ids + count * k, -1);
  auto fill = [&](size_t i, const SearchResult& r) {
    for (size_t j = 0; j < std::min<size_t>(k, r.hits.size()); ++j) {
      ids[i * k + j] = int64_t(r.hits[j].id);
    }
    if (stats) stats[i] = r.stats;
    if (hits) hits[i] = r.hits.size();
  };
  if (count == 1) {
    auto r = client_->Search(collection_, {queries, queries + dim_}, options);
    if (!r.ok()) return r.status();
    fill(0, *r);
    return absl::OkStatus();
  }
  std::vector<std::vector<float>> batch;
  for (size_t i = 0; i < count; ++i)
    batch.emplace_back(queries + i * dim_, queries + (i + 1) * dim_);
  auto r = client_->SearchBatch(collection_, batch, options);
  if (!r.ok()) return r.status();
  for (size_t i = 0; i < r->size(); ++i) fill(i, (*r)[i]);
  return absl::OkStatus();
}

std::string ShoalTarget::MetricsUrl() const {
  if (server_) return absl::StrCat("http://127.0.0.1:", server_->http_port(), "/metrics");
  return params_.metrics_url;
}

ResourceUsage ShoalTarget::Usage() {
  ResourceUsage u;
  const pid_t pid = server_ ? server_->pid() : params_.server_pid;
  if (pid > 0) {
    const ProcessUsage p = ReadProcessUsage(pid);
    u.cpu_seconds = p.cpu_seconds;
    u.server_peak_rss_bytes = p.peak_rss_bytes;
  }
  const std::string url = MetricsUrl();
  const size_t path_at = url.find('/', url.find("//") + 2);
  if (url.empty() || path_at == std::string::npos) return u;
  httplib::Client http(url.substr(0, path_at));
  http.set_connection_timeout(5);
  http.set_read_timeout(10);
  if (auto res = http.Get(url.substr(path_at)); res && res->status == 200) {
    u.bytes_read = Count(PrometheusSample(res->body, "shoal_io_read_bytes_total"));
    u.cache_hits = Count(PrometheusSample(res->body, "shoal_cache_hits_total"));
    u.cache_misses = Count(PrometheusSample(res->body, "shoal_cache_misses_total"));
    u.scan_queries_sum = PrometheusSample(res->body, "shoal_search_queries_per_scan_sum");
    u.scans = PrometheusSample(res->body, "shoal_search_queries_per_scan_count");
    u.heap_allocations = PrometheusSample(res->body, "shoal_process_heap_allocations_total");
  }
  return u;
}

absl::StatusOr<bool> ShoalTarget::MakeCold() {
  if (!server_) return false;  // an external server is not ours to restart
  if (server_->Terminate() != 0) {
    return absl::InternalError(absl::StrCat("shoald did not stop cleanly; see ", server_log()));
  }
  server_.reset();
  DropPageCache(data_dir_);
  if (absl::Status s = StartServer(); !s.ok()) return s;
  return true;
}

}  // namespace shoal::bench
