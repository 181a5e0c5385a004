#pragma once
/// Builders of the run-file rows tests write again and again (header-only: a test that uses them links the run model,
/// peerlab::report, as it does anyway).

#include <string>
#include <vector>

#include "harness/report/check_record.h"
#include "harness/report/report.h"

namespace peerlab::testing {

/// A bandwidth row of `suite`: `impl` moving `bytes` from GPU `src` to `dst` at `gbps` (algbw), its time from those,
/// its data verified (wrong = 0).
inline report::Result bandwidthRow(const std::string& suite, const std::string& impl, int src, int dst, double bytes,
                                   double gbps, const std::string& name = "uni") {
  report::Result r;
  r.suite = suite;
  r.name = name;
  r.impl = impl;
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
  report::Result r;
  r.suite = suite;
  r.name = method;
  r.impl = "peerlab.probe";
  r.src = src;
  r.dst = dst;
  r.status = verdict;
  r.extra["claimed"] = claimed;
  return r;
}

/// The check of `checks` named `name`, nullptr when none is.
inline const report::Check* checkNamed(const std::vector<report::Check>& checks, const std::string& name) {
  for (const report::Check& c : checks) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

}  // namespace peerlab::testing
