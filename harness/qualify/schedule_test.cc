// The rounds a pair suite runs its pairs in: every ordered pair exactly once, each GPU in at most one pair per round,
// pairs at once only where each has NVLinks of its own, serial on PCIe trees and unknown links.

#include "harness/qualify/schedule.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

#include "harness/qualify/pipeline.h"
#include "reference/testing/testing.h"

namespace peerlab::qualify {
namespace {

enum class Links { kNvswitch, kPcie, kUnknown };

report::PlanTopology box(int n, Links links) {
  report::PlanTopology t;
  for (int g = 0; g < n; ++g) {
    report::PlanGpu gpu;
    gpu.index = g;
    t.gpus.push_back(gpu);
  }
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      report::PlanPair p;
      p.src = a;
      p.dst = b;
      p.pci = "SYS";
      if (links == Links::kNvswitch) {
        p.nvlinks = 18;
        p.nvswitch = true;
      } else if (links == Links::kPcie) {
        p.nvlinks = 0;
      }
      t.pairs.push_back(p);
    }
  }
  return t;
}

std::vector<std::pair<int, int>> allPairs(const report::PlanTopology& t) {
  std::vector<std::pair<int, int>> out;
  for (const report::PlanPair& p : t.pairs)
    out.emplace_back(p.src, p.dst);
  return out;
}

// Every pair asked for exactly once, no GPU twice in a round; returns the rounds' sizes.
void expectValid(const PairSchedule& s, const std::vector<std::pair<int, int>>& pairs) {
  std::multiset<std::pair<int, int>> seen;
  for (const auto& round : s.rounds) {
    ASSERT_FALSE(round.empty());
    std::set<int> busy;
    for (const auto& p : round) {
      EXPECT_TRUE(busy.insert(p.first).second) << "GPU " << p.first << " twice in a round";
      EXPECT_TRUE(busy.insert(p.second).second) << "GPU " << p.second << " twice in a round";
      seen.insert(p);
    }
  }
  const std::multiset<std::pair<int, int>> wanted(pairs.begin(), pairs.end());
  EXPECT_EQ(seen, wanted);
}

TEST(Schedule, NvswitchCoversEveryOrderedPairInTwoNMinusOneRounds) {
  for (int n : {2, 3, 4, 8, 16}) {
    const report::PlanTopology t = box(n, Links::kNvswitch);
    const PairSchedule s = schedulePairs(t, allPairs(t));
    expectValid(s, allPairs(t));
    // n even: 2(n-1) rounds of n/2 pairs; n odd: 2n rounds of (n-1)/2.
    const size_t rounds = n % 2 == 0 ? 2 * (n - 1) : 2 * n;
    EXPECT_EQ(s.rounds.size(), rounds) << n << " GPUs";
    EXPECT_EQ(s.concurrent, n > 3) << n;
    for (const auto& round : s.rounds)
      EXPECT_EQ(round.size(), static_cast<size_t>(n / 2)) << n;
  }
}

TEST(Schedule, PcieAndUnknownLinksRunOnePairAtATime) {
  for (Links links : {Links::kPcie, Links::kUnknown}) {
    const report::PlanTopology t = box(4, links);
    const PairSchedule s = schedulePairs(t, allPairs(t));
    expectValid(s, allPairs(t));
    EXPECT_EQ(s.rounds.size(), 12u);
    EXPECT_FALSE(s.concurrent);
    EXPECT_NE(s.basis.find("one at a time"), std::string::npos) << s.basis;
  }
}

TEST(Schedule, ConcurrencyOffIsSerialInOrder) {
  const report::PlanTopology t = box(4, Links::kNvswitch);
  const PairSchedule s = schedulePairs(t, allPairs(t), false);
  EXPECT_EQ(s.rounds, serialRounds(allPairs(t)));
  EXPECT_FALSE(s.concurrent);
}

TEST(Schedule, MixedLinksRunTheLinkedPairsAtOnceAndTheRestAlone) {
  // GPUs 0-1 and 2-3 have direct NVLinks; every other pair crosses PCIe.
  report::PlanTopology t = box(4, Links::kPcie);
  for (report::PlanPair& p : t.pairs) {
    if ((p.src / 2) == (p.dst / 2)) p.nvlinks = 4;
  }
  const PairSchedule s = schedulePairs(t, allPairs(t));
  expectValid(s, allPairs(t));
  ASSERT_TRUE(s.concurrent);
  // 0->1 with 2->3, 1->0 with 3->2, then the 8 PCIe pairs one by one.
  EXPECT_EQ(s.rounds.size(), 10u);
  for (size_t r = 0; r < s.rounds.size(); ++r) {
    for (const auto& p : s.rounds[r])
      EXPECT_EQ(pairHasOwnLinks(t, p.first, p.second), r < 2) << p.first << "->" << p.second;
  }
}

TEST(Schedule, APartialListTakesFewRounds) {
  const report::PlanTopology t = box(8, Links::kNvswitch);
  const std::vector<std::pair<int, int>> pairs = {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {1, 0}};
  const PairSchedule s = schedulePairs(t, pairs);
  expectValid(s, pairs);
  EXPECT_EQ(s.rounds.size(), 2u);
}

// The committed real topologies: every schedule valid; PCIe-only machines serial; the DGX-2 (16 GPUs on NVSwitch) in
// 30 rounds of 8.
TEST(Schedule, CommittedFixtures) {
  int checked = 0;
  for (const auto& e : std::filesystem::directory_iterator(testing::sourcePath("fixtures/topologies/hwloc"))) {
    auto topo = loadPlanTopology(e.path().string());
    ASSERT_TRUE(topo.isOk()) << e.path() << ": " << topo.status().toString();
    if (topo->gpus.size() < 2) continue;
    const PairSchedule s = schedulePairs(*topo, allPairs(*topo));
    expectValid(s, allPairs(*topo));
    bool anyNvlink = false;
    for (const report::PlanPair& p : topo->pairs)
      anyNvlink |= p.nvlinks && *p.nvlinks > 0;
    if (!anyNvlink) {
      EXPECT_FALSE(s.concurrent) << e.path();
    }
    if (e.path().filename() == "nvidiaDGX2.xml") {
      EXPECT_EQ(s.rounds.size(), 30u);
      EXPECT_TRUE(s.concurrent);
    }
    ++checked;
  }
  EXPECT_GE(checked, 3);
}

// Host copies at once only for GPUs on PCIe links of their own (no shared switch); unknown paths run alone.
TEST(Schedule, HostCopySetsKeepGpusBehindOneSwitchApart) {
  report::PlanTopology t = box(4, Links::kPcie);
  for (report::PlanPair& p : t.pairs)
    p.pci = (p.src < 2 && p.dst < 2) ? "PIX" : "SYS";
  EXPECT_EQ(hostCopySets(t), (std::vector<std::vector<int>>{{0, 2, 3}}));
  for (report::PlanPair& p : t.pairs)
    p.pci = "PXB";
  EXPECT_TRUE(hostCopySets(t).empty());
  for (report::PlanPair& p : t.pairs)
    p.pci = "";
  EXPECT_TRUE(hostCopySets(t).empty());
  // One NUMA node: its memory is shared, the GPUs run alone.
  for (report::PlanPair& p : t.pairs)
    p.pci = "NODE";
  EXPECT_TRUE(hostCopySets(t).empty());
  // Two sockets, two GPUs each: one GPU of each socket at once.
  for (report::PlanPair& p : t.pairs)
    p.pci = (p.src / 2 == p.dst / 2) ? "NODE" : "SYS";
  EXPECT_EQ(hostCopySets(t), (std::vector<std::vector<int>>{{0, 2}, {1, 3}}));
}

}  // namespace
}  // namespace peerlab::qualify
