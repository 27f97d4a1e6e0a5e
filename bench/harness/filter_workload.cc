#include "bench/harness/filter_workload.h"

#include <faiss/IndexFlat.h>
#include <omp.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/harness/ground_truth.h"

namespace shoal::bench {
namespace {

constexpr int64_t kRegions = 100;
constexpr int64_t kTimeStart = 1704067200;  // 2024-01-01T00:00:00Z
constexpr int64_t kYearSeconds = 366 * 86400;
constexpr char kTrainLabels[] = "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz";
constexpr char kTestLabels[] = "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz";

uint64_t Mix(uint64_t x) {  // splitmix64's finaliser: independent-looking values per salt
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

int64_t Uniform(uint64_t id, uint64_t salt, int64_t range) {
  return int64_t(Mix(id * 4 + salt) % uint64_t(range));
}

// An IDX1 label file (magic 0x00000801, count, one byte per label), gzip'd.
absl::StatusOr<std::vector<int64_t>> ReadLabels(const char* path, size_t count) {
  gzFile f = gzopen(path, "rb");
  if (f == nullptr) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  unsigned char header[8];
  std::vector<unsigned char> bytes(count);
  const bool ok = gzread(f, header, 8) == 8 && header[2] == 0x08 && header[3] == 0x01 &&
                  gzread(f, bytes.data(), unsigned(count)) == int(count);
  gzclose(f);
  if (!ok) return absl::DataLossError(absl::StrCat(path, ": not ", count, " IDX1 labels"));
  return std::vector<int64_t>(bytes.begin(), bytes.end());
}

float L2f(const float* a, const float* b, uint32_t dim) {
  float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  uint32_t j = 0;
  for (; j + 8 <= dim; j += 8) {
    for (int l = 0; l < 8; ++l) {
      const float t = a[j + l] - b[j + l];
      lanes[l] += t * t;
    }
  }
  float sum = 0;
  for (; j < dim; ++j) sum += (a[j] - b[j]) * (a[j] - b[j]);
  for (float l : lanes) sum += l;
  return sum;
}

bool Selected(const std::vector<uint8_t>& bitmap, size_t row) {
  return (bitmap[row >> 3] >> (row & 7)) & 1;
}

// One group: the rows for which `pred` holds, under `filter`.
template <typename Pred>
void AddGroup(FilterCase* c, size_t n, std::string filter, Pred pred) {
  std::vector<uint8_t> bitmap((n + 7) / 8, 0);
  uint64_t matches = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!pred(i)) continue;
    bitmap[i >> 3] |= uint8_t(1u << (i & 7));
    ++matches;
  }
  c->filter.push_back(std::move(filter));
  c->bitmap.push_back(std::move(bitmap));
  c->matches.push_back(matches);
}

// A case whose filter is the same for every query.
template <typename Pred>
FilterCase Uniform(const Dataset& d, std::string regime, std::string name, std::string filter,
                   Pred pred) {
  FilterCase c;
  c.regime = std::move(regime);
  c.name = std::move(name);
  AddGroup(&c, d.n, std::move(filter), pred);
  c.group_of.assign(d.nq, 0);
  return c;
}

// A case whose filter is `field = value_of[q]`: one group per distinct value.
FilterCase PerQuery(const Dataset& d, const FilterWorkload& w, std::string regime, std::string name,
                    const std::string& field, const std::vector<int64_t>& value_of,
                    int64_t RowAttributes::*member) {
  FilterCase c;
  c.regime = std::move(regime);
  c.name = std::move(name);
  std::map<int64_t, uint32_t> group;
  for (size_t q = 0; q < d.nq; ++q) {
    const int64_t v = value_of[q];
    auto [it, added] = group.emplace(v, uint32_t(group.size()));
    if (added) {
      AddGroup(&c, d.n, absl::StrCat(field, " = ", v),
               [&](size_t i) { return w.rows[i].*member == v; });
    }
    c.group_of.push_back(it->second);
  }
  return c;
}

}  // namespace

Attributes FilterWorkload::AttributesOf(size_t row) const {
  const RowAttributes& r = rows[row];
  Attributes a;
  a["u"] = r.u;
  a["cat10"] = r.cat10;
  a["cat1000"] = r.cat1000;
  a["ts"] = r.ts;
  a["region"] = r.region;
  if (r.label >= 0) a["label"] = r.label;
  return a;
}

absl::StatusOr<FilterWorkload> MakeFilterWorkload(const Dataset& d, int threads) {
  FilterWorkload w;
  w.rows.resize(d.n);
  for (size_t i = 0; i < d.n; ++i) {
    RowAttributes& r = w.rows[i];
    r.u = Uniform(i, 0, 10000);
    r.cat10 = Uniform(i, 1, 10);
    r.cat1000 = Uniform(i, 2, 1000);
    r.ts = kTimeStart + Uniform(i, 3, kYearSeconds);
  }
  // Regions: the nearest of kRegions base rows spread over the set (FAISS, BLAS).
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  try {
    faiss::IndexFlatL2 centres(int(d.dim));
    std::vector<float> picked(size_t(kRegions) * d.dim);
    for (int64_t r = 0; r < kRegions; ++r) {
      std::memcpy(&picked[size_t(r) * d.dim], d.row(size_t(r) * (d.n / kRegions)),
                  d.dim * sizeof(float));
    }
    centres.add(kRegions, picked.data());
    std::vector<float> dist(std::max<size_t>(d.n, d.nq * kRegions));
    std::vector<faiss::Index::idx_t> ids(dist.size());
    centres.search(faiss::Index::idx_t(d.n), d.base.data(), 1, dist.data(), ids.data());
    for (size_t i = 0; i < d.n; ++i) w.rows[i].region = ids[i];
    centres.search(faiss::Index::idx_t(d.nq), d.queries.data(), kRegions, dist.data(), ids.data());
    for (size_t q = 0; q < d.nq; ++q) {
      w.near_region.push_back(ids[q * kRegions]);
      w.far_region.push_back(ids[q * kRegions + kRegions - 1]);
    }
  } catch (const std::exception& e) {
    omp_set_num_threads(saved);
    return absl::InternalError(absl::StrCat("assigning regions: ", e.what()));
  }
  omp_set_num_threads(saved);
  w.label.assign(d.nq, -1);
  w.far_label.assign(d.nq, -1);
  if (d.name != "fmnist") return w;
  auto train = ReadLabels(kTrainLabels, d.n);
  if (!train.ok()) return train.status();
  auto test = ReadLabels(kTestLabels, d.nq);
  if (!test.ok()) return test.status();
  // Class centroids; a query's far class is the one whose centroid is farthest from it.
  constexpr int kClasses = 10;
  std::vector<double> sum(size_t(kClasses) * d.dim, 0);
  std::vector<size_t> count(kClasses, 0);
  for (size_t i = 0; i < d.n; ++i) {
    const int64_t l = (*train)[i];
    w.rows[i].label = l;
    ++count[size_t(l)];
    for (uint32_t j = 0; j < d.dim; ++j) sum[size_t(l) * d.dim + j] += d.row(i)[j];
  }
  std::vector<float> centroid(sum.size());
  for (size_t i = 0; i < sum.size(); ++i) {
    centroid[i] = float(sum[i] / double(std::max<size_t>(1, count[i / d.dim])));
  }
  for (size_t q = 0; q < d.nq; ++q) {
    w.label[q] = (*test)[q];
    float farthest = -1;
    for (int l = 0; l < kClasses; ++l) {
      const float dl = L2f(d.query(q), &centroid[size_t(l) * d.dim], d.dim);
      if (dl > farthest) {
        farthest = dl;
        w.far_label[q] = l;
      }
    }
  }
  return w;
}

double FilterCase::selectivity(size_t n) const {
  if (group_of.empty() || n == 0) return 0;
  double sum = 0;
  for (uint32_t g : group_of) sum += double(matches[g]);
  return sum / double(group_of.size()) / double(n);
}

std::vector<FilterCase> MakeFilterCases(const Dataset& d, const FilterWorkload& w) {
  std::vector<FilterCase> cases;
  cases.push_back(Uniform(d, "none", "(unfiltered)", "", [](size_t) { return true; }));
  const char* kUn = "uncorrelated";
  for (int64_t below : {1, 10, 100, 1000, 5000}) {
    const std::string text = absl::StrCat("u < ", below);
    cases.push_back(Uniform(d, kUn, text, text, [&](size_t i) { return w.rows[i].u < below; }));
  }
  cases.push_back(Uniform(d, kUn, "u >= 0", "u >= 0", [](size_t) { return true; }));
  cases.push_back(Uniform(d, kUn, "cat1000 = 7", "cat1000 = 7",
                          [&](size_t i) { return w.rows[i].cat1000 == 7; }));
  cases.push_back(
      Uniform(d, kUn, "cat1000 in [10 values]", "cat1000 in [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]",
              [&](size_t i) { return w.rows[i].cat1000 >= 1 && w.rows[i].cat1000 <= 10; }));
  cases.push_back(
      Uniform(d, kUn, "cat10 = 3", "cat10 = 3", [&](size_t i) { return w.rows[i].cat10 == 3; }));
  // A range over the timestamp: four days of the year (~1.1%).
  const int64_t from = kTimeStart + 100 * 86400, to = from + 4 * 86400;
  cases.push_back(Uniform(d, kUn, "ts in 4 days", absl::StrCat("ts >= ", from, " and ts < ", to),
                          [&](size_t i) { return w.rows[i].ts >= from && w.rows[i].ts < to; }));
  cases.push_back(PerQuery(d, w, "correlated", "region = nearest", "region", w.near_region,
                           &RowAttributes::region));
  cases.push_back(PerQuery(d, w, "anti-correlated", "region = farthest", "region", w.far_region,
                           &RowAttributes::region));
  if (!w.label.empty() && w.label[0] >= 0) {
    cases.push_back(
        PerQuery(d, w, "correlated", "label = own class", "label", w.label, &RowAttributes::label));
    cases.push_back(PerQuery(d, w, "anti-correlated", "label = farthest class", "label",
                             w.far_label, &RowAttributes::label));
  }
  return cases;
}

FilteredTruth ComputeFilteredTruth(const Dataset& d, const FilterCase& c, uint32_t k, int threads) {
  FilteredTruth t;
  t.k = k;
  t.ids.assign(d.nq * k, -1);
  t.dist.assign(d.nq * k, std::numeric_limits<float>::infinity());
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (size_t q = 0; q < d.nq; ++q) {
    const std::vector<uint8_t>& bitmap = c.bitmap[c.group_of[q]];
    std::vector<std::pair<float, int64_t>> best;  // a max-heap of the k nearest so far
    for (size_t i = 0; i < d.n; ++i) {
      if (!Selected(bitmap, i)) continue;
      const float dist = L2f(d.query(q), d.row(i), d.dim);
      if (best.size() == k && dist >= best.front().first) continue;
      best.push_back({dist, int64_t(i)});
      std::push_heap(best.begin(), best.end());
      if (best.size() > k) {
        std::pop_heap(best.begin(), best.end());
        best.pop_back();
      }
    }
    std::sort_heap(best.begin(), best.end());
    for (size_t j = 0; j < best.size(); ++j) {
      t.ids[q * k + j] = best[j].second;
      t.dist[q * k + j] = best[j].first;
    }
  }
  return t;
}

double FilteredRecall(const Dataset& d, const FilterCase& c, const FilteredTruth& t, size_t q,
                      const int64_t* ids) {
  size_t truths = 0;
  while (truths < t.k && t.ids[q * t.k + truths] >= 0) ++truths;
  if (truths == 0) return 1;
  // Within float rounding of the last true distance counts as found (ties).
  const double bound = double(t.dist[q * t.k + truths - 1]) * (1 + 1e-5) + 1e-6;
  size_t found = 0;
  for (size_t j = 0; j < truths; ++j) {
    const int64_t id = ids[j];
    if (id < 0 || size_t(id) >= d.n || !Selected(c.bitmap[c.group_of[q]], size_t(id))) continue;
    if (std::find(t.ids.begin() + long(q * t.k), t.ids.begin() + long(q * t.k + truths), id) !=
            t.ids.begin() + long(q * t.k + truths) ||
        L2(d, q, size_t(id)) <= bound) {
      ++found;
    }
  }
  return double(found) / double(truths);
}

}  // namespace shoal::bench
