// The probe on real GPUs, through the same parent/worker path as `peerlab probe` (the peerlab binary re-executed as
// `peerlab probe-worker`). This test process never initializes CUDA itself: GPUs are counted by the worker's
// inventory, and the test checks that libcuda never got loaded here.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "harness/report/report.h"
#include "harness/watchdog/probe_cache.h"
#include "harness/watchdog/probe_runner.h"
#include "harness/watchdog/watchdog.h"
#include "reference/probe/probe.h"
#include "reference/testing/temp_dir.h"
#include "reference/testing/testing.h"

namespace peerlab::probe {
namespace {

RunnerOptions realOptions(const std::string& inject = "") {
  RunnerOptions opt;
  opt.worker_argv = workerCommand(PEERLAB_CLI_PATH);
  if (!inject.empty()) opt.worker_env = {std::string(kInjectEnv) + "=" + inject};
  opt.sizes = {4096, 64ull << 20};
  opt.cell_timeout = std::chrono::seconds(5);
  opt.setup_timeout = std::chrono::seconds(60);
  opt.run_seed = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  return opt;
}

void expectNoChildren() {
  EXPECT_EQ(watchdog::liveChildren(), 0);
  errno = 0;
  EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

std::string describe(const CellReport& c) {
  return std::string(methodName(c.spec.method)) + " " + std::to_string(c.spec.src) + "->" + std::to_string(c.spec.dst) +
         " " + std::to_string(c.spec.bytes) + " B: " + std::string(verdictName(c.result.verdict)) + " " +
         c.result.error + (c.result.verdict == Verdict::kCorrupt ? " wrong=" + std::to_string(c.result.wrong) : "");
}

// Starts a session; skips (with the reason) unless the worker sees at least two GPUs.
#define START_OR_SKIP(session, options)                                                              \
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto session, ProbeSession::start(options));                          \
  if (!session->inventory().error.empty()) GTEST_SKIP() << "no GPU: " << session->inventory().error; \
  if (session->inventory().count() < 2) GTEST_SKIP() << "needs 2 GPUs, " << session->inventory().count() << " visible"

TEST(ProbeGpu, EveryOrderedPairAndMethodVerifiesAtBothSizes) {
  START_OR_SKIP(session, realOptions());
  const int n = session->inventory().count();
  PEERLAB_ASSERT_OK_AND_ASSIGN(ProbeResult r, session->run());
  session->stop();
  ASSERT_EQ(r.cells.size(), kAllMethods.size() * 2 * n * (n - 1));
  for (const CellReport& c : r.cells) {
    EXPECT_EQ(c.result.verdict, Verdict::kOk) << describe(c);
    EXPECT_TRUE(c.claimed) << describe(c) << " (the driver denies this pair on a machine expected to have P2P)";
    EXPECT_EQ(c.result.path, isIpcMethod(c.spec.method) ? Path::kIpc : Path::kPeer) << describe(c);
    EXPECT_EQ(c.result.words, c.spec.bytes / kWordBytes) << describe(c);
  }
  EXPECT_TRUE(claimsHold(r.cells));
  EXPECT_EQ(r.workers_started, 2);
  EXPECT_EQ(r.restarts, 0);
  std::printf("probe wall %.1f ms for %zu cells\n", r.wall_us / 1000.0, r.cells.size());
  // compute-sanitizer loads the driver into every process it follows, the probe's parent included.
  if (::peerlab::testing::underSanitizer().empty()) {
    EXPECT_FALSE(cudaDriverLoadedHere()) << "the probe's parent initialized CUDA";
  }
  expectNoChildren();
}

TEST(ProbeGpu, InjectedFaultsLandInExactlyTheirCells) {
  // A corruption (owner, before the check), a hang (a spinning kernel in the owner: killed, fresh owner) and a crash
  // of the importer during an IPC write (fresh importer).
  RunnerOptions opt = realOptions("corrupt:sm_store:0:1:4096,hang:ce_write:1:0:4096,crash:ipc_vmm:1:0:4096");
  opt.cell_timeout = std::chrono::seconds(3);
  START_OR_SKIP(session, opt);
  PEERLAB_ASSERT_OK_AND_ASSIGN(ProbeResult r, session->run());
  session->stop();
  int seen = 0;
  for (const CellReport& c : r.cells) {
    const bool small = c.spec.bytes == 4096;
    if (small && c.spec.method == Method::kSmStore && c.spec.src == 0 && c.spec.dst == 1) {
      ++seen;
      EXPECT_EQ(c.result.verdict, Verdict::kCorrupt) << describe(c);
      EXPECT_EQ(c.result.wrong, 1u) << describe(c);
      EXPECT_EQ(c.result.first_bad, 2048u) << describe(c);
      EXPECT_TRUE(judge(c.claimed, c.result).lie);
    } else if (small && c.spec.method == Method::kCeWrite && c.spec.src == 1 && c.spec.dst == 0) {
      ++seen;
      EXPECT_EQ(c.result.verdict, Verdict::kHang) << describe(c);
    } else if (small && c.spec.method == Method::kIpcVmm && c.spec.src == 1 && c.spec.dst == 0) {
      ++seen;
      EXPECT_EQ(c.result.verdict, Verdict::kError) << describe(c);
      EXPECT_NE(c.result.error.find("SIGSEGV"), std::string::npos) << describe(c);
    } else {
      EXPECT_EQ(c.result.verdict, Verdict::kOk) << describe(c);
    }
  }
  EXPECT_EQ(seen, 3);
  EXPECT_FALSE(claimsHold(r.cells));
  EXPECT_GE(r.owner_starts, 2) << "the hung owner was not replaced";
  EXPECT_GE(r.importer_starts, 2) << "the crashed importer was not replaced";
  if (::peerlab::testing::underSanitizer().empty()) {
    EXPECT_FALSE(cudaDriverLoadedHere());
  }
  expectNoChildren();
}

class ProbeGpuCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.path();
    ASSERT_FALSE(dir_.empty());
  }
  static std::string read(const std::string& path) { return testing::readFile(path); }
  // Runs `peerlab probe ARGS`; returns its exit code (stdout and stderr in dir_/out, dir_/err).
  int cli(const std::vector<std::string>& args, std::vector<std::string> env = {}) {
    std::string cmd = std::string("exec '") + PEERLAB_CLI_PATH + "' probe";
    for (const auto& a : args)
      cmd += " '" + a + "'";
    cmd += " >'" + dir_ + "/out' 2>'" + dir_ + "/err'";
    watchdog::SpawnOptions so;
    so.argv = {"/bin/sh", "-c", cmd};
    so.env = std::move(env);
    so.channel = false;
    auto child = watchdog::Child::spawn(so);
    if (!child.isOk()) {
      ADD_FAILURE() << child.status().toString();
      return -1;
    }
    auto ended = child->wait(Deadline::afterMs(300'000));
    if (!ended.isOk()) {
      ADD_FAILURE() << "peerlab probe did not finish";
      return -1;
    }
    return ended->exited ? ended->code : 128 + ended->signal;
  }
  testing::TempDir tmp_{"peerlab-probe-gpu"};
  std::string dir_;
};

TEST_F(ProbeGpuCli, ExitCodesRunFileAndCache) {
  const std::string json = dir_ + "/run.json";
  const std::string cache = dir_ + "/cache.json";
  const int healthy = cli({"--json", json, "--cache", cache, "--refresh"});
  if (healthy == 3) GTEST_SKIP() << "no GPU: " << read(dir_ + "/err");
  const std::string out = read(dir_ + "/out");
  if (out.find("no ordered pair") != std::string::npos) GTEST_SKIP() << "needs 2 GPUs: " << out;
  EXPECT_EQ(healthy, 0) << read(dir_ + "/err") << out;
  PEERLAB_ASSERT_OK_AND_ASSIGN(report::Run run, report::readRun(json));
  bool wall = false;
  for (const auto& res : run.results) {
    if (res.name == "matrix_wall") {
      wall = true;
      EXPECT_GT(*res.time_us, 0);
      continue;
    }
    EXPECT_EQ(res.status, "ok") << res.name << " " << *res.src << "->" << *res.dst << " " << res.extra.dump();
    EXPECT_EQ(res.extra["claimed"], true);
  }
  EXPECT_TRUE(wall);
  if (::peerlab::testing::underSanitizer().empty()) {
    EXPECT_EQ(run.extra["probe"]["parent_loaded_cuda"], false) << "peerlab probe initialized CUDA in the parent";
  }
  EXPECT_FALSE(run.fingerprint.gpus.empty());
  EXPECT_NE(run.fingerprint.gpus[0].uuid.find("GPU-"), std::string::npos);

  // The second run answers from the cache.
  EXPECT_EQ(cli({"--cache", cache}), 0) << read(dir_ + "/err");
  EXPECT_NE(read(dir_ + "/out").find("cached:"), std::string::npos);

  // A claimed-yes corruption: exit 1, the cell named in the run file, the cache left alone.
  const std::string cached = read(cache);
  EXPECT_EQ(cli({"--json", json, "--cache", cache, "--methods", "ce_write", "--bytes", "1M"},
                {"PEERLAB_PROBE_INJECT=corrupt:ce_write:0:1:1M"}),
            1)
      << read(dir_ + "/err");
  PEERLAB_ASSERT_OK_AND_ASSIGN(report::Run bad, report::readRun(json));
  int corrupt = 0;
  for (const auto& res : bad.results) {
    if (res.status != "corrupt") continue;
    ++corrupt;
    EXPECT_EQ(res.name, "ce_write/1048576");
    EXPECT_EQ(*res.src, 0);
    EXPECT_EQ(*res.dst, 1);
    EXPECT_EQ(res.extra["lie"], true);
    EXPECT_EQ(res.extra["first_bad"], 524288);
  }
  EXPECT_EQ(corrupt, 1);
  EXPECT_EQ(read(cache), cached);
  expectNoChildren();
}

}  // namespace
}  // namespace peerlab::probe
