#pragma once
/// The suites `peerlab bench` and `qualify` run, from their specs (suite_spec.h, one per bench/*_suite.cc): lookup,
/// what qualify runs at each level, and the pieces the specs share to make pair-suite processes. (The wall-time
/// estimate is estimate.h's.) A suite's binary is built by the peerlab_qualify target: its peerlab_add_bench call in
/// bench/CMakeLists.txt says QUALIFY (qualify_target_test checks every binary named here).

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "harness/qualify/schedule.h"
#include "harness/qualify/suite_spec.h"

namespace peerlab::qualify {

/// The suite of a name, nullptr when unknown.
const Suite* findSuite(const std::string& name);
/// The suite whose rows carry run-file suite `result_suite` (peer_latency: peer_copy's), nullptr when none.
const Suite* suiteOfResults(const std::string& result_suite);
/// The facts of run-file suite `result_suite` (SuiteInfo::result_facts of the spec that holds them); the defaults of
/// measured rows for a suite without facts or unknown (health, test, or a suite of an older run file).
const ResultFacts& resultFacts(const std::string& result_suite);
/// The run-file suites whose rows are of `kind`, in page order.
std::vector<std::string> resultSuitesOf(RowKind kind);
/// "peer_copy, zcopy, alltoallv, moe, probe, ..."
std::string suiteNames();
/// The suites qualify runs at `level` when none is named, in page order.
std::vector<std::string> qualifyDefaultSuites(Level level = Level::kStandard);
/// "peer_copy,zcopy,alltoallv,host_copy,transport"
std::string qualifyDefaultSuitesText(Level level = Level::kStandard);
/// Every executable qualify and bench can start: each suite's binary and `peerlab` itself (the probe's parent and
/// worker), without duplicates.
std::vector<std::string> plannedExecutables();

/// How qualify runs the verified probe (`peerlab probe`) at a level: its arguments besides the pairs and methods, and
/// its deadline (the probe suite's facts: bench/probe_suite.cc).
struct ProbeRun {
  std::vector<std::string> args;
  double deadline_s = 900;
};
ProbeRun verifiedProbeRun(Level level);

/// A process of `suite` over pair `rounds` (a rank per GPU named) running `rows`; `what` goes in its label ("zcopy",
/// "transport nixl"), its deadline is `deadline_base_s` per round.
BenchJob pairRoundsJob(const Suite& suite, const std::string& binary, const std::string& what,
                       const report::PairRoundList& rounds, std::vector<report::RowSelection> rows,
                       double deadline_base_s);
/// A pair suite's process over `schedule` and, where pairs of it run at once and `guard` selects rows, its serial
/// sample first (the schedule's sample pairs, each alone, on the rows of `guard`; the runner checks the process's own
/// concurrent rounds against it when it ends): {serial sample, process} or {process}. `knobs` go to both.
std::vector<BenchJob> guardedPairRounds(const Suite& suite, const std::string& binary, const std::string& what,
                                        const PairSchedule& schedule, std::vector<report::RowSelection> rows,
                                        const std::vector<report::RowSelection>& guard, double deadline_base_s,
                                        const std::map<std::string, std::string>& knobs = {});

/// The rows of `rows` a --benchmark_filter of earlier versions selected (Google Benchmark's rule: the regular
/// expression found anywhere in the name; "" and "all" select every row; a leading '-' selects the rest), as one
/// selection per row. A filter that is not a regular expression selects nothing.
std::vector<report::RowSelection> legacySelections(const std::string& filter, const std::vector<SuiteRow>& rows);
/// The --benchmark_filter of a process recorded before plans were typed ("" when it had none), and the value of
/// `name` in its environment ("" when unset).
std::string legacyFilter(const BenchJob& job);
std::string legacyEnv(const BenchJob& job, const std::string& name);

}  // namespace peerlab::qualify
