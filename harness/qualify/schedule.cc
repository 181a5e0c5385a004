#include "harness/qualify/schedule.h"

#include <algorithm>
#include <functional>
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

namespace {

// How far up the PCIe tree a path climbs: PIX 1 (one switch), PXB 2 (switches below the root port), PHB and NODE 3
// (through the CPU), SYS 4 (across the SMP interconnect); -1 when the topology does not give it.
int pathRank(const std::string& pci) {
  if (pci == "PIX") return 1;
  if (pci == "PXB") return 2;
  if (pci == "PHB" || pci == "NODE") return 3;
  if (pci == "SYS") return 4;
  return -1;
}

// The GPUs below each link of every GPU's way up: tier 0 its own link, tier 1 the switch it shares with PIX peers,
// tier 2 the root port it shares with PXB peers, tier 3 its NUMA node (PHB and NODE peers). A group is a connected
// component of the relation "path at most this rank" (an inconsistent topology only makes groups larger).
struct Tree {
  std::map<int, std::vector<std::vector<int>>> tiers;  // by GPU: tier -> members, sorted
  std::set<int> unknown;                               // GPUs with a path the topology does not give
};

Tree pcieTree(const report::PlanTopology& topo) {
  Tree tree;
  std::vector<int> gpus;
  for (const report::PlanGpu& g : topo.gpus)
    gpus.push_back(g.index);
  for (const report::PlanPair& p : topo.pairs) {
    if (pathRank(p.pci) < 0) {
      tree.unknown.insert(p.src);
      tree.unknown.insert(p.dst);
    }
  }
  for (int g : gpus)
    tree.tiers[g] = {{g}};
  for (int rank = 1; rank <= 3; ++rank) {
    std::map<int, int> parent;
    for (int g : gpus)
      parent[g] = g;
    std::function<int(int)> root = [&](int x) { return parent[x] == x ? x : parent[x] = root(parent[x]); };
    for (const report::PlanPair& p : topo.pairs) {
      const int r = pathRank(p.pci);
      if (r >= 1 && r <= rank && parent.count(p.src) && parent.count(p.dst)) parent[root(p.src)] = root(p.dst);
    }
    std::map<int, std::vector<int>> members;
    for (int g : gpus)
      members[root(g)].push_back(g);
    for (int g : gpus)
      tree.tiers[g].push_back(members[root(g)]);
  }
  return tree;
}

std::string linkName(const std::vector<int>& members) {
  std::string out;
  for (int g : members)
    out += (out.empty() ? "" : ",") + std::to_string(g);
  return out;
}

std::vector<std::string> pathLinks(const Tree& tree, const report::PlanTopology& topo, int src, int dst) {
  const report::PlanPair* p = topo.pair(src, dst);
  const int rank = p == nullptr ? -1 : pathRank(p->pci);
  if (rank < 0 || tree.unknown.count(src) || tree.unknown.count(dst) || !tree.tiers.count(src) ||
      !tree.tiers.count(dst)) {
    return {};
  }
  std::vector<std::string> out;
  // The links below the lowest common one: climbed on the source's side, descended on the destination's. A tier whose
  // GPUs are those of the tier below is the same link.
  for (const auto& [gpu, dir] : {std::pair{src, "up:"}, std::pair{dst, "down:"}}) {
    const std::vector<std::vector<int>>& tiers = tree.tiers.at(gpu);
    for (int t = 0; t < rank && t < static_cast<int>(tiers.size()); ++t) {
      if (t > 0 && tiers[t] == tiers[t - 1]) continue;
      out.push_back(dir + linkName(tiers[t]));
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> pcieLinks(const report::PlanTopology& topo, int src, int dst) {
  return pathLinks(pcieTree(topo), topo, src, dst);
}

PairSchedule schedulePairs(const report::PlanTopology& topo, const std::vector<std::pair<int, int>>& pairs,
                           bool concurrent, bool both_ways) {
  PairSchedule s;
  std::vector<std::pair<int, int>> own, unknown;
  std::vector<std::pair<std::pair<int, int>, std::vector<std::string>>> pcie;  // with the links each crosses
  std::set<std::pair<int, int>> seen;
  const Tree tree = pcieTree(topo);
  for (const auto& p : pairs) {
    if (p.first == p.second || !seen.insert(p).second) continue;
    if (!concurrent) {
      unknown.push_back(p);
    } else if (pairHasOwnLinks(topo, p.first, p.second)) {
      own.push_back(p);
    } else if (std::vector<std::string> links = pathLinks(tree, topo, p.first, p.second); !links.empty()) {
      if (both_ways) {
        const size_t n = links.size();
        for (size_t i = 0; i < n; ++i)
          links.push_back(links[i].rfind("up:", 0) == 0 ? "down:" + links[i].substr(3) : "up:" + links[i].substr(5));
      }
      pcie.emplace_back(p, std::move(links));
    } else {
      unknown.push_back(p);
    }
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
  const size_t nvlink_rounds = s.rounds.size();
  if (!pcie.empty()) {
    // The pairs crossing most links first (they fit fewest rounds), each into the first round where its GPUs are free
    // and no link it crosses is crossed the same way.
    std::stable_sort(pcie.begin(), pcie.end(),
                     [](const auto& a, const auto& b) { return a.second.size() > b.second.size(); });
    PairRounds packed;
    std::vector<std::set<std::string>> used;  // links and GPUs ("gpu:N") taken in each round
    for (const auto& [p, links] : pcie) {
      std::vector<std::string> takes = links;
      takes.push_back("gpu:" + std::to_string(p.first));
      takes.push_back("gpu:" + std::to_string(p.second));
      size_t r = 0;
      while (r < packed.size() &&
             std::any_of(takes.begin(), takes.end(), [&](const std::string& x) { return used[r].count(x) > 0; }))
        ++r;
      if (r == packed.size()) {
        packed.emplace_back();
        used.emplace_back();
      }
      packed[r].push_back(p);
      used[r].insert(takes.begin(), takes.end());
    }
    s.rounds.insert(s.rounds.end(), packed.begin(), packed.end());
  }
  for (const auto& p : unknown)
    s.rounds.push_back({p});
  // A serial sample of each kind of round that runs pairs at once.
  for (size_t r = 0; r < s.rounds.size(); ++r) {
    if (s.rounds[r].size() < 2) continue;
    s.concurrent = true;
    const bool nvlink = r < nvlink_rounds;
    if (std::none_of(s.samples.begin(), s.samples.end(),
                     [&](const auto& x) { return pairHasOwnLinks(topo, x.first, x.second) == nvlink; }))
      s.samples.push_back(s.rounds[r].front());
  }
  const std::string n = std::to_string(pairs.size()) + " ordered pair" + (pairs.size() == 1 ? "" : "s");
  if (s.concurrent) {
    std::vector<std::string> parts;
    if (!own.empty()) parts.push_back(std::to_string(own.size()) + " with NVLinks of their own run at once");
    if (!pcie.empty())
      parts.push_back(std::to_string(pcie.size()) + " over PCIe at once where their paths share no link" +
                      (both_ways ? " (in either direction)" : " in the same direction"));
    if (!unknown.empty())
      parts.push_back(std::to_string(unknown.size()) + " of paths the topology does not give one at a time");
    s.basis = n + " in " + std::to_string(s.rounds.size()) + " rounds, each GPU in at most one pair per round: ";
    for (size_t i = 0; i < parts.size(); ++i)
      s.basis += (i ? ", " : "") + parts[i];
  } else if (!concurrent) {
    s.basis = n + " one at a time (concurrency off)";
  } else {
    s.basis = n + " one at a time: " +
              (own.empty() && pcie.empty()
                   ? std::string("the topology gives neither NVLinks of their own nor their PCIe paths")
                   : std::string("no two of them are disjoint"));
  }
  return s;
}

}  // namespace peerlab::qualify
