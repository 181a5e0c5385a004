#include "harness/qualify/sysinfo.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string_view>

#include "reference/core/text.h"

namespace peerlab::qualify {

namespace fs = std::filesystem;

namespace {

constexpr uint16_t kAcsCapId = 0x000D;

uint32_t le32(const std::vector<uint8_t>& b, size_t at) {
  return static_cast<uint32_t>(b[at]) | (static_cast<uint32_t>(b[at + 1]) << 8) |
         (static_cast<uint32_t>(b[at + 2]) << 16) | (static_cast<uint32_t>(b[at + 3]) << 24);
}

uint16_t le16(const std::vector<uint8_t>& b, size_t at) {
  return static_cast<uint16_t>(b[at] | (b[at + 1] << 8));
}

std::string readSmall(const fs::path& p) {
  std::ifstream f(p);
  std::string s;
  std::getline(f, s);
  return s;
}

// Config space as far as this process may read it (64 bytes unprivileged, 4096 as root on PCIe).
std::vector<uint8_t> readConfig(const fs::path& p, std::string* why) {
  std::ifstream f(p, std::ios::binary);
  if (!f) {
    *why = std::strerror(errno);
    return {};
  }
  std::vector<uint8_t> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return b;
}

bool isBusId(const std::string& s) {
  static const std::regex re("^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\\.[0-7]$");
  return std::regex_match(s, re);
}

std::string lower(std::string s) {
  for (char& c : s)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string describeDevice(const fs::path& dev) {
  const std::string cls = readSmall(dev / "class");
  const std::string vendor = readSmall(dev / "vendor");
  const std::string device = readSmall(dev / "device");
  std::string s = "class " + (cls.empty() ? "?" : cls) + " " +
                  (vendor.empty() ? "?" : vendor.substr(vendor.rfind('x') + 1)) + ":" +
                  (device.empty() ? "?" : device.substr(device.rfind('x') + 1));
  return s;
}

}  // namespace

std::optional<AcsState> findAcs(const std::vector<uint8_t>& config) {
  if (config.size() < 4096) return std::nullopt;
  size_t at = 0x100;
  std::set<size_t> seen;
  while (at >= 0x100 && at + 8 <= config.size() && seen.insert(at).second) {
    const uint32_t header = le32(config, at);
    if (header == 0 || header == 0xffffffffu) return std::nullopt;
    if ((header & 0xffff) == kAcsCapId) return AcsState{le16(config, at + 4), le16(config, at + 6)};
    at = (header >> 20) & 0xffc;
  }
  return std::nullopt;
}

std::string formatAcsBits(uint16_t bits) {
  static const char* kNames[] = {"SrcValid",    "TransBlk",   "ReqRedir",   "CmpltRedir",
                                 "UpstreamFwd", "EgressCtrl", "DirectTrans"};
  std::string s;
  for (int i = 0; i < 7; ++i)
    s += (i ? " " : "") + std::string(kNames[i]) + ((bits >> i) & 1 ? "+" : "-");
  return s;
}

std::vector<std::string> pciPath(const std::string& bus_id, const std::string& root) {
  std::error_code ec;
  const fs::path real = fs::canonical(fs::path(root) / "bus/pci/devices" / lower(bus_id), ec);
  if (ec) return {};
  std::vector<std::string> chain;
  for (const auto& part : real) {
    const std::string p = part.string();
    if (isBusId(p)) chain.push_back(p);
  }
  return chain;
}

std::string describeAcs(const std::vector<std::string>& gpu_bus_ids, const std::string& root) {
  std::ostringstream out;
  const fs::path devices = fs::path(root) / "bus/pci/devices";
  std::error_code ec;
  if (!fs::is_directory(devices, ec)) return "unreadable: " + devices.string() + " does not exist\n";
  std::vector<std::string> ids;
  for (const auto& e : fs::directory_iterator(devices, ec))
    ids.push_back(e.path().filename().string());
  std::sort(ids.begin(), ids.end());
  int withAcs = 0, unreadable = 0, shortReads = 0;
  std::ostringstream lines;
  std::map<std::string, std::string> acsOf;
  for (const std::string& id : ids) {
    std::string why;
    const std::vector<uint8_t> cfg = readConfig(devices / id / "config", &why);
    if (cfg.empty()) {
      ++unreadable;
      acsOf[id] = "unreadable: " + why;
      continue;
    }
    if (cfg.size() < 4096) {
      ++shortReads;
      acsOf[id] = "unreadable: only " + std::to_string(cfg.size()) + " bytes of config space (root reads 4096)";
      continue;
    }
    auto acs = findAcs(cfg);
    if (!acs) {
      acsOf[id] = "no ACS capability";
      continue;
    }
    ++withAcs;
    acsOf[id] = "ACSCap: " + formatAcsBits(acs->capability) + " | ACSCtl: " + formatAcsBits(acs->control);
    lines << id << " " << describeDevice(devices / id) << "\n    " << acsOf[id] << "\n";
  }
  out << "PCIe Access Control Services, read from " << devices.string() << "/*/config (" << ids.size()
      << " functions: " << withAcs << " with ACS, " << shortReads
      << " with only the first bytes of config space readable, " << unreadable << " unreadable)\n";
  if (shortReads > 0 && withAcs == 0) {
    out << (::geteuid() == 0 ? "unreadable: the extended config space (offset 256 and up) is not exposed here "
                               "(conventional PCI, or a VM that hides it)\n"
                             : "unreadable: the extended config space needs root; run peerlab repro as root for ACS\n");
  }
  out << "\nGPUs and the bridges above them (ReqRedir+/CmpltRedir+ on a bridge sends P2P traffic up to the root "
         "complex):\n";
  for (const std::string& gpu : gpu_bus_ids) {
    const auto chain = pciPath(gpu, root);
    if (chain.empty()) {
      out << lower(gpu) << ": not found under " << devices.string() << "\n";
      continue;
    }
    out << lower(gpu) << ":\n";
    for (const std::string& hop : chain) {
      out << "  " << hop << " " << describeDevice(devices / hop) << ": "
          << (acsOf.count(hop) ? acsOf[hop] : std::string("not read")) << "\n";
    }
  }
  out << "\nEvery function with ACS:\n" << lines.str();
  return out.str();
}

std::string describeIommu(const std::vector<std::string>& gpu_bus_ids, const std::string& root) {
  std::ostringstream out;
  const fs::path groups = fs::path(root) / "kernel/iommu_groups";
  std::error_code ec;
  if (!fs::is_directory(groups, ec)) {
    return "unreadable: " + groups.string() + " does not exist (IOMMU off, or not exposed in this VM)\n";
  }
  std::vector<std::pair<int, std::string>> entries;
  for (const auto& g : fs::directory_iterator(groups, ec)) {
    const std::string name = g.path().filename().string();
    int num = -1;
    try {
      num = std::stoi(name);
    } catch (...) {
      continue;
    }
    std::error_code ec2;
    for (const auto& d : fs::directory_iterator(g.path() / "devices", ec2)) {
      entries.emplace_back(num, d.path().filename().string());
    }
  }
  std::sort(entries.begin(), entries.end());
  if (ec) out << "unreadable: " << groups.string() << ": " << ec.message() << "\n";
  out << entries.size() << " devices in IOMMU groups (" << groups.string() << ")\n";
  std::set<std::string> gpus;
  for (const std::string& g : gpu_bus_ids)
    gpus.insert(lower(g));
  std::map<int, int> perGroup;
  for (const auto& [num, dev] : entries)
    ++perGroup[num];
  out << "\nGPUs:\n";
  for (const std::string& g : gpus) {
    bool found = false;
    for (const auto& [num, dev] : entries) {
      if (dev == g) {
        out << "  " << g << ": group " << num << " (" << perGroup[num] << " device" << (perGroup[num] == 1 ? "" : "s")
            << " in the group)\n";
        found = true;
      }
    }
    if (!found) out << "  " << g << ": in no IOMMU group\n";
  }
  out << "\nAll groups:\n";
  const fs::path devices = fs::path(root) / "bus/pci/devices";
  for (const auto& [num, dev] : entries) {
    out << "  group " << num << ": " << dev << " " << describeDevice(devices / dev)
        << (gpus.count(dev) ? "  <- GPU" : "") << "\n";
  }
  return out.str();
}

std::string nvidiaKernelLines(const std::string& log, size_t max_lines) {
  std::vector<std::string> kept;
  size_t start = 0;
  while (start < log.size()) {
    size_t end = log.find('\n', start);
    if (end == std::string::npos) end = log.size();
    const std::string_view line(log.data() + start, end - start);
    if (line.find("NVRM") != std::string_view::npos || line.find("Xid") != std::string_view::npos) {
      kept.push_back(printable(line, 1000));
      if (kept.size() > max_lines) kept.erase(kept.begin());
    }
    start = end + 1;
  }
  std::string out;
  for (const std::string& l : kept)
    out += l + "\n";
  return out;
}

std::string kernelCommandLine(const std::string& proc_root) {
  std::ifstream f(fs::path(proc_root) / "cmdline");
  if (!f) return std::string("unreadable: ") + std::strerror(errno);
  std::string s;
  std::getline(f, s);
  return s;
}

}  // namespace peerlab::qualify
