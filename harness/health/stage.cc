#include "harness/health/stage.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "harness/health/copy_traffic.h"

namespace peerlab::health {
namespace {

double nowS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The link read shows its maximum generation and width: a read under traffic again cannot show it better.
bool linkAtMax(const GpuSample& s) {
  return s.pcie_gen.has() && s.pcie_width.has() && s.pcie_max_gen.has() && s.pcie_max_width.has() &&
         *s.pcie_gen >= *s.pcie_max_gen && *s.pcie_width >= *s.pcie_max_width;
}

}  // namespace

Stage Stage::begin(const Thresholds& t, const report::Fingerprint& fp, double max_s, std::FILE* out, bool traffic) {
  Stage s;
  s.t_ = t;
  s.traffic_ = traffic;
  if (!traffic) {
    // A link read at idle on purpose may have dropped its speed to save power: only its width (lanes lost) is judged.
    s.t_.pcie_min_gen = 1;
    if (s.t_.pcie_gen_below_max == "fail") s.t_.pcie_gen_below_max = "warn";
  }
  const double t0 = nowS();
  s.started_s_ = t0;
  std::vector<std::pair<int, std::string>> gpus;
  for (const report::GpuFingerprint& g : fp.gpus)
    if (!g.bus_id.empty()) gpus.push_back({g.ordinal, g.bus_id});
  auto m = Monitor::open(gpus);
  // Bus ids that do not match (an unusual driver format): NVML's own order.
  if (m.isOk() && (*m)->gpus().empty() && !gpus.empty()) m = Monitor::open();
  if (!m.isOk()) {
    s.unavailable_ = m.status().message();
    if (out) std::fprintf(out, "health: %s: every health check is unsupported\n", s.unavailable_.c_str());
    return s;
  }
  s.monitor_ = std::move(*m);
  const double opened = nowS();
  s.open_s_ = opened - t0;
  // The watch starts first and covers the first sample's copies: the minimum watch runs from here, alongside them.
  if (Status st = s.monitor_->startWatch(s.t_, max_s); !st.isOk()) s.wake_error_ += st.message();
  s.started_s_ = opened;
  s.before_ = s.monitor_->sample(traffic ? copyTraffic(&s.wake_error_) : TrafficHook(), s.t_.wake_ms);
  s.before_s_ = nowS() - opened;
  if (out) {
    std::fprintf(out, "health: %zu GPUs read through NVML (%s); watching XID events and clock event reasons\n",
                 s.before_.size(), s.monitor_->library().path().c_str());
    if (!s.wake_error_.empty()) std::fprintf(out, "health: PCIe link read at idle: %s\n", s.wake_error_.c_str());
    std::fflush(out);
  }
  return s;
}

std::vector<CheckResult> Stage::end(report::Run& run, double min_watch_s, const std::function<bool()>& interrupted) {
  std::vector<CheckResult> checks;
  nlohmann::json extra = nlohmann::json::object();
  if (!monitor_) {
    std::vector<int> ordinals;
    for (const report::GpuFingerprint& g : run.fingerprint.gpus)
      ordinals.push_back(g.ordinal);
    checks = unsupportedAll(ordinals, unavailable_);
    extra["unavailable"] = unavailable_;
  } else {
    while (nowS() - started_s_ < min_watch_s && !(interrupted && interrupted())) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    const double watched = nowS();
    WatchLog watch = monitor_->stopWatch();
    // A second read under traffic only where the first did not show the link at its best.
    std::vector<int> again;
    for (const GpuSample& s : before_)
      if (traffic_ && !linkAtMax(s)) again.push_back(s.gpu);
    TrafficHook wake;
    if (!again.empty()) {
      TrafficHook all = copyTraffic(&wake_error_);
      wake = [all, again](int gpu, const std::function<void()>& read) {
        // Elsewhere `read` does not run and the link is read at idle.
        if (std::find(again.begin(), again.end(), gpu) != again.end()) all(gpu, read);
      };
    }
    std::vector<GpuSample> after = monitor_->sample(wake, t_.wake_ms);
    checks = evaluate(before_, after, watch, t_);
    extra = toJson(watch, t_);
    extra["timing"] = {{"open_s", open_s_},
                       {"before_s", before_s_},
                       {"watch_s", watched - started_s_},
                       {"after_s", nowS() - watched},
                       {"after_under_traffic", again.size()}};
    extra["nvml_library"] = monitor_->library().path();
    extra["traffic"] = traffic_;
    if (!wake_error_.empty()) extra["wake_error"] = wake_error_;
    for (const auto& [gpu, reasons] : throttledGpus(watch, t_)) {
      for (report::Result& r : run.results) {
        if ((r.src && *r.src == gpu) || (r.dst && *r.dst == gpu)) r.extra["throttled"] = reasons;
      }
    }
  }
  std::vector<report::Result> rows = toResults(checks);
  run.results.insert(run.results.end(), rows.begin(), rows.end());
  run.extra["health"] = extra;
  return checks;
}

}  // namespace peerlab::health
