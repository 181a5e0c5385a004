// Fuzz target: what the report renderers do with a run file once the reader has taken it (harness/report: the HTML
// report, the Markdown summary, JUnit). Any input the reader accepts must render on every renderer without a crash,
// a sanitizer report or an exception; what the reader refuses stops there.

#include <cstddef>
#include <cstdint>
#include <string>

#include "harness/faults/fuzz/fuzz_util.h"
#include "harness/report/html.h"
#include "harness/report/junit.h"
#include "harness/report/report.h"
#include "harness/report/summary.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace peerlab;
  const std::string& path = fuzz::writeInputFile(data, size, ".json");
  auto run = report::readRun(path);
  if (!run.isOk()) return 0;
  const std::vector<report::Check> checks = report::checksInRun(*run);
  const std::string html = report::renderHtml(*run);
  if (html.find("</html>") == std::string::npos) fuzz::invariantFailed("the HTML report does not end its page");
  report::renderSummary(*run, checks);
  report::renderJunit(checks);
  return 0;
}
