// Fuzz target: the history ingest path (harness/history) after the run-file reader. A run the reader accepts is
// ingested into a fresh in-memory SQLite store beside two fixed runs of the same kind (so that it can be the latest),
// then regressions, fleet outliers and the site model are built and the site rendered. What is stored must always
// render: ingest either stores it or refuses it with invalid_argument, and no kind of the site fails.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "harness/faults/fuzz/fuzz_util.h"
#include "harness/history/analysis.h"
#include "harness/history/site_model.h"
#include "harness/history/store.h"
#include "harness/report/render/site.h"
#include "harness/report/report.h"
#include "reference/core/files.h"

namespace {

// A small run of the kind the fuzzed run names (or "fuzz-kind"): copies and latency on two GPUs.
peerlab::report::Run baseline(int index, const std::string& kind) {
  using namespace peerlab;
  report::Run run;
  run.tool = "peerlab 0.1.0";
  run.git_sha = std::string(40, static_cast<char>('a' + index));
  run.timestamp = "2026-01-0" + std::to_string(1 + index) + "T00:00:00Z";
  run.fingerprint = {"node-a", "580.159.04", "13.0", "2.28.3", {{0, "GPU-0", "", "H200"}, {1, "GPU-1", "", "H200"}},
                     {}};
  run.kind.name = kind;
  run.kind.source = report::KindSource::kOption;
  for (int s = 0; s < 2; ++s) {
    report::Result r;
    r.suite = "peer_copy";
    r.name = "uni";
    r.impl = "peerlab.ce";
    r.src = s;
    r.dst = 1 - s;
    r.bytes = 268435456.0;
    r.algbw_gbps = 380.0 + index;
    r.time_us = *r.bytes / *r.algbw_gbps / 1e3;
    run.results.push_back(r);
  }
  return run;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace peerlab;
  static const std::string dir = [] {
    auto d = makePrivateDir("peerlab-fuzz-history");
    return d.isOk() ? *d : std::string("/tmp/peerlab-fuzz-history");
  }();
  const std::string& path = fuzz::writeInputFile(data, size, ".json");
  auto run = report::readRun(path);
  if (!run.isOk()) return 0;
  auto store = history::HistoryStore::open(":memory:");
  if (!store.isOk()) fuzz::invariantFailed("cannot open an in-memory store");
  std::string kind = "fuzz-kind";
  if (!run->kind.empty()) kind = run->kind.name;
  for (int i = 0; i < 2; ++i) {
    if (!(*store)->ingest(baseline(i, kind)).isOk()) fuzz::invariantFailed("a baseline run was not stored");
  }
  auto outcome = (*store)->ingest(*run);
  if (!outcome.isOk() && outcome.status().code() != StatusCode::kInvalidArgument) {
    fuzz::invariantFailed("ingest failed other than by refusing the run");
  }
  auto h = history::loadHistory(**store);
  if (!h.isOk()) fuzz::invariantFailed("the stored history does not load");
  history::detectChangePoints(*h, {}, 1);
  history::findRegressions(*h, 3.0);
  history::fleetOutliers(*h);
  history::SiteOptions so;
  so.generated = "2026-01-01T00:00:00Z";
  auto model = history::buildSiteModel(**store, so);
  if (!model.isOk()) fuzz::invariantFailed("the site model of a stored history fails");
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::vector<std::string> failures;
  Status st = report::renderHistorySite(*model, dir, &failures);
  if (!failures.empty()) fuzz::invariantFailed("a kind of a stored history does not render");
  if (!st.isOk()) fuzz::invariantFailed("the site of a stored history cannot be written");
  if (outcome.isOk() && !(*store)->remove({std::to_string(outcome->run_id)}).isOk()) {
    fuzz::invariantFailed("a stored run cannot be removed");
  }
  return 0;
}
