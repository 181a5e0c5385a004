// The host_copy suite (bench/host_copy_bench.cu): host <-> device paths of every GPU, the suite a one-GPU machine
// qualifies with. Rows: BM_HostCopy/<impl>/{h2d,d2h,bidir}/gpu:G/numa:{local,remote}/bytes:N,
// BM_HostCopy/<impl>/{all_h2d,all_d2h}/bytes:N, BM_HostLatency/peerlab.sm/latency/gpu:G/numa:local,
// BM_DeviceLocal/peerlab.ce/device_local/gpu:G/bytes:N.
#include <algorithm>

#include "harness/qualify/cost_model.h"
#include "harness/qualify/plan.h"
#include "harness/qualify/schedule.h"
#include "harness/qualify/suites.h"

namespace peerlab::qualify {
namespace {

using namespace cost;

// Host passes (fill, poison, check) over a pinned buffer run word-wise on several threads (reference/core/pattern).
constexpr double kHostPassGbps = 24.0;
constexpr double kHostPasses = 4;  // per buffer and case

std::string filter(Level level, const std::vector<std::pair<int, int>>&, bool) {
  if (level == Level::kFull) return "";
  // Quick: the copy engine each way at 256 MiB on the GPU's own node, per GPU.
  if (level == Level::kQuick) return "^BM_HostCopy/peerlab.ce/(h2d|d2h)/gpu:[0-9]+/numa:local/bytes:268435456/";
  // Standard: peerlab's rows at 256 MiB (nvbandwidth's size class, where the PCIe anchors are set), the latency and
  // the local copy; the CUDA runtime's own copies (cuda.memcpy_async, cuda.pageable) stand beside them in full.
  return "^BM_HostCopy/peerlab[.].*/bytes:268435456/|^BM_HostLatency/|^BM_DeviceLocal/";
}

// GPUs that copy one after another: the sets PEERLAB_HOST_COPY_SETS names count once, every other GPU once.
double serialGpus(const BenchJob& job, double gpus) {
  const std::string v = jobEnv(job, "PEERLAB_HOST_COPY_SETS");
  if (v.empty()) return gpus;
  const double sets = 1 + static_cast<double>(std::count(v.begin(), v.end(), ';'));
  const double members = sets + static_cast<double>(std::count(v.begin(), v.end(), ','));
  return gpus - members + sets;
}

JobEstimate estimate(const BenchJob& job, const Plan& plan) {
  const report::PlanTopology& t = plan.topology;
  if (!job.guard_for.empty()) {
    // A serial sample: one GPU's copy engine each way and both at once, at 256 MiB.
    Tally x;
    x.add(3, 0.1 + kHostPasses * 256 * kMiB / (kHostPassGbps * 1e9), seconds(256 * kMiB, 24, hostRate(t, 0)));
    return fromTally(kProcessStartS + kContextS, x);
  }
  // The GPUs of a set move their bytes at the same time; the host passes over their buffers still run in turn.
  const double together = t.gpus.empty() ? 1.0 : serialGpus(job, static_cast<double>(t.gpus.size())) / t.gpus.size();
  const Level level = plan.options.level;
  const double g = static_cast<double>(std::max<size_t>(t.gpus.size(), 1));
  // Remote-node rows are skipped at once on a one-node machine; unknown counts as several nodes.
  const bool remote = t.numa_nodes != 1;
  const std::vector<double> sizes =
      level == Level::kFull ? std::vector<double>{kMiB, 16 * kMiB, 256 * kMiB} : std::vector<double>{256 * kMiB};
  const double fixed = 0.015;
  // The runtime's own copies (cuda.memcpy_async, cuda.pageable) where the job runs them: the full sweep (earlier
  // code's standard level too).
  const std::string f = jobFilter(job);
  const bool runtime = f.empty() || f.find("peerlab[.]") == std::string::npos;
  Tally tally;
  for (const report::PlanGpu& gpu : t.gpus) {
    const double host = hostRate(t, gpu.index);
    for (double b : sizes) {
      const double touch = kHostPasses * b / (kHostPassGbps * 1e9);
      // A batch of 4 copies, 3 to 7 samples + warm-up.
      const double copies = 4 * 6;
      if (level == Level::kQuick) {
        tally.add(2, fixed + touch, together * seconds(b, copies, host));
        continue;
      }
      // Copy engine (h2d, d2h, both at once), SM (h2d, d2h), and the runtime's plain loop where it runs.
      tally.add(runtime ? 8 : 5, fixed + touch, together * seconds(b, copies, host));
      tally.add(3, remote ? fixed + touch : fixed, remote ? together * seconds(b, copies, host) : 0);
      // Pageable copies (the runtime's): one per sample, 3 samples + warm-up, staged by the driver at a fraction of the
      // link.
      if (runtime) tally.add(2, fixed + touch, seconds(b, 4, host / 5));
    }
    if (level == Level::kQuick) continue;
    tally.add(1, 0.2);                                                         // host latency
    tally.add(1, 0.1, seconds(256 * kMiB, 16 * 8, deviceRate(t, gpu.index)));  // device-local copy
  }
  if (level != Level::kQuick) {
    for (double b : sizes) {
      // Every GPU at once (h2d, d2h; copy engine, and the runtime's plain loop): one buffer per GPU.
      double slowest = 0;
      for (const report::PlanGpu& gpu : t.gpus)
        slowest = std::max(slowest, seconds(b, 32, hostRate(t, gpu.index)));
      tally.add(runtime ? 4 : 2, fixed + g * kHostPasses * b / (kHostPassGbps * 1e9), slowest);
    }
  }
  return fromTally(kProcessStartS + kContextS * g, tally);
}

// One process over every GPU. Where GPUs have PCIe links of their own, the GPUs of a set measure each kind of row at
// once (PEERLAB_HOST_COPY_SETS), after a serial sample of the first GPU of the first set they are checked against.
std::vector<BenchJob> jobs(const SuiteSpec& spec, const SuiteRequest& req) {
  const std::string f = filter(req.level, req.pairs, req.all_pairs);
  BenchJob j;
  j.suite = spec.name;
  j.binary = spec.binary;
  if (!f.empty()) j.args = {"--benchmark_filter=" + f};
  j.deadline_s = spec.deadline_s[static_cast<int>(req.level)] * std::max(1, req.gpus);
  j.budget_s = j.deadline_s;
  j.label = spec.name + " (" + std::to_string(req.gpus) + (req.gpus == 1 ? " GPU)" : " GPUs)");
  const std::vector<std::vector<int>> sets =
      req.topology && req.concurrent ? hostCopySets(*req.topology) : std::vector<std::vector<int>>{};
  if (sets.empty()) {
    j.schedule_basis = req.gpus > 1 ? "GPUs one at a time: no two have PCIe links of their own the topology shows" : "";
    return {j};
  }
  std::string env = "PEERLAB_HOST_COPY_SETS=", basis;
  for (size_t i = 0; i < sets.size(); ++i) {
    env += i ? ";" : "";
    basis += i ? ", " : "";
    for (size_t k = 0; k < sets[i].size(); ++k) {
      env += (k ? "," : "") + std::to_string(sets[i][k]);
      basis += (k ? "+" : "GPU") + std::to_string(sets[i][k]);
    }
  }
  j.env = {env};
  j.concurrency_env = "PEERLAB_HOST_COPY_SETS";
  j.schedule_basis = "at once, each GPU on a PCIe link of its own: " + basis;
  const int first = sets.front().front();
  BenchJob guard = j;
  guard.env.clear();
  guard.concurrency_env.clear();
  guard.schedule_basis.clear();
  guard.args = {"--benchmark_filter=^BM_HostCopy/peerlab.ce/(h2d|d2h|bidir)/gpu:" + std::to_string(first) +
                "/numa:local/bytes:268435456/"};
  guard.deadline_s = spec.deadline_s[static_cast<int>(req.level)];
  guard.budget_s = guard.deadline_s;
  guard.label = spec.name + " serial sample GPU" + std::to_string(first);
  guard.guard_for = j.label;
  return {guard, j};
}

}  // namespace

SuiteSpec hostCopySuite() {
  SuiteSpec s;
  s.name = "host_copy";
  s.binary = "host_copy_bench";
  s.shape = JobShape::kWholeMachine;
  s.min_gpus = 1;
  s.order = 40;
  s.result_suites = {"host_copy"};
  s.rules = {"host_copy_ce_h2d", "host_copy_ce_d2h",       "host_copy_ce_bidir",
             "host_copy_sm",     "host_copy_device_local", "host_copy_latency"};
  s.levels = {Level::kQuick, Level::kStandard, Level::kFull};
  s.filter = filter;
  s.jobs = jobs;
  // Per GPU.
  s.deadline_s[0] = 20;
  s.deadline_s[1] = 45;
  s.deadline_s[2] = 240;
  s.estimate = estimate;
  s.description =
      "host <-> device copies of every GPU (copy engine, SM, pageable; own and remote NUMA node; all GPUs at once), "
      "host "
      "latency and device-local copy bandwidth (quick: the copy engine each way per GPU)";
  return s;
}

}  // namespace peerlab::qualify
