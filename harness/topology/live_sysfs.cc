// Live machine, sysfs side: each GPU's maximum PCIe link. The link a GPU trained to drops at idle (an H100 reports
// Gen1 while nothing moves), so expectations use the most the GPU and its upstream port both support.

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "harness/topology/topology_internal.h"

namespace peerlab::topology::detail {
namespace {

std::optional<std::string> readLine(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return line;
}

struct MaxLink {
  int generation = 0;
  int width = 0;
};

// "32.0 GT/s PCIe" and "16" from max_link_speed and max_link_width; nullopt when absent or not a PCIe rate.
std::optional<MaxLink> maxLinkOf(const std::filesystem::path& dev) {
  auto speed = readLine(dev / "max_link_speed");
  auto width = readLine(dev / "max_link_width");
  if (!speed || !width) return std::nullopt;
  char* end = nullptr;
  const double gts = std::strtod(speed->c_str(), &end);
  if (end == speed->c_str()) return std::nullopt;
  auto generation = pcieGenerationForRate(gts);
  const long lanes = std::strtol(width->c_str(), &end, 10);
  if (!generation || lanes <= 0 || lanes > 32) return std::nullopt;
  return MaxLink{*generation, static_cast<int>(lanes)};
}

}  // namespace

void addSysfsPcieLinks(Draft& draft, const std::string& devices_dir) {
  namespace fs = std::filesystem;
  for (Gpu& gpu : draft.gpus) {
    std::error_code ec;
    const fs::path dev = fs::canonical(fs::path(devices_dir) / gpu.bus_id, ec);
    if (ec) continue;
    auto own = maxLinkOf(dev);
    if (!own) continue;
    // The upstream port is the parent directory when it is a PCI function too (not the root complex).
    if (auto port = maxLinkOf(dev.parent_path())) {
      own->generation = std::min(own->generation, port->generation);
      own->width = std::min(own->width, port->width);
    }
    auto link = pcieLinkFromGenWidth(own->generation, own->width, "sysfs max_link_speed x max_link_width");
    if (link.isOk()) gpu.pcie = *link;
  }
}

}  // namespace peerlab::topology::detail
