#include "harness/qualify/schedule.h"

#include <algorithm>
#include <map>
#include <set>

namespace peerlab::qualify {

bool pairHasOwnLinks(const report::PlanTopology& topo, int src, int dst) {
  const report::PlanPair* p = topo.pair(src, dst);
  return p != nullptr && p->nvlinks && *p->nvlinks > 0;
}

std::vector<std::vector<int>> hostCopySets(const report::PlanTopology& topo) {
  auto ownLinks = [&](int a, int b) {
    const report::PlanPair* p = topo.pair(a, b);
    return p != nullptr && p->pci == "SYS";
  };
  std::vector<std::vector<int>> sets;
  for (const report::PlanGpu& g : topo.gpus) {
    bool placed = false;
    for (std::vector<int>& set : sets) {
      if (std::all_of(set.begin(), set.end(), [&](int m) { return ownLinks(g.index, m) && ownLinks(m, g.index); })) {
        set.push_back(g.index);
        placed = true;
        break;
      }
    }
    if (!placed) sets.push_back({g.index});
  }
  sets.erase(std::remove_if(sets.begin(), sets.end(), [](const std::vector<int>& s) { return s.size() < 2; }),
             sets.end());
  return sets;
}

PairRounds serialRounds(const std::vector<std::pair<int, int>>& pairs) {
  PairRounds out;
  for (const auto& p : pairs)
    out.push_back({p});
  return out;
}

namespace {

// The round-robin ("circle") matchings of `gpus`: n-1 rounds (n even; a bye for odd n) in which every unordered pair
// meets once; each becomes two rounds, one per direction.
PairRounds circleRounds(std::vector<int> gpus) {
  PairRounds out;
  if (gpus.size() < 2) return out;
  const int bye = -1;
  if (gpus.size() % 2 != 0) gpus.push_back(bye);
  const size_t n = gpus.size();
  std::vector<int> ring(gpus.begin() + 1, gpus.end());
  for (size_t r = 0; r + 1 < n; ++r) {
    std::vector<std::pair<int, int>> there, back;
    std::vector<int> row = {gpus[0]};
    row.insert(row.end(), ring.begin(), ring.end());
    for (size_t i = 0; i < n / 2; ++i) {
      int a = row[i], b = row[n - 1 - i];
      if (a == bye || b == bye) continue;
      // Alternate which side sends first so that no GPU always sends in the first of the two rounds.
      if ((r + i) % 2 != 0) std::swap(a, b);
      there.emplace_back(a, b);
      back.emplace_back(b, a);
    }
    out.push_back(there);
    out.push_back(back);
    std::rotate(ring.rbegin(), ring.rbegin() + 1, ring.rend());
  }
  return out;
}

}  // namespace

PairSchedule schedulePairs(const report::PlanTopology& topo, const std::vector<std::pair<int, int>>& pairs,
                           bool concurrent) {
  PairSchedule s;
  std::vector<std::pair<int, int>> own, shared;
  std::set<std::pair<int, int>> seen;
  for (const auto& p : pairs) {
    if (p.first == p.second || !seen.insert(p).second) continue;
    (concurrent && pairHasOwnLinks(topo, p.first, p.second) ? own : shared).push_back(p);
  }
  if (!own.empty()) {
    std::set<int> gpus;
    for (const auto& [a, b] : own) {
      gpus.insert(a);
      gpus.insert(b);
    }
    const std::set<std::pair<int, int>> wanted(own.begin(), own.end());
    // The matchings of every GPU involved, keeping the pairs asked for; then each round's pairs move to the earliest
    // round where both GPUs are free, so that a partial list still takes few rounds.
    PairRounds rounds;
    for (const auto& round : circleRounds(std::vector<int>(gpus.begin(), gpus.end()))) {
      std::vector<std::pair<int, int>> kept;
      for (const auto& p : round)
        if (wanted.count(p)) kept.push_back(p);
      if (!kept.empty()) rounds.push_back(kept);
    }
    PairRounds packed;
    std::vector<std::set<int>> busy;
    for (const auto& round : rounds) {
      for (const auto& p : round) {
        size_t r = 0;
        while (r < packed.size() && (busy[r].count(p.first) || busy[r].count(p.second)))
          ++r;
        if (r == packed.size()) {
          packed.emplace_back();
          busy.emplace_back();
        }
        packed[r].push_back(p);
        busy[r].insert(p.first);
        busy[r].insert(p.second);
      }
    }
    s.rounds = std::move(packed);
  }
  for (const auto& p : shared)
    s.rounds.push_back({p});
  for (const auto& r : s.rounds)
    s.concurrent |= r.size() > 1;
  const std::string n = std::to_string(pairs.size()) + " ordered pair" + (pairs.size() == 1 ? "" : "s");
  if (s.concurrent) {
    s.basis = n + " in " + std::to_string(s.rounds.size()) +
              " rounds, each GPU in at most one pair per round: " + std::to_string(own.size()) +
              " with NVLinks of their own run at once" +
              (shared.empty() ? std::string()
                              : ", " + std::to_string(shared.size()) + " without (PCIe or unknown) one at a time");
  } else if (!concurrent) {
    s.basis = n + " one at a time (concurrency off)";
  } else {
    s.basis = n + " one at a time: " +
              (own.empty() ? std::string("no pair has NVLinks of its own (PCIe, or links the topology does not give)")
                           : std::string("no two of them are disjoint"));
  }
  return s;
}

}  // namespace peerlab::qualify
