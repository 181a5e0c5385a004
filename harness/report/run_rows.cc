#include "harness/report/run_rows.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "harness/qualify/suites.h"
#include "harness/report/format.h"

namespace peerlab::report {

namespace {

bool pairResult(const Result& r) {
  return r.src && r.dst;
}

}  // namespace

int probeSeverity(const std::string& v) {
  if (v.empty()) return -1;
  if (v == "ok") return 0;
  if (v.rfind("unsupported", 0) == 0 || v.rfind("skipped", 0) == 0) return 1;
  if (v == "corrupt") return 4;
  if (v == "hang") return 3;
  return 2;
}

bool isCollectiveSuite(const std::string& suite) {
  return qualify::resultFacts(suite).collective;
}

bool isVerdictSuite(const std::string& suite) {
  return qualify::resultFacts(suite).kind == qualify::RowKind::kVerdicts;
}

bool isBaselineImpl(const std::string& impl) {
  for (const char* p : {"nccl.", "torch.", "nvshmem.", "cuda.", "nccl", "torch"}) {
    if (impl.rfind(p, 0) == 0) return true;
  }
  return false;
}

int gpuCount(const Run& run) {
  int n = static_cast<int>(run.fingerprint.gpus.size());
  for (const auto& g : run.fingerprint.gpus)
    n = std::max(n, g.ordinal + 1);
  for (const Result& r : run.results) {
    if (r.src) n = std::max(n, *r.src + 1);
    if (r.dst) n = std::max(n, *r.dst + 1);
  }
  return n;
}

std::vector<std::string> suitesIn(const Run& run) {
  // In the order the run met them (the probe, then each suite's process in the plan's order, which is the suites'
  // page order: harness/qualify/suite_spec.h); the machine's health and the GPU tests last.
  std::vector<std::string> out, last;
  std::set<std::string> present;
  for (const Result& r : run.results) {
    if (!present.insert(r.suite).second) continue;
    (r.suite == "health" || r.suite == "test" ? last : out).push_back(r.suite);
  }
  out.insert(out.end(), last.begin(), last.end());
  return out;
}

std::vector<ProbeCell> probeCells(const Run& run) {
  std::vector<ProbeCell> out;
  std::map<std::tuple<std::string, int, int>, size_t> index;
  for (const Result& r : run.results) {
    if (!isVerdictSuite(r.suite) || !pairResult(r)) continue;
    const std::string method = r.name.substr(0, r.name.find('/'));
    const auto key = std::make_tuple(method, *r.src, *r.dst);
    auto it = index.find(key);
    if (it == index.end()) {
      it = index.emplace(key, out.size()).first;
      ProbeCell c;
      c.method = method;
      c.src = *r.src;
      c.dst = *r.dst;
      out.push_back(std::move(c));
    }
    ProbeCell& c = out[it->second];
    if (probeSeverity(r.status) > probeSeverity(c.verdict)) c.verdict = r.status;
    if (r.extra.contains("claimed") && r.extra["claimed"].is_boolean()) {
      c.claimed = c.claimed.value_or(false) || r.extra["claimed"].get<bool>();
    }
    std::string d = r.name + ": " + r.status;
    if (r.time_us) d += formatted(" (%.1f us)", *r.time_us);
    if (r.extra.contains("first_bad") && r.extra["first_bad"].is_number())
      d += ", first bad " + r.extra["first_bad"].dump();
    if (r.wrong && *r.wrong > 0) d += ", " + std::to_string(static_cast<long long>(*r.wrong)) + " wrong";
    c.detail += (c.detail.empty() ? "" : "; ") + d;
  }
  // Methods in first-seen order, pairs in order within a method.
  std::vector<std::string> methods;
  for (const ProbeCell& c : out) {
    if (std::find(methods.begin(), methods.end(), c.method) == methods.end()) methods.push_back(c.method);
  }
  std::stable_sort(out.begin(), out.end(), [&](const ProbeCell& a, const ProbeCell& b) {
    const auto ia = std::find(methods.begin(), methods.end(), a.method) - methods.begin();
    const auto ib = std::find(methods.begin(), methods.end(), b.method) - methods.begin();
    return std::tie(ia, a.src, a.dst) < std::tie(ib, b.src, b.dst);
  });
  return out;
}

double medianOf(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t m = values.size() / 2;
  return values.size() % 2 ? values[m] : (values[m - 1] + values[m]) / 2;
}

}  // namespace peerlab::report
