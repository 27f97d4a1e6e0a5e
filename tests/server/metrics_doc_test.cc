// Every metric shoald exports is documented in docs/metrics.md.
#include <fstream>
#include <set>
#include <sstream>

#include "gtest/gtest.h"
#include "server/metrics.h"

namespace shoal::server::metrics_doc_test {
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
  // "# TYPE <name> <type>" (no std::regex: GCC 12 warns inside it under ASan).
  const std::string prefix = "# TYPE ";
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) != 0) continue;
    const size_t end = line.find(' ', prefix.size());
    if (end != std::string::npos) names.insert(line.substr(prefix.size(), end - prefix.size()));
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
}  // namespace shoal::server::metrics_doc_test
