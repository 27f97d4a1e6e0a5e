// Every metric shoald exports is documented in docs/metrics.md.
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "gtest/gtest.h"
#include "server/metrics.h"

namespace shoal::server {
namespace {

// The metric names in a rendering of every series Metrics can export.
std::set<std::string> ExportedNames() {
  Metrics metrics;
  metrics.SetIoBackend("pread");
  metrics.ObserveRpc("Search", 0, 0.001);
  metrics.ObserveWalFsync(0.001);
  const std::string text = metrics.Render({{"c", 1, 1}}, ArenaSample{1, 1, 1}, StorageSample{});
  std::set<std::string> names;
  std::istringstream in(text);
  const std::regex type_line("^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) ");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, type_line)) names.insert(m[1]);
  }
  return names;
}

TEST(MetricsDoc, EveryExportedMetricIsDocumented) {
  std::ifstream doc(std::string(SHOAL_SOURCE_DIR) + "/docs/metrics.md");
  ASSERT_TRUE(doc) << "docs/metrics.md not found under " << SHOAL_SOURCE_DIR;
  const std::string text((std::istreambuf_iterator<char>(doc)), std::istreambuf_iterator<char>());
  const std::set<std::string> names = ExportedNames();
  EXPECT_GE(names.size(), 20u);
  for (const std::string& name : names) {
    EXPECT_NE(text.find("| `" + name + "` |"), std::string::npos)
        << name << " is exported but not in docs/metrics.md";
  }
}

}  // namespace
}  // namespace shoal::server
