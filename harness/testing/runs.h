#pragma once
/// Builders of the runs, run-file rows and checks tests write again and again (header-only: a test that uses them links
/// the run model, peerlab::report, as it does anyway).

#include <optional>
#include <string>
#include <vector>

#include "harness/report/check_record.h"
#include "harness/report/report.h"
#include "reference/testing/testing.h"

namespace peerlab::testing {

/// A row that is only a status: a process or case of `suite` that failed, was skipped or ran ("ok").
inline report::Result statusRow(const std::string& suite, const std::string& name, const std::string& impl,
                                const std::string& status) {
  report::Result r;
  r.suite = suite;
  r.name = name;
  r.impl = impl;
  r.status = status;
  return r;
}

/// A bandwidth row of `suite`: `impl` moving `bytes` from GPU `src` to `dst` at `gbps` (algbw), its time from those,
/// its data verified (wrong = 0).
inline report::Result bandwidthRow(const std::string& suite, const std::string& impl, int src, int dst, double bytes,
                                   double gbps, const std::string& name = "uni") {
  report::Result r = statusRow(suite, name, impl, "ok");
  r.src = src;
  r.dst = dst;
  r.bytes = bytes;
  r.algbw_gbps = gbps;
  r.time_us = bytes / gbps / 1e3;
  r.wrong = 0;
  return r;
}

/// A verified-probe cell of the `suite` rows (the probe's): `method` between GPUs `src` and `dst` with its
/// `verdict` and what the driver claimed.
inline report::Result probeCellRow(const std::string& suite, int src, int dst, const std::string& verdict, bool claimed,
                                   const std::string& method = "ce_write/4096") {
  report::Result r = statusRow(suite, method, "peerlab.probe", verdict);
  r.src = src;
  r.dst = dst;
  r.extra["claimed"] = claimed;
  return r;
}

/// A latency row of `suite`: `impl` running `name` between GPUs `src` and `dst` over `ranks` ranks, `bytes` in
/// `time_us`.
inline report::Result latencyRow(const std::string& suite, const std::string& name, const std::string& impl, int src,
                                 int dst, double bytes, double time_us, int ranks = 2) {
  report::Result r = statusRow(suite, name, impl, "ok");
  r.src = src;
  r.dst = dst;
  r.ranks = ranks;
  r.bytes = bytes;
  r.time_us = time_us;
  return r;
}

/// A health reading of NVML: check `name` of GPU `gpu` (of the whole machine when `gpu` < 0) with its verdict
/// ("ok", "warn", "fail", "unsupported") and detail.
inline report::Result healthRow(int gpu, const std::string& name, const std::string& verdict,
                                const std::string& detail = "") {
  report::Result r = statusRow("health", name, "nvml", verdict);
  if (gpu >= 0) r.src = gpu;
  r.detail = detail;
  return r;
}

/// A new run of a synthetic machine: host `hostname`, driver 580.159.04, CUDA 13.0, NCCL 2.28.3 and `gpus` GPUs of
/// `model` (UUID GPU-<n>, bus 0000:0<n>:00.0); no results yet.
inline report::Run machineRun(const std::string& hostname, int gpus, const std::string& model = "NVIDIA H200") {
  report::Run run = report::newRun();
  run.fingerprint.hostname = hostname;
  run.fingerprint.driver = "580.159.04";
  run.fingerprint.cuda_runtime = "13.0";
  run.fingerprint.nccl = "2.28.3";
  for (int g = 0; g < gpus; ++g)
    run.fingerprint.gpus.push_back({g, "GPU-" + std::to_string(g), "0000:0" + std::to_string(g) + ":00.0", model});
  return run;
}

/// A check as the engine would make it: its family, name, status, figures and reason.
inline report::Check checkOf(const std::string& category, const std::string& name, report::CheckStatus status,
                             const std::string& measured = "", const std::string& expected = "",
                             const std::string& reason = "", std::optional<double> measured_value = std::nullopt,
                             std::optional<double> expected_value = std::nullopt) {
  report::Check c;
  c.category = category;
  c.name = name;
  c.status = status;
  c.measured = measured;
  c.expected = expected;
  c.reason = reason;
  c.measured_value = measured_value;
  c.expected_value = expected_value;
  return c;
}

/// A committed run file (`relative` to the repository: "reports/runs/....json.gz"), read by the one reader; a run
/// that does not read fails the test and comes back empty.
inline report::Run committedRun(const std::string& relative) {
  auto run = report::readRun(sourcePath(relative));
  EXPECT_TRUE(run.isOk()) << relative << ": " << run.status().toString();
  return run.isOk() ? *run : report::Run{};
}

/// The check of `checks` named `name`, nullptr when none is.
inline const report::Check* checkNamed(const std::vector<report::Check>& checks, const std::string& name) {
  for (const report::Check& c : checks) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

}  // namespace peerlab::testing
