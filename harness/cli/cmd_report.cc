// peerlab report: render a run file (HTML, PNG screenshot, Markdown summary) or compare two runs for regressions.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "harness/cli/command.h"
#include "harness/qualify/browser.h"
#include "harness/report/compare.h"
#include "harness/report/html.h"
#include "harness/report/report.h"
#include "harness/report/summary.h"
#include "harness/report/verdict.h"
#include "reference/core/files.h"

namespace peerlab::cli {
namespace {

constexpr const char* kCmd = "report";

struct ReportArgs {
  std::string run;
  std::string html;
  std::string screenshot;
  std::string summary;
  std::string title;
  int width = 1280;
  std::vector<std::string> compare;
  std::string threshold = "5";
  bool only_changes = false;
  std::string compare_json;
};

std::string describeRun(const std::string& path, const report::Run& run) {
  return path + " (" + run.fingerprint.hostname + ", " + run.timestamp + ", " + run.tool + " " +
         run.git_sha.substr(0, 12) + ", " + std::to_string(run.results.size()) + " results)";
}

int runCompare(const ReportArgs& a) {
  auto threshold = report::parseThresholdPct(a.threshold);
  if (!threshold.isOk()) return fail(kCmd, kExitUsage, "--threshold: " + threshold.status().message());
  auto base = report::readRun(a.compare[0]);
  if (!base.isOk()) return fail(kCmd, kExitUsage, base.status().message());
  auto fresh = report::readRun(a.compare[1]);
  if (!fresh.isOk()) return fail(kCmd, kExitUsage, fresh.status().message());
  report::CompareReport rep = report::compareRuns(*base, *fresh, {*threshold});
  std::printf(
      "base: %s\nnew:  %s\nminimum effect: %g%%, significance: Mann-Whitney U p < %g on samples, else p10-p90 "
      "apart\n\n",
      describeRun(a.compare[0], *base).c_str(), describeRun(a.compare[1], *fresh).c_str(), *threshold, rep.alpha);
  std::fputs(report::formatCompare(rep, a.only_changes).c_str(), stdout);
  if (!a.compare_json.empty()) {
    nlohmann::json rows = nlohmann::json::array();
    for (const report::CompareRow& r : rep.rows) {
      const report::Result& id = r.fresh ? *r.fresh : *r.base;
      nlohmann::json j = {{"result", report::describeResult(id)},
                          {"suite", id.suite},
                          {"name", id.name},
                          {"impl", id.impl},
                          {"ranks", id.ranks},
                          {"metric", r.metric},
                          {"test", r.test},
                          {"significant", r.significant},
                          {"verdict", report::verdictName(r.verdict)},
                          {"note", r.note}};
      j["src"] = id.src ? nlohmann::json(*id.src) : nlohmann::json(nullptr);
      j["dst"] = id.dst ? nlohmann::json(*id.dst) : nlohmann::json(nullptr);
      j["bytes"] = id.bytes ? nlohmann::json(*id.bytes) : nlohmann::json(nullptr);
      j["base"] = r.base_value ? nlohmann::json(*r.base_value) : nlohmann::json(nullptr);
      j["new"] = r.new_value ? nlohmann::json(*r.new_value) : nlohmann::json(nullptr);
      j["change_pct"] = r.change_pct ? nlohmann::json(*r.change_pct) : nlohmann::json(nullptr);
      j["p_value"] = r.p_value ? nlohmann::json(*r.p_value) : nlohmann::json(nullptr);
      rows.push_back(std::move(j));
    }
    nlohmann::json doc = {{"base", a.compare[0]},
                          {"new", a.compare[1]},
                          {"threshold_pct", *threshold},
                          {"alpha", rep.alpha},
                          {"fingerprint_changes", rep.fingerprint_changes},
                          {"regressions", rep.regressions()},
                          {"missing", rep.missing()},
                          {"rows", rows}};
    Status st = writeTextFile(a.compare_json, doc.dump(2) + "\n");
    if (!st.isOk()) return fail(kCmd, kExitUsage, st.message());
  }
  if (rep.regressions() > 0 || rep.missing() > 0) {
    std::fprintf(stderr, "peerlab report: %d regression%s beyond %g%%, %d result%s missing from the new run\n",
                 rep.regressions(), rep.regressions() == 1 ? "" : "s", *threshold, rep.missing(),
                 rep.missing() == 1 ? "" : "s");
    return kExitCheckFailed;
  }
  return kExitOk;
}

int runRender(const ReportArgs& a) {
  auto run = report::readRun(a.run);
  if (!run.isOk()) return fail(kCmd, kExitUsage, run.status().message());
  // The verdict comes from the results, never from what the file says.
  const report::RunVerdict verdict = report::recomputeVerdict(*run);
  report::HtmlOptions opts;
  opts.title = a.title;
  opts.checks = verdict.checks;
  std::string htmlPath = a.html;
  std::unique_ptr<std::string, void (*)(std::string*)> tempHtml(nullptr, [](std::string* p) {
    std::error_code ec;
    std::filesystem::remove(*p, ec);
    delete p;
  });
  if (htmlPath.empty() && !a.screenshot.empty()) {
    // A screenshot without --html renders into a temporary file next to the PNG.
    htmlPath = a.screenshot + ".html";
    tempHtml.reset(new std::string(htmlPath));
  }
  if (!htmlPath.empty()) {
    Status st = writeTextFile(htmlPath, report::renderHtml(*run, opts));
    if (!st.isOk()) return fail(kCmd, kExitUsage, st.message());
    if (!a.html.empty()) std::printf("wrote %s\n", a.html.c_str());
  }
  if (!a.screenshot.empty()) {
    Status st = qualify::screenshotReport(htmlPath, a.screenshot, a.width);
    if (st.code() == StatusCode::kUnavailable) return fail(kCmd, kExitRuntime, "--screenshot: " + st.message());
    if (!st.isOk()) return fail(kCmd, kExitRuntime, "--screenshot: " + st.message());
    std::printf("wrote %s\n", a.screenshot.c_str());
  }
  if (!a.summary.empty() || (a.html.empty() && a.screenshot.empty())) {
    report::SummaryOptions so;
    so.title = "peerlab report";
    so.verdict = true;
    const std::string md = report::renderSummary(*run, verdict.checks, so);
    if (a.summary.empty() || a.summary == "-") {
      std::fputs(md.c_str(), stdout);
    } else {
      Status st = writeTextFile(a.summary, md);
      if (!st.isOk()) return fail(kCmd, kExitUsage, st.message());
      std::printf("wrote %s\n", a.summary.c_str());
    }
  }
  const int failed = report::failedChecks(verdict.checks);
  const std::string stored = verdict.stored_pass ? (*verdict.stored_pass ? "PASS" : "FAIL") : "none";
  std::fprintf(stderr, "peerlab report: verdict %s, recomputed from %zu results (%zu checks, %d failed; stored %s)\n",
               verdict.pass ? "PASS" : "FAIL", run->results.size(), verdict.checks.size(), failed, stored.c_str());
  if (verdict.storedPassContradicted()) {
    std::fprintf(stderr, "peerlab report: the run file says PASS but its results fail:\n");
  }
  if (!verdict.pass) {
    int shown = 0;
    for (const report::Check& c : verdict.checks) {
      if (c.pass) continue;
      if (++shown > 10) break;
      std::fprintf(stderr, "  FAIL %s: %s (%s)\n", c.name.c_str(), c.reason.c_str(), c.measured.c_str());
    }
    if (failed > 10) std::fprintf(stderr, "  ... %d failed checks in all\n", failed);
    return kExitCheckFailed;
  }
  return kExitOk;
}

std::function<int()> setup(CLI::App& sub) {
  auto a = std::make_shared<ReportArgs>();
  sub.add_option("run", a->run, "Run file (reports/schema, schema_version 1) to render");
  sub.add_option("--html", a->html, "Write the self-contained HTML report here");
  sub.add_option("--screenshot", a->screenshot, "Write a PNG of the HTML report here (headless Chromium)");
  sub.add_option("--summary", a->summary,
                 "Write the Markdown summary here (\"-\": stdout; the default with no output)");
  sub.add_option("--title", a->title, "Report title (default: peerlab report: <host>)");
  sub.add_option("--width", a->width, "Screenshot width in pixels")->check(CLI::Range(480, 4096));
  sub.add_option("--compare", a->compare,
                 "Compare two run files: BASE.json NEW.json; exit 1 on a regression or a missing result")
      ->expected(2);
  sub.add_option("--threshold", a->threshold,
                 "Minimum effect for --compare in percent (default 5); smaller changes are noise");
  sub.add_flag("--only-changes", a->only_changes, "With --compare: leave out rows within the noise");
  sub.add_option("--compare-json", a->compare_json, "With --compare: also write the table as JSON here");
  sub.footer(
      "Examples:\n"
      "  peerlab report run.json --html report.html\n"
      "  peerlab report run.json --html report.html --screenshot report.png\n"
      "  peerlab report --compare reports/baselines/h200-x4-nvswitch.json run.json --threshold 5");
  return [a]() -> int {
    if (!a->compare.empty()) {
      if (!a->run.empty()) return fail(kCmd, kExitUsage, "give either a run file or --compare BASE NEW, not both");
      if (!a->html.empty() || !a->screenshot.empty()) {
        return fail(kCmd, kExitUsage, "--html/--screenshot render one run; --compare takes two");
      }
      return runCompare(*a);
    }
    if (a->run.empty()) return fail(kCmd, kExitUsage, "no run file given (peerlab report RUN.json --html OUT.html)");
    return runRender(*a);
  };
}

}  // namespace

PEERLAB_REGISTER_COMMAND(report, "report",
                         "Render a run file as HTML/PNG/Markdown with its verdict recomputed, or compare two runs",
                         setup);

}  // namespace peerlab::cli
