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

/// The JUnit XML document: UTF-8 and valid XML 1.0 whatever the checks' strings hold (see xmlEscape).
std::string renderJunit(const std::vector<Check>& checks, const JunitOptions& options = {});

/// Escapes text for XML attributes and content. What XML 1.0 does not take is shown as an escape instead: control
/// characters other than tab, newline and return as \x1b, bytes that are not UTF-8 as \xff, U+FFFE and U+FFFF (and
/// the discouraged C1 controls) as \uFFFE.
std::string xmlEscape(std::string_view text);

}  // namespace peerlab::report
