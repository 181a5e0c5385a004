// The [health] section of a qualify config, read with toml++.
#include <toml++/toml.h>

#include <algorithm>
#include <sstream>

#include "harness/health/health.h"

namespace peerlab::health {
namespace {

std::string where(const std::string& name, const toml::node& n) {
  const auto& src = n.source();
  return name + (src.begin.line ? ":" + std::to_string(src.begin.line) : std::string());
}

}  // namespace

StatusOr<Thresholds> parseThresholds(const std::string& toml_text, const std::string& name, const Thresholds& base) {
  Thresholds t = base;
  toml::table doc;
  try {
    doc = toml::parse(toml_text, name);
  } catch (const toml::parse_error& e) {
    std::ostringstream why;
    why << name << ":" << e.source().begin.line << ": " << e.description();
    return PEERLAB_INVALID_ARGUMENT(why.str());
  }
  const toml::node* section = doc.get("health");
  if (!section) return t;
  const toml::table* h = section->as_table();
  if (!h) return PEERLAB_INVALID_ARGUMENT(where(name, *section) + ": [health] must be a table");

  for (const auto& [key_view, node] : *h) {
    const std::string key(key_view.str());
    auto bad = [&](const std::string& why) {
      return PEERLAB_INVALID_ARGUMENT(where(name, node) + ": [health] " + key + " " + why);
    };
    auto number = [&](double lo, double hi, double* out) -> Status {
      std::optional<double> v = node.value<double>();
      if (!v || !node.is_number()) return bad("must be a number");
      if (*v < lo || *v > hi) {
        std::ostringstream why;
        why << "= " << *v << " is outside " << lo << " .. " << hi;
        return bad(why.str());
      }
      *out = *v;
      return Status::ok();
    };
    auto verdict = [&](std::string* out) -> Status {
      std::optional<std::string> v = node.value<std::string>();
      if (!v || (*v != "ok" && *v != "warn" && *v != "fail")) return bad("must be \"ok\", \"warn\" or \"fail\"");
      *out = *v;
      return Status::ok();
    };
    if (key == "pcie_min_gen") {
      double v = 0;
      PEERLAB_RETURN_IF_ERROR(number(1, 10, &v));
      t.pcie_min_gen = static_cast<int>(v);
    } else if (key == "pcie_gen_below_max") {
      PEERLAB_RETURN_IF_ERROR(verdict(&t.pcie_gen_below_max));
    } else if (key == "pcie_width_below_max") {
      PEERLAB_RETURN_IF_ERROR(verdict(&t.pcie_width_below_max));
    } else if (key == "pcie_max_replays") {
      PEERLAB_RETURN_IF_ERROR(number(0, 1e12, &t.pcie_max_replays));
    } else if (key == "pcie_max_correctable") {
      PEERLAB_RETURN_IF_ERROR(number(-1, 1e12, &t.pcie_max_correctable));
    } else if (key == "nvlink_max_recovery") {
      PEERLAB_RETURN_IF_ERROR(number(0, 1e12, &t.nvlink_max_recovery));
    } else if (key == "nvlink_max_crc_per_s") {
      PEERLAB_RETURN_IF_ERROR(number(0, 1e12, &t.nvlink_max_crc_per_s));
    } else if (key == "ecc_max_volatile_corrected") {
      PEERLAB_RETURN_IF_ERROR(number(-1, 1e12, &t.ecc_max_volatile_corrected));
    } else if (key == "ecc_aggregate_uncorrected") {
      PEERLAB_RETURN_IF_ERROR(verdict(&t.ecc_aggregate_uncorrected));
    } else if (key == "retired_pages_max") {
      PEERLAB_RETURN_IF_ERROR(number(1, 1e9, &t.retired_pages_max));
    } else if (key == "row_remap_max_uncorrected") {
      PEERLAB_RETURN_IF_ERROR(number(1, 1e9, &t.row_remap_max_uncorrected));
    } else if (key == "watch_poll_ms") {
      PEERLAB_RETURN_IF_ERROR(number(10, 5000, &t.watch_poll_ms));
    } else if (key == "wake_ms") {
      PEERLAB_RETURN_IF_ERROR(number(0, 5000, &t.wake_ms));
    } else if (key == "clock_fail_reasons") {
      const toml::array* a = node.as_array();
      if (!a) return bad("must be an array of reason names");
      t.clock_fail_reasons.clear();
      for (const toml::node& e : *a) {
        std::optional<std::string> s = e.value<std::string>();
        if (!s || clockReasonBit(*s) == 0) {
          return bad(
              "has an unknown reason (known: sw_power_cap, hw_slowdown, sw_thermal, hw_thermal, hw_power_brake, "
              "sync_boost, applications_clocks, display_clocks)");
        }
        t.clock_fail_reasons.push_back(*s);
      }
    } else if (key == "xid_ignore") {
      const toml::array* a = node.as_array();
      if (!a) return bad("must be an array of XID numbers");
      t.xid_ignore.clear();
      for (const toml::node& e : *a) {
        std::optional<int64_t> x = e.value<int64_t>();
        if (!x || !e.is_integer() || *x < 1 || *x > 100000) return bad("must hold XID numbers (1 .. 100000)");
        t.xid_ignore.push_back(static_cast<int>(*x));
      }
    } else {
      return PEERLAB_INVALID_ARGUMENT(where(name, node) + ": unknown key " + key + " in [health]");
    }
  }
  return t;
}

}  // namespace peerlab::health
