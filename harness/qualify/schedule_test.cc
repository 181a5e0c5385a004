// The rounds a pair suite runs its pairs in: every ordered pair exactly once, each GPU in at most one pair per round,
// pairs at once where each has NVLinks of its own or their PCIe paths share no link in the same direction, serial
// where the topology does not give the path.

#include "harness/qualify/schedule.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

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

// No pair of a round crosses a PCIe link in the same direction as another (both directions: `both_ways`).
void expectLinkDisjoint(const report::PlanTopology& t, const PairSchedule& s, bool both_ways = false) {
  for (const auto& round : s.rounds) {
    std::set<std::string> used;
    for (const auto& [a, b] : round) {
      if (pairHasOwnLinks(t, a, b)) continue;  // NVLink rounds hold no PCIe pair
      std::vector<std::string> links = pcieLinks(t, a, b);
      if (links.empty()) continue;  // a path the topology does not give (then alone)
      if (both_ways) {
        // The reply runs the same links the other way: the path from b to a.
        for (const std::string& l : pcieLinks(t, b, a))
          links.push_back(l);
      }
      for (const std::string& l : links)
        EXPECT_TRUE(used.insert(l).second) << l << " twice in a round (" << a << "->" << b << ")";
    }
  }
}

// Two sockets of four GPUs, each GPU on a root port of its own (PHB within a pair, NODE across pairs, SYS across the
// sockets), as g4dn.metal.
report::PlanTopology twoSockets() {
  report::PlanTopology t = box(8, Links::kPcie);
  for (report::PlanPair& p : t.pairs) {
    const bool socket = p.src / 4 == p.dst / 4;
    p.pci = !socket ? "SYS" : p.src / 2 == p.dst / 2 ? "PHB" : "NODE";
  }
  return t;
}

TEST(Schedule, PcieLinksFollowThePathThroughTheTree) {
  const report::PlanTopology t = twoSockets();
  EXPECT_EQ(pcieLinks(t, 0, 1), (std::vector<std::string>{"up:0", "down:1"}));
  EXPECT_EQ(pcieLinks(t, 0, 2), (std::vector<std::string>{"up:0", "down:2"}));
  // Across the sockets: the source's node onto the SMP interconnect, the destination's off it.
  EXPECT_EQ(pcieLinks(t, 1, 6), (std::vector<std::string>{"up:1", "up:0,1,2,3", "down:6", "down:4,5,6,7"}));
  // Two GPUs behind one switch (PIX) reach each other through it; beyond it they share its uplink.
  report::PlanTopology sw = box(4, Links::kPcie);
  for (report::PlanPair& p : sw.pairs)
    p.pci = p.src / 2 == p.dst / 2 ? "PIX" : "PHB";
  EXPECT_EQ(pcieLinks(sw, 0, 1), (std::vector<std::string>{"up:0", "down:1"}));
  EXPECT_EQ(pcieLinks(sw, 0, 2), (std::vector<std::string>{"up:0", "up:0,1", "down:2", "down:2,3"}));
  // A path the topology does not give: no links (the pair runs alone).
  report::PlanTopology unknown = box(4, Links::kUnknown);
  for (report::PlanPair& p : unknown.pairs)
    p.pci = "";
  EXPECT_TRUE(pcieLinks(unknown, 0, 1).empty());
}

TEST(Schedule, PcieRunsPairsAtOnceWhereTheirPathsShareNoLink) {
  const report::PlanTopology t = twoSockets();
  const PairSchedule s = schedulePairs(t, allPairs(t));
  expectValid(s, allPairs(t));
  expectLinkDisjoint(t, s);
  ASSERT_TRUE(s.concurrent);
  // 32 pairs cross the sockets, at most one each way per round: 16 rounds at least; the rest fill the GPUs left.
  EXPECT_GE(s.rounds.size(), 16u);
  EXPECT_LE(s.rounds.size(), 20u);
  EXPECT_NE(s.basis.find("56 over PCIe at once where their paths share no link in the same direction"),
            std::string::npos)
      << s.basis;
  ASSERT_EQ(s.samples.size(), 1u);
  // Both ways at once: a pair loads its path in both directions; more rounds, still disjoint.
  const PairSchedule both = schedulePairs(t, allPairs(t), true, true);
  expectValid(both, allPairs(t));
  expectLinkDisjoint(t, both, true);
  EXPECT_GE(both.rounds.size(), 32u);
  EXPECT_LT(both.rounds.size(), 56u);
}

TEST(Schedule, UnknownPathsRunOnePairAtATime) {
  report::PlanTopology t = box(4, Links::kUnknown);
  for (report::PlanPair& p : t.pairs)
    p.pci = "N/A";
  const PairSchedule s = schedulePairs(t, allPairs(t));
  expectValid(s, allPairs(t));
  EXPECT_EQ(s.rounds.size(), 12u);
  EXPECT_FALSE(s.concurrent);
  EXPECT_TRUE(s.samples.empty());
  EXPECT_NE(s.basis.find("one at a time"), std::string::npos) << s.basis;
  // One GPU whose path to another is unknown runs alone even beside pairs whose paths are known.
  report::PlanTopology partly = twoSockets();
  for (report::PlanPair& p : partly.pairs)
    if ((p.src == 0 && p.dst == 7) || (p.src == 7 && p.dst == 0)) p.pci = "N/A";
  const PairSchedule q = schedulePairs(partly, allPairs(partly));
  expectValid(q, allPairs(partly));
  for (const auto& round : q.rounds) {
    for (const auto& [a, b] : round) {
      if (a == 0 || b == 0 || a == 7 || b == 7) {
        EXPECT_EQ(round.size(), 1u) << a << "->" << b;
      }
    }
  }
}

TEST(Schedule, ConcurrencyOffIsSerialInOrder) {
  const report::PlanTopology t = box(4, Links::kNvswitch);
  const PairSchedule s = schedulePairs(t, allPairs(t), false);
  EXPECT_EQ(s.rounds, serialRounds(allPairs(t)));
  EXPECT_FALSE(s.concurrent);
}

TEST(Schedule, MixedLinksRunTheLinkedPairsThenThePcieOnesAtOnce) {
  // GPUs 0-1 and 2-3 have direct NVLinks; every other pair crosses PCIe, each GPU on a socket of its own (SYS).
  report::PlanTopology t = box(4, Links::kPcie);
  for (report::PlanPair& p : t.pairs) {
    if ((p.src / 2) == (p.dst / 2)) p.nvlinks = 4;
  }
  const PairSchedule s = schedulePairs(t, allPairs(t));
  expectValid(s, allPairs(t));
  expectLinkDisjoint(t, s);
  ASSERT_TRUE(s.concurrent);
  // 0->1 with 2->3, 1->0 with 3->2, then the 8 PCIe pairs two at a time (disjoint GPUs and sockets).
  EXPECT_EQ(s.rounds.size(), 6u);
  for (size_t r = 0; r < s.rounds.size(); ++r) {
    EXPECT_EQ(s.rounds[r].size(), 2u);
    for (const auto& p : s.rounds[r])
      EXPECT_EQ(pairHasOwnLinks(t, p.first, p.second), r < 2) << p.first << "->" << p.second;
  }
  // One serial sample of each kind of round: an NVLink pair and a PCIe pair.
  ASSERT_EQ(s.samples.size(), 2u);
  EXPECT_TRUE(pairHasOwnLinks(t, s.samples[0].first, s.samples[0].second));
  EXPECT_FALSE(pairHasOwnLinks(t, s.samples[1].first, s.samples[1].second));
}

TEST(Schedule, APartialListTakesFewRounds) {
  const report::PlanTopology t = box(8, Links::kNvswitch);
  const std::vector<std::pair<int, int>> pairs = {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {1, 0}};
  const PairSchedule s = schedulePairs(t, pairs);
  expectValid(s, pairs);
  EXPECT_EQ(s.rounds.size(), 2u);
}

// The committed real topologies: every schedule valid and link-disjoint; 8-GPU PCIe machines in far fewer rounds than
// pairs; the DGX-2 (16 GPUs on NVSwitch) in 30 rounds of 8.
TEST(Schedule, CommittedFixtures) {
  int checked = 0;
  std::vector<std::filesystem::path> files;
  for (const char* dir : {"fixtures/topologies/hwloc", "fixtures/topologies/nccl"})
    for (const auto& e : std::filesystem::directory_iterator(testing::sourcePath(dir)))
      files.push_back(e.path());
  for (const std::filesystem::path& path : files) {
    auto topo = loadPlanTopology(path.string());
    ASSERT_TRUE(topo.isOk()) << path << ": " << topo.status().toString();
    if (topo->gpus.size() < 2) continue;
    const PairSchedule s = schedulePairs(*topo, allPairs(*topo));
    expectValid(s, allPairs(*topo));
    expectLinkDisjoint(*topo, s);
    bool anyNvlink = false;
    for (const report::PlanPair& p : topo->pairs)
      anyNvlink |= p.nvlinks && *p.nvlinks > 0;
    if (!anyNvlink && topo->gpus.size() == 8) {
      EXPECT_TRUE(s.concurrent) << path;
      EXPECT_LE(s.rounds.size(), 30u) << path << ": " << s.basis;
    }
    if (path.filename() == "nvidiaDGX2.xml") {
      EXPECT_EQ(s.rounds.size(), 30u);
      EXPECT_TRUE(s.concurrent);
    }
    ++checked;
  }
  EXPECT_GE(checked, 6);
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
