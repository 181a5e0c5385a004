#include <hwloc.h>
#include <strings.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "harness/process/contained.h"
#include "harness/topology/hwloc_topology.h"
#include "harness/topology/topology_internal.h"

namespace peerlab::topology {
namespace {

constexpr unsigned kNvidia = 0x10de;

std::string info(hwloc_obj_t obj, const char* name) {
  const char* v = hwloc_obj_get_info_by_name(obj, name);
  return v ? v : "";
}

// A plain decimal number (no sign, no spaces), nullopt when it is not one or exceeds 64 bits.
std::optional<uint64_t> parseUnsigned(const std::string& s) {
  if (s.empty() || s.size() > 20 || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), nullptr, 10);
  if (errno == ERANGE) return std::nullopt;
  return static_cast<uint64_t>(v);
}

bool isGpuClass(unsigned class_id) {
  return (class_id >> 8) == 0x03 || class_id == 0x1200;
}

// NVSwitches appear as NVIDIA PCI devices of class 0x0680 (bridge, other). hwloc's NVML backend also tags every
// NVLink peer switch with subtype "NVSwitch", which covers a switch whose config space reads back as zeros.
bool isNvSwitch(hwloc_obj_t obj) {
  if (obj->type != HWLOC_OBJ_PCI_DEVICE) return false;
  if (obj->subtype && std::strcmp(obj->subtype, "NVSwitch") == 0) return true;
  return obj->attr->pcidev.vendor_id == kNvidia && obj->attr->pcidev.class_id == 0x0680;
}

std::string busIdOf(hwloc_obj_t obj) {
  const auto& p = obj->attr->pcidev;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%04x:%02x:%02x.%x", p.domain, p.bus, p.dev, p.func);
  return buf;
}

std::string bitmapList(hwloc_const_bitmap_t set) {
  if (!set) return "";
  char* s = nullptr;
  if (hwloc_bitmap_list_asprintf(&s, set) < 0 || !s) return "";
  std::string out = s;
  std::free(s);
  return out;
}

std::vector<int> bitmapIndexes(hwloc_const_bitmap_t set) {
  std::vector<int> out;
  if (!set || hwloc_bitmap_weight(set) < 0) return out;
  for (int i = hwloc_bitmap_first(set); i >= 0; i = hwloc_bitmap_next(set, i))
    out.push_back(i);
  return out;
}

// GPU model from the OS devices hwloc attached under the GPU: CUDA, then NVML, then OpenCL, then any other.
bool modelFromOsDevices(hwloc_obj_t pci, std::string& model, std::string& source) {
  static const char* kPrefixes[] = {"cuda", "nvml", "opencl"};
  for (const char* prefix : kPrefixes) {
    for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling) {
      if (c->type != HWLOC_OBJ_OS_DEVICE || !c->name) continue;
      if (std::strncmp(c->name, prefix, std::strlen(prefix)) != 0) continue;
      std::string m = info(c, "GPUModel");
      if (!m.empty()) {
        model = m;
        source = prefix;
        return true;
      }
    }
  }
  for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling) {
    if (c->type != HWLOC_OBJ_OS_DEVICE) continue;
    std::string m = info(c, "GPUModel");
    if (!m.empty()) {
      model = m;
      source = "osdev";
      return true;
    }
  }
  return false;
}

std::string otherModel(hwloc_obj_t pci) {
  std::string model, source;
  if (modelFromOsDevices(pci, model, source)) return model;
  std::string vendor = info(pci, "PCIVendor");
  std::string device = info(pci, "PCIDevice");
  if (!device.empty()) return vendor.empty() ? device : vendor + " " + device;
  return detail::modelFromIds(pci->attr->pcidev.vendor_id, pci->attr->pcidev.device_id);
}

std::vector<hwloc_obj_t> ancestors(hwloc_obj_t obj) {
  std::vector<hwloc_obj_t> chain;
  for (hwloc_obj_t p = obj; p; p = p->parent)
    chain.push_back(p);
  return chain;
}

bool isIo(hwloc_obj_t obj) {
  return obj->type == HWLOC_OBJ_BRIDGE || obj->type == HWLOC_OBJ_PCI_DEVICE || obj->type == HWLOC_OBJ_OS_DEVICE ||
         obj->type == HWLOC_OBJ_MISC;
}

// nvidia-smi's naming of the PCIe path between two PCI devices, read from hwloc's I/O tree.
PciPath pciPath(hwloc_topology_t topo, hwloc_obj_t a, hwloc_obj_t b) {
  if (a == b) return PciPath::kSelf;
  std::vector<hwloc_obj_t> ca = ancestors(a);
  std::vector<hwloc_obj_t> cb = ancestors(b);
  hwloc_obj_t lca = nullptr;
  size_t da = 0, db = 0;
  for (size_t i = 0; i < ca.size() && !lca; ++i) {
    auto it = std::find(cb.begin(), cb.end(), ca[i]);
    if (it != cb.end()) {
      lca = ca[i];
      da = i;
      db = static_cast<size_t>(it - cb.begin());
    }
  }
  if (!lca) return PciPath::kUnknown;
  if (isIo(lca)) {
    if (lca->type == HWLOC_OBJ_BRIDGE && lca->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST) {
      return PciPath::kPhb;
    }
    // Bridges strictly between each device and the common bridge. A PCIe switch is an upstream port with one
    // downstream port per slot, so two devices on one switch are each one downstream port below the common
    // upstream port.
    size_t between_a = da - 1;
    size_t between_b = db - 1;
    return (between_a <= 1 && between_b <= 1) ? PciPath::kPix : PciPath::kPxb;
  }
  // Different host bridges: within one NUMA node, or across the SMP interconnect.
  hwloc_obj_t na = hwloc_get_non_io_ancestor_obj(topo, a);
  hwloc_obj_t nb = hwloc_get_non_io_ancestor_obj(topo, b);
  if (na && nb && na->nodeset && nb->nodeset && hwloc_bitmap_isequal(na->nodeset, nb->nodeset) &&
      hwloc_bitmap_weight(na->nodeset) == 1) {
    return PciPath::kNode;
  }
  return PciPath::kSys;
}

// A name for an object of the NVLinkBandwidth matrix in messages: a GPU or switch by bus id, else its type.
std::string objectName(hwloc_obj_t o) {
  if (!o) return "?";
  if (o->type == HWLOC_OBJ_OS_DEVICE && o->parent && o->parent->type == HWLOC_OBJ_PCI_DEVICE) o = o->parent;
  if (o->type == HWLOC_OBJ_PCI_DEVICE) return busIdOf(o);
  return std::string(hwloc_obj_type_string(o->type)) + " " + std::to_string(o->logical_index);
}

// hwloc's NVLinkBandwidth matrix (MB/s per direction): GPUs (as NVML OS devices or PCI devices), NVSwitches and
// CPUs (POWER). hwloc adds 20000 per NVLink 1.0 link and 25000 per later link. Only links between GPUs, directly or
// through NVSwitches, count: a GPU's links to its CPU carry no GPU-to-GPU traffic. False when there is no matrix.
StatusOr<bool> addNvlinkDistances(hwloc_topology_t topo, const std::vector<hwloc_obj_t>& gpu_objs,
                                  detail::Draft& draft) {
  unsigned nr = 1;
  hwloc_distances_s* dist = nullptr;
  if (hwloc_distances_get_by_name(topo, "NVLinkBandwidth", &nr, &dist, 0) != 0 || nr == 0 || !dist) return false;
  struct Release {
    hwloc_topology_t topo;
    hwloc_distances_s* dist;
    ~Release() { hwloc_distances_release(topo, dist); }
  } release{topo, dist};
  const unsigned m = dist->nbobjs;
  std::vector<int> gpu_of(m, -1);
  std::vector<bool> is_switch(m, false);
  for (unsigned k = 0; k < m; ++k) {
    hwloc_obj_t o = dist->objs[k];
    if (o && o->type == HWLOC_OBJ_OS_DEVICE && o->parent && o->parent->type == HWLOC_OBJ_PCI_DEVICE) o = o->parent;
    if (!o) continue;
    auto it = std::find(gpu_objs.begin(), gpu_objs.end(), o);
    if (it != gpu_objs.end()) {
      gpu_of[k] = static_cast<int>(it - gpu_objs.begin());
    } else if (o->type == HWLOC_OBJ_PCI_DEVICE &&
               (isNvSwitch(o) || ((o->attr->pcidev.class_id >> 8) == 0x06 && o->attr->pcidev.vendor_id == kNvidia))) {
      is_switch[k] = true;
    }
  }
  auto value = [&](unsigned i, unsigned j) { return dist->values[static_cast<size_t>(i) * m + j]; };
  // Per-link rate: every off-diagonal value touching a GPU is a whole number of links. A value no machine can have
  // (more than kMaxNvlinks links of the fastest rate) is bad input, not a huge link count.
  bool all25 = true, all20 = true, any = false;
  for (unsigned i = 0; i < m; ++i) {
    for (unsigned j = 0; j < m; ++j) {
      if (i == j || value(i, j) == 0 || (gpu_of[i] < 0 && gpu_of[j] < 0)) continue;
      if (value(i, j) > detail::kMaxNvlinks * detail::kMaxNvlinkMBps) {
        return PEERLAB_INVALID_ARGUMENT("NVLinkBandwidth distance from " + objectName(dist->objs[i]) + " to " +
                                        objectName(dist->objs[j]) + " = " + std::to_string(value(i, j)) +
                                        " MB/s is outside 0 .. " +
                                        std::to_string(detail::kMaxNvlinks * detail::kMaxNvlinkMBps) + " (" +
                                        std::to_string(detail::kMaxNvlinks) + " links)");
      }
      any = true;
      all25 = all25 && value(i, j) % 25000 == 0;
      all20 = all20 && value(i, j) % 20000 == 0;
    }
  }
  std::optional<uint64_t> per_link;
  if (any && all25) {
    per_link = 25000;
  } else if (any && all20) {
    per_link = 20000;
  }
  const size_t n = draft.n();
  std::vector<uint64_t> to_switch(n, 0), to_gpus(n, 0);
  std::vector<int> row_of(n, -1);
  for (unsigned k = 0; k < m; ++k) {
    if (gpu_of[k] >= 0) row_of[gpu_of[k]] = static_cast<int>(k);
  }
  for (size_t g = 0; g < n; ++g) {
    if (row_of[g] < 0) continue;
    for (unsigned j = 0; j < m; ++j) {
      if (j == static_cast<unsigned>(row_of[g])) continue;
      if (is_switch[j]) to_switch[g] += value(row_of[g], j);
      if (gpu_of[j] >= 0) to_gpus[g] += value(row_of[g], j);
    }
  }
  for (size_t g = 0; g < n; ++g) {
    if (row_of[g] < 0) continue;
    Gpu& gpu = draft.gpus[g];
    if (per_link) {
      gpu.nvlink_links = static_cast<int>((to_gpus[g] + to_switch[g]) / *per_link);
      gpu.nvswitch_links = static_cast<int>(to_switch[g] / *per_link);
      gpu.nvlink_link_gbps = static_cast<double>(*per_link) / 1000.0;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      if (i == j || row_of[i] < 0 || row_of[j] < 0) continue;
      uint64_t direct = value(row_of[i], row_of[j]);
      // Every GPU attached to the NVSwitch fabric reaches every other one at the rate of the narrower side.
      uint64_t through = (to_switch[i] > 0 && to_switch[j] > 0) ? std::min(to_switch[i], to_switch[j]) : 0;
      uint64_t sum = direct + through;
      detail::LinkView& lv = draft.linkAt(i, j);
      lv.links = per_link ? std::optional<int>(static_cast<int>(sum / *per_link)) : std::nullopt;
      lv.gbps = sum > 0 ? std::optional<double>(static_cast<double>(sum) / 1000.0) : std::nullopt;
      lv.nvswitch = through > 0;
    }
  }
  draft.nvlink_source = "hwloc";
  return true;
}

// The GPU's PCIe link as hwloc reads it (GB/s per direction after encoding; 0 when unknown).
StatusOr<std::optional<PcieLink>> pcieLinkOf(hwloc_obj_t gpu) {
  const double gbps = gpu->attr->pcidev.linkspeed;
  if (!std::isfinite(gbps) || gbps < 0 || gbps > kMaxPcieGbps) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%g", gbps);
    return PEERLAB_INVALID_ARGUMENT("PCI device " + busIdOf(gpu) + ": pci_link_speed = " + buf +
                                    " GB/s is outside 0 .. " + std::to_string(static_cast<int>(kMaxPcieGbps)));
  }
  if (gbps == 0) return std::optional<PcieLink>();
  PcieLink link;
  // hwloc stores a float: 15.753846 for Gen3 x16; six decimals are what it wrote.
  link.gbps = std::round(gbps * 1e6) / 1e6;
  link.source = "hwloc pci_link_speed";
  return std::optional<PcieLink>(link);
}

}  // namespace

StatusOr<HwlocTopology> loadHwlocLive() {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) return PEERLAB_INTERNAL("hwloc_topology_init failed");
  HwlocTopology topo(raw);
  hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_ALL);
  // peerlab asks CUDA and NVML itself; hwloc's OpenCL and OpenGL discovery only cost time (and an unknown
  // component name is simply refused).
  for (const char* component : {"opencl", "gl", "levelzero"}) {
    (void)hwloc_topology_set_components(raw, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, component);
  }
  errno = 0;
  if (hwloc_topology_load(raw) != 0) {
    return PEERLAB_INTERNAL(std::string("hwloc could not discover this machine") +
                            (errno ? std::string(": ") + std::strerror(errno) : std::string()));
  }
  return topo;
}

namespace {

// How the child that tries an import first reports back (its exit status).
constexpr int kImportLoaded = 0;
constexpr int kImportRejected = 10;
constexpr int kImportUnreadable = 11;
// An import takes milliseconds (the DGX-2 export: about 3 ms); a hang is stopped long before a user wonders.
constexpr int64_t kImportDeadlineMs = 5000;

StatusOr<HwlocTopology> newXmlTopology() {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) return PEERLAB_INTERNAL("hwloc_topology_init failed");
  HwlocTopology topo(raw);
  hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_ALL);
  return topo;
}

// Imports `xml` into a fresh handle; kImportLoaded or why not.
int importXml(hwloc_topology_t raw, const std::string& xml) {
  // The size counts the terminating NUL.
  if (hwloc_topology_set_xmlbuffer(raw, xml.c_str(), static_cast<int>(xml.size() + 1)) != 0) {
    return kImportUnreadable;
  }
  // NOTE: without the check above a failed import would fall back to discovering this machine.
  return hwloc_topology_load(raw) == 0 ? kImportLoaded : kImportRejected;
}

Status importFailure(int code, const std::string& name) {
  if (code == kImportUnreadable) return PEERLAB_INVALID_ARGUMENT(name + ": hwloc cannot read this XML");
  return PEERLAB_INVALID_ARGUMENT(name + ": hwloc rejected this topology XML (not an hwloc 2.x export?)");
}

}  // namespace

StatusOr<HwlocTopology> loadHwlocXml(const std::string& xml, const std::string& name) {
  if (xml.size() >= static_cast<size_t>(INT_MAX)) return PEERLAB_INVALID_ARGUMENT(name + ": file too large");
  // hwloc's importer trusts its input (hwloc 2.9 dereferences NULL for an object without complete_cpuset), so a
  // disposable child imports the file first, into its copy of this handle; this process imports it only when that
  // worked. The handle is made before the fork so that the child does not load hwloc's plugins itself.
  PEERLAB_ASSIGN_OR_RETURN(HwlocTopology topo, newXmlTopology());
  hwloc_topology_t raw = topo.get();
  PEERLAB_ASSIGN_OR_RETURN(process::ContainedEnd end, process::runContained([&] { return importXml(raw, xml); },
                                                                            Deadline::afterMs(kImportDeadlineMs)));
  switch (end.kind) {
    case process::ContainedEnd::Kind::kExited:
      if (end.exit_code == kImportLoaded) break;
      if (end.exit_code == kImportRejected || end.exit_code == kImportUnreadable) {
        return importFailure(end.exit_code, name);
      }
      return PEERLAB_INVALID_ARGUMENT(name + ": hwloc could not parse this file (its loader " + end.describe() + ")");
    case process::ContainedEnd::Kind::kSignaled:
      return PEERLAB_INVALID_ARGUMENT(name + ": hwloc could not parse this file (" + end.describe() +
                                      " while loading)");
    case process::ContainedEnd::Kind::kTimedOut:
      return PEERLAB_INVALID_ARGUMENT(name + ": hwloc did not finish loading this file within " +
                                      std::to_string(kImportDeadlineMs) + " ms (stopped)");
  }
  if (int code = importXml(raw, xml); code != kImportLoaded) return importFailure(code, name);
  return topo;
}

namespace detail {

Status checkHwlocXml(const XmlElement& root) {
  auto at = [](const XmlElement& el) { return "line " + std::to_string(el.line) + ": "; };
  // hwloc2.dtd: <topology> holds the root <object> first, then distances, support, memory attributes, CPU kinds.
  if (root.children.empty() || root.children.front().name != "object") {
    return PEERLAB_INVALID_ARGUMENT(at(root) + "<topology> does not start with its root <object>");
  }
  // The root object is always a Machine (hwloc.h; "System" in hwloc 1.x files). hwloc 2.9 crashes on a NUMANode.
  const XmlElement& top = root.children.front();
  if (const std::string* type = top.attribute("type")) {
    if (strcasecmp(type->c_str(), "Machine") != 0 && strcasecmp(type->c_str(), "System") != 0) {
      return PEERLAB_INVALID_ARGUMENT(at(top) + "the root <object> is a " + printable(*type, kQuoteLimit) +
                                      ", not a Machine");
    }
  }
  std::vector<const XmlElement*> todo{&root};
  while (!todo.empty()) {
    const XmlElement& el = *todo.back();
    todo.pop_back();
    for (auto c = el.children.rbegin(); c != el.children.rend(); ++c)
      todo.push_back(&*c);
    if (el.name != "object") continue;
    // The type is a required attribute, and hwloc's importer reads it before any other.
    const std::string* type = el.attribute("type");
    if (type == nullptr) return PEERLAB_INVALID_ARGUMENT(at(el) + "<object> without a type attribute");
    if (el.attributes.front().first != "type") {
      return PEERLAB_INVALID_ARGUMENT(at(el) + "<object type=\"" + printable(*type, kQuoteLimit) + "\"> has '" +
                                      el.attributes.front().first + "' before its type (hwloc reads the type first)");
    }
    // hwloc writes each set together with its complete_ counterpart and its importer assumes the pair (hwloc 2.9
    // crashes on a cpuset without complete_cpuset).
    for (const auto& [set, complete] : {std::pair<const char*, const char*>{"cpuset", "complete_cpuset"},
                                        std::pair<const char*, const char*>{"nodeset", "complete_nodeset"}}) {
      const bool has_set = el.attribute(set) != nullptr;
      if (has_set == (el.attribute(complete) != nullptr)) continue;
      return PEERLAB_INVALID_ARGUMENT(at(el) + "<object type=\"" + printable(*type, kQuoteLimit) + "\"> has " +
                                      (has_set ? set : complete) + " but no " + (has_set ? complete : set) +
                                      " (hwloc writes both)");
    }
    // hwloc reads these with strtoul/atof into narrower types: an out-of-range value would load as another one.
    auto outside = [&](const char* attr, const std::string& value, const std::string& range) {
      return PEERLAB_INVALID_ARGUMENT(at(el) + "<object type=\"" + printable(*type, kQuoteLimit) + "\"> attribute " +
                                      attr + " = \"" + printable(value, kQuoteLimit) + "\" is outside " + range);
    };
    if (const std::string* os = el.attribute("os_index")) {
      const bool numa = strcasecmp(type->c_str(), "NUMANode") == 0;
      const uint64_t most = numa ? static_cast<uint64_t>(kMaxNumaId) : UINT32_MAX;
      auto v = parseUnsigned(*os);
      // (unsigned)-1 is hwloc's "unknown index".
      if (!v || (*v > most && *v != UINT32_MAX)) return outside("os_index", *os, "0 .. " + std::to_string(most));
    }
    if (const std::string* speed = el.attribute("pci_link_speed")) {
      char* end = nullptr;
      const double v = std::strtod(speed->c_str(), &end);
      if (speed->empty() || *end != '\0' || !std::isfinite(v) || v < 0 || v > kMaxPcieGbps) {
        return outside("pci_link_speed", *speed, "0 .. " + std::to_string(static_cast<int>(kMaxPcieGbps)) + " GB/s");
      }
    }
  }
  return Status::ok();
}

bool hwlocRecordsNvlink(const std::string& version) {
  int major = 0, minor = 0;
  if (std::sscanf(version.c_str(), "%d.%d", &major, &minor) != 2) return false;
  return major > 2 || (major == 2 && minor >= 5);
}

Status fromHwloc(std::shared_ptr<HwlocTopology> owned, Draft& draft) {
  hwloc_topology_t topo = owned->get();
  MachineSummary& m = draft.machine;
  m.packages = std::max(0, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE));
  m.numa_nodes = std::max(0, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE));
  m.cores = std::max(0, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE));
  m.pus = std::max(0, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU));
  m.pci_bridges = std::max(0, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_BRIDGE));
  m.description = info(hwloc_get_root_obj(topo), "DMIProductName");

  std::vector<hwloc_obj_t> gpu_objs;
  std::vector<hwloc_obj_t> others;
  int switches = 0;
  for (hwloc_obj_t o = hwloc_get_next_pcidev(topo, nullptr); o; o = hwloc_get_next_pcidev(topo, o)) {
    ++m.pci_devices;
    if (isNvSwitch(o)) {
      ++switches;
      continue;
    }
    if (!isGpuClass(o->attr->pcidev.class_id)) continue;
    (o->attr->pcidev.vendor_id == kNvidia ? gpu_objs : others).push_back(o);
  }
  draft.nvswitches = switches;
  for (hwloc_obj_t o : others)
    draft.other_gpus.push_back({busIdOf(o), otherModel(o)});
  std::sort(draft.other_gpus.begin(), draft.other_gpus.end(),
            [](const OtherGpu& x, const OtherGpu& y) { return busOrderKey(x.bus_id) < busOrderKey(y.bus_id); });

  std::vector<Gpu> gpus;
  for (hwloc_obj_t o : gpu_objs) {
    Gpu g;
    g.bus_id = busIdOf(o);
    g.vendor_id = o->attr->pcidev.vendor_id;
    g.device_id = o->attr->pcidev.device_id;
    modelFromOsDevices(o, g.model, g.model_source);
    hwloc_obj_t local = hwloc_get_non_io_ancestor_obj(topo, o);
    if (local) {
      g.numa = bitmapIndexes(local->nodeset);
      g.cpuset = bitmapList(local->cpuset);
    }
    for (int node : g.numa) {
      if (node > kMaxNumaId) {
        return PEERLAB_INVALID_ARGUMENT("GPU " + g.bus_id + ": NUMA node " + std::to_string(node) +
                                        " (nodeset) is outside 0 .. " + std::to_string(kMaxNumaId));
      }
    }
    PEERLAB_ASSIGN_OR_RETURN(g.pcie, pcieLinkOf(o));
    gpus.push_back(std::move(g));
  }

  // GPU OS devices that hwloc could not attach to their GPU (seen in VMs, where OpenCL reports no usable PCI
  // address): when one backend lists exactly as many of them as GPUs lack a model, and they all name the same
  // model, that model is every such GPU's.
  size_t missing = std::count_if(gpus.begin(), gpus.end(), [](const Gpu& g) { return g.model.empty(); });
  if (missing > 0) {
    std::map<std::string, std::vector<std::string>> unplaced;
    for (hwloc_obj_t o = hwloc_get_next_osdev(topo, nullptr); o; o = hwloc_get_next_osdev(topo, o)) {
      if (info(o, "GPUVendor").find("NVIDIA") == std::string::npos) continue;
      if (std::find(gpu_objs.begin(), gpu_objs.end(), o->parent) != gpu_objs.end()) continue;
      std::string backend = info(o, "Backend");
      unplaced[backend.empty() ? "?" : backend].push_back(info(o, "GPUModel"));
    }
    for (const auto& entry : unplaced) {
      const std::vector<std::string>& models = entry.second;
      bool same = std::all_of(models.begin(), models.end(), [&](const std::string& s) { return s == models[0]; });
      if (models.size() == missing && same && !models[0].empty()) {
        for (Gpu& g : gpus) {
          if (!g.model.empty()) continue;
          g.model = models[0];
          g.model_source = "osdev-unplaced";
        }
        break;
      }
    }
  }
  for (size_t k = 0; k < gpus.size(); ++k) {
    Gpu& g = gpus[k];
    if (!g.model.empty()) continue;
    std::string device = info(gpu_objs[k], "PCIDevice");
    if (!device.empty()) {
      g.model = device;
      g.model_source = "pci-name";
    } else {
      g.model = modelFromIds(g.vendor_id, g.device_id);
      g.model_source = "pci-id";
    }
  }

  const size_t n = gpus.size();
  draft.gpus = std::move(gpus);
  draft.pci.assign(n * n, PciPath::kUnknown);
  draft.links.assign(n * n, LinkView{});
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j)
      draft.pciAt(i, j) = pciPath(topo, gpu_objs[i], gpu_objs[j]);
  }
  PEERLAB_ASSIGN_OR_RETURN(bool have_matrix, addNvlinkDistances(topo, gpu_objs, draft));
  if (!have_matrix) {
    // hwloc's NVML backend (from hwloc 2.5) adds the matrix only when it found active links: NVML OS devices without
    // the matrix mean no NVLink, in an export by a hwloc that could have written it. Older exports cannot record
    // NVLink at all: their links stay unknown.
    bool nvml = false;
    for (hwloc_obj_t o : gpu_objs) {
      for (hwloc_obj_t c = o->io_first_child; c; c = c->next_sibling) {
        nvml = nvml || (c->type == HWLOC_OBJ_OS_DEVICE && c->name && std::strncmp(c->name, "nvml", 4) == 0);
      }
    }
    const std::string exporter = info(hwloc_get_root_obj(topo), "hwlocVersion");
    if (nvml && !hwlocRecordsNvlink(exporter)) {
      draft.warnings.push_back("exported by hwloc " +
                               (exporter.empty() ? std::string("of unknown version") : exporter) +
                               ", which cannot record NVLink (hwloc >= 2.5 can): NVLink unknown");
      nvml = false;
    }
    if (nvml) {
      draft.nvlink_source = "hwloc";
      for (size_t i = 0; i < n; ++i) {
        draft.gpus[i].nvlink_links = 0;
        for (size_t j = 0; j < n; ++j) {
          if (i != j) draft.linkAt(i, j).links = 0;
        }
      }
    }
  }
  draft.hwloc = std::move(owned);
  return Status::ok();
}

}  // namespace detail
}  // namespace peerlab::topology
