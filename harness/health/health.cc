#include "harness/health/health.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <thread>

namespace peerlab::health {
namespace {

using nvml::Return;

double nowS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

std::string u64(unsigned long long v) {
  return std::to_string(v);
}

struct ReasonName {
  unsigned long long bit;
  const char* name;
};
constexpr ReasonName kReasons[] = {{0x1, "gpu_idle"},    {0x2, "applications_clocks"}, {0x4, "sw_power_cap"},
                                   {0x8, "hw_slowdown"}, {0x10, "sync_boost"},         {0x20, "sw_thermal"},
                                   {0x40, "hw_thermal"}, {0x80, "hw_power_brake"},     {0x100, "display_clocks"}};

struct XidName {
  unsigned long long xid;
  const char* meaning;
};
constexpr XidName kXids[] = {
    {8, "GPU stopped processing (timeout)"},
    {13, "graphics engine exception (application error or driver/hardware fault)"},
    {31, "GPU memory page fault (MMU fault)"},
    {32, "invalid or corrupted push buffer stream"},
    {38, "driver firmware error"},
    {43, "GPU stopped processing (a channel was reset)"},
    {45, "preemptive cleanup after earlier errors"},
    {48, "double-bit ECC error"},
    {61, "internal micro-controller breakpoint/warning"},
    {62, "internal micro-controller halt"},
    {63, "ECC page retirement or row remapping recorded"},
    {64, "ECC page retirement or row remapping recording failed"},
    {68, "video processor exception"},
    {69, "graphics engine class error"},
    {74, "NVLink error"},
    {79, "GPU has fallen off the bus"},
    {92, "high single-bit ECC error rate"},
    {94, "contained ECC error"},
    {95, "uncontained ECC error"},
    {109, "context switch timeout"},
    {119, "GSP RPC timeout"},
    {120, "GSP error"},
    {121, "C2C link corrected error"},
    {122, "SPI PMU RPC read failure"},
    {123, "SPI PMU RPC write failure"},
    {140, "unrecovered ECC error"},
    {143, "GPU initialization failure"},
    {144, "NVLink SAW error"},
    {145, "NVLink RLW error"},
    {146, "NVLink TLW error"},
    {147, "NVLink TREX error"},
    {148, "NVLink NVLPW_CTRL error"},
    {149, "NVLink NETIR error"},
    {150, "NVLink MSE error"},
    {154, "GPU recovery action changed"},
};

Verdict verdictOf(const std::string& s) {
  if (s == "fail") return Verdict::kFail;
  if (s == "warn") return Verdict::kWarn;
  return Verdict::kOk;
}

Verdict worse(Verdict a, Verdict b) {
  auto rank = [](Verdict v) {
    switch (v) {
      case Verdict::kFail:
        return 3;
      case Verdict::kWarn:
        return 2;
      case Verdict::kOk:
        return 1;
      default:
        return 0;
    }
  };
  return rank(a) >= rank(b) ? a : b;
}

std::string joinStr(const std::vector<std::string>& v, const char* sep = "; ") {
  std::string out;
  for (const std::string& s : v)
    out += (out.empty() ? "" : sep) + s;
  return out;
}

}  // namespace

const char* verdictName(Verdict v) {
  switch (v) {
    case Verdict::kOk:
      return "ok";
    case Verdict::kWarn:
      return "warn";
    case Verdict::kFail:
      return "fail";
    default:
      return "unsupported";
  }
}

const char* xidMeaning(unsigned long long xid) {
  for (const XidName& x : kXids)
    if (x.xid == xid) return x.meaning;
  return "";
}

std::string clockReasonNames(unsigned long long reasons) {
  std::string out;
  for (const ReasonName& r : kReasons) {
    if (reasons & r.bit) out += (out.empty() ? "" : ",") + std::string(r.name);
  }
  unsigned long long known = 0;
  for (const ReasonName& r : kReasons)
    known |= r.bit;
  if (reasons & ~known) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "0x%llx", reasons & ~known);
    out += (out.empty() ? "" : ",") + std::string(buf);
  }
  return out.empty() ? "none" : out;
}

unsigned long long clockReasonBit(const std::string& name) {
  for (const ReasonName& r : kReasons)
    if (name == r.name) return r.bit;
  return 0;
}

// ---- Monitor -------------------------------------------------------------------------------------------------------

std::string Monitor::why(Return r) const {
  if (r == nvml::kErrorNotSupported) return "not supported";
  if (r == nvml::kErrorFunctionNotFound) return "function not found in the driver";
  return lib_->errorString(r);
}

StatusOr<report::Fingerprint> nvmlFingerprint() {
  PEERLAB_ASSIGN_OR_RETURN(std::shared_ptr<nvml::Library> lib, nvml::Library::open());
  report::Fingerprint fp;
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) fp.hostname = host;
  char version[96] = {};
  if (lib->nvmlSystemGetDriverVersion && lib->nvmlSystemGetDriverVersion(version, sizeof version) == nvml::kSuccess) {
    fp.driver = version;
  }
  fp.cuda_runtime = "not read (NVML only)";
  fp.nccl = "not read (NVML only)";
  fp.injected = report::detectInjection({.probe = false, .nvml = true});
  unsigned count = 0;
  if (!lib->nvmlDeviceGetCount_v2 || !lib->nvmlDeviceGetHandleByIndex_v2 ||
      lib->nvmlDeviceGetCount_v2(&count) != nvml::kSuccess) {
    return fp;
  }
  for (unsigned k = 0; k < count; ++k) {
    nvml::Device dev{};
    if (lib->nvmlDeviceGetHandleByIndex_v2(k, &dev) != nvml::kSuccess) continue;
    report::GpuFingerprint g;
    g.ordinal = static_cast<int>(k);
    nvml::PciInfo pci{};
    if (lib->nvmlDeviceGetPciInfo_v3 && lib->nvmlDeviceGetPciInfo_v3(dev, &pci) == nvml::kSuccess) {
      g.bus_id = nvml::busIdOf(pci);
    }
    char text[96] = {};
    if (lib->nvmlDeviceGetUUID && lib->nvmlDeviceGetUUID(dev, text, sizeof text) == nvml::kSuccess) g.uuid = text;
    char name[96] = {};
    if (lib->nvmlDeviceGetName && lib->nvmlDeviceGetName(dev, name, sizeof name) == nvml::kSuccess) g.name = name;
    fp.gpus.push_back(std::move(g));
  }
  return fp;
}

StatusOr<std::vector<std::string>> uuidsOfMinors(const std::vector<unsigned>& minors, size_t* total) {
  PEERLAB_ASSIGN_OR_RETURN(std::shared_ptr<nvml::Library> lib, nvml::Library::open());
  unsigned count = 0;
  if (!lib->nvmlDeviceGetCount_v2 || !lib->nvmlDeviceGetHandleByIndex_v2 || !lib->nvmlDeviceGetMinorNumber ||
      !lib->nvmlDeviceGetUUID || lib->nvmlDeviceGetCount_v2(&count) != nvml::kSuccess) {
    return PEERLAB_UNAVAILABLE("NVML: " + lib->path() + " cannot list the GPUs' minor numbers and UUIDs");
  }
  std::vector<std::pair<std::string, std::string>> found;  // bus id, uuid
  std::set<unsigned> seen;
  for (unsigned k = 0; k < count; ++k) {
    nvml::Device dev{};
    unsigned minor = 0;
    if (lib->nvmlDeviceGetHandleByIndex_v2(k, &dev) != nvml::kSuccess ||
        lib->nvmlDeviceGetMinorNumber(dev, &minor) != nvml::kSuccess) {
      continue;
    }
    if (std::find(minors.begin(), minors.end(), minor) == minors.end()) continue;
    char uuid[96] = {};
    if (lib->nvmlDeviceGetUUID(dev, uuid, sizeof uuid) != nvml::kSuccess) continue;
    nvml::PciInfo pci{};
    std::string bus;
    if (lib->nvmlDeviceGetPciInfo_v3 && lib->nvmlDeviceGetPciInfo_v3(dev, &pci) == nvml::kSuccess)
      bus = nvml::busIdOf(pci);
    found.push_back({bus, uuid});
    seen.insert(minor);
  }
  for (unsigned m : minors) {
    if (!seen.count(m)) return PEERLAB_INVALID_ARGUMENT("no GPU has device minor number " + std::to_string(m));
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (const auto& [bus, uuid] : found)
    out.push_back(uuid);
  if (total) *total = count;
  return out;
}

StatusOr<std::unique_ptr<Monitor>> Monitor::open(const std::vector<std::pair<int, std::string>>& gpus) {
  PEERLAB_ASSIGN_OR_RETURN(std::shared_ptr<nvml::Library> lib, nvml::Library::open());
  std::unique_ptr<Monitor> m(new Monitor());
  m->lib_ = lib;
  unsigned count = 0;
  if (!lib->nvmlDeviceGetCount_v2 || !lib->nvmlDeviceGetHandleByIndex_v2) {
    return PEERLAB_UNAVAILABLE("NVML: " + lib->path() + " lacks nvmlDeviceGetCount_v2/nvmlDeviceGetHandleByIndex_v2");
  }
  if (Return r = lib->nvmlDeviceGetCount_v2(&count); r != nvml::kSuccess) {
    return PEERLAB_UNAVAILABLE("NVML: nvmlDeviceGetCount: " + lib->errorString(r));
  }
  for (unsigned k = 0; k < count; ++k) {
    nvml::Device dev{};
    if (lib->nvmlDeviceGetHandleByIndex_v2(k, &dev) != nvml::kSuccess) continue;
    std::string bus;
    nvml::PciInfo pci{};
    if (lib->nvmlDeviceGetPciInfo_v3 && lib->nvmlDeviceGetPciInfo_v3(dev, &pci) == nvml::kSuccess) {
      bus = nvml::busIdOf(pci);
    }
    int ordinal = static_cast<int>(k);
    if (!gpus.empty()) {
      // Only the GPUs CUDA shows, under their CUDA ordinals.
      auto it = std::find_if(gpus.begin(), gpus.end(), [&](const auto& g) {
        std::string a = g.second, b = bus;
        std::transform(a.begin(), a.end(), a.begin(), ::tolower);
        return !b.empty() && a == b;
      });
      if (it == gpus.end()) continue;
      ordinal = it->first;
    }
    m->devices_.push_back(dev);
    m->ordinals_.push_back(ordinal);
    m->bus_ids_.push_back(bus);
  }
  return m;
}

Monitor::~Monitor() {
  stop_ = true;
  if (watcher_.joinable()) watcher_.join();
}

std::vector<GpuSample> Monitor::sample(const TrafficHook& hook, double wake_ms) {
  const nvml::Library& L = *lib_;
  std::vector<GpuSample> out;
  const std::string missing = "function not found in the driver";
  // Reads one value through an optional entry point.
  auto read = [&](auto fn, auto& reading, auto... args) {
    using T = typename std::decay_t<decltype(reading.value)>::value_type;
    if (!fn) {
      reading.why = missing;
      return;
    }
    T v{};
    Return r = fn(args..., &v);
    if (r == nvml::kSuccess) {
      reading.value = v;
    } else {
      reading.why = why(r);
    }
  };
  // One GPU's sample; with traffic, every GPU is sampled on its own thread at once (each wakes its link with its own
  // copies, and a GPU's first copies create its context: one after another they would add up with the GPU count).
  out.resize(devices_.size());
  auto sampleOne = [&](size_t i) {
    nvml::Device d = devices_[i];
    GpuSample s;
    s.gpu = ordinals_[i];
    s.bus_id = bus_ids_[i];
    s.t_s = nowS();
    auto readLink = [&]() {
      read(L.nvmlDeviceGetCurrPcieLinkGeneration, s.pcie_gen, d);
      read(L.nvmlDeviceGetCurrPcieLinkWidth, s.pcie_width, d);
    };
    if (hook) {
      hook(s.gpu, [&]() {
        if (wake_ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(wake_ms));
        readLink();
        s.under_traffic = true;
      });
    }
    if (!s.under_traffic) readLink();
    read(L.nvmlDeviceGetMaxPcieLinkGeneration, s.pcie_max_gen, d);
    read(L.nvmlDeviceGetMaxPcieLinkWidth, s.pcie_max_width, d);
    read(L.nvmlDeviceGetGpuMaxPcieLinkGeneration, s.pcie_gpu_max_gen, d);
    {
      Reading<unsigned> replays;
      read(L.nvmlDeviceGetPcieReplayCounter, replays, d);
      if (replays.has()) s.pcie_replays.value = *replays;
      s.pcie_replays.why = replays.why;
    }
    if (L.nvmlDeviceGetFieldValues) {
      nvml::FieldValue f{};
      f.fieldId = nvml::kFieldPcieCorrectableErrors;
      double v = 0;
      Return r = L.nvmlDeviceGetFieldValues(d, 1, &f);
      if (r == nvml::kSuccess && nvml::fieldAsDouble(f, &v)) {
        s.pcie_correctable.value = static_cast<unsigned long long>(v);
      } else {
        s.pcie_correctable.why = why(r == nvml::kSuccess ? f.nvmlReturn : r);
      }
    } else {
      s.pcie_correctable.why = missing;
    }

    // NVLink: every link NVML answers for; a link that answers "disabled" exists and is down.
    if (!L.nvmlDeviceGetNvLinkState) {
      s.nvlink.why = missing;
    } else {
      Return first = nvml::kSuccess;
      for (unsigned link = 0; link < nvml::kNvlinkMaxLinks; ++link) {
        int state = nvml::kFeatureDisabled;
        Return r = L.nvmlDeviceGetNvLinkState(d, link, &state);
        if (r != nvml::kSuccess) {
          if (link == 0) first = r;
          continue;
        }
        LinkSample ls;
        ls.link = link;
        ls.up = state == nvml::kFeatureEnabled;
        unsigned version = 0;
        if (L.nvmlDeviceGetNvLinkVersion && L.nvmlDeviceGetNvLinkVersion(d, link, &version) == nvml::kSuccess) {
          ls.version = version;
        }
        if (L.nvmlDeviceGetNvLinkErrorCounter) {
          auto counter = [&](int which, std::optional<unsigned long long>& dst) {
            unsigned long long v = 0;
            if (L.nvmlDeviceGetNvLinkErrorCounter(d, link, which, &v) == nvml::kSuccess) dst = v;
          };
          counter(nvml::kNvlinkErrorDlReplay, ls.replay);
          counter(nvml::kNvlinkErrorDlRecovery, ls.recovery);
          counter(nvml::kNvlinkErrorDlCrcFlit, ls.crc_flit);
          counter(nvml::kNvlinkErrorDlCrcData, ls.crc_data);
        }
        s.links.push_back(ls);
      }
      if (s.links.empty()) {
        s.nvlink.why = first == nvml::kSuccess ? "no NVLink" : why(first);
      } else {
        s.nvlink.value = true;
      }
    }

    if (!L.nvmlDeviceGetGpuFabricInfoV) {
      s.fabric.why = missing;
    } else {
      nvml::GpuFabricInfo fi{};
      fi.version = nvml::kGpuFabricInfoV2;
      Return r = L.nvmlDeviceGetGpuFabricInfoV(d, &fi);
      if (r == nvml::kSuccess && fi.state != nvml::kFabricNotSupported) {
        s.fabric.value = fi;
      } else {
        s.fabric.why = r == nvml::kSuccess ? "not an NVSwitch fabric member" : why(r);
      }
    }

    if (!L.nvmlDeviceGetEccMode) {
      s.ecc_enabled.why = missing;
    } else {
      int current = 0, pending = 0;
      Return r = L.nvmlDeviceGetEccMode(d, &current, &pending);
      if (r == nvml::kSuccess) {
        s.ecc_enabled.value = current == nvml::kFeatureEnabled;
      } else {
        s.ecc_enabled.why = why(r);
      }
    }
    read(L.nvmlDeviceGetTotalEccErrors, s.vol_corrected, d, nvml::kMemoryErrorCorrected, nvml::kVolatileEcc);
    read(L.nvmlDeviceGetTotalEccErrors, s.vol_uncorrected, d, nvml::kMemoryErrorUncorrected, nvml::kVolatileEcc);
    read(L.nvmlDeviceGetTotalEccErrors, s.agg_corrected, d, nvml::kMemoryErrorCorrected, nvml::kAggregateEcc);
    read(L.nvmlDeviceGetTotalEccErrors, s.agg_uncorrected, d, nvml::kMemoryErrorUncorrected, nvml::kAggregateEcc);
    read(L.nvmlDeviceGetMemoryErrorCounter, s.dram_agg_uncorrected, d, nvml::kMemoryErrorUncorrected,
         nvml::kAggregateEcc, nvml::kLocationDram);
    read(L.nvmlDeviceGetMemoryErrorCounter, s.sram_agg_uncorrected, d, nvml::kMemoryErrorUncorrected,
         nvml::kAggregateEcc, nvml::kLocationSram);
    if (!L.nvmlDeviceGetSramEccErrorStatus) {
      s.sram.why = missing;
    } else {
      nvml::EccSramErrorStatus st{};
      st.version = nvml::kEccSramErrorStatusV1;
      Return r = L.nvmlDeviceGetSramEccErrorStatus(d, &st);
      if (r == nvml::kSuccess) {
        s.sram.value = st;
      } else {
        s.sram.why = why(r);
      }
    }

    if (!L.nvmlDeviceGetRetiredPages) {
      s.retired_sbe.why = s.retired_dbe.why = missing;
    } else {
      for (int cause : {nvml::kRetiredMultipleSingleBit, nvml::kRetiredDoubleBit}) {
        Reading<unsigned>& dst = cause == nvml::kRetiredDoubleBit ? s.retired_dbe : s.retired_sbe;
        unsigned n = 0;
        Return r = L.nvmlDeviceGetRetiredPages(d, cause, &n, nullptr);
        // With no buffer NVML answers the count (some drivers with "insufficient size").
        if (r == nvml::kSuccess || r == nvml::kErrorInsufficientSize) {
          dst.value = n;
        } else {
          dst.why = why(r);
        }
      }
    }
    {
      Reading<int> pending;
      read(L.nvmlDeviceGetRetiredPagesPendingStatus, pending, d);
      if (pending.has()) s.retired_pending.value = *pending == nvml::kFeatureEnabled;
      s.retired_pending.why = pending.why;
    }
    if (!L.nvmlDeviceGetRemappedRows) {
      s.remap.why = missing;
    } else {
      RemappedRows rr;
      Return r = L.nvmlDeviceGetRemappedRows(d, &rr.corrected, &rr.uncorrected, &rr.pending, &rr.failed);
      if (r == nvml::kSuccess) {
        s.remap.value = rr;
      } else {
        s.remap.why = why(r);
      }
    }
    read(L.nvmlDeviceGetRowRemapperHistogram, s.remap_histogram, d);
    read(L.nvmlDeviceGetCurrentClocksEventReasons ? L.nvmlDeviceGetCurrentClocksEventReasons
                                                  : L.nvmlDeviceGetCurrentClocksThrottleReasons,
         s.clock_reasons, d);
    out[i] = std::move(s);
  };
  if (hook && devices_.size() > 1) {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < devices_.size(); ++i) {
      try {
        threads.emplace_back(sampleOne, i);
      } catch (...) {
        sampleOne(i);
      }
    }
    for (std::thread& t : threads)
      t.join();
  } else {
    for (size_t i = 0; i < devices_.size(); ++i)
      sampleOne(i);
  }
  return out;
}

Status Monitor::startWatch(const Thresholds& t, double max_s) {
  if (watcher_.joinable()) return PEERLAB_INVALID_ARGUMENT("the health watcher is already running");
  stop_ = false;
  log_ = WatchLog();
  log_.ran = true;
  log_.gpus = ordinals_;
  log_.start_s = nowS();
  log_.reason_seconds.assign(devices_.size(), std::vector<double>(64, 0.0));
  unsigned long long mask = 0;
  for (const std::string& n : t.clock_fail_reasons)
    mask |= clockReasonBit(n);
  const double poll_ms = t.watch_poll_ms;
  watcher_ = std::thread([this, poll_ms, max_s, mask] { watchLoop(poll_ms, max_s, mask); });
  return Status::ok();
}

void Monitor::watchLoop(double poll_ms, double max_s, unsigned long long fail_mask) {
  const nvml::Library& L = *lib_;
  const double deadline = log_.start_s + max_s;
  const unsigned timeout_ms = static_cast<unsigned>(std::clamp(poll_ms, 1.0, 1000.0));
  nvml::EventSet set = nullptr;
  if (!L.nvmlEventSetCreate || !L.nvmlDeviceRegisterEvents || !L.nvmlEventSetWait_v2) {
    log_.xid_why = "function not found in the driver (nvmlEventSetCreate/nvmlDeviceRegisterEvents/nvmlEventSetWait_v2)";
  } else if (Return r = L.nvmlEventSetCreate(&set); r != nvml::kSuccess) {
    log_.xid_why = "nvmlEventSetCreate: " + why(r);
    set = nullptr;
  } else {
    std::vector<std::string> failed;
    int registered = 0;
    for (size_t i = 0; i < devices_.size(); ++i) {
      Return rr = L.nvmlDeviceRegisterEvents(devices_[i], nvml::kEventXidCriticalError, set);
      if (rr == nvml::kSuccess) {
        ++registered;
      } else {
        failed.push_back("GPU " + std::to_string(ordinals_[i]) + ": " + why(rr));
      }
    }
    if (registered == 0) log_.xid_why = "nvmlDeviceRegisterEvents: " + joinStr(failed);
  }
  auto getReasons = L.nvmlDeviceGetCurrentClocksEventReasons ? L.nvmlDeviceGetCurrentClocksEventReasons
                                                             : L.nvmlDeviceGetCurrentClocksThrottleReasons;
  if (!getReasons) log_.clocks_why = "function not found in the driver (nvmlDeviceGetCurrentClocksEventReasons)";
  std::vector<std::optional<size_t>> open_window(devices_.size());
  double last = nowS();
  std::vector<bool> clock_ok(devices_.size(), false);
  std::string clock_err;
  while (!stop_) {
    const double now = nowS();
    if (now >= deadline) break;
    if (getReasons) {
      const double dt = now - last;
      for (size_t i = 0; i < devices_.size(); ++i) {
        unsigned long long reasons = 0;
        Return r = getReasons(devices_[i], &reasons);
        if (r != nvml::kSuccess) {
          clock_err = why(r);
          continue;
        }
        clock_ok[i] = true;
        for (int b = 0; b < 64; ++b)
          if (reasons & (1ull << b)) log_.reason_seconds[i][b] += dt;
        const unsigned long long bad = reasons & fail_mask;
        if (bad) {
          if (open_window[i]) {
            ThrottleWindow& w = log_.windows[*open_window[i]];
            w.end_s = now;
            w.reasons |= bad;
          } else {
            open_window[i] = log_.windows.size();
            log_.windows.push_back({ordinals_[i], bad, now, now});
          }
        } else {
          open_window[i].reset();
        }
      }
    }
    last = now;
    if (set) {
      nvml::EventData data{};
      Return r = L.nvmlEventSetWait_v2(set, &data, timeout_ms);
      if (r == nvml::kSuccess && (data.eventType & nvml::kEventXidCriticalError)) {
        int gpu = -1;
        for (size_t i = 0; i < devices_.size(); ++i)
          if (devices_[i] == data.device) gpu = ordinals_[i];
        log_.xids.push_back({gpu, data.eventData, nowS()});
        continue;
      }
      if (r == nvml::kSuccess || r == nvml::kErrorTimeout) continue;
      // Any other answer: XIDs cannot be watched; go on polling the clocks.
      if (log_.xids.empty()) log_.xid_why = "nvmlEventSetWait_v2: " + why(r);
      if (L.nvmlEventSetFree) L.nvmlEventSetFree(set);
      set = nullptr;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
  }
  if (getReasons && std::none_of(clock_ok.begin(), clock_ok.end(), [](bool b) { return b; })) {
    log_.clocks_why = clock_err.empty() ? "not read (the watch ended before the first poll)" : clock_err;
  }
  if (set && L.nvmlEventSetFree) L.nvmlEventSetFree(set);
  log_.end_s = nowS();
}

WatchLog Monitor::stopWatch() {
  stop_ = true;
  if (watcher_.joinable()) watcher_.join();
  return log_;
}

// ---- rules ---------------------------------------------------------------------------------------------------------

namespace {

const GpuSample* find(const std::vector<GpuSample>& v, int gpu) {
  for (const GpuSample& s : v)
    if (s.gpu == gpu) return &s;
  return nullptr;
}

CheckResult pcieLink(const GpuSample& a, const GpuSample* b, const Thresholds& t) {
  CheckResult c{a.gpu, "pcie_link", Verdict::kUnsupported, ""};
  // The after-sample is read under traffic too; use whichever read shows the link at its best.
  const GpuSample& s = (b && b->pcie_gen.has() && (!a.pcie_gen.has() || *b->pcie_gen > *a.pcie_gen)) ? *b : a;
  if (!s.pcie_gen.has() || !s.pcie_width.has()) {
    c.detail = "current link: " + (s.pcie_gen.has() ? s.pcie_width.why : s.pcie_gen.why);
    return c;
  }
  const unsigned gen = *s.pcie_gen, width = *s.pcie_width;
  std::string detail = "Gen" + std::to_string(gen) + " x" + std::to_string(width);
  Verdict v = Verdict::kOk;
  std::vector<std::string> why;
  if (s.pcie_max_gen.has() && s.pcie_max_width.has()) {
    detail += " of Gen" + std::to_string(*s.pcie_max_gen) + " x" + std::to_string(*s.pcie_max_width);
    if (gen < *s.pcie_max_gen && verdictOf(t.pcie_gen_below_max) != Verdict::kOk) {
      v = worse(v, verdictOf(t.pcie_gen_below_max));
      why.push_back("generation below the link's maximum");
    }
    if (width < *s.pcie_max_width && verdictOf(t.pcie_width_below_max) != Verdict::kOk) {
      v = worse(v, verdictOf(t.pcie_width_below_max));
      why.push_back("width below the link's maximum (downtrained)");
    }
  } else {
    detail += " (maximum: " + s.pcie_max_gen.why + ")";
  }
  if (s.pcie_gpu_max_gen.has() && s.pcie_max_gen.has() && *s.pcie_gpu_max_gen > *s.pcie_max_gen) {
    detail += "; the GPU supports Gen" + std::to_string(*s.pcie_gpu_max_gen) + ", its slot less";
  }
  if (static_cast<int>(gen) < t.pcie_min_gen) {
    v = Verdict::kFail;
    why.push_back("generation below the minimum Gen" + std::to_string(t.pcie_min_gen));
  }
  detail += s.under_traffic ? ", read under traffic" : ", read at idle (the link may have dropped to save power)";
  if (!why.empty()) detail += ": " + joinStr(why);
  c.verdict = v;
  c.detail = detail;
  return c;
}

CheckResult pcieErrors(const GpuSample& a, const GpuSample* b, double secs, const Thresholds& t) {
  CheckResult c{a.gpu, "pcie_errors", Verdict::kUnsupported, ""};
  if (!b) {
    c.detail = "no sample after the run";
    return c;
  }
  if (!a.pcie_replays.has() || !b->pcie_replays.has()) {
    c.detail = "replay counter: " + (a.pcie_replays.has() ? b->pcie_replays.why : a.pcie_replays.why);
    return c;
  }
  const unsigned long long replays = *b->pcie_replays - std::min(*a.pcie_replays, *b->pcie_replays);
  c.verdict = Verdict::kOk;
  c.detail = u64(replays) + " replays in " + fmt("%.1f", secs) + " s (fail above " + fmt("%g", t.pcie_max_replays) +
             "; counter " + u64(*b->pcie_replays) + ")";
  if (static_cast<double>(replays) > t.pcie_max_replays) c.verdict = Verdict::kFail;
  if (a.pcie_correctable.has() && b->pcie_correctable.has()) {
    const unsigned long long corr = *b->pcie_correctable - std::min(*a.pcie_correctable, *b->pcie_correctable);
    c.detail += "; " + u64(corr) + " correctable errors";
    if (t.pcie_max_correctable >= 0 && static_cast<double>(corr) > t.pcie_max_correctable) {
      c.verdict = worse(c.verdict, Verdict::kWarn);
      c.detail += " (warn above " + fmt("%g", t.pcie_max_correctable) + ")";
    }
  } else {
    c.detail += "; correctable errors: " + a.pcie_correctable.why;
  }
  return c;
}

int linksUp(const GpuSample& s) {
  return static_cast<int>(std::count_if(s.links.begin(), s.links.end(), [](const LinkSample& l) { return l.up; }));
}

// `machine_nvlink`: some GPU of the machine has a link up. A GPU whose links are all down on a machine where none is
// up does not use NVLink (a single SXM GPU in a VM, a fabric not set up): nothing is expected of its links.
CheckResult nvlinkState(const GpuSample& a, const GpuSample* b, bool machine_nvlink) {
  CheckResult c{a.gpu, "nvlink_state", Verdict::kUnsupported, ""};
  if (!a.nvlink.has()) {
    c.detail = "NVLink: " + a.nvlink.why;
    return c;
  }
  if (!machine_nvlink) {
    c.detail = "0 of " + std::to_string(a.links.size()) + " links up on every GPU: NVLink is not in use here";
    return c;
  }
  const GpuSample& s = b && b->nvlink.has() ? *b : a;
  std::vector<std::string> down;
  int up = 0;
  std::set<unsigned> versions;
  for (const LinkSample& l : s.links) {
    if (l.up) {
      ++up;
      if (l.version) versions.insert(*l.version);
    } else {
      down.push_back(std::to_string(l.link));
    }
  }
  // A link up before the run and down after it went down during the run.
  std::vector<std::string> lost;
  if (b) {
    for (const LinkSample& la : a.links) {
      for (const LinkSample& lb : b->links)
        if (la.link == lb.link && la.up && !lb.up) lost.push_back(std::to_string(la.link));
    }
  }
  c.detail = std::to_string(up) + " of " + std::to_string(s.links.size()) + " links up";
  if (!versions.empty()) {
    // NVML answers with an enum (6 on an H200): reported as the NVLink generation it stands for.
    std::set<int> generations;
    std::string unknown;
    for (unsigned v : versions) {
      if (int g = nvml::nvlinkGeneration(v); g > 0) {
        generations.insert(g);
      } else {
        unknown += (unknown.empty() ? "" : "/") + std::to_string(v);
      }
    }
    std::string gs;
    for (int g : generations)
      gs += (gs.empty() ? "" : "/") + std::to_string(g);
    if (!gs.empty()) c.detail += ", NVLink " + gs;
    if (!unknown.empty()) c.detail += ", NVLink version value " + unknown + " (not known to this build)";
  }
  c.verdict = Verdict::kOk;
  if (!down.empty()) {
    c.verdict = Verdict::kFail;
    c.detail += "; down: link " + joinStr(down, ", ");
  }
  if (!lost.empty()) c.detail += "; went down during the run: link " + joinStr(lost, ", ");
  return c;
}

CheckResult nvlinkErrors(const GpuSample& a, const GpuSample* b, double secs, const Thresholds& t) {
  CheckResult c{a.gpu, "nvlink_errors", Verdict::kUnsupported, ""};
  if (!a.nvlink.has()) {
    c.detail = "NVLink: " + a.nvlink.why;
    return c;
  }
  if (linksUp(a) == 0) {
    c.detail = "no NVLink up on this GPU";
    return c;
  }
  if (!b || !b->nvlink.has()) {
    c.detail = "no NVLink sample after the run";
    return c;
  }
  unsigned long long replay = 0, recovery = 0, crc = 0;
  bool any = false;
  std::vector<std::string> per_link;
  auto delta = [](const std::optional<unsigned long long>& x, const std::optional<unsigned long long>& y) {
    return x && y && *y > *x ? *y - *x : 0ull;
  };
  for (const LinkSample& la : a.links) {
    for (const LinkSample& lb : b->links) {
      if (la.link != lb.link) continue;
      any |= (la.recovery && lb.recovery) || (la.replay && lb.replay) || (la.crc_flit && lb.crc_flit) ||
             (la.crc_data && lb.crc_data);
      const unsigned long long rp = delta(la.replay, lb.replay), rc = delta(la.recovery, lb.recovery);
      const unsigned long long cr = delta(la.crc_flit, lb.crc_flit) + delta(la.crc_data, lb.crc_data);
      replay += rp;
      recovery += rc;
      crc += cr;
      if (rp || rc || cr) {
        per_link.push_back("link " + std::to_string(la.link) + ": " + u64(cr) + " CRC, " + u64(rp) + " replay, " +
                           u64(rc) + " recovery");
      }
    }
  }
  if (!any) {
    c.detail = "NVLink error counters not readable";
    return c;
  }
  const double rate = secs > 0 ? static_cast<double>(crc) / secs : 0;
  c.verdict = Verdict::kOk;
  c.detail = u64(crc) + " CRC errors (" + fmt("%.1f", rate) + "/s, warn above " + fmt("%g", t.nvlink_max_crc_per_s) +
             "/s), " + u64(replay) + " replays, " + u64(recovery) + " recoveries (fail above " +
             fmt("%g", t.nvlink_max_recovery) + ") in " + fmt("%.1f", secs) + " s";
  if (rate > t.nvlink_max_crc_per_s) c.verdict = Verdict::kWarn;
  if (static_cast<double>(recovery) > t.nvlink_max_recovery) c.verdict = Verdict::kFail;
  if (!per_link.empty()) c.detail += "; " + joinStr(per_link);
  return c;
}

CheckResult fabric(const GpuSample& a, const GpuSample* b, bool machine_nvlink) {
  CheckResult c{a.gpu, "fabric", Verdict::kUnsupported, ""};
  const GpuSample& s = b && b->fabric.has() ? *b : a;
  if (!s.fabric.has()) {
    c.detail = "fabric state: " + s.fabric.why;
    return c;
  }
  if (!machine_nvlink) {
    c.detail = "fabric state " + std::to_string((*s.fabric).state) + ", but no NVLink is up on this machine";
    return c;
  }
  const nvml::GpuFabricInfo& f = *s.fabric;
  static const char* kStates[] = {"not supported", "not started", "in progress", "completed"};
  const char* state = f.state < 4 ? kStates[f.state] : "unknown";
  char mask[16];
  std::snprintf(mask, sizeof(mask), "0x%x", f.healthMask);
  c.detail = std::string("registration ") + state + ", status " + std::to_string(f.status) + ", clique " +
             std::to_string(f.cliqueId) + ", health mask " + mask;
  auto flag = [&](unsigned shift) { return ((f.healthMask >> shift) & 0x3u) == 1u; };
  c.verdict = Verdict::kOk;
  std::vector<std::string> why;
  if (flag(nvml::kFabricHealthDegradedBwShift)) {
    c.verdict = Verdict::kWarn;
    why.push_back("degraded bandwidth");
  }
  if (flag(nvml::kFabricHealthRouteRecoveryShift)) {
    c.verdict = Verdict::kWarn;
    why.push_back("route recovery in progress");
  }
  if (flag(nvml::kFabricHealthAccessTimeoutShift)) {
    c.verdict = Verdict::kWarn;
    why.push_back("access timeout recovery");
  }
  if (flag(nvml::kFabricHealthRouteUnhealthyShift)) {
    c.verdict = Verdict::kFail;
    why.push_back("route unhealthy");
  }
  if (f.state != nvml::kFabricCompleted) {
    c.verdict = Verdict::kFail;
    why.push_back("the GPU has not completed fabric registration (fabric manager)");
  } else if (f.status != nvml::kSuccess) {
    c.verdict = Verdict::kFail;
    why.push_back("registration completed with an error");
  }
  if (!why.empty()) c.detail += ": " + joinStr(why);
  return c;
}

CheckResult ecc(const GpuSample& a, const GpuSample* b, const Thresholds& t) {
  CheckResult c{a.gpu, "ecc", Verdict::kUnsupported, ""};
  const GpuSample& s = b ? *b : a;
  if (s.ecc_enabled.has() && !*s.ecc_enabled) {
    c.verdict = Verdict::kWarn;
    c.detail = "ECC is disabled: memory errors go undetected";
    return c;
  }
  if (!s.vol_uncorrected.has() && !s.agg_uncorrected.has()) {
    c.detail = "ECC counters: " + s.vol_uncorrected.why;
    return c;
  }
  c.verdict = Verdict::kOk;
  std::vector<std::string> parts, why;
  auto val = [](const Reading<unsigned long long>& r) { return r.has() ? u64(*r) : std::string("n/a"); };
  parts.push_back("volatile " + val(s.vol_uncorrected) + " uncorrected, " + val(s.vol_corrected) + " corrected");
  parts.push_back("aggregate " + val(s.agg_uncorrected) + " uncorrected, " + val(s.agg_corrected) + " corrected");
  if (s.vol_uncorrected.has() && *s.vol_uncorrected > 0) {
    c.verdict = Verdict::kFail;
    unsigned long long during = 0;
    if (a.vol_uncorrected.has() && *s.vol_uncorrected > *a.vol_uncorrected)
      during = *s.vol_uncorrected - *a.vol_uncorrected;
    why.push_back("uncorrected (double-bit) errors since the driver loaded" +
                  (during ? ", " + u64(during) + " during the run" : std::string()));
  }
  if (s.vol_corrected.has() && t.ecc_max_volatile_corrected >= 0 &&
      static_cast<double>(*s.vol_corrected) > t.ecc_max_volatile_corrected) {
    c.verdict = worse(c.verdict, Verdict::kWarn);
    why.push_back("corrected errors above " + fmt("%g", t.ecc_max_volatile_corrected));
  }
  if (s.agg_uncorrected.has() && *s.agg_uncorrected > 0) {
    // Where: DRAM or SRAM, and for SRAM the unit buckets and the kind (parity, SEC-DED).
    std::vector<std::string> where;
    if (s.dram_agg_uncorrected.has() && *s.dram_agg_uncorrected)
      where.push_back("DRAM " + u64(*s.dram_agg_uncorrected));
    if (s.sram.has()) {
      const nvml::EccSramErrorStatus& e = *s.sram;
      std::vector<std::string> units;
      auto unit = [&](const char* n, unsigned long long v) {
        if (v) units.push_back(std::string(n) + " " + u64(v));
      };
      unit("L2", e.aggregateUncBucketL2);
      unit("SM", e.aggregateUncBucketSm);
      unit("PCIe", e.aggregateUncBucketPcie);
      unit("MCU", e.aggregateUncBucketMcu);
      unit("other", e.aggregateUncBucketOther);
      std::vector<std::string> kinds;
      if (e.aggregateUncParity) kinds.push_back(u64(e.aggregateUncParity) + " parity");
      if (e.aggregateUncSecDed) kinds.push_back(u64(e.aggregateUncSecDed) + " SEC-DED");
      if (!units.empty() || !kinds.empty()) {
        where.push_back("SRAM " + joinStr(kinds, ", ") + (units.empty() ? "" : " in " + joinStr(units, ", ")));
      }
      if (e.bThresholdExceeded) why.push_back("SRAM error threshold exceeded");
    } else if (s.sram_agg_uncorrected.has() && *s.sram_agg_uncorrected) {
      where.push_back("SRAM " + u64(*s.sram_agg_uncorrected));
    }
    const Verdict v = verdictOf(t.ecc_aggregate_uncorrected);
    c.verdict = worse(c.verdict, v);
    why.push_back("past uncorrected errors: " + u64(*s.agg_uncorrected) +
                  (where.empty() ? std::string() : " (" + joinStr(where, "; ") + ")"));
  }
  c.detail = joinStr(parts);
  if (!why.empty()) c.detail += ": " + joinStr(why);
  return c;
}

CheckResult retiredPages(const GpuSample& a, const GpuSample* b, const Thresholds& t) {
  CheckResult c{a.gpu, "retired_pages", Verdict::kUnsupported, ""};
  const GpuSample& s = b ? *b : a;
  if (!s.retired_sbe.has() && !s.retired_pending.has()) {
    c.detail = "page retirement: " + s.retired_sbe.why + " (GPUs with row remapping do not retire pages)";
    return c;
  }
  const unsigned total = (s.retired_sbe.has() ? *s.retired_sbe : 0) + (s.retired_dbe.has() ? *s.retired_dbe : 0);
  const bool pending = s.retired_pending.has() && *s.retired_pending;
  c.verdict = Verdict::kOk;
  c.detail = std::to_string(total) + " retired pages (" +
             (s.retired_sbe.has() ? std::to_string(*s.retired_sbe) : "n/a") + " single-bit, " +
             (s.retired_dbe.has() ? std::to_string(*s.retired_dbe) : "n/a") + " double-bit), " +
             (pending ? "retirement pending" : "none pending") + " (fail at " + fmt("%g", t.retired_pages_max) + ")";
  if (pending) {
    c.verdict = Verdict::kFail;
    c.detail += ": a page waits for retirement (reset the GPU)";
  } else if (static_cast<double>(total) >= t.retired_pages_max) {
    c.verdict = Verdict::kFail;
    c.detail += ": too many retired pages";
  }
  return c;
}

CheckResult rowRemap(const GpuSample& a, const GpuSample* b, const Thresholds& t) {
  CheckResult c{a.gpu, "row_remap", Verdict::kUnsupported, ""};
  const GpuSample& s = b ? *b : a;
  if (!s.remap.has()) {
    c.detail = "row remapping: " + s.remap.why;
    return c;
  }
  const RemappedRows& r = *s.remap;
  c.verdict = Verdict::kOk;
  c.detail = std::to_string(r.corrected) + " rows remapped for correctable, " + std::to_string(r.uncorrected) +
             " for uncorrectable errors; pending " + (r.pending ? "yes" : "no") + ", failed " +
             (r.failed ? "yes" : "no");
  if (s.remap_histogram.has()) {
    const nvml::RowRemapperHistogram& h = *s.remap_histogram;
    c.detail += "; banks by spare rows left: max " + std::to_string(h.max) + ", high " + std::to_string(h.high) +
                ", partial " + std::to_string(h.partial) + ", low " + std::to_string(h.low) + ", none " +
                std::to_string(h.none);
  }
  std::vector<std::string> why;
  if (r.pending) why.push_back("a remap is pending (reset the GPU)");
  if (r.failed) why.push_back("a remap failed");
  if (static_cast<double>(r.uncorrected) >= t.row_remap_max_uncorrected)
    why.push_back("uncorrectable remaps at or above " + fmt("%g", t.row_remap_max_uncorrected));
  if (!why.empty()) {
    c.verdict = Verdict::kFail;
    c.detail += ": " + joinStr(why);
  }
  return c;
}

CheckResult xid(int gpu, const WatchLog& w, const Thresholds& t) {
  CheckResult c{gpu, "xid", Verdict::kUnsupported, ""};
  if (!w.ran) {
    c.detail = "no watch during the run";
    return c;
  }
  std::vector<std::string> seen;
  bool failing = false;
  for (const XidEvent& e : w.xids) {
    if (e.gpu != gpu) continue;
    const bool ignored =
        std::find(t.xid_ignore.begin(), t.xid_ignore.end(), static_cast<int>(e.xid)) != t.xid_ignore.end();
    failing |= !ignored;
    const char* m = xidMeaning(e.xid);
    seen.push_back("XID " + u64(e.xid) + (*m ? std::string(" (") + m + ")" : std::string()) + " at +" +
                   fmt("%.1f", e.t_s - w.start_s) + " s" + (ignored ? " (ignored)" : ""));
  }
  if (seen.empty() && !w.xid_why.empty()) {
    c.detail = "XID events: " + w.xid_why;
    return c;
  }
  c.verdict = failing ? Verdict::kFail : Verdict::kOk;
  c.detail = seen.empty() ? "no XID in " + fmt("%.1f", w.end_s - w.start_s) + " s watched" : joinStr(seen);
  return c;
}

CheckResult clockEvents(int gpu, size_t index, const WatchLog& w, const Thresholds& t) {
  CheckResult c{gpu, "clock_events", Verdict::kUnsupported, ""};
  if (!w.ran) {
    c.detail = "no watch during the run";
    return c;
  }
  if (!w.clocks_why.empty()) {
    c.detail = "clock event reasons: " + w.clocks_why;
    return c;
  }
  unsigned long long fail_mask = 0;
  for (const std::string& n : t.clock_fail_reasons)
    fail_mask |= clockReasonBit(n);
  std::vector<std::string> seen;
  bool failing = false;
  if (index < w.reason_seconds.size()) {
    for (const ReasonName& r : kReasons) {
      int bit = 0;
      while ((1ull << bit) != r.bit)
        ++bit;
      const double secs = w.reason_seconds[index][bit];
      if (secs <= 0 || r.bit == nvml::kClockGpuIdle) continue;
      failing |= (r.bit & fail_mask) != 0;
      seen.push_back(std::string(r.name) + " " + fmt("%.1f", secs) + " s");
    }
  }
  int windows = 0;
  for (const ThrottleWindow& win : w.windows)
    windows += win.gpu == gpu;
  c.verdict = failing ? Verdict::kFail : Verdict::kOk;
  c.detail = seen.empty() ? "no clock event reasons in " + fmt("%.1f", w.end_s - w.start_s) + " s watched"
                          : joinStr(seen, ", ") + " of " + fmt("%.1f", w.end_s - w.start_s) + " s watched";
  if (failing) {
    c.detail += "; " + std::to_string(windows) + " throttled window" + (windows == 1 ? "" : "s") +
                ": results measured then are marked throttled";
  }
  return c;
}

}  // namespace

std::vector<CheckResult> evaluate(const std::vector<GpuSample>& before, const std::vector<GpuSample>& after,
                                  const WatchLog& watch, const Thresholds& t) {
  std::vector<CheckResult> out;
  const bool machine_nvlink =
      std::any_of(before.begin(), before.end(), [](const GpuSample& s) { return linksUp(s) > 0; });
  for (size_t i = 0; i < before.size(); ++i) {
    const GpuSample& a = before[i];
    const GpuSample* b = find(after, a.gpu);
    const double secs = b ? std::max(b->t_s - a.t_s, 1e-3) : 0;
    out.push_back(pcieLink(a, b, t));
    out.push_back(pcieErrors(a, b, secs, t));
    out.push_back(nvlinkState(a, b, machine_nvlink));
    out.push_back(nvlinkErrors(a, b, secs, t));
    out.push_back(fabric(a, b, machine_nvlink));
    out.push_back(ecc(a, b, t));
    out.push_back(retiredPages(a, b, t));
    out.push_back(rowRemap(a, b, t));
    out.push_back(xid(a.gpu, watch, t));
    size_t index = watch.gpus.size();
    for (size_t k = 0; k < watch.gpus.size(); ++k)
      if (watch.gpus[k] == a.gpu) index = k;
    out.push_back(clockEvents(a.gpu, index, watch, t));
  }
  return out;
}

std::vector<CheckResult> unsupportedAll(const std::vector<int>& gpus, const std::string& why) {
  std::vector<CheckResult> out;
  for (int g : gpus)
    for (const char* n : kCheckNames)
      out.push_back({g, n, Verdict::kUnsupported, why});
  return out;
}

std::vector<report::Result> toResults(const std::vector<CheckResult>& checks) {
  std::vector<report::Result> out;
  for (const CheckResult& c : checks) {
    report::Result r;
    r.suite = "health";
    r.impl = "nvml";
    r.name = c.name;
    r.src = c.gpu;
    r.status = verdictName(c.verdict);
    r.detail = c.detail;
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<std::pair<int, std::vector<std::string>>> throttledGpus(const WatchLog& watch, const Thresholds& t) {
  std::map<int, unsigned long long> by_gpu;
  for (const ThrottleWindow& w : watch.windows)
    by_gpu[w.gpu] |= w.reasons;
  std::vector<std::pair<int, std::vector<std::string>>> out;
  for (const auto& [gpu, reasons] : by_gpu) {
    std::vector<std::string> names;
    for (const std::string& n : t.clock_fail_reasons)
      if (reasons & clockReasonBit(n)) names.push_back(n);
    if (!names.empty()) out.push_back({gpu, names});
  }
  return out;
}

nlohmann::json toJson(const WatchLog& watch, const Thresholds& t) {
  nlohmann::json j = {{"watched_s", watch.ran ? watch.end_s - watch.start_s : 0.0}};
  nlohmann::json windows = nlohmann::json::array();
  for (const ThrottleWindow& w : watch.windows) {
    windows.push_back({{"gpu", w.gpu},
                       {"reasons", clockReasonNames(w.reasons)},
                       {"start_s", w.start_s - watch.start_s},
                       {"end_s", w.end_s - watch.start_s}});
  }
  j["throttle_windows"] = windows;
  nlohmann::json throttled = nlohmann::json::object();
  for (const auto& [gpu, names] : throttledGpus(watch, t))
    throttled[std::to_string(gpu)] = names;
  j["throttled_gpus"] = throttled;
  nlohmann::json xids = nlohmann::json::array();
  for (const XidEvent& e : watch.xids)
    xids.push_back({{"gpu", e.gpu}, {"xid", e.xid}, {"meaning", xidMeaning(e.xid)}, {"t_s", e.t_s - watch.start_s}});
  j["xids"] = xids;
  if (!watch.xid_why.empty()) j["xid_unsupported"] = watch.xid_why;
  if (!watch.clocks_why.empty()) j["clocks_unsupported"] = watch.clocks_why;
  return j;
}

}  // namespace peerlab::health
