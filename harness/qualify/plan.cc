#include "harness/qualify/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "harness/report/compare.h"

namespace peerlab::qualify {

namespace {

std::string fmtNum(double v) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

std::string fmtGbps(double v) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

std::string fmtEff(double v) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.2f", v);
  return buf;
}

// NVLink count, per-link rate and their basis for one GPU (all its links), or nullopt when unknown.
struct GpuLinks {
  std::optional<int> links;
  double per_link = 0;
};

GpuLinks gpuLinks(const PlanTopology& topo, int g, double fallback_rate) {
  GpuLinks out;
  const PlanGpu* gpu = nullptr;
  for (const PlanGpu& x : topo.gpus) {
    if (x.index == g) gpu = &x;
  }
  out.per_link = fallback_rate;
  if (gpu && gpu->nvlink_link_gbps && *gpu->nvlink_link_gbps > 0) out.per_link = *gpu->nvlink_link_gbps;
  if (gpu && gpu->nvlinks) {
    out.links = *gpu->nvlinks;
    return out;
  }
  // From the pairs: through NVSwitches every pair reports the GPU's own links (take the most); direct links add up.
  int sum = 0, most = 0;
  bool anySwitch = false;
  for (const PlanPair& p : topo.pairs) {
    if (p.src != g) continue;
    if (!p.nvlinks) return out;
    sum += *p.nvlinks;
    most = std::max(most, *p.nvlinks);
    anySwitch |= p.nvswitch;
    if (p.nvlink_gbps && *p.nvlinks > 0 && !(gpu && gpu->nvlink_link_gbps)) out.per_link = *p.nvlink_gbps / *p.nvlinks;
  }
  out.links = anySwitch ? most : sum;
  return out;
}

}  // namespace

const PlanPair* PlanTopology::pair(int src, int dst) const {
  for (const PlanPair& p : pairs) {
    if (p.src == src && p.dst == dst) return &p;
  }
  return nullptr;
}

PlanTopology fromTopology(const topology::Topology& topo) {
  PlanTopology out;
  out.source = topo.source();
  out.format = std::string(topology::sourceFormatName(topo.format()));
  out.nvswitches = topo.nvswitchCount();
  out.nvlink_source = topo.nvlinkSource();
  out.warnings = topo.warnings();
  if (topo.gpus().empty()) out.no_gpu_message = topo.noGpuMessage();
  for (const topology::Gpu& g : topo.gpus()) {
    PlanGpu pg;
    pg.index = g.index;
    pg.bus_id = g.bus_id;
    pg.model = g.model;
    pg.uuid = g.uuid;
    pg.nvlinks = g.nvlink_links;
    pg.nvlink_link_gbps = g.nvlink_link_gbps;
    out.gpus.push_back(pg);
  }
  for (const topology::GpuPair& p : topo.pairs()) {
    for (int dir = 0; dir < 2; ++dir) {
      PlanPair pp;
      pp.src = dir ? p.b : p.a;
      pp.dst = dir ? p.a : p.b;
      pp.pci = std::string(topology::pciPathName(p.pci));
      pp.nvlinks = p.nvlink_links;
      pp.nvlink_gbps = p.nvlink_gbps;
      pp.nvswitch = p.nvswitch;
      out.pairs.push_back(pp);
    }
  }
  std::sort(out.pairs.begin(), out.pairs.end(),
            [](const PlanPair& x, const PlanPair& y) { return std::tie(x.src, x.dst) < std::tie(y.src, y.dst); });
  return out;
}

nlohmann::json toJson(const PlanTopology& topo) {
  nlohmann::json gpus = nlohmann::json::array();
  for (const PlanGpu& g : topo.gpus) {
    nlohmann::json j = {{"index", g.index}, {"bus_id", g.bus_id}, {"model", g.model}, {"uuid", g.uuid}};
    j["nvlinks"] = g.nvlinks ? nlohmann::json(*g.nvlinks) : nlohmann::json(nullptr);
    j["nvlink_link_gbps"] = g.nvlink_link_gbps ? nlohmann::json(*g.nvlink_link_gbps) : nlohmann::json(nullptr);
    if (auto m = topo.memory_peak_gbps.find(g.index); m != topo.memory_peak_gbps.end())
      j["memory_peak_gbps"] = m->second;
    gpus.push_back(j);
  }
  nlohmann::json pairs = nlohmann::json::array();
  for (const PlanPair& p : topo.pairs) {
    nlohmann::json j = {{"src", p.src}, {"dst", p.dst}, {"pci", p.pci}, {"nvswitch", p.nvswitch}};
    j["nvlinks"] = p.nvlinks ? nlohmann::json(*p.nvlinks) : nlohmann::json(nullptr);
    j["nvlink_gbps"] = p.nvlink_gbps ? nlohmann::json(*p.nvlink_gbps) : nlohmann::json(nullptr);
    pairs.push_back(j);
  }
  return {{"source", topo.source},    {"format", topo.format},         {"gpus", gpus},
          {"pairs", pairs},           {"nvswitches", topo.nvswitches}, {"nvlink_source", topo.nvlink_source},
          {"warnings", topo.warnings}};
}

StatusOr<PlanTopology> planTopologyFromJson(const nlohmann::json& doc) {
  try {
    PlanTopology t;
    t.source = doc.value("source", "");
    t.format = doc.value("format", "");
    t.nvswitches = doc.value("nvswitches", 0);
    t.nvlink_source = doc.value("nvlink_source", "");
    for (const auto& g : doc.at("gpus")) {
      PlanGpu pg;
      pg.index = g.at("index").get<int>();
      pg.bus_id = g.value("bus_id", "");
      pg.model = g.value("model", "");
      pg.uuid = g.value("uuid", "");
      if (g.contains("nvlinks") && g["nvlinks"].is_number_integer()) pg.nvlinks = g["nvlinks"].get<int>();
      if (g.contains("nvlink_link_gbps") && g["nvlink_link_gbps"].is_number()) {
        pg.nvlink_link_gbps = g["nvlink_link_gbps"].get<double>();
      }
      if (g.contains("memory_peak_gbps") && g["memory_peak_gbps"].is_number()) {
        t.memory_peak_gbps[pg.index] = g["memory_peak_gbps"].get<double>();
      }
      t.gpus.push_back(pg);
    }
    for (const auto& p : doc.at("pairs")) {
      PlanPair pp;
      pp.src = p.at("src").get<int>();
      pp.dst = p.at("dst").get<int>();
      pp.pci = p.value("pci", "");
      pp.nvswitch = p.value("nvswitch", false);
      if (p.contains("nvlinks") && p["nvlinks"].is_number_integer()) pp.nvlinks = p["nvlinks"].get<int>();
      if (p.contains("nvlink_gbps") && p["nvlink_gbps"].is_number()) pp.nvlink_gbps = p["nvlink_gbps"].get<double>();
      t.pairs.push_back(pp);
    }
    if (doc.contains("warnings") && doc["warnings"].is_array()) {
      for (const auto& w : doc["warnings"]) {
        if (w.is_string()) t.warnings.push_back(w.get<std::string>());
      }
    }
    return t;
  } catch (const nlohmann::json::exception& e) {
    return PEERLAB_INVALID_ARGUMENT(std::string("stored topology: ") + e.what());
  }
}

StatusOr<std::vector<std::pair<int, int>>> parsePairs(const std::string& text) {
  std::vector<std::pair<int, int>> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    auto sep = item.find_first_of("-:");
    if (item.rfind("->") != std::string::npos) sep = item.rfind("->");
    if (sep == std::string::npos)
      return PEERLAB_INVALID_ARGUMENT("pair \"" + item + "\": expected SRC-DST such as 0-1");
    const std::string a = item.substr(0, sep);
    const std::string b =
        item.substr(item[sep] == '-' && sep + 1 < item.size() && item[sep + 1] == '>' ? sep + 2 : sep + 1);
    auto isNum = [](const std::string& s) {
      return !s.empty() && s.size() < 6 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    if (!isNum(a) || !isNum(b)) return PEERLAB_INVALID_ARGUMENT("pair \"" + item + "\": expected SRC-DST such as 0-1");
    if (a == b) return PEERLAB_INVALID_ARGUMENT("pair \"" + item + "\": source and destination are the same GPU");
    out.emplace_back(std::stoi(a), std::stoi(b));
  }
  if (out.empty()) return PEERLAB_INVALID_ARGUMENT("no pairs in \"" + text + "\"");
  return out;
}

StatusOr<Plan> makePlan(const PlanTopology& topo, const QualifyConfig& config, const PlanOptions& options) {
  Plan plan;
  plan.topology = topo;
  plan.options = options;
  if (options.mode != "quick" && options.mode != "full") {
    return PEERLAB_INVALID_ARGUMENT("mode \"" + options.mode + "\": expected quick or full");
  }
  for (const std::string& s : options.suites) {
    if (!findSuite(s)) return PEERLAB_INVALID_ARGUMENT("unknown suite \"" + s + "\" (known: " + suiteNames() + ")");
  }
  std::vector<std::pair<int, int>> pairs;
  if (options.pairs.empty()) {
    for (const PlanPair& p : topo.pairs)
      pairs.emplace_back(p.src, p.dst);
  } else {
    for (const auto& [s, d] : options.pairs) {
      if (!topo.pair(s, d)) {
        return PEERLAB_INVALID_ARGUMENT("pair " + std::to_string(s) + "-" + std::to_string(d) +
                                        " is not in the topology (" + std::to_string(topo.gpus.size()) + " GPUs)");
      }
      pairs.emplace_back(s, d);
    }
  }
  plan.options.pairs = pairs;
  if (topo.gpus.empty()) {
    plan.notes.push_back(topo.no_gpu_message.empty() ? "no NVIDIA GPU in this topology" : topo.no_gpu_message);
    return plan;
  }
  const int gpus = static_cast<int>(topo.gpus.size());

  // Benchmark processes.
  auto named = [&](const std::string& s) {
    return std::find(options.suites.begin(), options.suites.end(), s) != options.suites.end();
  };
  for (const SuiteSpec& spec : suiteSpecs()) {
    if (options.suites.empty() ? !spec.in_all : !named(spec.name)) continue;
    // The alltoallv process already runs the moe rows.
    if (spec.name == "moe" && named("alltoallv")) continue;
    if (gpus < spec.min_gpus) {
      plan.notes.push_back(spec.name + ": needs " + std::to_string(spec.min_gpus) + " GPUs, the topology has " +
                           std::to_string(gpus));
      continue;
    }
    for (BenchJob& job :
         jobsFor(spec, options.mode, gpus, pairs, options.pairs.empty() || pairs.size() == topo.pairs.size())) {
      plan.budget_s += job.budget_s;
      plan.jobs.push_back(std::move(job));
    }
  }

  // Bandwidth expectations from the links.
  std::set<std::string> unknownLinks;
  std::set<int> unknownMemory;
  for (const BandwidthRule& rule : config.bandwidth) {
    if (rule.scope == "host") {
      // Each GPU's link to the host.
      if (config.pcie_gbps <= 0) continue;
      for (const PlanGpu& g : topo.gpus) {
        const double v = config.pcie_gbps * rule.pcie_efficiency * rule.directions;
        const std::string dirs = rule.directions != 1 ? " x " + fmtNum(rule.directions) + " directions" : "";
        plan.expectations.push_back(
            {rule.id, rule.suite, rule.impl, rule.name, rule.metric, g.index, std::nullopt, rule.min_bytes, v,
             "PCIe " + fmtNum(config.pcie_gbps) + " GB/s x " + fmtEff(rule.pcie_efficiency) + dirs});
      }
      continue;
    }
    if (rule.scope == "device") {
      // A copy within one GPU's memory reads and writes every byte: half the DRAM peak at most.
      for (const PlanGpu& g : topo.gpus) {
        auto m = topo.memory_peak_gbps.find(g.index);
        if (m == topo.memory_peak_gbps.end() || m->second <= 0) {
          unknownMemory.insert(g.index);
          continue;
        }
        plan.expectations.push_back(
            {rule.id, rule.suite, rule.impl, rule.name, rule.metric, g.index, g.index, rule.min_bytes,
             m->second / 2 * rule.efficiency,
             "DRAM " + fmtNum(m->second) + " GB/s / 2 (read + write) x " + fmtEff(rule.efficiency)});
      }
      continue;
    }
    if (rule.scope == "pair") {
      for (const auto& [s, d] : pairs) {
        const PlanPair* p = topo.pair(s, d);
        Expectation e{rule.id, rule.suite, rule.impl, rule.name, rule.metric, s, d, rule.min_bytes, 0, ""};
        const std::string dirs = rule.directions != 1 ? " x " + fmtNum(rule.directions) + " directions" : "";
        if (!p->nvlinks) {
          unknownLinks.insert(std::to_string(s) + "->" + std::to_string(d));
          continue;
        }
        if (*p->nvlinks > 0) {
          double perLink = config.nvlink_gbps;
          if (p->nvlink_gbps && *p->nvlink_gbps > 0) perLink = *p->nvlink_gbps / *p->nvlinks;
          e.gbps = *p->nvlinks * perLink * rule.efficiency * rule.directions;
          e.basis = "NV" + std::to_string(*p->nvlinks) + " x " + fmtNum(perLink) + " GB/s x " +
                    fmtEff(rule.efficiency) + dirs;
        } else {
          if (rule.nvlink_only || config.pcie_gbps <= 0) continue;
          e.gbps = config.pcie_gbps * rule.pcie_efficiency * rule.directions;
          e.basis =
              "PCIe (" + p->pci + ") " + fmtNum(config.pcie_gbps) + " GB/s x " + fmtEff(rule.pcie_efficiency) + dirs;
        }
        plan.expectations.push_back(e);
      }
    } else {
      // Machine scope: the weakest GPU bounds a collective.
      std::optional<double> floor;
      std::string basis;
      bool unknown = false;
      for (const PlanGpu& g : topo.gpus) {
        GpuLinks gl = gpuLinks(topo, g.index, config.nvlink_gbps);
        if (!gl.links) {
          unknown = true;
          break;
        }
        double v;
        std::string b;
        if (*gl.links > 0) {
          v = *gl.links * gl.per_link * rule.efficiency * rule.directions;
          b = "NV" + std::to_string(*gl.links) + " per GPU x " + fmtNum(gl.per_link) + " GB/s x " +
              fmtEff(rule.efficiency);
        } else {
          if (rule.nvlink_only || config.pcie_gbps <= 0) continue;
          v = config.pcie_gbps * rule.pcie_efficiency * rule.directions;
          b = "PCIe " + fmtNum(config.pcie_gbps) + " GB/s per GPU x " + fmtEff(rule.pcie_efficiency);
        }
        if (!floor || v < *floor) {
          floor = v;
          basis = b;
        }
      }
      if (unknown) continue;  // the pairs behind it are reported below
      if (!floor) continue;
      plan.expectations.push_back({rule.id, rule.suite, rule.impl, rule.name, rule.metric, std::nullopt, std::nullopt,
                                   rule.min_bytes, *floor, basis});
    }
  }
  if (!unknownLinks.empty()) {
    plan.notes.push_back("the topology (" + topo.source + ") does not say how " + std::to_string(unknownLinks.size()) +
                         " pair(s) are linked (no NVLink information" +
                         (topo.format == "live" ? "; NVML unavailable?" : "; a live run reads NVLink from NVML") +
                         "): no bandwidth is expected of them");
  }
  if (!unknownMemory.empty()) {
    plan.notes.push_back("the memory bandwidth of " + std::to_string(unknownMemory.size()) +
                         " GPU(s) is unknown (only a live run reads it from CUDA): no device-local copy rate is "
                         "expected of them");
  }

  plan.latency = config.latency;
  return plan;
}

std::vector<const Expectation*> expectationsFor(const Plan& plan, const report::Result& r) {
  std::vector<const Expectation*> out;
  for (const Expectation& e : plan.expectations) {
    if (e.suite != r.suite || !globMatch(e.impl, r.impl) || !globMatch(e.name, r.name)) continue;
    if (e.src && (r.src != e.src || r.dst != e.dst)) continue;
    out.push_back(&e);
  }
  return out;
}

std::string formatPlan(const Plan& plan) {
  const PlanTopology& t = plan.topology;
  std::ostringstream o;
  o << "peerlab qualify plan (" << plan.options.mode << ") for " << t.source << " [" << t.format << "]\n";
  if (t.gpus.empty()) {
    o << "no NVIDIA GPU: " << (t.no_gpu_message.empty() ? t.source : t.no_gpu_message) << "\n";
    return o.str();
  }
  std::map<std::string, int> models;
  for (const PlanGpu& g : t.gpus)
    ++models[g.model];
  o << "GPUs: " << t.gpus.size();
  for (const auto& [m, n] : models)
    o << " (" << n << "x " << m << ")";
  o << ", NVSwitches: " << t.nvswitches
    << ", NVLink information: " << (t.nvlink_source.empty() ? "none" : t.nvlink_source) << "\n";
  for (const PlanGpu& g : t.gpus) {
    o << "  GPU" << g.index << "  " << g.bus_id << "  " << g.model;
    if (g.nvlinks) o << "  " << *g.nvlinks << " NVLinks";
    o << "\n";
  }
  o << "Pairs (" << plan.options.pairs.size() << " ordered):\n";
  for (const auto& [s, d] : plan.options.pairs) {
    const PlanPair* p = t.pair(s, d);
    if (!p) continue;
    o << "  " << s << "->" << d << "  ";
    if (!p->nvlinks) {
      o << "NVLink unknown";
    } else if (*p->nvlinks > 0) {
      o << "NV" << *p->nvlinks << (p->nvswitch ? " via NVSwitch" : "");
      if (p->nvlink_gbps) o << " (" << fmtGbps(*p->nvlink_gbps) << " GB/s per direction)";
    } else {
      o << "no NVLink";
    }
    o << "  PCIe path " << p->pci << "\n";
  }
  if (plan.options.probe) {
    o << "Probe: peerlab probe on " << plan.options.pairs.size() << " ordered pairs, "
      << (plan.options.probe_methods.empty() ? std::string("every method")
                                             : "methods " +
                                                   [&] {
                                                     std::string m;
                                                     for (const auto& x : plan.options.probe_methods)
                                                       m += (m.empty() ? "" : ",") + x;
                                                     return m;
                                                   }())
      << "\n";
  }
  o << "Benchmarks (" << plan.jobs.size() << " processes, budget about "
    << static_cast<int>(std::ceil(plan.budget_s / 60)) << " min):\n";
  for (const BenchJob& j : plan.jobs) {
    o << "  " << j.label << ": ";
    for (const std::string& e : j.env)
      o << e << " ";
    o << j.binary;
    for (const std::string& a : j.args)
      o << " " << a;
    o << "  (" << static_cast<int>(j.budget_s) << " s)\n";
  }
  if (!plan.expectations.empty()) {
    o << "Expected figures (links x per-link rate x efficiency):\n";
    // One line per rule and figure, listing the pairs that share it.
    struct Group {
      const Expectation* e;
      std::vector<std::string> pairs;
    };
    std::vector<Group> groups;
    for (const Expectation& e : plan.expectations) {
      Group* g = nullptr;
      for (Group& x : groups) {
        if (x.e->rule == e.rule && std::fabs(x.e->gbps - e.gbps) < 1e-9 && x.e->basis == e.basis) g = &x;
      }
      if (!g) {
        groups.push_back({&e, {}});
        g = &groups.back();
      }
      // A GPU's own figure (host link, device-local copy) is named by the GPU.
      if (e.src && (!e.dst || *e.dst == *e.src)) {
        g->pairs.push_back("GPU" + std::to_string(*e.src));
      } else if (e.src) {
        g->pairs.push_back(std::to_string(*e.src) + "->" + std::to_string(*e.dst));
      }
    }
    for (const Group& g : groups) {
      const Expectation& e = *g.e;
      o << "  " << e.rule << ": " << e.suite << " " << e.impl << " " << e.name << " "
        << (e.metric == "busbw_gbps" ? "busbw" : "algbw") << " >= " << fmtGbps(e.gbps) << " GB/s (" << e.basis << ")";
      if (e.min_bytes > 0) o << " at >= " << report::formatBytes(e.min_bytes);
      if (g.pairs.empty()) {
        o << ", whole machine";
      } else if (g.pairs.front().rfind("GPU", 0) == 0) {
        o << (g.pairs.size() == plan.topology.gpus.size() && g.pairs.size() > 3 ? ", every GPU" : ",");
        if (g.pairs.size() != plan.topology.gpus.size() || g.pairs.size() <= 3) {
          for (const auto& p : g.pairs)
            o << " " << p;
        }
      } else if (g.pairs.size() == plan.options.pairs.size() && g.pairs.size() > 3) {
        o << ", all " << g.pairs.size() << " pairs";
      } else {
        o << ", pairs";
        for (const auto& p : g.pairs)
          o << " " << p;
      }
      o << "\n";
    }
  }
  if (!plan.latency.empty()) {
    o << "Latency bounds:\n";
    for (const LatencyRule& l : plan.latency) {
      o << "  " << l.id << ": " << l.suite << " " << l.impl << " " << l.name
        << " at <= " << (l.max_bytes >= 1e14 ? std::string("any size") : report::formatBytes(l.max_bytes))
        << ": <= " << fmtNum(l.max_us) << " us\n";
    }
  }
  for (const std::string& n : plan.notes)
    o << "note: " << n << "\n";
  for (const std::string& w : t.warnings)
    o << "topology warning: " << w << "\n";
  return o.str();
}

nlohmann::json toJson(const Plan& plan) {
  nlohmann::json jobs = nlohmann::json::array();
  for (const BenchJob& j : plan.jobs) {
    nlohmann::json x = {{"suite", j.suite}, {"binary", j.binary},     {"args", j.args},
                        {"ranks", j.ranks}, {"budget_s", j.budget_s}, {"label", j.label}};
    x["src"] = j.src ? nlohmann::json(*j.src) : nlohmann::json(nullptr);
    x["dst"] = j.dst ? nlohmann::json(*j.dst) : nlohmann::json(nullptr);
    jobs.push_back(x);
  }
  nlohmann::json exp = nlohmann::json::array();
  for (const Expectation& e : plan.expectations) {
    nlohmann::json x = {{"rule", e.rule},     {"suite", e.suite},         {"impl", e.impl}, {"name", e.name},
                        {"metric", e.metric}, {"min_bytes", e.min_bytes}, {"gbps", e.gbps}, {"basis", e.basis}};
    x["src"] = e.src ? nlohmann::json(*e.src) : nlohmann::json(nullptr);
    x["dst"] = e.dst ? nlohmann::json(*e.dst) : nlohmann::json(nullptr);
    exp.push_back(x);
  }
  nlohmann::json lat = nlohmann::json::array();
  for (const LatencyRule& l : plan.latency) {
    lat.push_back({{"rule", l.id},
                   {"suite", l.suite},
                   {"impl", l.impl},
                   {"name", l.name},
                   {"max_bytes", l.max_bytes},
                   {"max_us", l.max_us}});
  }
  nlohmann::json pairs = nlohmann::json::array();
  for (const auto& [s, d] : plan.options.pairs)
    pairs.push_back({s, d});
  return {{"mode", plan.options.mode},
          {"topology", toJson(plan.topology)},
          {"pairs", pairs},
          {"probe", plan.options.probe},
          {"jobs", jobs},
          {"expectations", exp},
          {"latency", lat},
          {"notes", plan.notes},
          {"budget_s", plan.budget_s}};
}

}  // namespace peerlab::qualify
