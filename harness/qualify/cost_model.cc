#include "harness/qualify/cost_model.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace peerlab::qualify {

namespace cost {

namespace {

constexpr double kLinkEfficiency = 0.8;
constexpr double kUnknownGbps = 12;        // a link the topology cannot rate: a slow PCIe Gen3 x16
constexpr double kNvlinkDefaultGbps = 25;  // per link, when the topology gives no rate

const report::PlanGpu* gpuAt(const report::PlanTopology& t, int g) {
  for (const report::PlanGpu& x : t.gpus) {
    if (x.index == g) return &x;
  }
  return nullptr;
}

}  // namespace

double hostRate(const report::PlanTopology& t, int g) {
  const report::PlanGpu* gpu = gpuAt(t, g);
  return gpu && gpu->pcie ? gpu->pcie->gbps * 0.85 : kUnknownGbps;
}

double pairRate(const report::PlanTopology& t, int s, int d) {
  const report::PlanPair* p = t.pair(s, d);
  if (p && p->nvlinks && *p->nvlinks > 0) {
    return (p->nvlink_gbps ? *p->nvlink_gbps : *p->nvlinks * kNvlinkDefaultGbps) * kLinkEfficiency;
  }
  double r = std::min(hostRate(t, s), hostRate(t, d));
  if (p && p->pci == "SYS") r *= 0.5;
  return r;
}

double gpuRate(const report::PlanTopology& t, int g) {
  const report::PlanGpu* gpu = gpuAt(t, g);
  if (gpu && gpu->nvlinks && *gpu->nvlinks > 0) {
    return *gpu->nvlinks * (gpu->nvlink_link_gbps ? *gpu->nvlink_link_gbps : kNvlinkDefaultGbps) * kLinkEfficiency;
  }
  return hostRate(t, g);
}

double deviceRate(const report::PlanTopology& t, int g) {
  auto m = t.memory_peak_gbps.find(g);
  return m != t.memory_peak_gbps.end() && m->second > 0 ? m->second / 2 : 1000;
}

double seconds(double bytes, double ops, double gbps) {
  return gbps > 0 ? bytes * ops / (gbps * 1e9) : 0;
}

std::vector<double> sizesBy4(double from, double to) {
  std::vector<double> out;
  for (double b = from; b <= to; b *= 4)
    out.push_back(b);
  return out;
}

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), v < 10 ? "%.1f" : "%.0f", v);
  return buf;
}

JobEstimate fromTally(double start_s, const Tally& tally) {
  JobEstimate e;
  e.start_s = start_s;
  e.cases = tally.cases;
  e.fixed_s = tally.fixed_s;
  e.data_s = tally.data_s;
  e.seconds = e.start_s + e.fixed_s + e.data_s;
  e.basis = "model: start " + fmt(e.start_s) + " s + " + fmt(e.cases) + " cases (" + fmt(e.fixed_s) + " s fixed, " +
            fmt(e.data_s) + " s moving data)";
  return e;
}

Tally tallyRows(const std::vector<SuiteRow>& rows, const report::BenchPlan& work,
                const std::function<Tally(const SuiteRow&)>& cost) {
  Tally total;
  std::map<int, Tally> slowest;  // by group
  for (const SuiteRow& r : rows) {
    if (!work.runs(r.key)) continue;
    const Tally x = cost(r);
    if (r.group < 0) {
      total.cases += x.cases;
      total.fixed_s += x.fixed_s;
      total.data_s += x.data_s;
      continue;
    }
    Tally& g = slowest[r.group];
    // A group counts its rows once each and the time of the slowest.
    const double cases = g.cases + x.cases;
    if (x.fixed_s + x.data_s > g.fixed_s + g.data_s) g = x;
    g.cases = cases;
  }
  for (const auto& [group, g] : slowest) {
    total.cases += g.cases;
    total.fixed_s += g.fixed_s;
    total.data_s += g.data_s;
  }
  return total;
}

}  // namespace cost

}  // namespace peerlab::qualify
