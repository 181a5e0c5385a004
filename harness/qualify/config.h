#pragma once
/// Qualify thresholds: what a healthy machine must show, read from a TOML file with toml++ (reports/qualify.toml is
/// the default and is built into peerlab, so a run without --config uses exactly that file's values).

#include <string>
#include <vector>

#include "harness/health/health.h"
#include "harness/report/evaluate.h"
#include "harness/report/plan_record.h"
#include "reference/core/status.h"

namespace peerlab::qualify {

/// A bandwidth expectation derived from the topology:
///   NVLink: links x per-link rate x efficiency x directions
///   PCIe:   link rate (generation x lanes x encoding) x pcie_efficiency x path factor x directions
/// for results matching suite/impl/name (globs) at sizes >= min_bytes; the best such size per pair is checked.
struct BandwidthRule {
  std::string id;  ///< the table name after "expect."
  std::string suite;
  std::string impl = "*";
  std::string name = "*";
  std::string metric = "algbw_gbps";  ///< algbw_gbps or busbw_gbps
  /// pair: links between src and dst; gpu: all NVLinks of one GPU, the weakest GPU bounding the machine
  /// (collectives); host: each GPU's own PCIe link, per GPU (host <-> device copies, src = the GPU); gpu_pcie: the
  /// weakest GPU's own PCIe link, for the whole machine (all GPUs to or from the host at once); device: each GPU's
  /// DRAM peak (bus width x clock x 2) / 2 x efficiency, a copy within its memory reading and writing every byte.
  std::string scope = "pair";
  double directions = 1;    ///< 2 for figures that add up both directions
  double efficiency = 0.8;  ///< of the NVLink line rate
  /// Of the PCIe link rate, for pairs without NVLink and host scopes. A rule that can give a PCIe figure names it:
  /// it is never taken from `efficiency` (NVLink and PCIe reach different shares of their line rates).
  double pcie_efficiency = 0.8;
  double min_bytes = 0;
  bool nvlink_only = false;  ///< no expectation for pairs without NVLink
  std::string note;          ///< shown with the expected figure
};

using report::LatencyRule;

struct QualifyConfig {
  std::string source;  ///< file path, or "built-in reports/qualify.toml"
  /// With --baseline, a result worse than its baseline by more than this rule allows fails: [qualify]'s
  /// baseline_threshold_pct, baseline_spread_factor and baseline_jitter_us (report/compare.h NoiseRule).
  report::NoiseRule baseline_rule;
  bool require_link_info = true;  ///< an expectation the topology cannot give (link unknown) fails its check
  bool fail_unclaimed = false;    ///< probe cells the driver does not claim fail qualify when they hang/corrupt
  double nvlink_gbps = 26.5625;   ///< per link and direction, when the topology gives the count but not the rate
  /// Path factor of a GPU pair across the SMP interconnect (PCIe path SYS): peer traffic between sockets crosses
  /// UPI / Infinity Fabric, whose peer-to-peer throughput is well below a PCIe x16 link (or staged through host
  /// memory where the platform does not route it).
  double sys_factor = 0.5;
  std::vector<BandwidthRule> bandwidth;
  std::vector<LatencyRule> latency;
  /// Rules switched off by `enabled = false` ("expect.<id>", "latency.<id>"): the plan lists them as disabled.
  std::vector<std::string> disabled_rules;
};

/// Parses and checks a whole config: unknown tables or keys are errors naming the key and its line, so that a typo
/// never goes unnoticed; [health] belongs to the health checks and is not read here. `invalid_argument` is
/// "<name>:<line>: <why>".
StatusOr<QualifyConfig> parseConfig(const std::string& text, const std::string& name);
/// Applies a config document over `base`, table by table and key by key: what it does not mention keeps its value,
/// a rule table changes only the keys it names (or adds a rule), `enabled = false` removes a rule and lists it in
/// disabled_rules. Errors as parseConfig's.
StatusOr<QualifyConfig> overrideConfig(const QualifyConfig& base, const std::string& text, const std::string& name);
/// The text of a config file: a directory, a missing or unreadable file, or one over 1 MiB give `invalid_argument`
/// naming it.
StatusOr<std::string> readConfigText(const std::string& path);
/// The built-in default with the file at `path` applied over it (what `--config FILE` means).
StatusOr<QualifyConfig> loadConfig(const std::string& path);
/// The built-in default (the text of reports/qualify.toml at build time; config_test keeps it valid).
StatusOr<QualifyConfig> defaultConfig();
/// The [health] thresholds of the built-in default with `path` (when not empty) applied over them, key by key.
StatusOr<health::Thresholds> loadHealthThresholds(const std::string& path);
/// The built-in default's text.
const std::string& defaultConfigText();

using report::globMatch;

}  // namespace peerlab::qualify
