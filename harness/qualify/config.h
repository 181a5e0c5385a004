#pragma once
/// Qualify thresholds: what a healthy machine must show, read from a TOML-subset file (reports/qualify.toml is the
/// default and is built into peerlab, so a run without --config uses exactly that file's values).

#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "reference/core/status.h"

namespace peerlab::qualify {

/// A bandwidth expectation derived from the topology:
///   links x per-link rate x efficiency x directions
/// for results matching suite/impl/name (globs) at sizes >= min_bytes; the best such size per pair is checked.
struct BandwidthRule {
  std::string id;  ///< the section name after "expect."
  std::string suite;
  std::string impl = "*";
  std::string name = "*";
  std::string metric = "algbw_gbps";  ///< algbw_gbps or busbw_gbps
  std::string scope = "pair";         ///< pair: links between src and dst; gpu: all NVLinks of one GPU; host: each
                                      ///< GPU's PCIe link to the host (pcie_efficiency); device: each GPU's DRAM peak
                                      ///< (bus width x clock x 2) / 2, a copy reading and writing every byte
  double directions = 1;              ///< 2 for figures that add up both directions
  double efficiency = 0.8;            ///< of the NVLink line rate
  double pcie_efficiency = 0.8;       ///< of pcie_gbps, for pairs without NVLink
  double min_bytes = 0;
  bool nvlink_only = false;  ///< no expectation for pairs without NVLink
  std::string note;          ///< shown with the expected figure
};

/// A latency bound: results matching suite/impl/name at sizes <= max_bytes must take at most max_us (each pair).
struct LatencyRule {
  std::string id;  ///< the section name after "latency."
  std::string suite;
  std::string impl = "*";
  std::string name = "*";
  double max_bytes = 8;
  double max_us = 0;
  std::string note;
};

struct QualifyConfig {
  std::string source;                 ///< file path, or "built-in reports/qualify.toml"
  double baseline_threshold_pct = 5;  ///< a result worse than its baseline by more fails
  bool require_link_info = true;      ///< fail when the topology cannot say how GPUs are linked
  bool fail_unclaimed = false;        ///< probe cells the driver does not claim fail qualify when they hang/corrupt
  double nvlink_gbps = 26.5625;       ///< per link and direction, when the topology does not say
  double pcie_gbps = 25.0;            ///< per direction, for pairs without NVLink
  std::vector<BandwidthRule> bandwidth;
  std::vector<LatencyRule> latency;
};

/// The TOML subset: [section] and [a.b] headers, key = value with "strings", numbers, true/false, # comments.
using TomlValue = std::variant<std::string, double, bool>;
struct TomlEntry {
  TomlValue value;
  int line = 0;
};
using TomlSections = std::map<std::string, std::map<std::string, TomlEntry>>;
/// Parses the subset; `invalid_argument` is "<name>:<line>: <why>".
StatusOr<TomlSections> parseToml(const std::string& text, const std::string& name);

/// Parses and checks a config (unknown sections or keys are errors, so that a typo never goes unnoticed).
StatusOr<QualifyConfig> parseConfig(const std::string& text, const std::string& name);
/// Reads a config file; missing or malformed files give `invalid_argument` naming the file.
StatusOr<QualifyConfig> loadConfig(const std::string& path);
/// The built-in default (the text of reports/qualify.toml at build time; config_test keeps it valid).
StatusOr<QualifyConfig> defaultConfig();
/// The built-in default's text.
const std::string& defaultConfigText();

/// Shell-style glob: '*' any run of characters, '?' one character.
bool globMatch(const std::string& pattern, const std::string& text);

}  // namespace peerlab::qualify
