#pragma once
/// The console's view of evaluated checks, as `peerlab qualify` and `peerlab report` print it.

#include <string>
#include <vector>

#include "harness/report/checks.h"

namespace peerlab::report {

/// One line per check that did not pass, failures first, "FAIL category: name: measured M, expected E (basis): reason",
/// a failed check followed by "  action: <short>: <text>".
std::string formatCheckLines(const std::vector<Check>& checks);

}  // namespace peerlab::report
