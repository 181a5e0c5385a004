#include "harness/qualify/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "harness/qualify/estimate.h"
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

// "4.2 s", "95 s", "12 min", "1 h 05 min".
std::string fmtDuration(double s) {
  char buf[48];
  if (s < 10) {
    std::snprintf(buf, sizeof(buf), "%.1f s", s);
  } else if (s < 120) {
    std::snprintf(buf, sizeof(buf), "%.0f s", s);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof(buf), "%.0f min", s / 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%d h %02d min", static_cast<int>(s / 3600), static_cast<int>(s / 60) % 60);
  }
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

const PlanGpu* gpuAt(const PlanTopology& topo, int g) {
  for (const PlanGpu& x : topo.gpus) {
    if (x.index == g) return &x;
  }
  return nullptr;
}

std::string directionsText(double directions) {
  return directions != 1 ? " x " + fmtNum(directions) + " directions" : "";
}

Expectation blank(const BandwidthRule& rule, std::optional<int> src, std::optional<int> dst) {
  Expectation e;
  e.rule = rule.id;
  e.suite = rule.suite;
  e.impl = rule.impl;
  e.name = rule.name;
  e.metric = rule.metric;
  e.src = src;
  e.dst = dst;
  e.min_bytes = rule.min_bytes;
  e.scope = rule.scope;
  return e;
}

// The one PCIe figure: a GPU's link rate (generation x lanes x encoding) x the rule's PCIe efficiency x a path factor x
// directions, and its basis ("PCIe Gen5 x16 63.02 GB/s x 0.80"). `gpu_note` follows the link ("of GPU1", "(GPU1, the
// slower link)"), `factor_note` the factor when it is shown.
void pcieFigure(Expectation& e, const PlanGpu& gpu, const BandwidthRule& rule, double factor, bool show_factor,
                const std::string& gpu_note, const std::string& factor_note) {
  e.gbps = gpu.pcie->gbps * rule.pcie_efficiency * factor * rule.directions;
  e.link = "pcie";
  e.basis = "PCIe " + topology::describePcieLink(*gpu.pcie) + gpu_note + " x " + fmtEff(rule.pcie_efficiency) +
            (show_factor ? " x " + fmtEff(factor) + factor_note : "") + directionsText(rule.directions);
}

// What a process runs, in one line: its row selections ('|' between them), rounds, GPU sets and knobs: "rows
// peerlab.* at 8 B, 64 KiB, 256 MiB; 12 pairs in 6 rounds; knob chase_sm_loads=512".
std::string describeWork(const BenchJob& j) {
  const report::BenchPlan& w = j.work;
  std::string out;
  auto list = [](const auto& items, const auto& fmt) {
    std::string x;
    for (const auto& i : items)
      x += (x.empty() ? "" : ", ") + fmt(i);
    return x;
  };
  if (!j.legacy_args.empty() || !j.legacy_env.empty()) {
    out = "as recorded:";
    for (const std::string& e : j.legacy_env)
      out += " " + e;
    for (const std::string& a : j.legacy_args)
      out += " " + a;
    return out;
  }
  if (w.rows.empty()) {
    out = "every row";
  } else {
    std::vector<std::string> parts;
    for (const report::RowSelection& r : w.rows) {
      std::string p = r.cases.empty() ? "every case" : list(r.cases, [](const std::string& c) { return c; });
      if (!r.sizes.empty())
        p += " at " + list(r.sizes, [](int64_t b) { return report::formatBytes(static_cast<double>(b)); });
      if (!r.pairs.empty()) p += " on " + std::to_string(r.pairs.size()) + (r.pairs.size() == 1 ? " pair" : " pairs");
      if (!r.gpus.empty()) p += " on GPU" + list(r.gpus, [](int g) { return std::to_string(g); });
      parts.push_back(p);
    }
    out = "rows";
    for (size_t i = 0; i < parts.size(); ++i)
      out += (i ? " | " : " ") + parts[i];
  }
  if (!w.rounds.empty()) {
    const size_t pairs = w.pairs().size();
    out += "; " + std::to_string(pairs) + (pairs == 1 ? " pair" : " pairs") + " in " + std::to_string(w.rounds.size()) +
           (w.rounds.size() == 1 ? " round" : " rounds");
  }
  if (!w.gpu_sets.empty()) {
    out += "; GPUs at once: " + list(w.gpu_sets, [&](const std::vector<int>& set) {
             std::string x;
             for (int g : set)
               x += (x.empty() ? "GPU" : "+") + std::to_string(g);
             return x;
           });
  }
  for (const auto& [k, v] : w.knobs)
    out += "; knob " + k + "=" + v;
  return out;
}

}  // namespace

namespace {

// The slowest path among GPU g's peers in `pairs`, for a collective whose traffic crosses every one of them: per
// peer its pair figure (NVLink, or PCIe across sockets), the lowest one kept. Unknown when any peer's is.
Expectation slowestPath(const PlanTopology& topo, const QualifyConfig& config, const BandwidthRule& rule, int g,
                        const std::vector<std::pair<int, int>>& pairs, const std::string& why) {
  Expectation slowest = blank(rule, std::nullopt, std::nullopt);
  for (const auto& [s, d] : pairs) {
    if (s != g) continue;
    Expectation e = pairExpectation(topo, config, rule, s, d);
    e.src.reset();
    e.dst.reset();
    if (!e.gbps) return e;
    if (!slowest.gbps || *e.gbps < *slowest.gbps) {
      slowest = e;
      slowest.basis = "slowest path " + std::to_string(s) + "->" + std::to_string(d) + ", " + why + ": " + e.basis;
    }
  }
  return slowest;
}

}  // namespace

Expectation pairExpectation(const PlanTopology& topo, const QualifyConfig& config, const BandwidthRule& rule, int s,
                            int d) {
  Expectation e = blank(rule, s, d);
  const std::string pairText = std::to_string(s) + "->" + std::to_string(d);
  const PlanPair* p = topo.pair(s, d);
  if (!p || !p->nvlinks) {
    e.basis = "unknown: the topology does not say whether " + pairText + " share NVLinks";
    return e;
  }
  if (*p->nvlinks > 0) {
    double perLink = config.nvlink_gbps;
    if (p->nvlink_gbps && *p->nvlink_gbps > 0) perLink = *p->nvlink_gbps / *p->nvlinks;
    e.gbps = *p->nvlinks * perLink * rule.efficiency * rule.directions;
    e.link = "nvlink";
    e.basis = "NV" + std::to_string(*p->nvlinks) + " x " + fmtNum(perLink) + " GB/s x " + fmtEff(rule.efficiency) +
              directionsText(rule.directions);
    return e;
  }
  const PlanGpu* a = gpuAt(topo, s);
  const PlanGpu* b = gpuAt(topo, d);
  for (const PlanGpu* g : {a, b}) {
    if (!g || !g->pcie) {
      e.basis = "unknown: no NVLink between " + pairText + " and the topology does not give the PCIe rate of GPU" +
                std::to_string(g ? g->index : (g == a ? s : d));
      return e;
    }
  }
  // The slower of the two GPU links bounds the pair; across sockets the SMP interconnect bounds it further.
  const PlanGpu* slow = a->pcie->gbps <= b->pcie->gbps ? a : b;
  const bool sys = p->pci == "SYS";
  const bool same = std::fabs(a->pcie->gbps - b->pcie->gbps) < 1e-9;
  pcieFigure(e, *slow, rule, sys ? config.sys_factor : 1.0, sys,
             same ? "" : " (GPU" + std::to_string(slow->index) + ", the slower link)", " across sockets (SYS)");
  return e;
}

Expectation hostExpectation(const PlanTopology& topo, const BandwidthRule& rule, int g) {
  Expectation e = blank(rule, g, std::nullopt);
  const PlanGpu* gpu = gpuAt(topo, g);
  if (!gpu || !gpu->pcie) {
    e.basis = "unknown: the topology does not give the PCIe rate of GPU" + std::to_string(g);
    return e;
  }
  pcieFigure(e, *gpu, rule, 1.0, false, "", "");
  return e;
}

PlanTopology fromTopology(const topology::Topology& topo) {
  PlanTopology out;
  out.source = topo.source();
  out.format = std::string(topology::sourceFormatName(topo.format()));
  out.nvswitches = topo.nvswitchCount();
  out.nvlink_source = topo.nvlinkSource();
  out.warnings = topo.warnings();
  out.numa_nodes = topo.machine().numa_nodes;
  if (topo.gpus().empty()) out.no_gpu_message = topo.noGpuMessage();
  // On a live machine, the GPUs CUDA does not show this process (CUDA_VISIBLE_DEVICES, or a GPU CUDA cannot use)
  // are listed last by the topology; nothing can run on them, so the plan covers the ones CUDA sees (their indices
  // are their CUDA ordinals) and says which were left out.
  const bool live =
      std::any_of(topo.gpus().begin(), topo.gpus().end(), [](const topology::Gpu& g) { return g.cuda_ordinal >= 0; });
  auto runnable = [&](int index) {
    if (!live) return true;
    for (const topology::Gpu& g : topo.gpus())
      if (g.index == index) return g.cuda_ordinal >= 0;
    return false;
  };
  std::string hidden;
  for (const topology::Gpu& g : topo.gpus()) {
    if (runnable(g.index)) continue;
    hidden += (hidden.empty() ? "" : ", ") + g.bus_id;
  }
  if (!hidden.empty()) {
    const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
    out.warnings.push_back("CUDA does not show this process the GPU(s) at " + hidden +
                           (env != nullptr ? " (CUDA_VISIBLE_DEVICES=" + std::string(env) + ")" : std::string()) +
                           ": they are left out of the plan");
  }
  for (const topology::Gpu& g : topo.gpus()) {
    if (!runnable(g.index)) continue;
    PlanGpu pg;
    pg.index = g.index;
    pg.bus_id = g.bus_id;
    pg.model = g.model;
    pg.uuid = g.uuid;
    pg.nvlinks = g.nvlink_links;
    pg.nvlink_link_gbps = g.nvlink_link_gbps;
    pg.pcie = g.pcie;
    out.gpus.push_back(pg);
  }
  for (const topology::GpuPair& p : topo.pairs()) {
    if (!runnable(p.a) || !runnable(p.b)) continue;
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

Status setPcieLink(PlanTopology& topo, int gpu, int generation, int width, const std::string& source) {
  for (PlanGpu& g : topo.gpus) {
    if (g.index != gpu) continue;
    auto link = topology::pcieLinkFromGenWidth(generation, width, source);
    if (!link.isOk()) return PEERLAB_INVALID_ARGUMENT("GPU" + std::to_string(gpu) + ": " + link.status().message());
    g.pcie = *link;
    return Status::ok();
  }
  return PEERLAB_INVALID_ARGUMENT("GPU" + std::to_string(gpu) + " is not in the topology (" +
                                  std::to_string(topo.gpus.size()) + " GPUs)");
}

StatusOr<std::vector<std::pair<int, int>>> parsePairs(const std::string& text) {
  return probe::parsePairs(text);
}

StatusOr<Plan> makePlan(const PlanTopology& topo, const QualifyConfig& config, const PlanOptions& options) {
  Plan plan;
  plan.topology = topo;
  plan.options = options;
  plan.disabled_rules = config.disabled_rules;
  plan.require_link_info = config.require_link_info;
  plan.fail_unclaimed = config.fail_unclaimed;
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

  // Benchmark processes, and the wall time they are expected to take.
  auto named = [&](const std::string& s) {
    return std::find(options.suites.begin(), options.suites.end(), s) != options.suites.end();
  };
  for (const auto& suite : suites()) {
    const SuiteInfo& info = suite->info();
    if (options.suites.empty() ? !info.in_all : !named(info.name)) continue;
    // A suite whose rows another named suite's process already runs (moe: alltoallv).
    if (!info.rides_with.empty() && named(info.rides_with)) continue;
    if (gpus < info.min_gpus) {
      plan.notes.push_back(info.name + ": needs " + std::to_string(info.min_gpus) + " GPUs, the topology has " +
                           std::to_string(gpus));
      continue;
    }
    if (const std::string why = suite->unavailable(); !why.empty()) {
      plan.notes.push_back(info.name + ": not available: " + why);
      continue;
    }
    SuiteRequest request;
    request.level = options.level;
    request.gpus = gpus;
    request.pairs = pairs;
    request.all_pairs = options.pairs.empty() || pairs.size() == topo.pairs.size();
    request.topology = &plan.topology;
    request.concurrent = options.concurrent;
    for (BenchJob& job : suite->plan(request))
      plan.jobs.push_back(std::move(job));
  }
  estimatePlan(plan);

  // Bandwidth expectations from the links.
  std::set<std::string> unknownLinks;
  std::set<int> unknownMemory;
  for (const BandwidthRule& rule : config.bandwidth) {
    if (rule.scope == "device") {
      // A copy within one GPU's memory reads and writes every byte: half the DRAM peak at most.
      for (const PlanGpu& g : topo.gpus) {
        Expectation e = blank(rule, g.index, g.index);
        auto m = topo.memory_peak_gbps.find(g.index);
        if (m == topo.memory_peak_gbps.end() || m->second <= 0) {
          unknownMemory.insert(g.index);
          e.basis = "unknown: the DRAM rate is read from CUDA on a live run";
        } else {
          e.gbps = m->second / 2 * rule.efficiency;
          e.link = "dram";
          e.basis = "DRAM " + fmtNum(m->second) + " GB/s / 2 (read + write) x " + fmtEff(rule.efficiency);
        }
        plan.expectations.push_back(std::move(e));
      }
      continue;
    }
    if (rule.scope == "pair") {
      for (const auto& [s, d] : pairs) {
        const PlanPair* p = topo.pair(s, d);
        if (rule.nvlink_only && p->nvlinks && *p->nvlinks == 0) continue;
        Expectation e = pairExpectation(topo, config, rule, s, d);
        if (!e.gbps) unknownLinks.insert(std::to_string(s) + "->" + std::to_string(d));
        plan.expectations.push_back(std::move(e));
      }
    } else if (rule.scope == "host") {
      for (const PlanGpu& g : topo.gpus)
        plan.expectations.push_back(hostExpectation(topo, rule, g.index));
    } else {
      // Machine scope: the weakest GPU bounds a collective (gpu: its NVLinks, or its PCIe link without NVLink;
      // gpu_pcie: its PCIe link).
      Expectation floor = blank(rule, std::nullopt, std::nullopt);
      bool sys = false;
      for (const auto& [s, d] : pairs)
        sys |= topo.pair(s, d)->pci == "SYS";
      for (const PlanGpu& g : topo.gpus) {
        Expectation e = blank(rule, std::nullopt, std::nullopt);
        GpuLinks gl = gpuLinks(topo, g.index, config.nvlink_gbps);
        // Partly NVLinked: some of this GPU's peers are reached without NVLink, and a collective waits for its
        // slowest path, so the figure is that path's, not the GPU's NVLinks'.
        std::vector<int> unlinked;
        int peers = 0;
        if (rule.scope == "gpu" && gl.links && *gl.links > 0) {
          for (const auto& [s, d] : pairs) {
            if (s != g.index) continue;
            ++peers;
            const PlanPair* p = topo.pair(s, d);
            if (p->nvlinks && *p->nvlinks == 0) unlinked.push_back(d);
          }
        }
        if (!unlinked.empty()) {
          e = slowestPath(topo, config, rule, g.index, pairs,
                          std::to_string(unlinked.size()) + " of " + std::to_string(peers) + " peers of GPU" +
                              std::to_string(g.index) + " without NVLink");
        } else if (rule.scope == "gpu" && !gl.links) {
          e.basis = "unknown: the topology does not say how many NVLinks GPU" + std::to_string(g.index) + " has";
        } else if (rule.scope == "gpu" && *gl.links > 0) {
          e.gbps = *gl.links * gl.per_link * rule.efficiency * rule.directions;
          e.link = "nvlink";
          e.basis = "NV" + std::to_string(*gl.links) + " per GPU x " + fmtNum(gl.per_link) + " GB/s x " +
                    fmtEff(rule.efficiency) + directionsText(rule.directions);
        } else if (rule.scope == "gpu" && rule.nvlink_only) {
          continue;
        } else if (!g.pcie) {
          e.basis = "unknown: the topology does not give the PCIe rate of GPU" + std::to_string(g.index);
        } else {
          // A collective over PCIe crosses the sockets when any pair does.
          const double factor = rule.scope == "gpu" && sys ? config.sys_factor : 1.0;
          pcieFigure(e, g, rule, factor, factor != 1.0, " of GPU" + std::to_string(g.index), " across sockets");
        }
        // An unknown GPU makes the machine's figure unknown.
        if (!e.gbps) {
          floor = e;
          break;
        }
        if (!floor.gbps || *e.gbps < *floor.gbps) floor = e;
      }
      if (floor.gbps || !floor.basis.empty()) plan.expectations.push_back(floor);
    }
  }
  if (!unknownLinks.empty()) {
    plan.notes.push_back("the topology (" + topo.source + ") does not say how " + std::to_string(unknownLinks.size()) +
                         " pair(s) are linked (" +
                         (topo.format == "live"
                              ? std::string("NVML unavailable?")
                              : std::string("a live run reads NVLink from NVML and PCIe from sysfs")) +
                         "): their figures are unknown and no bandwidth is expected of them");
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
    if (report::expectationApplies(e, r)) out.push_back(&e);
  }
  return out;
}

std::string formatPlan(const Plan& plan, const std::string& command) {
  const PlanTopology& t = plan.topology;
  std::ostringstream o;
  o << command << " plan (level " << levelName(plan.options.level) << ") for " << t.source << " [" << t.format << "]\n";
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
    o << "  PCIe " << (g.pcie ? topology::describePcieLink(*g.pcie) : std::string("unknown"));
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
  o << "Benchmarks (" << plan.jobs.size() << (plan.jobs.size() == 1 ? " process" : " processes")
    << "; estimated wall time " << fmtDuration(plan.budget_s) << ": " << fmtDuration(plan.processes_s)
    << " of processes + " << fmtDuration(plan.overhead_s)
    << (plan.options.probe ? " of probe, topology, health and bundle" : " of topology, health and bundle") << "):\n";
  for (const BenchJob& j : plan.jobs) {
    o << "  " << j.label << ": " << j.binary;
    if (j.ranks > 1) o << " --ranks=" << j.ranks;
    o << " --plan  (about " << fmtDuration(j.budget_s) << ")\n";
    o << "    " << describeWork(j) << "\n";
    if (!j.guard_for.empty())
      o << "    serial sample: the concurrent rounds of \"" << j.guard_for << "\" must agree with it\n";
    if (!j.schedule_basis.empty() && j.guard_for.empty()) o << "    " << j.schedule_basis << "\n";
  }
  if (!plan.expectations.empty()) {
    o << "Expected figures (NVLink: links x per-link rate x efficiency; PCIe: link rate x efficiency x path "
         "factor):\n";
    // One line per rule and figure, listing the pairs that share it.
    struct Group {
      const Expectation* e;
      std::vector<std::string> pairs;
    };
    std::vector<Group> groups;
    // Found by key (a linear search made a 64-GPU plan take seconds): figures within 1e-9 of each other are one.
    std::map<std::tuple<std::string, bool, long long, std::string>, size_t> groupOf;
    for (const Expectation& e : plan.expectations) {
      const auto key = std::make_tuple(e.rule, e.gbps.has_value(), std::llround(e.gbps.value_or(0) * 1e9), e.basis);
      auto [it, fresh] = groupOf.emplace(key, groups.size());
      if (fresh) groups.push_back({&e, {}});
      Group* g = &groups[it->second];
      if (e.src && e.dst && *e.dst != *e.src) {
        g->pairs.push_back(std::to_string(*e.src) + "->" + std::to_string(*e.dst));
      } else if (e.src) {
        g->pairs.push_back("GPU" + std::to_string(*e.src));
      }
    }
    for (const Group& g : groups) {
      const Expectation& e = *g.e;
      o << "  " << e.rule << ": " << e.suite << " " << e.impl << " " << e.name << " "
        << (e.metric == "busbw_gbps" ? "busbw" : "algbw");
      if (e.gbps) {
        o << " >= " << fmtGbps(*e.gbps) << " GB/s (" << e.basis << ")";
      } else {
        o << " " << e.basis;
      }
      if (e.min_bytes > 0) o << " at >= " << report::formatBytes(e.min_bytes);
      if (g.pairs.empty()) {
        o << ", whole machine";
      } else if (g.e->scope == "host" || g.e->scope == "device") {
        o << ", per GPU:";
        for (const auto& p : g.pairs)
          o << " " << p;
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
  for (const std::string& r : plan.disabled_rules)
    o << "disabled by the config: " << r << " (its figures are not expected)\n";
  for (const std::string& n : plan.notes)
    o << "note: " << n << "\n";
  for (const std::string& w : t.warnings)
    o << "topology warning: " << w << "\n";
  return o.str();
}

nlohmann::json toJson(const Plan& plan) {
  nlohmann::json jobs = nlohmann::json::array();
  for (const BenchJob& j : plan.jobs)
    jobs.push_back(report::toJson(j));
  nlohmann::json exp = nlohmann::json::array();
  for (const Expectation& e : plan.expectations)
    exp.push_back(report::toJson(e));
  nlohmann::json lat = nlohmann::json::array();
  for (const LatencyRule& l : plan.latency)
    lat.push_back(report::toJson(l));
  nlohmann::json pairs = nlohmann::json::array();
  for (const auto& [s, d] : plan.options.pairs)
    pairs.push_back({s, d});
  return {{"level", std::string(levelName(plan.options.level))},
          {"topology", report::toJson(plan.topology)},
          {"pairs", pairs},
          // Whether the verified probe runs (not a suite).
          {"probe", plan.options.probe},
          {"probe_methods", plan.options.probe_methods},
          {"disabled_rules", plan.disabled_rules},
          {"checks", {{"require_link_info", plan.require_link_info}, {"fail_unclaimed", plan.fail_unclaimed}}},
          {"jobs", jobs},
          {"expectations", exp},
          {"latency", lat},
          {"notes", plan.notes},
          {"budget_s", plan.budget_s},
          {"budget",
           {{"estimate_s", plan.budget_s},
            {"processes_s", plan.processes_s},
            {"overhead_s", plan.overhead_s},
            {"history_s", plan.history_s},
            {"basis", "wall-time estimate: " + plan.estimate_basis}}}};
}

}  // namespace peerlab::qualify
