#include "harness/report/summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "harness/report/actions.h"
#include "harness/report/aggregate.h"
#include "harness/report/compare.h"
#include "harness/report/evaluate.h"

namespace peerlab::report {

namespace {

// Table cells must not break the Markdown table.
std::string cell(const std::string& text) {
  std::string out;
  for (char ch : text) {
    if (ch == '|') {
      out += "\\|";
    } else if (ch == '\n' || ch == '\r') {
      out += ' ';
    } else {
      out += ch;
    }
  }
  return out;
}

std::string figure(double v) {
  char buf[48];
  const double a = std::fabs(v);
  std::snprintf(buf, sizeof(buf), a >= 100 ? "%.0f" : a >= 10 ? "%.1f" : a >= 1 ? "%.2f" : "%.3g", v);
  return buf;
}

}  // namespace

std::string renderSummary(const Run& run, const std::vector<Check>& checks, const SummaryOptions& options) {
  std::ostringstream md;
  const CheckCounts counts = countChecks(checks);
  const int gpus = gpuCount(run);
  // The machine by its kind and node: on cloud VMs the host name ("vm") identifies nothing.
  const std::string host = machineTitle(run);
  if (options.verdict) {
    md << "# " << options.title << ": " << verdictWord(counts) << " on " << cell(host) << "\n\n";
    md << "- " << formatCounts(counts) << "\n";
  } else {
    md << "# " << options.title << ": " << host << "\n\n";
  }
  md << "- machine: " << gpus << " GPU" << (gpus == 1 ? "" : "s");
  if (!run.fingerprint.gpus.empty()) md << " (" << run.fingerprint.gpus.front().name << ")";
  md << ", driver " << run.fingerprint.driver << ", CUDA " << run.fingerprint.cuda_runtime << ", NCCL "
     << run.fingerprint.nccl << "\n";
  md << "- run: " << run.timestamp << ", " << run.tool << " (" << run.git_sha << "), " << run.results.size()
     << " results\n";
  if (!options.command.empty()) md << "- command: `" << options.command << "`\n";
  if (const std::string injected = injectionNote(run); !injected.empty()) {
    md << "- **fault injection**: " << cell(injected)
       << " (these verdicts come from injected faults or a stand-in worker, not from this machine's driver)\n";
  }
  for (const std::string& n : options.notes)
    md << "- " << n << "\n";
  md << "\n";

  // Every check that did not pass, with the numbers behind it: failures first, then warnings, unsupported, skipped.
  if (counts.passed != counts.total) {
    md << "## Checks that did not pass\n\n| status | check | measured | expected | reason | action |\n"
          "|---|---|---|---|---|---|\n";
    for (CheckStatus want :
         {CheckStatus::kFail, CheckStatus::kWarn, CheckStatus::kUnsupported, CheckStatus::kSkipped}) {
      for (const Check& c : checks) {
        if (c.status != want) continue;
        md << "| " << (want == CheckStatus::kFail ? "**FAIL**" : checkStatusLabel(want)) << " | "
           << cell(c.category + ": " + c.name) << " | " << cell(c.measured) << " | " << cell(c.expected) << " | "
           << cell(c.reason) << " | " << cell(actionLine(c)) << " |\n";
      }
    }
    md << "\n";
  }

  const ProbeSummary ps = summarizeProbe(run);
  if (ps.cells > 0) {
    md << "## Probe\n\n"
       << ps.cells << " cells (" << ps.pairs << " ordered pairs x " << ps.methods << " methods): " << ps.ok
       << " verified ok, " << ps.unsupported << " unsupported, " << ps.failed << " failed.\n";
    if (!ps.claimed_but_failed.empty()) {
      md << "\nClaimed by the driver but not verified:\n";
      for (const auto& c : ps.claimed_but_failed)
        md << "- " << c << "\n";
    }
    if (!ps.works_unclaimed.empty()) {
      md << "\nVerified although not claimed: ";
      for (size_t i = 0; i < ps.works_unclaimed.size(); ++i)
        md << (i ? ", " : "") << ps.works_unclaimed[i];
      md << "\n";
    }
    md << "\n";
  }

  // Peak bandwidth per method: the best size, median over pairs.
  std::ostringstream bw;
  int bwRows = 0;
  for (const std::string& suite : suitesIn(run)) {
    if (suite == "probe") continue;
    for (const Series& s : bandwidthSeries(run, suite)) {
      const SeriesPoint* best = nullptr;
      for (const SeriesPoint& p : s.points) {
        if (!best || p.median > best->median) best = &p;
      }
      if (!best) continue;
      bw << "| " << cell(suite) << " | " << cell(s.label()) << " | " << (s.metric == "busbw_gbps" ? "busbw" : "algbw")
         << " | " << formatBytes(best->bytes) << " | " << best->n << " | " << figure(best->median) << " | "
         << figure(best->min) << " | " << figure(best->max) << " |\n";
      ++bwRows;
    }
  }
  if (bwRows) {
    md << "## Peak bandwidth (GB/s)\n\n| suite | implementation | metric | size | pairs | median | min | max |\n"
       << "|---|---|---|---|---|---|---|---|\n"
       << bw.str() << "\n";
  }

  auto latency = latencyRows(run);
  if (!latency.empty()) {
    md << "## Latency (us)\n\n| suite | implementation | case | size | pairs | median | min | max |\n"
       << "|---|---|---|---|---|---|---|---|\n";
    for (const LatencyRow& l : latency) {
      md << "| " << cell(l.suite) << " | " << cell(l.impl) << " | " << cell(l.name) << " | "
         << (l.bytes ? formatBytes(*l.bytes) : "-") << " | " << l.n << " | " << figure(l.median_us) << " | "
         << figure(l.min_us) << " | " << figure(l.max_us) << " |\n";
    }
    md << "\n";
  }

  int problems = 0;
  std::ostringstream bad;
  for (const Result& r : run.results) {
    if (statusRank(r.status) == 0) {
      bad << "- " << describeResult(r) << ": " << r.status << "\n";
      ++problems;
    }
  }
  if (problems) md << "## Failed results\n\n" << bad.str() << "\n";

  if (!checks.empty()) {
    md << "## All checks\n\n| status | check | measured | expected | basis | reason |\n|---|---|---|---|---|---|\n";
    for (const Check& c : checks) {
      md << "| " << (c.failed() ? "**FAIL**" : checkStatusLabel(c.status)) << " | " << cell(c.category + ": " + c.name)
         << " | " << cell(c.measured) << " | " << cell(c.expected) << " | " << cell(c.basis) << " | " << cell(c.reason)
         << " |\n";
    }
    md << "\n";
  }
  if (!options.files.empty()) {
    md << "## Files\n\n";
    for (const std::string& f : options.files)
      md << "- " << f << "\n";
  }
  return md.str();
}

std::string actionLine(const Check& c) {
  const std::optional<Action> a = actionById(c.action);
  return a ? a->short_text + ": " + a->text : "";
}

std::string formatCheckLines(const std::vector<Check>& checks) {
  std::string out;
  for (CheckStatus want : {CheckStatus::kFail, CheckStatus::kWarn, CheckStatus::kUnsupported, CheckStatus::kSkipped}) {
    for (const Check& c : checks) {
      if (c.status != want) continue;
      out += checkStatusLabel(c.status) + " " + c.category + ": " + c.name + ": measured " +
             (c.measured.empty() ? std::string("-") : c.measured) + ", expected " +
             (c.expected.empty() ? std::string("-") : c.expected) + (c.basis.empty() ? "" : " (" + c.basis + ")") +
             ": " + c.reason + "\n";
      if (const std::string a = actionLine(c); !a.empty()) out += "  action: " + a + "\n";
    }
  }
  return out;
}

std::string firstFailure(const std::vector<Check>& checks) {
  for (const Check& c : checks) {
    if (c.failed()) {
      return c.category + " " + c.name + ": " + c.reason + " (measured " + c.measured + ", expected " + c.expected +
             ")";
    }
  }
  return "";
}

}  // namespace peerlab::report
