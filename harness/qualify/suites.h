#pragma once
/// The suites `peerlab bench` and `qualify` run, from their specs (suite_spec.h, one per bench/*_suite.cc): lookup,
/// the processes of a suite for a level, GPUs and pairs, and what qualify runs at each level. (The wall-time estimate
/// is estimate.h's.) A suite's binary is built by the peerlab_qualify target: its peerlab_add_bench call in
/// bench/CMakeLists.txt says QUALIFY (qualify_target_test checks every binary named here).

#include <string>
#include <utility>
#include <vector>

#include "harness/qualify/suite_spec.h"

namespace peerlab::qualify {

/// The spec of a suite by name, nullptr when unknown.
const SuiteSpec* findSuite(const std::string& name);
/// The spec whose rows carry run-file suite `result_suite` (peer_latency: peer_copy's), nullptr when none.
const SuiteSpec* suiteOfResults(const std::string& result_suite);
/// "peer_copy, zcopy, alltoallv, moe, probe, ..."
std::string suiteNames();
/// The suites qualify runs at `level` when none is named, in page order.
std::vector<std::string> qualifyDefaultSuites(Level level = Level::kStandard);
/// "peer_copy,zcopy,alltoallv,host_copy,transport"
std::string qualifyDefaultSuitesText(Level level = Level::kStandard);
/// Every executable qualify and bench can start: each suite's binary and `peerlab` itself (the probe's parent and
/// worker), without duplicates.
std::vector<std::string> plannedExecutables();

/// The regex alternatives naming ordered pairs the way the benchmarks do: "0->1" one way, "0<->1" both ways
/// ("[0-9]+<?->[0-9]+" when every pair is covered).
std::string pairRegex(const std::vector<std::pair<int, int>>& pairs, bool all_pairs);

/// The processes of one suite for a request (level, GPUs, pairs).
std::vector<BenchJob> jobsFor(const SuiteSpec& spec, const SuiteRequest& request);
/// A kPairRounds process of `spec`'s binary over `rounds` (env PEERLAB_PAIR_ROUNDS, a rank per GPU named); `what`
/// goes in its label ("zcopy", "transport nixl").
BenchJob pairRoundsJob(const SuiteSpec& spec, const std::string& binary, const std::string& what,
                       const std::vector<std::vector<std::pair<int, int>>>& rounds, const std::string& filter,
                       double deadline_base_s);
/// A kPairRounds process over `schedule` and, where pairs of it run at once and `guard_filter` is set, its two samples
/// first (the first pair of the first concurrent round alone, then that round at once, on the rows of `guard_filter`):
/// {serial sample, concurrent sample, process} or {process}. `env` goes to all three.
std::vector<BenchJob> guardedPairRounds(const SuiteSpec& spec, const std::string& binary, const std::string& what,
                                        const std::vector<std::vector<std::pair<int, int>>>& rounds, bool concurrent,
                                        const std::string& schedule_basis, const std::string& filter,
                                        const std::string& guard_filter, double deadline_base_s,
                                        const std::vector<std::string>& env = {});
/// The environment a kPairRounds process reads its rounds from ("PEERLAB_PAIR_ROUNDS=0-1,2-3;1-0,3-2").
std::string pairRoundsEnv(const std::vector<std::vector<std::pair<int, int>>>& rounds);

}  // namespace peerlab::qualify
