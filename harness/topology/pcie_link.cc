#include "harness/topology/pcie_link.h"

#include <cmath>
#include <cstdio>

namespace peerlab::topology {

std::optional<double> pcieLaneRate(int generation) {
  static constexpr double kRates[] = {2.5, 5, 8, 16, 32, 64};
  if (generation < 1 || generation > 6) return std::nullopt;
  return kRates[generation - 1];
}

std::optional<double> pcieEncoding(int generation) {
  if (generation < 1 || generation > 6) return std::nullopt;
  if (generation <= 2) return 8.0 / 10.0;
  if (generation <= 5) return 128.0 / 130.0;
  return 242.0 / 256.0;
}

std::optional<int> pcieGenerationForRate(double gts) {
  for (int g = 1; g <= 6; ++g) {
    if (std::fabs(gts - *pcieLaneRate(g)) <= 0.01 * *pcieLaneRate(g)) return g;
  }
  return std::nullopt;
}

StatusOr<PcieLink> pcieLinkFromGenWidth(int generation, int width, const std::string& source) {
  if (!pcieLaneRate(generation)) {
    return PEERLAB_INVALID_ARGUMENT("PCIe generation " + std::to_string(generation) + " is outside 1 .. 6");
  }
  if (width != 1 && width != 2 && width != 4 && width != 8 && width != 12 && width != 16 && width != 32) {
    return PEERLAB_INVALID_ARGUMENT("PCIe link width " + std::to_string(width) +
                                    " is not one of 1, 2, 4, 8, 12, 16, 32 lanes");
  }
  PcieLink link;
  link.generation = generation;
  link.width = width;
  link.gbps = *pcieLaneRate(generation) * width * *pcieEncoding(generation) / 8;
  link.source = source;
  return link;
}

std::string describePcieLink(const PcieLink& link) {
  char rate[32];
  std::snprintf(rate, sizeof(rate), "%.4g GB/s", link.gbps);
  if (link.generation && link.width) {
    return "Gen" + std::to_string(*link.generation) + " x" + std::to_string(*link.width) + " " + rate;
  }
  return rate;
}

}  // namespace peerlab::topology
