#pragma once
/// The rates and fixed costs behind every suite's time estimate (bench/*_suite.cc): process start, CUDA contexts,
/// NCCL communicators, and bytes at the rates the topology gives each link. Calibrated on the committed runs
/// (reports/runs/, reports/qualify/); estimate_test.cc keeps every committed process within 2x of its wall time.

#include <functional>
#include <string>
#include <vector>

#include "harness/qualify/suite_spec.h"
#include "harness/report/plan_record.h"

namespace peerlab::qualify::cost {

inline constexpr double kProcessStartS = 0.4;  ///< exec, CUDA runtime, the benchmark library
inline constexpr double kContextS = 0.35;      ///< one CUDA context (ranks create theirs at the same time)
inline constexpr double kNcclInitS = 0.5;      ///< one NCCL communicator
/// A rank of a pair suite's job beyond two: their contexts do not come up fully in parallel (measured on 4x H100,
/// 15bd040 and c6c3604: a sample of one round on 4 ranks took 0.5-1.2 s more than one pair alone on 2).
inline constexpr double kExtraRankS = 0.28;
inline constexpr double kMiB = 1024.0 * 1024.0;

/// GB/s one GPU's PCIe link carries (one direction).
double hostRate(const report::PlanTopology& t, int g);
/// GB/s between two GPUs (one direction): their NVLinks, else the slower PCIe link (halved across sockets).
double pairRate(const report::PlanTopology& t, int s, int d);
/// GB/s one GPU sends to all others at once: its NVLinks, else its PCIe link.
double gpuRate(const report::PlanTopology& t, int g);
/// GB/s of a copy within one GPU's memory (half its DRAM peak).
double deviceRate(const report::PlanTopology& t, int g);
/// Seconds to move `bytes` `ops` times at `gbps`.
double seconds(double bytes, double ops, double gbps);
/// 4 KiB, 16 KiB, ... up to `to`.
std::vector<double> sizesBy4(double from, double to);

/// Cases counted with their fixed and data costs.
struct Tally {
  double cases = 0;
  double fixed_s = 0;
  double data_s = 0;
  void add(double n, double fixed_each, double data_each = 0) {
    cases += n;
    fixed_s += n * fixed_each;
    data_s += n * data_each;
  }
};

/// The estimate of a process: `start_s` plus the tally, with its basis written out.
JobEstimate fromTally(double start_s, const Tally& tally);

/// The rows of `rows` that `work` runs, tallied: a row alone costs what `cost` gives it; the rows of one group
/// (SuiteRow::group) run at once and cost what the slowest of them does.
Tally tallyRows(const std::vector<SuiteRow>& rows, const report::BenchPlan& work,
                const std::function<Tally(const SuiteRow&)>& cost);

/// "4.2", "95"
std::string fmt(double v);

}  // namespace peerlab::qualify::cost
