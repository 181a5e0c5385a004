// A fleet sweep at scale: `peerlab slurm sweep`'s engine over 500 simulated nodes, through the Slurm client
// interface against the stand-in Slurm (simulated time), each node's qualification taking the wall time of a
// committed qualify bundle (reports/qualify/*-standard, drawn in turn) and leaving that bundle's run (as the node's
// own: its NodeName, host and GPU UUIDs) to be ingested into a SQLite history. For each batch size:
//   calls_per_s   Slurm calls per simulated second (target <= 2, whatever the node count)
//   max_out       the most nodes out of service at once (= the batch)
//   wall_s        the sweep's simulated wall time; ideal_s = ceil(500 / batch) x the mean node time; ratio = wall/ideal
//   ingest_s      real seconds the 500 bundles took to ingest into the history (in the sweep), ms_per_bundle
// --knob nodes=N changes the node count (500).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench/common/plan.h"
#include "harness/history/store.h"
#include "harness/report/report.h"
#include "harness/slurm/sweep.h"
#include "harness/slurm/testing/fake_slurm.h"
#include "reference/core/files.h"

namespace peerlab::slurm {
namespace {

PEERLAB_BENCH_KNOB(nodes, "nodes", kCount, "simulated nodes swept (500)");

// The node count, 500 when unset or 0 (read after bench_main took the command line).
int nodeCount() {
  const uint64_t v = bench::knobCount("nodes", 0);
  return v > 0 && v <= 100'000 ? static_cast<int>(v) : 500;
}

// A committed bundle: its run and its wall time.
struct Bundle {
  std::string name;
  nlohmann::json run;
  double wall_s = 0;
};

std::vector<Bundle> committedBundles() {
  std::vector<Bundle> out;
  const std::filesystem::path dir = std::filesystem::path(PEERLAB_SOURCE_DIR) / "reports" / "qualify";
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.size() < 9 || name.compare(name.size() - 9, 9, "-standard") != 0) continue;
    auto text = report::readRunText(report::bundleResults(e.path().string()));
    if (!text.isOk()) continue;
    Bundle b;
    b.name = name;
    b.run = nlohmann::json::parse(*text, nullptr, false);
    if (!b.run.is_object() || !b.run.contains("qualify") || !b.run["qualify"].contains("wall_s")) continue;
    b.wall_s = b.run["qualify"]["wall_s"].get<double>();
    out.push_back(std::move(b));
  }
  std::sort(out.begin(), out.end(), [](const Bundle& a, const Bundle& b) { return a.name < b.name; });
  return out;
}

// The bundle's run as node `i`'s own: its NodeName and host, GPU UUIDs of its own, a timestamp of now.
std::string runOfNode(const Bundle& b, const std::string& node) {
  nlohmann::json run = b.run;
  run["fingerprint"]["hostname"] = node;
  for (auto& g : run["fingerprint"]["gpus"])
    if (g.contains("uuid") && g["uuid"].is_string()) g["uuid"] = g["uuid"].get<std::string>() + "-" + node;
  run.erase("node");
  run["node"] = {{"slurm_node", node}};
  return run.dump();
}

void BM_FleetSweep(benchmark::State& state) {
  const int nodes = nodeCount();
  const int batch = static_cast<int>(state.range(0));
  static const std::vector<Bundle> bundles = committedBundles();
  if (bundles.empty()) {
    state.SkipWithError("no committed standard bundle under reports/qualify/");
    return;
  }
  double mean = 0;
  for (const Bundle& b : bundles)
    mean += b.wall_s;
  mean /= bundles.size();
  for (auto _ : state) {
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("peerlab-fleet-bench-" + std::to_string(batch));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir / "sweeps");
    testing::FakeClock clock;
    testing::FakeSlurm slurm(clock);
    for (int i = 0; i < nodes; ++i) {
      char name[32];
      std::snprintf(name, sizeof name, "gpu%03d", i + 1);
      slurm.addNode(name);
    }
    int next = 0;
    slurm.runner = [&](const JobSpec& spec) {
      const Bundle& b = bundles[next++ % bundles.size()];
      testing::FakeJob j;
      j.duration_s = b.wall_s;
      j.run_text = runOfNode(b, spec.node);
      return j;
    };
    auto store = history::HistoryStore::open((dir / "history.sqlite").string());
    if (!store.isOk()) {
      state.SkipWithError(store.status().message().c_str());
      return;
    }
    Log log("sweep", "", false);
    log.setStderr(false);
    Settings settings;
    SweepOptions o;
    o.nodes = slurm.partition;
    o.what = "simulated partition";
    o.batch = batch;
    o.level = qualify::Level::kStandard;
    o.timeout_s = 900;
    o.wait_s = 3600;
    o.poll_s = settings.sweep_poll_s;
    o.bundle_root = (dir / "sweeps").string();
    JobLauncher launcher = [](const std::string& sweep, const std::string& node, const std::string& d) {
      JobSpec spec;
      spec.name = sweepJobName(sweep);
      spec.node = node;
      spec.reservation = sweepReservation(sweep, node);
      spec.output = d + "/job.log";
      spec.argv = {"peerlab", "slurm", "job", "--sweep", sweep, "--node", node, "--dir", d};
      return spec;
    };
    const auto t0 = std::chrono::steady_clock::now();
    Sweep sweep(slurm, **store, clock, log, settings, o, launcher);
    const SweepResult r = sweep.run();
    const double real = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r.counts.passed != nodes) {
      state.SkipWithError(("not every node passed: " + r.summary).c_str());
      return;
    }
    // The history's ingest time on its own: the same bundles into a fresh store.
    auto fresh = history::HistoryStore::open((dir / "ingest.sqlite").string());
    const auto i0 = std::chrono::steady_clock::now();
    int ingested = 0;
    for (const auto& e : std::filesystem::directory_iterator(r.sweep_dir)) {
      auto run = report::readRun((e.path() / "bundle" / "results.json").string());
      if (run.isOk() && (*fresh)->ingest(*run).isOk()) ++ingested;
    }
    const double ingest = std::chrono::duration<double>(std::chrono::steady_clock::now() - i0).count();
    const double ideal = std::ceil(static_cast<double>(nodes) / batch) * mean;
    state.counters["nodes"] = nodes;
    state.counters["batch"] = batch;
    state.counters["calls"] = static_cast<double>(r.slurm_calls);
    state.counters["calls_per_s"] = r.slurm_calls / r.wall_s;
    state.counters["max_out"] = slurm.maxReserved();
    state.counters["wall_s"] = r.wall_s;
    state.counters["ideal_s"] = ideal;
    state.counters["ratio"] = r.wall_s / ideal;
    state.counters["node_mean_s"] = mean;
    state.counters["sweep_real_s"] = real;
    state.counters["ingest_s"] = ingest;
    state.counters["ms_per_bundle"] = 1000 * ingest / std::max(1, ingested);
    std::filesystem::remove_all(dir);
  }
}
BENCHMARK(BM_FleetSweep)->ArgName("batch")->Arg(1)->Arg(5)->Arg(10)->Arg(20)->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace
}  // namespace peerlab::slurm
