#include "bench/harness/dataset.h"

#include <isa-l/crc.h>

#include <filesystem>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "dataset/vector_reader.h"

namespace shoal::bench {
namespace {

constexpr char kFmnistBase[] = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
constexpr char kFmnistQueries[] = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";
constexpr float kClusterSigma = 0.1f;

uint32_t Crc(const void* data, size_t bytes, uint32_t crc) {
  return crc32_iscsi(static_cast<unsigned char*>(const_cast<void*>(data)), int(bytes), crc);
}

// 64 bits from two CRC32C passes with different seeds: a cache key, not a cryptographic hash.
uint64_t Checksum(const Dataset& d) {
  uint64_t sum = 0;
  for (uint32_t seed : {0u, 0x9e3779b9u}) {
    uint32_t crc = Crc(&d.dim, sizeof(d.dim), seed);
    // isa-l takes an int length: feed large arrays in 1 GiB pieces.
    for (const std::vector<float>* v : {&d.base, &d.queries}) {
      const char* p = reinterpret_cast<const char*>(v->data());
      for (size_t left = v->size() * sizeof(float); left > 0;) {
        const size_t piece = std::min<size_t>(left, size_t(1) << 30);
        crc = Crc(p, piece, crc);
        p += piece;
        left -= piece;
      }
    }
    sum = (sum << 32) | crc;
  }
  return sum;
}

void Finish(Dataset& d) {
  d.n = d.base.size() / d.dim;
  d.nq = d.queries.size() / d.dim;
  d.checksum = Checksum(d);
}

std::string SafeName(const std::string& path) {
  std::string name = std::filesystem::path(path).filename().string();
  for (const char* ext : {".gz", ".fvecs", ".bvecs", ".npy", ".idx"}) {
    if (name.size() > strlen(ext) && name.ends_with(ext)) name.resize(name.size() - strlen(ext));
  }
  for (char& c : name) {
    if (!isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') c = '_';
  }
  return name;
}

}  // namespace

absl::StatusOr<SyntheticSpec> ParseSyntheticSpec(const std::string& text) {
  SyntheticSpec spec;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(part, '=');
    uint64_t value = 0;
    if (!absl::SimpleAtoi(kv.second, &value) || value == 0) {
      return absl::InvalidArgumentError(absl::StrCat("synthetic: bad value in '", part, "'"));
    }
    if (kv.first == "n") {
      spec.n = value;
    } else if (kv.first == "dim" && value <= 65536) {
      spec.dim = uint32_t(value);
    } else if (kv.first == "clusters" && value <= spec.n) {
      spec.clusters = uint32_t(value);
    } else if (kv.first == "seed") {
      spec.seed = value;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("synthetic: unknown or out-of-range '", part, "' (n, dim, clusters, seed)"));
    }
  }
  return spec;
}

Dataset MakeSynthetic(const SyntheticSpec& spec, size_t num_queries) {
  Dataset d;
  d.name =
      absl::StrCat("synthetic-n", spec.n, "-d", spec.dim, "-c", spec.clusters, "-s", spec.seed);
  d.dim = spec.dim;
  std::mt19937_64 rng(spec.seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::normal_distribution<float> noise(0.0f, kClusterSigma);
  std::vector<float> centres(size_t(spec.clusters) * spec.dim);
  for (float& c : centres) c = uniform(rng);
  std::uniform_int_distribution<uint32_t> pick(0, spec.clusters - 1);
  auto draw = [&](std::vector<float>& out, size_t count) {
    out.resize(count * spec.dim);
    for (size_t i = 0; i < count; ++i) {
      const float* c = centres.data() + size_t(pick(rng)) * spec.dim;
      for (uint32_t j = 0; j < spec.dim; ++j) out[i * spec.dim + j] = c[j] + noise(rng);
    }
  };
  draw(d.base, spec.n);
  draw(d.queries, num_queries);
  Finish(d);
  return d;
}

absl::StatusOr<Dataset> LoadDataset(const std::string& spec, const std::string& query_file,
                                    size_t max_queries) {
  if (spec.starts_with("synthetic:") || spec == "synthetic") {
    auto parsed = ParseSyntheticSpec(spec.size() > 10 ? spec.substr(10) : "");
    if (!parsed.ok()) return parsed.status();
    return MakeSynthetic(*parsed, max_queries);
  }
  Dataset d;
  std::string base_path = spec, queries_path = query_file;
  if (spec == "fmnist") {
    base_path = kFmnistBase;
    queries_path = kFmnistQueries;
    d.name = "fmnist";
  } else {
    d.name = SafeName(spec);
  }
  uint32_t query_dim = 0;
  auto base = dataset::ReadAllVectors(base_path, 0, &d.dim);
  if (!base.ok()) return base.status();
  d.base = *std::move(base);
  if (!queries_path.empty()) {
    auto queries = dataset::ReadAllVectors(queries_path, max_queries, &query_dim);
    if (!queries.ok()) return queries.status();
    if (query_dim != d.dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("queries have dim ", query_dim, ", base has ", d.dim));
    }
    d.queries = *std::move(queries);
  } else {
    // Hold the last rows out of the base: queries the index has never seen.
    const size_t rows = d.base.size() / d.dim;
    const size_t held = std::min(max_queries, rows / 2);
    d.queries.assign(d.base.end() - long(held * d.dim), d.base.end());
    d.base.resize((rows - held) * d.dim);
  }
  if (d.base.empty() || d.queries.empty()) {
    return absl::InvalidArgumentError("dataset has no base vectors or no queries");
  }
  Finish(d);
  return d;
}

}  // namespace shoal::bench
