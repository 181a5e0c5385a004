// NCCL topology XML (NCCL_TOPO_FILE / NCCL_TOPO_DUMP_FILE): <system> holds <cpu numaid affinity> elements, under
// them nested <pci> elements (a class 0x0604 <pci> with children stands for a whole PCIe switch, as NCCL collapses
// switches), GPUs as <pci class="0x03..."> with an optional <gpu dev sm rank> child and its <nvlink target count
// tclass> links (tclass 0x068000: an NVSwitch).

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "harness/topology/topology_internal.h"
#include "reference/core/devices.h"

namespace peerlab::topology::detail {
namespace {

std::optional<long> parseNumber(const std::string* text, int base) {
  if (!text || text->empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(text->c_str(), &end, base);
  if (!end || *end != '\0' || errno == ERANGE) return std::nullopt;
  return v;
}

std::string rangeText(long lo, long hi, int base) {
  if (base != 16) return std::to_string(lo) + " .. " + std::to_string(hi);
  char buf[48];
  std::snprintf(buf, sizeof(buf), "0x%lx .. 0x%lx", lo, hi);
  return buf;
}

// An integer attribute of `el` within lo .. hi: nullopt when absent, `invalid_argument` naming the element, the
// attribute and its value when it is not such a number.
StatusOr<std::optional<long>> rangedAttribute(const XmlElement& el, const char* attr, int base, long lo, long hi) {
  const std::string* text = el.attribute(attr);
  if (!text) return std::optional<long>();
  auto v = parseNumber(text, base);
  if (!v || *v < lo || *v > hi) {
    // A number too large for a long is outside the range too, not "not a number".
    char* end = nullptr;
    (void)std::strtoll(text->c_str(), &end, base);
    const bool numeric = !text->empty() && end && *end == '\0';
    return PEERLAB_INVALID_ARGUMENT("line " + std::to_string(el.line) + ": <" + el.name + "> attribute " + attr +
                                    " = \"" + printable(*text, kQuoteLimit) + "\" is " +
                                    (numeric ? "outside " : "not a number in ") + rangeText(lo, hi, base));
  }
  return std::optional<long>(*v);
}

// The GPU's PCIe link from link_speed ("16 GT/s", "32.0 GT/s PCIe") and link_width ("16"): nullopt when either is
// absent or not numeric (NCCL writes what sysfs says, "Unknown" included); a number that is no PCIe rate or width is
// bad input.
StatusOr<std::optional<PcieLink>> pcieLinkOf(const XmlElement& pci) {
  const std::string* speed = pci.attribute("link_speed");
  const std::string* width = pci.attribute("link_width");
  if (!speed || !width) return std::optional<PcieLink>();
  char* end = nullptr;
  const double gts = std::strtod(speed->c_str(), &end);
  if (end == speed->c_str()) return std::optional<PcieLink>();
  auto lanes = parseNumber(width, 10);
  if (!lanes || *lanes == 0) return std::optional<PcieLink>();
  const std::string at = "line " + std::to_string(pci.line) + ": <pci> attribute ";
  auto generation = pcieGenerationForRate(gts);
  if (!generation) {
    return PEERLAB_INVALID_ARGUMENT(at + "link_speed = \"" + printable(*speed, kQuoteLimit) +
                                    "\" is not a PCIe rate (2.5, 5, 8, 16, 32 or 64 GT/s)");
  }
  const int width_in_range = *lanes > 0 && *lanes <= 64 ? static_cast<int>(*lanes) : -1;  // -1: never a width
  auto link = pcieLinkFromGenWidth(*generation, width_in_range, "nccl link_speed x link_width");
  if (!link.isOk()) {
    return PEERLAB_INVALID_ARGUMENT(at + "link_width = \"" + printable(*width, kQuoteLimit) +
                                    "\" is not a PCIe width (1, 2, 4, 8, 12, 16 or 32 lanes)");
  }
  return std::optional<PcieLink>(*link);
}

std::string lower(std::string s) {
  for (char& c : s)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Linux cpumask "0000ffff,0000ffff" (most significant word first) to a CPU list.
std::optional<std::string> cpusFromAffinity(const std::string& mask) {
  std::vector<std::string> tokens;
  for (size_t start = 0;;) {
    size_t comma = mask.find(',', start);
    tokens.push_back(mask.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  std::vector<unsigned long> words;
  for (auto it = tokens.rbegin(); it != tokens.rend(); ++it) {
    std::string word = *it;
    if (word.rfind("0x", 0) == 0 || word.rfind("0X", 0) == 0) word = word.substr(2);
    if (word.empty() || word.size() > 8) return std::nullopt;
    char* stop = nullptr;
    unsigned long v = std::strtoul(word.c_str(), &stop, 16);
    if (!stop || *stop != '\0') return std::nullopt;
    words.push_back(v);
  }
  return cpuListFromWords(words);
}

// Per-link NVLink rate per direction by compute capability (NVLink generation of that GPU family).
std::optional<double> nvlinkRateForSm(long sm) {
  switch (sm) {
    case 60:
      return 20.0;
    case 70:
    case 75:
    case 80:
      return 25.0;
    case 86:
      return 14.0625;
    case 90:
      return 26.5625;
    case 100:
    case 103:
      return 50.0;
    default:
      return std::nullopt;
  }
}

// Compute capabilities go up to 12.x today; a larger value is not one.
constexpr long kMaxSm = 1000;

struct NcclGpu {
  Gpu gpu;
  std::vector<const XmlElement*> path;  ///< root .. the GPU's <pci>
  const XmlElement* gpu_el = nullptr;   ///< its <gpu> child, if any
};

struct Walker {
  std::vector<NcclGpu> gpus;
  std::vector<OtherGpu> others;
  std::set<std::string> switch_ids;
  int cpus = 0;
  bool any_gpu_element = false;
  std::vector<const XmlElement*> path;
  const XmlElement* cpu = nullptr;

  Status visit(const XmlElement& el) {
    path.push_back(&el);
    const XmlElement* saved_cpu = cpu;
    if (el.name == "cpu") {
      cpu = &el;
      ++cpus;
    }
    if (el.name == "gpu") any_gpu_element = true;
    if (el.name == "pci") PEERLAB_RETURN_IF_ERROR(visitPci(el));
    for (const XmlElement& c : el.children)
      PEERLAB_RETURN_IF_ERROR(visit(c));
    cpu = saved_cpu;
    path.pop_back();
    return Status::ok();
  }

  Status visitPci(const XmlElement& el) {
    const std::string* busid = el.attribute("busid");
    std::string cls = lower(el.attribute("class") ? *el.attribute("class") : "");
    const XmlElement* gpu_el = nullptr;
    for (const XmlElement& c : el.children) {
      if (c.name == "gpu") gpu_el = &c;
    }
    PEERLAB_ASSIGN_OR_RETURN(auto vendor, rangedAttribute(el, "vendor", 16, 0, 0xffff));
    PEERLAB_ASSIGN_OR_RETURN(auto device, rangedAttribute(el, "device", 16, 0, 0xffff));
    if (cls.rfind("0x0680", 0) == 0 && vendor == 0x10de && busid) switch_ids.insert(lower(*busid));
    bool gpu_class = cls.rfind("0x03", 0) == 0 || cls.rfind("0x1200", 0) == 0;
    if (!gpu_el && !gpu_class) return Status::ok();
    std::string bus = busid ? normalizeBusId(*busid) : "";
    if (bus.empty()) {
      return PEERLAB_INVALID_ARGUMENT(
          "line " + std::to_string(el.line) + ": GPU <pci> with " +
          (busid ? "invalid busid '" + printable(*busid, kQuoteLimit) + "'" : std::string("no busid")));
    }
    // NCCL only models NVIDIA GPUs: a GPU-class device without a vendor attribute is one of them.
    if (vendor && *vendor != 0x10de) {
      others.push_back({bus, modelFromIds(static_cast<int>(*vendor), static_cast<int>(device.value_or(0)))});
      return Status::ok();
    }
    for (const NcclGpu& g : gpus) {
      if (g.gpu.bus_id == bus) {
        return PEERLAB_INVALID_ARGUMENT("line " + std::to_string(el.line) + ": GPU " + bus + " appears twice");
      }
    }
    NcclGpu g;
    g.gpu.bus_id = bus;
    g.gpu.vendor_id = 0x10de;
    g.gpu.device_id = static_cast<int>(device.value_or(0));
    if (device) {
      g.gpu.model = modelFromIds(0x10de, g.gpu.device_id);
      g.gpu.model_source = "pci-id";
    } else {
      std::optional<long> sm;
      if (gpu_el) {
        PEERLAB_ASSIGN_OR_RETURN(sm, rangedAttribute(*gpu_el, "sm", 10, 0, kMaxSm));
      }
      g.gpu.model = sm ? "NVIDIA GPU (sm_" + std::to_string(*sm) + ")" : "NVIDIA GPU";
      g.gpu.model_source = "none";
    }
    if (cpu) {
      // NCCL writes -1 when the NUMA node is unknown.
      PEERLAB_ASSIGN_OR_RETURN(auto numa, rangedAttribute(*cpu, "numaid", 10, -1, kMaxNumaId));
      if (numa && *numa >= 0) g.gpu.numa = {static_cast<int>(*numa)};
      if (const std::string* aff = cpu->attribute("affinity")) {
        auto cpus_list = cpusFromAffinity(*aff);
        if (!cpus_list) {
          return PEERLAB_INVALID_ARGUMENT("line " + std::to_string(cpu->line) + ": bad cpu affinity '" +
                                          printable(*aff, kQuoteLimit) + "'");
        }
        g.gpu.cpuset = *cpus_list;
      }
    }
    PEERLAB_ASSIGN_OR_RETURN(g.gpu.pcie, pcieLinkOf(el));
    g.path = path;
    g.gpu_el = gpu_el;
    gpus.push_back(std::move(g));
    return Status::ok();
  }
};

// NCCL's path types over its collapsed tree: one switch between the GPUs is PIX, more is PXB, meeting at a CPU is
// PHB (NCCL records no host bridges, so NODE cannot be told apart), different CPUs is SYS.
PciPath ncclPath(const NcclGpu& a, const NcclGpu& b) {
  if (&a == &b) return PciPath::kSelf;
  size_t k = 0;
  while (k < a.path.size() && k < b.path.size() && a.path[k] == b.path[k])
    ++k;
  if (k == 0) return PciPath::kUnknown;
  const XmlElement* lca = a.path[k - 1];
  if (lca->name == "pci") {
    size_t between_a = a.path.size() - k - 1;
    size_t between_b = b.path.size() - k - 1;
    return (between_a == 0 && between_b == 0) ? PciPath::kPix : PciPath::kPxb;
  }
  if (lca->name == "cpu") return PciPath::kPhb;
  return PciPath::kSys;
}

}  // namespace

Status fromNcclXml(const XmlElement& root, Draft& draft) {
  Walker w;
  PEERLAB_RETURN_IF_ERROR(w.visit(root));
  draft.machine.numa_nodes = w.cpus;
  draft.machine.description = "NCCL topology";
  draft.other_gpus = w.others;
  const size_t n = w.gpus.size();
  for (const NcclGpu& g : w.gpus)
    draft.gpus.push_back(g.gpu);
  draft.pci.assign(n * n, PciPath::kUnknown);
  draft.links.assign(n * n, LinkView{});
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j)
      draft.pciAt(i, j) = ncclPath(w.gpus[i], w.gpus[j]);
  }

  // A dump made by NCCL lists every GPU's NVLinks under its <gpu>; without <gpu> elements (hand-written files)
  // the file says nothing about NVLink.
  if (!w.any_gpu_element) {
    draft.nvswitches = static_cast<int>(w.switch_ids.size());
    return Status::ok();
  }
  draft.nvlink_source = "nccl";
  std::map<std::string, size_t> by_bus;
  for (size_t i = 0; i < n; ++i)
    by_bus[draft.gpus[i].bus_id] = i;
  std::vector<int> to_switch(n, 0);
  std::vector<std::vector<int>> direct(n, std::vector<int>(n, 0));
  std::vector<std::optional<double>> rate(n);
  for (size_t i = 0; i < n; ++i) {
    const XmlElement* gpu_el = w.gpus[i].gpu_el;
    if (!gpu_el) continue;
    PEERLAB_ASSIGN_OR_RETURN(auto sm, rangedAttribute(*gpu_el, "sm", 10, 0, kMaxSm));
    rate[i] = nvlinkRateForSm(sm.value_or(0));
    int all = 0;
    for (const XmlElement& link : gpu_el->children) {
      if (link.name != "nvlink") continue;
      PEERLAB_ASSIGN_OR_RETURN(auto count, rangedAttribute(link, "count", 10, 0, kMaxNvlinks));
      const std::string* target = link.attribute("target");
      if (!count || !target) {
        return PEERLAB_INVALID_ARGUMENT("line " + std::to_string(link.line) + ": <nvlink> needs target and count");
      }
      const int c = static_cast<int>(*count);
      all += c;
      if (all > kMaxNvlinks) {
        return PEERLAB_INVALID_ARGUMENT("line " + std::to_string(link.line) + ": <nvlink> attribute count: GPU " +
                                        draft.gpus[i].bus_id + " has " + std::to_string(all) +
                                        " NVLinks in all, outside 0 .. " + std::to_string(kMaxNvlinks));
      }
      // NCCL's target classes: 0x068000 an NVSwitch, 0x068001 a CPU (POWER), 0x03... a GPU. Only links that reach
      // other GPUs count.
      std::string tclass = lower(link.attribute("tclass") ? *link.attribute("tclass") : "");
      auto peer = by_bus.find(normalizeBusId(*target));
      if (tclass == "0x068000") {
        to_switch[i] += c;
        w.switch_ids.insert(lower(*target));
      } else if (peer != by_bus.end() && peer->second != i) {
        direct[i][peer->second] += c;
      }
    }
  }
  draft.nvswitches = static_cast<int>(w.switch_ids.size());
  for (size_t i = 0; i < n; ++i) {
    Gpu& g = draft.gpus[i];
    int to_gpus = 0;
    for (int c : direct[i])
      to_gpus += c;
    g.nvlink_links = to_gpus + to_switch[i];
    g.nvswitch_links = to_switch[i];
    g.nvlink_link_gbps = rate[i];
    for (size_t j = 0; j < n; ++j) {
      if (i == j) continue;
      int through = (to_switch[i] > 0 && to_switch[j] > 0) ? std::min(to_switch[i], to_switch[j]) : 0;
      int links = direct[i][j] + through;
      LinkView& lv = draft.linkAt(i, j);
      lv.links = links;
      lv.nvswitch = through > 0;
      if (links > 0 && rate[i] && rate[j]) lv.gbps = links * std::min(*rate[i], *rate[j]);
    }
  }
  return Status::ok();
}

}  // namespace peerlab::topology::detail
