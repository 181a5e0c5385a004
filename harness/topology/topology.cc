#include "harness/topology/topology.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "harness/topology/topology_internal.h"
#include "harness/topology/xml_document.h"
#include "reference/core/devices.h"
#include "reference/core/files.h"

namespace peerlab::topology {

std::string_view pciPathName(PciPath path) {
  switch (path) {
    case PciPath::kSelf:
      return "X";
    case PciPath::kPix:
      return "PIX";
    case PciPath::kPxb:
      return "PXB";
    case PciPath::kPhb:
      return "PHB";
    case PciPath::kNode:
      return "NODE";
    case PciPath::kSys:
      return "SYS";
    case PciPath::kUnknown:
      break;
  }
  return "N/A";
}

std::optional<PciPath> parsePciPath(std::string_view name) {
  for (PciPath p : {PciPath::kSelf, PciPath::kPix, PciPath::kPxb, PciPath::kPhb, PciPath::kNode, PciPath::kSys,
                    PciPath::kUnknown}) {
    if (pciPathName(p) == name) return p;
  }
  return std::nullopt;
}

std::string_view sourceFormatName(SourceFormat format) {
  switch (format) {
    case SourceFormat::kLive:
      return "live";
    case SourceFormat::kHwlocXml:
      return "hwloc";
    case SourceFormat::kNcclXml:
      return "nccl";
  }
  return "?";
}

namespace detail {

void Draft::addGpu(Gpu gpu) {
  size_t old_n = n();
  std::vector<PciPath> pci_new((old_n + 1) * (old_n + 1), PciPath::kUnknown);
  std::vector<LinkView> links_new((old_n + 1) * (old_n + 1));
  for (size_t i = 0; i < old_n; ++i) {
    for (size_t j = 0; j < old_n; ++j) {
      pci_new[i * (old_n + 1) + j] = pci[i * old_n + j];
      links_new[i * (old_n + 1) + j] = links[i * old_n + j];
    }
  }
  pci_new[old_n * (old_n + 1) + old_n] = PciPath::kSelf;
  gpus.push_back(std::move(gpu));
  pci = std::move(pci_new);
  links = std::move(links_new);
}

void Draft::keepGpus(const std::function<bool(const Gpu&)>& keep) {
  std::vector<size_t> kept;
  for (size_t i = 0; i < n(); ++i)
    if (keep(gpus[i])) kept.push_back(i);
  const size_t m = kept.size();
  std::vector<PciPath> pci_new(m * m, PciPath::kUnknown);
  std::vector<LinkView> links_new(m * m);
  std::vector<Gpu> gpus_new;
  for (size_t a = 0; a < m; ++a) {
    gpus_new.push_back(gpus[kept[a]]);
    for (size_t b = 0; b < m; ++b) {
      pci_new[a * m + b] = pci[kept[a] * n() + kept[b]];
      links_new[a * m + b] = links[kept[a] * n() + kept[b]];
    }
  }
  gpus = std::move(gpus_new);
  pci = std::move(pci_new);
  links = std::move(links_new);
  closed = true;
}

std::string busOrderKey(const std::string& bus_id) {
  std::string key = normalizeBusId(bus_id);
  if (key.empty()) {
    key = bus_id;
    for (char& c : key)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return key;
}

std::string modelFromIds(int vendor, int device) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%s %04x:%04x", vendor == 0x10de ? "NVIDIA" : "PCI", vendor, device);
  return buf;
}

std::string cpuListFromWords(const std::vector<unsigned long>& words) {
  std::string out;
  long start = -1;
  long total = static_cast<long>(words.size()) * 32;
  auto bit = [&](long b) { return b < total && ((words[b / 32] >> (b % 32)) & 1UL) != 0; };
  for (long b = 0; b <= total; ++b) {
    if (bit(b)) {
      if (start < 0) start = b;
      continue;
    }
    if (start >= 0) {
      if (!out.empty()) out += ',';
      out += std::to_string(start);
      if (b - 1 > start) out += "-" + std::to_string(b - 1);
      start = -1;
    }
  }
  return out;
}

std::optional<double> nvlinkRateForVersion(unsigned version_enum) {
  // NVML_NVLINK_VERSION_1_0 = 1, 2_0 = 2, 2_2 = 3, 3_0 = 4, 3_1 = 5, 4_0 = 6, 5_0 = 7.
  switch (version_enum) {
    case 1:
      return 20.0;
    case 2:
    case 3:
    case 4:
    case 5:
      return 25.0;
    case 6:
      return 26.5625;
    case 7:
      return 50.0;
    default:
      return std::nullopt;
  }
}

double snapNvlinkRate(double gbps) {
  for (double exact : {14.0625, 20.0, 25.0, 26.5625, 50.0}) {
    if (std::fabs(gbps - exact) < 0.0015) return exact;
  }
  return gbps;
}

std::shared_ptr<Data> finish(Draft draft) {
  const size_t n = draft.n();
  std::vector<size_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  std::vector<std::string> keys(n);
  for (size_t i = 0; i < n; ++i)
    keys[i] = busOrderKey(draft.gpus[i].bus_id);
  // CUDA ordinals first (live), then PCI bus order.
  std::stable_sort(perm.begin(), perm.end(), [&](size_t x, size_t y) {
    const Gpu& gx = draft.gpus[x];
    const Gpu& gy = draft.gpus[y];
    bool cx = gx.cuda_ordinal >= 0;
    bool cy = gy.cuda_ordinal >= 0;
    if (cx != cy) return cx;
    if (cx && gx.cuda_ordinal != gy.cuda_ordinal) return gx.cuda_ordinal < gy.cuda_ordinal;
    return keys[x] < keys[y];
  });

  auto data = std::make_shared<Data>();
  data->source = std::move(draft.source);
  data->format = draft.format;
  data->nvlink_source = std::move(draft.nvlink_source);
  data->nvswitches = draft.nvswitches;
  data->other_gpus = std::move(draft.other_gpus);
  data->machine = std::move(draft.machine);
  data->warnings = std::move(draft.warnings);
  data->hwloc = std::move(draft.hwloc);
  data->gpus.reserve(n);
  for (size_t f = 0; f < n; ++f) {
    data->gpus.push_back(draft.gpus[perm[f]]);
    data->gpus.back().index = static_cast<int>(f);
  }
  data->links_from.assign(n * n, std::nullopt);
  data->p2p.assign(n * n, std::nullopt);
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = 0; b < n; ++b) {
      if (a != b) data->links_from[a * n + b] = draft.linkAt(perm[a], perm[b]).links;
    }
  }
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = a + 1; b < n; ++b) {
      GpuPair p;
      p.a = static_cast<int>(a);
      p.b = static_cast<int>(b);
      p.pci = draft.pciAt(perm[a], perm[b]);
      const LinkView& lv = draft.linkAt(perm[a], perm[b]);
      p.nvlink_links = lv.links;
      p.nvlink_gbps = lv.gbps;
      p.nvswitch = lv.nvswitch;
      data->pairs.push_back(p);
    }
  }
  return data;
}

Topology makeTopology(std::shared_ptr<const Data> data) {
  return Topology(std::move(data));
}

}  // namespace detail

const std::string& Topology::source() const {
  return data_->source;
}
SourceFormat Topology::format() const {
  return data_->format;
}
const std::vector<Gpu>& Topology::gpus() const {
  return data_->gpus;
}
const std::vector<GpuPair>& Topology::pairs() const {
  return data_->pairs;
}
int Topology::nvswitchCount() const {
  return data_->nvswitches;
}
const std::string& Topology::nvlinkSource() const {
  return data_->nvlink_source;
}
const std::vector<OtherGpu>& Topology::otherGpus() const {
  return data_->other_gpus;
}
const MachineSummary& Topology::machine() const {
  return data_->machine;
}
const std::vector<std::string>& Topology::warnings() const {
  return data_->warnings;
}

const GpuPair* Topology::pair(int a, int b) const {
  const int n = static_cast<int>(data_->gpus.size());
  if (a == b || a < 0 || b < 0 || a >= n || b >= n) return nullptr;
  int i = std::min(a, b);
  int j = std::max(a, b);
  size_t at = static_cast<size_t>(i) * (2 * n - i - 1) / 2 + static_cast<size_t>(j - i - 1);
  return &data_->pairs[at];
}

std::optional<int> Topology::nvlinkLinksSeenFrom(int from, int to) const {
  const int n = static_cast<int>(data_->gpus.size());
  if (from == to || from < 0 || to < 0 || from >= n || to >= n) return std::nullopt;
  return data_->links_from[static_cast<size_t>(from) * n + to];
}

std::optional<P2pInfo> Topology::p2p(int from, int to) const {
  const int n = static_cast<int>(data_->gpus.size());
  if (from == to || from < 0 || to < 0 || from >= n || to >= n) return std::nullopt;
  return data_->p2p[static_cast<size_t>(from) * n + to];
}

std::vector<int> Topology::gpuNumaNodes() const {
  std::set<int> nodes;
  for (const Gpu& g : data_->gpus)
    nodes.insert(g.numa.begin(), g.numa.end());
  return {nodes.begin(), nodes.end()};
}

std::string Topology::noGpuMessage() const {
  std::string where = data_->format == SourceFormat::kLive ? "this machine" : printable(data_->source);
  std::string msg =
      where + (data_->format == SourceFormat::kLive ? ": no NVIDIA GPU found" : ": no NVIDIA GPU in this topology");
  std::vector<std::string> details;
  if (!data_->other_gpus.empty()) {
    std::map<std::string, int> by_model;
    std::vector<std::string> order;
    for (const OtherGpu& o : data_->other_gpus) {
      if (by_model[o.model]++ == 0) order.push_back(o.model);
    }
    std::string found = "found " + std::to_string(data_->other_gpus.size()) + " other GPU" +
                        (data_->other_gpus.size() == 1 ? "" : "s") + ": ";
    for (size_t k = 0; k < order.size(); ++k) {
      if (k) found += ", ";
      found += std::to_string(by_model[order[k]]) + "x " + order[k];
    }
    details.push_back(found);
  } else {
    details.push_back("no other GPU either");
  }
  if (data_->format == SourceFormat::kLive) {
    for (const std::string& w : data_->warnings) {
      if (w.rfind("CUDA", 0) == 0) details.push_back(w);
    }
  }
  msg += " (";
  for (size_t k = 0; k < details.size(); ++k)
    msg += (k ? "; " : "") + details[k];
  return msg + ")";
}

namespace {

nlohmann::json optionalJson(const std::optional<int>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}
nlohmann::json optionalJson(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}
nlohmann::json p2pJson(const std::optional<P2pInfo>& p) {
  if (!p) return nullptr;
  return {{"access", p->access_supported},
          {"rank", p->performance_rank},
          {"atomics", p->native_atomics},
          {"can_access_peer", p->can_access_peer}};
}

nlohmann::json pcieJson(const std::optional<PcieLink>& link) {
  if (!link) return nullptr;
  return {{"gbps", link->gbps},
          {"generation", optionalJson(link->generation)},
          {"width", optionalJson(link->width)},
          {"source", link->source}};
}

std::string formatGbps(double gbps) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", gbps);
  return buf;
}

std::string cellFor(const GpuPair& p) {
  if (p.nvlink_links && *p.nvlink_links > 0) return "NV" + std::to_string(*p.nvlink_links);
  if (!p.nvlink_links && p.nvlink_gbps) return "NV?";
  return std::string(pciPathName(p.pci));
}

std::string p2pCell(const std::optional<P2pInfo>& p) {
  if (!p) return "?";
  if (!p->access_supported) return p->can_access_peer ? "no*" : "no";
  return "ok/r" + std::to_string(p->performance_rank) + (p->native_atomics ? "/A" : "");
}

// Lays out rows of cells in columns separated by two spaces; the first row is the header.
std::string table(const std::vector<std::vector<std::string>>& rows) {
  size_t cols = 0;
  for (const auto& r : rows)
    cols = std::max(cols, r.size());
  std::vector<size_t> width(cols, 0);
  for (const auto& r : rows) {
    for (size_t c = 0; c < r.size(); ++c)
      width[c] = std::max(width[c], r[c].size());
  }
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (size_t c = 0; c < r.size(); ++c) {
      line += r[c];
      if (c + 1 < r.size()) line += std::string(width[c] - r[c].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ')
      line.pop_back();
    out += line + "\n";
  }
  return out;
}

std::string joinInts(const std::vector<int>& v, const char* sep = ",") {
  std::string out;
  for (size_t k = 0; k < v.size(); ++k)
    out += (k ? sep : "") + std::to_string(v[k]);
  return out;
}

std::string plural(int n, const std::string& one, const std::string& many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

}  // namespace

nlohmann::json Topology::toJson() const {
  const detail::Data& d = *data_;
  const bool live = d.format == SourceFormat::kLive;
  nlohmann::json gpus = nlohmann::json::array();
  for (const Gpu& g : d.gpus) {
    char pci_id[16];
    std::snprintf(pci_id, sizeof(pci_id), "%04x:%04x", g.vendor_id, g.device_id);
    gpus.push_back({{"index", g.index},
                    {"bus_id", g.bus_id},
                    {"model", g.model},
                    {"model_source", g.model_source},
                    {"pci_id", g.device_id ? nlohmann::json(pci_id) : nlohmann::json(nullptr)},
                    {"numa", g.numa},
                    {"cpuset", g.cpuset},
                    {"cuda_ordinal", g.cuda_ordinal >= 0 ? nlohmann::json(g.cuda_ordinal) : nlohmann::json(nullptr)},
                    {"uuid", g.uuid.empty() ? nlohmann::json(nullptr) : nlohmann::json(g.uuid)},
                    {"nvlink_links", optionalJson(g.nvlink_links)},
                    {"nvswitch_links", g.nvswitch_links},
                    {"nvlink_link_gbps", optionalJson(g.nvlink_link_gbps)},
                    {"pcie", pcieJson(g.pcie)}});
  }
  nlohmann::json pairs = nlohmann::json::array();
  for (const GpuPair& p : d.pairs) {
    nlohmann::json j = {{"a", p.a},
                        {"b", p.b},
                        {"pci", std::string(pciPathName(p.pci))},
                        {"nvlink_links", optionalJson(p.nvlink_links)},
                        {"nvlink_gbps", optionalJson(p.nvlink_gbps)},
                        {"nvswitch", p.nvswitch}};
    if (live) {
      j["p2p"] = p2pJson(p.p2p);
      j["p2p_reverse"] = p2pJson(p.p2p_reverse);
    }
    pairs.push_back(std::move(j));
  }
  nlohmann::json others = nlohmann::json::array();
  for (const OtherGpu& o : d.other_gpus)
    others.push_back({{"bus_id", o.bus_id}, {"model", o.model}});
  const MachineSummary& m = d.machine;
  return {{"source", d.source},
          {"format", std::string(sourceFormatName(d.format))},
          {"pair_order", "a<b"},
          {"gpus", std::move(gpus)},
          {"pairs", std::move(pairs)},
          {"nvswitches", d.nvswitches},
          {"nvlink_source", d.nvlink_source.empty() ? nlohmann::json(nullptr) : nlohmann::json(d.nvlink_source)},
          {"numa_nodes", gpuNumaNodes()},
          {"other_gpus", std::move(others)},
          {"machine",
           {{"description", m.description},
            {"packages", m.packages},
            {"numa_nodes", m.numa_nodes},
            {"cores", m.cores},
            {"pus", m.pus},
            {"pci_devices", m.pci_devices},
            {"pci_bridges", m.pci_bridges}}},
          {"warnings", d.warnings}};
}

std::string Topology::formatMatrix() const {
  const detail::Data& d = *data_;
  const int n = static_cast<int>(d.gpus.size());
  std::ostringstream out;
  if (d.format == SourceFormat::kLive) {
    out << "Topology of this machine (hwloc, CUDA" << (d.nvlink_source == "nvml" ? ", NVML" : "") << ")\n";
  } else {
    out << "Topology from " << printable(d.source) << " (" << sourceFormatName(d.format) << " XML)\n";
  }
  const MachineSummary& m = d.machine;
  if (d.format != SourceFormat::kNcclXml) {
    out << "Machine: " << (m.description.empty() ? "" : m.description + ", ")
        << plural(m.packages, "package", "packages") << ", " << plural(m.numa_nodes, "NUMA node", "NUMA nodes") << ", "
        << plural(m.cores, "core", "cores") << ", " << plural(m.pus, "PU", "PUs") << "; "
        << plural(m.pci_devices, "PCI device", "PCI devices") << ", " << plural(m.pci_bridges, "bridge", "bridges")
        << "\n";
  }
  if (n == 0) {
    out << "No NVIDIA GPU.";
    if (!d.other_gpus.empty()) {
      out << " Other GPUs:\n";
      for (const OtherGpu& o : d.other_gpus)
        out << "  " << o.bus_id << "  " << o.model << "\n";
    } else {
      out << "\n";
    }
    for (const std::string& w : d.warnings)
      out << "note: " << w << "\n";
    return out.str();
  }
  std::vector<int> numa = gpuNumaNodes();
  out << plural(n, "NVIDIA GPU", "NVIDIA GPUs");
  if (!numa.empty()) out << " on NUMA node" << (numa.size() == 1 ? " " : "s ") << joinInts(numa);
  if (d.nvswitches > 0) out << ", " << plural(d.nvswitches, "NVSwitch", "NVSwitches");
  out << "; NVLink: " << (d.nvlink_source.empty() ? std::string("unknown from this source") : "from " + d.nvlink_source)
      << "\n\n";

  // The main matrix: NVLink where there is some, else the PCIe path.
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header{""};
  for (int j = 0; j < n; ++j)
    header.push_back("GPU" + std::to_string(j));
  header.push_back("CPU Affinity");
  header.push_back("NUMA Affinity");
  rows.push_back(header);
  bool any_nvlink = false;
  for (int i = 0; i < n; ++i) {
    std::vector<std::string> row{"GPU" + std::to_string(i)};
    for (int j = 0; j < n; ++j) {
      if (i == j) {
        row.push_back("X");
        continue;
      }
      const GpuPair& p = *pair(i, j);
      std::string cell = cellFor(p);
      if (cell.rfind("NV", 0) == 0) any_nvlink = true;
      row.push_back(cell);
    }
    row.push_back(d.gpus[i].cpuset.empty() ? "N/A" : d.gpus[i].cpuset);
    row.push_back(d.gpus[i].numa.empty() ? "N/A" : joinInts(d.gpus[i].numa));
    rows.push_back(row);
  }
  out << table(rows) << "\n";

  // One line per GPU; CUDA, NVLink and UUID columns only where the source knows them.
  const bool show_cuda = std::any_of(d.gpus.begin(), d.gpus.end(), [](const Gpu& g) { return g.cuda_ordinal >= 0; });
  const bool show_links = std::any_of(d.gpus.begin(), d.gpus.end(), [](const Gpu& g) { return g.nvlink_links; });
  const bool show_uuid = std::any_of(d.gpus.begin(), d.gpus.end(), [](const Gpu& g) { return !g.uuid.empty(); });
  const bool show_pcie = std::any_of(d.gpus.begin(), d.gpus.end(), [](const Gpu& g) { return g.pcie.has_value(); });
  std::vector<std::vector<std::string>> list;
  std::vector<std::string> list_header{"", "Bus ID", "Model"};
  if (show_cuda) list_header.push_back("CUDA");
  if (show_pcie) list_header.push_back("PCIe link");
  if (show_links) list_header.push_back("NVLinks");
  if (show_uuid) list_header.push_back("UUID");
  list.push_back(list_header);
  for (const Gpu& g : d.gpus) {
    std::vector<std::string> row{"GPU" + std::to_string(g.index), g.bus_id, g.model};
    if (show_cuda) row.push_back(g.cuda_ordinal >= 0 ? std::to_string(g.cuda_ordinal) : "-");
    if (show_pcie) row.push_back(g.pcie ? describePcieLink(*g.pcie) : "-");
    if (show_links) {
      std::string links = "-";
      if (g.nvlink_links) {
        links = std::to_string(*g.nvlink_links);
        if (g.nvswitch_links > 0) links += " (" + std::to_string(g.nvswitch_links) + " to NVSwitch)";
        if (g.nvlink_link_gbps && *g.nvlink_links > 0) links += " x " + formatGbps(*g.nvlink_link_gbps) + " GB/s";
      }
      row.push_back(links);
    }
    if (show_uuid) row.push_back(g.uuid.empty() ? "-" : g.uuid);
    list.push_back(row);
  }
  out << table(list);

  if (any_nvlink) {
    // Distinct NVLink connections, e.g. "NV6: 6 links, 150 GB/s per direction, through NVSwitch (120 pairs)".
    std::map<std::string, int> kinds;
    for (const GpuPair& p : d.pairs) {
      if (!p.nvlink_links || *p.nvlink_links == 0) continue;
      std::string k = cellFor(p) + ": " + plural(*p.nvlink_links, "link", "links");
      if (p.nvlink_gbps) k += ", " + formatGbps(*p.nvlink_gbps) + " GB/s per direction";
      if (p.nvswitch) k += ", through NVSwitch";
      kinds[k]++;
    }
    out << "\n";
    for (const auto& [k, count] : kinds)
      out << k << " (" << plural(count, "pair", "pairs") << ")\n";
    // The PCIe path stays relevant where NVLink hides it (fallbacks, host staging, NIC placement).
    std::vector<std::vector<std::string>> pci_rows{std::vector<std::string>(header.begin(), header.end() - 2)};
    pci_rows[0][0] = "PCIe";
    for (int i = 0; i < n; ++i) {
      std::vector<std::string> row{"GPU" + std::to_string(i)};
      for (int j = 0; j < n; ++j)
        row.push_back(i == j ? "X" : std::string(pciPathName(pair(i, j)->pci)));
      pci_rows.push_back(row);
    }
    out << "\nPCIe paths (the matrix above shows them only where there is no NVLink):\n" << table(pci_rows);
  }

  bool any_p2p = false;
  for (const auto& p : d.p2p)
    any_p2p = any_p2p || p.has_value();
  if (any_p2p) {
    std::vector<std::vector<std::string>> p2p_rows{std::vector<std::string>(header.begin(), header.end() - 2)};
    p2p_rows[0][0] = "P2P";
    for (int i = 0; i < n; ++i) {
      std::vector<std::string> row{"GPU" + std::to_string(i)};
      for (int j = 0; j < n; ++j)
        row.push_back(i == j ? "X" : p2pCell(p2p(i, j)));
      p2p_rows.push_back(row);
    }
    out << "\nCUDA peer access, row -> column (ok = access supported, r# = performance rank, A = native atomics, "
           "no* = cudaDeviceCanAccessPeer says yes but the attribute says no):\n"
        << table(p2p_rows);
  }

  out << "\nLegend:\n\n"
      << "  X    = the same GPU\n"
      << "  SYS  = PCIe plus the SMP interconnect between NUMA nodes (QPI/UPI, Infinity Fabric)\n"
      << "  NODE = PCIe plus the interconnect between PCIe host bridges within one NUMA node\n"
      << "  PHB  = PCIe through a PCIe host bridge (typically the CPU)\n"
      << "  PXB  = PCIe through several PCIe switches, without a host bridge\n"
      << "  PIX  = PCIe through at most one PCIe switch\n"
      << "  NV#  = a bonded set of # NVLinks (direct, or through NVSwitches)\n";
  if (std::any_of(d.pairs.begin(), d.pairs.end(), [](const GpuPair& p) { return p.pci == PciPath::kUnknown; })) {
    out << "  N/A  = the source does not place the GPU on the PCIe tree\n";
  }
  for (const std::string& w : d.warnings)
    out << "note: " << w << "\n";
  return out.str();
}

Status Topology::exportXml(const std::string& path) const {
  if (!data_->hwloc || !*data_->hwloc) {
    return PEERLAB_UNAVAILABLE(printable(data_->source) +
                               " is an NCCL topology; only hwloc topologies export to hwloc XML");
  }
  // Exported to memory, then written the one safe way (a temporary renamed into place, no symlink followed).
  char* buffer = nullptr;
  int length = 0;
  errno = 0;
  if (hwloc_topology_export_xmlbuffer(data_->hwloc->get(), &buffer, &length, 0) != 0 || buffer == nullptr) {
    return PEERLAB_INVALID_ARGUMENT(printable(path) + ": cannot export hwloc XML" +
                                    (errno ? std::string(": ") + std::strerror(errno) : std::string()));
  }
  // The length counts the terminating NUL.
  const std::string xml(buffer, length > 0 ? static_cast<size_t>(length - 1) : 0);
  hwloc_free_xmlbuffer(data_->hwloc->get(), buffer);
  return writeTextFile(path, xml);
}

namespace {

// A topology XML (hwloc's of a 16-GPU machine is 140 KB) is refused beyond this.
constexpr size_t kMaxTopologyFileBytes = size_t{16} << 20;

// `name` is the path as messages show it.
StatusOr<std::string> readWholeFile(const std::string& path, const std::string& name) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return PEERLAB_INVALID_ARGUMENT(name + ": is a directory, not a topology XML file");
  auto text = readTextFile(path, kMaxTopologyFileBytes);
  if (!text.isOk()) return PEERLAB_INVALID_ARGUMENT(printable(text.status().message()));
  if (text->empty()) return PEERLAB_INVALID_ARGUMENT(name + ": empty file");
  return text;
}

StatusOr<Topology> loadFileUnchecked(const std::string& path) {
  const std::string name = printable(path);
  PEERLAB_ASSIGN_OR_RETURN(std::string text, readWholeFile(path, name));
  auto doc = parseXml(text);
  if (!doc.isOk()) return PEERLAB_INVALID_ARGUMENT(name + ": malformed XML: " + doc.status().message());
  detail::Draft draft;
  draft.source = path;
  if (doc->name == "topology") {
    draft.format = SourceFormat::kHwlocXml;
    Status valid = detail::checkHwlocXml(*doc);
    if (!valid.isOk()) return PEERLAB_INVALID_ARGUMENT(name + ": invalid hwloc topology: " + valid.message());
    PEERLAB_ASSIGN_OR_RETURN(HwlocTopology hw, loadHwlocXml(text, name));
    Status st = detail::fromHwloc(std::make_shared<HwlocTopology>(std::move(hw)), draft);
    if (!st.isOk()) return PEERLAB_INVALID_ARGUMENT(name + ": " + st.message());
  } else if (doc->name == "system") {
    draft.format = SourceFormat::kNcclXml;
    Status st = detail::fromNcclXml(*doc, draft);
    if (!st.isOk()) return PEERLAB_INVALID_ARGUMENT(name + ": " + st.message());
  } else {
    return PEERLAB_INVALID_ARGUMENT(name + ": not a topology file: the root element is <" + doc->name +
                                    ">, expected <topology> (hwloc XML) or <system> (NCCL topology XML)");
  }
  return detail::makeTopology(detail::finish(std::move(draft)));
}

}  // namespace

StatusOr<Topology> loadFile(const std::string& path) {
  StatusOr<Topology> topo = loadFileUnchecked(path);
  if (topo.isOk()) return topo;
  // Every reason quotes its input escaped; this keeps the one-line promise for any reason that does not.
  const Status& st = topo.status();
  return Status(st.code(), printable(st.message()), st.file(), st.line());
}

StatusOr<Topology> loadLive(const LiveOptions& options) {
  PEERLAB_ASSIGN_OR_RETURN(HwlocTopology hw, loadHwlocLive());
  detail::Draft draft;
  draft.source = "live";
  draft.format = SourceFormat::kLive;
  PEERLAB_RETURN_IF_ERROR(detail::fromHwloc(std::make_shared<HwlocTopology>(std::move(hw)), draft));
  detail::addSysfsPcieLinks(draft);
  // Without sysfs, hwloc's figure is the link as trained now, which a GPU lowers while it idles.
  for (Gpu& g : draft.gpus) {
    if (!g.pcie || g.pcie->source.rfind("sysfs", 0) == 0) continue;
    g.pcie->source += " (current link; lower while the GPU idles)";
    draft.warnings.push_back("GPU " + g.bus_id + ": no maximum PCIe link in sysfs; using the current one (" +
                             describePcieLink(*g.pcie) + ")");
  }
  bool cuda = options.cuda && detail::addCudaDevices(draft);
  // CUDA_VISIBLE_DEVICES names the GPUs this run is for (a job's allocation): the topology is theirs alone.
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (cuda && visible != nullptr && *visible != '\0') {
    const size_t all = draft.n();
    draft.keepGpus([](const Gpu& g) { return g.cuda_ordinal >= 0; });
    if (draft.n() < all) {
      draft.warnings.push_back("CUDA_VISIBLE_DEVICES=" + std::string(visible) + ": " + std::to_string(draft.n()) +
                               " of the machine's " + std::to_string(all) + " GPUs");
    }
  }
  if (options.nvml) detail::addNvmlLinks(draft);
  std::shared_ptr<detail::Data> data = detail::finish(std::move(draft));
  if (cuda) detail::addCudaP2p(*data);
  return detail::makeTopology(std::move(data));
}

StatusOr<Topology> load(const std::string& fixture) {
  return fixture.empty() ? loadLive() : loadFile(fixture);
}

}  // namespace peerlab::topology
