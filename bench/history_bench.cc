// History at scale: 1,000 synthetic run files of 1,100 results each, ingested into SQLite, then regressions over all
// series and the site model. Knobs files=N and results=N shrink it for a quick look (--knob files=50).
//   BM_HistoryIngest/files:1000/results:1100   every file read, validated and stored (one transaction each)
//   BM_HistoryRegressions/...                  load, change points in every series, regressions
//   BM_HistorySiteModel/...                    the whole site model, serialized
//   BM_HistoryValidationCost/...               ingest again, timing the reader's validation step on its own: what it
//                                              adds to ingest must stay within 10%
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "bench/common/bench_util.h"
#include "bench/common/plan.h"
#include "harness/history/analysis.h"
#include "harness/history/site_model.h"
#include "harness/history/store.h"
#include "harness/report/report.h"
#include "reference/core/files.h"

namespace peerlab::history {
namespace {

PEERLAB_BENCH_KNOB(files, "files", kCount, "run files ingested (1000)");
PEERLAB_BENCH_KNOB(results, "results", kCount, "results per run file (1100)");

// A knob's count, `fallback` when unset or 0 (read after bench_main took the command line).
int sizeKnob(const char* name, int fallback) {
  const uint64_t v = bench::knobCount(name, 0);
  return v > 0 && v <= 1'000'000 ? static_cast<int>(v) : fallback;
}
int fileCount() {
  return sizeKnob("files", 1000);
}
int resultCount() {
  return sizeKnob("results", 1100);
}

std::filesystem::path workDir() {
  return std::filesystem::temp_directory_path() /
         ("peerlab-history-bench-v3-" + std::to_string(fileCount()) + "x" + std::to_string(resultCount()));
}

// One nightly run of 4 GPUs: copies, zero-copy, latency, alltoallv and probe rows cycled up to `results` rows with
// 2% noise; series 0 mod 50 step 8% slower from run 700 (a regression to find among noise).
report::Run makeRun(int index, int results, std::mt19937_64& rng) {
  std::normal_distribution<double> noise(0.0, 0.02);
  report::Run run;
  run.tool = "peerlab 0.1.0";
  char sha[41];
  std::snprintf(sha, sizeof sha, "%040x", 0x5eed000 + index);
  run.git_sha = sha;
  // One run a night from 2023-01-01 (in the past: the reader refuses runs from the future).
  const std::time_t when = 1672531200 + static_cast<std::time_t>(index) * 86400;
  std::tm tm{};
  gmtime_r(&when, &tm);
  char ts[32];
  std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
  run.timestamp = ts;
  run.fingerprint = {
      "node-" + std::to_string(index % 4), index < 700 ? "580.159.04" : "590.10", "13.0", "2.28.3", {}, {}};
  for (int g = 0; g < 4; ++g)
    run.fingerprint.gpus.push_back({g, "GPU-" + run.fingerprint.hostname + "-" + std::to_string(g), "", "NVIDIA H200"});
  run.node = report::nodeIdentity(run.fingerprint, "");
  run.kind.name = "h200-x4-nvswitch";
  run.kind.source = report::KindSource::kHardware;
  const char* suites[] = {"peer_copy", "zcopy", "peer_latency", "alltoallv", "probe"};
  for (int i = 0; i < results; ++i) {
    report::Result r;
    r.suite = suites[i % 5];
    r.impl = "peerlab.impl" + std::to_string(i / 5 % 6);
    r.name = "case" + std::to_string(i / 30 % 4);
    const int pair = i / 120 % 12;
    r.src = pair / 3;
    r.dst = (pair / 3 + 1 + pair % 3) % 4;
    r.bytes = std::ldexp(1.0, 3 + (i / 1440 + i) % 26);
    const double step = (i % 50 == 0 && index >= 700) ? 1.08 : 1.0;
    r.time_us = (1.0 + *r.bytes / 350e3) * step * (1 + noise(rng));
    r.algbw_gbps = *r.bytes / *r.time_us / 1e3;
    r.busbw_gbps = r.algbw_gbps;
    r.wrong = 0;
    r.extra = {{"p10_us", *r.time_us * 0.99}, {"p90_us", *r.time_us * 1.02}, {"samples", 15.0}};
    run.results.push_back(std::move(r));
  }
  return run;
}

// The run files, written once per size and kept for later runs of the benchmark.
std::vector<std::string> runFiles() {
  static std::vector<std::string> files;
  if (!files.empty()) return files;
  const auto dir = workDir() / "runs";
  std::filesystem::create_directories(dir);
  std::mt19937_64 rng(20);
  for (int i = 0; i < fileCount(); ++i) {
    const std::string path = (dir / ("run-" + std::to_string(i) + ".json")).string();
    report::Run run = makeRun(i, resultCount(), rng);
    if (!std::filesystem::exists(path) && !report::writeRun(run, path).isOk()) return {};
    files.push_back(path);
  }
  return files;
}

std::string dbPath() {
  return (workDir() / "history.sqlite").string();
}

void BM_HistoryIngest(benchmark::State& state) {
  const std::vector<std::string> files = runFiles();
  if (files.empty()) {
    state.SkipWithError("could not write the run files");
    return;
  }
  for (auto _ : state) {
    state.PauseTiming();
    for (const char* suffix : {"", "-wal", "-shm"})
      std::filesystem::remove(dbPath() + suffix);
    state.ResumeTiming();
    auto store = HistoryStore::open(dbPath());
    if (!store.isOk()) {
      state.SkipWithError(store.status().message().c_str());
      return;
    }
    for (const std::string& f : files) {
      auto run = report::readRun(f);
      if (!run.isOk() || !(*store)->ingest(*run).isOk()) {
        state.SkipWithError(("ingest failed: " + f).c_str());
        return;
      }
    }
  }
  state.counters["files"] = static_cast<double>(files.size());
  state.counters["results"] = static_cast<double>(files.size()) * resultCount();
}

void BM_HistoryRegressions(benchmark::State& state) {
  size_t series = 0, regressions = 0;
  for (auto _ : state) {
    auto store = HistoryStore::open(dbPath());
    if (!store.isOk()) {
      state.SkipWithError(store.status().message().c_str());
      return;
    }
    auto h = loadHistory(**store);
    if (!h.isOk()) {
      state.SkipWithError(h.status().message().c_str());
      return;
    }
    detectChangePoints(*h);
    regressions = findRegressions(*h, 3.0).size();
    series = h->series.size();
  }
  state.counters["series"] = static_cast<double>(series);
  state.counters["regressions"] = static_cast<double>(regressions);
}

void BM_HistorySiteModel(benchmark::State& state) {
  size_t bytes = 0;
  for (auto _ : state) {
    auto store = HistoryStore::open(dbPath());
    if (!store.isOk()) {
      state.SkipWithError(store.status().message().c_str());
      return;
    }
    auto model = buildSiteModel(**store);
    if (!model.isOk()) {
      state.SkipWithError(model.status().message().c_str());
      return;
    }
    bytes = report::toJson(*model).dump().size();
  }
  state.counters["model_bytes"] = static_cast<double>(bytes);
}

// What validation adds to ingest: the reader's validation step (report::validate on the parsed document) timed on its
// own, against ingest without it (the whole reader minus that step, plus storing). The reader as a whole against a
// plain parse of the same bytes is reported beside it. An error in the output beyond kMaxValidationPct.
constexpr double kMaxValidationPct = 10.0;

void BM_HistoryValidationCost(benchmark::State& state) {
  const std::vector<std::string> files = runFiles();
  if (files.empty()) {
    state.SkipWithError("could not write the run files");
    return;
  }
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  double plain = 0, validation = 0, reader = 0, store = 0;
  const std::string db = (workDir() / "validation.sqlite").string();
  for (auto _ : state) {
    for (const char* suffix : {"", "-wal", "-shm"})
      std::filesystem::remove(db + suffix);
    auto opened = HistoryStore::open(db);
    if (!opened.isOk()) {
      state.SkipWithError(opened.status().message().c_str());
      return;
    }
    for (const std::string& f : files) {
      // Every step reads the file from the page cache.
      const auto t0 = Clock::now();
      auto text = readTextFile(f);
      const nlohmann::json doc = nlohmann::json::parse(text.isOk() ? *text : std::string(), nullptr, false);
      const auto t1 = Clock::now();
      const Status valid = report::validate(doc);
      const auto t2 = Clock::now();
      auto run = report::readRun(f);
      const auto t3 = Clock::now();
      if (doc.is_discarded() || !valid.isOk() || !run.isOk() || !(*opened)->ingest(*run).isOk()) {
        state.SkipWithError(("ingest failed: " + f).c_str());
        return;
      }
      const auto t4 = Clock::now();
      plain += seconds(t0, t1);
      validation += seconds(t1, t2);
      reader += seconds(t2, t3);
      store += seconds(t3, t4);
    }
  }
  const double pct = validation / (reader - validation + store) * 100.0;
  state.counters["plain_parse_s"] = plain;
  state.counters["validate_s"] = validation;
  state.counters["reader_s"] = reader;
  state.counters["store_s"] = store;
  state.counters["validation_pct"] = pct;
  state.counters["reader_vs_parse_pct"] = (reader - plain) / (plain + store) * 100.0;
  if (pct > kMaxValidationPct) {
    char why[200];
    std::snprintf(why, sizeof why,
                  "validation adds %.1f%% to ingest (validate %.1f s; reader %.1f s, of which parsing %.1f s; store "
                  "%.1f s)",
                  pct, validation, reader, plain, store);
    state.SkipWithError(why);
  }
}

// Each step runs once, in this order, on the database the ingest wrote.
// Registered once the knobs are read: the names carry the sizes.
void registerAll() {
  const std::string size = "/files:" + std::to_string(fileCount()) + "/results:" + std::to_string(resultCount());
  for (auto [name, fn] :
       {std::pair{"BM_HistoryIngest", &BM_HistoryIngest}, std::pair{"BM_HistoryRegressions", &BM_HistoryRegressions},
        std::pair{"BM_HistorySiteModel", &BM_HistorySiteModel},
        std::pair{"BM_HistoryValidationCost", &BM_HistoryValidationCost}}) {
    benchmark::RegisterBenchmark((name + size).c_str(), fn)->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();
  }
}

PEERLAB_BENCH_REGISTER(history, registerAll);

}  // namespace
}  // namespace peerlab::history
