#include "server/container_limits.h"

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"

namespace shoal::server::container_limits_test {
namespace {

using ::testing::HasSubstr;

// A fake root: /proc/self/{cgroup,mountinfo} and cgroup files under it.
class FakeRoot {
 public:
  void Write(const std::string& path, const std::string& text) {
    const std::string full = dir_.path() + path;
    std::filesystem::create_directories(std::filesystem::path(full).parent_path());
    std::ofstream(full) << text;
  }
  const std::string& path() const { return dir_.path(); }

  // The mounts of a cgroup v1 host (as on the CI machines), with mount roots `root`.
  void V1Mounts(const std::string& root = "/") {
    Write("/proc/self/mountinfo",
          "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
          "32 31 0:29 " +
              root +
              " /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
              "35 31 0:32 " +
              root +
              " /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
              "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n");
  }
  void V2Mount() {
    Write("/proc/self/mountinfo",
          "25 22 0:23 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n");
    Write("/proc/self/cgroup", "0::/\n");
  }

 private:
  testing::TempDir dir_;
};

TEST(ContainerLimits, CgroupV2QuotaRoundsDownAndMemoryIsRead) {
  FakeRoot root;
  root.V2Mount();
  root.Write("/sys/fs/cgroup/cpu.max", "150000 100000\n");
  root.Write("/sys/fs/cgroup/memory.max", "536870912\n");
  ContainerLimits limits = ReadContainerLimits(root.path());
  EXPECT_EQ(limits.cpu_quota, 1);
  EXPECT_EQ(limits.cpu_source, "cgroup v2 /sys/fs/cgroup/cpu.max");
  EXPECT_EQ(limits.memory_bytes, int64_t(512) << 20);
  EXPECT_EQ(limits.memory_source, "cgroup v2 /sys/fs/cgroup/memory.max");
}

// A quota of billions of CPUs is no limit in practice; it must not wrap into a negative count.
TEST(ContainerLimits, AHugeQuotaDoesNotWrap) {
  FakeRoot root;
  root.V2Mount();
  root.Write("/sys/fs/cgroup/cpu.max", "99999999999999 1000\n");
  ContainerLimits limits = ReadContainerLimits(root.path());
  ASSERT_TRUE(limits.cpu_quota.has_value());
  EXPECT_GT(*limits.cpu_quota, 1000);
}

TEST(ContainerLimits, CgroupV2MaxMeansNoLimit) {
  FakeRoot root;
  root.V2Mount();
  root.Write("/sys/fs/cgroup/cpu.max", "max 100000\n");
  root.Write("/sys/fs/cgroup/memory.max", "max\n");
  ContainerLimits limits = ReadContainerLimits(root.path());
  EXPECT_EQ(limits.cpu_quota, std::nullopt);
  EXPECT_EQ(limits.memory_bytes, std::nullopt);
}

// A pod on a v2 node without a cgroup namespace: the pod's level sets the quota, the
// container's level the memory, and "max" at a level means that level sets nothing.
TEST(ContainerLimits, CgroupV2NestedPathsTakeTheSmallestLevel) {
  FakeRoot root;
  root.V2Mount();
  root.Write("/proc/self/cgroup", "0::/kubepods/pod1/c1\n");
  root.Write("/sys/fs/cgroup/kubepods/pod1/cpu.max", "250000 100000\n");
  root.Write("/sys/fs/cgroup/kubepods/pod1/c1/cpu.max", "max 100000\n");
  root.Write("/sys/fs/cgroup/kubepods/pod1/memory.max", "max\n");
  root.Write("/sys/fs/cgroup/kubepods/pod1/c1/memory.max", "536870912\n");
  ContainerLimits limits = ReadContainerLimits(root.path());
  EXPECT_EQ(limits.cpu_quota, 2);
  EXPECT_EQ(limits.cpu_source, "cgroup v2 /sys/fs/cgroup/kubepods/pod1/cpu.max");
  EXPECT_EQ(limits.memory_bytes, int64_t(512) << 20);
  EXPECT_EQ(limits.memory_source, "cgroup v2 /sys/fs/cgroup/kubepods/pod1/c1/memory.max");
}

TEST(ContainerLimits, CgroupV1QuotaMinusOneMeansNoLimit) {
  FakeRoot root;
  root.V1Mounts();
  root.Write("/proc/self/cgroup", "4:memory:/\n2:cpu,cpuacct:/\n0::/\n");
  root.Write("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
  root.Write("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  root.Write("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  ContainerLimits limits = ReadContainerLimits(root.path());
  EXPECT_EQ(limits.cpu_quota, std::nullopt);
  EXPECT_EQ(limits.memory_bytes, std::nullopt);
}

TEST(ContainerLimits, CgroupV1QuotaAndMemoryLimitAreRead) {
  FakeRoot root;
  root.V1Mounts();
  root.Write("/proc/self/cgroup", "4:memory:/\n2:cpu,cpuacct:/\n0::/\n");
  root.Write("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "150000\n");
  root.Write("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  root.Write("/sys/fs/cgroup/memory/memory.limit_in_bytes", "1073741824\n");
  ContainerLimits limits = ReadContainerLimits(root.path());
  EXPECT_EQ(limits.cpu_quota, 1);
  EXPECT_EQ(limits.cpu_source, "cgroup v1 /sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us");
  EXPECT_EQ(limits.memory_bytes, int64_t(1) << 30);
  EXPECT_EQ(limits.memory_source, "cgroup v1 /sys/fs/cgroup/memory/memory.limit_in_bytes");
}

// podman on a v1 host without a cgroup namespace: /proc/self/cgroup names the container's
// nested cgroup; the smallest limit on the way up to the mount point wins.
TEST(ContainerLimits, NestedPathsAreFollowedAndTheSmallestLevelWins) {
  FakeRoot root;
  root.V1Mounts();
  root.Write("/proc/self/cgroup",
             "4:memory:/machine/libpod-abc\n2:cpu,cpuacct:/machine/libpod-abc\n0::/\n");
  root.Write("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
  root.Write("/sys/fs/cgroup/cpu,cpuacct/machine/cpu.cfs_quota_us", "400000\n");
  root.Write("/sys/fs/cgroup/cpu,cpuacct/machine/cpu.cfs_period_us", "100000\n");
  root.Write("/sys/fs/cgroup/cpu,cpuacct/machine/libpod-abc/cpu.cfs_quota_us", "250000\n");
  root.Write("/sys/fs/cgroup/cpu,cpuacct/machine/libpod-abc/cpu.cfs_period_us", "100000\n");
  root.Write("/sys/fs/cgroup/memory/machine/memory.limit_in_bytes", "536870912\n");
  root.Write("/sys/fs/cgroup/memory/machine/libpod-abc/memory.limit_in_bytes", "1073741824\n");
  ContainerLimits limits = ReadContainerLimits(root.path());
  EXPECT_EQ(limits.cpu_quota, 2);
  EXPECT_THAT(limits.cpu_source, HasSubstr("/machine/libpod-abc/cpu.cfs_quota_us"));
  EXPECT_EQ(limits.memory_bytes, int64_t(512) << 20);
  EXPECT_EQ(limits.memory_source, "cgroup v1 /sys/fs/cgroup/memory/machine/memory.limit_in_bytes");
}

// Inside a container whose cgroup is mounted at its own root (mountinfo's root field), the
// path in /proc/self/cgroup is relative to that root.
TEST(ContainerLimits, MountRootIsStrippedFromTheCgroupPath) {
  FakeRoot root;
  root.V1Mounts("/machine/libpod-abc");
  root.Write("/proc/self/cgroup",
             "4:memory:/machine/libpod-abc\n2:cpu,cpuacct:/machine/libpod-abc\n0::/\n");
  root.Write("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "100000\n");
  root.Write("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  root.Write("/sys/fs/cgroup/memory/memory.limit_in_bytes", "536870912\n");
  ContainerLimits limits = ReadContainerLimits(root.path());
  EXPECT_EQ(limits.cpu_quota, 1);
  EXPECT_EQ(limits.memory_bytes, int64_t(512) << 20);
}

TEST(ContainerLimits, NothingMountedMeansNoLimits) {
  FakeRoot root;
  root.Write("/proc/self/mountinfo", "22 1 8:1 / / rw - ext4 /dev/vda rw\n");
  root.Write("/proc/self/cgroup", "");
  ContainerLimits limits = ReadContainerLimits(root.path());
  EXPECT_EQ(limits.cpu_quota, std::nullopt);
  EXPECT_EQ(limits.memory_bytes, std::nullopt);
  FakeRoot empty;
  limits = ReadContainerLimits(empty.path());
  EXPECT_EQ(limits.cpu_quota, std::nullopt);
  EXPECT_EQ(limits.memory_bytes, std::nullopt);
}

TEST(ResolveSizing, OneOrTwoQuotaCpusGiveOneThreadOnABigHost) {
  ContainerLimits one{1, "cgroup v1 q", int64_t(1) << 30, "cgroup v1 m"};
  Sizing s = ResolveSizing(0, 0, one, 64, int64_t(256) << 30);
  EXPECT_EQ(s.cpu_threads, 1);
  EXPECT_THAT(s.cpu_source, HasSubstr("cgroup v1 q"));
  EXPECT_EQ(s.cache_bytes, int64_t(256) << 20);
  EXPECT_THAT(s.cache_source, HasSubstr("cgroup v1 m"));
  ContainerLimits two{2, "q", std::nullopt, ""};
  EXPECT_EQ(ResolveSizing(0, 0, two, 64, int64_t(8) << 30).cpu_threads, 1);
  ContainerLimits eight{8, "q", std::nullopt, ""};
  EXPECT_EQ(ResolveSizing(0, 0, eight, 64, int64_t(8) << 30).cpu_threads, 7);
}

TEST(ResolveSizing, AffinityWinsWhenSmallerThanTheQuota) {
  ContainerLimits limits{8, "q", std::nullopt, ""};
  Sizing s = ResolveSizing(0, 0, limits, 3, int64_t(8) << 30);
  EXPECT_EQ(s.cpu_threads, 2);
  EXPECT_THAT(s.cpu_source, HasSubstr("affinity"));
  EXPECT_EQ(s.cache_bytes, int64_t(2) << 30);
  EXPECT_THAT(s.cache_source, HasSubstr("physical memory"));
  EXPECT_EQ(ResolveSizing(0, 0, {}, 1, int64_t(8) << 30).cpu_threads, 1);
}

TEST(ResolveSizing, ConfiguredValuesAreKept) {
  ContainerLimits limits{1, "q", int64_t(1) << 30, "m"};
  Sizing s = ResolveSizing(6, 12345, limits, 64, int64_t(8) << 30);
  EXPECT_EQ(s.cpu_threads, 6);
  EXPECT_EQ(s.cache_bytes, 12345);
}

TEST(ResolveSizing, AMemoryLimitAboveThePhysicalMemoryIsIgnored) {
  ContainerLimits limits{std::nullopt, "", int64_t(64) << 30, "m"};
  EXPECT_EQ(ResolveSizing(0, 0, limits, 2, int64_t(8) << 30).cache_bytes, int64_t(2) << 30);
}

TEST(IsLoopbackAddress, OnlyLoopbackHostsCount) {
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1:7700"));
  EXPECT_TRUE(IsLoopbackAddress("localhost:7700"));
  EXPECT_TRUE(IsLoopbackAddress("[::1]:7700"));
  EXPECT_FALSE(IsLoopbackAddress("0.0.0.0:7700"));
  EXPECT_FALSE(IsLoopbackAddress("[::]:7700"));
  EXPECT_FALSE(IsLoopbackAddress("10.1.2.3:7700"));
}

}  // namespace
}  // namespace shoal::server::container_limits_test
