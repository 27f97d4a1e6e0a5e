#include "server/container_limits.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace shoal::server {
namespace {

// v1 reports "no limit" as a huge page-rounded number (9223372036854771712).
constexpr int64_t kUnlimited = int64_t(1) << 62;

std::optional<std::string> ReadLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return std::string(absl::StripAsciiWhitespace(line));
}

std::optional<int64_t> ReadInt(const std::string& path) {
  auto line = ReadLine(path);
  int64_t v;
  if (!line || !absl::SimpleAtoi(*line, &v)) return std::nullopt;
  return v;
}

// Where one controller's files are for this process: the directory of its own cgroup and the
// mount point above which the walk stops (both without `root`).
struct Hierarchy {
  bool v2 = false;
  std::string mount_point;
  std::string cgroup_dir;
};

struct Mount {
  std::string root, point, fstype;
  std::vector<std::string> options;
};

std::vector<Mount> ReadCgroupMounts(const std::string& root) {
  std::vector<Mount> mounts;
  std::ifstream in(root + "/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    auto dash = std::find(f.begin(), f.end(), "-");
    if (f.size() < 5 || dash == f.end() || f.end() - dash < 4) continue;
    const std::string& fstype = dash[1];
    if (fstype != "cgroup" && fstype != "cgroup2") continue;
    mounts.push_back({f[3], f[4], fstype, absl::StrSplit(dash[3], ',')});
  }
  return mounts;
}

// /proc/self/cgroup: "ID:controller,controller:/path"; v2 is "0::/path".
std::optional<std::string> CgroupPath(const std::string& root, const std::string& controller) {
  std::ifstream in(root + "/proc/self/cgroup");
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3) continue;
    if (controller.empty()
            ? f[1].empty()
            : absl::StrContains(absl::StrCat(",", f[1], ","), absl::StrCat(",", controller, ",")))
      return f[2];
  }
  return std::nullopt;
}

std::string Join(const std::string& mount_point, const std::string& mount_root,
                 const std::string& path) {
  // Inside a container the mount's root is usually the container's own cgroup; a path outside
  // it (another namespace's view) falls back to the mount point itself.
  std::string rel;
  if (mount_root == "/") {
    rel = path;
  } else if (path == mount_root || absl::StartsWith(path, mount_root + "/")) {
    rel = path.substr(mount_root.size());
  }
  if (rel == "/") rel.clear();
  return mount_point + rel;
}

std::optional<Hierarchy> FindHierarchy(const std::string& root, const std::vector<Mount>& mounts,
                                       const std::string& controller) {
  for (const Mount& m : mounts) {
    if (m.fstype != "cgroup" ||
        std::find(m.options.begin(), m.options.end(), controller) == m.options.end())
      continue;
    auto path = CgroupPath(root, controller);
    if (!path) continue;
    return Hierarchy{false, m.point, Join(m.point, m.root, *path)};
  }
  for (const Mount& m : mounts) {
    if (m.fstype != "cgroup2") continue;
    auto path = CgroupPath(root, "");
    if (!path) continue;
    return Hierarchy{true, m.point, Join(m.point, m.root, *path)};
  }
  return std::nullopt;
}

// The cgroup's directory and each parent up to the mount point, leaf first.
std::vector<std::string> Levels(const Hierarchy& h) {
  std::vector<std::string> dirs;
  std::string dir = h.cgroup_dir;
  while (true) {
    dirs.push_back(dir);
    if (dir.size() <= h.mount_point.size()) break;
    dir = dir.substr(0, dir.rfind('/'));
  }
  return dirs;
}

// CPUs one level's quota allows, or nullopt when the level sets none.
std::optional<int> CpuQuotaAt(const std::string& dir, bool v2, std::string* file) {
  int64_t quota = -1, period = 0;
  if (v2) {
    *file = dir + "/cpu.max";
    auto line = ReadLine(*file);
    if (!line) return std::nullopt;
    std::vector<std::string> f = absl::StrSplit(*line, ' ', absl::SkipEmpty());
    if (f.size() != 2 || !absl::SimpleAtoi(f[0], &quota) || !absl::SimpleAtoi(f[1], &period))
      return std::nullopt;  // "max 100000": no quota
  } else {
    *file = dir + "/cpu.cfs_quota_us";
    quota = ReadInt(*file).value_or(-1);
    period = ReadInt(dir + "/cpu.cfs_period_us").value_or(0);
  }
  if (quota <= 0 || period <= 0) return std::nullopt;
  return int(std::clamp<int64_t>(quota / period, 1, 1 << 20));  // a huge quota: no wrap
}

std::optional<int64_t> MemoryAt(const std::string& dir, bool v2, std::string* file) {
  *file = dir + (v2 ? "/memory.max" : "/memory.limit_in_bytes");
  auto v = ReadInt(*file);  // "max" does not parse: no limit
  if (!v || *v <= 0 || *v >= kUnlimited) return std::nullopt;
  return v;
}

// The smallest limit over the levels, and the file (without `root`) that set it.
template <typename T, typename ReadFn>
void Smallest(const std::string& root, const Hierarchy& h, ReadFn read, std::optional<T>* out,
              std::string* source) {
  for (const std::string& dir : Levels(h)) {
    std::string file;
    std::optional<T> v = read(root + dir, h.v2, &file);
    if (v && (!*out || *v < **out)) {
      *out = v;
      *source = absl::StrCat(h.v2 ? "cgroup v2 " : "cgroup v1 ", file.substr(root.size()));
    }
  }
}

}  // namespace

ContainerLimits ReadContainerLimits(const std::string& root_in) {
  const std::string root = root_in == "/" ? "" : std::string(absl::StripSuffix(root_in, "/"));
  ContainerLimits limits;
  const std::vector<Mount> mounts = ReadCgroupMounts(root);
  if (auto h = FindHierarchy(root, mounts, "cpu")) {
    Smallest<int>(root, *h, CpuQuotaAt, &limits.cpu_quota, &limits.cpu_source);
  }
  if (auto h = FindHierarchy(root, mounts, "memory")) {
    Smallest<int64_t>(root, *h, MemoryAt, &limits.memory_bytes, &limits.memory_source);
  }
  return limits;
}

int AffinityCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, int(std::thread::hardware_concurrency()));
}

int64_t PhysicalMemoryBytes() {
  const int64_t pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? pages * page : 0;
}

Sizing ResolveSizing(int configured_threads, int64_t configured_cache_bytes,
                     const ContainerLimits& limits, int affinity_cpus, int64_t physical_bytes) {
  Sizing s;
  if (configured_threads > 0) {
    s.cpu_threads = configured_threads;
    s.cpu_source = "cpu.threads";
  } else if (limits.cpu_quota && *limits.cpu_quota < affinity_cpus) {
    s.cpu_threads = std::max(1, *limits.cpu_quota - 1);
    s.cpu_source = absl::StrCat(*limits.cpu_quota, " CPUs from the ", limits.cpu_source,
                                " quota, minus one, at least 1");
  } else {
    s.cpu_threads = std::max(1, affinity_cpus - 1);
    s.cpu_source = absl::StrCat(affinity_cpus, " CPUs in the affinity mask, minus one, at least 1");
  }
  if (configured_cache_bytes > 0) {
    s.cache_bytes = configured_cache_bytes;
    s.cache_source = "cache.bytes";
  } else if (limits.memory_bytes &&
             (physical_bytes <= 0 || *limits.memory_bytes < physical_bytes)) {
    s.cache_bytes = *limits.memory_bytes / 4;
    s.cache_source = absl::StrCat("25% of the ", limits.memory_source, " limit of ",
                                  *limits.memory_bytes, " bytes");
  } else if (physical_bytes > 0) {
    s.cache_bytes = physical_bytes / 4;
    s.cache_source = absl::StrCat("25% of ", physical_bytes, " bytes of physical memory");
  } else {
    s.cache_bytes = int64_t(1) << 30;
    s.cache_source = "1 GiB: neither a memory limit nor the physical memory is known";
  }
  return s;
}

bool IsLoopbackAddress(const std::string& addr) {
  std::string host = addr.substr(0, addr.rfind(':'));
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
    host = host.substr(1, host.size() - 2);
  }
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

}  // namespace shoal::server
