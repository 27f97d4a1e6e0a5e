// shoal-ivf-bench: Fashion-MNIST through a running shoald (gRPC on loopback) against FAISS's
// IndexIVFFlat in-process, same nlist / nprobe, same run, same cores. Prints Markdown rows.
//
//   shoal-ivf-bench --target 127.0.0.1:7700 [--faiss] [--label K=16]
//
// Modes: (a) one query per request, one client; (b) 32 concurrent clients, one query per
// request; (c) requests of 100 queries. FAISS gets the same machine: (a) one thread, single
// queries; (b) one single-query loop per core; (c) search() on batches of 100 with OpenMP on
// every core. Recall@10 is tie-aware against FAISS's exact flat index.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "client/client.h"
#include "dataset/vector_reader.h"
#include "faiss/IndexFlat.h"
#include "faiss/IndexIVFFlat.h"

namespace {

using Clock = std::chrono::steady_clock;
using shoal::Client;
constexpr size_t kK = 10;
constexpr char kCollection[] = "bench_fmnist_ivf";

struct Data {
  uint32_t dim = 0;
  size_t n = 0, nq = 0;
  std::vector<float> base, queries, kth;
  std::vector<float> Query(size_t q) const {
    return {queries.begin() + long(q * dim), queries.begin() + long((q + 1) * dim)};
  }
};

struct Point {
  double qps = 0, p50_ms = 0, p99_ms = 0, recall = 0;
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size())))];
}

double RecallOf(const Data& d, size_t q, const std::vector<int64_t>& ids) {
  size_t found = 0;
  for (int64_t id : ids) {
    if (id < 0 || size_t(id) >= d.n) continue;
    double dist = 0;
    for (size_t j = 0; j < d.dim; ++j) {
      const double diff = double(d.queries[q * d.dim + j]) - d.base[size_t(id) * d.dim + j];
      dist += diff * diff;
    }
    if (dist <= double(d.kth[q]) * (1 + 1e-5)) ++found;
  }
  return double(found) / kK;
}

// Runs `threads` loops over the queries; each call answers query q and returns its ids.
template <typename SearchOne>
Point ClosedLoop(const Data& d, size_t threads, SearchOne&& one) {
  std::atomic<size_t> next{0};
  std::vector<std::vector<double>> lat(threads);
  std::vector<double> recall(threads);
  const auto start = Clock::now();
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (size_t q; (q = next.fetch_add(1)) < d.nq;) {
        const auto s = Clock::now();
        const std::vector<int64_t> ids = one(q);
        lat[t].push_back(std::chrono::duration<double, std::milli>(Clock::now() - s).count());
        recall[t] += RecallOf(d, q, ids);
      }
    });
  }
  for (auto& th : pool) th.join();
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> all;
  double r = 0;
  for (size_t t = 0; t < threads; ++t) {
    all.insert(all.end(), lat[t].begin(), lat[t].end());
    r += recall[t];
  }
  return {double(d.nq) / secs, Percentile(all, 0.5), Percentile(all, 0.99), r / double(d.nq)};
}

template <typename SearchBatch>
Point Batched(const Data& d, size_t batch, SearchBatch&& run) {
  double recall = 0;
  std::vector<double> lat;
  const auto start = Clock::now();
  for (size_t first = 0; first < d.nq; first += batch) {
    const size_t count = std::min(batch, d.nq - first);
    const auto s = Clock::now();
    const std::vector<std::vector<int64_t>> ids = run(first, count);
    lat.push_back(std::chrono::duration<double, std::milli>(Clock::now() - s).count());
    for (size_t i = 0; i < count; ++i) recall += RecallOf(d, first + i, ids[i]);
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  return {double(d.nq) / secs, Percentile(lat, 0.5), Percentile(lat, 0.99), recall / double(d.nq)};
}

void Row(const std::string& target, const std::string& mode, const Point& p) {
  std::printf("| %s | %s | %.0f | %.2f | %.2f | %.4f |\n", target.c_str(), mode.c_str(), p.qps,
              p.p50_ms, p.p99_ms, p.recall);
  std::fflush(stdout);
}

std::vector<int64_t> HitIds(const shoal::SearchResult& r) {
  std::vector<int64_t> ids;
  for (const auto& h : r.hits) ids.push_back(int64_t(h.id));
  return ids;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shoal-ivf-bench: Shoal over gRPC vs FAISS IndexIVFFlat in-process"};
  std::string target = "127.0.0.1:7700", label = "", base_file, query_file;
  uint32_t nlist = 1024, nprobe = 16;
  size_t nq = 1000, clients = 32;
  bool faiss_too = false;
  base_file = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
  query_file = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";
  app.add_option("--target", target, "shoald gRPC address");
  app.add_option("--label", label, "prefix for the Shoal rows (e.g. K=16)");
  app.add_option("--nlist", nlist);
  app.add_option("--nprobe", nprobe);
  app.add_option("--queries", nq);
  app.add_option("--clients", clients);
  app.add_option("--base", base_file);
  app.add_option("--query-file", query_file);
  app.add_flag("--faiss", faiss_too, "also run FAISS IndexIVFFlat in-process");
  CLI11_PARSE(app, argc, argv);

  Data d;
  auto base = shoal::dataset::ReadAllVectors(base_file, 0, &d.dim);
  auto queries = shoal::dataset::ReadAllVectors(query_file, nq, &d.dim);
  if (!base.ok() || !queries.ok()) {
    std::fprintf(stderr, "cannot read the data set\n");
    return 1;
  }
  d.base = *std::move(base);
  d.queries = *std::move(queries);
  d.n = d.base.size() / d.dim;
  d.nq = d.queries.size() / d.dim;
  {
    faiss::IndexFlatL2 exact(int(d.dim));
    exact.add(faiss::Index::idx_t(d.n), d.base.data());
    std::vector<float> dist(d.nq * kK);
    std::vector<faiss::Index::idx_t> ids(d.nq * kK);
    exact.search(faiss::Index::idx_t(d.nq), d.queries.data(), kK, dist.data(), ids.data());
    for (size_t q = 0; q < d.nq; ++q) d.kth.push_back(dist[q * kK + kK - 1]);
  }

  Client client(target);
  if (!client.DescribeCollection(kCollection).ok()) {
    std::fprintf(stderr, "loading %zu vectors into %s and building IVF_FLAT nlist %u...\n", d.n,
                 kCollection, nlist);
    if (!client
             .CreateCollection(
                 {kCollection, d.dim, shoal::Metric::kL2, {shoal::IndexType::kIvfFlat, nlist}})
             .ok()) {
      return 1;
    }
    auto writer = client.OpenUpsertStream(kCollection);
    for (size_t first = 0; first < d.n; first += 1000) {
      std::vector<shoal::Point> points;
      for (size_t i = first; i < std::min(d.n, first + 1000); ++i) {
        points.push_back(
            {i, {d.base.begin() + long(i * d.dim), d.base.begin() + long((i + 1) * d.dim)}, {}});
      }
      if (!(*writer)->Write(points).ok()) return 1;
    }
    if (!(*writer)->Finish().ok()) return 1;
    auto built = client.BuildIndex(kCollection);
    if (!built.ok()) return 1;
    std::fprintf(stderr, "%s\n", built->c_str());
  }
  const shoal::SearchOptions options{.k = kK, .nprobe = nprobe};
  // Warm the cache once (the table reports the warm path).
  for (size_t q = 0; q < d.nq; q += 1) (void)client.Search(kCollection, d.Query(q), options);
  const std::string shoal_name = label.empty() ? "shoal" : "shoal " + label;

  Row(shoal_name, "(a) 1 client", ClosedLoop(d, 1, [&](size_t q) {
        auto r = client.Search(kCollection, d.Query(q), options);
        return r.ok() ? HitIds(*r) : std::vector<int64_t>{};
      }));
  Row(shoal_name, "(b) " + std::to_string(clients) + " clients",
      ClosedLoop(d, clients, [&](size_t q) {
        auto r = client.Search(kCollection, d.Query(q), options);
        return r.ok() ? HitIds(*r) : std::vector<int64_t>{};
      }));
  Row(shoal_name, "(c) batch 100", Batched(d, 100, [&](size_t first, size_t count) {
        std::vector<std::vector<float>> batch;
        for (size_t i = 0; i < count; ++i) batch.push_back(d.Query(first + i));
        auto r = client.SearchBatch(kCollection, batch, options);
        std::vector<std::vector<int64_t>> out(count);
        if (r.ok()) {
          for (size_t i = 0; i < count; ++i) out[i] = HitIds((*r)[i]);
        }
        return out;
      }));
  if (!faiss_too) return 0;

  const int cores = int(std::thread::hardware_concurrency());
  faiss::IndexFlatL2 quantizer(int(d.dim));
  faiss::IndexIVFFlat ivf(&quantizer, d.dim, nlist);
  ivf.cp.niter = 10;  // Shoal's k-means iterations
  omp_set_num_threads(cores);
  ivf.train(faiss::Index::idx_t(d.n), d.base.data());
  ivf.add(faiss::Index::idx_t(d.n), d.base.data());
  ivf.nprobe = nprobe;
  auto faiss_one = [&](size_t q) {
    std::vector<float> dist(kK);
    std::vector<faiss::Index::idx_t> ids(kK);
    ivf.search(1, d.queries.data() + q * d.dim, kK, dist.data(), ids.data());
    return std::vector<int64_t>(ids.begin(), ids.end());
  };
  omp_set_num_threads(1);
  Row("faiss", "(a) 1 thread", ClosedLoop(d, 1, faiss_one));
  Row("faiss", "(b) " + std::to_string(cores) + " threads",
      ClosedLoop(d, size_t(cores), faiss_one));
  omp_set_num_threads(cores);
  Row("faiss", "(c) batch 100", Batched(d, 100, [&](size_t first, size_t count) {
        std::vector<float> dist(count * kK);
        std::vector<faiss::Index::idx_t> ids(count * kK);
        ivf.search(faiss::Index::idx_t(count), d.queries.data() + first * d.dim, kK, dist.data(),
                   ids.data());
        std::vector<std::vector<int64_t>> out(count);
        for (size_t i = 0; i < count; ++i)
          out[i].assign(ids.begin() + long(i * kK), ids.begin() + long((i + 1) * kK));
        return out;
      }));
  return 0;
}
