// Fuzz target: what the checks engine and the report renderers do with a run file once the reader has taken it
// (harness/report: the verdict, the HTML report, the Markdown summary, JUnit, the console lines). Any input the reader
// accepts must render on every renderer without a crash, a sanitizer report or an exception; what the reader refuses
// stops there.

#include <cstddef>
#include <cstdint>
#include <string>

#include "harness/faults/fuzz/fuzz_util.h"
#include "harness/report/evaluate.h"
#include "harness/report/render/console.h"
#include "harness/report/render/html.h"
#include "harness/report/render/junit.h"
#include "harness/report/render/summary.h"
#include "harness/report/report.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace peerlab;
  const std::string& path = fuzz::writeInputFile(data, size, ".json");
  auto run = report::readRun(path);
  if (!run.isOk()) return 0;
  const report::RunVerdict verdict = report::verdictOf(*run);
  const std::vector<report::Check>& checks = verdict.checks;
  const report::CheckCounts& n = verdict.counts;
  if (n.passed + n.failed + n.warnings + n.unsupported + n.skipped != n.total) {
    fuzz::invariantFailed("the counts do not add up");
  }
  // Evaluated once and handed to every renderer, as qualify and report do.
  const std::string html = report::renderHtml(*run, checks);
  if (html.find("</html>") == std::string::npos) fuzz::invariantFailed("the HTML report does not end its page");
  // Every output states the engine's counts.
  const std::string counts = report::formatCounts(n);
  if (html.find(counts) == std::string::npos) fuzz::invariantFailed("report.html does not state the counts");
  if (report::renderSummary(*run, checks).find(counts) == std::string::npos) {
    fuzz::invariantFailed("summary.md does not state the counts");
  }
  report::renderJunit(checks);
  report::formatCheckLines(checks);
  return 0;
}
