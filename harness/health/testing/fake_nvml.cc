// A stand-in libnvidia-ml for health tests and fault injection. It exports the NVML entry points peerlab reads and
// answers from a scenario named by $PEERLAB_FAKE_NVML:
//   a preset (healthy, pcie_downtrain, pcie_replays, nvlink_down, nvlink_crc, ecc_dbe, sram_parity,
//   row_remap_pending, retired_pending, xid, thermal, fabric_incomplete, missing_function), several joined by '+',
//   or a JSON file with the same keys as the presets below (a path ending in .json);
//   prefixed "wrap:" it dlopens the real library ($PEERLAB_FAKE_NVML_REAL, else libnvidia-ml.so.1), forwards every
//   call and alters only what the scenario names, for a real qualify run with a fault injected.
// Faults apply to one GPU ("fault_gpu", default 0); the others stay healthy. Counters that the scenario makes rise
// do so per read (PCIe replays) or with time (NVLink CRC), so a sample before and one after see a difference.
// Built twice: libpeerlab_fake_nvml.so, and with PEERLAB_FAKE_NVML_MINIMAL a library that lacks some entry points
// (an old driver). A copy of the stand-in loaded as the "real" library of a wrapping one reads its scenario from
// $PEERLAB_FAKE_NVML_INNER instead, so that wrap mode itself can be tested without a GPU.

#include <dlfcn.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness/health/nvml.h"

using namespace peerlab::health::nvml;  // NOLINT: the NVML types
using nlohmann::json;

namespace {

constexpr int kMaxGpus = 8;

struct Scenario {
  bool wrap = false;
  int gpus = 2;
  int fault_gpu = 0;
  std::optional<unsigned> gen, width, max_gen, max_width;
  unsigned replay_step = 0;
  int nvlinks = 18;                             // links per GPU in the stand-in (0: no NVLink)
  unsigned nvlink_version = kNvlinkVersion4_0;  // nvmlNvlinkVersion_t
  std::vector<unsigned> links_down;
  double crc_per_s = 0;
  unsigned recovery_step = 0;
  std::optional<int> fabric_state;  // 0 not supported, 1 not started, 2 in progress, 3 completed
  std::optional<unsigned> fabric_mask;
  bool ecc_enabled = true;
  unsigned long long vol_unc = 0, vol_cor = 0, agg_unc = 0, agg_cor = 0;
  unsigned long long sram_sm_parity = 0;
  std::optional<bool> retired_supported;
  unsigned retired_sbe = 0, retired_dbe = 0;
  bool retired_pending = false;
  unsigned remap_cor = 0, remap_unc = 0;
  bool remap_pending = false, remap_failed = false;
  unsigned long long xid = 0;
  int xid_after_waits = 3;
  unsigned long long clock_reasons = 0;
  std::vector<std::string> missing;
};

std::mutex g_mu;
Scenario g_s;
std::chrono::steady_clock::time_point g_t0;
std::atomic<unsigned long long> g_replay_reads[kMaxGpus];
std::atomic<int> g_waits{0};
std::atomic<bool> g_xid_sent{false};
std::map<Device, int> g_real_index;
void* g_real = nullptr;
std::string g_real_path;

struct FakeDevice {
  int index;
};
FakeDevice g_devices[kMaxGpus] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};

json preset(const std::string& name) {
  if (name == "healthy" || name.empty()) return json::object();
  if (name == "pcie_downtrain") return {{"pcie", {{"gen", 3}, {"width", 8}}}};
  if (name == "pcie_replays") return {{"pcie_replay_step", 100}};
  if (name == "nvlink_down") return {{"nvlink_down", {3}}};
  if (name == "nvlink_crc") return {{"nvlink_crc_per_s", 5000}};
  if (name == "nvlink_recovery") return {{"nvlink_recovery_step", 1}};
  if (name == "ecc_dbe") return {{"ecc", {{"vol_unc", 2}, {"agg_unc", 2}}}};
  if (name == "sram_parity") return {{"ecc", {{"agg_unc", 1}, {"sram_sm_parity", 1}}}};
  if (name == "row_remap_pending") return {{"remap", {{"pending", true}, {"unc", 1}}}};
  if (name == "retired_pending") return {{"retired", {{"supported", true}, {"dbe", 1}, {"pending", true}}}};
  if (name == "xid") return {{"xid", {{"code", 79}, {"after_waits", 3}}}};
  if (name == "thermal") return {{"clock_reasons", 0x20 | 0x40}};
  if (name == "fabric_incomplete") return {{"fabric", {{"state", 2}}}};
  if (name == "missing_function")
    return {{"missing", {"nvmlDeviceGetRemappedRows", "nvmlDeviceGetGpuFabricInfoV", "nvmlEventSetWait_v2"}}};
  return {{"unknown_preset", name}};
}

void applyScenario(Scenario& s, const json& j) {
  if (j.contains("unknown_preset")) {
    std::fprintf(stderr, "fake NVML: unknown scenario %s\n", j["unknown_preset"].get<std::string>().c_str());
    return;
  }
  if (j.contains("gpus")) s.gpus = std::min(j["gpus"].get<int>(), kMaxGpus);
  if (j.contains("fault_gpu")) s.fault_gpu = j["fault_gpu"].get<int>();
  if (j.contains("pcie")) {
    const json& p = j["pcie"];
    if (p.contains("gen")) s.gen = p["gen"].get<unsigned>();
    if (p.contains("width")) s.width = p["width"].get<unsigned>();
    if (p.contains("max_gen")) s.max_gen = p["max_gen"].get<unsigned>();
    if (p.contains("max_width")) s.max_width = p["max_width"].get<unsigned>();
  }
  if (j.contains("pcie_replay_step")) s.replay_step = j["pcie_replay_step"].get<unsigned>();
  if (j.contains("nvlinks")) s.nvlinks = j["nvlinks"].get<int>();
  if (j.contains("nvlink_version")) s.nvlink_version = j["nvlink_version"].get<unsigned>();
  if (j.contains("nvlink_down")) s.links_down = j["nvlink_down"].get<std::vector<unsigned>>();
  if (j.contains("nvlink_crc_per_s")) s.crc_per_s = j["nvlink_crc_per_s"].get<double>();
  if (j.contains("nvlink_recovery_step")) s.recovery_step = j["nvlink_recovery_step"].get<unsigned>();
  if (j.contains("fabric")) {
    if (j["fabric"].contains("state")) s.fabric_state = j["fabric"]["state"].get<int>();
    if (j["fabric"].contains("health_mask")) s.fabric_mask = j["fabric"]["health_mask"].get<unsigned>();
  }
  if (j.contains("ecc")) {
    const json& e = j["ecc"];
    if (e.contains("enabled")) s.ecc_enabled = e["enabled"].get<bool>();
    if (e.contains("vol_unc")) s.vol_unc = e["vol_unc"].get<unsigned long long>();
    if (e.contains("vol_cor")) s.vol_cor = e["vol_cor"].get<unsigned long long>();
    if (e.contains("agg_unc")) s.agg_unc = e["agg_unc"].get<unsigned long long>();
    if (e.contains("agg_cor")) s.agg_cor = e["agg_cor"].get<unsigned long long>();
    if (e.contains("sram_sm_parity")) s.sram_sm_parity = e["sram_sm_parity"].get<unsigned long long>();
  }
  if (j.contains("retired")) {
    const json& r = j["retired"];
    if (r.contains("supported")) s.retired_supported = r["supported"].get<bool>();
    if (r.contains("sbe")) s.retired_sbe = r["sbe"].get<unsigned>();
    if (r.contains("dbe")) s.retired_dbe = r["dbe"].get<unsigned>();
    if (r.contains("pending")) s.retired_pending = r["pending"].get<bool>();
  }
  if (j.contains("remap")) {
    const json& r = j["remap"];
    if (r.contains("cor")) s.remap_cor = r["cor"].get<unsigned>();
    if (r.contains("unc")) s.remap_unc = r["unc"].get<unsigned>();
    if (r.contains("pending")) s.remap_pending = r["pending"].get<bool>();
    if (r.contains("failed")) s.remap_failed = r["failed"].get<bool>();
  }
  if (j.contains("xid")) {
    s.xid = j["xid"].value("code", 79ull);
    s.xid_after_waits = j["xid"].value("after_waits", 3);
  }
  if (j.contains("clock_reasons")) s.clock_reasons = j["clock_reasons"].get<unsigned long long>();
  if (j.contains("missing")) {
    for (const auto& m : j["missing"])
      s.missing.push_back(m.get<std::string>());
  }
}

// True in the instance a wrapping stand-in loaded as its "real" library ($PEERLAB_FAKE_NVML_REAL is this file).
bool isInner() {
  const char* real = std::getenv("PEERLAB_FAKE_NVML_REAL");
  Dl_info info{};
  if (!real || !*real || !::dladdr(reinterpret_cast<void*>(&isInner), &info) || !info.dli_fname) return false;
  char a[4096], b[4096];
  return ::realpath(real, a) && ::realpath(info.dli_fname, b) && std::strcmp(a, b) == 0;
}

Scenario load() {
  Scenario s;
  const char* env = std::getenv(isInner() ? "PEERLAB_FAKE_NVML_INNER" : "PEERLAB_FAKE_NVML");
  std::string spec = env ? env : "";
  if (spec.rfind("wrap:", 0) == 0) {
    s.wrap = true;
    spec = spec.substr(5);
  }
  try {
    if (spec.size() > 5 && spec.substr(spec.size() - 5) == ".json") {
      std::ifstream f(spec);
      std::stringstream ss;
      ss << f.rdbuf();
      applyScenario(s, json::parse(ss.str()));
    } else {
      std::stringstream ss(spec);
      std::string part;
      while (std::getline(ss, part, '+'))
        applyScenario(s, preset(part));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fake NVML: bad scenario %s: %s\n", spec.c_str(), e.what());
  }
  return s;
}

Scenario scenario() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_s;
}

bool isMissing(const Scenario& s, const char* fn) {
  for (const std::string& m : s.missing)
    if (m == fn) return true;
  return false;
}

void* realSym(const char* name) {
  if (!g_real) return nullptr;
  return ::dlsym(g_real, name);
}

// Index of a device handle: ours, or a real one seen through nvmlDeviceGetHandleByIndex_v2.
int indexOf(const Scenario& s, Device d) {
  if (!s.wrap) {
    for (int i = 0; i < kMaxGpus; ++i)
      if (d == reinterpret_cast<Device>(&g_devices[i])) return i;
    return -1;
  }
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_real_index.find(d);
  return it == g_real_index.end() ? -1 : it->second;
}

bool faulty(const Scenario& s, Device d) {
  return indexOf(s, d) == s.fault_gpu;
}

bool validDevice(const Scenario& s, Device d) {
  const int i = indexOf(s, d);
  return s.wrap ? true : (i >= 0 && i < s.gpus);
}

double elapsedS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - g_t0).count();
}

}  // namespace

// In wrap mode: call the real function (function-not-found when it lacks it) and return its answer unless it worked.
#define PEERLAB_FAKE_FORWARD(name, ...)                          \
  if (s.wrap) {                                                  \
    auto fn = reinterpret_cast<decltype(&name)>(realSym(#name)); \
    if (!fn) return kErrorFunctionNotFound;                      \
    Return r = fn(__VA_ARGS__);                                  \
    if (r != kSuccess) return r;                                 \
  }
#define PEERLAB_FAKE_PROLOGUE(name) \
  const Scenario s = scenario();    \
  if (isMissing(s, #name)) return kErrorFunctionNotFound;

extern "C" {

// What peerlab looks up to know the NVML it loaded is this stand-in (report::detectInjection): its runs are marked.
__attribute__((visibility("default"))) extern const char peerlab_standin_nvml[];
const char peerlab_standin_nvml[] = "peerlab stand-in NVML";

Return nvmlInit_v2(void) {
  Scenario s = load();
  if (s.wrap) {
    const char* env = std::getenv("PEERLAB_FAKE_NVML_REAL");
    const std::string real = env && *env ? env : "libnvidia-ml.so.1";
    if (real != g_real_path) {
      // The library named now (tests change it between inits); the previous one stays mapped.
      g_real = ::dlopen(real.c_str(), RTLD_NOW | RTLD_LOCAL);
      g_real_path = g_real ? real : "";
    }
    if (!g_real) return kErrorDriverNotLoaded;
    auto init = reinterpret_cast<Return (*)()>(::dlsym(g_real, "nvmlInit_v2"));
    if (!init) return kErrorFunctionNotFound;
    if (Return r = init(); r != kSuccess) return r;
  }
  std::lock_guard<std::mutex> lock(g_mu);
  g_s = s;
  g_t0 = std::chrono::steady_clock::now();
  for (auto& c : g_replay_reads)
    c = 0;
  g_waits = 0;
  g_xid_sent = false;
  return kSuccess;
}

Return nvmlShutdown(void) {
  const Scenario s = scenario();
  if (s.wrap) {
    auto fn = reinterpret_cast<Return (*)()>(realSym("nvmlShutdown"));
    if (fn) return fn();
  }
  return kSuccess;
}

const char* nvmlErrorString(Return r) {
  switch (r) {
    case kSuccess:
      return "Success";
    case kErrorNotSupported:
      return "Not Supported";
    case kErrorFunctionNotFound:
      return "Function Not Found";
    case kErrorTimeout:
      return "Timeout";
    case kErrorInvalidArgument:
      return "Invalid Argument";
    default:
      return "Unknown Error";
  }
}

Return nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  PEERLAB_FAKE_PROLOGUE(nvmlSystemGetDriverVersion)
  PEERLAB_FAKE_FORWARD(nvmlSystemGetDriverVersion, version, length)
  if (!s.wrap) std::snprintf(version, length, "999.99");
  return kSuccess;
}

Return nvmlDeviceGetCount_v2(unsigned int* count) {
  PEERLAB_FAKE_PROLOGUE(nvmlDeviceGetCount_v2)
  PEERLAB_FAKE_FORWARD(nvmlDeviceGetCount_v2, count)
  if (!s.wrap) *count = static_cast<unsigned>(s.gpus);
  return kSuccess;
}

Return nvmlDeviceGetHandleByIndex_v2(unsigned int index, Device* device) {
  PEERLAB_FAKE_PROLOGUE(nvmlDeviceGetHandleByIndex_v2)
  PEERLAB_FAKE_FORWARD(nvmlDeviceGetHandleByIndex_v2, index, device)
  if (s.wrap) {
    std::lock_guard<std::mutex> lock(g_mu);
    g_real_index[*device] = static_cast<int>(index);
    return kSuccess;
  }
  if (index >= static_cast<unsigned>(s.gpus)) return kErrorInvalidArgument;
  *device = reinterpret_cast<Device>(&g_devices[index]);
  return kSuccess;
}

Return nvmlDeviceGetPciInfo_v3(Device device, PciInfo* pci);

Return nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, Device* device) {
  PEERLAB_FAKE_PROLOGUE(nvmlDeviceGetHandleByPciBusId_v2)
  PEERLAB_FAKE_FORWARD(nvmlDeviceGetHandleByPciBusId_v2, bus_id, device)
  if (s.wrap) return kSuccess;
  for (int i = 0; i < s.gpus; ++i) {
    PciInfo p{};
    nvmlDeviceGetPciInfo_v3(reinterpret_cast<Device>(&g_devices[i]), &p);
    if (strcasecmp(p.busId, bus_id) == 0) {
      *device = reinterpret_cast<Device>(&g_devices[i]);
      return kSuccess;
    }
  }
  return kErrorNotFound;
}

Return nvmlDeviceGetPciInfo_v3(Device device, PciInfo* pci) {
  PEERLAB_FAKE_PROLOGUE(nvmlDeviceGetPciInfo_v3)
  PEERLAB_FAKE_FORWARD(nvmlDeviceGetPciInfo_v3, device, pci)
  if (s.wrap) return kSuccess;
  if (!validDevice(s, device)) return kErrorInvalidArgument;
  const int i = indexOf(s, device);
  std::memset(pci, 0, sizeof(*pci));
  pci->domain = 0;
  pci->bus = 0x1b + 0x10 * static_cast<unsigned>(i);
  pci->pciDeviceId = 0x233010de;
  std::snprintf(pci->busId, sizeof(pci->busId), "00000000:%02X:00.0", pci->bus);
  std::snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "0000:%02X:00.0", pci->bus);
  return kSuccess;
}

Return nvmlDeviceGetName(Device device, char* name, unsigned int length) {
  PEERLAB_FAKE_PROLOGUE(nvmlDeviceGetName)
  PEERLAB_FAKE_FORWARD(nvmlDeviceGetName, device, name, length)
  if (!s.wrap) std::snprintf(name, length, "Stand-in GPU %d", indexOf(s, device));
  return kSuccess;
}

Return nvmlDeviceGetUUID(Device device, char* uuid, unsigned int length) {
  PEERLAB_FAKE_PROLOGUE(nvmlDeviceGetUUID)
  PEERLAB_FAKE_FORWARD(nvmlDeviceGetUUID, device, uuid, length)
  if (!s.wrap) std::snprintf(uuid, length, "GPU-00000000-0000-0000-0000-00000000000%d", indexOf(s, device));
  return kSuccess;
}

Return nvmlDeviceGetMinorNumber(Device device, unsigned int* minor) {
  PEERLAB_FAKE_PROLOGUE(nvmlDeviceGetMinorNumber)
  PEERLAB_FAKE_FORWARD(nvmlDeviceGetMinorNumber, device, minor)
  if (!s.wrap) *minor = static_cast<unsigned>(indexOf(s, device));
  return kSuccess;
}

Return nvmlDeviceGetFieldValues(Device device, int count, FieldValue* values) {
  PEERLAB_FAKE_PROLOGUE(nvmlDeviceGetFieldValues)
  PEERLAB_FAKE_FORWARD(nvmlDeviceGetFieldValues, device, count, values)
  if (s.wrap) return kSuccess;
  for (int k = 0; k < count; ++k) {
    FieldValue& v = values[k];
    v.valueType = kValueUnsignedLongLong;
    v.nvmlReturn = kSuccess;
    if (v.fieldId == kFieldPcieCorrectableErrors) {
      v.value.ullVal = 0;
    } else if ((v.fieldId == kFieldNvlinkGetSpeed || v.fieldId == kFieldNvlinkSpeedCommon) && s.nvlinks > 0) {
      v.valueType = kValueUnsignedInt;
      v.value.uiVal = 26562;
    } else {
      v.nvmlReturn = kErrorNotSupported;
    }
  }
  return kSuccess;
}

#define PEERLAB_FAKE_PCIE(name, field, healthy)                  \
  Return name(Device device, unsigned int* out) {                \
    PEERLAB_FAKE_PROLOGUE(name)                                  \
    PEERLAB_FAKE_FORWARD(name, device, out)                      \
    if (!s.wrap) {                                               \
      if (!validDevice(s, device)) return kErrorInvalidArgument; \
      *out = healthy;                                            \
    }                                                            \
    if (faulty(s, device) && s.field) *out = *s.field;           \
    return kSuccess;                                             \
  }
PEERLAB_FAKE_PCIE(nvmlDeviceGetCurrPcieLinkGeneration, gen, 5)
PEERLAB_FAKE_PCIE(nvmlDeviceGetCurrPcieLinkWidth, width, 16)
PEERLAB_FAKE_PCIE(nvmlDeviceGetMaxPcieLinkGeneration, max_gen, 5)
PEERLAB_FAKE_PCIE(nvmlDeviceGetMaxPcieLinkWidth, max_width, 16)
#undef PEERLAB_FAKE_PCIE

Return nvmlDeviceGetGpuMaxPcieLinkGeneration(Device device, unsigned int* gen) {
  PEERLAB_FAKE_PROLOGUE(nvmlDeviceGetGpuMaxPcieLinkGeneration)
  PEERLAB_FAKE_FORWARD(nvmlDeviceGetGpuMaxPcieLinkGeneration, device, gen)
  if (!s.wrap) *gen = 5;
  return kSuccess;
}

Return nvmlDeviceGetPcieReplayCounter(Device device, unsigned int* value) {
  PEERLAB_FAKE_PROLOGUE(nvmlDeviceGetPcieReplayCounter)
  PEERLAB_FAKE_FORWARD(nvmlDeviceGetPcieReplayCounter, device, value)
  if (!s.wrap) *value = 0;
  const int i = indexOf(s, device);
  if (faulty(s, device) && s.replay_step && i >= 0 && i < kMaxGpus) {
    *value += static_cast<unsigned>(s.replay_step * g_replay_reads[i]++);
  }
  return kSuccess;
}

namespace {
bool linkExists(const Scenario& s, unsigned link) {
  return static_cast<int>(link) < s.nvlinks;
}
bool linkDown(const Scenario& s, Device d, unsigned link) {
  if (!faulty(s, d)) return false;
  for (unsigned l : s.links_down)
    if (l == link) return true;
  return false;
}
}  // namespace

Return nvmlDeviceGetNvLinkState(Device device, unsigned int link, int* active) {
  PEERLAB_FAKE_PROLOGUE(nvmlDeviceGetNvLinkState)
  PEERLAB_FAKE_FORWARD(nvmlDeviceGetNvLinkState, device, link, active)
  if (!s.wrap) {
    if (!validDevice(s, device)) return kErrorInvalidArgument;
    if (s.nvlinks == 0) return kErrorNotSupported;
    if (!linkExists(s, link)) return kErrorInvalidArgument;
    *active = kFeatureEnabled;
  }
  if (linkDown(s, device, link)) *active = kFeatureDisabled;
  return kSuccess;
}

Return nvmlDeviceGetNvLinkVersion(Device device, unsigned int link, unsigned int* version) {
  PEERLAB_FAKE_PROLOGUE(nvmlDeviceGetNvLinkVersion)
  PEERLAB_FAKE_FORWARD(nvmlDeviceGetNvLinkVersion, device, link, version)
  if (!s.wrap) {
    if (s.nvlinks == 0) return kErrorNotSupported;
    if (!linkExists(s, link)) return kErrorInvalidArgument;
    // What a driver answers for the stand-in's Hopper-rate links (26.5625 GB/s): NVML_NVLINK_VERSION_4_0.
    *version = s.nvlink_version;
  }
  return kSuccess;
}

Return nvmlDeviceGetNvLinkRemoteDeviceType(Device device, unsigned int link, int* type) {
  PEERLAB_FAKE_PROLOGUE(nvmlDeviceGetNvLinkRemoteDeviceType)
  PEERLAB_FAKE_FORWARD(nvmlDeviceGetNvLinkRemoteDeviceType, device, link, type)
  if (!s.wrap) {
    if (s.nvlinks == 0) return kErrorNotSupported;
    *type = kNvlinkDeviceGpu;
  }
  return kSuccess;
}

Return nvmlDeviceGetNvLinkRemotePciInfo_v2(Device device, unsigned int link, PciInfo* pci) {
  PEERLAB_FAKE_PROLOGUE(nvmlDeviceGetNvLinkRemotePciInfo_v2)
  PEERLAB_FAKE_FORWARD(nvmlDeviceGetNvLinkRemotePciInfo_v2, device, link, pci)
  if (s.wrap) return kSuccess;
  if (s.nvlinks == 0) return kErrorNotSupported;
  // In the stand-in every GPU's links lead to the next GPU.
  const int peer = (indexOf(s, device) + 1) % s.gpus;
  return nvmlDeviceGetPciInfo_v3(reinterpret_cast<Device>(&g_devices[peer]), pci);
}

Return nvmlDeviceGetNvLinkErrorCounter(Device device, unsigned int link, int counter, unsigned long long* value) {
  PEERLAB_FAKE_PROLOGUE(nvmlDeviceGetNvLinkErrorCounter)
  PEERLAB_FAKE_FORWARD(nvmlDeviceGetNvLinkErrorCounter, device, link, counter, value)
  if (!s.wrap) {
    if (s.nvlinks == 0) return kErrorNotSupported;
    if (!linkExists(s, link)) return kErrorInvalidArgument;
    *value = 0;
  }
  if (faulty(s, device) && link == 0) {
    if (counter == kNvlinkErrorDlCrcFlit && s.crc_per_s > 0) {
      *value += static_cast<unsigned long long>(s.crc_per_s * elapsedS());
    }
    if (counter == kNvlinkErrorDlRecovery && s.recovery_step) {
      static std::atomic<unsigned long long> reads{0};
      *value += s.recovery_step * reads++;
    }
  }
  return kSuccess;
}

#ifndef PEERLAB_FAKE_NVML_MINIMAL
Return nvmlDeviceGetGpuFabricInfoV(Device device, GpuFabricInfo* info) {
  PEERLAB_FAKE_PROLOGUE(nvmlDeviceGetGpuFabricInfoV)
  if (s.wrap) {
    auto fn = reinterpret_cast<decltype(&nvmlDeviceGetGpuFabricInfoV)>(realSym("nvmlDeviceGetGpuFabricInfoV"));
    Return r = fn ? fn(device, info) : kErrorFunctionNotFound;
    // A fabric fault is injected even where the GPU is not a fabric member.
    if (r != kSuccess && !(faulty(s, device) && s.fabric_state)) return r;
    if (r != kSuccess) {
      info->status = kSuccess;
      info->healthMask = 0;
      info->cliqueId = 0;
    }
  } else {
    if (!validDevice(s, device)) return kErrorInvalidArgument;
    info->state = kFabricCompleted;
    info->status = kSuccess;
    info->cliqueId = 32766;
    info->healthMask = 0xaa;  // every health flag reads "false"
  }
  if (faulty(s, device)) {
    if (s.fabric_state) info->state = static_cast<unsigned char>(*s.fabric_state);
    if (s.fabric_mask) info->healthMask = *s.fabric_mask;
  }
  return kSuccess;
}
#endif

Return nvmlDeviceGetEccMode(Device device, int* current, int* pending) {
  PEERLAB_FAKE_PROLOGUE(nvmlDeviceGetEccMode)
  PEERLAB_FAKE_FORWARD(nvmlDeviceGetEccMode, device, current, pending)
  if (!s.wrap) *current = *pending = kFeatureEnabled;
  if (faulty(s, device) && !s.ecc_enabled) *current = *pending = kFeatureDisabled;
  return kSuccess;
}

Return nvmlDeviceGetTotalEccErrors(Device device, int type, int counter, unsigned long long* count) {
  PEERLAB_FAKE_PROLOGUE(nvmlDeviceGetTotalEccErrors)
  PEERLAB_FAKE_FORWARD(nvmlDeviceGetTotalEccErrors, device, type, counter, count)
  if (!s.wrap) *count = 0;
  if (faulty(s, device)) {
    const bool unc = type == kMemoryErrorUncorrected, vol = counter == kVolatileEcc;
    *count += unc ? (vol ? s.vol_unc : s.agg_unc) : (vol ? s.vol_cor : s.agg_cor);
  }
  return kSuccess;
}

Return nvmlDeviceGetMemoryErrorCounter(Device device, int type, int counter, int location, unsigned long long* count) {
  PEERLAB_FAKE_PROLOGUE(nvmlDeviceGetMemoryErrorCounter)
  PEERLAB_FAKE_FORWARD(nvmlDeviceGetMemoryErrorCounter, device, type, counter, location, count)
  if (!s.wrap) *count = 0;
  if (faulty(s, device) && type == kMemoryErrorUncorrected) {
    const unsigned long long total = counter == kVolatileEcc ? s.vol_unc : s.agg_unc;
    if (location == kLocationSram) *count += std::min(total, s.sram_sm_parity);
    if (location == kLocationDram) *count += total - std::min(total, s.sram_sm_parity);
  }
  return kSuccess;
}

#ifndef PEERLAB_FAKE_NVML_MINIMAL
Return nvmlDeviceGetSramEccErrorStatus(Device device, EccSramErrorStatus* status) {
  PEERLAB_FAKE_PROLOGUE(nvmlDeviceGetSramEccErrorStatus)
  PEERLAB_FAKE_FORWARD(nvmlDeviceGetSramEccErrorStatus, device, status)
  if (!s.wrap) {
    const unsigned version = status->version;
    std::memset(status, 0, sizeof(*status));
    status->version = version;
  }
  if (faulty(s, device) && s.sram_sm_parity) {
    status->aggregateUncParity += s.sram_sm_parity;
    status->aggregateUncBucketSm += s.sram_sm_parity;
  }
  return kSuccess;
}
#endif

Return nvmlDeviceGetRetiredPages(Device device, int cause, unsigned int* count, unsigned long long* addresses) {
  PEERLAB_FAKE_PROLOGUE(nvmlDeviceGetRetiredPages)
  if (!s.wrap && !(faulty(s, device) && s.retired_supported.value_or(false))) return kErrorNotSupported;
  PEERLAB_FAKE_FORWARD(nvmlDeviceGetRetiredPages, device, cause, count, addresses)
  if (!s.wrap) *count = 0;
  if (faulty(s, device)) *count += cause == kRetiredDoubleBit ? s.retired_dbe : s.retired_sbe;
  return kSuccess;
}

Return nvmlDeviceGetRetiredPagesPendingStatus(Device device, int* pending) {
  PEERLAB_FAKE_PROLOGUE(nvmlDeviceGetRetiredPagesPendingStatus)
  if (!s.wrap && !(faulty(s, device) && s.retired_supported.value_or(false))) return kErrorNotSupported;
  PEERLAB_FAKE_FORWARD(nvmlDeviceGetRetiredPagesPendingStatus, device, pending)
  if (!s.wrap) *pending = kFeatureDisabled;
  if (faulty(s, device) && s.retired_pending) *pending = kFeatureEnabled;
  return kSuccess;
}

#ifndef PEERLAB_FAKE_NVML_MINIMAL
Return nvmlDeviceGetRemappedRows(Device device, unsigned int* corrected, unsigned int* uncorrected,
                                 unsigned int* pending, unsigned int* failed) {
  PEERLAB_FAKE_PROLOGUE(nvmlDeviceGetRemappedRows)
  PEERLAB_FAKE_FORWARD(nvmlDeviceGetRemappedRows, device, corrected, uncorrected, pending, failed)
  if (!s.wrap) *corrected = *uncorrected = *pending = *failed = 0;
  if (faulty(s, device)) {
    *corrected += s.remap_cor;
    *uncorrected += s.remap_unc;
    if (s.remap_pending) *pending = 1;
    if (s.remap_failed) *failed = 1;
  }
  return kSuccess;
}
#endif

Return nvmlDeviceGetRowRemapperHistogram(Device device, RowRemapperHistogram* values) {
  PEERLAB_FAKE_PROLOGUE(nvmlDeviceGetRowRemapperHistogram)
  PEERLAB_FAKE_FORWARD(nvmlDeviceGetRowRemapperHistogram, device, values)
  if (!s.wrap) *values = {640, 0, 0, 0, 0};
  return kSuccess;
}

#ifndef PEERLAB_FAKE_NVML_MINIMAL
Return nvmlDeviceGetCurrentClocksEventReasons(Device device, unsigned long long* reasons) {
  PEERLAB_FAKE_PROLOGUE(nvmlDeviceGetCurrentClocksEventReasons)
  PEERLAB_FAKE_FORWARD(nvmlDeviceGetCurrentClocksEventReasons, device, reasons)
  if (!s.wrap) *reasons = 0;
  if (faulty(s, device)) *reasons |= s.clock_reasons;
  return kSuccess;
}
#endif

// The name drivers before r535 have; peerlab falls back to it.
Return nvmlDeviceGetCurrentClocksThrottleReasons(Device device, unsigned long long* reasons) {
  PEERLAB_FAKE_PROLOGUE(nvmlDeviceGetCurrentClocksThrottleReasons)
  PEERLAB_FAKE_FORWARD(nvmlDeviceGetCurrentClocksThrottleReasons, device, reasons)
  if (!s.wrap) *reasons = 0;
  if (faulty(s, device)) *reasons |= s.clock_reasons;
  return kSuccess;
}

Return nvmlEventSetCreate(EventSet* set) {
  PEERLAB_FAKE_PROLOGUE(nvmlEventSetCreate)
  PEERLAB_FAKE_FORWARD(nvmlEventSetCreate, set)
  if (!s.wrap) *set = reinterpret_cast<EventSet>(&g_devices[0]);
  return kSuccess;
}

Return nvmlDeviceRegisterEvents(Device device, unsigned long long types, EventSet set) {
  PEERLAB_FAKE_PROLOGUE(nvmlDeviceRegisterEvents)
  PEERLAB_FAKE_FORWARD(nvmlDeviceRegisterEvents, device, types, set)
  return kSuccess;
}

#ifndef PEERLAB_FAKE_NVML_MINIMAL
Return nvmlEventSetWait_v2(EventSet set, EventData* data, unsigned int timeout_ms) {
  PEERLAB_FAKE_PROLOGUE(nvmlEventSetWait_v2)
  // The XID arrives after a few waits: mid-run, once.
  if (s.xid && ++g_waits >= s.xid_after_waits && !g_xid_sent.exchange(true)) {
    Device d = nullptr;
    if (s.wrap) {
      std::lock_guard<std::mutex> lock(g_mu);
      for (const auto& [h, i] : g_real_index)
        if (i == s.fault_gpu) d = h;
    } else {
      d = reinterpret_cast<Device>(&g_devices[s.fault_gpu]);
    }
    std::memset(data, 0, sizeof(*data));
    data->device = d;
    data->eventType = kEventXidCriticalError;
    data->eventData = s.xid;
    return kSuccess;
  }
  if (s.wrap) {
    auto fn = reinterpret_cast<decltype(&nvmlEventSetWait_v2)>(realSym("nvmlEventSetWait_v2"));
    return fn ? fn(set, data, timeout_ms) : kErrorFunctionNotFound;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
  return kErrorTimeout;
}
#endif

Return nvmlEventSetFree(EventSet set) {
  PEERLAB_FAKE_PROLOGUE(nvmlEventSetFree)
  PEERLAB_FAKE_FORWARD(nvmlEventSetFree, set)
  return kSuccess;
}

}  // extern "C"
