// ContainerLimits: the CPU and memory a process may use, read from its cgroup the way the JVM
// and Go's automaxprocs do, so that shoald sizes itself to a container's limits (`--cpus 1
// --memory 1g`, a pod's resources.limits) rather than to the host it happens to run on.
//
// The controller directories are found through /proc/self/cgroup and /proc/self/mountinfo.
// cgroup v1 (cpu.cfs_quota_us / cpu.cfs_period_us, memory.limit_in_bytes) is preferred for a
// controller that a v1 hierarchy holds; otherwise the v2 unified hierarchy (cpu.max,
// memory.max). Every level from the process's cgroup up to the mount point is read and the
// smallest limit wins, as the kernel enforces it. Missing files mean "no limit".
//
// Every path is taken relative to `root` (normally "/"), so tests build fake trees.
//
// Thread-safety: free functions over the filesystem; safe to call from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace shoal::server {

struct ContainerLimits {
  // CPUs the quota allows, rounded down, at least 1; nullopt when there is no quota.
  std::optional<int> cpu_quota;
  // Which file set it, e.g. "cgroup v1 /sys/fs/cgroup/cpu/cpu.cfs_quota_us".
  std::string cpu_source;
  // Memory limit in bytes; nullopt when there is none.
  std::optional<int64_t> memory_bytes;
  std::string memory_source;
};

// Reads the limits of the calling process's cgroup under `root`.
ContainerLimits ReadContainerLimits(const std::string& root = "/");

// CPUs in this thread's affinity mask (sched_getaffinity); hardware_concurrency on failure.
int AffinityCpus();

// Physical memory of the host, bytes (sysconf); 0 when unknown.
int64_t PhysicalMemoryBytes();

// What `cpu.threads = 0` and `cache.bytes = 0` resolve to, and why.
struct Sizing {
  int cpu_threads = 1;
  std::string cpu_source;
  int64_t cache_bytes = 0;
  std::string cache_source;
};

// cpu_threads: usable CPUs - 1, at least 1, with usable = min(cgroup quota, affinity).
// cache_bytes: 25% of min(cgroup memory limit, physical memory); 1 GiB when neither is known.
// A configured value (> 0) is kept as it is.
Sizing ResolveSizing(int configured_threads, int64_t configured_cache_bytes,
                     const ContainerLimits& limits, int affinity_cpus, int64_t physical_bytes);

// True when a listen address ("host:port", "[v6]:port") only accepts local connections.
bool IsLoopbackAddress(const std::string& addr);

}  // namespace shoal::server
