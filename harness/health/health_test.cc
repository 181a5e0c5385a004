// Every health rule driven through the stand-in NVML (harness/health/testing/fake_nvml.cc): a healthy machine gives
// no warning or failure, and each injected fault is named by the right check on the right GPU only.

#include "harness/health/health.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>

#include "reference/testing/testing.h"

namespace peerlab::health {
namespace {

// Points NVML at a stand-in with a scenario for the life of one test.
class ScopedNvml {
 public:
  ScopedNvml(const char* library, const std::string& scenario) {
    ::setenv("PEERLAB_NVML_LIBRARY", library, 1);
    ::setenv("PEERLAB_FAKE_NVML", scenario.c_str(), 1);
  }
  ~ScopedNvml() {
    ::unsetenv("PEERLAB_NVML_LIBRARY");
    ::unsetenv("PEERLAB_FAKE_NVML");
  }
};

struct Outcome {
  std::vector<CheckResult> checks;
  WatchLog watch;
  const CheckResult* find(int gpu, const std::string& name) const {
    for (const CheckResult& c : checks)
      if (c.gpu == gpu && c.name == name) return &c;
    return nullptr;
  }
  Verdict verdict(int gpu, const std::string& name) const {
    const CheckResult* c = find(gpu, name);
    return c ? c->verdict : Verdict::kUnsupported;
  }
  std::string detail(int gpu, const std::string& name) const {
    const CheckResult* c = find(gpu, name);
    return c ? c->detail : "(no such check)";
  }
};

// Sample, watch for `watch_ms`, sample again, evaluate: what qualify does around its benchmarks.
Outcome runScenario(const std::string& scenario, const char* library = PEERLAB_FAKE_NVML_PATH, int watch_ms = 450,
                    const Thresholds& t = Thresholds()) {
  ScopedNvml env(library, scenario);
  Outcome o;
  auto monitor = Monitor::open();
  EXPECT_TRUE(monitor.isOk()) << monitor.status().message();
  if (!monitor.isOk()) return o;
  int hook_calls = 0;
  TrafficHook hook = [&](int, const std::function<void()>& read) {
    ++hook_calls;
    read();
  };
  auto before = (*monitor)->sample(hook, 0);
  Thresholds fast = t;
  fast.watch_poll_ms = 50;
  EXPECT_TRUE((*monitor)->startWatch(fast, 30).isOk());
  std::this_thread::sleep_for(std::chrono::milliseconds(watch_ms));
  o.watch = (*monitor)->stopWatch();
  auto after = (*monitor)->sample(hook, 0);
  EXPECT_EQ(hook_calls, 2 * static_cast<int>(before.size()));
  o.checks = evaluate(before, after, o.watch, t);
  return o;
}

void expectOnly(const Outcome& o, int gpu, const std::string& name, Verdict v) {
  EXPECT_EQ(o.verdict(gpu, name), v) << name << " on GPU " << gpu << ": " << o.detail(gpu, name);
  // Nothing else warns or fails, on any GPU.
  for (const CheckResult& c : o.checks) {
    if (c.gpu == gpu && c.name == name) continue;
    EXPECT_TRUE(c.verdict == Verdict::kOk || c.verdict == Verdict::kUnsupported)
        << "unexpected " << verdictName(c.verdict) << " for " << c.name << " on GPU " << c.gpu << ": " << c.detail;
  }
}

TEST(Health, HealthyMachineIsAllOkOrUnsupported) {
  Outcome o = runScenario("healthy");
  ASSERT_EQ(o.checks.size(), 2 * std::size(kCheckNames));
  for (int gpu : {0, 1}) {
    for (const char* n : {"pcie_link", "pcie_errors", "nvlink_state", "nvlink_errors", "fabric", "ecc", "row_remap",
                          "xid", "clock_events"}) {
      EXPECT_EQ(o.verdict(gpu, n), Verdict::kOk) << n << ": " << o.detail(gpu, n);
    }
    // The stand-in, like Ampere and later, remaps rows instead of retiring pages.
    EXPECT_EQ(o.verdict(gpu, "retired_pages"), Verdict::kUnsupported);
  }
  EXPECT_NE(o.detail(0, "pcie_link").find("Gen5 x16 of Gen5 x16, read under traffic"), std::string::npos)
      << o.detail(0, "pcie_link");
  EXPECT_NE(o.detail(0, "nvlink_state").find("18 of 18 links up"), std::string::npos);
  // NVML's enum value 6 (NVML_NVLINK_VERSION_4_0, what an H200 reports) is NVLink 4, never "version 6".
  EXPECT_NE(o.detail(0, "nvlink_state").find(", NVLink 4"), std::string::npos) << o.detail(0, "nvlink_state");
  EXPECT_EQ(o.detail(0, "nvlink_state").find("version 6"), std::string::npos) << o.detail(0, "nvlink_state");
  EXPECT_TRUE(o.watch.xid_why.empty()) << o.watch.xid_why;
}

TEST(Health, DowntrainedLinkFails) {
  Outcome o = runScenario("pcie_downtrain");
  expectOnly(o, 0, "pcie_link", Verdict::kFail);
  EXPECT_NE(o.detail(0, "pcie_link").find("Gen3 x8 of Gen5 x16"), std::string::npos) << o.detail(0, "pcie_link");
  EXPECT_NE(o.detail(0, "pcie_link").find("downtrained"), std::string::npos);
}

TEST(Health, GenerationBelowMaximumFollowsTheConfig) {
  Thresholds t;
  auto parsed = parseThresholds("[health]\npcie_gen_below_max = \"fail\"\npcie_min_gen = 4\n", "t.toml");
  ASSERT_TRUE(parsed.isOk()) << parsed.status().message();
  const std::string dir = ::testing::TempDir();
  const std::string path = dir + "/gen4.json";
  std::ofstream(path) << R"({"pcie": {"gen": 4}})";
  EXPECT_EQ(runScenario(path).verdict(0, "pcie_link"), Verdict::kWarn);
  EXPECT_EQ(runScenario(path, PEERLAB_FAKE_NVML_PATH, 100, *parsed).verdict(0, "pcie_link"), Verdict::kFail);
  std::ofstream(path) << R"({"pcie": {"gen": 3, "max_gen": 3}})";
  Outcome o = runScenario(path, PEERLAB_FAKE_NVML_PATH, 100, *parsed);
  EXPECT_EQ(o.verdict(0, "pcie_link"), Verdict::kFail) << o.detail(0, "pcie_link");
  EXPECT_NE(o.detail(0, "pcie_link").find("below the minimum Gen4"), std::string::npos);
}

TEST(Health, RisingPcieReplaysFail) {
  Outcome o = runScenario("pcie_replays");
  expectOnly(o, 0, "pcie_errors", Verdict::kFail);
  EXPECT_NE(o.detail(0, "pcie_errors").find("100 replays"), std::string::npos) << o.detail(0, "pcie_errors");
  // The same rise under a looser threshold passes.
  Thresholds loose;
  loose.pcie_max_replays = 100;
  EXPECT_EQ(runScenario("pcie_replays", PEERLAB_FAKE_NVML_PATH, 100, loose).verdict(0, "pcie_errors"), Verdict::kOk);
}

TEST(Health, RisingNvlinkCrcWarns) {
  Outcome o = runScenario("nvlink_crc");
  expectOnly(o, 0, "nvlink_errors", Verdict::kWarn);
  EXPECT_NE(o.detail(0, "nvlink_errors").find("link 0:"), std::string::npos) << o.detail(0, "nvlink_errors");
}

TEST(Health, NvlinkRecoveryFails) {
  Outcome o = runScenario("nvlink_recovery");
  expectOnly(o, 0, "nvlink_errors", Verdict::kFail);
}

TEST(Health, LinkDownFails) {
  Outcome o = runScenario("nvlink_down");
  expectOnly(o, 0, "nvlink_state", Verdict::kFail);
  EXPECT_NE(o.detail(0, "nvlink_state").find("17 of 18 links up"), std::string::npos) << o.detail(0, "nvlink_state");
  EXPECT_NE(o.detail(0, "nvlink_state").find("down: link 3"), std::string::npos);
}

TEST(Health, NoNvlinkIsUnsupportedNotOk) {
  const std::string path = ::testing::TempDir() + "/pcie_only.json";
  std::ofstream(path) << R"({"gpus": 1, "nvlinks": 0})";
  Outcome o = runScenario(path);
  EXPECT_EQ(o.verdict(0, "nvlink_state"), Verdict::kUnsupported);
  EXPECT_EQ(o.verdict(0, "nvlink_errors"), Verdict::kUnsupported);
  EXPECT_NE(o.detail(0, "nvlink_state").find("not supported"), std::string::npos) << o.detail(0, "nvlink_state");
}

TEST(Health, AllLinksDownOnEveryGpuMeansNvlinkIsNotInUse) {
  // A single SXM GPU in a VM: its links exist but none is trained. Nothing is expected of them, nor of the fabric.
  const std::string path = ::testing::TempDir() + "/lonely.json";
  std::ofstream(path) << R"({"gpus": 1, "nvlink_down": [0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17],
                             "fabric": {"state": 1}})";
  Outcome o = runScenario(path);
  EXPECT_EQ(o.verdict(0, "nvlink_state"), Verdict::kUnsupported) << o.detail(0, "nvlink_state");
  EXPECT_NE(o.detail(0, "nvlink_state").find("not in use"), std::string::npos);
  EXPECT_EQ(o.verdict(0, "nvlink_errors"), Verdict::kUnsupported);
  EXPECT_EQ(o.verdict(0, "fabric"), Verdict::kUnsupported) << o.detail(0, "fabric");
  // The same GPU beside one whose links are up has lost them all: that fails.
  const std::string two = ::testing::TempDir() + "/lost.json";
  std::ofstream(two) << R"({"gpus": 2, "nvlink_down": [0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]})";
  Outcome lost = runScenario(two);
  EXPECT_EQ(lost.verdict(0, "nvlink_state"), Verdict::kFail) << lost.detail(0, "nvlink_state");
  EXPECT_EQ(lost.verdict(1, "nvlink_state"), Verdict::kOk);
}

TEST(Health, DoubleBitEccFails) {
  Outcome o = runScenario("ecc_dbe");
  expectOnly(o, 0, "ecc", Verdict::kFail);
  EXPECT_NE(o.detail(0, "ecc").find("volatile 2 uncorrected"), std::string::npos) << o.detail(0, "ecc");
}

TEST(Health, PastSramParityErrorWarnsWithCountAndWhere) {
  Outcome o = runScenario("sram_parity");
  expectOnly(o, 0, "ecc", Verdict::kWarn);
  EXPECT_NE(o.detail(0, "ecc").find("past uncorrected errors: 1 (SRAM 1 parity in SM 1)"), std::string::npos)
      << o.detail(0, "ecc");
}

TEST(Health, PendingRowRemapFails) {
  Outcome o = runScenario("row_remap_pending");
  expectOnly(o, 0, "row_remap", Verdict::kFail);
  EXPECT_NE(o.detail(0, "row_remap").find("pending yes"), std::string::npos) << o.detail(0, "row_remap");
  EXPECT_NE(o.detail(0, "row_remap").find("banks by spare rows left: max 640"), std::string::npos);
}

TEST(Health, PendingPageRetirementFails) {
  Outcome o = runScenario("retired_pending");
  expectOnly(o, 0, "retired_pages", Verdict::kFail);
}

TEST(Health, XidArrivingMidRunFailsWithItsMeaning) {
  Outcome o = runScenario("xid");
  expectOnly(o, 0, "xid", Verdict::kFail);
  EXPECT_NE(o.detail(0, "xid").find("XID 79 (GPU has fallen off the bus)"), std::string::npos) << o.detail(0, "xid");
  ASSERT_EQ(o.watch.xids.size(), 1u);
  EXPECT_GT(o.watch.xids[0].t_s, o.watch.start_s);
  EXPECT_EQ(toJson(o.watch, Thresholds())["xids"][0]["xid"], 79);
  // An ignored XID is listed, not failed.
  Thresholds t;
  t.xid_ignore = {79};
  Outcome ignored = runScenario("xid", PEERLAB_FAKE_NVML_PATH, 450, t);
  EXPECT_EQ(ignored.verdict(0, "xid"), Verdict::kOk) << ignored.detail(0, "xid");
  EXPECT_NE(ignored.detail(0, "xid").find("(ignored)"), std::string::npos);
}

TEST(Health, ThermalSlowdownFailsAndMarksTheGpuThrottled) {
  Outcome o = runScenario("thermal");
  expectOnly(o, 0, "clock_events", Verdict::kFail);
  EXPECT_NE(o.detail(0, "clock_events").find("sw_thermal"), std::string::npos) << o.detail(0, "clock_events");
  EXPECT_NE(o.detail(0, "clock_events").find("hw_thermal"), std::string::npos);
  auto throttled = throttledGpus(o.watch, Thresholds());
  ASSERT_EQ(throttled.size(), 1u);
  EXPECT_EQ(throttled[0].first, 0);
  ASSERT_FALSE(o.watch.windows.empty());
  EXPECT_GE(o.watch.windows[0].end_s, o.watch.windows[0].start_s);
  nlohmann::json j = toJson(o.watch, Thresholds());
  EXPECT_EQ(j["throttled_gpus"]["0"][0], "sw_thermal");
  // A power cap alone is not a failure.
  const std::string path = ::testing::TempDir() + "/powercap.json";
  std::ofstream(path) << R"({"clock_reasons": 4})";
  Outcome cap = runScenario(path);
  EXPECT_EQ(cap.verdict(0, "clock_events"), Verdict::kOk) << cap.detail(0, "clock_events");
  EXPECT_NE(cap.detail(0, "clock_events").find("sw_power_cap"), std::string::npos);
}

TEST(Health, FabricNotCompletedFails) {
  Outcome o = runScenario("fabric_incomplete");
  expectOnly(o, 0, "fabric", Verdict::kFail);
  EXPECT_NE(o.detail(0, "fabric").find("registration in progress"), std::string::npos) << o.detail(0, "fabric");
  const std::string path = ::testing::TempDir() + "/degraded.json";
  std::ofstream(path) << R"({"fabric": {"health_mask": 1}})";
  EXPECT_EQ(runScenario(path, PEERLAB_FAKE_NVML_PATH, 100).verdict(0, "fabric"), Verdict::kWarn);
}

TEST(Health, FunctionTheDriverLacksIsUnsupported) {
  // Entry points that answer "function not found" ...
  Outcome o = runScenario("missing_function");
  for (const char* n : {"row_remap", "fabric", "xid"}) {
    EXPECT_EQ(o.verdict(0, n), Verdict::kUnsupported) << n << ": " << o.detail(0, n);
    EXPECT_NE(o.detail(0, n).find("function not found"), std::string::npos) << n << ": " << o.detail(0, n);
  }
  EXPECT_EQ(o.verdict(0, "clock_events"), Verdict::kOk);
  // ... and a library that does not export them at all.
  Outcome m = runScenario("healthy", PEERLAB_FAKE_NVML_MINIMAL_PATH);
  for (const char* n : {"row_remap", "fabric", "xid"}) {
    EXPECT_EQ(m.verdict(0, n), Verdict::kUnsupported) << n << ": " << m.detail(0, n);
    EXPECT_NE(m.detail(0, n).find("function not found"), std::string::npos) << n << ": " << m.detail(0, n);
  }
  // Clock reasons through the pre-r535 name still work.
  EXPECT_EQ(m.verdict(0, "clock_events"), Verdict::kOk) << m.detail(0, "clock_events");
  EXPECT_EQ(m.verdict(0, "pcie_link"), Verdict::kOk);
}

// Wrap mode (fault injection on a real GPU), with a copy of the stand-in playing the real library.
TEST(Health, WrapModeForwardsRealAnswersAndInjectsOneFault) {
  const std::string inner = ::testing::TempDir() + "/inner_nvml.so";
  std::filesystem::copy_file(PEERLAB_FAKE_NVML_PATH, inner, std::filesystem::copy_options::overwrite_existing);
  ::setenv("PEERLAB_FAKE_NVML_REAL", inner.c_str(), 1);
  // The "real" machine has a past SRAM error on GPU 0 and no NVLink; the wrapper adds a downtrained link.
  const std::string real = ::testing::TempDir() + "/real.json";
  std::ofstream(real) << R"({"nvlinks": 0, "ecc": {"agg_unc": 1, "sram_sm_parity": 1}})";
  ::setenv("PEERLAB_FAKE_NVML_INNER", real.c_str(), 1);
  Outcome o = runScenario("wrap:pcie_downtrain");
  EXPECT_EQ(o.verdict(0, "pcie_link"), Verdict::kFail) << o.detail(0, "pcie_link");
  EXPECT_EQ(o.verdict(0, "ecc"), Verdict::kWarn) << o.detail(0, "ecc");
  EXPECT_EQ(o.verdict(0, "nvlink_state"), Verdict::kUnsupported) << o.detail(0, "nvlink_state");
  EXPECT_EQ(o.verdict(1, "pcie_link"), Verdict::kOk) << o.detail(1, "pcie_link");
  // XIDs, replays and thermal slowdown are added to the real answers too.
  for (const auto& [fault, check] :
       std::vector<std::pair<std::string, std::string>>{{"xid", "xid"},
                                                        {"pcie_replays", "pcie_errors"},
                                                        {"thermal", "clock_events"},
                                                        {"ecc_dbe", "ecc"},
                                                        {"row_remap_pending", "row_remap"}}) {
    Outcome f = runScenario("wrap:" + fault);
    EXPECT_EQ(f.verdict(0, check), Verdict::kFail) << fault << ": " << f.detail(0, check);
    EXPECT_NE(f.verdict(1, check), Verdict::kFail) << fault << ": " << f.detail(1, check);
  }
  // Without a real library to wrap, NVML does not initialise.
  ::setenv("PEERLAB_FAKE_NVML_REAL", "/nonexistent/libnvidia-ml.so.1", 1);
  {
    ScopedNvml env(PEERLAB_FAKE_NVML_PATH, "wrap:healthy");
    EXPECT_FALSE(Monitor::open().isOk());
  }
  ::unsetenv("PEERLAB_FAKE_NVML_REAL");
  ::unsetenv("PEERLAB_FAKE_NVML_INNER");
}

TEST(Health, NoLibraryIsUnavailableAndEveryCheckUnsupported) {
  ScopedNvml env("/nonexistent/libnvidia-ml.so.1", "healthy");
  auto monitor = Monitor::open();
  ASSERT_FALSE(monitor.isOk());
  EXPECT_EQ(monitor.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(monitor.status().message().find("/nonexistent/libnvidia-ml.so.1"), std::string::npos);
  auto checks = unsupportedAll({0}, monitor.status().message());
  ASSERT_EQ(checks.size(), std::size(kCheckNames));
  for (const report::Result& r : toResults(checks)) {
    EXPECT_EQ(r.suite, "health");
    EXPECT_EQ(r.impl, "nvml");
    EXPECT_EQ(r.status, "unsupported");
    EXPECT_EQ(r.src, 0);
    EXPECT_NE(r.detail.find("cannot load"), std::string::npos);
  }
}

TEST(Health, GpusMapToCudaOrdinalsByBusId) {
  ScopedNvml env(PEERLAB_FAKE_NVML_PATH, "pcie_downtrain");
  // CUDA shows only the stand-in's second GPU (bus 2b), as its ordinal 0.
  auto monitor = Monitor::open({{0, "0000:2B:00.0"}});
  ASSERT_TRUE(monitor.isOk()) << monitor.status().message();
  ASSERT_EQ((*monitor)->gpus(), std::vector<int>{0});
  auto s = (*monitor)->sample();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].bus_id, "0000:2b:00.0");
  // The fault is on NVML's GPU 0, which CUDA does not show: nothing fails.
  EXPECT_EQ(*s[0].pcie_width, 16u);
  EXPECT_FALSE(s[0].under_traffic);
}

TEST(HealthThresholds, DefaultsFollowDcgm) {
  auto t = parseThresholds("[qualify]\nbaseline_threshold_pct = 5.0\n", "q.toml");
  ASSERT_TRUE(t.isOk()) << t.status().message();
  EXPECT_EQ(t->pcie_max_replays, 80);
  EXPECT_EQ(t->nvlink_max_recovery, 0);
  EXPECT_EQ(t->nvlink_max_crc_per_s, 100);
  EXPECT_EQ(t->retired_pages_max, 63);
  EXPECT_EQ(t->row_remap_max_uncorrected, 512);
  EXPECT_EQ(t->clock_fail_reasons.size(), 4u);
}

TEST(HealthThresholds, TheBuiltInConfigParses) {
  const char* src = std::getenv("PEERLAB_SOURCE_DIR");
  if (!src) GTEST_SKIP() << "PEERLAB_SOURCE_DIR is not set (ctest sets it)";
  std::ifstream f(std::string(src) + "/reports/qualify.toml");
  ASSERT_TRUE(f) << "reports/qualify.toml not found under " << src;
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto t = parseThresholds(text, "reports/qualify.toml");
  ASSERT_TRUE(t.isOk()) << t.status().message();
  EXPECT_EQ(t->pcie_max_replays, 80);
  EXPECT_EQ(t->ecc_aggregate_uncorrected, "warn");
}

TEST(HealthThresholds, BadInputNamesTheKeyAndLine) {
  auto unknown = parseThresholds("[health]\npcie_max_replay = 3\n", "q.toml");
  ASSERT_FALSE(unknown.isOk());
  EXPECT_EQ(unknown.status().message(), "q.toml:2: unknown key pcie_max_replay in [health]");
  auto range = parseThresholds("[health]\n\nwatch_poll_ms = 1\n", "q.toml");
  ASSERT_FALSE(range.isOk());
  EXPECT_NE(range.status().message().find("q.toml:3: [health] watch_poll_ms = 1 is outside 10 .. 5000"),
            std::string::npos)
      << range.status().message();
  auto reason = parseThresholds("[health]\nclock_fail_reasons = [\"hot\"]\n", "q.toml");
  ASSERT_FALSE(reason.isOk());
  EXPECT_NE(reason.status().message().find("unknown reason"), std::string::npos);
  auto verdict = parseThresholds("[health]\necc_aggregate_uncorrected = \"maybe\"\n", "q.toml");
  ASSERT_FALSE(verdict.isOk());
  auto syntax = parseThresholds("[health\n", "q.toml");
  ASSERT_FALSE(syntax.isOk());
  EXPECT_EQ(syntax.status().message().rfind("q.toml:1: ", 0), 0u) << syntax.status().message();
}

TEST(HealthXid, CommonXidsHaveMeanings) {
  for (unsigned long long x : {13, 31, 43, 45, 48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120}) {
    EXPECT_STRNE(xidMeaning(x), "") << "XID " << x;
  }
  EXPECT_STREQ(xidMeaning(4242), "");
  EXPECT_EQ(clockReasonNames(0x48), "hw_slowdown,hw_thermal");
  EXPECT_EQ(clockReasonNames(0), "none");
}

}  // namespace
}  // namespace peerlab::health
