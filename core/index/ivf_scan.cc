#include "core/index/ivf_scan.h"

#include <algorithm>

namespace shoal::core {
namespace {

// Scan scratch per arena thread, bounded by chunking.
constexpr size_t kMaxScratchFloats = size_t(1) << 20;  // 4 MiB of keys
thread_local std::vector<float> scratch_keys;
thread_local PartitionScratch scratch;

}  // namespace

void ScoreIntoSinks(const ScanQuery* queries, const Sink* sinks, size_t nq, const uint8_t* codes,
                    const uint64_t* ids, const std::atomic<uint8_t>* dead_flags, size_t n,
                    bool exact, uint32_t partition) {
  // At least one query per chunk.
  const size_t chunk = std::max<size_t>(1, kMaxScratchFloats / std::max<size_t>(1, n));
  for (size_t first = 0; first < nq; first += chunk) {
    const size_t count = std::min(chunk, nq - first);
    scratch_keys.resize(count * n);
    ScorePartition(queries + first, count, codes, n, scratch_keys.data(), &scratch);
    for (size_t c = 0; c < count; ++c) {
      const Sink& sink = sinks[first + c];
      const float* keys = scratch_keys.data() + c * n;
      CandidateTopK& best = *sink.best;
      const uint32_t segment = exact ? kExact : sink.segment;
      for (size_t i = 0; i < n; ++i) {
        if (keys[i] > best.threshold()) continue;
        if (dead_flags && dead_flags[i].load(std::memory_order_acquire)) continue;
        if (sink.filter && sink.filter->IsDead(ids[i])) continue;
        best.Push(Candidate{keys[i], ids[i], segment, partition, uint32_t(i)});
      }
    }
  }
  // A huge partition may have grown the scratch past the bound: give that memory back.
  if (scratch_keys.capacity() > kMaxScratchFloats) {
    std::vector<float>().swap(scratch_keys);
    scratch = PartitionScratch();
  }
}

}  // namespace shoal::core
