// InProcessTarget: what FAISS and hnswlib targets share — resource figures read from this
// process. Peak RSS is the high-water mark while searching (reset when Build() ends) minus the
// RSS from just before Build(): the index and search buffers, not the harness's own copy of
// the dataset.
//
// Thread-safety: as Target.
#pragma once

#include <unistd.h>

#include "bench/harness/process_usage.h"
#include "bench/harness/target.h"

namespace shoal::bench {

class InProcessTarget : public Target {
 public:
  bool in_process() const final { return true; }

  ResourceUsage Usage() override {
    const ProcessUsage now = ReadProcessUsage(getpid());
    return {.cpu_seconds = now.cpu_seconds,
            .peak_rss_bytes = now.peak_rss_bytes > rss_before_build_
                                  ? now.peak_rss_bytes - rss_before_build_
                                  : 0};
  }

 protected:
  // Call first thing in Build().
  void MarkBuildStart() { rss_before_build_ = ReadProcessUsage(getpid()).rss_bytes; }
  // Call when Build() succeeded: build-time peaks are not search-time memory.
  void MarkBuildEnd() { ResetPeakRss(getpid()); }

 private:
  uint64_t rss_before_build_ = 0;
};

}  // namespace shoal::bench
