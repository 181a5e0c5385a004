#include "harness/report/render/fleet_page.h"

#include <algorithm>
#include <sstream>
#include <vector>

#include "harness/report/actions.h"
#include "harness/report/render/chart_page.h"
#include "harness/report/render/site.h"

namespace peerlab::report {

namespace {

// The check categories of the checks engine, in its order (harness/report/evaluate.h): check families (not a suite).
const std::vector<std::string> kCategories = {"topology",  "health",  "probe",    "data",
                                              "bandwidth", "latency", "coverage", "baseline"};

// Longest text taken from the model for one cell.
constexpr size_t kMaxCellText = 300;
// Most failed checks listed for one node.
constexpr size_t kMaxFailuresShown = 8;

/// Text from the model as a cell shows it: at most kMaxCellText characters.
std::string clip(const std::string& s) {
  return s.size() > kMaxCellText ? s.substr(0, kMaxCellText) + "..." : s;
}

// A node's failed checks with their actions, as stored at ingest (at most kMaxFailuresShown).
std::vector<std::pair<std::string, std::string>> failuresOf(const std::optional<SiteCheckDetails>& checks,
                                                            const std::string& category) {
  std::vector<std::pair<std::string, std::string>> out;
  if (!checks) return out;
  for (const SiteFailedCheck& f : checks->failures) {
    if (out.size() >= kMaxFailuresShown) break;
    if (!category.empty() && clip(f.category) != category) continue;
    const std::optional<Action> a = actionById(clip(f.action));
    out.push_back({clip(f.category) + ": " + clip(f.name), a ? a->short_text : ""});
  }
  return out;
}

std::string categoryCell(const std::optional<SiteCheckDetails>& checks, const std::string& category) {
  if (!checks) return "<td class=\"muted\">-</td>";
  const auto it = checks->categories.find(category);
  if (it == checks->categories.end()) return "<td class=\"muted\">-</td>";
  const CheckCounts& c = it->second;
  const long long total = c.total, failed = c.failed, warnings = c.warnings;
  if (failed > 0) {
    std::string tip;
    for (const auto& [name, action] : failuresOf(checks, category))
      tip += (tip.empty() ? "" : "\n") + name + (action.empty() ? "" : " -> " + action);
    return "<td class=\"cell-fail\" title=\"" + htmlEscape(tip) + "\">" + std::to_string(failed) + " failed</td>";
  }
  if (warnings > 0) return "<td class=\"cell-warn\">" + std::to_string(warnings) + " warn</td>";
  // Coloured by what the checks said: green only where one passed; checks that were all unsupported or skipped
  // checked nothing.
  const long long passed = c.passed;
  const std::string cell = std::to_string(passed) + "/" + std::to_string(total);
  if (passed == 0) {
    return "<td class=\"cell-skip\" title=\"" + std::to_string(total) +
           " checks, none passed: unsupported or skipped (not checked)\">" + cell + "</td>";
  }
  const std::string rest =
      passed < total ? " title=\"" + std::to_string(total - passed) + " unsupported or skipped (not checked)\"" : "";
  return "<td class=\"cell-ok\"" + rest + ">" + cell + "</td>";
}

}  // namespace

// Runs counted nowhere (stand-ins, injected faults), listed so that nothing of them is hidden.
std::string injectedRunsSection(const KindModel& kind) {
  const std::vector<SiteInjectedRun>& runs = kind.injected_runs;
  if (runs.empty()) return "";
  std::ostringstream out;
  out << "<h2>Runs counted nowhere: stand-ins or injected faults</h2>\n<p class=\"injected\">" << runs.size()
      << (runs.size() == 1 ? " run" : " runs")
      << " of this kind ran with stand-ins (NVML, topology, probe worker) or injected faults: not this machine's own "
         "verdicts, so not in the fleet view, trends, regressions or baselines.</p>\n"
      << "<div class=\"tablebox\"><table class=\"injected-runs\"><tr><th>run</th><th class=\"l\">node</th>"
         "<th>verdict</th><th>time</th><th class=\"l\">host</th><th class=\"l\">what was not real</th></tr>\n";
  for (const SiteInjectedRun& r : runs) {
    const std::string id = r.run_id ? std::to_string(*r.run_id) : "-";
    // The node by the one name nodes are listed under (NodeName, else identity and host).
    const std::string name = clip(r.name.empty() ? r.host : r.name);
    out << "<tr><td>" << id << "</td><td class=\"l\">" << htmlEscape(name) << "</td><td class=\"muted\">"
        << htmlEscape(r.verdict.empty() ? "-" : clip(r.verdict) + " (injected)") << "</td><td>"
        << htmlEscape(clip(r.time)) << "</td><td class=\"l\">" << htmlEscape(clip(r.host)) << "</td><td class=\"l\">"
        << htmlEscape(clip(r.injected)) << "</td></tr>\n";
  }
  out << "</table></div>\n";
  return out.str();
}

std::string fleetPageName(const std::string& kind) {
  return "fleet-" + kindPageName(kind).substr(5);
}

/// One node's row: name, state, verdict, its latest run, a cell per check category, failed checks, outliers.
std::string nodeRow(const SiteNode& n) {
  const std::string state = clip(n.state);
  const std::string reason = clip(n.reason);
  const std::string verdict = clip(n.verdict);
  const bool out_of_service = !state.empty() && state != "in_service";
  // The node by the one name nodes are listed under: its Slurm NodeName, else its identity and host.
  const std::string shown = clip(!n.name.empty() ? n.name : n.node);
  const std::string age = clip(n.age.value_or(""));
  std::ostringstream out;
  out << "<tr><td class=\"l\">" << htmlEscape(shown) << "</td><td class=\"l" << (out_of_service ? " cell-warn" : "")
      << "\">" << htmlEscape(state.empty() ? "not recorded" : state + (reason.empty() ? "" : ": " + reason)) << "</td>";
  // Every verdict as stored; EMPTY (nothing checked) is never a pass.
  out << "<td class=\""
      << (verdict == "PASS"    ? "cell-ok"
          : verdict == "FAIL"  ? "cell-fail"
          : verdict == "EMPTY" ? "cell-warn\" title=\"the latest run checked nothing: not a pass"
                               : "muted")
      << "\">" << htmlEscape(verdict.empty() ? "-" : verdict) << "</td><td>" << htmlEscape(clip(n.time)) << "</td><td>"
      << htmlEscape(age.empty() ? "-" : age) << "</td><td class=\"l\">" << htmlEscape(clip(n.host))
      << "</td><td class=\"l\">" << htmlEscape(clip(n.node)) << "</td><td class=\"l\">"
      << htmlEscape(clip(n.tool) + (n.git_sha.empty() ? "" : " " + clip(n.git_sha).substr(0, 7))) << "</td>";
  for (const std::string& c : kCategories)
    out << categoryCell(n.check_details, c);
  std::string failed;
  for (const auto& [check, action] : failuresOf(n.check_details, ""))
    failed += (failed.empty() ? "" : "<br>") + htmlEscape(check) + (action.empty() ? "" : ": " + htmlEscape(action));
  out << "<td class=\"l\">" << (failed.empty() ? "-" : failed) << "</td><td class=\""
      << (n.outliers > 0 ? "cell-warn" : "cell-ok") << "\">" << std::max(n.outliers, 0) << "</td></tr>\n";
  return out.str();
}

std::string renderFleetPage(const KindModel& kind, const std::string& generated) {
  // Shown cut short; the page names come from the whole kind.
  const std::string name = clip(kind.kind);
  const std::vector<SiteNode>& nodes = kind.nodes;
  int outOfService = 0, failing = 0, unchecked = 0;
  for (const SiteNode& n : nodes) {
    const std::string state = clip(n.state);
    outOfService += !state.empty() && state != "in_service";
    failing += clip(n.verdict) == "FAIL";
    unchecked += clip(n.verdict) == "EMPTY";
  }
  std::ostringstream out;
  out << pageBegin("peerlab fleet: " + name);
  out << "<h1>peerlab fleet: " << htmlEscape(name) << "</h1>\n<p class=\"muted\"><a href=\"index.html\">all machine "
      << "kinds</a> &middot; <a href=\"" << htmlEscape(kindPageName(kind.kind)) << "\">trends</a> &middot; generated "
      << htmlEscape(generated) << "</p>\n";
  // Red only for a failed check: a node out of service (drained, down, reserved) is amber, not a verdict.
  out << "<p class=\""
      << (failing                     ? "verdict-fail"
          : outOfService || unchecked ? "verdict-warn"
                                      : "verdict-pass")
      << "\">" << nodes.size() << (nodes.size() == 1 ? " node: " : " nodes: ") << outOfService << " out of service, "
      << failing << " failing their latest run, " << unchecked << " whose latest run checked nothing (EMPTY)</p>\n";
  out << "<p class=\"muted\">Each node's latest run, checked at ingest by the checks engine (as qualify and report "
         "check it); the state is the scheduler's as peerlab recorded it (keyed by Slurm NodeName). A node is named by "
         "its NodeName, else by its board identity and host; age is how old its latest run is. \"below fleet\" counts "
         "series where the node sits outside its fleet: reported, not drained, unless the sweep is told to.</p>\n";
  out << "<div class=\"tablebox\"><table class=\"fleet-nodes\"><tr><th class=\"l\">node</th>"
         "<th class=\"l\">state</th><th>verdict</th><th>latest run</th><th>age</th><th class=\"l\">host</th>"
         "<th class=\"l\">board</th><th class=\"l\">peerlab</th>";
  for (const std::string& c : kCategories)
    out << "<th>" << c << "</th>";
  out << "<th class=\"l\">failed checks: action</th><th>below fleet</th></tr>\n";
  for (const SiteNode& n : nodes)
    out << nodeRow(n);
  out << "</table></div>\n";
  if (nodes.empty()) out << "<p class=\"muted\">No node of this kind has a run in the history that counts.</p>\n";
  out << injectedRunsSection(kind);
  out << pageEnd(ChartJsUse::kNone);
  return out.str();
}

}  // namespace peerlab::report
