// The probe's parent/worker machinery against a stand-in worker (no GPU): every verdict path, the deadline, worker
// restarts and reaping, and `peerlab probe` end to end (exit codes, run file, cache) with the stand-in as its worker.
#include "harness/watchdog/probe_runner.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "harness/report/report.h"
#include "harness/testing/cli.h"
#include "harness/watchdog/probe_cache.h"
#include "harness/watchdog/watchdog.h"
#include "reference/testing/testing.h"

namespace peerlab::probe {
namespace {

constexpr int kGpus = 3;
constexpr auto kTimeout = std::chrono::milliseconds(300);

RunnerOptions standin(const std::string& inject = "", const std::string& denied = "") {
  RunnerOptions opt;
  opt.worker_argv = {PEERLAB_STANDIN_PATH, kWorkerSubcommand};
  opt.worker_env = {std::string(kInjectEnv) + "=" + inject, "PEERLAB_STANDIN_GPUS=" + std::to_string(kGpus),
                    "PEERLAB_STANDIN_NO_PEER=" + denied};
  opt.sizes = {4096, 1 << 20};
  opt.cell_timeout = kTimeout;
  opt.setup_timeout = std::chrono::seconds(20);
  opt.run_seed = 1234;
  return opt;
}

StatusOr<ProbeResult> probe(const RunnerOptions& opt) {
  PEERLAB_ASSIGN_OR_RETURN(auto session, ProbeSession::start(opt));
  auto result = session->run();
  session->stop();
  return result;
}

const CellReport& cell(const ProbeResult& r, Method m, int src, int dst, uint64_t bytes) {
  for (const CellReport& c : r.cells) {
    if (c.spec.method == m && c.spec.src == src && c.spec.dst == dst && c.spec.bytes == bytes) return c;
  }
  static CellReport none;
  ADD_FAILURE() << "no cell " << methodName(m) << " " << src << "->" << dst << " " << bytes;
  return none;
}

bool isCell(const CellReport& c, Method m, int src, int dst, uint64_t bytes = 0) {
  return c.spec.method == m && c.spec.src == src && c.spec.dst == dst && (bytes == 0 || c.spec.bytes == bytes);
}

// Every cell but those matching `except` verified.
void expectOthersOk(const ProbeResult& r, Method m, int src, int dst, uint64_t bytes = 0) {
  for (const CellReport& c : r.cells) {
    if (isCell(c, m, src, dst, bytes)) continue;
    EXPECT_EQ(c.result.verdict, Verdict::kOk) << methodName(c.spec.method) << " " << c.spec.src << "->" << c.spec.dst
                                              << " " << c.spec.bytes << ": " << c.result.error;
  }
}

void expectNoChildren() {
  EXPECT_EQ(watchdog::liveChildren(), 0);
  errno = 0;
  EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

TEST(ProbeRunner, HealthyStandInVerifiesEveryCell) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(ProbeResult r, probe(standin()));
  EXPECT_EQ(r.cells.size(), kAllMethods.size() * 2 * kGpus * (kGpus - 1));
  for (const CellReport& c : r.cells) {
    EXPECT_EQ(c.result.verdict, Verdict::kOk) << c.result.error;
    EXPECT_TRUE(c.claimed);
    EXPECT_EQ(c.result.seed, c.spec.seed);
    EXPECT_EQ(c.result.path, isIpcMethod(c.spec.method) ? Path::kIpc : Path::kPeer);
    EXPECT_EQ(c.result.words, c.spec.bytes / kWordBytes);
  }
  EXPECT_TRUE(claimsHold(r.cells));
  EXPECT_EQ(r.workers_started, 2);
  EXPECT_EQ(r.restarts, 0);
  EXPECT_GT(r.wall_us, 0);
  expectNoChildren();
}

TEST(ProbeRunner, CorruptionLandsInItsCellOnly) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(ProbeResult r, probe(standin("corrupt:ce_write:0:1")));
  for (uint64_t bytes : {4096ull, 1ull << 20}) {
    const CellReport& c = cell(r, Method::kCeWrite, 0, 1, bytes);
    EXPECT_EQ(c.result.verdict, Verdict::kCorrupt);
    EXPECT_EQ(c.result.wrong, 1u);
    EXPECT_EQ(c.result.first_bad, bytes / 2);
    EXPECT_TRUE(judge(c.claimed, c.result).lie);
  }
  expectOthersOk(r, Method::kCeWrite, 0, 1);
  EXPECT_FALSE(claimsHold(r.cells));
  EXPECT_EQ(r.restarts, 0);
  expectNoChildren();
}

TEST(ProbeRunner, HangIsKilledAtTheDeadlineAndTheProbeGoesOn) {
  const auto t0 = std::chrono::steady_clock::now();
  PEERLAB_ASSERT_OK_AND_ASSIGN(ProbeResult r, probe(standin("hang:sm_store:1:0:4096")));
  const auto took = std::chrono::steady_clock::now() - t0;
  const CellReport& c = cell(r, Method::kSmStore, 1, 0, 4096);
  EXPECT_EQ(c.result.verdict, Verdict::kHang);
  EXPECT_NE(c.result.error.find("no answer within 300 ms"), std::string::npos) << c.result.error;
  EXPECT_EQ(c.result.time_us, 300'000u);
  expectOthersOk(r, Method::kSmStore, 1, 0, 4096);
  EXPECT_GE(r.owner_starts, 2);
  // The importer follows the owner: retired with it, started again once, when the IPC cells need it.
  EXPECT_EQ(r.importer_starts, 2);
  // At most two waits of one deadline each (once in the batch, once alone), plus restarts of a CPU-only stand-in.
  EXPECT_LT(std::chrono::duration_cast<std::chrono::milliseconds>(took).count(), 2 * 300 + 4000);
  expectNoChildren();
}

TEST(ProbeRunner, CrashIsAnErrorNamingTheSignal) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(ProbeResult r, probe(standin("crash:atomic:0:2")));
  for (uint64_t bytes : {4096ull, 1ull << 20}) {
    const CellReport& c = cell(r, Method::kAtomic, 0, 2, bytes);
    EXPECT_EQ(c.result.verdict, Verdict::kError);
    EXPECT_NE(c.result.error.find("SIGSEGV"), std::string::npos) << c.result.error;
  }
  expectOthersOk(r, Method::kAtomic, 0, 2);
  EXPECT_FALSE(claimsHold(r.cells));
  expectNoChildren();
}

TEST(ProbeRunner, ExitIsAnErrorNamingTheCode) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(ProbeResult r, probe(standin("exit:ce_read:2:1:4096")));
  const CellReport& c = cell(r, Method::kCeRead, 2, 1, 4096);
  EXPECT_EQ(c.result.verdict, Verdict::kError);
  EXPECT_NE(c.result.error.find("exited with code 7"), std::string::npos) << c.result.error;
  expectOthersOk(r, Method::kCeRead, 2, 1, 4096);
  expectNoChildren();
}

TEST(ProbeRunner, GarbageIsAnError) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(ProbeResult r, probe(standin("garbage:sm_load:0:1:4096")));
  const CellReport& c = cell(r, Method::kSmLoad, 0, 1, 4096);
  EXPECT_EQ(c.result.verdict, Verdict::kError);
  EXPECT_NE(c.result.error.find("garbage"), std::string::npos) << c.result.error;
  expectOthersOk(r, Method::kSmLoad, 0, 1, 4096);
  expectNoChildren();
}

TEST(ProbeRunner, WrongPayloadIsAnError) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(ProbeResult r, probe(standin("payload:ce_write:1:2:4096")));
  const CellReport& c = cell(r, Method::kCeWrite, 1, 2, 4096);
  EXPECT_EQ(c.result.verdict, Verdict::kError);
  EXPECT_NE(c.result.error.find("wrong payload"), std::string::npos) << c.result.error;
  expectOthersOk(r, Method::kCeWrite, 1, 2, 4096);
  expectNoChildren();
}

RunnerOptions transportStandin(const std::string& inject = "", const std::string& transport = "") {
  RunnerOptions opt = standin(inject);
  opt.methods = {Method::kCeWrite, Method::kNixlWrite, Method::kNixlRead, Method::kUcxPut, Method::kUcxGet};
  opt.worker_env.push_back("PEERLAB_STANDIN_TRANSPORT=" + transport);
  return opt;
}

TEST(ProbeRunner, TransportCellsRunInAPairOfWorkersPerLibrary) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(ProbeResult r, probe(transportStandin()));
  ASSERT_EQ(r.cells.size(), 5u * 2 * kGpus * (kGpus - 1));
  for (const CellReport& c : r.cells) {
    EXPECT_EQ(c.result.verdict, Verdict::kOk) << methodName(c.spec.method) << ": " << c.result.error;
    if (!isTransportMethod(c.spec.method)) continue;
    EXPECT_TRUE(c.claimed) << "the library's capability check passed: it claims the cell";
    EXPECT_EQ(c.result.path, Path::kIpc);
    EXPECT_EQ(c.result.words, c.spec.bytes / kWordBytes) << "the checking side's answer is the cell's";
  }
  // The CUDA owner, then two workers for NIXL and two for UCX; no importer for the CUDA methods.
  EXPECT_EQ(r.workers_started, 5);
  EXPECT_EQ(r.restarts, 0);
  expectNoChildren();
}

TEST(ProbeRunner, TransportWithoutCudaIsUnsupportedNotALie) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(ProbeResult r, probe(transportStandin("", "unsupported")));
  const CellReport& c = cell(r, Method::kUcxPut, 0, 1, 4096);
  EXPECT_EQ(c.result.verdict, Verdict::kUnsupported);
  EXPECT_FALSE(c.claimed);
  EXPECT_NE(c.result.error.find("UCX without CUDA support: GPU memory would be treated as host memory"),
            std::string::npos)
      << c.result.error;
  EXPECT_TRUE(claimsHold(r.cells));
  EXPECT_EQ(cell(r, Method::kCeWrite, 0, 1, 4096).result.verdict, Verdict::kOk);
  expectNoChildren();
}

TEST(ProbeRunner, TransportHangKillsOnlyThatLibrarysPair) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(ProbeResult r, probe(transportStandin("hang:ucx_put:0:1:4096")));
  const CellReport& c = cell(r, Method::kUcxPut, 0, 1, 4096);
  EXPECT_EQ(c.result.verdict, Verdict::kHang) << c.result.error;
  EXPECT_TRUE(c.claimed);
  EXPECT_FALSE(claimsHold(r.cells)) << "a claimed cell that hangs fails the probe";
  expectOthersOk(r, Method::kUcxPut, 0, 1, 4096);
  // The UCX pair started twice, NIXL's once.
  EXPECT_EQ(r.workers_started, 7);
  expectNoChildren();
}

TEST(ProbeRunner, TransportCorruptionIsFoundByTheCheckingSide) {
  // A read is checked by the importer (it owns the destination), a write by the owner.
  PEERLAB_ASSERT_OK_AND_ASSIGN(ProbeResult r,
                               probe(transportStandin("corrupt:nixl_read:1:2:4096,corrupt:ucx_put:2:0")));
  const CellReport& read = cell(r, Method::kNixlRead, 1, 2, 4096);
  EXPECT_EQ(read.result.verdict, Verdict::kCorrupt);
  EXPECT_EQ(read.result.first_bad, 2048u);
  EXPECT_EQ(cell(r, Method::kUcxPut, 2, 0, 4096).result.verdict, Verdict::kCorrupt);
  EXPECT_EQ(cell(r, Method::kUcxPut, 2, 0, 1 << 20).result.verdict, Verdict::kCorrupt);
  EXPECT_EQ(cell(r, Method::kUcxGet, 2, 0, 4096).result.verdict, Verdict::kOk);
  expectNoChildren();
}

TEST(ProbeRunner, InjectedErrorIsReportedAsIs) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(ProbeResult r, probe(standin("error:atomic:1:0:4096")));
  const CellReport& c = cell(r, Method::kAtomic, 1, 0, 4096);
  EXPECT_EQ(c.result.verdict, Verdict::kError);
  EXPECT_NE(c.result.error.find("injected"), std::string::npos) << c.result.error;
  expectOthersOk(r, Method::kAtomic, 1, 0, 4096);
  EXPECT_EQ(r.restarts, 0) << "a cell error is an answer, not a broken worker";
  expectNoChildren();
}

TEST(ProbeRunner, IpcHangRestartsOnlyTheImporter) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(ProbeResult r, probe(standin("hang:ipc_vmm:0:1:4096")));
  const CellReport& c = cell(r, Method::kIpcVmm, 0, 1, 4096);
  EXPECT_EQ(c.result.verdict, Verdict::kHang) << c.result.error;
  EXPECT_NE(c.result.error.find("importer"), std::string::npos) << c.result.error;
  expectOthersOk(r, Method::kIpcVmm, 0, 1, 4096);
  EXPECT_EQ(r.owner_starts, 1);
  EXPECT_GE(r.importer_starts, 2);
  expectNoChildren();
}

TEST(ProbeRunner, IpcCorruptionIsSeenByTheOwner) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(ProbeResult r, probe(standin("corrupt:ipc_legacy:2:0:1M")));
  const CellReport& c = cell(r, Method::kIpcLegacy, 2, 0, 1 << 20);
  EXPECT_EQ(c.result.verdict, Verdict::kCorrupt);
  EXPECT_EQ(c.result.first_bad, (1u << 20) / 2);
  expectOthersOk(r, Method::kIpcLegacy, 2, 0, 1 << 20);
  expectNoChildren();
}

TEST(ProbeRunner, DriverDenialIsNotALie) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(ProbeResult r, probe(standin("", "1-2")));
  const CellReport& ce = cell(r, Method::kCeWrite, 1, 2, 4096);
  EXPECT_FALSE(ce.claimed);
  EXPECT_EQ(ce.result.verdict, Verdict::kOk);
  EXPECT_TRUE(judge(ce.claimed, ce.result).staged);
  const CellReport& sm = cell(r, Method::kSmStore, 1, 2, 4096);
  EXPECT_FALSE(sm.claimed);
  EXPECT_EQ(sm.result.verdict, Verdict::kUnsupported);
  EXPECT_FALSE(judge(sm.claimed, sm.result).lie);
  // The reverse direction is claimed and verified.
  EXPECT_TRUE(cell(r, Method::kSmStore, 2, 1, 4096).claimed);
  EXPECT_TRUE(claimsHold(r.cells));
  expectNoChildren();
}

TEST(ProbeRunner, SelectedMethodsPairsAndSizesOnly) {
  RunnerOptions opt = standin();
  opt.methods = {Method::kCeRead, Method::kSmLoad};
  opt.pairs = {{0, 1}, {2, 0}};
  opt.sizes = {256};
  PEERLAB_ASSERT_OK_AND_ASSIGN(ProbeResult r, probe(opt));
  ASSERT_EQ(r.cells.size(), 4u);
  for (const CellReport& c : r.cells)
    EXPECT_EQ(c.result.verdict, Verdict::kOk);
  EXPECT_EQ(r.importer_starts, 0) << "no IPC method selected: no importer";
  expectNoChildren();
}

TEST(ProbeRunner, PairOutOfRangeIsInvalid) {
  RunnerOptions opt = standin();
  opt.pairs = {{0, 5}};
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto session, ProbeSession::start(opt));
  auto cells = session->cells();
  EXPECT_EQ(cells.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(session->run().status().code(), StatusCode::kInvalidArgument);
  session->stop();
  expectNoChildren();
}

TEST(ProbeRunner, NoDeviceIsReportedByTheInventory) {
  RunnerOptions opt = standin();
  opt.worker_env.push_back("PEERLAB_STANDIN_GPUS=0");
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto session, ProbeSession::start(opt));
  EXPECT_FALSE(session->inventory().error.empty());
  EXPECT_EQ(session->run().status().code(), StatusCode::kUnavailable);
  session->stop();
  expectNoChildren();
}

TEST(ProbeRunner, WorkerThatCannotStartIsUnavailable) {
  RunnerOptions opt = standin();
  opt.worker_argv = {"/nonexistent/peerlab"};
  EXPECT_EQ(ProbeSession::start(opt).status().code(), StatusCode::kUnavailable);
  opt.worker_argv = {PEERLAB_STANDIN_PATH, "exit", "5"};
  auto s = ProbeSession::start(opt);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.status().message().find("exited with code 5"), std::string::npos) << s.status().toString();
  expectNoChildren();
}

TEST(ProbeRunner, ImporterThatCannotStartIsAnError) {
  RunnerOptions opt = standin();
  opt.worker_env.push_back("PEERLAB_STANDIN_FAIL_IMPORT=1");
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto session, ProbeSession::start(opt));
  auto r = session->run();
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("import refused"), std::string::npos) << r.status().toString();
  session->stop();
  expectNoChildren();
}

TEST(ProbeRunner, RunFileHasOneResultPerCellAndTheWall) {
  RunnerOptions opt = standin("corrupt:sm_store:2:1:4096");
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto session, ProbeSession::start(opt));
  PEERLAB_ASSERT_OK_AND_ASSIGN(ProbeResult r, session->run());
  const Inventory inv = session->inventory();
  session->stop();
  ReportContext ctx;
  ctx.wall_us = r.wall_us;
  ctx.workers = r.workers_started;
  report::Run run = buildRunReport(inv, r.cells, ctx);
  const nlohmann::json doc = report::toJson(run);
  PEERLAB_ASSERT_OK(report::validate(doc));
  ASSERT_EQ(run.results.size(), r.cells.size() + 1);
  EXPECT_EQ(run.fingerprint.gpus.size(), static_cast<size_t>(kGpus));
  EXPECT_EQ(run.fingerprint.driver, "999.99.01");
  int corrupt = 0;
  for (const auto& res : run.results) {
    EXPECT_EQ(res.suite, "probe");
    EXPECT_EQ(res.impl, "peerlab.probe");
    if (res.name == "matrix_wall") {
      EXPECT_DOUBLE_EQ(*res.time_us, r.wall_us);
      EXPECT_EQ(res.extra["workers"], r.workers_started);
      continue;
    }
    if (res.status == "corrupt") {
      ++corrupt;
      EXPECT_EQ(res.name, "sm_store/4096");
      EXPECT_EQ(*res.src, 2);
      EXPECT_EQ(*res.dst, 1);
      EXPECT_EQ(*res.wrong, 1);
      EXPECT_EQ(res.extra["first_bad"], 2048);
      EXPECT_EQ(res.extra["claimed"], true);
      EXPECT_EQ(res.extra["lie"], true);
    } else {
      EXPECT_EQ(res.status, "ok");
    }
  }
  EXPECT_EQ(corrupt, 1);
  expectNoChildren();
}

// `peerlab probe` itself, with the stand-in as its worker.
using testing::CliRun;
using testing::readFile;

class ProbeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.path();
    ASSERT_FALSE(dir_.empty());
  }

  CliRun cli(const std::vector<std::string>& args, std::vector<std::string> env = {}, bool with_standin = true) {
    if (with_standin) {
      // Entries given by the test come last and win.
      env.insert(env.begin(), {std::string("PEERLAB_PROBE_WORKER=") + PEERLAB_STANDIN_PATH,
                               "PEERLAB_STANDIN_GPUS=" + std::to_string(kGpus)});
    }
    env.push_back("XDG_CACHE_HOME=" + dir_ + "/xdg");
    std::vector<std::string> argv = {PEERLAB_CLI_PATH, "probe"};
    argv.insert(argv.end(), args.begin(), args.end());
    return testing::runCommand(argv, env, std::chrono::seconds(60));
  }

  testing::TempDir tmp_{"peerlab-probe-test"};
  std::string dir_;
};

int lines(const std::string& s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

TEST_F(ProbeCli, UsageErrorsExitTwoWithOneLine) {
  // A regular file where a directory would have to be: the one path no rule can create.
  std::ofstream(dir_ + "/file") << "x";
  const std::vector<std::vector<std::string>> bad = {
      {"--bytes", "17"},
      {"--bytes", "lots"},
      {"--sizes", "4K,0"},
      {"--timeout", "-1"},
      {"--timeout", "0ms"},
      {"--methods", "ce_write,warp_drive"},
      {"--pairs", "0-0"},
      {"--pairs", "1:x"},
      {"--pairs", "1-2-3"},
      {"--json", dir_ + "/file/run.json"},
      {"--json", dir_},
      {"--cache", dir_},
      {"--cache", dir_ + "/file/probe.json"},
      {"--bytes", "1M", "--sizes", "4K"},
  };
  for (const auto& args : bad) {
    CliRun r = cli(args);
    std::string joined;
    for (const auto& a : args)
      joined += a + " ";
    EXPECT_EQ(r.exit_code, 2) << joined << "\n" << r.err;
    EXPECT_EQ(lines(r.err), 1) << joined << "\n" << r.err;
  }
  CliRun inject = cli({"--no-cache"}, {"PEERLAB_PROBE_INJECT=melt:ce_write:0:1"});
  EXPECT_EQ(inject.exit_code, 2) << inject.err;
  EXPECT_NE(inject.err.find("PEERLAB_PROBE_INJECT"), std::string::npos);
  // A pair beyond the visible GPUs is known only after the inventory; still a usage error.
  CliRun range = cli({"--no-cache", "--pairs", "0-9"});
  EXPECT_EQ(range.exit_code, 2) << range.err;
  // The pair syntaxes qualify takes work here too: 0-1, 0:1 and 0->1 (one parser for every --pairs).
  for (const char* pairs : {"0-1", "0:1", "0->1"}) {
    CliRun ok =
        cli({"--no-cache", "--methods", "ce_write", "--sizes", "4K", "--pairs", pairs, "--json", dir_ + "/pairs.json"});
    EXPECT_EQ(ok.exit_code, 0) << pairs << ": " << ok.err;
    auto run = report::readRun(dir_ + "/pairs.json");
    ASSERT_TRUE(run.isOk()) << run.status().toString();
    int cells = 0;
    for (const report::Result& r : run->results)
      cells += r.suite == "probe" && r.src == 0 && r.dst == 1;
    EXPECT_EQ(cells, 1) << pairs;
    EXPECT_EQ(run->extra["probe"]["pairs"], pairs);
  }
  expectNoChildren();
}

TEST_F(ProbeCli, NoGpuExitsThree) {
  CliRun r = cli({"--no-cache"}, {"PEERLAB_STANDIN_GPUS=0"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("no CUDA device"), std::string::npos) << r.err;
  if (::access("/dev/nvidiactl", F_OK) != 0) {
    // This machine really has no GPU: the real worker says so too.
    CliRun real = cli({"--no-cache"}, {}, /*with_standin=*/false);
    EXPECT_EQ(real.exit_code, 3) << real.err;
    EXPECT_EQ(lines(real.err), 1) << real.err;
  }
  expectNoChildren();
}

TEST_F(ProbeCli, WorkerThatCannotStartExitsFour) {
  CliRun r = cli({"--no-cache"}, {"PEERLAB_PROBE_WORKER=/nonexistent/worker"}, false);
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_EQ(lines(r.err), 1) << r.err;
  CliRun import = cli({"--no-cache"}, {"PEERLAB_STANDIN_FAIL_IMPORT=1"});
  EXPECT_EQ(import.exit_code, 4) << import.err;
  EXPECT_EQ(lines(import.err), 1) << import.err;
  expectNoChildren();
}

TEST_F(ProbeCli, ExitCodesAndRunFile) {
  const std::string json = dir_ + "/run.json";
  CliRun ok = cli({"--no-cache", "--json", json, "--bytes", "1M"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err << ok.out;
  EXPECT_NE(ok.out.find("sm_store"), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find("0 claimed-yes cells failed"), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find(" cells (ordered pair x method; "), std::string::npos) << ok.out;
  PEERLAB_ASSERT_OK_AND_ASSIGN(report::Run run, report::readRun(json));
  EXPECT_EQ(run.results.size(), kAllMethods.size() * 2 * kGpus * (kGpus - 1) + 1);

  CliRun bad = cli({"--no-cache", "--json", json, "--bytes", "1M"}, {"PEERLAB_PROBE_INJECT=corrupt:ce_write:0:1:4096"});
  EXPECT_EQ(bad.exit_code, 1) << bad.err << bad.out;
  EXPECT_NE(bad.out.find("LIE"), std::string::npos) << bad.out;
  PEERLAB_ASSERT_OK_AND_ASSIGN(report::Run run2, report::readRun(json));
  int corrupt = 0;
  for (const auto& res : run2.results) {
    if (res.status != "corrupt") continue;
    ++corrupt;
    EXPECT_EQ(res.name, "ce_write/4096");
    EXPECT_EQ(*res.src, 0);
    EXPECT_EQ(*res.dst, 1);
    EXPECT_EQ(res.extra["lie"], true);
  }
  EXPECT_EQ(corrupt, 1);
  expectNoChildren();
}

TEST_F(ProbeCli, CacheIsWrittenReusedAndNeverTrustedWhenDamaged) {
  const std::string cache = dir_ + "/probe.json";
  CliRun first = cli({"--cache", cache, "--bytes", "1M"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_EQ(first.out.find("cached:"), std::string::npos);
  ASSERT_TRUE(decodeCache(readFile(cache)).isOk());

  CliRun second = cli({"--cache", cache, "--bytes", "1M"});
  EXPECT_EQ(second.exit_code, 0) << second.err;
  EXPECT_NE(second.out.find("cached:"), std::string::npos) << second.out;
  EXPECT_TRUE(second.err.empty()) << second.err;

  // Truncated: reported in one line, ignored, probed again and rewritten.
  const std::string text = readFile(cache);
  std::ofstream(cache, std::ios::trunc) << text.substr(0, text.size() / 2);
  CliRun third = cli({"--cache", cache, "--bytes", "1M"});
  EXPECT_EQ(third.exit_code, 0) << third.err;
  EXPECT_EQ(third.out.find("cached:"), std::string::npos);
  EXPECT_EQ(lines(third.err), 1) << third.err;
  EXPECT_NE(third.err.find("probing again"), std::string::npos) << third.err;
  EXPECT_TRUE(decodeCache(readFile(cache)).isOk()) << "the cache was not rewritten";

  // Another CUDA_VISIBLE_DEVICES: a mismatch, named.
  CliRun other = cli({"--cache", cache, "--bytes", "1M"}, {"CUDA_VISIBLE_DEVICES=2,1,0"});
  EXPECT_EQ(other.exit_code, 0) << other.err;
  EXPECT_NE(other.err.find("CUDA_VISIBLE_DEVICES"), std::string::npos) << other.err;
  EXPECT_EQ(other.out.find("cached:"), std::string::npos);

  // Another size: the cache holds no result for it.
  CliRun sizes = cli({"--cache", cache, "--bytes", "2M"}, {"CUDA_VISIBLE_DEVICES=2,1,0"});
  EXPECT_EQ(sizes.out.find("cached:"), std::string::npos);
  EXPECT_NE(sizes.err.find("no cached result"), std::string::npos) << sizes.err;

  // --refresh probes again; injected faults neither read nor write the cache.
  const std::string before = readFile(cache);
  CliRun refresh = cli({"--cache", cache, "--bytes", "2M", "--refresh"}, {"CUDA_VISIBLE_DEVICES=2,1,0"});
  EXPECT_EQ(refresh.out.find("cached:"), std::string::npos);
  const std::string kept = readFile(cache);
  CliRun injected = cli({"--cache", cache, "--bytes", "2M"},
                        {"CUDA_VISIBLE_DEVICES=2,1,0", "PEERLAB_PROBE_INJECT=corrupt:atomic:0:1"});
  EXPECT_EQ(injected.exit_code, 1);
  EXPECT_EQ(injected.out.find("cached:"), std::string::npos);
  EXPECT_EQ(readFile(cache), kept) << "a probe with injected faults wrote the cache";
  EXPECT_NE(before, kept);

  // The default location is under XDG_CACHE_HOME.
  CliRun fallback = cli({"--bytes", "1M"});
  EXPECT_EQ(fallback.exit_code, 0) << fallback.err;
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/xdg/peerlab/probe.json"));
  expectNoChildren();
}

}  // namespace
}  // namespace peerlab::probe
