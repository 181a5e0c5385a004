// Live machine, NVML side: active NVLinks per GPU, what each one ends at (a GPU or an NVSwitch) and the per-link
// rate. NVML is loaded at run time (harness/health/nvml.h).

#include <algorithm>
#include <cstdio>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "harness/health/nvml.h"
#include "harness/topology/topology_internal.h"

namespace peerlab::topology::detail {
namespace {

namespace nv = peerlab::health::nvml;

std::string nvmlError(const nv::Library& L, const char* what, nv::Return r) {
  return std::string(what) + ": " + L.errorString(r);
}

std::optional<double> fieldMBps(const nv::FieldValue& v) {
  double mbps = 0;
  if (!nv::fieldAsDouble(v, &mbps) || mbps <= 0) return std::nullopt;
  return mbps;
}

struct NvmlGpu {
  nv::Device handle{};
  size_t draft_index = 0;
  std::vector<unsigned> active;  ///< active link numbers
  std::vector<int> to_gpu;       ///< per draft GPU: links that end at it
  int to_switch = 0;
  std::optional<double> rate_gbps;
};

// Rate of one link per direction: per-link speed fields, else the common speed, else the NVLink version.
std::optional<double> linkRate(const nv::Library& L, const NvmlGpu& g) {
  if (g.active.empty()) return std::nullopt;
  std::optional<double> slowest;
  if (L.nvmlDeviceGetFieldValues) {
    std::vector<nv::FieldValue> fields(g.active.size());
    for (size_t k = 0; k < g.active.size(); ++k) {
      fields[k] = {};
      fields[k].fieldId = nv::kFieldNvlinkGetSpeed;
      fields[k].scopeId = g.active[k];
    }
    if (L.nvmlDeviceGetFieldValues(g.handle, static_cast<int>(fields.size()), fields.data()) == nv::kSuccess) {
      for (const auto& f : fields) {
        if (auto mbps = fieldMBps(f)) slowest = slowest ? std::min(*slowest, *mbps) : *mbps;
      }
    }
    if (!slowest) {
      nv::FieldValue common{};
      common.fieldId = nv::kFieldNvlinkSpeedCommon;
      if (L.nvmlDeviceGetFieldValues(g.handle, 1, &common) == nv::kSuccess) slowest = fieldMBps(common);
    }
  }
  if (slowest) return snapNvlinkRate(*slowest / 1000.0);
  unsigned version = 0;
  if (L.nvmlDeviceGetNvLinkVersion &&
      L.nvmlDeviceGetNvLinkVersion(g.handle, g.active.front(), &version) == nv::kSuccess) {
    return nvlinkRateForVersion(version);
  }
  return std::nullopt;
}

}  // namespace

void addNvmlLinks(Draft& draft) {
  auto lib = nv::Library::open();
  if (!lib.isOk()) {
    // Without NVML there is nothing to say unless GPUs are left without NVLink information.
    if (draft.n() > 0 && draft.nvlink_source.empty()) {
      draft.warnings.push_back(lib.status().message() + "; NVLink unknown");
    }
    return;
  }
  const nv::Library& L = **lib;
  if (!L.nvmlDeviceGetCount_v2 || !L.nvmlDeviceGetHandleByIndex_v2 || !L.nvmlDeviceGetPciInfo_v3 ||
      !L.nvmlDeviceGetNvLinkState) {
    draft.warnings.push_back("NVML: " + L.path() + " lacks the device or NVLink queries; NVLink unknown");
    return;
  }

  unsigned count = 0;
  nv::Return r = L.nvmlDeviceGetCount_v2(&count);
  if (r != nv::kSuccess) {
    draft.warnings.push_back("NVML: " + nvmlError(L, "nvmlDeviceGetCount", r) + "; NVLink unknown");
    return;
  }
  std::vector<NvmlGpu> gpus;
  for (unsigned k = 0; k < count; ++k) {
    NvmlGpu g;
    nv::PciInfo pci{};
    if (L.nvmlDeviceGetHandleByIndex_v2(k, &g.handle) != nv::kSuccess ||
        L.nvmlDeviceGetPciInfo_v3(g.handle, &pci) != nv::kSuccess) {
      draft.warnings.push_back("NVML: cannot read device " + std::to_string(k));
      continue;
    }
    std::string bus = nv::busIdOf(pci);
    size_t at = draft.n();
    for (size_t i = 0; i < draft.n(); ++i) {
      if (draft.gpus[i].bus_id == bus) at = i;
    }
    if (at == draft.n() && draft.closed) continue;  // a GPU outside CUDA_VISIBLE_DEVICES
    if (at == draft.n()) {
      // Neither hwloc nor CUDA (CUDA_VISIBLE_DEVICES) shows this GPU; list it all the same.
      Gpu gpu;
      gpu.bus_id = bus;
      char name[96] = {};
      if (L.nvmlDeviceGetName && L.nvmlDeviceGetName(g.handle, name, sizeof(name)) == nv::kSuccess) {
        gpu.model = name;
        gpu.model_source = "nvml";
      }
      draft.addGpu(std::move(gpu));
    }
    Gpu& gpu = draft.gpus[at];
    if (gpu.uuid.empty() && L.nvmlDeviceGetUUID) {
      char uuid[96] = {};
      if (L.nvmlDeviceGetUUID(g.handle, uuid, sizeof(uuid)) == nv::kSuccess) gpu.uuid = uuid;
    }
    g.draft_index = at;
    gpus.push_back(g);
  }

  std::set<std::string> switch_ids;
  for (NvmlGpu& g : gpus) {
    g.to_gpu.assign(draft.n(), 0);
    for (unsigned link = 0; link < nv::kNvlinkMaxLinks; ++link) {
      int active = nv::kFeatureDisabled;
      if (L.nvmlDeviceGetNvLinkState(g.handle, link, &active) != nv::kSuccess || active != nv::kFeatureEnabled) {
        continue;
      }
      g.active.push_back(link);
      int type = nv::kNvlinkDeviceUnknown;
      if (L.nvmlDeviceGetNvLinkRemoteDeviceType) (void)L.nvmlDeviceGetNvLinkRemoteDeviceType(g.handle, link, &type);
      nv::PciInfo remote{};
      bool have_remote = L.nvmlDeviceGetNvLinkRemotePciInfo_v2 &&
                         L.nvmlDeviceGetNvLinkRemotePciInfo_v2(g.handle, link, &remote) == nv::kSuccess;
      std::string remote_bus = have_remote ? nv::busIdOf(remote) : "";
      size_t peer = draft.n();
      for (size_t i = 0; i < draft.n(); ++i) {
        if (have_remote && draft.gpus[i].bus_id == remote_bus) peer = i;
      }
      if (type == nv::kNvlinkDeviceSwitch) {
        ++g.to_switch;
        switch_ids.insert(remote_bus);
      } else if (peer < draft.n() && peer != g.draft_index) {
        ++g.to_gpu[peer];
      } else if (type == nv::kNvlinkDeviceUnknown && have_remote && (remote.pciDeviceId & 0xffffu) == 0x10de) {
        // Older drivers do not report the remote type: an NVIDIA device that is not one of the GPUs is a switch.
        ++g.to_switch;
        switch_ids.insert(remote_bus);
      }
    }
    g.rate_gbps = linkRate(L, g);
  }

  draft.nvlink_source = "nvml";
  if (draft.nvswitches == 0) draft.nvswitches = static_cast<int>(switch_ids.size());
  std::vector<const NvmlGpu*> by_draft(draft.n(), nullptr);
  for (const NvmlGpu& g : gpus)
    by_draft[g.draft_index] = &g;
  for (size_t i = 0; i < draft.n(); ++i) {
    if (!by_draft[i]) continue;
    const NvmlGpu& gi = *by_draft[i];
    Gpu& gpu = draft.gpus[i];
    // Links to other GPUs, direct or through NVSwitches; links to a CPU (IBM NPU, ...) carry no peer traffic.
    int to_gpus = 0;
    for (int c : gi.to_gpu)
      to_gpus += c;
    gpu.nvlink_links = to_gpus + gi.to_switch;
    gpu.nvswitch_links = gi.to_switch;
    gpu.nvlink_link_gbps = gi.rate_gbps;
    for (size_t j = 0; j < draft.n(); ++j) {
      if (i == j || !by_draft[j]) continue;
      const NvmlGpu& gj = *by_draft[j];
      // Through NVSwitch every pair of switch-attached GPUs gets the links of the narrower side.
      int through = (gi.to_switch > 0 && gj.to_switch > 0) ? std::min(gi.to_switch, gj.to_switch) : 0;
      int links = gi.to_gpu[j] + through;
      LinkView& lv = draft.linkAt(i, j);
      lv.links = links;
      lv.nvswitch = through > 0;
      lv.gbps = std::nullopt;
      if (links > 0 && gi.rate_gbps && gj.rate_gbps) lv.gbps = links * std::min(*gi.rate_gbps, *gj.rate_gbps);
    }
  }
}

}  // namespace peerlab::topology::detail
