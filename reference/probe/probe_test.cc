#include "reference/probe/probe.h"

#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include "reference/core/pattern.h"
#include "reference/probe/inject.h"
#include "reference/testing/testing.h"

namespace peerlab::probe {
namespace {

TEST(CellSeed, DiffersPerPairMethodSizeAndRun) {
  std::set<uint64_t> seeds;
  size_t count = 0;
  for (uint64_t run : {1ull, 2ull}) {
    for (Method m : kAllMethods) {
      for (uint64_t bytes : {4096ull, 64ull << 20}) {
        for (int s = 0; s < 4; ++s) {
          for (int d = 0; d < 4; ++d) {
            if (s == d) continue;
            seeds.insert(cellSeed(run, m, bytes, s, d));
            ++count;
          }
        }
      }
    }
  }
  EXPECT_EQ(seeds.size(), count) << "two cells share a pattern seed";
  EXPECT_EQ(cellSeed(7, Method::kAtomic, 4096, 1, 2), cellSeed(7, Method::kAtomic, 4096, 1, 2));
  // Direction matters: 0->1 and 1->0 write different patterns.
  EXPECT_NE(cellSeed(7, Method::kCeWrite, 4096, 0, 1), cellSeed(7, Method::kCeWrite, 4096, 1, 0));
}

TEST(CellSeed, PatternsOfNeighbouringCellsDiffer) {
  std::vector<uint8_t> a(4096), b(4096);
  fillPatternHost(a.data(), a.size(), cellSeed(3, Method::kSmStore, 4096, 0, 1));
  fillPatternHost(b.data(), b.size(), cellSeed(3, Method::kSmLoad, 4096, 0, 1));
  size_t same = 0;
  for (size_t i = 0; i < a.size(); ++i)
    same += a[i] == b[i];
  EXPECT_LT(same, a.size() / 32);
}

CellResult result(Verdict v, Path p = Path::kPeer) {
  CellResult r;
  r.verdict = v;
  r.path = p;
  return r;
}

TEST(Judge, ClaimTimesOutcomeTable) {
  struct Row {
    bool claimed;
    Verdict verdict;
    Path path;
    bool lie, unclaimed_ok, staged;
  };
  const Row rows[] = {
      {true, Verdict::kOk, Path::kPeer, false, false, false},
      {true, Verdict::kOk, Path::kIpc, false, false, false},
      {true, Verdict::kOk, Path::kStaged, false, false, true},
      {true, Verdict::kCorrupt, Path::kPeer, true, false, false},
      {true, Verdict::kHang, Path::kPeer, true, false, false},
      {true, Verdict::kError, Path::kNone, true, false, false},
      {true, Verdict::kUnsupported, Path::kNone, true, false, false},
      {false, Verdict::kOk, Path::kStaged, false, false, true},
      {false, Verdict::kOk, Path::kPeer, false, true, false},
      {false, Verdict::kOk, Path::kIpc, false, true, false},
      {false, Verdict::kCorrupt, Path::kPeer, false, false, false},
      {false, Verdict::kHang, Path::kPeer, false, false, false},
      {false, Verdict::kError, Path::kNone, false, false, false},
      {false, Verdict::kUnsupported, Path::kNone, false, false, false},
  };
  for (const Row& row : rows) {
    const Judgement j = judge(row.claimed, result(row.verdict, row.path));
    EXPECT_EQ(j.lie, row.lie) << row.claimed << " " << verdictName(row.verdict) << " " << pathName(row.path);
    EXPECT_EQ(j.unclaimed_ok, row.unclaimed_ok) << row.claimed << " " << verdictName(row.verdict);
    EXPECT_EQ(j.staged, row.staged) << row.claimed << " " << verdictName(row.verdict);
  }
}

TEST(Judge, ClaimsHoldOnlyWhenEveryClaimedCellVerified) {
  std::vector<CellReport> cells(3);
  cells[0].claimed = true;
  cells[0].result = result(Verdict::kOk);
  cells[1].claimed = false;
  cells[1].result = result(Verdict::kCorrupt);
  cells[2].claimed = false;
  cells[2].result = result(Verdict::kUnsupported, Path::kNone);
  EXPECT_TRUE(claimsHold(cells));
  cells[2].claimed = true;
  EXPECT_FALSE(claimsHold(cells));
  EXPECT_TRUE(claimsHold({}));
}

Inventory inventory(int n) {
  Inventory inv;
  for (int i = 0; i < n; ++i) {
    GpuInfo g;
    g.ordinal = i;
    g.vmm = g.posix_fd = g.ipc_event = true;
    inv.gpus.push_back(g);
  }
  inv.can_access.assign(n * n, 1);
  inv.native_atomic.assign(n * n, 1);
  return inv;
}

TEST(Claims, FollowTheDriverAttributesPerDirection) {
  Inventory inv = inventory(2);
  for (Method m : kAllMethods)
    EXPECT_TRUE(claimFor(inv, m, 0, 1)) << methodName(m);
  // 0 may not access 1: every method 0 pushes into 1 loses its claim; the pulls issued by 1 keep theirs.
  inv.can_access[0 * 2 + 1] = 0;
  EXPECT_FALSE(claimFor(inv, Method::kCeWrite, 0, 1));
  EXPECT_FALSE(claimFor(inv, Method::kSmStore, 0, 1));
  EXPECT_FALSE(claimFor(inv, Method::kAtomic, 0, 1));
  EXPECT_FALSE(claimFor(inv, Method::kIpcLegacy, 0, 1));
  EXPECT_FALSE(claimFor(inv, Method::kIpcVmm, 0, 1));
  EXPECT_TRUE(claimFor(inv, Method::kCeRead, 0, 1));
  EXPECT_TRUE(claimFor(inv, Method::kSmLoad, 0, 1));
  EXPECT_FALSE(claimFor(inv, Method::kCeRead, 1, 0));
  inv = inventory(2);
  inv.native_atomic[1 * 2 + 0] = 0;
  EXPECT_FALSE(claimFor(inv, Method::kAtomic, 1, 0));
  EXPECT_TRUE(claimFor(inv, Method::kSmStore, 1, 0));
  inv = inventory(2);
  inv.gpus[1].posix_fd = false;
  EXPECT_FALSE(claimFor(inv, Method::kIpcVmm, 0, 1));
  EXPECT_TRUE(claimFor(inv, Method::kIpcVmm, 1, 0));
  EXPECT_TRUE(claimFor(inv, Method::kIpcLegacy, 0, 1));
  inv.gpus[1].ipc_event = false;
  EXPECT_FALSE(claimFor(inv, Method::kIpcLegacy, 0, 1));
  // Out of range or the same GPU: never claimed.
  EXPECT_FALSE(claimFor(inv, Method::kCeWrite, 0, 0));
  EXPECT_FALSE(claimFor(inv, Method::kCeWrite, 0, 5));
}

TEST(Rounds, FullMatrixPacksIntoNMinusOneRounds) {
  for (int n : {2, 3, 4, 8}) {
    const auto pairs = allPairs(n);
    EXPECT_EQ(pairs.size(), static_cast<size_t>(n * (n - 1)));
    const auto rounds = planRounds(pairs);
    EXPECT_EQ(rounds.size(), static_cast<size_t>(n - 1)) << n << " GPUs";
    std::set<Pair> seen;
    for (const auto& round : rounds) {
      std::set<int> srcs, dsts;
      for (const Pair& p : round) {
        EXPECT_TRUE(srcs.insert(p.first).second) << "GPU " << p.first << " is a source twice in one round";
        EXPECT_TRUE(dsts.insert(p.second).second) << "GPU " << p.second << " is a destination twice in one round";
        EXPECT_TRUE(seen.insert(p).second);
      }
    }
    EXPECT_EQ(seen.size(), pairs.size());
  }
}

TEST(Rounds, ArbitrarySelectionsStayDisjoint) {
  const std::vector<Pair> pairs = {{0, 1}, {0, 2}, {0, 3}, {1, 0}, {2, 0}, {3, 1}};
  const auto rounds = planRounds(pairs);
  size_t total = 0;
  for (const auto& round : rounds) {
    std::set<int> srcs, dsts;
    for (const Pair& p : round) {
      EXPECT_TRUE(srcs.insert(p.first).second);
      EXPECT_TRUE(dsts.insert(p.second).second);
    }
    total += round.size();
  }
  EXPECT_EQ(total, pairs.size());
  EXPECT_EQ(rounds.size(), 3u);  // GPU 0 is the source of three pairs
}

TEST(Parse, Bytes) {
  EXPECT_EQ(*parseBytes("4096"), 4096u);
  EXPECT_EQ(*parseBytes("4K"), 4096u);
  EXPECT_EQ(*parseBytes("4KiB"), 4096u);
  EXPECT_EQ(*parseBytes("64M"), 64u << 20);
  EXPECT_EQ(*parseBytes(" 1g "), 1u << 30);
  for (const char* bad : {"", "K", "-1", "0", "12Q", "1.5M", "99999999999999999999"}) {
    EXPECT_EQ(parseBytes(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
  PEERLAB_EXPECT_OK(validateCellBytes(16));
  PEERLAB_EXPECT_OK(validateCellBytes(64u << 20));
  EXPECT_FALSE(validateCellBytes(8).isOk());
  EXPECT_FALSE(validateCellBytes(4097).isOk());
  EXPECT_FALSE(validateCellBytes(8ull << 30).isOk());
  EXPECT_EQ(formatBytes(4096), "4 KiB");
  EXPECT_EQ(formatBytes(64u << 20), "64 MiB");
  EXPECT_EQ(formatBytes(100), "100 B");
}

TEST(Parse, PairsMethodsDurations) {
  auto pairs = parsePairs("0-1, 2-3,0-1");
  ASSERT_TRUE(pairs.isOk());
  EXPECT_EQ(*pairs, (std::vector<Pair>{{0, 1}, {2, 3}}));
  // The same syntaxes qualify and bench take.
  auto colon = parsePairs("0:1,1->0,2-3");
  ASSERT_TRUE(colon.isOk()) << colon.status().toString();
  EXPECT_EQ(*colon, (std::vector<Pair>{{0, 1}, {1, 0}, {2, 3}}));
  for (const char* bad : {"", "0", "0-0", "a-b", "1-", "-1-2", "0-1,", "0:0", "0->", ":1", "0-1-2"}) {
    EXPECT_FALSE(parsePairs(bad).isOk()) << bad;
  }
  auto methods = parseMethods("sm_load,ce_write");
  ASSERT_TRUE(methods.isOk());
  EXPECT_EQ(*methods, (std::vector<Method>{Method::kCeWrite, Method::kSmLoad}));
  EXPECT_EQ(parseMethods("all")->size(), kAllMethods.size());
  EXPECT_FALSE(parseMethods("ce_write,teleport").isOk());
  for (Method m : kAllMethods)
    EXPECT_EQ(parseMethod(methodName(m)), m);
  EXPECT_EQ(parseDuration("5")->count(), 5000);
  EXPECT_EQ(parseDuration("5s")->count(), 5000);
  EXPECT_EQ(parseDuration("0.5s")->count(), 500);
  EXPECT_EQ(parseDuration("250ms")->count(), 250);
  for (const char* bad : {"", "-1", "0", "0ms", "abc", "5m", "2h", "1e9"}) {
    EXPECT_FALSE(parseDuration(bad).isOk()) << bad;
  }
}

TEST(Inject, ParsesAndMatchesTheRightProcess) {
  auto plan = parseInject("corrupt:ce_write:0:1,hang:*:1:*:4K,crash:ipc_vmm:2:0");
  ASSERT_TRUE(plan.isOk()) << plan.status().toString();
  ASSERT_EQ(plan->faults().size(), 3u);
  CellSpec c;
  c.method = Method::kCeWrite;
  c.src = 0;
  c.dst = 1;
  c.bytes = 1 << 20;
  EXPECT_EQ(plan->find(c, Role::kOwner, Phase::kLocal), FaultKind::kCorrupt);
  EXPECT_EQ(plan->find(c, Role::kImporter, Phase::kRemoteWrite), std::nullopt);
  c.src = 1;
  c.dst = 3;
  c.bytes = 4096;
  EXPECT_EQ(plan->find(c, Role::kOwner, Phase::kLocal), FaultKind::kHang);
  c.bytes = 8192;
  EXPECT_EQ(plan->find(c, Role::kOwner, Phase::kLocal), std::nullopt);
  // IPC faults are carried out by the importer while it writes; corruption by the owner before its check.
  c.method = Method::kIpcVmm;
  c.src = 2;
  c.dst = 0;
  EXPECT_EQ(plan->find(c, Role::kImporter, Phase::kRemoteWrite), FaultKind::kCrash);
  EXPECT_EQ(plan->find(c, Role::kOwner, Phase::kPoison), std::nullopt);
  EXPECT_TRUE(faultAppliesHere(FaultKind::kCorrupt, Role::kOwner, Phase::kCheck, Method::kIpcLegacy));
  EXPECT_FALSE(faultAppliesHere(FaultKind::kCorrupt, Role::kImporter, Phase::kRemoteWrite, Method::kIpcLegacy));
  EXPECT_TRUE(faultAppliesHere(FaultKind::kCorrupt, Role::kOwner, Phase::kLocal, Method::kAtomic));
  EXPECT_TRUE(parseInject("")->empty());
  for (const char* bad : {"corrupt", "melt:ce_write:0:1", "corrupt:warp:0:1", "corrupt:ce_write:x:1",
                          "corrupt:ce_write:0:1:12Q", "corrupt:ce_write:0:1:4K:extra"}) {
    EXPECT_EQ(parseInject(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(Transport, MethodsGroupsAndRoles) {
  auto t = parseMethods("transport");
  ASSERT_TRUE(t.isOk());
  EXPECT_EQ(*t, std::vector<Method>(kTransportMethods.begin(), kTransportMethods.end()));
  auto both = parseMethods("ucx_get, all");
  ASSERT_TRUE(both.isOk());
  EXPECT_EQ(both->size(), kAllMethods.size() + 1);
  EXPECT_EQ(both->back(), Method::kUcxGet);
  EXPECT_FALSE(parseMethods("nixl_put").isOk());
  EXPECT_NE(parseMethods("nixl_put").status().message().find("nixl_write"), std::string::npos);
  for (Method m : kTransportMethods) {
    EXPECT_TRUE(isTransportMethod(m));
    EXPECT_FALSE(isIpcMethod(m));
    EXPECT_TRUE(readsSourceBuffer(m));
    EXPECT_EQ(parseMethod(methodName(m)), m);
  }
  EXPECT_EQ(transportLibraryOf(Method::kNixlRead), "nixl");
  EXPECT_EQ(transportLibraryOf(Method::kUcxPut), "ucx");
  EXPECT_EQ(transportLibraryOf(Method::kCeWrite), "");
  EXPECT_TRUE(pushedBySource(Method::kNixlWrite));
  EXPECT_FALSE(pushedBySource(Method::kUcxGet));
  // The library, not the driver, claims these cells (the runner learns the claim from the capability check).
  Inventory inv;
  inv.gpus.resize(2);
  inv.can_access = {0, 1, 1, 0};
  EXPECT_FALSE(claimFor(inv, Method::kNixlWrite, 0, 1));
  // Faults: the importer initiates; the checking side corrupts.
  EXPECT_TRUE(faultAppliesHere(FaultKind::kHang, Role::kImporter, Phase::kLocal, Method::kUcxPut));
  EXPECT_FALSE(faultAppliesHere(FaultKind::kHang, Role::kOwner, Phase::kLocal, Method::kUcxPut));
  EXPECT_TRUE(faultAppliesHere(FaultKind::kCorrupt, Role::kOwner, Phase::kLocal, Method::kNixlWrite));
  EXPECT_TRUE(faultAppliesHere(FaultKind::kCorrupt, Role::kImporter, Phase::kLocal, Method::kNixlRead));
  EXPECT_FALSE(faultAppliesHere(FaultKind::kCorrupt, Role::kOwner, Phase::kLocal, Method::kNixlRead));
}

}  // namespace
}  // namespace peerlab::probe
