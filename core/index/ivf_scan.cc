#include "core/index/ivf_scan.h"

#include <algorithm>
#include <cmath>

#include "core/index/distance.h"
#include "core/index/fastscan_model.h"
#include "core/index/rounding_bound.h"

namespace shoal::core {
namespace {

// Scan scratch per arena thread, bounded by chunking.
constexpr size_t kMaxScratchFloats = size_t(1) << 20;  // 4 MiB of keys
thread_local std::vector<float> scratch_keys;
thread_local PartitionScratch scratch;
thread_local std::vector<float> scratch_row_norms;

// Pushes query `query`'s rows into `sink`. `recheck` (an exact FLAT partition scored through
// sgemm): a row whose sgemm key may be within rounding of the threshold is re-scored with the
// single-query kernel and pushed with that key, so the top-k (ids and keys) is exactly the
// one-query path's whatever other queries shared the scan. row_norms: |x|^2 when recheck.
void PushRows(const ScanQuery& query, const Sink& sink, const float* keys, const uint8_t* codes,
              const uint64_t* ids, const std::atomic<uint8_t>* dead_flags, size_t n, bool exact,
              bool recheck, const float* row_norms, uint32_t partition, uint32_t row_begin) {
  CandidateTopK& best = *sink.best;
  const uint32_t segment = exact ? kExact : sink.segment;
  const PreparedQueries& p = *query.prepared;
  const size_t dim = p.model().dim;
  const float query_norm = p.query_norm_sq(query.index);
  for (size_t i = 0; i < n; ++i) {
    float key = keys[i];
    if (recheck) {
      // The sgemm key and the kernel's are each within the bound of the true key.
      const float slack = 2 * DistanceRoundingBound(dim, query_norm, row_norms[i]);
      if (std::isfinite(key) && std::isfinite(slack) && key - slack > best.threshold()) continue;
    } else if (key > best.threshold()) {
      continue;
    }
    if (dead_flags && dead_flags[i].load(std::memory_order_acquire)) continue;
    if (sink.select && !sink.select->Selected(partition, row_begin + uint32_t(i))) continue;
    if (sink.filter && sink.filter->IsDead(ids[i])) continue;
    if (recheck) {
      key = p.FlatKey(query.index, reinterpret_cast<const float*>(codes) + i * dim);
      if (key > best.threshold()) continue;
    }
    best.Push(Candidate{key, ids[i], segment, partition, uint32_t(i)});
  }
}

// The fast-scan kernels' threshold for a query whose top-k admits keys <= `threshold` and
// whose rows get `coarse` added to the kernel's key: threshold - coarse, widened by a few ulps
// so that no row the exact comparison (kernel key + coarse <= threshold) admits is dropped in
// the registers. The sink makes the exact comparison.
float KernelThreshold(float threshold, float coarse) {
  if (!std::isfinite(threshold)) return threshold;
  return (threshold - coarse) + (std::fabs(threshold) + std::fabs(coarse)) * 0x1p-21f;
}

thread_local std::vector<const FastScanLut*> scratch_luts;
thread_local std::vector<float> scratch_coarse, scratch_thresholds;

// 4-bit PQ: the thresholds go into the kernel (FastScanRegion), shifted per query by the
// partition's coarse term, so only rows that can enter a query's top-k leave the registers;
// each is pushed with the same key ScorePartition gives it (kernel key + coarse key).
void FastScanIntoSinks(const ScanQuery* queries, const Sink* sinks, size_t nq, const uint8_t* codes,
                       const uint64_t* ids, size_t n, uint32_t partition) {
  const IvfModel& model = queries[0].prepared->model();
  scratch_luts.resize(nq);
  scratch_coarse.resize(nq);
  scratch_thresholds.resize(nq);
  for (size_t j = 0; j < nq; ++j) {
    scratch_luts[j] = &queries[j].prepared->fastscan_lut(queries[j].index);
    scratch_coarse[j] = model.residual ? queries[j].coarse_key : 0.0f;
    scratch_thresholds[j] = KernelThreshold(sinks[j].best->threshold(), scratch_coarse[j]);
  }
  const float* coarse = scratch_coarse.data();
  FastScanRegion(scratch_luts.data(), nq, codes, n, model.CodeSize() - model.QuantizerCodeSize(),
                 scratch_thresholds.data(), [&](size_t j, uint32_t row, float kernel_key) {
                   const Sink& sink = sinks[j];
                   CandidateTopK& best = *sink.best;
                   const float key = kernel_key + coarse[j];
                   if (key <= best.threshold() &&
                       !(sink.select && !sink.select->Selected(partition, row)) &&
                       !(sink.filter && sink.filter->IsDead(ids[row]))) {
                     best.Push(Candidate{key, ids[row], sink.segment, partition, row});
                   }
                   return KernelThreshold(best.threshold(), coarse[j]);
                 });
}

thread_local std::vector<ScanQuery> scratch_dense_queries;
thread_local std::vector<Sink> scratch_dense_sinks;
thread_local std::vector<uint8_t> scratch_gathered;
thread_local std::vector<uint32_t> scratch_gathered_rows;

// A query whose selection holds at most this share of a partition's rows is scored on just
// those rows, gathered, rather than on all of them: the partition's other rows would cost a
// distance each for nothing (a 1% filter widened over 25 partitions scored 100x the rows it
// could keep).
constexpr uint64_t kSparseShareDivisor = 4;

// Scores one query on the selected rows of the partition only: their codes gathered into a
// contiguous run, scored as a partition of that many rows, pushed with their own row numbers.
void ScoreSelectedRows(const ScanQuery& query, const Sink& sink, const uint8_t* codes,
                       const uint64_t* ids, size_t n, bool exact, uint32_t partition,
                       uint32_t row_begin) {
  const size_t code_size = query.prepared->model().CodeSize();
  std::vector<uint32_t>& rows = scratch_gathered_rows;
  rows.clear();
  sink.select->ForEachSelected(partition, row_begin, row_begin + n,
                               [&rows, row_begin](uint32_t r) { rows.push_back(r - row_begin); });
  if (rows.empty()) return;
  scratch_gathered.resize(rows.size() * code_size);
  for (size_t i = 0; i < rows.size(); ++i) {
    std::copy_n(codes + size_t(rows[i]) * code_size, code_size,
                scratch_gathered.data() + i * code_size);
  }
  scratch_keys.resize(rows.size());
  ScorePartition(&query, 1, scratch_gathered.data(), rows.size(), scratch_keys.data(), &scratch);
  CandidateTopK& best = *sink.best;
  const uint32_t segment = exact ? kExact : sink.segment;
  for (size_t i = 0; i < rows.size(); ++i) {
    const float key = scratch_keys[i];
    if (key > best.threshold()) continue;
    const uint64_t id = ids[rows[i]];
    if (sink.filter && sink.filter->IsDead(id)) continue;
    best.Push(Candidate{key, id, segment, partition, rows[i]});
  }
}

// Whether query j of this partition's scan takes the gathered path (ScoreSelectedRows).
bool ScoresSelectedRows(const ScanQuery& query, const Sink& sink, size_t n, uint32_t partition,
                        uint32_t row_begin) {
  if (!sink.select || ScoresThroughGemm(query.prepared->model(), 1)) return false;
  return sink.select->CountRange(partition, row_begin, row_begin + n) * kSparseShareDivisor <= n;
}

void ScoreAllRows(const ScanQuery* queries, const Sink* sinks, size_t nq, const uint8_t* codes,
                  const uint64_t* ids, const std::atomic<uint8_t>* dead_flags, size_t n, bool exact,
                  uint32_t partition, uint32_t row_begin);

}  // namespace

void ScoreIntoSinks(const ScanQuery* queries, const Sink* sinks, size_t nq, const uint8_t* codes,
                    const uint64_t* ids, const std::atomic<uint8_t>* dead_flags, size_t n,
                    bool exact, uint32_t partition, uint32_t row_begin) {
  if (nq == 0 || n == 0) return;
  if (!exact && IsFastScan(queries[0].prepared->model())) {
    return FastScanIntoSinks(queries, sinks, nq, codes, ids, n, partition);
  }
  if (dead_flags == nullptr) {  // memtable blocks (dead flags per row) always scan whole
    std::vector<ScanQuery>& dense_queries = scratch_dense_queries;
    std::vector<Sink>& dense_sinks = scratch_dense_sinks;
    dense_queries.clear();
    dense_sinks.clear();
    for (size_t j = 0; j < nq; ++j) {
      if (ScoresSelectedRows(queries[j], sinks[j], n, partition, row_begin)) {
        ScoreSelectedRows(queries[j], sinks[j], codes, ids, n, exact, partition, row_begin);
      } else {
        dense_queries.push_back(queries[j]);
        dense_sinks.push_back(sinks[j]);
      }
    }
    if (dense_queries.size() == nq) {
      return ScoreAllRows(queries, sinks, nq, codes, ids, dead_flags, n, exact, partition,
                          row_begin);
    }
    if (dense_queries.empty()) return;
    return ScoreAllRows(dense_queries.data(), dense_sinks.data(), dense_queries.size(), codes, ids,
                        dead_flags, n, exact, partition, row_begin);
  }
  ScoreAllRows(queries, sinks, nq, codes, ids, dead_flags, n, exact, partition, row_begin);
}

namespace {

void ScoreAllRows(const ScanQuery* queries, const Sink* sinks, size_t nq, const uint8_t* codes,
                  const uint64_t* ids, const std::atomic<uint8_t>* dead_flags, size_t n, bool exact,
                  uint32_t partition, uint32_t row_begin) {
  // At least one query per chunk.
  const size_t chunk = std::max<size_t>(1, kMaxScratchFloats / std::max<size_t>(1, n));
  bool have_row_norms = false;
  for (size_t first = 0; first < nq; first += chunk) {
    const size_t count = std::min(chunk, nq - first);
    scratch_keys.resize(count * n);
    ScorePartition(queries + first, count, codes, n, scratch_keys.data(), &scratch);
    // Exact (FLAT) keys must not depend on how many queries shared the scan.
    const bool recheck = exact && ScoresThroughGemm(queries[first].prepared->model(), count);
    if (recheck && !have_row_norms) {
      have_row_norms = true;
      const size_t dim = queries[first].prepared->model().dim;
      const float* rows = reinterpret_cast<const float*>(codes);
      scratch_row_norms.resize(n);
      for (size_t i = 0; i < n; ++i) {
        scratch_row_norms[i] = InnerProduct(rows + i * dim, rows + i * dim, dim);
      }
    }
    for (size_t c = 0; c < count; ++c) {
      PushRows(queries[first + c], sinks[first + c], scratch_keys.data() + c * n, codes, ids,
               dead_flags, n, exact, recheck, scratch_row_norms.data(), partition, row_begin);
    }
  }
  // A huge partition may have grown the scratch past the bound: give that memory back.
  if (scratch_keys.capacity() > kMaxScratchFloats) {
    std::vector<float>().swap(scratch_keys);
    std::vector<float>().swap(scratch_row_norms);
    scratch = PartitionScratch();
  }
}

}  // namespace
}  // namespace shoal::core
