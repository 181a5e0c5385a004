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
  EXPECT_NE(readFile(dir + "/s.md").find("# peerlab report: PASS on sample-host"), std::string::npos);
}

TEST(ReportCli, CompareExitCodes) {
  const std::string dir = scratchDir("report-cli-compare");
  const std::string base = variant(dir, "base.json", 394.1, "ok");
  const std::string same = variant(dir, "same.json", 390.0, "ok");  // -1%: noise
  const std::string slower = variant(dir, "slower.json", 350.0, "ok");
  const std::string corrupt = variant(dir, "corrupt.json", 400.0, "corrupt");

  CliRun ok = runPeerlab({"report", "--compare", base, same});
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  EXPECT_NE(ok.out.find("same"), std::string::npos);
  EXPECT_NE(ok.out.find("-1.04%"), std::string::npos) << ok.out;

  CliRun reg = runPeerlab({"report", "--compare", base, slower});
  EXPECT_EQ(reg.exit_code, 1) << reg.out;
  EXPECT_NE(reg.out.find("REGRESSED"), std::string::npos) << reg.out;
  EXPECT_NE(reg.out.find("-11.19%"), std::string::npos) << reg.out;
  EXPECT_NE(reg.err.find("1 regression beyond 5%"), std::string::npos) << reg.err;
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
  const std::string good = sourcePath("reports/runs/2026-11-21-nvidia-h200-x4-db99ff9.json");
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
  const std::string base = sourcePath("reports/runs/2026-11-21-nvidia-h200-x4-db99ff9.json");
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
  auto run = report::readRun(sourcePath("reports/runs/2026-11-25-nvidia-h100-x1-a99f8ae.json"));
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
