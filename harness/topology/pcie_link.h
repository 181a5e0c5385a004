#pragma once
/// A GPU's PCIe link as expectations use it: generation x lanes x line encoding, per direction. Generations 1-2 use
/// 8b/10b encoding, 3-5 128b/130b, 6 FLIT mode (242 payload bytes of 256). Protocol overheads (TLP headers, flow
/// control) are not in this figure: the qualify rules' efficiencies account for them.

#include <optional>
#include <string>

#include "reference/core/status.h"

namespace peerlab::topology {

struct PcieLink {
  std::optional<int> generation;  ///< 1..6 when the source gives it (hwloc gives only the rate)
  std::optional<int> width;       ///< lanes, when the source gives them
  double gbps = 0;                ///< GB/s per direction after line encoding
  std::string source;  ///< "hwloc pci_link_speed", "nccl link_speed x link_width", "sysfs max_link_speed", "nvml"...
};

/// Transfer rate of one lane in GT/s for generations 1..6; nullopt otherwise.
std::optional<double> pcieLaneRate(int generation);
/// Line-encoding efficiency of a generation: 0.8 (8b/10b), 128/130, 242/256; nullopt outside 1..6.
std::optional<double> pcieEncoding(int generation);
/// The generation whose lane rate is `gts` GT/s (2.5, 5, 8, 16, 32, 64, within 1%); nullopt otherwise.
std::optional<int> pcieGenerationForRate(double gts);
/// A link from its generation and width: GT/s x lanes x encoding / 8. `invalid_argument` names the value outside its
/// range (generation 1..6, width 1, 2, 4, 8, 12, 16 or 32).
StatusOr<PcieLink> pcieLinkFromGenWidth(int generation, int width, const std::string& source);
/// "Gen5 x16 63.0 GB/s" or "15.75 GB/s" when only the rate is known.
std::string describePcieLink(const PcieLink& link);

/// Largest per-direction PCIe rate a source may claim (Gen6 x32 is about 121 GB/s).
constexpr double kMaxPcieGbps = 256;

}  // namespace peerlab::topology
