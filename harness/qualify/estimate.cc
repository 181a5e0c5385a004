#include "harness/qualify/estimate.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "harness/qualify/gpu_models.h"

namespace peerlab::qualify {

namespace {

// Calibrated on the committed runs (2x and 4x H200 through NVSwitch, 1x H100 on PCIe Gen5; the test
// estimate_test.cc keeps every committed process within 2x of its measured wall time).
constexpr double kProcessStartS = 0.4;  // exec, CUDA runtime, the benchmark library
constexpr double kContextS = 0.35;      // one CUDA context (per GPU a process or its ranks use)
constexpr double kNcclInitS = 0.5;      // one NCCL communicator
constexpr double kLinkEfficiency = 0.8;
constexpr double kUnknownGbps = 12;        // a link the topology cannot rate: a slow PCIe Gen3 x16
constexpr double kNvlinkDefaultGbps = 25;  // per link, when the topology gives no rate
constexpr double kHostMemGbps = 1.0;       // one CPU thread filling, poisoning and checking pinned host buffers
constexpr double kHostPasses = 8;          // such passes over a host buffer per host-copy case

constexpr double kMiB = 1024.0 * 1024.0;

const PlanGpu* gpuAt(const PlanTopology& t, int g) {
  for (const PlanGpu& x : t.gpus) {
    if (x.index == g) return &x;
  }
  return nullptr;
}

// GB/s one GPU's PCIe link carries (one direction).
double hostRate(const PlanTopology& t, int g) {
  const PlanGpu* gpu = gpuAt(t, g);
  return gpu && gpu->pcie ? gpu->pcie->gbps * 0.85 : kUnknownGbps;
}

// GB/s between two GPUs (one direction): their NVLinks, else the slower PCIe link (halved across sockets).
double pairRate(const PlanTopology& t, int s, int d) {
  const PlanPair* p = t.pair(s, d);
  if (p && p->nvlinks && *p->nvlinks > 0) {
    return (p->nvlink_gbps ? *p->nvlink_gbps : *p->nvlinks * kNvlinkDefaultGbps) * kLinkEfficiency;
  }
  double r = std::min(hostRate(t, s), hostRate(t, d));
  if (p && p->pci == "SYS") r *= 0.5;
  return r;
}

// GB/s one GPU sends to all others at once: its NVLinks, else its PCIe link.
double gpuRate(const PlanTopology& t, int g) {
  const PlanGpu* gpu = gpuAt(t, g);
  if (gpu && gpu->nvlinks && *gpu->nvlinks > 0) {
    return *gpu->nvlinks * (gpu->nvlink_link_gbps ? *gpu->nvlink_link_gbps : kNvlinkDefaultGbps) * kLinkEfficiency;
  }
  return hostRate(t, g);
}

double deviceRate(const PlanTopology& t, int g) {
  auto m = t.memory_peak_gbps.find(g);
  return m != t.memory_peak_gbps.end() && m->second > 0 ? m->second / 2 : 1000;
}

double seconds(double bytes, double ops, double gbps) {
  return gbps > 0 ? bytes * ops / (gbps * 1e9) : 0;
}

struct Tally {
  double cases = 0;
  double fixed_s = 0;
  double data_s = 0;
  void add(double n, double fixed_each, double data_each = 0) {
    cases += n;
    fixed_s += n * fixed_each;
    data_s += n * data_each;
  }
};

std::vector<double> sizesBy4(double from, double to) {
  std::vector<double> out;
  for (double b = from; b <= to; b *= 4)
    out.push_back(b);
  return out;
}

// bench/peer_copy_bench.cu: batchFor and samplesFor; one verified warm-up batch before the samples.
double peerCopyOps(double bytes, bool slow) {
  const double batch = std::clamp(std::floor((slow ? 16 : 64) * kMiB / bytes), 1.0, slow ? 16.0 : 64.0);
  const double samples = bytes >= 1024 * kMiB ? 5 : bytes >= 256 * kMiB ? (slow ? 5 : 10) : (slow ? 10 : 25);
  return batch * (samples + 1);
}

JobEstimate peerCopy(const BenchJob&, const Plan& plan, bool full) {
  const PlanTopology& t = plan.topology;
  const auto& pairs = plan.options.pairs;
  std::set<int> gpus;
  std::set<std::pair<int, int>> unordered;
  for (const auto& [s, d] : pairs) {
    gpus.insert(s);
    gpus.insert(d);
    unordered.insert({std::min(s, d), std::max(s, d)});
  }
  const double g = static_cast<double>(std::max<size_t>(gpus.size(), 2));
  const double fixed = 0.004 + 0.005 * g;
  Tally tally;
  // Anchors: peer enable (first and repeat) and the driver-staged copy without P2P, on 0<->1.
  tally.add(2, fixed);
  tally.add(1, fixed, seconds(256 * kMiB, peerCopyOps(256 * kMiB, true), std::min(hostRate(t, 0), hostRate(t, 1)) / 2));
  const std::vector<double> sizes =
      full ? sizesBy4(4096, 1024 * kMiB) : std::vector<double>{4096, kMiB, 16 * kMiB, 256 * kMiB, 1024 * kMiB};
  const double copiers = 3;  // copy engine, SM pull, SM push
  for (const auto& [s, d] : pairs) {
    const double staged = std::min(hostRate(t, s), hostRate(t, d)) / 2;
    for (double b : sizes)
      tally.add(copiers, fixed, seconds(b, peerCopyOps(b, false), pairRate(t, s, d)));
    if (full) {
      for (double b : sizes)
        tally.add(1, fixed, seconds(b, peerCopyOps(b, true), staged));
    } else {
      tally.add(1, fixed, seconds(256 * kMiB, peerCopyOps(256 * kMiB, true), staged));
    }
    tally.add(4, fixed);  // pointer-chase latencies
  }
  for (const auto& [a, b] : unordered) {
    // Both directions at once: each direction at its own rate, the slower one paces the case.
    const double rate = std::min(pairRate(t, a, b), pairRate(t, b, a));
    for (double bytes : sizes)
      tally.add(copiers + (full ? 1 : 0), fixed, seconds(bytes, peerCopyOps(bytes, false), rate));
    tally.add(2, fixed);  // flag latencies
  }
  JobEstimate e;
  e.start_s = kProcessStartS + kContextS * g;
  e.cases = tally.cases;
  e.fixed_s = tally.fixed_s;
  e.data_s = tally.data_s;
  return e;
}

JobEstimate zcopy(const BenchJob& job, const Plan& plan, bool full) {
  const PlanTopology& t = plan.topology;
  const double rate = pairRate(t, job.src.value_or(0), job.dst.value_or(1));
  const double fixed = 0.025;
  Tally tally;
  std::vector<double> sizes =
      full ? std::vector<double>{8, 64, 512, 4096, 32768, 65536} : std::vector<double>{8, 65536};
  // Latency sizes (ping-pong): get, put, sm (eager, graph), sm kernel-initiated, NCCL (eager, graph).
  tally.add(9 * static_cast<double>(sizes.size()), fixed);
  sizes = full ? std::vector<double>{kMiB, 4 * kMiB, 16 * kMiB, 64 * kMiB, 128 * kMiB, 256 * kMiB, 1024 * kMiB}
               : std::vector<double>{256 * kMiB};
  for (double b : sizes) {
    // bench/zcopy_bench.cu: unitsPerSample and sampleCount, plus a warm-up sample.
    const double units = std::clamp(std::floor(256 * kMiB / b), 2.0, 32.0);
    const double samples = b >= 256 * kMiB ? 5 : 10;
    tally.add(8, fixed, seconds(b, units * (samples + 1), rate));
  }
  JobEstimate e;
  e.start_s = kProcessStartS + 2 * kContextS + kNcclInitS;
  e.cases = tally.cases;
  e.fixed_s = tally.fixed_s;
  e.data_s = tally.data_s;
  return e;
}

JobEstimate alltoallv(const BenchJob& job, const Plan& plan, bool full, bool alltoallv_rows) {
  const PlanTopology& t = plan.topology;
  const int n = std::max(2, job.ranks);
  double rate = 0;
  for (int g = 0; g < n; ++g)
    rate = g == 0 ? gpuRate(t, g) : std::min(rate, gpuRate(t, g));
  const double leaving = static_cast<double>(n - 1) / n;
  const double fixed = 0.002 + 0.0075 * n;
  Tally tally;
  if (alltoallv_rows) {
    const std::vector<double> sizes =
        full ? std::vector<double>{4096,      16384,     65536,      262144,     kMiB,       4 * kMiB,
                                   16 * kMiB, 64 * kMiB, 128 * kMiB, 256 * kMiB, 1024 * kMiB}
             : std::vector<double>{4096, 65536, kMiB, 64 * kMiB, 128 * kMiB};
    for (double b : sizes) {
      // bench/alltoallv_bench.cu planFor: warm-up + batch x samples calls; 20 implementations x patterns x modes.
      const double ops = b <= kMiB ? 20 + 20 * 25 : b <= 64 * kMiB ? 5 + 10 * 12 : 3 + 10 * 8;
      tally.add(20, fixed, seconds(b * leaving, ops, rate));
    }
  }
  // MoE dispatch/combine: 16 paths per token count; a token is hidden 7168 x bf16 sent to top-k 8 experts.
  for (double tokens : {1.0, 128.0, 4096.0}) {
    const double ops = tokens >= 1024 ? 3 + 2 * 8 : 10 + 10 * 20;
    tally.add(16, fixed, seconds(tokens * 7168 * 2 * 8 * leaving, ops, rate));
  }
  JobEstimate e;
  e.start_s = kProcessStartS + kContextS * n + kNcclInitS;
  e.cases = tally.cases;
  e.fixed_s = tally.fixed_s;
  e.data_s = tally.data_s;
  return e;
}

JobEstimate hostCopy(const BenchJob&, const Plan& plan, bool full) {
  const PlanTopology& t = plan.topology;
  const double g = static_cast<double>(std::max<size_t>(t.gpus.size(), 1));
  // Remote-node rows are skipped at once on a one-node machine; unknown counts as several nodes.
  const bool remote = t.numa_nodes != 1;
  const std::vector<double> sizes =
      full ? std::vector<double>{kMiB, 16 * kMiB, 256 * kMiB} : std::vector<double>{256 * kMiB};
  const double fixed = 0.1;
  Tally tally;
  for (const PlanGpu& gpu : t.gpus) {
    const double host = hostRate(t, gpu.index);
    for (double b : sizes) {
      const double touch = kHostPasses * b / (kHostMemGbps * 1e9);
      // Plain loop and copy engine (h2d, d2h, both at once), SM (h2d, d2h): a batch of 4 copies, 7 samples + warm-up.
      tally.add(8, fixed + touch, seconds(b, 32, host));
      tally.add(3, remote ? fixed + touch : fixed, remote ? seconds(b, 32, host) : 0);
      // Pageable copies: one per sample, 3 samples + warm-up, staged by the driver at a fraction of the link.
      tally.add(2, fixed + touch, seconds(b, 4, host / 5));
    }
    tally.add(1, 0.3);                                                         // host latency
    tally.add(1, 0.2, seconds(256 * kMiB, 16 * 8, deviceRate(t, gpu.index)));  // device-local copy
  }
  for (double b : sizes) {
    // Every GPU at once (h2d, d2h; plain and copy engine): one buffer per GPU.
    double slowest = 0;
    for (const PlanGpu& gpu : t.gpus)
      slowest = std::max(slowest, seconds(b, 32, hostRate(t, gpu.index)));
    tally.add(4, fixed + g * kHostPasses * b / (kHostMemGbps * 1e9), slowest);
  }
  JobEstimate e;
  e.start_s = kProcessStartS + kContextS * g;
  e.cases = tally.cases;
  e.fixed_s = tally.fixed_s;
  e.data_s = tally.data_s;
  return e;
}

JobEstimate probeBench(const BenchJob&, const Plan& plan) {
  const double g = static_cast<double>(plan.topology.gpus.size());
  const double pairs = static_cast<double>(plan.topology.pairs.size());
  // bench/probe_bench.cc: 5 repetitions of the whole matrix through two worker processes.
  JobEstimate e;
  e.start_s = kProcessStartS + kContextS * g;
  e.cases = 5;
  e.fixed_s = 5 * (0.3 + 0.05 * pairs);
  return e;
}

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), v < 10 ? "%.1f" : "%.0f", v);
  return buf;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

JobEstimate estimateJob(const BenchJob& job, const Plan& plan) {
  const bool full = plan.options.mode == "full";
  JobEstimate e;
  if (job.suite == "peer_copy") {
    e = peerCopy(job, plan, full);
  } else if (job.suite == "zcopy" || job.suite == "transport") {
    // transport: per pair, one two-process bench per library (or zcopy_bench's baseline rows) at zcopy's sizes.
    e = zcopy(job, plan, full);
  } else if (job.suite == "alltoallv" || job.suite == "moe") {
    e = alltoallv(job, plan, full, job.suite == "alltoallv");
  } else if (job.suite == "host_copy") {
    e = hostCopy(job, plan, full);
  } else if (job.suite == "probe") {
    e = probeBench(job, plan);
  } else {
    // A suite without a cost model here: a process start per rank and an eighth of its deadline base.
    e.start_s = kProcessStartS + kContextS * std::max(1, job.ranks);
    e.fixed_s = job.deadline_s / 8;
    e.seconds = e.start_s + e.fixed_s;
    e.basis = "no cost model for suite " + job.suite + ": process start + 1/8 of its deadline base";
    return e;
  }
  e.seconds = e.start_s + e.fixed_s + e.data_s;
  e.basis = "model: start " + fmt(e.start_s) + " s + " + fmt(e.cases) + " cases (" + fmt(e.fixed_s) + " s fixed, " +
            fmt(e.data_s) + " s moving data)";
  return e;
}

double estimateProbe(const Plan& plan) {
  const double g = static_cast<double>(plan.topology.gpus.size());
  const double pairs = static_cast<double>(plan.options.pairs.size());
  // peerlab probe: two worker processes with a context per GPU, every method on every ordered pair.
  return 0.5 + kContextS * g + 0.05 * pairs;
}

std::string jobIdentity(const std::string& suite, const std::string& label, const std::vector<std::string>& args) {
  std::string id = suite + "|" + label;
  for (const std::string& a : args)
    id += "|" + a;
  return id;
}

MeasuredWalls measuredWalls(const std::vector<report::Run>& runs, const std::string& kind,
                            const std::string& derived_kind) {
  MeasuredWalls out;
  for (const report::Run& run : runs) {
    const nlohmann::json& x = run.extra;
    // The same hardware: the kind it was filed under, or the kind its own hardware gives.
    bool same = !run.kind.empty() && (run.kind.name == kind || report::sameHardware(run.kind.name, kind));
    if (!same) {
      const std::string hardware = report::hardwareOf(run).kind;
      same = !hardware.empty() && report::sameHardware(hardware, derived_kind);
    }
    if (!same || !x.contains("bench") || !x["bench"].is_object() || !x["bench"].contains("jobs") ||
        !x["bench"]["jobs"].is_array()) {
      continue;
    }
    bool any = false;
    for (const nlohmann::json& j : x["bench"]["jobs"]) {
      if (!j.is_object() || !j.contains("wall_s") || !j["wall_s"].is_number() || j.value("exit", "") != "ok") continue;
      std::vector<std::string> args;
      if (j.contains("args") && j["args"].is_array()) {
        for (const auto& a : j["args"])
          if (a.is_string()) args.push_back(a.get<std::string>());
      }
      // The suite is the label's first word ("zcopy 0->1", "peer_copy (12 pairs)").
      const std::string label = j.value("label", "");
      const std::string suite = label.substr(0, label.find(' '));
      const double wall = j["wall_s"].get<double>();
      if (wall <= 0 || wall > 1e6) continue;
      out.walls[jobIdentity(suite, label, args)].push_back(wall);
      any = true;
    }
    out.runs += any;
  }
  return out;
}

void estimatePlan(Plan& plan, const MeasuredWalls& measured) {
  plan.processes_s = 0;
  int from_runs = 0;
  for (BenchJob& job : plan.jobs) {
    auto it = measured.walls.find(jobIdentity(job.suite, job.label, job.args));
    if (it != measured.walls.end() && !it->second.empty()) {
      job.budget_s = median(it->second);
      job.estimate_basis = "measured: median of " + std::to_string(it->second.size()) + " past run" +
                           (it->second.size() == 1 ? "" : "s") + " of this kind";
      ++from_runs;
    } else {
      const JobEstimate e = estimateJob(job, plan);
      job.budget_s = e.seconds;
      job.estimate_basis = e.basis;
    }
    plan.processes_s += job.budget_s;
  }
  plan.overhead_s = kQualifyOverheadS + (plan.options.probe ? estimateProbe(plan) : 0);
  plan.budget_s = plan.processes_s + plan.overhead_s;
  plan.estimate_basis =
      "each process from the sizes and repetitions it runs (start, fixed cost per case, bytes at the link rates)" +
      std::string(from_runs ? ", " + std::to_string(from_runs) + " of " + std::to_string(plan.jobs.size()) +
                                  " processes from the measured wall times of " + std::to_string(measured.runs) +
                                  " past run(s) of this kind"
                            : "") +
      ", plus " + fmt(kQualifyOverheadS) + " s of topology, health and bundle" +
      (plan.options.probe ? " and " + fmt(estimateProbe(plan)) + " s of probe" : "") +
      "; deadlines are separate and longer";
}

}  // namespace peerlab::qualify
