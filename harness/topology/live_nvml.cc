// Live machine, NVML side: active NVLinks per GPU, what each one ends at (a GPU or an NVSwitch) and the per-link
// rate. Built only with NVML (PEERLAB_HAVE_NVML).

#include <nvml.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "harness/topology/topology_internal.h"

namespace peerlab::topology::detail {
namespace {

std::string busIdOf(const nvmlPciInfo_t& pci) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%04x:%02x:%02x.0", pci.domain & 0xffffu, pci.bus, pci.device);
  return buf;
}

std::string nvmlError(const char* what, nvmlReturn_t r) {
  return std::string(what) + ": " + nvmlErrorString(r);
}

std::optional<double> fieldMBps(const nvmlFieldValue_t& v) {
  if (v.nvmlReturn != NVML_SUCCESS) return std::nullopt;
  double mbps = 0;
  switch (v.valueType) {
    case NVML_VALUE_TYPE_DOUBLE:
      mbps = v.value.dVal;
      break;
    case NVML_VALUE_TYPE_UNSIGNED_INT:
      mbps = v.value.uiVal;
      break;
    case NVML_VALUE_TYPE_UNSIGNED_LONG:
      mbps = static_cast<double>(v.value.ulVal);
      break;
    case NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
      mbps = static_cast<double>(v.value.ullVal);
      break;
    case NVML_VALUE_TYPE_SIGNED_LONG_LONG:
      mbps = static_cast<double>(v.value.sllVal);
      break;
    default:
      mbps = v.value.siVal;
      break;
  }
  if (mbps <= 0) return std::nullopt;
  return mbps;
}

struct NvmlGpu {
  nvmlDevice_t handle{};
  size_t draft_index = 0;
  std::vector<unsigned> active;  ///< active link numbers
  std::vector<int> to_gpu;       ///< per draft GPU: links that end at it
  int to_switch = 0;
  std::optional<double> rate_gbps;
};

// Rate of one link per direction: per-link speed fields, else the common speed, else the NVLink version.
std::optional<double> linkRate(const NvmlGpu& g) {
  if (g.active.empty()) return std::nullopt;
  std::vector<nvmlFieldValue_t> fields(g.active.size());
  for (size_t k = 0; k < g.active.size(); ++k) {
    fields[k] = {};
    fields[k].fieldId = NVML_FI_DEV_NVLINK_GET_SPEED;
    fields[k].scopeId = g.active[k];
  }
  std::optional<double> slowest;
  if (nvmlDeviceGetFieldValues(g.handle, static_cast<int>(fields.size()), fields.data()) == NVML_SUCCESS) {
    for (const auto& f : fields) {
      if (auto mbps = fieldMBps(f)) slowest = slowest ? std::min(*slowest, *mbps) : *mbps;
    }
  }
  if (!slowest) {
    nvmlFieldValue_t common{};
    common.fieldId = NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON;
    if (nvmlDeviceGetFieldValues(g.handle, 1, &common) == NVML_SUCCESS) slowest = fieldMBps(common);
  }
  if (slowest) return snapNvlinkRate(*slowest / 1000.0);
  unsigned version = 0;
  if (nvmlDeviceGetNvLinkVersion(g.handle, g.active.front(), &version) == NVML_SUCCESS) {
    return nvlinkRateForVersion(version);
  }
  return std::nullopt;
}

}  // namespace

void addNvmlLinks(Draft& draft) {
  nvmlReturn_t r = nvmlInit_v2();
  if (r != NVML_SUCCESS) {
    draft.warnings.push_back("NVML: " + nvmlError("nvmlInit", r) + "; NVLink unknown");
    return;
  }
  struct Shutdown {
    ~Shutdown() { nvmlShutdown(); }
  } shutdown;

  unsigned count = 0;
  r = nvmlDeviceGetCount_v2(&count);
  if (r != NVML_SUCCESS) {
    draft.warnings.push_back("NVML: " + nvmlError("nvmlDeviceGetCount", r) + "; NVLink unknown");
    return;
  }
  std::vector<NvmlGpu> gpus;
  for (unsigned k = 0; k < count; ++k) {
    NvmlGpu g;
    nvmlPciInfo_t pci{};
    if (nvmlDeviceGetHandleByIndex_v2(k, &g.handle) != NVML_SUCCESS ||
        nvmlDeviceGetPciInfo_v3(g.handle, &pci) != NVML_SUCCESS) {
      draft.warnings.push_back("NVML: cannot read device " + std::to_string(k));
      continue;
    }
    std::string bus = busIdOf(pci);
    size_t at = draft.n();
    for (size_t i = 0; i < draft.n(); ++i) {
      if (draft.gpus[i].bus_id == bus) at = i;
    }
    if (at == draft.n()) {
      // Neither hwloc nor CUDA (CUDA_VISIBLE_DEVICES) shows this GPU; list it all the same.
      Gpu gpu;
      gpu.bus_id = bus;
      char name[96] = {};
      if (nvmlDeviceGetName(g.handle, name, sizeof(name)) == NVML_SUCCESS) {
        gpu.model = name;
        gpu.model_source = "nvml";
      }
      draft.addGpu(std::move(gpu));
    }
    Gpu& gpu = draft.gpus[at];
    if (gpu.uuid.empty()) {
      char uuid[96] = {};
      if (nvmlDeviceGetUUID(g.handle, uuid, sizeof(uuid)) == NVML_SUCCESS) gpu.uuid = uuid;
    }
    g.draft_index = at;
    gpus.push_back(g);
  }

  std::set<std::string> switch_ids;
  for (NvmlGpu& g : gpus) {
    g.to_gpu.assign(draft.n(), 0);
    for (unsigned link = 0; link < NVML_NVLINK_MAX_LINKS; ++link) {
      nvmlEnableState_t active = NVML_FEATURE_DISABLED;
      if (nvmlDeviceGetNvLinkState(g.handle, link, &active) != NVML_SUCCESS || active != NVML_FEATURE_ENABLED) {
        continue;
      }
      g.active.push_back(link);
      nvmlIntNvLinkDeviceType_t type = NVML_NVLINK_DEVICE_TYPE_UNKNOWN;
      (void)nvmlDeviceGetNvLinkRemoteDeviceType(g.handle, link, &type);
      nvmlPciInfo_t remote{};
      bool have_remote = nvmlDeviceGetNvLinkRemotePciInfo_v2(g.handle, link, &remote) == NVML_SUCCESS;
      std::string remote_bus = have_remote ? busIdOf(remote) : "";
      size_t peer = draft.n();
      for (size_t i = 0; i < draft.n(); ++i) {
        if (have_remote && draft.gpus[i].bus_id == remote_bus) peer = i;
      }
      if (type == NVML_NVLINK_DEVICE_TYPE_SWITCH) {
        ++g.to_switch;
        switch_ids.insert(remote_bus);
      } else if (peer < draft.n() && peer != g.draft_index) {
        ++g.to_gpu[peer];
      } else if (type == NVML_NVLINK_DEVICE_TYPE_UNKNOWN && have_remote && (remote.pciDeviceId & 0xffffu) == 0x10de) {
        // Older drivers do not report the remote type: an NVIDIA device that is not one of the GPUs is a switch.
        ++g.to_switch;
        switch_ids.insert(remote_bus);
      }
    }
    g.rate_gbps = linkRate(g);
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
