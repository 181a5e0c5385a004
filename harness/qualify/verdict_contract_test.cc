// The contract of one verdict: for every committed run file and for runs seeded from them (a slow host copy, a slow
// pair, a corrupt probe cell, a missing suite, a warning, an unsupported check, no plan, a plan that did not run the
// probe), `peerlab qualify --results`, `peerlab report` and the history store give the same verdict and the same
// counts, and every output (console, summary.md, report.html, junit.xml, results.json, history list) states them.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <regex>

#include "harness/report/evaluate.h"
#include "harness/report/report.h"
#include "harness/testing/cli.h"
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

Run load(const std::string& source) {
  auto run = report::readRun(sourcePath(source));
  EXPECT_TRUE(run.isOk()) << run.status().toString();
  return run.isOk() ? *run : Run{};
}

std::vector<Case> cases() {
  const std::string x4 = "reports/runs/2026-11-21-nvidia-h200-x4-db99ff9.json";
  const std::string x2 = "reports/runs/2026-11-21-nvidia-h200-x2-542d5c6.json";
  const std::string h100 = "reports/runs/2026-11-25-nvidia-h100-x1-a99f8ae.json";
  std::vector<Case> out;
  // Every committed run as it is.
  for (const char* dir : {"reports/runs", "reports/baselines", "reports/qualify"}) {
    for (const auto& e : std::filesystem::recursive_directory_iterator(sourcePath(dir))) {
      if (e.path().extension() != ".json") continue;
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
    report::Run run = load(c.source);
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
    EXPECT_NE(html.find("<span class=\"badge " + std::string(v.pass() ? "pass" : "fail") + "\">" + word + "</span>"),
              std::string::npos);
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

    // The history store: the same verdict and counts per run.
    CliRun ingest = runPeerlab({"history", "ingest", "--db", db, file});
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

}  // namespace
}  // namespace peerlab::testing
