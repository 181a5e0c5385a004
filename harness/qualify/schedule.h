#pragma once
/// The rounds in which a pair suite covers its ordered pairs: in each round every GPU is in at most one pair, and the
/// pairs of a round run at once where their paths share no link. NVLink through NVSwitches, or a direct NVLink between
/// the two GPUs, is a pair's own. A pair over PCIe uses the links of its path through the PCIe tree, which the
/// topology gives as the path between every two GPUs (`nvidia-smi topo -m`'s PIX, PXB, PHB, NODE, SYS): each GPU's own
/// link, the uplink of the switch it shares with PIX peers, the link to the root port it shares with PXB peers, and,
/// across NUMA nodes (SYS), its node's side of the SMP interconnect. A link carries each direction on its own (PCIe
/// is full duplex): a->b climbs a's links and descends b's. Pairs whose path the topology does not give run alone.

#include <string>
#include <utility>
#include <vector>

#include "harness/report/plan_record.h"

namespace peerlab::qualify {

using PairRounds = std::vector<std::vector<std::pair<int, int>>>;

struct PairSchedule {
  PairRounds rounds;
  bool concurrent = false;  ///< some round holds more than one pair
  /// One pair of each kind of concurrent round (NVLink, PCIe), to be sampled alone: a serial sample that the
  /// concurrent figures of the same pair are checked against.
  std::vector<std::pair<int, int>> samples;
  std::string basis;  ///< why the pairs run as they do
};

/// Whether src -> dst has links of its own: NVLink (through NVSwitch or direct) the topology reports.
bool pairHasOwnLinks(const report::PlanTopology& topo, int src, int dst);

/// The PCIe links `src -> dst` crosses, each with its direction ("up:0", "down:0,1", "out:0,1,2,3"): a link is named
/// by the GPUs below it. Empty when the topology does not give the path (the pair then runs alone).
std::vector<std::string> pcieLinks(const report::PlanTopology& topo, int src, int dst);

/// The schedule of `pairs` (each covered exactly once): pairs with links of their own in as few rounds as matchings
/// allow (2(n-1) rounds for every ordered pair of n GPUs, n even), then PCIe pairs packed into rounds whose paths share
/// no link in the same direction, then pairs of unknown paths one per round. `both_ways`: a pair loads its path in
/// both directions (rows that copy both ways at once), so pairs over one link in opposite directions run apart.
/// `concurrent` false: every pair alone, in order.
PairSchedule schedulePairs(const report::PlanTopology& topo, const std::vector<std::pair<int, int>>& pairs,
                           bool concurrent = true, bool both_ways = false);

/// GPUs whose copies to and from the host may run at once: each on a PCIe link of its own and on a NUMA node of its
/// own (their paths cross the SMP link: SYS), so that neither a switch nor the host memory of a node is shared. GPUs of
/// one node (PIX, PXB, PHB, NODE: a node's memory carries ~2 GPUs' copies, not more; measured on 2 H100 of one node,
/// device-to-host fell from 55 to 44 GB/s with both at once) or whose paths the topology does not give run alone. Sets
/// of one are left out.
std::vector<std::vector<int>> hostCopySets(const report::PlanTopology& topo);

/// Every pair alone, in order (the serial schedule a concurrent one falls back to).
PairRounds serialRounds(const std::vector<std::pair<int, int>>& pairs);

}  // namespace peerlab::qualify
