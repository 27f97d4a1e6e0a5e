// shoal-filter-bench's workload: every case's filter text selects exactly the rows its bitmap
// and match count say (checked with the filter language's reference semantics), and the
// filtered ground truth is the nearest selected rows.
#include "bench/harness/filter_workload.h"

#include <algorithm>
#include <set>

#include "core/filter/filter.h"
#include "gtest/gtest.h"

namespace shoal::bench::filter_workload_test {
namespace {

bool Selected(const FilterCase& c, uint32_t group, size_t row) {
  return (c.bitmap[group][row / 8] >> (row % 8)) & 1;
}

class FilterWorkloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = LoadDataset("synthetic:n=3000,dim=8,clusters=6,seed=3", "", 25);
    ASSERT_TRUE(d.ok()) << d.status();
    d_ = *std::move(d);
    auto w = MakeFilterWorkload(d_, 1);
    ASSERT_TRUE(w.ok()) << w.status();
    w_ = *std::move(w);
    cases_ = MakeFilterCases(d_, w_);
  }

  Dataset d_;
  FilterWorkload w_;
  std::vector<FilterCase> cases_;
};

TEST_F(FilterWorkloadTest, EveryCaseSelectsWhatItsFilterTextMatches) {
  ASSERT_GE(cases_.size(), 8u);
  EXPECT_EQ(cases_[0].regime, "none");
  std::set<std::string> regimes;
  for (const FilterCase& c : cases_) {
    regimes.insert(c.regime);
    ASSERT_EQ(c.group_of.size(), d_.nq) << c.name;
    ASSERT_EQ(c.filter.size(), c.bitmap.size()) << c.name;
    ASSERT_EQ(c.filter.size(), c.matches.size()) << c.name;
    for (uint32_t g = 0; g < c.filter.size(); ++g) {
      if (c.filter[g].empty()) {  // the unfiltered case: every row
        EXPECT_EQ(c.regime, "none");
        EXPECT_EQ(c.matches[g], d_.n);
        continue;
      }
      auto filter = core::filter::Filter::Parse(c.filter[g]);
      ASSERT_TRUE(filter.ok()) << c.name << ": " << filter.status();
      uint64_t matches = 0;
      for (size_t row = 0; row < d_.n; ++row) {
        const bool want = filter->Matches(uint64_t(row), w_.AttributesOf(row));
        ASSERT_EQ(Selected(c, g, row), want) << c.name << " group " << g << " row " << row;
        matches += want;
      }
      EXPECT_EQ(matches, c.matches[g]) << c.name;
    }
  }
  EXPECT_EQ(regimes,
            (std::set<std::string>{"none", "uncorrelated", "correlated", "anti-correlated"}));
}

TEST_F(FilterWorkloadTest, SelectivityFollowsTheUniformSweep) {
  for (const FilterCase& c : cases_) {
    if (c.name == "u < 1000") {
      EXPECT_NEAR(c.selectivity(d_.n), 0.1, 0.02);
    } else if (c.name == "u < 5000") {
      EXPECT_NEAR(c.selectivity(d_.n), 0.5, 0.03);
    } else if (c.name == "u >= 0" || c.regime == "none") {
      EXPECT_DOUBLE_EQ(c.selectivity(d_.n), 1.0);
    }
  }
}

TEST_F(FilterWorkloadTest, TruthIsTheNearestSelectedRows) {
  const uint32_t k = 10;
  for (const FilterCase& c : cases_) {
    const FilteredTruth t = ComputeFilteredTruth(d_, c, k, 1);
    ASSERT_EQ(t.ids.size(), d_.nq * k);
    for (size_t q = 0; q < d_.nq; ++q) {
      const uint32_t g = c.group_of[q];
      // Brute force over the selected rows.
      std::vector<std::pair<float, int64_t>> all;
      for (size_t row = 0; row < d_.n; ++row) {
        if (!Selected(c, g, row)) continue;
        float dist = 0;
        for (uint32_t j = 0; j < d_.dim; ++j) {
          const float diff = d_.query(q)[j] - d_.base[row * d_.dim + j];
          dist += diff * diff;
        }
        all.emplace_back(dist, int64_t(row));
      }
      std::sort(all.begin(), all.end());
      const size_t want = std::min<size_t>(k, all.size());
      for (size_t j = 0; j < k; ++j) {
        if (j >= want) {
          EXPECT_EQ(t.ids[q * k + j], -1) << c.name;
          continue;
        }
        ASSERT_GE(t.ids[q * k + j], 0) << c.name;
        EXPECT_TRUE(Selected(c, g, size_t(t.ids[q * k + j]))) << c.name;
        EXPECT_NEAR(t.dist[q * k + j], all[j].first, 1e-3f * (1 + all[j].first)) << c.name;
      }
      EXPECT_DOUBLE_EQ(FilteredRecall(d_, c, t, q, &t.ids[q * k]), 1.0) << c.name;
      std::vector<int64_t> none(k, -1);
      if (want > 0) {
        EXPECT_LT(FilteredRecall(d_, c, t, q, none.data()), 1.0) << c.name;
      }
    }
  }
}

}  // namespace
}  // namespace shoal::bench::filter_workload_test
