#include "harness/qualify/config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "reference/core/files.h"

namespace peerlab::qualify {

extern const char* const kDefaultConfigText;  // generated from reports/qualify.toml (default_config.cc)

namespace {

// Typed reads of one table with the file and line in every error.
class Reader {
 public:
  Reader(const std::string& name, std::string table) : name_(name), table_(std::move(table)) {}

  Status error(const toml::source_region& where, const std::string& why) const {
    return PEERLAB_INVALID_ARGUMENT(name_ + ":" + std::to_string(where.begin.line) + ": " + why);
  }
  Status unknown(const toml::key& key) const {
    return error(key.source(), "unknown key " + std::string(key.str()) + " in [" + table_ + "]");
  }

  StatusOr<double> number(const toml::key& key, const toml::node& node, double lo, double hi) const {
    std::optional<double> v = node.is_number() ? node.value<double>() : std::nullopt;
    if (!v) return error(node.source(), "[" + table_ + "] " + std::string(key.str()) + " must be a number");
    if (!std::isfinite(*v) || *v < lo || *v > hi) {
      std::ostringstream why;
      why << "[" << table_ << "] " << key.str() << " = " << *v << " is outside " << lo << " .. " << hi;
      return error(node.source(), why.str());
    }
    return *v;
  }
  StatusOr<std::string> string(const toml::key& key, const toml::node& node) const {
    if (!node.is_string()) {
      return error(node.source(), "[" + table_ + "] " + std::string(key.str()) + " must be a \"string\"");
    }
    return *node.value<std::string>();
  }
  StatusOr<bool> boolean(const toml::key& key, const toml::node& node) const {
    if (!node.is_boolean()) {
      return error(node.source(), "[" + table_ + "] " + std::string(key.str()) + " must be true or false");
    }
    return *node.value<bool>();
  }
  StatusOr<std::string> oneOf(const toml::key& key, const toml::node& node, const std::vector<std::string>& allowed) {
    PEERLAB_ASSIGN_OR_RETURN(std::string v, string(key, node));
    std::string list;
    for (const std::string& a : allowed) {
      if (v == a) return v;
      list += (list.empty() ? "\"" : ", \"") + a + "\"";
    }
    return error(node.source(), "[" + table_ + "] " + std::string(key.str()) + " must be one of " + list);
  }

 private:
  const std::string& name_;
  std::string table_;
};

Status readQualify(const toml::table& t, Reader& r, QualifyConfig& cfg) {
  for (const auto& [k, v] : t) {
    if (k == "baseline_threshold_pct") {
      PEERLAB_ASSIGN_OR_RETURN(cfg.baseline_rule.threshold_pct, r.number(k, v, 0, 1000));
    } else if (k == "baseline_jitter_us") {
      PEERLAB_ASSIGN_OR_RETURN(cfg.baseline_rule.jitter_us, r.number(k, v, 0, 1e6));
    } else if (k == "baseline_spread_factor") {
      PEERLAB_ASSIGN_OR_RETURN(cfg.baseline_rule.spread_factor, r.number(k, v, 0, 100));
    } else if (k == "require_link_info") {
      PEERLAB_ASSIGN_OR_RETURN(cfg.require_link_info, r.boolean(k, v));
    } else if (k == "fail_unclaimed") {
      PEERLAB_ASSIGN_OR_RETURN(cfg.fail_unclaimed, r.boolean(k, v));
    } else {
      return r.unknown(k);
    }
  }
  return Status::ok();
}

Status readLinks(const toml::table& t, Reader& r, QualifyConfig& cfg) {
  for (const auto& [k, v] : t) {
    if (k == "nvlink_gbps") {
      PEERLAB_ASSIGN_OR_RETURN(cfg.nvlink_gbps, r.number(k, v, 0.001, 10000));
    } else if (k == "sys_factor") {
      PEERLAB_ASSIGN_OR_RETURN(cfg.sys_factor, r.number(k, v, 0, 1));
    } else if (k == "pcie_gbps") {
      return r.error(k.source(),
                     "[links] pcie_gbps is no longer read: PCIe figures come from each GPU's link "
                     "(generation x width x encoding); remove the key");
    } else {
      return r.unknown(k);
    }
  }
  return Status::ok();
}

// A rule table read over `base` (the built-in rule of that id, when an override names one): only the keys the table
// names change. `enabled = false` sets *disabled.
StatusOr<BandwidthRule> readExpect(const std::string& id, const toml::table& t, Reader& r, const BandwidthRule* base,
                                   bool* disabled) {
  BandwidthRule rule = base ? *base : BandwidthRule{};
  rule.id = id;
  bool have_pcie = base != nullptr;
  for (const auto& [k, v] : t) {
    if (k == "enabled") {
      PEERLAB_ASSIGN_OR_RETURN(bool enabled, r.boolean(k, v));
      *disabled = !enabled;
    } else if (k == "suite") {
      PEERLAB_ASSIGN_OR_RETURN(rule.suite, r.string(k, v));
    } else if (k == "impl") {
      PEERLAB_ASSIGN_OR_RETURN(rule.impl, r.string(k, v));
    } else if (k == "name") {
      PEERLAB_ASSIGN_OR_RETURN(rule.name, r.string(k, v));
    } else if (k == "metric") {
      PEERLAB_ASSIGN_OR_RETURN(rule.metric, r.oneOf(k, v, {"algbw_gbps", "busbw_gbps"}));
    } else if (k == "scope") {
      PEERLAB_ASSIGN_OR_RETURN(rule.scope, r.oneOf(k, v, {"pair", "gpu", "host", "gpu_pcie", "device"}));
    } else if (k == "directions") {
      PEERLAB_ASSIGN_OR_RETURN(rule.directions, r.number(k, v, 0.001, 64));
    } else if (k == "efficiency") {
      PEERLAB_ASSIGN_OR_RETURN(rule.efficiency, r.number(k, v, 0, 1.5));
    } else if (k == "pcie_efficiency") {
      PEERLAB_ASSIGN_OR_RETURN(rule.pcie_efficiency, r.number(k, v, 0, 1.5));
      have_pcie = true;
    } else if (k == "min_bytes") {
      PEERLAB_ASSIGN_OR_RETURN(rule.min_bytes, r.number(k, v, 0, 1e15));
    } else if (k == "nvlink_only") {
      PEERLAB_ASSIGN_OR_RETURN(rule.nvlink_only, r.boolean(k, v));
    } else if (k == "note") {
      PEERLAB_ASSIGN_OR_RETURN(rule.note, r.string(k, v));
    } else {
      return r.unknown(k);
    }
  }
  if (rule.suite.empty() && !*disabled) return r.error(t.source(), "[expect." + id + "] needs suite = \"...\"");
  // A new rule that can give a PCIe figure names its PCIe efficiency: NVLink and PCIe reach different shares of their
  // line rates, so one is never taken for the other.
  const bool pcie = rule.scope == "host" || rule.scope == "gpu_pcie" ||
                    ((rule.scope == "pair" || rule.scope == "gpu") && !rule.nvlink_only);
  if (!have_pcie && pcie && !*disabled) {
    return r.error(t.source(), "[expect." + id + "] gives PCIe figures (scope " + rule.scope +
                                   (rule.scope == "pair" || rule.scope == "gpu" ? ", GPUs without NVLink" : "") +
                                   ") and names no pcie_efficiency: add it (it is not taken from efficiency), or "
                                   "nvlink_only = true");
  }
  return rule;
}

StatusOr<LatencyRule> readLatency(const std::string& id, const toml::table& t, Reader& r, const LatencyRule* base,
                                  bool* disabled) {
  LatencyRule rule = base ? *base : LatencyRule{};
  rule.id = id;
  bool have_max = base != nullptr;
  for (const auto& [k, v] : t) {
    if (k == "enabled") {
      PEERLAB_ASSIGN_OR_RETURN(bool enabled, r.boolean(k, v));
      *disabled = !enabled;
    } else if (k == "suite") {
      PEERLAB_ASSIGN_OR_RETURN(rule.suite, r.string(k, v));
    } else if (k == "impl") {
      PEERLAB_ASSIGN_OR_RETURN(rule.impl, r.string(k, v));
    } else if (k == "name") {
      PEERLAB_ASSIGN_OR_RETURN(rule.name, r.string(k, v));
    } else if (k == "max_bytes") {
      PEERLAB_ASSIGN_OR_RETURN(rule.max_bytes, r.number(k, v, 0, 1e15));
    } else if (k == "max_us") {
      PEERLAB_ASSIGN_OR_RETURN(rule.max_us, r.number(k, v, 0.001, 1e9));
      have_max = true;
    } else if (k == "note") {
      PEERLAB_ASSIGN_OR_RETURN(rule.note, r.string(k, v));
    } else {
      return r.unknown(k);
    }
  }
  if (rule.suite.empty() && !*disabled) return r.error(t.source(), "[latency." + id + "] needs suite = \"...\"");
  if (!have_max && !*disabled) return r.error(t.source(), "[latency." + id + "] needs max_us = <microseconds>");
  return rule;
}

// [expect.<id>] and [latency.<id>]: a table of rule tables, each applied over the rule of that id in `out` (or
// added); a rule with enabled = false leaves `out` and is listed in `disabled` as "<group>.<id>".
template <typename Rule, typename ReadRule, typename IdOf>
Status readRules(const std::string& name, const toml::key& group, const toml::node& node, std::vector<Rule>& out,
                 std::vector<std::string>& disabled, ReadRule read, IdOf idOf) {
  Reader top(name, std::string(group.str()));
  const toml::table* rules = node.as_table();
  if (!rules) {
    return top.error(node.source(),
                     std::string(group.str()) + " must be tables [" + std::string(group.str()) + ".<id>]");
  }
  for (const auto& [id, rule] : *rules) {
    const std::string table = std::string(group.str()) + "." + std::string(id.str());
    const toml::table* t = rule.as_table();
    if (!t) return top.error(id.source(), table + " must be a table [" + table + "]");
    Reader r(name, table);
    auto existing = std::find_if(out.begin(), out.end(), [&](const Rule& x) { return idOf(x) == id.str(); });
    bool off = false;
    PEERLAB_ASSIGN_OR_RETURN(Rule parsed,
                             read(std::string(id.str()), *t, r, existing == out.end() ? nullptr : &*existing, &off));
    if (off) {
      if (existing == out.end()) {
        return r.error(t->source(), "[" + table + "] enabled = false names no rule of " +
                                        (out.empty() ? std::string("the config") : "the config it applies to"));
      }
      out.erase(existing);
      if (std::find(disabled.begin(), disabled.end(), table) == disabled.end()) disabled.push_back(table);
    } else if (existing != out.end()) {
      *existing = std::move(parsed);
    } else {
      out.push_back(std::move(parsed));
    }
  }
  return Status::ok();
}

// Applies one TOML document over `cfg`, table by table and key by key.
StatusOr<QualifyConfig> applyConfig(QualifyConfig cfg, const std::string& text, const std::string& name) {
  toml::table doc;
  try {
    doc = toml::parse(text, name);
  } catch (const toml::parse_error& e) {
    return PEERLAB_INVALID_ARGUMENT(name + ":" + std::to_string(e.source().begin.line) + ": " +
                                    std::string(e.description()) + " (not a TOML file?)");
  }
  for (const auto& [k, v] : doc) {
    Reader r(name, std::string(k.str()));
    const toml::table* t = v.as_table();
    if (k == "expect") {
      PEERLAB_RETURN_IF_ERROR(readRules(name, k, v, cfg.bandwidth, cfg.disabled_rules, readExpect,
                                        [](const BandwidthRule& x) { return x.id; }));
    } else if (k == "latency") {
      PEERLAB_RETURN_IF_ERROR(readRules(name, k, v, cfg.latency, cfg.disabled_rules, readLatency,
                                        [](const LatencyRule& x) { return x.id; }));
    } else if (k == "health") {
      // The health checks' thresholds: read by their own module.
      if (!t) return r.error(k.source(), "health must be a table [health]");
    } else if (k == "qualify" || k == "links") {
      if (!t) return r.error(k.source(), std::string(k.str()) + " must be a table [" + std::string(k.str()) + "]");
      PEERLAB_RETURN_IF_ERROR(k == "qualify" ? readQualify(*t, r, cfg) : readLinks(*t, r, cfg));
    } else if (t) {
      return r.error(k.source(), "unknown table [" + std::string(k.str()) +
                                     "] (known: qualify, links, health, expect.<id>, latency.<id>)");
    } else {
      return r.error(k.source(), "key " + std::string(k.str()) + " must be inside a [table]");
    }
  }
  return cfg;
}

}  // namespace

StatusOr<QualifyConfig> parseConfig(const std::string& text, const std::string& name) {
  QualifyConfig empty;
  empty.source = name;
  return applyConfig(std::move(empty), text, name);
}

StatusOr<QualifyConfig> overrideConfig(const QualifyConfig& base, const std::string& text, const std::string& name) {
  PEERLAB_ASSIGN_OR_RETURN(QualifyConfig cfg, applyConfig(base, text, name));
  cfg.source = base.source + " + " + name;
  return cfg;
}

StatusOr<std::string> readConfigText(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return PEERLAB_INVALID_ARGUMENT(path + ": is a directory, not a TOML file");
  return readTextFile(path, size_t{1} << 20);
}

StatusOr<QualifyConfig> loadConfig(const std::string& path) {
  PEERLAB_ASSIGN_OR_RETURN(QualifyConfig base, defaultConfig());
  PEERLAB_ASSIGN_OR_RETURN(std::string text, readConfigText(path));
  return overrideConfig(base, text, path);
}

StatusOr<health::Thresholds> loadHealthThresholds(const std::string& path) {
  PEERLAB_ASSIGN_OR_RETURN(health::Thresholds base,
                           health::parseThresholds(defaultConfigText(), "built-in reports/qualify.toml"));
  if (path.empty()) return base;
  PEERLAB_ASSIGN_OR_RETURN(std::string text, readConfigText(path));
  return health::parseThresholds(text, path, base);
}

const std::string& defaultConfigText() {
  static const std::string text = kDefaultConfigText;
  return text;
}

StatusOr<QualifyConfig> defaultConfig() {
  return parseConfig(defaultConfigText(), "built-in reports/qualify.toml");
}

}  // namespace peerlab::qualify
