#pragma once
/// The rounds in which a pair suite covers its ordered pairs: in each round every GPU is in at most one pair, and the
/// pairs of a round run at once. Pairs run at once only where each has links of its own: NVLink through NVSwitches
/// (each GPU's links end at the switches, which carry every pair at full rate) or a direct NVLink between the two.
/// Pairs over PCIe, or whose links the topology does not give, share what they cross (a switch, the root complex, the
/// SMP link) and run one at a time, after the others.

#include <string>
#include <utility>
#include <vector>

#include "harness/report/plan_record.h"

namespace peerlab::qualify {

using PairRounds = std::vector<std::vector<std::pair<int, int>>>;

struct PairSchedule {
  PairRounds rounds;
  bool concurrent = false;  ///< some round holds more than one pair
  std::string basis;        ///< why the pairs run as they do
};

/// Whether src -> dst has links of its own: NVLink (through NVSwitch or direct) the topology reports.
bool pairHasOwnLinks(const report::PlanTopology& topo, int src, int dst);

/// The schedule of `pairs` (each covered exactly once): pairs with links of their own in as few rounds as matchings
/// allow (2(n-1) rounds for every ordered pair of n GPUs, n even), the others one per round. `concurrent` false: every
/// pair alone, in order.
PairSchedule schedulePairs(const report::PlanTopology& topo, const std::vector<std::pair<int, int>>& pairs,
                           bool concurrent = true);

/// GPUs whose copies to and from the host may run at once: each on a PCIe link of its own and on a NUMA node of its
/// own (their paths cross the SMP link: SYS), so that neither a switch nor the host memory of a node is shared. GPUs of
/// one node (PIX, PXB, PHB, NODE: a node's memory carries ~2 GPUs' copies, not more; measured on 2 H100 of one node,
/// device-to-host fell from 55 to 44 GB/s with both at once) or whose paths the topology does not give run alone. Sets
/// of one are left out.
std::vector<std::vector<int>> hostCopySets(const report::PlanTopology& topo);

/// Every pair alone, in order (the serial schedule a concurrent one falls back to).
PairRounds serialRounds(const std::vector<std::pair<int, int>>& pairs);

}  // namespace peerlab::qualify
