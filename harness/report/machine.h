#pragma once
/// Machine identity: the kind a run is filed under (GPU model x count x interconnect, one canonical spelling:
/// "h100-x2-nvswitch", "h200-x4-nvswitch", "h100-x1", "l4-x2-pcie") and the node it ran on (stable on cloud VMs,
/// where every host name is "vm"). Every reader of kinds (qualify, bench, report, history, the estimate) takes them
/// from here; nothing reads a kind by string key.

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "harness/report/plan_record.h"
#include "reference/core/status.h"

namespace peerlab::report {

struct GpuFingerprint;
struct Fingerprint;

struct GpuModelInfo {
  std::string short_name;         ///< "h200", "a100", "rtx3090", "t4"; a sanitized model name when unknown
  std::optional<int> capability;  ///< compute capability as major * 10 + minor (90 for sm_90); nullopt when unknown
};

/// Identifies a model as topology sources and CUDA name it: "NVIDIA H200", "Tesla V100-SXM3-32GB-H", "NVIDIA GeForce
/// RTX 3090", or "NVIDIA 10de:2335" when only the PCI ids are known.
GpuModelInfo identifyGpu(std::string_view model);

/// A kind taken apart: "h100-x2-nvswitch" is {h100, 2, nvswitch}. `interconnect` is nvswitch, nvlink, pcie or ""
/// (one GPU, or a topology that cannot tell).
struct KindParts {
  std::string model;
  int count = 0;
  std::string interconnect;
  std::string canonical() const;  ///< "<model>-x<count>[-<interconnect>]"
};

/// Reads a hardware kind in the canonical spelling or an alias of it: a vendor prefix ("nvidia-h100-x2"), upper case
/// ("H100-X2-NVSWITCH") and underscores are accepted. nullopt for anything that names no hardware ("lab-rack-3").
std::optional<KindParts> parseKind(std::string_view text);

/// The kind derived from the hardware and how: {"h200-x2-nvswitch", "2x NVIDIA H200, NVLink through NVSwitch (NVLink
/// from nvml)"}. The interconnect is nvswitch (NVLink through NVSwitches), nvlink (direct NVLink between some pairs),
/// pcie (no NVLink), or left out when the topology cannot tell or there is one GPU; never the host name.
struct DerivedKind {
  std::string kind;
  std::string basis;
};
DerivedKind deriveKind(const PlanTopology& topo);
/// From a fingerprint's GPU list alone (model x count; the interconnect is unknown): for runs without a topology.
DerivedKind deriveKind(const std::vector<GpuFingerprint>& gpus);

/// Where a run's kind came from.
enum class KindSource {
  kNone,         ///< the run names no kind and its hardware is unknown
  kHardware,     ///< derived from the hardware (the topology, else the fingerprint's GPUs)
  kOption,       ///< --kind
  kEnvironment,  ///< $PEERLAB_KIND
  kIngest,       ///< history ingest --kind
  kRunFile,      ///< a run file that names a kind the hardware does not give, without saying where it came from
};
/// "hardware", "--kind", "PEERLAB_KIND", "ingest --kind", "run file", "none".
const char* kindSourceName(KindSource s);

/// The kind a run is filed under, typed.
struct RunKind {
  std::string name;  ///< canonical ("h100-x2-nvswitch"); "" when unknown
  KindSource source = KindSource::kNone;
  std::string basis;        ///< what the hardware is ("2x NVIDIA H100 80GB HBM3, NVLink through ...")
  std::string hardware;     ///< the kind the hardware gives; "" when unknown
  std::string given;        ///< the spelling given (--kind, environment, file) when it was an alias
  bool overridden = false;  ///< given kind contradicts the hardware and --kind-override accepted it
  /// A run file's kind: the file itself says it was overridden (kind_overridden), rather than the reader finding
  /// that it contradicts the hardware.
  bool override_recorded = false;
  bool empty() const { return name.empty(); }
};

/// "h100-x2-nvswitch (hardware: 2x NVIDIA H100 80GB HBM3, NVLink through NVSwitch)", "h100-x2-nvswitch (--kind
/// nvidia-h100-x2, an alias of the hardware's kind)", "lab-a (--kind, overridden: the hardware is h200-x4-nvswitch)".
std::string describeKind(const RunKind& kind);

/// Where a kind is given (the value of --kind or $PEERLAB_KIND, "" when not), and whether a contradiction with the
/// hardware is accepted (--kind-override).
struct KindRequest {
  std::string option;       ///< --kind
  std::string environment;  ///< $PEERLAB_KIND
  bool override_hardware = false;
};
/// $PEERLAB_KIND as a request (with `option` and `override_hardware`).
KindRequest kindRequest(const std::string& option, bool override_hardware);

/// The kind a run is filed under: the given kind (option, else environment) normalized to the hardware's canonical
/// spelling when it denotes the same hardware (same model and count, interconnect the same or unsaid), else the kind
/// the hardware gives. A given kind that contradicts the hardware (another model, count or interconnect, or a name
/// that is no hardware kind) is `invalid_argument` naming both, unless `override_hardware`: then it is kept and
/// recorded as overridden. `hardware` empty (hardware unknown): the given kind is kept as normalized.
StatusOr<RunKind> chooseKind(const KindRequest& request, const DerivedKind& hardware);

/// The kind a run file states (`kind`, `kind_source`, ...; legacy spellings allowed) read against the run's hardware
/// (`hardware`: deriveKind of its topology or fingerprint, "" when unknown): an alias of the hardware's kind reads as
/// the canonical kind; a run without a kind gets the hardware's; a stated kind that contradicts the hardware stays as
/// stated and reads as overridden. Never fails: the reader has checked the types.
RunKind kindOfRunFile(const std::string& stated, const std::string& stated_source, const std::string& given,
                      bool overridden, const DerivedKind& hardware);

/// The same hardware: both kinds parse, their model and count agree and their interconnects agree or one is unsaid.
/// Used wherever runs are put side by side (estimate history, baselines, compares).
bool sameHardware(const std::string& a, const std::string& b);

/// The node a run ran on, stable where host names are not (cloud VMs): the GPUs' UUIDs, else the board's serial
/// (/sys/class/dmi/id/board_serial where readable), else the host name.
struct NodeIdentity {
  std::string id;     ///< "gpus-3fa2b81c04d9", "board-<serial>", "host-<name>"; "" when nothing is known
  std::string basis;  ///< "gpu_uuids", "board_serial", "hostname" or ""
  std::string board_serial;
  std::vector<std::string> gpu_uuids;  ///< sorted
  std::string hostname;
  /// The scheduler's name of the node (Slurm's NodeName) the run ran under: `--node`, else $SLURMD_NODENAME; "" when
  /// neither says. A node's states in the history are keyed by it.
  std::string slurm_node;
  bool empty() const { return id.empty(); }
};
/// The identity from a fingerprint and a board serial ("" when unreadable).
NodeIdentity nodeIdentity(const Fingerprint& fp, const std::string& board_serial);
/// This machine's identity for a run made now: nodeIdentity with the board serial, and the Slurm NodeName from
/// `node_option` when given, else $SLURMD_NODENAME. `invalid_argument` when the name is not a node name (letters,
/// digits, '-', '_', '.'; at most 255 bytes).
StatusOr<NodeIdentity> localNodeIdentity(const Fingerprint& fp, const std::string& node_option = "");
/// Whether `name` can be a Slurm NodeName: 1 to 255 bytes of letters, digits, '-', '_' and '.'.
bool isSlurmNodeName(const std::string& name);
/// This machine's board serial: /sys/class/dmi/id/board_serial (root only on most systems), "" when unreadable or a
/// placeholder ("None", "Not Specified", "To be filled by O.E.M.", "Default string", "0").
std::string readBoardSerial(const std::string& path = "/sys/class/dmi/id/board_serial");

/// "2x NVIDIA H200" or "4x NVIDIA H100 80GB HBM3" (model x count of the fingerprint), "no GPU".
std::string gpuSummary(const Fingerprint& fp);
/// Different GPU model or count (or interconnect, where both kinds name one): the hardware comparisons must not join.
/// "" when the same, else a sentence naming both: "4x NVIDIA H100 80GB HBM3 (h100-x4-nvswitch) against 4x NVIDIA
/// H200 (h200-x4-nvswitch)".
std::string hardwareMismatch(const Fingerprint& base, const std::string& base_kind, const Fingerprint& fresh,
                             const std::string& fresh_kind);

nlohmann::json toJson(const NodeIdentity& node);

}  // namespace peerlab::report
