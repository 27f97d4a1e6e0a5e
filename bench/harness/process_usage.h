// Reads a process's CPU time and memory from /proc — the figures the harness reports per point.
//
// Thread-safety: stateless functions.
#pragma once

#include <sys/types.h>

#include <cstdint>

namespace shoal::bench {

struct ProcessUsage {
  double cpu_seconds = 0;       // utime + stime, all threads
  uint64_t rss_bytes = 0;       // VmRSS now
  uint64_t peak_rss_bytes = 0;  // VmHWM
};

// Zeros when the process is gone or /proc is unreadable.
ProcessUsage ReadProcessUsage(pid_t pid);
// Resets VmHWM to the current RSS (clear_refs "5"); false when the kernel refuses.
bool ResetPeakRss(pid_t pid);

}  // namespace shoal::bench
