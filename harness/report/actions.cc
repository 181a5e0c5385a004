#include "harness/report/actions.h"

#include <algorithm>

namespace peerlab::report {

namespace {

constexpr const char* kXidCatalog = "NVIDIA Xid catalog";
constexpr const char* kDebugGuide = "NVIDIA GPU debug guidelines";
constexpr const char* kDcgmDiag = "DCGM diagnostics";
constexpr const char* kFabricGuide = "NVIDIA Fabric Manager user guide";

std::string join(std::initializer_list<const char*> items) {
  std::string s;
  for (const char* i : items)
    s += (s.empty() ? "" : "; ") + std::string(i);
  return s;
}

// Drain reasons stay on one line of plain ASCII whatever the check's name held.
std::string printableAscii(const std::string& s, size_t most) {
  std::string out;
  for (char c : s) {
    if (out.size() >= most) break;
    out += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  return out;
}

}  // namespace

const std::vector<Action>& actionTable() {
  static const std::vector<Action> table = {
      {"replace_part", "replace part (RMA)",
       "Take the node out of service and open a service request (RMA) for the GPU or the part named: the fault "
       "does not clear with a reset or a reboot.",
       join({kXidCatalog, kDebugGuide, kDcgmDiag})},
      {"reboot_node", "reboot node",
       "Reboot the node (a cold power cycle when the GPU has left the PCIe bus) and requalify; replace the GPU, "
       "riser or baseboard when it happens again.",
       join({kXidCatalog, kDebugGuide})},
      {"reset_gpu", "reset GPU",
       "Drain the node and reset the GPU (nvidia-smi -r -i N, or reboot the node), which also applies pending row "
       "remaps and page retirements; requalify, and replace the GPU when the fault returns after the reset.",
       join({kXidCatalog, kDebugGuide, kDcgmDiag})},
      {"reseat_nvlink", "reset GPU, reseat NVLink",
       "Reset the GPUs of the link; when the link stays down or keeps logging errors, reseat or replace the NVLink "
       "bridge or cable, or have the baseboard serviced.",
       join({kXidCatalog, kDebugGuide, kDcgmDiag})},
      {"reseat_pcie", "reseat GPU/riser (PCIe)",
       "Reseat the GPU and its riser or cable and check the slot's BIOS settings (link speed, ASPM); replace the "
       "riser or the GPU when the link still trains below its maximum or keeps replaying.",
       join({kDebugGuide, kDcgmDiag})},
      {"check_fabric", "check fabric manager",
       "Check that nvidia-fabricmanager runs with the driver's version and that the NVSwitch trays are healthy; "
       "restart it, reset the GPUs and requalify.",
       join({kFabricGuide, kDcgmDiag})},
      {"check_cooling", "check cooling/power",
       "Check cooling and power: fans, airflow, inlet temperature, power supplies and power-brake signals; the "
       "GPU's figures were taken at reduced clocks.",
       join({kDebugGuide, kDcgmDiag})},
      {"update_driver", "update driver",
       "Update the driver and the GPU firmware to a current datacenter release, then requalify; when it fails the "
       "same way on a current driver, file a driver bug with the bundle `peerlab repro` writes.",
       join({kXidCatalog, kDebugGuide})},
      {"file_driver_bug", "driver bug: peerlab repro",
       "Reset the GPUs and requalify; when it repeats, file a driver bug with the bundle `peerlab repro` writes "
       "(the failing cells, the command that reproduces them and the system state).",
       join({kDebugGuide})},
      {"check_performance", "check links/settings",
       "Read this run's health checks and compare the node with its fleet (`peerlab history fleet`): with clean "
       "health, low figures point at settings (clocks, PCIe/IOMMU/ACS, NUMA) rather than a broken part; reset the "
       "GPUs and requalify.",
       join({kDcgmDiag})},
      {"rerun", "rerun qualify",
       "Run the qualification again: a process crashed or left no results; when it repeats, collect `peerlab "
       "repro` and look for XIDs in the kernel log.",
       join({kDebugGuide})},
      {"check_application", "restart application",
       "An application-level error: restart the application; the node is suspect only when the XID comes back "
       "with other applications.",
       join({kXidCatalog})},
      {"fix_setup", "fix setup",
       "Not a hardware fault: the installation or the configuration kept a check from running (link information, "
       "an expected figure, a rule that matched nothing); fix it and requalify.",
       "peerlab"},
  };
  return table;
}

std::optional<Action> actionById(const std::string& id) {
  for (const Action& a : actionTable())
    if (a.id == id) return a;
  return std::nullopt;
}

const std::vector<FailureAction>& failureActions() {
  static const std::vector<FailureAction> table = {
      {"topology.gpus_present", "reboot_node", "no NVIDIA GPU in the topology"},
      {"topology.cuda_sees", "reboot_node", "CUDA sees fewer GPUs than the PCI topology (a GPU failed to initialise)"},
      {"topology.link_info", "fix_setup", "no NVLink or PCIe information for a pair (require_link_info)"},
      {"topology.nvlinks_equal", "reseat_nvlink", "a GPU has fewer active NVLinks than its peers"},
      {"health.pcie_link", "reseat_pcie", "PCIe link below its maximum width or generation"},
      {"health.pcie_errors", "reseat_pcie", "PCIe replays beyond the threshold"},
      {"health.nvlink_state", "reseat_nvlink", "an NVLink is down"},
      {"health.nvlink_errors", "reseat_nvlink", "NVLink recovery or CRC errors"},
      {"health.fabric", "check_fabric", "NVSwitch fabric registration incomplete or unhealthy"},
      {"health.ecc", "reset_gpu", "volatile uncorrected ECC errors"},
      {"health.retired_pages", "reset_gpu", "a page retirement pending, or too many retired pages"},
      {"health.row_remap", "reset_gpu", "a row remap pending or failed, or too many uncorrectable remaps"},
      {"health.clock_events", "check_cooling", "HW slowdown, thermal or power-brake clock events"},
      {"health.throttled", "check_cooling", "benchmarks measured while the clocks were held down"},
      {"health.xid", "reset_gpu", "an XID not listed below"},
      {"health.xid.8", "reset_gpu", "XID 8: GPU stopped processing"},
      {"health.xid.13", "check_application", "XID 13: graphics engine exception"},
      {"health.xid.31", "check_application", "XID 31: GPU memory page fault"},
      {"health.xid.32", "check_application", "XID 32: invalid or corrupted push buffer stream"},
      {"health.xid.38", "update_driver", "XID 38: driver firmware error"},
      {"health.xid.43", "check_application", "XID 43: GPU stopped processing (channel reset)"},
      {"health.xid.45", "check_application", "XID 45: preemptive cleanup"},
      {"health.xid.48", "reset_gpu", "XID 48: double-bit ECC error"},
      {"health.xid.61", "reset_gpu", "XID 61: internal micro-controller breakpoint"},
      {"health.xid.62", "reset_gpu", "XID 62: internal micro-controller halt"},
      {"health.xid.63", "reset_gpu", "XID 63: row remapping or page retirement recorded"},
      {"health.xid.64", "replace_part", "XID 64: row remapping or page retirement could not be recorded"},
      {"health.xid.68", "check_application", "XID 68: video processor exception"},
      {"health.xid.69", "check_application", "XID 69: graphics engine class error"},
      {"health.xid.74", "reseat_nvlink", "XID 74: NVLink error"},
      {"health.xid.79", "reboot_node", "XID 79: GPU has fallen off the bus"},
      {"health.xid.92", "reset_gpu", "XID 92: high single-bit ECC error rate"},
      {"health.xid.94", "reset_gpu", "XID 94: contained ECC error"},
      {"health.xid.95", "reset_gpu", "XID 95: uncontained ECC error"},
      {"health.xid.109", "reset_gpu", "XID 109: context switch timeout"},
      {"health.xid.119", "reset_gpu", "XID 119: GSP RPC timeout"},
      {"health.xid.120", "reset_gpu", "XID 120: GSP error"},
      {"health.xid.140", "reset_gpu", "XID 140: unrecovered ECC error"},
      {"health.xid.143", "reboot_node", "XID 143: GPU initialization failure"},
      {"health.xid.144", "reseat_nvlink", "XIDs 144-150: NVLink unit errors (SAW, RLW, TLW, TREX, NVLPW, NETIR, MSE)"},
      {"health.xid.145", "reseat_nvlink", ""},
      {"health.xid.146", "reseat_nvlink", ""},
      {"health.xid.147", "reseat_nvlink", ""},
      {"health.xid.148", "reseat_nvlink", ""},
      {"health.xid.149", "reseat_nvlink", ""},
      {"health.xid.150", "reseat_nvlink", ""},
      {"health.xid.154", "reset_gpu", "XID 154: the driver names a recovery action (nvidia-smi -q shows it)"},
      {"probe.corrupt", "file_driver_bug", "probe: a cell the driver claims verified corrupt data"},
      {"probe.hang", "file_driver_bug", "probe: a claimed cell hung"},
      {"probe.error", "update_driver", "probe: a claimed cell failed with an error"},
      {"probe.unclaimed", "update_driver", "probe: an unclaimed cell fails (fail_unclaimed = true)"},
      {"probe.process", "rerun", "probe: the probe process failed"},
      {"data.wrong", "file_driver_bug", "benchmark data verified wrong on the destination GPU"},
      {"data.failed", "rerun", "a benchmark process crashed, hung or reported an error"},
      {"data.not_measured", "fix_setup", "a planned suite measured nothing of peerlab's"},
      {"bandwidth.below", "check_performance", "bandwidth below the expected figure"},
      {"bandwidth.unknown", "fix_setup", "the expected figure is unknown and require_link_info = true"},
      {"latency.above", "check_performance", "latency above its bound"},
      {"coverage.suite", "rerun", "a suite the plan ran has no results"},
      {"coverage.rule", "fix_setup", "no result reached the sizes a rule needs"},
      {"baseline.regressed", "check_performance", "worse than the baseline beyond the threshold"},
      {"baseline.missing", "fix_setup", "results of the baseline missing from this run"},
  };
  return table;
}

std::string actionFor(const std::string& key) {
  std::string k = key;
  for (;;) {
    for (const FailureAction& f : failureActions())
      if (f.key == k) return f.action;
    const size_t dot = k.rfind('.');
    if (dot == std::string::npos || dot == 0) return "rerun";
    k.resize(dot);
  }
}

std::string moreDrastic(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  for (const Action& x : actionTable()) {
    if (x.id == a) return a;
    if (x.id == b) return b;
  }
  return a;
}

std::string actionLine(const Check& c) {
  if (c.action.empty()) return "";
  const std::optional<Action> a = actionById(c.action);
  return a ? a->short_text + ": " + a->text : "unknown action \"" + c.action + "\" (not in this peerlab's table)";
}

const Check* checkToActOn(const std::vector<Check>& checks) {
  const Check* best = nullptr;
  for (const Check& c : checks) {
    if (!c.failed()) continue;
    if (!best || (moreDrastic(best->action, c.action) != best->action)) best = &c;
  }
  return best;
}

std::string drainReason(const std::vector<Check>& checks) {
  const Check* c = checkToActOn(checks);
  if (!c) return "";
  // A health check's name is "<check> GPU <n>"; the reason writes "<check> GPU<n>".
  std::string subject = c->name;
  if (const size_t g = subject.rfind(" GPU "); g != std::string::npos) subject.erase(g + 4, 1);
  const std::optional<Action> a = actionById(c->action);
  std::string reason = printableAscii(subject, 80) + ": " + (a ? a->short_text : std::string("see the bundle"));
  const int failed = countChecks(checks).failed;
  if (failed > 1) reason += " (+" + std::to_string(failed - 1) + " more failed)";
  return printableAscii(reason, 160);
}

}  // namespace peerlab::report
