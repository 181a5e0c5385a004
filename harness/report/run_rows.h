#pragma once
/// What a run holds, as the checks engine reads it: which suites and GPUs it covers, which rows are baselines, the
/// probe's cells. The pages draw from these too (harness/report/render/views.h).

#include <optional>
#include <string>
#include <vector>

#include "harness/report/report.h"

namespace peerlab::report {

/// Suites whose rows are collectives over all ranks (busbw is their figure) rather than pair transfers (their specs'
/// facts: harness/qualify/suite_spec.h ResultFacts).
bool isCollectiveSuite(const std::string& suite);
/// Suites whose rows are claimed-against-verified verdicts (the verified probe's), not measurements.
bool isVerdictSuite(const std::string& suite);
/// Implementations that are baselines drawn beside peerlab's own (nccl.*, torch.*, nvshmem.*, cuda.*).
bool isBaselineImpl(const std::string& impl);

/// Number of GPUs the run covers: the fingerprint's, or one past the highest ordinal in its results.
int gpuCount(const Run& run);
/// Suites present in the run, in a fixed order (probe, peer_copy, peer_latency, peer_enable, zcopy, alltoallv, moe,
/// then others).
std::vector<std::string> suitesIn(const Run& run);

/// One probe cell: an ordered pair and a method, the worst verdict over the sizes probed. Probe cells are counted this
/// way (ordered pair x method) by every output.
struct ProbeCell {
  std::string method;  ///< "ce_write" from "ce_write/4096"
  int src = 0;
  int dst = 0;
  std::string verdict;
  std::optional<bool> claimed;  ///< what the driver claimed, when the run says
  std::string detail;           ///< sizes and times
};
/// Cells in first-seen order of method, then pair.
std::vector<ProbeCell> probeCells(const Run& run);
/// Severity of a probe verdict, to pick the worst over sizes: -1 none, 0 ok, 1 unsupported/skipped, 2 error, 3 hang,
/// 4 corrupt.
int probeSeverity(const std::string& verdict);

/// Median of values (empty: 0).
double medianOf(std::vector<double> values);

}  // namespace peerlab::report
