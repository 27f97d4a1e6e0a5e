#include "server/config.h"

#include <cstdlib>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"

namespace shoal::server::config_test {
namespace {

absl::StatusOr<LoadedConfig> Load(std::vector<std::string> args) {
  args.insert(args.begin(), "shoald");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return LoadConfig(int(argv.size()), argv.data());
}

TEST(Config, DefaultsAreDocumented) {
  auto c = Load({});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->config.grpc_addr, "127.0.0.1:7700");
  EXPECT_EQ(c->config.http_addr, "127.0.0.1:7701");
  EXPECT_GE(c->config.EffectiveCpuThreads(), 1);
  EXPECT_EQ(c->config.build_memory_bytes, 256 << 20);
  EXPECT_EQ(c->config.filter_max_indexed_fields, 64);
  const std::string printed = PrintConfig(c->config);
  EXPECT_THAT(printed, ::testing::HasSubstr("grpc_addr: \"127.0.0.1:7700\""));
  EXPECT_THAT(printed, ::testing::HasSubstr("threads: 0"));
  EXPECT_THAT(printed, ::testing::HasSubstr("Default:"));
}

TEST(Config, YamlThenEnvironmentThenFlagsWin) {
  testing::TempDir dir;
  const std::string yaml = dir.Sub("shoal.yaml");
  std::ofstream(yaml) << "server:\n  data_dir: /from/yaml\n  http_addr: 1.2.3.4:5\n"
                         "cpu:\n  threads: 3\nlog:\n  level: debug\n";
  setenv("SHOAL_HTTP_ADDR", "127.0.0.1:9999", 1);
  setenv("SHOAL_CPU_THREADS", "5", 1);
  auto c = Load({"--config", yaml, "--cpu-threads", "7", "--demo"});
  unsetenv("SHOAL_HTTP_ADDR");
  unsetenv("SHOAL_CPU_THREADS");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->config.data_dir, "/from/yaml");
  EXPECT_EQ(c->config.http_addr, "127.0.0.1:9999");
  EXPECT_EQ(c->config.cpu_threads, 7);
  EXPECT_EQ(c->config.EffectiveCpuThreads(), 7);
  EXPECT_EQ(c->config.log_level, "debug");
  EXPECT_TRUE(c->config.demo);
}

TEST(Config, BadValuesNameTheField) {
  auto c = Load({"--cpu-threads", "many"});
  ASSERT_FALSE(c.ok());
  setenv("SHOAL_DEMO", "maybe", 1);
  c = Load({});
  unsetenv("SHOAL_DEMO");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), ::testing::HasSubstr("demo.enabled"));
  c = Load({"--config", "/does/not/exist.yaml"});
  ASSERT_FALSE(c.ok());
  c = Load({"--build-memory-bytes", "1000"});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), ::testing::HasSubstr("build.memory_bytes"));
  c = Load({"--filter-max-indexed-fields", "-1"});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), ::testing::HasSubstr("filter.max_indexed_fields"));
  setenv("SHOAL_FILTER_MAX_INDEXED_FIELDS", "0", 1);
  c = Load({});
  unsetenv("SHOAL_FILTER_MAX_INDEXED_FIELDS");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->config.filter_max_indexed_fields, 0);
  c = Load({"--max-queries-per-scan", "4097"});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()),
              ::testing::HasSubstr("search.max_queries_per_scan"));
  c = Load({"--max-queries-per-scan", "4096"});
  EXPECT_TRUE(c.ok()) << c.status();
  c = Load({"--max-message-bytes", "10"});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), ::testing::HasSubstr("max_message_bytes"));
  testing::TempDir dir;
  std::ofstream(dir.Sub("bad.yaml")) << "server:\n  grpc_addr: [1, 2]\n";
  c = Load({"--config", dir.Sub("bad.yaml")});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), ::testing::HasSubstr("server.grpc_addr"));
}

TEST(Config, TheUncachedPartitionBudgetComesFromItsKeyAndDefaultsToTheCachesSize) {
  auto c = Load({});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->config.cache_uncached_bytes, 0);  // 0 = cache.bytes (PartitionCache resolves it)
  setenv("SHOAL_CACHE_UNCACHED_BYTES", "1048576", 1);
  c = Load({});
  unsetenv("SHOAL_CACHE_UNCACHED_BYTES");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->config.cache_uncached_bytes, 1 << 20);
  EXPECT_THAT(PrintConfig(c->config), ::testing::HasSubstr("uncached_bytes: 1048576"));
}

TEST(Config, PrintConfigFlagIsRecognised) {
  auto c = Load({"--print-config"});
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->print_config);
}

}  // namespace
}  // namespace shoal::server::config_test
