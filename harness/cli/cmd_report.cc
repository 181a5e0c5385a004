// peerlab report: render a run file (HTML, PNG screenshot, Markdown summary) or compare two runs for regressions.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "harness/cli/command.h"
#include "harness/qualify/browser.h"
#include "harness/report/actions.h"
#include "harness/report/compare.h"
#include "harness/report/evaluate.h"
#include "harness/report/render/console.h"
#include "harness/report/render/html.h"
#include "harness/report/render/summary.h"
#include "harness/report/report.h"
#include "reference/core/files.h"
#include "reference/core/text.h"

namespace peerlab::cli {
namespace {

constexpr const char* kCmd = "report";

// A default as --help and the option's value give it: "10", "7.5".
std::string formatDefault(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

struct ReportArgs {
  std::string run;
  std::string html;
  std::string screenshot;
  std::string summary;
  std::string title;
  int width = 1280;
  std::vector<std::string> compare;
  std::string threshold = formatDefault(report::kDefaultThresholdPct);
  std::string jitter = formatDefault(report::kDefaultJitterUs);
  std::string spread = formatDefault(report::kDefaultSpreadFactor);
  bool jitter_set = false;
  bool spread_set = false;
  bool allow_other_hardware = false;
  bool only_changes = false;
  std::string compare_json;
  bool threshold_set = false;
  bool drain_reason = false;
};

std::string describeRun(const std::string& path, const report::Run& run) {
  return path + " (" + report::machineTitle(run) + ", " + run.timestamp + ", " + run.tool + " " +
         run.git_sha.substr(0, 12) + ", " + std::to_string(run.results.size()) + " results)";
}

int runCompare(const ReportArgs& a) {
  auto threshold = report::parseThresholdPct(a.threshold);
  if (!threshold.isOk()) return fail(kCmd, kExitUsage, "--threshold: " + threshold.status().message());
  auto jitter = parseNumberOption("--jitter", a.jitter, 0, 1e6);
  if (!jitter.isOk()) return fail(kCmd, kExitUsage, jitter.status().message() + " microseconds");
  auto spread = parseNumberOption("--spread-factor", a.spread, 0, 100);
  if (!spread.isOk()) return fail(kCmd, kExitUsage, spread.status().message());
  auto base = report::readRun(a.compare[0]);
  if (!base.isOk()) return fail(kCmd, kExitUsage, base.status().message());
  auto fresh = report::readRun(a.compare[1]);
  if (!fresh.isOk()) return fail(kCmd, kExitUsage, fresh.status().message());
  // Different hardware differs by design: refused unless asked for.
  if (!a.allow_other_hardware) {
    Status same =
        report::checkSameHardware(*base, *fresh, a.compare[0] + " and " + a.compare[1], "--allow-other-hardware");
    if (!same.isOk()) return fail(kCmd, kExitUsage, same.message());
  }
  report::NoiseRule rule;
  rule.threshold_pct = *threshold;
  rule.jitter_us = *jitter;
  rule.spread_factor = *spread;
  report::CompareReport rep = report::compareRuns(*base, *fresh, rule);
  // With --compare-json -, stdout carries the JSON document alone; the table goes to stderr.
  std::FILE* table = a.compare_json == "-" ? stderr : stdout;
  std::fprintf(table, "base: %s\nnew:  %s\n", describeRun(a.compare[0], *base).c_str(),
               describeRun(a.compare[1], *fresh).c_str());
  if (a.allow_other_hardware) {
    const std::string mismatch =
        report::hardwareMismatch(base->fingerprint, base->kind.name, fresh->fingerprint, fresh->kind.name);
    if (!mismatch.empty()) std::fprintf(table, "DIFFERENT HARDWARE (--allow-other-hardware): %s\n", mismatch.c_str());
  }
  std::fputs(report::formatCompare(rep, a.only_changes).c_str(), table);
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
      // The noise rule's decision beside the row: what it rested on.
      if (r.decision) {
        const nlohmann::json decision = report::toJson(*r.decision);
        for (auto it = decision.begin(); it != decision.end(); ++it)
          j[it.key()] = it.value();
      }
      j["src"] = id.src ? nlohmann::json(*id.src) : nlohmann::json(nullptr);
      j["dst"] = id.dst ? nlohmann::json(*id.dst) : nlohmann::json(nullptr);
      j["numa"] = id.numa ? nlohmann::json(*id.numa) : nlohmann::json(nullptr);
      j["bytes"] = id.bytes ? nlohmann::json(*id.bytes) : nlohmann::json(nullptr);
      j["base"] = r.base_value ? nlohmann::json(*r.base_value) : nlohmann::json(nullptr);
      j["new"] = r.new_value ? nlohmann::json(*r.new_value) : nlohmann::json(nullptr);
      j["change_pct"] = r.change_pct ? nlohmann::json(*r.change_pct) : nlohmann::json(nullptr);
      j["p_value"] = r.p_value ? nlohmann::json(*r.p_value) : nlohmann::json(nullptr);
      rows.push_back(std::move(j));
    }
    nlohmann::json doc = {{"base", a.compare[0]},
                          {"new", a.compare[1]},
                          {"base_kind", base->kind.name},
                          {"new_kind", fresh->kind.name},
                          {"base_node", base->node.id},
                          {"new_node", fresh->node.id},
                          {"threshold_pct", *threshold},
                          {"alpha", rep.alpha},
                          {"noise_rule", report::toJson(rule)},
                          {"fingerprint_changes", rep.fingerprint_changes},
                          {"regressions", rep.regressions()},
                          {"missing", rep.missing()},
                          {"rows", rows}};
    if (a.compare_json == "-") {
      std::fputs((doc.dump(2) + "\n").c_str(), stdout);
    } else if (Status st = writeTextFile(a.compare_json, doc.dump(2) + "\n"); !st.isOk()) {
      return fail(kCmd, kExitUsage, "--compare-json " + st.message());
    }
  }
  if (rep.rows.empty()) {
    return fail(kCmd, kExitNothingChecked, "nothing compared: neither run holds a result (EMPTY, not a pass)");
  }
  if (rep.regressions() > 0 || rep.missing() > 0) {
    return fail(kCmd, kExitCheckFailed,
                std::to_string(rep.regressions()) + (rep.regressions() == 1 ? " regression" : " regressions") +
                    " beyond the noise rule, " + std::to_string(rep.missing()) +
                    (rep.missing() == 1 ? " result" : " results") + " missing from the new run");
  }
  return kExitOk;
}

// --drain-reason: stdout holds only the reason (the failed check that calls for the most drastic action, its GPU and
// the action's short form), for scripts that drain a node; nothing when the run passes.
int runDrainReason(const ReportArgs& a) {
  auto run = report::readRun(a.run);
  if (!run.isOk()) return fail(kCmd, kExitUsage, run.status().message());
  const report::RunVerdict verdict = report::verdictOf(*run);
  if (verdict.pass()) return kExitOk;
  std::printf("%s\n", report::drainReason(verdict.checks).c_str());
  return kExitCheckFailed;
}

int runRender(const ReportArgs& a) {
  auto run = report::readRun(a.run);
  if (!run.isOk()) return fail(kCmd, kExitUsage, run.status().message());
  // The verdict comes from the results and the stored plan, by the one checks engine, never from what the file says.
  const report::RunVerdict verdict = report::verdictOf(*run);
  const bool summaryToStdout = a.summary == "-" || (a.summary.empty() && a.html.empty() && a.screenshot.empty());
  report::HtmlOptions opts;
  opts.title = a.title;
  if (!a.html.empty()) {
    Status st = writeTextFile(a.html, report::renderHtml(*run, verdict.checks, opts));
    if (!st.isOk()) return fail(kCmd, kExitUsage, "--html " + st.message());
    std::fprintf(stderr, "peerlab report: wrote %s\n", a.html.c_str());
  }
  if (!a.screenshot.empty()) {
    // Without --html the page is rendered into a private temporary directory, removed afterwards.
    std::string htmlPath = a.html;
    std::string tmpDir;
    if (htmlPath.empty()) {
      std::string tmpl = (std::filesystem::temp_directory_path() / "peerlab-report-XXXXXX").string();
      if (!::mkdtemp(tmpl.data())) return fail(kCmd, kExitRuntime, "--screenshot: cannot make a temporary directory");
      tmpDir = tmpl;
      htmlPath = tmpDir + "/report.html";
      if (Status st = writeTextFile(htmlPath, report::renderHtml(*run, verdict.checks, opts)); !st.isOk()) {
        std::error_code ec;
        std::filesystem::remove_all(tmpDir, ec);
        return fail(kCmd, kExitRuntime, "--screenshot: " + st.message());
      }
    }
    auto shot = qualify::screenshotReport(htmlPath, a.screenshot, a.width);
    if (!tmpDir.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(tmpDir, ec);
    }
    if (!shot.isOk()) return fail(kCmd, kExitRuntime, "--screenshot " + a.screenshot + ": " + shot.status().message());
    std::fprintf(stderr, "peerlab report: wrote %s\n", shot->describe().c_str());
  }
  if (!a.summary.empty() || summaryToStdout) {
    report::SummaryOptions so;
    so.title = "peerlab report";
    so.verdict = true;
    const std::string md = report::renderSummary(*run, verdict.checks, so);
    if (summaryToStdout) {
      std::fputs(md.c_str(), stdout);
    } else {
      Status st = writeTextFile(a.summary, md);
      if (!st.isOk()) return fail(kCmd, kExitUsage, "--summary " + st.message());
      std::fprintf(stderr, "peerlab report: wrote %s\n", a.summary.c_str());
    }
  }
  // What qualify prints, on stdout unless stdout carries the Markdown.
  std::FILE* console = summaryToStdout ? stderr : stdout;
  std::fputs(report::formatCheckLines(verdict.checks).c_str(), console);
  if (const std::string injected = report::injectionNote(*run); !injected.empty()) {
    std::fprintf(console, "peerlab report: INJECTED: %s: these verdicts are not this machine's own\n",
                 printable(injected, 600).c_str());
  }
  const std::string stored = verdict.stored_pass ? (*verdict.stored_pass ? "PASS" : "FAIL") : "none";
  const std::string disabled = report::disabledRulesNote(*run);
  const std::string line = std::string(report::verdictWord(verdict.counts)) + ": " +
                           report::formatCounts(verdict.counts) + (disabled.empty() ? "" : "; " + disabled) +
                           " (recomputed from " + std::to_string(run->results.size()) + " results; the file states " +
                           stored + ")";
  if (verdict.counts.empty()) {
    return fail(kCmd, kExitNothingChecked,
                line + ": nothing in the run is checked (no result, no plan, no health reading): not a PASS");
  }
  if (verdict.storedPassContradicted()) {
    return fail(kCmd, kExitCheckFailed,
                line + "; the run file says PASS but its results fail: " + report::firstFailure(verdict.checks));
  }
  if (!verdict.pass()) return fail(kCmd, kExitCheckFailed, line + "; first: " + report::firstFailure(verdict.checks));
  std::fprintf(console, "peerlab report: %s\n", line.c_str());
  return kExitOk;
}

std::function<int()> setup(CLI::App& sub) {
  auto a = std::make_shared<ReportArgs>();
  sub.add_option("run", a->run, "Run file (reports/schema, schema_version 1) to render");
  sub.add_option("--html", a->html, "Write the self-contained HTML report here");
  sub.add_option("--screenshot", a->screenshot,
                 "Write PNGs of the whole HTML report here (headless Chromium): FILE.png, and FILE-2.png, ... for each "
                 "further 16,000 px of a long page");
  sub.add_option("--summary", a->summary,
                 "Write the Markdown summary here (\"-\": stdout, the default with no other output; messages then go "
                 "to stderr)");
  sub.add_option("--title", a->title, "Report title (default: peerlab report: <host>)");
  sub.add_option("--width", a->width, "Screenshot width in pixels")->check(CLI::Range(480, 4096));
  sub.add_option("--compare", a->compare,
                 "Compare two run files: BASE.json NEW.json; exit 1 on a regression or a missing result")
      ->expected(2);
  sub.add_option("--threshold", a->threshold,
                 "Minimum effect for --compare in percent (default " + a->threshold + "); smaller changes are noise")
      ->each([a](const std::string&) { a->threshold_set = true; });
  sub.add_option("--spread-factor", a->spread,
                 "With --compare: a change must also exceed this many times either run's own p10-p90 spread (default " +
                     a->spread + ")")
      ->each([a](const std::string&) { a->spread_set = true; });
  sub.add_option("--jitter", a->jitter,
                 "Timing jitter between two processes for --compare, microseconds (default " + a->jitter +
                     "): a time change must be larger (a baseline of several runs gives each time's own range "
                     "instead)")
      ->each([a](const std::string&) { a->jitter_set = true; });
  sub.add_flag("--allow-other-hardware", a->allow_other_hardware,
               "With --compare: compare runs of different GPU models or counts (refused otherwise)");
  sub.add_flag("--only-changes", a->only_changes, "With --compare: leave out rows within the noise");
  sub.add_flag("--drain-reason", a->drain_reason,
               "Print only the text of a Slurm drain reason for the run (\"<check> GPU<n>: <action>\" of the failed "
               "check that calls for the most drastic action); nothing when it passes; exit 1 when it fails");
  sub.add_option("--compare-json", a->compare_json,
                 "With --compare: also write the table as JSON here (\"-\": stdout, the table then goes to stderr)");
  sub.footer(
      "Examples:\n"
      "  peerlab report run.json --html report.html\n"
      "  peerlab report run.json --html report.html --screenshot report.png\n"
      "  peerlab report --compare reports/baselines/h200-x4-nvswitch.json.gz run.json --only-changes");
  return [a]() -> int {
    if (!a->compare.empty()) {
      if (!a->run.empty()) return fail(kCmd, kExitUsage, "give either a run file or --compare BASE NEW, not both");
      if (!a->html.empty() || !a->screenshot.empty() || !a->summary.empty() || a->drain_reason) {
        return fail(kCmd, kExitUsage, "--html/--screenshot/--summary/--drain-reason read one run; --compare takes two");
      }
      return runCompare(*a);
    }
    if (a->only_changes || !a->compare_json.empty()) {
      return fail(kCmd, kExitUsage,
                  std::string(a->only_changes ? "--only-changes" : "--compare-json") + " goes with --compare BASE NEW");
    }
    if (a->threshold_set || a->jitter_set || a->spread_set || a->allow_other_hardware) {
      return fail(kCmd, kExitUsage,
                  "--threshold, --spread-factor, --jitter and --allow-other-hardware go with --compare BASE NEW");
    }
    if (a->run.empty()) return fail(kCmd, kExitUsage, "no run file given (peerlab report RUN.json --html OUT.html)");
    if (a->drain_reason) {
      if (!a->html.empty() || !a->screenshot.empty() || !a->summary.empty() || !a->title.empty()) {
        return fail(kCmd, kExitUsage, "--drain-reason prints one line: not with --html/--screenshot/--summary/--title");
      }
      return runDrainReason(*a);
    }
    return runRender(*a);
  };
}

}  // namespace

PEERLAB_REGISTER_COMMAND(report, "report",
                         "Render a run file as HTML/PNG/Markdown with its verdict recomputed, or compare two runs",
                         setup);

}  // namespace peerlab::cli
