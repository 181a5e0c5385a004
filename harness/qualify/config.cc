#include "harness/qualify/config.h"

#include <cmath>
#include <cstdlib>
#include <set>
#include <sstream>

#include "harness/qualify/process.h"

namespace peerlab::qualify {

extern const char* const kDefaultConfigText;  // generated from reports/qualify.toml (default_config.cc)

namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

Status lineError(const std::string& name, int line, const std::string& why) {
  return PEERLAB_INVALID_ARGUMENT(name + ":" + std::to_string(line) + ": " + why);
}

bool validKey(const std::string& k) {
  if (k.empty()) return false;
  for (char c : k) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
  }
  return true;
}

}  // namespace

bool globMatch(const std::string& pattern, const std::string& text) {
  size_t p = 0, t = 0, star = std::string::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (star != std::string::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*')
    ++p;
  return p == pattern.size();
}

StatusOr<TomlSections> parseToml(const std::string& text, const std::string& name) {
  TomlSections out;
  std::string section;
  out[section];
  std::stringstream ss(text);
  std::string raw;
  int lineNo = 0;
  while (std::getline(ss, raw)) {
    ++lineNo;
    // Strip a comment that is not inside a string.
    std::string line;
    bool inString = false;
    for (size_t i = 0; i < raw.size(); ++i) {
      const char c = raw[i];
      if (c == '"' && (i == 0 || raw[i - 1] != '\\')) inString = !inString;
      if (c == '#' && !inString) break;
      line += c;
    }
    line = trim(line);
    if (line.empty()) continue;
    if (line.front() == '[') {
      if (line.back() != ']' || line.size() < 3) return lineError(name, lineNo, "malformed section header " + line);
      section = trim(line.substr(1, line.size() - 2));
      if (!validKey(section)) return lineError(name, lineNo, "malformed section name \"" + section + "\"");
      if (out.count(section) && !out[section].empty()) {
        return lineError(name, lineNo, "section [" + section + "] appears twice");
      }
      out[section];
      continue;
    }
    // [health] is full TOML (arrays), read by harness/health with toml++.
    if (section == "health") continue;
    const auto eq = line.find('=');
    if (eq == std::string::npos) return lineError(name, lineNo, "expected key = value, got \"" + line + "\"");
    const std::string key = trim(line.substr(0, eq));
    const std::string val = trim(line.substr(eq + 1));
    if (!validKey(key)) return lineError(name, lineNo, "malformed key \"" + key + "\"");
    if (val.empty()) return lineError(name, lineNo, "no value for " + key);
    if (out[section].count(key)) return lineError(name, lineNo, "key " + key + " appears twice in [" + section + "]");
    TomlEntry entry;
    entry.line = lineNo;
    if (val.front() == '"') {
      if (val.size() < 2 || val.back() != '"') return lineError(name, lineNo, "unterminated string for " + key);
      std::string s;
      for (size_t i = 1; i + 1 < val.size(); ++i) {
        if (val[i] == '\\' && i + 2 < val.size()) {
          const char n = val[++i];
          s += n == 'n' ? '\n' : n == 't' ? '\t' : n;
        } else {
          s += val[i];
        }
      }
      entry.value = s;
    } else if (val == "true" || val == "false") {
      entry.value = val == "true";
    } else {
      std::string digits;
      for (char c : val) {
        if (c != '_') digits += c;  // TOML allows 1_000_000
      }
      char* end = nullptr;
      const double d = std::strtod(digits.c_str(), &end);
      if (end == digits.c_str() || *end != '\0' || !std::isfinite(d)) {
        return lineError(name, lineNo, "value of " + key + " is not a number, string or boolean: " + val);
      }
      entry.value = d;
    }
    out[section][key] = entry;
  }
  return out;
}

StatusOr<QualifyConfig> parseConfig(const std::string& text, const std::string& name) {
  PEERLAB_ASSIGN_OR_RETURN(TomlSections toml, parseToml(text, name));
  QualifyConfig cfg;
  cfg.source = name;
  cfg.bandwidth.clear();
  cfg.latency.clear();

  // Typed access with the line in every error.
  auto getNum = [&](const std::string& sec, const std::string& key, const TomlEntry& e, double lo,
                    double hi) -> StatusOr<double> {
    if (!std::holds_alternative<double>(e.value)) {
      return lineError(name, e.line, "[" + sec + "] " + key + " must be a number");
    }
    const double v = std::get<double>(e.value);
    if (v < lo || v > hi) {
      std::ostringstream why;
      why << "[" << sec << "] " << key << " = " << v << " is outside " << lo << " .. " << hi;
      return lineError(name, e.line, why.str());
    }
    return v;
  };
  auto getStr = [&](const std::string& sec, const std::string& key, const TomlEntry& e) -> StatusOr<std::string> {
    if (!std::holds_alternative<std::string>(e.value)) {
      return lineError(name, e.line, "[" + sec + "] " + key + " must be a \"string\"");
    }
    return std::get<std::string>(e.value);
  };
  auto getBool = [&](const std::string& sec, const std::string& key, const TomlEntry& e) -> StatusOr<bool> {
    if (!std::holds_alternative<bool>(e.value)) {
      return lineError(name, e.line, "[" + sec + "] " + key + " must be true or false");
    }
    return std::get<bool>(e.value);
  };
  auto unknown = [&](const std::string& sec, const std::string& key, const TomlEntry& e) {
    return lineError(name, e.line, "unknown key " + key + " in [" + sec + "]");
  };

  for (const auto& [sec, keys] : toml) {
    if (sec.empty()) {
      if (!keys.empty()) return lineError(name, keys.begin()->second.line, "keys must be inside a [section]");
      continue;
    }
    if (sec == "qualify") {
      for (const auto& [k, e] : keys) {
        if (k == "baseline_threshold_pct") {
          PEERLAB_ASSIGN_OR_RETURN(cfg.baseline_threshold_pct, getNum(sec, k, e, 0, 1000));
        } else if (k == "require_link_info") {
          PEERLAB_ASSIGN_OR_RETURN(cfg.require_link_info, getBool(sec, k, e));
        } else if (k == "fail_unclaimed") {
          PEERLAB_ASSIGN_OR_RETURN(cfg.fail_unclaimed, getBool(sec, k, e));
        } else {
          return unknown(sec, k, e);
        }
      }
    } else if (sec == "links") {
      for (const auto& [k, e] : keys) {
        if (k == "nvlink_gbps") {
          PEERLAB_ASSIGN_OR_RETURN(cfg.nvlink_gbps, getNum(sec, k, e, 0.001, 10000));
        } else if (k == "pcie_gbps") {
          PEERLAB_ASSIGN_OR_RETURN(cfg.pcie_gbps, getNum(sec, k, e, 0, 10000));
        } else {
          return unknown(sec, k, e);
        }
      }
    } else if (sec.rfind("expect.", 0) == 0) {
      BandwidthRule r;
      r.id = sec.substr(7);
      bool havePcie = false;
      for (const auto& [k, e] : keys) {
        if (k == "suite") {
          PEERLAB_ASSIGN_OR_RETURN(r.suite, getStr(sec, k, e));
        } else if (k == "impl") {
          PEERLAB_ASSIGN_OR_RETURN(r.impl, getStr(sec, k, e));
        } else if (k == "name") {
          PEERLAB_ASSIGN_OR_RETURN(r.name, getStr(sec, k, e));
        } else if (k == "metric") {
          PEERLAB_ASSIGN_OR_RETURN(r.metric, getStr(sec, k, e));
          if (r.metric != "algbw_gbps" && r.metric != "busbw_gbps") {
            return lineError(name, e.line, "[" + sec + "] metric must be \"algbw_gbps\" or \"busbw_gbps\"");
          }
        } else if (k == "scope") {
          PEERLAB_ASSIGN_OR_RETURN(r.scope, getStr(sec, k, e));
          if (r.scope != "pair" && r.scope != "gpu") {
            return lineError(name, e.line, "[" + sec + "] scope must be \"pair\" or \"gpu\"");
          }
        } else if (k == "directions") {
          PEERLAB_ASSIGN_OR_RETURN(r.directions, getNum(sec, k, e, 0.001, 64));
        } else if (k == "efficiency") {
          PEERLAB_ASSIGN_OR_RETURN(r.efficiency, getNum(sec, k, e, 0, 1.5));
        } else if (k == "pcie_efficiency") {
          PEERLAB_ASSIGN_OR_RETURN(r.pcie_efficiency, getNum(sec, k, e, 0, 1.5));
          havePcie = true;
        } else if (k == "min_bytes") {
          PEERLAB_ASSIGN_OR_RETURN(r.min_bytes, getNum(sec, k, e, 0, 1e15));
        } else if (k == "nvlink_only") {
          PEERLAB_ASSIGN_OR_RETURN(r.nvlink_only, getBool(sec, k, e));
        } else if (k == "note") {
          PEERLAB_ASSIGN_OR_RETURN(r.note, getStr(sec, k, e));
        } else {
          return unknown(sec, k, e);
        }
      }
      if (r.suite.empty()) return PEERLAB_INVALID_ARGUMENT(name + ": [" + sec + "] needs suite = \"...\"");
      if (!havePcie) r.pcie_efficiency = r.efficiency;
      cfg.bandwidth.push_back(r);
    } else if (sec.rfind("latency.", 0) == 0) {
      LatencyRule r;
      r.id = sec.substr(8);
      bool haveMax = false;
      for (const auto& [k, e] : keys) {
        if (k == "suite") {
          PEERLAB_ASSIGN_OR_RETURN(r.suite, getStr(sec, k, e));
        } else if (k == "impl") {
          PEERLAB_ASSIGN_OR_RETURN(r.impl, getStr(sec, k, e));
        } else if (k == "name") {
          PEERLAB_ASSIGN_OR_RETURN(r.name, getStr(sec, k, e));
        } else if (k == "max_bytes") {
          PEERLAB_ASSIGN_OR_RETURN(r.max_bytes, getNum(sec, k, e, 0, 1e15));
        } else if (k == "max_us") {
          PEERLAB_ASSIGN_OR_RETURN(r.max_us, getNum(sec, k, e, 0.001, 1e9));
          haveMax = true;
        } else if (k == "note") {
          PEERLAB_ASSIGN_OR_RETURN(r.note, getStr(sec, k, e));
        } else {
          return unknown(sec, k, e);
        }
      }
      if (r.suite.empty()) return PEERLAB_INVALID_ARGUMENT(name + ": [" + sec + "] needs suite = \"...\"");
      if (!haveMax) return PEERLAB_INVALID_ARGUMENT(name + ": [" + sec + "] needs max_us = <microseconds>");
      cfg.latency.push_back(r);
    } else if (sec == "health") {
      // Checked by health::parseThresholds.
    } else {
      const int line = keys.empty() ? 0 : keys.begin()->second.line;
      return PEERLAB_INVALID_ARGUMENT(name + (line ? ":" + std::to_string(line) : std::string()) +
                                      ": unknown section [" + sec +
                                      "] (known: qualify, links, expect.<id>, latency.<id>, health)");
    }
  }
  return cfg;
}

StatusOr<QualifyConfig> loadConfig(const std::string& path) {
  PEERLAB_ASSIGN_OR_RETURN(std::string text, readTextFile(path));
  return parseConfig(text, path);
}

const std::string& defaultConfigText() {
  static const std::string text = kDefaultConfigText;
  return text;
}

StatusOr<QualifyConfig> defaultConfig() {
  return parseConfig(defaultConfigText(), "built-in reports/qualify.toml");
}

}  // namespace peerlab::qualify
