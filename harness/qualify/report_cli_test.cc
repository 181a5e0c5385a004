// `peerlab report` through the built binary: rendering, compare verdicts and exit codes, bad inputs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "harness/report/report.h"
#include "harness/testing/cli.h"
#include "reference/testing/testing.h"

namespace peerlab::testing {
namespace {

std::string sample() {
  return sourcePath("reports/schema/sample-run.json");
}

// The sample run with peer_copy at `gbps` and the probe cell's status.
std::string variant(const std::string& dir, const std::string& name, double gbps, const std::string& probe) {
  auto run = report::readRun(sample());
  EXPECT_TRUE(run.isOk());
  for (report::Result& r : run->results) {
    if (r.suite == "peer_copy") {
      r.algbw_gbps = gbps;
      r.time_us = *r.bytes / gbps / 1e3;
    }
    if (r.suite == "probe" && r.src) r.status = probe;
  }
  const std::string path = dir + "/" + name;
  EXPECT_TRUE(report::writeRun(*run, path).isOk());
  return path;
}

TEST(ReportCli, RendersHtml) {
  const std::string dir = scratchDir("report-cli-html");
  CliRun r = runPeerlab({"report", sample(), "--html", dir + "/r.html", "--summary", dir + "/s.md"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string html = readFile(dir + "/r.html");
  EXPECT_NE(html.find("<table class=\"series\">"), std::string::npos);
  EXPECT_NE(html.find("sample-host"), std::string::npos);
  // The machine by kind and node, the host name beside them.
  EXPECT_NE(readFile(dir + "/s.md").find("# peerlab report: PASS on h200-x2, node gpus-"), std::string::npos)
      << readFile(dir + "/s.md");
  EXPECT_NE(readFile(dir + "/s.md").find("(host sample-host)"), std::string::npos);
}

TEST(ReportCli, CompareExitCodes) {
  const std::string dir = scratchDir("report-cli-compare");
  const std::string base = variant(dir, "base.json", 394.1, "ok");
  const std::string same = variant(dir, "same.json", 390.0, "ok");      // -1%: noise
  const std::string slower = variant(dir, "slower.json", 350.0, "ok");  // 11% less: beyond the 10% threshold
  const std::string corrupt = variant(dir, "corrupt.json", 400.0, "corrupt");

  CliRun ok = runPeerlab({"report", "--compare", base, same});
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  EXPECT_NE(ok.out.find("same"), std::string::npos);
  EXPECT_NE(ok.out.find("-1.04%"), std::string::npos) << ok.out;

  CliRun reg = runPeerlab({"report", "--compare", base, slower});
  EXPECT_EQ(reg.exit_code, 1) << reg.out;
  EXPECT_NE(reg.out.find("REGRESSED"), std::string::npos) << reg.out;
  EXPECT_NE(reg.out.find("-11.19%"), std::string::npos) << reg.out;
  EXPECT_NE(reg.err.find("1 regression beyond the noise rule"), std::string::npos) << reg.err;
  // A wider noise threshold accepts it.
  EXPECT_EQ(runPeerlab({"report", "--compare", base, slower, "--threshold", "15"}).exit_code, 0);

  // Status regressions fail whatever the numbers (the copy got faster).
  CliRun st = runPeerlab({"report", "--compare", base, corrupt, "--compare-json", dir + "/cmp.json"});
  EXPECT_EQ(st.exit_code, 1);
  EXPECT_NE(st.out.find("STATUS REGRESSED"), std::string::npos) << st.out;
  auto cmp = nlohmann::json::parse(readFile(dir + "/cmp.json"));
  EXPECT_EQ(cmp["regressions"].get<int>(), 1);
  EXPECT_EQ(cmp["rows"].size(), 6u);
}

// The verdict is recomputed from the results: a committed PASS run edited to hold a corrupt claimed probe cell fails.
TEST(ReportCli, StoredPassOverCorruptCellIsFail) {
  const std::string dir = scratchDir("report-cli-verdict");
  const std::string good = sourcePath("reports/runs/2026-11-21-h200-x4-nvswitch-db99ff9.json.gz");
  CliRun ok = runPeerlab({"report", good, "--summary", dir + "/ok.md"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("peerlab report: PASS: 291 checks: 291 passed, 0 failed"), std::string::npos) << ok.out;
  auto run = report::readRun(good);
  ASSERT_TRUE(run.isOk());
  for (report::Result& r : run->results) {
    if (r.suite == "probe" && r.src == 2 && r.dst == 3 && r.extra.value("claimed", false)) {
      r.status = "corrupt";
      break;
    }
  }
  ASSERT_TRUE(report::writeRun(*run, dir + "/corrupt.json").isOk());
  CliRun bad = runPeerlab({"report", dir + "/corrupt.json", "--summary", dir + "/bad.md"});
  EXPECT_EQ(bad.exit_code, 1) << bad.err;
  EXPECT_NE(bad.err.find("peerlab report: FAIL: 291 checks: 290 passed, 1 failed"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("the run file says PASS but its results fail"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("2->3 corrupt"), std::string::npos) << bad.err;
  EXPECT_NE(readFile(dir + "/bad.md").find("FAIL"), std::string::npos);
}

// Half the results missing from the new run: listed, exit 1.
TEST(ReportCli, CompareMissingHalfExitsOne) {
  const std::string dir = scratchDir("report-cli-missing");
  const std::string base = sourcePath("reports/runs/2026-11-21-h200-x4-nvswitch-db99ff9.json.gz");
  auto run = report::readRun(base);
  ASSERT_TRUE(run.isOk());
  const size_t half = run->results.size() / 2;
  run->results.resize(half);
  ASSERT_TRUE(report::writeRun(*run, dir + "/half.json").isOk());
  CliRun r = runPeerlab({"report", "--compare", base, dir + "/half.json"});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("MISSING in the new run (549)"), std::string::npos);
  EXPECT_NE(r.err.find("549 results missing"), std::string::npos) << r.err;
  // The same run against itself: nothing regressed, nothing missing.
  EXPECT_EQ(runPeerlab({"report", "--compare", base, base}).exit_code, 0);
}

// Nothing checked is not a PASS: `report` of a run with no results says EMPTY and exits 5, as every output counts it.
TEST(ReportCli, EmptyRunIsItsOwnVerdictWithExitFive) {
  const std::string dir = scratchDir("report-cli-empty");
  std::string text = readFile(sample());
  auto doc = nlohmann::json::parse(text);
  doc["results"] = nlohmann::json::array();
  std::ofstream(dir + "/empty.json") << doc.dump(2);
  CliRun r = runPeerlab({"report", dir + "/empty.json", "--summary", dir + "/s.md"});
  EXPECT_EQ(r.exit_code, 5) << r.out << r.err;
  EXPECT_NE(r.err.find("peerlab report: EMPTY: 0 checks"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("not a PASS"), std::string::npos) << r.err;
  EXPECT_EQ(readFile(dir + "/s.md").find("PASS"), std::string::npos) << readFile(dir + "/s.md");
  EXPECT_NE(readFile(dir + "/s.md").find("# peerlab report: EMPTY on "), std::string::npos) << readFile(dir + "/s.md");
  // As a baseline it is refused: nothing to hold a run against.
  CliRun q = runPeerlab({"qualify", "--results", sample(), "--baseline", dir + "/empty.json", "--out", dir + "/q"});
  EXPECT_EQ(q.exit_code, 2) << q.out << q.err;
  EXPECT_NE(q.err.find("holds no results"), std::string::npos) << q.err;
  // And in qualify --results: EMPTY, exit 5.
  CliRun e = runPeerlab({"qualify", "--results", dir + "/empty.json", "--out", dir + "/qe"});
  EXPECT_EQ(e.exit_code, 5) << e.out << e.err;
  auto stored = nlohmann::json::parse(readFile(dir + "/qe/results.json"));
  EXPECT_EQ(stored["qualify"]["verdict"], "EMPTY");
  EXPECT_NE(readFile(dir + "/qe/junit.xml").find("EMPTY: 0 checks"), std::string::npos);
}

// Runs of different GPU models or counts are not compared unless asked for; then the table says so.
TEST(ReportCli, CompareRefusesOtherHardwareUnlessAsked) {
  const std::string h200 = sourcePath("reports/qualify/2026-11-26-h200-x2-nvswitch-27fc483/results.json.gz");
  const std::string h100 = sourcePath("reports/qualify/2026-11-26-h100-x2-nvswitch-6b15c97/results.json.gz");
  const std::string x4 = sourcePath("reports/runs/2026-11-21-h200-x4-nvswitch-db99ff9.json.gz");
  for (const auto& [a, b] : std::vector<std::pair<std::string, std::string>>{{h200, h100}, {h200, x4}}) {
    CliRun r = runPeerlab({"report", "--compare", a, b});
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_EQ(lineCount(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("different hardware"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("2x NVIDIA H200 (h200-x2-nvswitch)"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("--allow-other-hardware"), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
  CliRun asked = runPeerlab({"report", "--compare", h200, h100, "--allow-other-hardware", "--only-changes"});
  EXPECT_NE(asked.exit_code, 2) << asked.err;
  EXPECT_NE(asked.out.find("DIFFERENT HARDWARE (--allow-other-hardware): 2x NVIDIA H200 (h200-x2-nvswitch) against "
                           "2x NVIDIA H100 80GB HBM3 (h100-x2-nvswitch)"),
            std::string::npos)
      << asked.out;
  // qualify --baseline holds the same line.
  CliRun q = runPeerlab({"qualify", "--results", h100, "--baseline", h200, "--out", scratchDir("report-cli-hw")});
  EXPECT_EQ(q.exit_code, 2) << q.out << q.err;
  EXPECT_NE(q.err.find("--baseline " + h200 + ": different hardware"), std::string::npos) << q.err;
}

// The noise rule is printed beside every row and carried by --compare-json.
TEST(ReportCli, CompareJsonCarriesTheNoiseRule) {
  const std::string dir = scratchDir("report-cli-rule");
  const std::string a = sourcePath("reports/runs/2026-11-21-h200-x4-nvswitch-3710ae0.json.gz");
  const std::string b = sourcePath("reports/runs/2026-11-21-h200-x4-nvswitch-db99ff9.json.gz");
  CliRun r = runPeerlab({"report", "--compare", a, b, "--compare-json", "-"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("noise rule: a change counts when"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("min effect"), std::string::npos) << r.err;
  auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["noise_rule"]["threshold_pct"], 10.0);
  EXPECT_EQ(doc["noise_rule"]["jitter_us"], 7.5);
  EXPECT_EQ(doc["noise_rule"]["spread_factor"], 3.0);
  EXPECT_EQ(doc["base_kind"], "h200-x4-nvswitch");
  EXPECT_EQ(doc["regressions"], 0);
  int decided = 0;
  for (const auto& row : doc["rows"]) {
    if (row["metric"] == "status") continue;
    ++decided;
    for (const char* key : {"test", "noise_pct", "spread_factor", "between_pct", "jitter_pct", "min_effect_pct",
                            "base_samples", "new_samples", "rule"})
      EXPECT_TRUE(row.contains(key)) << key << " in " << row.dump();
  }
  EXPECT_GT(decided, 700);
  // --threshold, --spread-factor and --jitter change the rule (a stricter rule finds the same-day spread), and the
  // JSON says which rule it was.
  CliRun strict = runPeerlab({"report", "--compare", a, b, "--threshold", "5", "--spread-factor", "1", "--jitter", "0",
                              "--compare-json", "-"});
  EXPECT_EQ(strict.exit_code, 1) << strict.err;
  auto strictDoc = nlohmann::json::parse(strict.out);
  EXPECT_EQ(strictDoc["noise_rule"]["spread_factor"], 1.0);
  EXPECT_EQ(strictDoc["noise_rule"]["jitter_us"], 0.0);
  EXPECT_GT(strictDoc["regressions"].get<int>(), 0);
  EXPECT_EQ(runPeerlab({"report", a, "--jitter", "1"}).exit_code, 2);
  EXPECT_EQ(runPeerlab({"report", a, "--spread-factor", "1"}).exit_code, 2);
  EXPECT_EQ(runPeerlab({"report", "--compare", a, b, "--spread-factor", "x"}).exit_code, 2);
}

// What goes to stdout is an output like any file: `> /dev/full` is an error with exit 4, never a silent success; a
// file option naming a full device is the file's error.
TEST(ReportCli, FailedWritesAreErrors) {
  const std::string dir = scratchDir("report-cli-full");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"report", sample()}, std::vector<std::string>{"report", sample(), "--summary", "-"},
        std::vector<std::string>{"qualify", "--results", sample(), "--out", dir + "/b"}}) {
    std::string cmd = "exec \"$0\"";
    for (size_t i = 0; i < args.size(); ++i)
      cmd += " \"$" + std::to_string(i + 1) + "\"";
    std::vector<std::string> argv = {"bash", "-c", cmd + " >/dev/full", PEERLAB_BINARY};
    argv.insert(argv.end(), args.begin(), args.end());
    CliRun r = runCommand(argv);
    EXPECT_EQ(r.exit_code, 4) << args[0] << ": " << r.err;
    EXPECT_NE(r.err.find("cannot write stdout: No space left on device"), std::string::npos) << r.err;
  }
  CliRun summary = runPeerlab({"report", sample(), "--summary", "/dev/full"});
  EXPECT_EQ(summary.exit_code, 2) << summary.err;
  EXPECT_NE(summary.err.find("cannot write /dev/full: No space left on device"), std::string::npos) << summary.err;
  CliRun html = runPeerlab({"report", sample(), "--html", "/dev/full"});
  EXPECT_EQ(html.exit_code, 2) << html.err;
}

// --drain-reason: stdout holds only the text of a Slurm drain reason (the failed check calling for the most drastic
// action, its GPU, the action's short form), nothing for a passing run; it reads one run and nothing else.
TEST(ReportCli, DrainReasonIsOneLineForAFailingRunAndNothingForAPassingOne) {
  const std::string dir = scratchDir("report-cli-drain");
  auto run = report::readRun(sourcePath("reports/runs/2026-11-25-h100-x1-a99f8ae.json.gz"));
  ASSERT_TRUE(run.isOk());
  ASSERT_TRUE(report::writeRun(*run, dir + "/pass.json").isOk());
  for (report::Result& r : run->results) {
    if (r.suite == "health" && (r.name == "nvlink_state" || r.name == "pcie_link")) r.status = "fail";
  }
  ASSERT_TRUE(report::writeRun(*run, dir + "/fail.json").isOk());
  CliRun f = runPeerlab({"report", dir + "/fail.json", "--drain-reason"});
  EXPECT_EQ(f.exit_code, 1) << f.err;
  EXPECT_EQ(f.out, "nvlink_state GPU0: reset GPU, reseat NVLink (+1 more failed)\n");
  CliRun p = runPeerlab({"report", dir + "/pass.json", "--drain-reason"});
  EXPECT_EQ(p.exit_code, 0) << p.err;
  EXPECT_EQ(p.out, "");
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"report", dir + "/fail.json", "--drain-reason", "--html", dir + "/x.html"},
        {"report", "--drain-reason", "--compare", dir + "/pass.json", dir + "/fail.json"},
        {"report", dir + "/missing.json", "--drain-reason"}}) {
    CliRun b = runPeerlab(bad);
    EXPECT_EQ(b.exit_code, 2) << b.err;
    EXPECT_EQ(lineCount(b.err), 1) << b.err;
    EXPECT_EQ(b.out, "");
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/x.html"));
}

TEST(ReportCli, BadInputsAreOneLineErrorsWithExitTwo) {
  const std::string dir = scratchDir("report-cli-bad");
  std::ofstream(dir + "/truncated.json") << readFile(sample()).substr(0, 300);
  std::string v2 = readFile(sample());
  v2.replace(v2.find("\"schema_version\": 1"), 19, "\"schema_version\": 2");
  std::ofstream(dir + "/v2.json") << v2;
  struct Case {
    std::vector<std::string> args;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {{"report", dir + "/missing.json", "--html", dir + "/x.html"}, dir + "/missing.json: no such file"},
      {{"report", dir + "/truncated.json", "--html", dir + "/x.html"}, dir + "/truncated.json: malformed JSON"},
      {{"report", dir + "/v2.json"}, "unsupported schema version 2"},
      {{"report", "--compare", sample(), dir + "/truncated.json"}, dir + "/truncated.json: malformed JSON"},
      {{"report", "--compare", sample(), sample(), "--threshold", "lots"}, "--threshold"},
      {{"report"}, "no run file given"},
      {{"report", sample(), "--compare", sample(), sample()}, "not both"},
  };
  for (const Case& c : cases) {
    CliRun r = runPeerlab(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.needle << ": " << r.err;
    EXPECT_EQ(lineCount(r.err), 1) << r.err;
    EXPECT_EQ(r.err.rfind("peerlab report: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/x.html"));
}

}  // namespace
}  // namespace peerlab::testing
