#include "harness/report/render/summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "harness/report/actions.h"
#include "harness/report/compare.h"
#include "harness/report/evaluate.h"
#include "harness/report/format.h"
#include "harness/report/render/chart_page.h"
#include "harness/report/render/escape.h"
#include "harness/report/render/views.h"

namespace peerlab::report {

std::string renderSummary(const Run& run, const std::vector<Check>& checks, const SummaryOptions& options) {
  std::ostringstream md;
  const CheckCounts counts = countChecks(checks);
  const int gpus = gpuCount(run);
  // The machine by its kind and node: on cloud VMs the host name ("vm") identifies nothing.
  const std::string host = machineTitle(run);
  if (options.verdict) {
    md << "# " << options.title << ": " << verdictWord(counts) << " on " << markdownCell(host) << "\n\n";
    md << "- " << formatCounts(counts) << "\n";
  } else {
    md << "# " << options.title << ": " << markdownCell(host) << "\n\n";
  }
  md << "- machine: " << gpus << " GPU" << (gpus == 1 ? "" : "s");
  if (!run.fingerprint.gpus.empty()) md << " (" << markdownCell(run.fingerprint.gpus.front().name) << ")";
  md << ", driver " << markdownCell(run.fingerprint.driver) << ", CUDA " << markdownCell(run.fingerprint.cuda_runtime)
     << ", NCCL " << markdownCell(run.fingerprint.nccl) << "\n";
  md << "- run: " << markdownCell(run.timestamp) << ", " << markdownCell(run.tool) << " (" << markdownCell(run.git_sha)
     << "), " << run.results.size() << " results\n";
  if (!options.command.empty()) md << "- command: " << markdownCode(options.command) << "\n";
  if (const std::string injected = injectionNote(run); !injected.empty()) {
    md << "- **INJECTED: stand-ins or injected faults**: " << markdownCell(injected)
       << " (this run's verdicts are not this machine's own; the history counts it nowhere)\n";
  }
  if (const std::string disabled = disabledRulesNote(run); !disabled.empty())
    md << "- " << markdownCell(disabled) << "\n";
  for (const std::string& n : options.notes)
    md << "- " << markdownCell(n) << "\n";
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
           << markdownCell(c.category + ": " + c.name) << " | " << markdownCell(c.measured) << " | "
           << markdownCell(c.expected) << " | " << markdownCell(c.reason) << " | " << markdownCell(actionLine(c))
           << " |\n";
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
        md << "- " << markdownCell(c) << "\n";
    }
    if (!ps.works_unclaimed.empty()) {
      md << "\nVerified although not claimed: ";
      for (size_t i = 0; i < ps.works_unclaimed.size(); ++i)
        md << (i ? ", " : "") << markdownCell(ps.works_unclaimed[i]);
      md << "\n";
    }
    md << "\n";
  }

  // Peak bandwidth per method: the best size, median over pairs.
  std::ostringstream bw;
  int bwRows = 0;
  for (const std::string& suite : suitesIn(run)) {
    if (isVerdictSuite(suite)) continue;
    for (const Series& s : bandwidthSeries(run, suite)) {
      const SeriesPoint* best = nullptr;
      for (const SeriesPoint& p : s.points) {
        if (!best || p.median > best->median) best = &p;
      }
      if (!best) continue;
      bw << "| " << markdownCell(suite) << " | " << markdownCell(s.label()) << " | "
         << (s.metric == "busbw_gbps" ? "busbw" : "algbw") << " | " << formatBytes(best->bytes) << " | " << best->n
         << " | " << figure(best->median) << " | " << figure(best->min) << " | " << figure(best->max) << " |\n";
      ++bwRows;
    }
  }
  if (bwRows) {
    md << "## Peak bandwidth (GB/s)\n\n| suite | implementation | metric | size | pairs | median | min | max |\n"
       << "|---|---|---|---|---|---|---|---|\n"
       << bw.str() << "\nGB/s is 10^9 bytes per second. Bytes:\n";
    for (const std::string& suite : suitesIn(run)) {
      if (const std::string b = bytesConvention(suite); !b.empty() && !bandwidthSeries(run, suite).empty()) {
        md << "- " << markdownCell(suite) << ": " << markdownCell(b) << "\n";
      }
    }
    md << "\n";
  }

  auto latency = latencyRows(run);
  if (!latency.empty()) {
    md << "## Latency (us)\n\n| suite | implementation | case | size | pairs | median | min | max |\n"
       << "|---|---|---|---|---|---|---|---|\n";
    for (const LatencyRow& l : latency) {
      md << "| " << markdownCell(l.suite) << " | " << markdownCell(l.impl) << " | " << markdownCell(l.name) << " | "
         << (l.bytes ? formatBytes(*l.bytes) : "-") << " | " << l.n << " | " << figure(l.median_us) << " | "
         << figure(l.min_us) << " | " << figure(l.max_us) << " |\n";
    }
    md << "\n";
  }

  int problems = 0;
  std::ostringstream bad;
  for (const Result& r : run.results) {
    if (statusRank(r.status) == 0) {
      bad << "- " << markdownCell(describeResult(r)) << ": " << markdownCell(r.status) << "\n";
      ++problems;
    }
  }
  if (problems) md << "## Failed results\n\n" << bad.str() << "\n";

  if (!checks.empty()) {
    md << "## All checks\n\n| status | check | measured | expected | basis | reason |\n|---|---|---|---|---|---|\n";
    for (const Check& c : checks) {
      md << "| " << (c.failed() ? "**FAIL**" : checkStatusLabel(c.status)) << " | "
         << markdownCell(c.category + ": " + c.name) << " | " << markdownCell(c.measured) << " | "
         << markdownCell(c.expected) << " | " << markdownCell(c.basis) << " | " << markdownCell(c.reason) << " |\n";
    }
    md << "\n";
  }
  if (!options.files.empty()) {
    md << "## Files\n\n";
    for (const std::string& f : options.files)
      md << "- " << markdownCell(f) << "\n";
  }
  return md.str();
}

}  // namespace peerlab::report
