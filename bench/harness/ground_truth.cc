#include "bench/harness/ground_truth.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "faiss/IndexFlat.h"

namespace shoal::bench {
namespace {

constexpr char kMagic[8] = {'S', 'H', 'O', 'A', 'L', 'G', 'T', '2'};
constexpr size_t kQueryBlock = 1024;  // queries per FAISS call: bounds the distance buffers

struct Header {
  char magic[8];
  uint64_t checksum;
  uint32_t nq;
  uint32_t k;
};

absl::StatusOr<GroundTruth> ReadCache(const std::string& path, const Dataset& d, uint32_t k) {
  std::ifstream in(path, std::ios::binary);
  Header h{};
  if (!in.read(reinterpret_cast<char*>(&h), sizeof(h))) return absl::NotFoundError(path);
  if (std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0 || h.checksum != d.checksum ||
      h.nq != d.nq || h.k != k) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is for other inputs"));
  }
  GroundTruth gt{k, std::vector<int64_t>(d.nq * k), std::vector<float>(d.nq * k)};
  in.read(reinterpret_cast<char*>(gt.ids.data()), std::streamsize(gt.ids.size() * 8));
  in.read(reinterpret_cast<char*>(gt.dist.data()), std::streamsize(gt.dist.size() * 4));
  if (!in) return absl::DataLossError(absl::StrCat(path, " is truncated"));
  return gt;
}

bool WriteCache(const std::string& path, const Dataset& d, const GroundTruth& gt) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    Header h{};
    std::memcpy(h.magic, kMagic, sizeof(kMagic));
    h.checksum = d.checksum;
    h.nq = uint32_t(d.nq);
    h.k = gt.k;
    out.write(reinterpret_cast<const char*>(&h), sizeof(h));
    out.write(reinterpret_cast<const char*>(gt.ids.data()), std::streamsize(gt.ids.size() * 8));
    out.write(reinterpret_cast<const char*>(gt.dist.data()), std::streamsize(gt.dist.size() * 4));
    if (!out.flush()) return false;
  }
  std::filesystem::rename(tmp, path, ec);  // readers see the whole file or none
  return !ec;
}

}  // namespace

double L2(const Dataset& d, size_t q, size_t row) {
  const float* a = d.query(q);
  const float* b = d.row(row);
  double sum = 0;
  for (uint32_t j = 0; j < d.dim; ++j) {
    const double diff = double(a[j]) - double(b[j]);
    sum += diff * diff;
  }
  return sum;
}

GroundTruth ComputeGroundTruth(const Dataset& d, uint32_t k, int threads) {
  const uint32_t kk = uint32_t(std::min<size_t>(k, d.n));
  GroundTruth gt{k, std::vector<int64_t>(d.nq * k, -1),
                 std::vector<float>(d.nq * k, std::numeric_limits<float>::infinity())};
  faiss::IndexFlatL2 exact(int(d.dim));
  exact.add(faiss::Index::idx_t(d.n), d.base.data());
  const int saved = omp_get_max_threads();
  omp_set_num_threads(std::max(1, threads));
  std::vector<faiss::Index::idx_t> ids(kQueryBlock * kk);
  std::vector<float> dist(kQueryBlock * kk);
  for (size_t first = 0; first < d.nq; first += kQueryBlock) {
    const size_t count = std::min(kQueryBlock, d.nq - first);
    exact.search(faiss::Index::idx_t(count), d.query(first), kk, dist.data(), ids.data());
    for (size_t i = 0; i < count; ++i) {
      // FAISS computes |x|^2 + |y|^2 - 2xy in float, off by ~1e-6 of the norms: store exact
      // distances (as RecallAt computes them) and order by them.
      std::vector<std::pair<float, int64_t>> exact_order;
      for (uint32_t j = 0; j < kk; ++j) {
        const int64_t id = ids[i * kk + j];
        if (id >= 0) exact_order.emplace_back(float(L2(d, first + i, size_t(id))), id);
      }
      std::sort(exact_order.begin(), exact_order.end());
      for (size_t j = 0; j < exact_order.size(); ++j) {
        gt.dist[(first + i) * k + j] = exact_order[j].first;
        gt.ids[(first + i) * k + j] = exact_order[j].second;
      }
    }
  }
  omp_set_num_threads(saved);
  return gt;
}

std::string GroundTruthPath(const std::string& cache_dir, const Dataset& d, uint32_t k) {
  return absl::StrCat(cache_dir, "/", d.name, ".q", d.nq, ".k", k, ".gt");
}

absl::StatusOr<GroundTruth> LoadOrComputeGroundTruth(const Dataset& d, uint32_t k,
                                                     const std::string& cache_dir, int threads,
                                                     bool* from_cache) {
  const std::string path = GroundTruthPath(cache_dir, d, k);
  if (auto cached = ReadCache(path, d, k); cached.ok()) {
    *from_cache = true;
    return cached;
  }
  *from_cache = false;
  GroundTruth gt = ComputeGroundTruth(d, k, threads);
  WriteCache(path, d, gt);
  return gt;
}

double RecallAt(const Dataset& d, const GroundTruth& gt, size_t q, const int64_t* ids,
                size_t num_ids, size_t r) {
  r = std::min<size_t>(r, gt.k);
  if (r == 0) return 0;
  const double threshold = double(gt.dist_of(q)[r - 1]) * (1 + 1e-5);
  size_t found = 0;
  const size_t considered = std::min(num_ids, r);
  for (size_t i = 0; i < considered; ++i) {
    const int64_t id = ids[i];
    if (id < 0 || size_t(id) >= d.n) continue;
    if (std::find(ids, ids + i, id) != ids + i) continue;  // a duplicate answers nothing new
    if (L2(d, q, size_t(id)) <= threshold) ++found;
  }
  return double(found) / double(r);
}

}  // namespace shoal::bench
