// The host_copy suite (bench/host_copy_bench.cu): host <-> device paths of every GPU, the suite a one-GPU machine
// qualifies with. One process over every GPU; where GPUs have PCIe links and NUMA nodes of their own
// (harness/qualify/schedule.h: hostCopySets), the GPUs of a set measure each kind of row at once, after a serial
// sample of one GPU they are checked against. Rows: bench/host_copy_suite.h.
#include "bench/host_copy_suite.h"

#include <algorithm>
#include <cstdlib>
#include <map>

#include "harness/qualify/cost_model.h"
#include "harness/qualify/schedule.h"
#include "harness/qualify/suites.h"

namespace peerlab::qualify {
namespace {

using namespace cost;
namespace hc = host_copy_suite;

// Host passes (fill, poison, check) over a pinned buffer run word-wise on several threads (reference/core/pattern).
constexpr double kHostPassGbps = 24.0;
constexpr double kHostPasses = 4;  // per buffer and case
constexpr double kRowFixedS = 0.015;
// Peerlab's copies stop after 3 quiet samples (4 batches with the warm-up) and go on while the spread is wide: 5
// timed batches on average besides the warm-up (fewer where the plan asks fewer samples).
// The samples a quick level's copies take: the sampler's quiet minimum.
constexpr int kQuickSamples = 3;

double batches(const report::BenchPlan& work) {
  return (work.samples > 0 ? std::min(work.samples, 5) : 5) + 1.0;
}

SuiteInfo describe() {
  SuiteInfo s;
  s.name = "host_copy";
  s.binary = "host_copy_bench";
  s.min_gpus = 1;
  s.order = 40;
  s.result_suites = {"host_copy"};
  s.result_facts = {
      {.suite = "host_copy",
       .kind = RowKind::kHostCopies,
       .section = "Host copies",
       .bytes_convention = "the bytes copied between the host and the GPU; bidir: both directions added"}};
  s.rules = {"host_copy_ce_h2d", "host_copy_ce_d2h",       "host_copy_ce_bidir",
             "host_copy_sm",     "host_copy_device_local", "host_copy_latency"};
  s.levels = {Level::kQuick, Level::kStandard, Level::kFull};
  // Per GPU.
  s.deadline_s[0] = 20;
  s.deadline_s[1] = 45;
  s.deadline_s[2] = 240;
  s.description =
      "host <-> device copies of every GPU (copy engine, SM, pageable; own and remote NUMA node; all GPUs at once), "
      "host latency and device-local copy bandwidth (quick: the copy engine each way per GPU)";
  return s;
}

class HostCopySuite final : public Suite {
 public:
  HostCopySuite() : Suite(describe()) {}

  std::vector<BenchJob> plan(const SuiteRequest& req) const override {
    BenchJob j;
    j.suite = name();
    j.binary = info().binary;
    j.work.suite = name();
    j.work.rules = info().rules;
    // Quick: the copy engine each way at 256 MiB on the GPU's own node, per GPU. Standard: peerlab's rows at 256 MiB
    // (nvbandwidth's size class, where the PCIe anchors are set), the latency and the local copy; the CUDA runtime's
    // own copies (cuda.memcpy_async, cuda.pageable) stand beside them in full.
    if (req.level == Level::kQuick) {
      j.work.rows = {{{"peerlab.ce/h2d/numa:local", "peerlab.ce/d2h/numa:local"}, {hc::kMaxBytes}, {}, {}}};
      // A spot check stops at the sampler's quiet minimum (more only while the spread is wide).
      j.work.samples = kQuickSamples;
    } else if (req.level == Level::kStandard) {
      j.work.rows = {{{"peerlab.*"}, {hc::kMaxBytes}, {}, {}}};
    }
    j.deadline_s = info().deadline_s[static_cast<int>(req.level)] * std::max(1, req.gpus);
    j.work.deadline_s = j.deadline_s;
    j.budget_s = j.deadline_s;
    j.label = name() + " (" + std::to_string(req.gpus) + (req.gpus == 1 ? " GPU)" : " GPUs)");
    const std::vector<std::vector<int>> sets =
        req.concurrent ? hostCopySets(*req.topology) : std::vector<std::vector<int>>{};
    if (sets.empty()) {
      j.schedule_basis =
          req.gpus > 1 ? "GPUs one at a time: no two have PCIe links of their own the topology shows" : "";
      return {j};
    }
    std::string basis;
    for (size_t i = 0; i < sets.size(); ++i) {
      basis += i ? ", " : "";
      for (size_t k = 0; k < sets[i].size(); ++k)
        basis += (k ? "+" : "GPU") + std::to_string(sets[i][k]);
    }
    j.work.gpu_sets = sets;
    j.schedule_basis = "at once, each GPU on a PCIe link of its own: " + basis;
    const int first = sets.front().front();
    BenchJob guard = j;
    guard.work.gpu_sets.clear();
    // The serial sample: the copy engine's rows the level runs, on the first GPU of the first set alone.
    std::vector<std::string> guarded = {"peerlab.ce/h2d/numa:local", "peerlab.ce/d2h/numa:local"};
    if (req.level != Level::kQuick) guarded.push_back("peerlab.ce/bidir/numa:local");
    guard.work.rows = {{guarded, {hc::kMaxBytes}, {}, {first}}};
    guard.schedule_basis.clear();
    guard.deadline_s = info().deadline_s[static_cast<int>(req.level)];
    guard.work.deadline_s = guard.deadline_s;
    guard.budget_s = guard.deadline_s;
    guard.label = name() + " serial sample GPU" + std::to_string(first);
    guard.guard_for = j.label;
    // GPUs at once pay a serial sample (a process, a context per GPU): where that costs more than it saves (a quick
    // level's few rows), the GPUs take turns.
    BenchJob serial = j;
    serial.work.gpu_sets.clear();
    serial.schedule_basis = "GPUs one at a time: at once would save less than its serial sample costs";
    const report::PlanTopology& t = *req.topology;
    if (estimate(serial, t).seconds <= estimate(guard, t).seconds + estimate(j, t).seconds) return {serial};
    return {guard, j};
  }

  std::vector<SuiteRow> rows(const BenchJob& job, const report::PlanTopology& t) const override {
    std::vector<int> gpus;
    for (const report::PlanGpu& g : t.gpus)
      gpus.push_back(g.index);
    std::sort(gpus.begin(), gpus.end());
    if (gpus.empty()) gpus = {0};
    const std::vector<hc::Kind> kinds = hc::gpuKinds();
    // The GPUs of a set run each kind at once: one group per kind and set.
    std::map<int, int> set_of;
    for (size_t s = 0; s < job.work.gpu_sets.size(); ++s)
      for (int g : job.work.gpu_sets[s])
        set_of[g] = static_cast<int>(s);
    std::vector<SuiteRow> out;
    auto perGpu = [&](size_t k, int g) {
      const hc::Kind& kind = kinds[k];
      SuiteRow row;
      row.key.impl = hc::implName(kind.impl);
      row.key.name = hc::caseName(kind, true);
      row.key.bytes = kind.bytes;
      row.key.gpu = g;
      row.gbench_name = hc::rowName(kind, g);
      // Pageable copies are staged by the driver on the calling thread: always alone.
      if (set_of.count(g) && kind.impl != hc::Impl::kPageable)
        row.group = static_cast<int>(k * (job.work.gpu_sets.size() + 1) + static_cast<size_t>(set_of[g]));
      out.push_back(std::move(row));
    };
    if (!job.work.gpu_sets.empty()) {
      for (size_t k = 0; k < kinds.size(); ++k)
        for (int g : gpus)
          perGpu(k, g);
    } else {
      for (int g : gpus)
        for (size_t k = 0; k < kinds.size(); ++k)
          perGpu(k, g);
    }
    for (int g : gpus) {
      SuiteRow lat;
      lat.key.impl = hc::kLatencyImpl;
      lat.key.name = hc::kLatencyName;
      lat.key.gpu = g;
      lat.gbench_name = hc::latencyRowName(g);
      out.push_back(std::move(lat));
      SuiteRow local;
      local.key.impl = hc::kLocalImpl;
      local.key.name = hc::kLocalName;
      local.key.bytes = hc::kMaxBytes;
      local.key.gpu = g;
      local.gbench_name = hc::localRowName(g);
      out.push_back(std::move(local));
    }
    for (const hc::Kind& k : hc::allKinds()) {
      SuiteRow row;
      row.key.impl = hc::implName(k.impl);
      row.key.name = hc::caseName(k, false);
      row.key.bytes = k.bytes;
      row.gbench_name = hc::rowName(k, -1);
      out.push_back(std::move(row));
    }
    return out;
  }

  JobEstimate estimate(const BenchJob& job, const report::PlanTopology& t) const override {
    const double g = static_cast<double>(std::max<size_t>(t.gpus.size(), 1));
    // Remote-node rows are skipped at once on a one-node machine; unknown counts as several nodes.
    const bool remote = t.numa_nodes != 1;
    // The host passes over a GPU's buffers run in turn even where the GPUs of a set move their bytes at once: every
    // row pays its own fixed cost; a set's rows of one kind take the data time of the slowest.
    Tally tally;
    std::map<int, double> slowest;
    for (const SuiteRow& row : rows(job, t)) {
      const report::RowKey& k = row.key;
      if (!job.work.runs(k)) continue;
      const double b = static_cast<double>(std::max<int64_t>(k.bytes, 0));
      const double touch = kHostPasses * b / (kHostPassGbps * 1e9);
      double fixed = kRowFixedS + touch, data = 0;
      if (k.name == hc::kLatencyName) {
        fixed = 0.2;
      } else if (k.name == hc::kLocalName) {
        fixed = 0.1;
        data = seconds(b, 16 * 8, deviceRate(t, k.gpu));
      } else if (k.gpu < 0) {
        // Every GPU at once, one buffer each.
        fixed = kRowFixedS + g * touch;
        for (const report::PlanGpu& gpu : t.gpus)
          data = std::max(data, seconds(b, 32, hostRate(t, gpu.index)));
      } else if (k.name.find("numa:remote") != std::string::npos && !remote) {
        fixed = kRowFixedS;
      } else if (k.impl == hc::implName(hc::Impl::kPageable)) {
        // One copy per sample, 3 samples and a warm-up, staged by the driver at a fraction of the link.
        data = seconds(b, 4, hostRate(t, k.gpu) / 5);
      } else {
        const hc::Impl impl = k.impl == hc::implName(hc::Impl::kPlain) ? hc::Impl::kPlain : hc::Impl::kCe;
        data = seconds(b, static_cast<double>(hc::batchFor(impl, k.bytes)) * batches(job.work), hostRate(t, k.gpu));
      }
      tally.add(1, fixed);
      if (row.group < 0) {
        tally.data_s += data;
      } else {
        slowest[row.group] = std::max(slowest[row.group], data);
      }
    }
    for (const auto& [group, data] : slowest)
      tally.data_s += data;
    return fromTally(kProcessStartS + kContextS * g, tally);
  }

  // Earlier versions named the GPU sets by environment (PEERLAB_HOST_COPY_SETS="0,1;2,3").
  report::BenchPlan legacyPlan(const BenchJob& job, const report::PlanTopology& t) const override {
    BenchJob named = job;
    std::string sets = legacyEnv(job, "PEERLAB_HOST_COPY_SETS");
    while (!sets.empty()) {
      const size_t semi = sets.find(';');
      std::string set = sets.substr(0, semi);
      sets = semi == std::string::npos ? "" : sets.substr(semi + 1);
      std::vector<int> gpus;
      while (!set.empty()) {
        const size_t comma = set.find(',');
        gpus.push_back(std::atoi(set.substr(0, comma).c_str()));
        set = comma == std::string::npos ? "" : set.substr(comma + 1);
      }
      if (gpus.size() > 1) named.work.gpu_sets.push_back(gpus);
    }
    report::BenchPlan work = Suite::legacyPlan(named, t);
    work.gpu_sets = named.work.gpu_sets;
    return work;
  }
};

}  // namespace

std::unique_ptr<Suite> hostCopySuite() {
  return std::make_unique<HostCopySuite>();
}

}  // namespace peerlab::qualify
