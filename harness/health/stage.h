#pragma once
/// Health around a run, as qualify and `peerlab health` use it: a sample of every GPU before (the PCIe link read under
/// copy traffic), the watcher during, a sample after, and the verdicts as run-file results.

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/health/health.h"
#include "harness/report/report.h"

namespace peerlab::health {

class Stage {
 public:
  /// Opens NVML for the GPUs of `fp` (every NVML GPU when it lists none, or when no bus id matches), samples them
  /// and starts the watch, which ends by itself after max_s. Prints one line to `out`. Without NVML every check will
  /// be unsupported, with the reason. `traffic` false: no copies wake the PCIe links (no CUDA at all: what a node
  /// running users' jobs gets), the links are read as they are.
  static Stage begin(const Thresholds& t, const report::Fingerprint& fp, double max_s, std::FILE* out,
                     bool traffic = true);

  /// Ends the watch (not before min_watch_s since begin, unless `interrupted` says so), samples again, appends the
  /// health results to `run`, marks the results of throttled GPUs ("throttled": [reasons]) and sets
  /// run.extra["health"] (with "timing": the seconds of each step). The after-sample wakes a GPU's link with copies
  /// again only where the first read did not show the link at its maximum generation and width. Returns the
  /// verdicts.
  std::vector<CheckResult> end(report::Run& run, double min_watch_s,
                               const std::function<bool()>& interrupted = nullptr);

  /// Why NVML cannot be read ("" when it can).
  const std::string& unavailable() const { return unavailable_; }

 private:
  Thresholds t_;
  std::unique_ptr<Monitor> monitor_;
  std::vector<GpuSample> before_;
  std::string unavailable_;
  std::string wake_error_;
  double started_s_ = 0;
  bool traffic_ = true;
  // Seconds spent opening NVML and in the first sample (its copy traffic included).
  double open_s_ = 0, before_s_ = 0;
};

}  // namespace peerlab::health
