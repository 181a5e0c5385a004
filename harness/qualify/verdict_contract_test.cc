// The contract of one verdict: for every committed run file and for runs seeded from them (a slow host copy, a slow
// pair, a corrupt probe cell, a missing suite, a warning, an unsupported check, no plan, a plan that did not run the
// probe), `peerlab qualify --results`, `peerlab report` and the history store give the same verdict and the same
// counts, and every output (console, summary.md, report.html, junit.xml, results.json, history list) states them.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>

#include "harness/report/baseline.h"
#include "harness/report/evaluate.h"
#include "harness/report/report.h"
#include "harness/testing/cli.h"
#include "harness/testing/runs.h"
#include "reference/testing/testing.h"

namespace peerlab::testing {
namespace {

using report::CheckCounts;
using report::Result;
using report::Run;

struct Case {
  std::string name;
  std::string source;               // a committed run file, relative to the repository
  std::function<void(Run&)> edit;   // the seeded change (none for the committed file itself)
  std::optional<bool> expect_pass;  // what the change must give, where it is known
};

// The committed run files: reports/runs/*.json.gz, reports/baselines/*.json.gz and each bundle's results.json(.gz) (a
// bundle directory holds other JSON, and reports/qualify a levels summary beside the bundles).
bool isRunFile(const std::filesystem::path& p) {
  if (!report::isRunFileName(p.string())) return false;
  return p.filename() == "results.json" || p.filename() == "results.json.gz" || p.parent_path().filename() == "runs" ||
         p.parent_path().filename() == "baselines";
}

std::vector<Case> cases() {
  const std::string x4 = "reports/runs/2026-11-21-h200-x4-nvswitch-db99ff9.json.gz";
  const std::string x2 = "reports/runs/2026-11-21-h200-x2-nvswitch-542d5c6.json.gz";
  const std::string h100 = "reports/runs/2026-11-25-h100-x1-a99f8ae.json.gz";
  std::vector<Case> out;
  // Every committed run as it is.
  for (const char* dir : {"reports/runs", "reports/baselines", "reports/qualify"}) {
    for (const auto& e : std::filesystem::recursive_directory_iterator(sourcePath(dir))) {
      if (!isRunFile(e.path())) continue;
      const std::string rel = std::filesystem::relative(e.path(), sourcePath(".")).string();
      out.push_back({"committed " + rel, rel, nullptr, std::nullopt});
    }
  }
  out.push_back({"slow host copy", h100,
                 [](Run& r) {
                   for (Result& x : r.results) {
                     if (x.suite == "host_copy" && x.impl == "peerlab.ce" && x.status == "ok" && x.bytes &&
                         *x.bytes >= (64 << 20) && (x.name == "h2d" || x.name == "d2h" || x.name == "bidir")) {
                       x.algbw_gbps = 5;
                       x.busbw_gbps = 5;
                     }
                   }
                 },
                 false});
  out.push_back({"slow pair", x4,
                 [](Run& r) {
                   for (Result& x : r.results) {
                     if (x.suite == "peer_copy" && x.src == 2 && x.dst == 3 && x.algbw_gbps) {
                       x.algbw_gbps = *x.algbw_gbps * 0.5;
                       if (x.busbw_gbps) x.busbw_gbps = *x.busbw_gbps * 0.5;
                     }
                   }
                 },
                 false});
  out.push_back({"corrupt probe cell", x4,
                 [](Run& r) {
                   for (Result& x : r.results) {
                     if (x.suite == "probe" && x.src == 0 && x.dst == 1 && x.extra.value("claimed", false)) {
                       x.status = "corrupt";
                       x.wrong = 7;
                     }
                   }
                 },
                 false});
  out.push_back({"missing suite", x4,
                 [](Run& r) { std::erase_if(r.results, [](const Result& x) { return x.suite == "zcopy"; }); }, false});
  out.push_back({"warn-level health", h100,
                 [](Run& r) {
                   for (Result& x : r.results) {
                     if (x.suite == "health" && x.name == "pcie_errors") {
                       x.status = "warn";
                       x.detail = "154 correctable errors/s on GPU 0 (2131 in 13.8 s)";
                     }
                   }
                 },
                 true});
  out.push_back({"failed health with its reason", h100,
                 [](Run& r) {
                   for (Result& x : r.results) {
                     if (x.suite == "health" && x.name == "xid") {
                       x.status = "fail";
                       x.detail = "XID 79 (GPU has fallen off the bus) at 3.2 s";
                     }
                   }
                 },
                 false});
  out.push_back({"run without a plan", x4, [](Run& r) { r.extra.erase("plan"); }, true});
  out.push_back({"plan without the probe", x2, nullptr, true});
  return out;
}

// The counts as a line prints them: "N checks: a passed, b failed, ..."
std::string countsText(const CheckCounts& n) {
  return report::formatCounts(n);
}

TEST(VerdictContract, EveryCommandAndEveryFileStatesTheSameCounts) {
  const std::string dir = scratchDir("verdict-contract");
  const std::string db = dir + "/history.sqlite";
  int index = 0;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const std::string tag = std::to_string(index++);
    report::Run run = committedRun(c.source);
    if (c.edit) c.edit(run);
    const std::string file = dir + "/run-" + tag + ".json";
    ASSERT_TRUE(report::writeRun(run, file).isOk());
    // What the engine says of the file as written.
    auto reread = report::readRun(file);
    ASSERT_TRUE(reread.isOk()) << reread.status().toString();
    const report::RunVerdict v = report::verdictOf(*reread);
    const std::string counts = countsText(v.counts);
    const std::string word = report::verdictWord(v.counts);
    if (c.expect_pass) {
      EXPECT_EQ(v.pass(), *c.expect_pass) << counts;
    }
    EXPECT_EQ(v.counts.passed + v.counts.failed + v.counts.warnings + v.counts.unsupported + v.counts.skipped,
              v.counts.total);

    // peerlab qualify --results: exit code, console, and every file of the bundle.
    const std::string bundle = dir + "/bundle-" + tag;
    CliRun q = runPeerlab({"qualify", "--results", file, "--out", bundle});
    EXPECT_EQ(q.exit_code, v.pass() ? 0 : 1) << q.out << q.err;
    EXPECT_NE(q.out.find("peerlab qualify: " + word + ": " + counts + ";"), std::string::npos) << q.out;
    if (!v.pass()) {
      EXPECT_EQ(lineCount(q.err), 1) << q.err;
      EXPECT_NE(q.err.find("peerlab qualify: FAIL: "), std::string::npos) << q.err;
    }
    const std::string summary = readFile(bundle + "/summary.md");
    EXPECT_NE(summary.find("# peerlab qualify: " + word), std::string::npos);
    EXPECT_NE(summary.find("- " + counts + "\n"), std::string::npos) << summary.substr(0, 400);
    const std::string html = readFile(bundle + "/report.html");
    EXPECT_NE(html.find("<strong>" + word + "</strong>: " + counts + "."), std::string::npos);
    const std::string badge = v.pass() ? "pass" : v.counts.empty() ? "empty" : "fail";
    EXPECT_NE(html.find("<span class=\"badge " + badge + "\">" + word + "</span>"), std::string::npos);
    const std::string junit = readFile(bundle + "/junit.xml");
    const std::string junitCounts =
        "tests=\"" + std::to_string(v.counts.total) + "\" failures=\"" + std::to_string(v.counts.failed) +
        "\" errors=\"0\" skipped=\"" + std::to_string(v.counts.unsupported + v.counts.skipped) + "\" passed=\"" +
        std::to_string(v.counts.passed) + "\" warnings=\"" + std::to_string(v.counts.warnings) + "\" unsupported=\"" +
        std::to_string(v.counts.unsupported) + "\" not_run=\"" + std::to_string(v.counts.skipped) + "\"";
    EXPECT_NE(junit.find("<testsuites name=\"peerlab.qualify\" " + junitCounts), std::string::npos)
        << junit.substr(0, 400);
    auto results = report::readRun(bundle + "/results.json");
    ASSERT_TRUE(results.isOk()) << results.status().toString();
    const nlohmann::json& s = results->extra["qualify"]["summary"];
    EXPECT_EQ(s["verdict"], word);
    EXPECT_EQ(s["total"], v.counts.total);
    EXPECT_EQ(s["passed"], v.counts.passed);
    EXPECT_EQ(s["failed"], v.counts.failed);
    EXPECT_EQ(s["warnings"], v.counts.warnings);
    EXPECT_EQ(s["unsupported"], v.counts.unsupported);
    EXPECT_EQ(s["skipped"], v.counts.skipped);
    // The bundle's results, read again, give the same verdict (a bundle can be re-checked).
    EXPECT_EQ(countsText(report::verdictOf(*results).counts), counts);

    // peerlab report: exit code, its line, its Markdown and HTML.
    CliRun r = runPeerlab(
        {"report", file, "--html", dir + "/report-" + tag + ".html", "--summary", dir + "/report-" + tag + ".md"});
    EXPECT_EQ(r.exit_code, q.exit_code) << r.out << r.err;
    EXPECT_NE((r.out + r.err).find("peerlab report: " + word + ": " + counts + " ("), std::string::npos)
        << r.out << r.err;
    EXPECT_NE(readFile(dir + "/report-" + tag + ".md").find("- " + counts + "\n"), std::string::npos);
    EXPECT_NE(readFile(dir + "/report-" + tag + ".html").find("<strong>" + word + "</strong>: " + counts + "."),
              std::string::npos);

    // Every failure carries its reason into the console line, junit and the page.
    for (const report::Check& check : v.checks) {
      if (check.status == report::CheckStatus::kPass) continue;
      EXPECT_NE(q.out.find(check.reason), std::string::npos) << check.name;
      EXPECT_NE(summary.find(check.category + ": " + check.name), std::string::npos) << check.name;
    }

    // The history store: the same verdict and counts per run. A baseline is no node's run: refused, naming why.
    CliRun ingest = runPeerlab({"history", "ingest", "--db", db, file});
    if (report::isBaseline(*reread)) {
      EXPECT_EQ(ingest.exit_code, 2) << ingest.out << ingest.err;
      EXPECT_NE(ingest.err.find("not a node's run"), std::string::npos) << ingest.err;
      continue;
    }
    ASSERT_EQ(ingest.exit_code, 0) << ingest.out << ingest.err;
    // "stored as run N", or "already stored as run N" for a run with the content of one stored before.
    std::smatch id;
    const std::string said = ingest.out + ingest.err;
    ASSERT_TRUE(std::regex_search(said, id, std::regex("stored as run ([0-9]+)"))) << said;
    CliRun list = runPeerlab({"history", "list", "--db", db, "--json"});
    ASSERT_EQ(list.exit_code, 0) << list.err;
    const nlohmann::json runs = nlohmann::json::parse(list.out, nullptr, false);
    ASSERT_TRUE(runs.is_object()) << list.out.substr(0, 200);
    bool found = false;
    for (const nlohmann::json& h : runs["runs"]) {
      if (h.value("id", -1) != std::stoll(id[1])) continue;
      found = true;
      EXPECT_EQ(h["verdict"], word) << h.dump();
      EXPECT_EQ(h["checks"], report::toJson(v.counts)) << h.dump();
    }
    EXPECT_TRUE(found) << list.out.substr(0, 400);
  }
}

// Every committed run file and bundle: the count it stores (qualify.summary, else its stored checks), the count the
// checks engine recomputes from it, and the count of a re-check under --config (the built-in thresholds given as a
// file) are one number. A re-check takes the run's facts (suites, jobs, pairs, probe methods, its "not available"
// notes) from the run and only the thresholds from the config.
TEST(VerdictContract, StoredCountEqualsRecomputedForEveryCommittedRun) {
  const std::string dir = scratchDir("verdict-stored");
  const std::string root = sourcePath(".");
  int files = 0, stored = 0;
  for (const char* sub : {"reports/runs", "reports/baselines", "reports/qualify"}) {
    for (const auto& e : std::filesystem::recursive_directory_iterator(root + "/" + sub)) {
      if (!isRunFile(e.path())) continue;
      const std::string file = e.path().string();
      SCOPED_TRACE(file);
      ++files;
      auto run = report::readRun(file);
      ASSERT_TRUE(run.isOk()) << run.status().toString();
      const report::RunVerdict v = report::verdictOf(*run);
      const nlohmann::json& q = run->extra.contains("qualify") ? run->extra["qualify"] : nlohmann::json();
      if (q.is_object() && (q.contains("summary") || q.contains("checks"))) {
        ++stored;
        const int count =
            q.contains("summary") ? q["summary"].value("total", -1) : static_cast<int>(q["checks"].size());
        EXPECT_EQ(count, v.counts.total) << "stored " << count << ", recomputed " << report::formatCounts(v.counts);
        if (q.contains("summary")) {
          EXPECT_EQ(q["summary"], report::toJson(v.counts));
        }
        if (q.contains("verdict")) {
          EXPECT_EQ(q["verdict"], report::verdictWord(v.counts));
        }
      }
      if (!run->plan) continue;
      const std::string bundle = dir + "/" + std::to_string(files);
      CliRun r =
          runPeerlab({"qualify", "--results", file, "--config", sourcePath("reports/qualify.toml"), "--out", bundle});
      EXPECT_EQ(r.exit_code, v.pass() ? 0 : 1) << r.out << r.err;
      auto again = report::readRun(bundle + "/results.json");
      ASSERT_TRUE(again.isOk()) << again.status().toString();
      EXPECT_EQ(again->extra["qualify"]["summary"], report::toJson(v.counts));
      // The run's facts, as it stored them.
      ASSERT_TRUE(again->plan.has_value());
      EXPECT_EQ(again->plan->notes, run->plan->notes);
      EXPECT_EQ(again->plan->jobs.size(), run->plan->jobs.size());
      EXPECT_EQ(again->plan->pairs, run->plan->pairs);
      EXPECT_EQ(again->plan->probe_methods, run->plan->probe_methods);
    }
  }
  EXPECT_GE(files, 11);
  EXPECT_GE(stored, 6);
}

// A run whose transport results are missing fails its coverage check, with or without a config that changes only a
// threshold: the re-check keeps the suites the run planned, whatever this machine has installed.
TEST(VerdictContract, AReCheckKeepsTheRunsSuites) {
  const std::string dir = scratchDir("verdict-recheck");
  auto run = report::readRun(sourcePath("reports/qualify/2026-11-26-h200-x2-nvswitch-27fc483/results.json.gz"));
  ASSERT_TRUE(run.isOk());
  std::erase_if(run->results, [](const Result& r) { return r.suite == "transport"; });
  run->extra.erase("qualify");
  ASSERT_TRUE(report::writeRun(*run, dir + "/no-transport.json").isOk());
  std::ofstream(dir + "/one.toml") << "[qualify]\nbaseline_threshold_pct = 7\n";
  CliRun plain = runPeerlab({"qualify", "--results", dir + "/no-transport.json", "--out", dir + "/a"});
  CliRun config = runPeerlab(
      {"qualify", "--results", dir + "/no-transport.json", "--config", dir + "/one.toml", "--out", dir + "/b"});
  EXPECT_EQ(plain.exit_code, 1) << plain.out;
  EXPECT_EQ(config.exit_code, 1) << config.out;
  EXPECT_NE(config.out.find("suite transport has results"), std::string::npos) << config.out;
  auto a = report::readRun(dir + "/a/results.json");
  auto b = report::readRun(dir + "/b/results.json");
  ASSERT_TRUE(a.isOk() && b.isOk());
  EXPECT_EQ(a->extra["qualify"]["summary"], b->extra["qualify"]["summary"]);
}

}  // namespace
}  // namespace peerlab::testing
