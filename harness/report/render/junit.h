#pragma once
/// junit.xml for CI dashboards: one testcase per qualify check, a failure message with the numbers.

#include <string>
#include <string_view>
#include <vector>

#include "harness/report/checks.h"

namespace peerlab::report {

struct JunitOptions {
  std::string name = "peerlab.qualify";  ///< testsuites name; each category becomes testsuite "<name>.<category>"
  std::string hostname;
  std::string timestamp;       ///< ISO 8601
  double time_s = 0;           ///< the whole run's wall time
  std::string disabled_rules;  ///< disabledRulesNote() of the run: in the header comment and each suite's properties
  std::string injected;        ///< injectionNote() of the run: the same places, as "INJECTED: ..."
};

/// The JUnit XML document: UTF-8 and valid XML 1.0 whatever the checks' strings hold (see xmlEscape, escape.h).
std::string renderJunit(const std::vector<Check>& checks, const JunitOptions& options = {});

}  // namespace peerlab::report
