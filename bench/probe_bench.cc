// The verified probe's speed: the full matrix (every ordered pair, all 7 methods, 4 KiB and 64 MiB) through the
// real parent/worker path, i.e. the peerlab binary re-executed as its two workers. This process never initializes
// CUDA (the GPU count comes from the worker's inventory). Target: matrix_wall <= 1.5 s on 4x H200, <= 3 s on 8.
//   Knob peerlab=PATH names the peerlab binary the workers run (default: the one beside this bench in a build tree, or
//   in bin/ of an installed tree).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "bench/common/bench_util.h"
#include "bench/common/plan.h"
#include "harness/layout/layout.h"
#include "harness/watchdog/probe_runner.h"
#include "reference/core/files.h"
#include "reference/probe/probe.h"

namespace peerlab::probe {
namespace {

constexpr int kRepetitions = 5;

PEERLAB_BENCH_KNOB(peerlab, "peerlab", kText, "the peerlab binary its workers run (beside this bench, or bin/)");

bench::Record identity() {
  bench::Record r;
  r.suite = "probe";
  r.impl = "peerlab.probe";
  r.name = "matrix_wall";
  return r;
}

void BM_ProbeMatrix(benchmark::State& state) {
  const std::string bin = bench::knobText("peerlab");
  const std::string peerlab = !bin.empty() ? bin : layout::peerlabBinary();
  if (peerlab.empty()) {
    return bench::fail(state, identity(),
                       PEERLAB_INVALID_ARGUMENT("the peerlab binary is neither beside " + selfExecutable() +
                                                " nor in bin/ of its tree (knob peerlab=PATH)"));
  }
  RunnerOptions opt;
  opt.worker_argv = workerCommand(peerlab);
  opt.sizes = {4096, 64ull << 20};
  opt.cell_timeout = std::chrono::seconds(5);
  std::vector<double> walls;
  std::map<std::string, std::vector<double>> phases;
  size_t cells = 0;
  int workers = 0;
  for (auto _ : state) {
    opt.run_seed = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
    auto session = ProbeSession::start(opt);
    if (!session.isOk()) return bench::fail(state, identity(), session.status());
    const Inventory& inv = (*session)->inventory();
    if (!inv.error.empty()) return bench::skip(state, identity(), "no GPU: " + inv.error);
    if (inv.count() < 2)
      return bench::skip(state, identity(), "needs 2 GPUs, " + std::to_string(inv.count()) + " visible");
    auto result = (*session)->run();
    (*session)->stop();
    if (!result.isOk()) return bench::fail(state, identity(), result.status());
    for (const CellReport& c : result->cells) {
      if (judge(c.claimed, c.result).lie) {
        return bench::fail(
            state, identity(),
            PEERLAB_STATUS(StatusCode::kVerificationFailed,
                           std::string(methodName(c.spec.method)) + " " + std::to_string(c.spec.src) + "->" +
                               std::to_string(c.spec.dst) + " " + std::to_string(c.spec.bytes) +
                               " B: " + std::string(verdictName(c.result.verdict)) + " " + c.result.error));
      }
    }
    walls.push_back(result->wall_us);
    for (const PhaseTime& p : result->phases)
      phases[p.name + "_ms"].push_back(p.ms);
    for (const Timing& t : result->owner_timings)
      phases["owner_" + t.name + "_ms"].push_back(t.us / 1000.0);
    for (const Timing& t : result->importer_timings)
      phases["importer_" + t.name + "_ms"].push_back(t.us / 1000.0);
    cells = result->cells.size();
    workers = result->workers_started;
    state.SetIterationTime(result->wall_us / 1e6);
  }
  if (cudaDriverLoadedHere()) {
    return bench::fail(state, identity(), PEERLAB_INTERNAL("the bench process initialized CUDA"));
  }
  bench::Record r = identity();
  r.time_us = bench::median(walls);
  r.extra["cells"] = static_cast<double>(cells);
  r.extra["workers"] = workers;
  r.extra["p10_us"] = bench::percentile(walls, 10);
  r.extra["p90_us"] = bench::percentile(walls, 90);
  r.extra["samples"] = static_cast<double>(walls.size());
  for (const auto& [name, samples] : phases)
    r.extra[name] = bench::median(samples);
  bench::publish(state, r);
}

BENCHMARK(BM_ProbeMatrix)->Iterations(kRepetitions)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace peerlab::probe
