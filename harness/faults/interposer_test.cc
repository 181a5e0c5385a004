// libpeerlab_faults.so loaded into a test program that finds its driver like the CUDA runtime does (fake runtime
// and driver over host memory: testing/fake_cudart.cc, testing/fake_cuda.cc). Each test runs the program under one
// fault and checks what it printed.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "harness/faults/testing/run_process.h"

namespace peerlab::faults {
namespace {

using testing::ProcessResult;
using testing::runProcess;

using testing::preloadWith;

ProcessResult runTarget(const std::vector<std::string>& args, const std::string& fault,
                        const std::vector<std::string>& env = {}) {
  return testing::runUnderFault(PEERLAB_FAULT_TARGET_PATH, PEERLAB_FAULTS_LIB_PATH, args, fault, env);
}

// The one line a process under the interposer prints on stderr when it is loaded.
bool announcesOnce(const std::string& err, const std::string& what) {
  const std::string line = "peerlab-faults: loaded " + what + " (pid ";
  const size_t first = err.find(line);
  return first == 0 && err.find(line, first + 1) == std::string::npos && err.find('\n') == err.size() - 1;
}

TEST(Interposer, LoadsIntoProgramsWithoutCudaAndSaysSoOnce) {
  auto r = runProcess({"/bin/sh", "-c", "echo hello; exit 3"},
                      {preloadWith(PEERLAB_FAULTS_LIB_PATH), "PEERLAB_FAULT=bitflip:seed=1"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(r.out, "hello\n");
  // Verbose or not, every process under the interposer says so once: nothing it prints passes for the machine's own.
  EXPECT_TRUE(announcesOnce(r.err, "fault bitflip:seed=1")) << r.err;
  auto none = runProcess({"/bin/sh", "-c", "true"}, {preloadWith(PEERLAB_FAULTS_LIB_PATH), "PEERLAB_FAULT"});
  EXPECT_TRUE(announcesOnce(none.err, "without a fault (PEERLAB_FAULT unset)")) << none.err;
}

TEST(Interposer, WrapsCuGetProcAddressHandedOutByDlsym) {
  auto r = runTarget({"gpa"}, "none");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_VALUE(r, "gpa_v2_wrapped", "1");
  EXPECT_VALUE(r, "gpa_v1_wrapped", "1");
  EXPECT_VALUE(r, "can_access_wrapped", "1");
  EXPECT_VALUE(r, "v1_can_access_wrapped", "1");
  EXPECT_VALUE(r, "gpa_self_wrapped", "1");
  EXPECT_VALUE(r, "unhooked_passes", "1");
  EXPECT_VALUE(r, "dlsym_direct_wrapped", "1");
  EXPECT_VALUE(r, "driver_can_access", "0");
}

TEST(Interposer, WithoutTheInterposerNothingIsWrapped) {
  auto r = runProcess({PEERLAB_FAULT_TARGET_PATH, "gpa"}, {"LD_PRELOAD", "PEERLAB_FAULT=lie"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_VALUE(r, "gpa_v2_wrapped", "0");
  EXPECT_VALUE(r, "can_access_wrapped", "0");
  EXPECT_VALUE(r, "driver_can_access", "0");
}

TEST(Interposer, NoneChangesNothing) {
  auto caps = runTarget({"caps"}, "none");
  EXPECT_VALUE(caps, "rt_can_access", "0");
  EXPECT_VALUE(caps, "rt_p2p_access", "0");
  EXPECT_VALUE(caps, "drv_can_access", "0");
  auto enable = runTarget({"enable"}, "none");
  EXPECT_VALUE(enable, "rt_enable_0_1", "217");
  EXPECT_VALUE(enable, "drv_enable_2_3", "217");
  for (const char* api : {"rt_peer_async", "rt_peer", "rt_async", "rt_sync", "drv_peer_async", "drv_async"}) {
    auto copy = runTarget({"copy", api, "write"}, "none");
    EXPECT_VALUE(copy, "copy_rc", "0");
    EXPECT_VALUE(copy, "diff", "0");
  }
  auto ipc = runTarget({"ipc"}, "none");
  EXPECT_VALUE(ipc, "owner_sees", "1");
  EXPECT_VALUE(ipc, "mapped_is_owner", "1");
  auto signal = runTarget({"signal"}, "none");
  EXPECT_VALUE(signal, "word", "7");
}

TEST(Interposer, LieReportsPeerAccessOnEveryPath) {
  auto caps = runTarget({"caps"}, "lie");
  ASSERT_EQ(caps.exit_code, 0) << caps.err;
  EXPECT_VALUE(caps, "rt_can_access", "1");
  EXPECT_VALUE(caps, "rt_p2p_access", "1");
  EXPECT_VALUE(caps, "drv_can_access", "1");
  EXPECT_VALUE(caps, "rt_p2p_rank", "0");
  EXPECT_VALUE(caps, "rt_can_access_self", "0");
  auto enable = runTarget({"enable"}, "lie");
  EXPECT_VALUE(enable, "rt_enable_0_1", "0");
  EXPECT_VALUE(enable, "drv_enable_2_3", "0");
}

TEST(Interposer, LieCorruptsPeerCopies) {
  for (const char* api : {"rt_peer_async", "rt_sync", "drv_async"}) {
    auto r = runTarget({"copy", api, "write"}, "lie:flips=5,seed=2");
    EXPECT_VALUE(r, "copy_rc", "0");
    EXPECT_VALUE(r, "diff", "5");
  }
}

TEST(Interposer, BitflipFlipsOneBitOnceOnEachPath) {
  for (const char* api :
       {"rt_peer_async", "rt_peer", "rt_async", "rt_sync", "drv_peer_async", "drv_async", "drv_dtod_async"}) {
    auto r = runTarget({"copy", api, "write"}, "bitflip:seed=7,offset=4096,bit=3");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    // Applied once even where the runtime reaches the driver underneath: a second flip would cancel the first.
    EXPECT_VALUE(r, "diff", "1");
    EXPECT_VALUE(r, "first", "4096");
    EXPECT_VALUE(r, "mask", "8");
    // The interposer's own calls (stream context, context device) use the ABIs of their prototypes.
    EXPECT_VALUE(r, "abi_mismatches", "0");
  }
}

TEST(Interposer, BitflipIsDeterministicForASeed) {
  auto a = runTarget({"copy", "rt_peer_async", "write"}, "bitflip:seed=9");
  auto b = runTarget({"copy", "rt_peer_async", "write"}, "bitflip:seed=9");
  auto c = runTarget({"copy", "rt_peer_async", "write"}, "bitflip:seed=10");
  EXPECT_VALUE(a, "diff", "1");
  EXPECT_EQ(a.values()["first"], b.values()["first"]);
  EXPECT_EQ(a.values()["mask"], b.values()["mask"]);
  EXPECT_VALUE(c, "diff", "1");
  EXPECT_NE(a.values()["first"], c.values()["first"]);
}

TEST(Interposer, BitflipHonoursPairSideCountAndAfter) {
  EXPECT_VALUE(runTarget({"copy", "rt_peer_async", "write"}, "bitflip:pair=0-1"), "diff", "1");
  EXPECT_VALUE(runTarget({"copy", "rt_peer_async", "write"}, "bitflip:pair=1-0"), "diff", "0");
  EXPECT_VALUE(runTarget({"copy", "rt_peer_async", "write"}, "bitflip:side=read"), "diff", "0");
  EXPECT_VALUE(runTarget({"copy", "rt_peer_async", "read"}, "bitflip:side=read"), "diff", "1");
  EXPECT_VALUE(runTarget({"copy", "rt_peer_async", "write"}, "bitflip:count=0"), "diff", "0");
  EXPECT_VALUE(runTarget({"copy", "rt_peer_async", "write"}, "bitflip:after=1"), "diff", "0");
  EXPECT_VALUE(runTarget({"copy", "rt_peer_async", "write"}, "bitflip:rank=1", {"PEERLAB_RANK=0"}), "diff", "0");
  EXPECT_VALUE(runTarget({"copy", "rt_peer_async", "write"}, "bitflip:rank=1", {"PEERLAB_RANK=1"}), "diff", "1");
}

// A legacy IPC mapping reported under the opening device's ordinal is still another process's memory: a copy into
// it crosses devices and takes the fault.
TEST(Interposer, BitflipReachesCopiesIntoIpcMappingsReportedAsLocal) {
  const std::vector<std::string> opener = {"PEERLAB_FAKE_IPC_ORDINAL=opener"};
  auto none = runTarget({"ipc_copy"}, "none", opener);
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_VALUE(none, "mapped_device", "0");
  EXPECT_VALUE(none, "diff", "0");
  auto r = runTarget({"ipc_copy"}, "bitflip:offset=100,bit=1", opener);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_VALUE(r, "copy_rc", "0");
  EXPECT_VALUE(r, "diff", "1");
  EXPECT_VALUE(r, "close_rc", "0");
  // The owner's own ordinal: the copy crossed devices before and still does.
  EXPECT_VALUE(runTarget({"ipc_copy"}, "bitflip:offset=100,bit=1"), "diff", "1");
}

TEST(Interposer, EnableErrorReturnsTheCodeInTheChosenDirection) {
  const std::vector<std::string> p2p = {"PEERLAB_FAKE_P2P=1"};
  auto second = runTarget({"enable"}, "enable_error:code=711,direction=second", p2p);
  EXPECT_VALUE(second, "rt_enable_0_1", "0");
  EXPECT_VALUE(second, "rt_enable_1_0", "711");
  EXPECT_VALUE(second, "drv_enable_2_3", "0");
  auto first = runTarget({"enable"}, "enable_error:code=205,direction=first,pair=2-3", p2p);
  EXPECT_VALUE(first, "rt_enable_0_1", "0");
  EXPECT_VALUE(first, "rt_enable_1_0", "0");
  EXPECT_VALUE(first, "drv_enable_2_3", "205");
  auto all = runTarget({"enable"}, "enable_error", p2p);
  EXPECT_VALUE(all, "rt_enable_0_1", "217");
  EXPECT_VALUE(all, "drv_enable_2_3", "217");
  EXPECT_VALUE(all, "enabled", "0");
  // 704 really enables, so the state matches "already enabled".
  auto already = runTarget({"enable"}, "enable_error:code=704", p2p);
  EXPECT_VALUE(already, "rt_enable_0_1", "704");
  EXPECT_VALUE(already, "enabled", "3");
}

TEST(Interposer, IpcOpenFailFailsTheChosenHandles) {
  auto legacy = runTarget({"ipc"}, "ipc_open_fail");
  EXPECT_VALUE(legacy, "get_rc", "0");
  EXPECT_VALUE(legacy, "open_rc", "400");
  auto code = runTarget({"ipc"}, "ipc_open_fail:code=205,ipc=legacy");
  EXPECT_VALUE(code, "open_rc", "205");
  auto vmm_only = runTarget({"ipc"}, "ipc_open_fail:ipc=vmm");
  EXPECT_VALUE(vmm_only, "open_rc", "0");
  auto vmm = runTarget({"vmm"}, "ipc_open_fail:ipc=vmm");
  EXPECT_VALUE(vmm, "export_rc", "0");
  EXPECT_VALUE(vmm, "import_rc", "400");
  // pair=a-b: opened on device a, memory of device b (the owner is device 1, the opener device 0).
  EXPECT_VALUE(runTarget({"ipc"}, "ipc_open_fail:pair=0-1"), "open_rc", "400");
  EXPECT_VALUE(runTarget({"ipc"}, "ipc_open_fail:pair=1-0"), "open_rc", "0");
  EXPECT_VALUE(runTarget({"vmm"}, "ipc_open_fail:pair=0-1"), "import_rc", "400");
  EXPECT_VALUE(runTarget({"vmm"}, "ipc_open_fail:pair=0-2"), "import_rc", "0");
}

TEST(Interposer, DropWritesRedirectsIpcMappingsToScratch) {
  auto r = runTarget({"ipc"}, "drop_writes");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_VALUE(r, "open_rc", "0");
  EXPECT_VALUE(r, "mapped_is_owner", "0");
  EXPECT_VALUE(r, "writer_sees", "1");
  EXPECT_VALUE(r, "owner_sees", "0");
  EXPECT_VALUE(r, "close_rc", "0");
  // The scratch is freed at close, and the real mapping was closed when it was replaced.
  EXPECT_VALUE(r, "close_freed", "1");
  EXPECT_VALUE(r, "driver_ipc_close", "1");
  auto copies_only = runTarget({"ipc"}, "drop_writes:target=copy");
  EXPECT_VALUE(copies_only, "owner_sees", "1");
  EXPECT_VALUE(runTarget({"ipc"}, "drop_writes:pair=0-1"), "owner_sees", "0");
  EXPECT_VALUE(runTarget({"ipc"}, "drop_writes:pair=2-1"), "owner_sees", "1");
}

TEST(Interposer, DropWritesRedirectsImportedVmmMappings) {
  auto none = runTarget({"vmm"}, "none");
  EXPECT_VALUE(none, "writer_sees", "1");
  EXPECT_VALUE(none, "owner_sees", "1");
  auto r = runTarget({"vmm"}, "drop_writes");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_VALUE(r, "map_rc", "0");
  EXPECT_VALUE(r, "writer_sees", "1");
  EXPECT_VALUE(r, "owner_sees", "0");
  EXPECT_VALUE(runTarget({"vmm"}, "drop_writes:pair=0-1"), "owner_sees", "0");
  EXPECT_VALUE(runTarget({"vmm"}, "drop_writes:pair=1-0"), "owner_sees", "1");
}

TEST(Interposer, DropWritesSendsPeerCopiesToScratch) {
  auto r = runTarget({"copy", "rt_peer_async", "write"}, "drop_writes");
  EXPECT_VALUE(r, "copy_rc", "0");
  EXPECT_VALUE(r, "untouched", "1");
  auto read_side = runTarget({"copy", "rt_peer_async", "read"}, "drop_writes");
  EXPECT_VALUE(read_side, "diff", "0");
}

TEST(Interposer, CopyHangStallsUntilTeardown) {
  auto r = runTarget({"hang", "teardown"}, "copy_hang");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_VALUE(r, "copy_rc", "0");
  EXPECT_VALUE(r, "pending", "1");
  EXPECT_NE(r.values()["completed_ms"], "-1") << r.out;
  EXPECT_VALUE(r, "data_ok", "1");
}

TEST(Interposer, CopyHangNeverCompletesWithoutRelease) {
  auto r = runTarget({"hang", "wait", "1000"}, "copy_hang:release=exit");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_VALUE(r, "pending", "1");
  EXPECT_VALUE(r, "completed_ms", "-1");
  // Never read back while stalled (a synchronous copy would wait behind it on a real driver).
  EXPECT_EQ(r.values().count("data_ok"), 0u) << r.out;
}

TEST(Interposer, CopyHangReleasesAfterTheGivenTime) {
  auto r = runTarget({"hang", "wait"}, "copy_hang:release_ms=200");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_VALUE(r, "pending", "1");
  const long ms = std::stol(r.values()["completed_ms"]);
  EXPECT_GE(ms, 190);
  EXPECT_LT(ms, 3000);
  EXPECT_VALUE(r, "data_ok", "1");
}

TEST(Interposer, SignalWithholdDropsTheWrite) {
  auto r = runTarget({"signal"}, "signal_withhold");
  EXPECT_VALUE(r, "write_rc", "0");
  EXPECT_VALUE(r, "word", "0");
  EXPECT_VALUE(r, "driver_writes", "0");
  EXPECT_VALUE(runTarget({"signal"}, "signal_withhold:value=8"), "word", "7");
  EXPECT_VALUE(runTarget({"signal"}, "signal_withhold:value=7"), "word", "0");
}

TEST(Interposer, SignalLateDelaysTheWrite) {
  auto r = runTarget({"signal"}, "signal_late:ms=250");
  EXPECT_VALUE(r, "word", "7");
  EXPECT_GE(std::stol(r.values()["elapsed_ms"]), 240) << r.out;
}

TEST(Interposer, KillAfterExportKillsOnlyTheNamedRank) {
  auto dies = runTarget({"export"}, "kill_after_export:rank=1", {"PEERLAB_RANK=1"});
  EXPECT_EQ(dies.signal, SIGKILL) << dies.out << dies.err;
  EXPECT_EQ(dies.out.find("survived"), std::string::npos);
  auto lives = runTarget({"export"}, "kill_after_export:rank=1", {"PEERLAB_RANK=0"});
  EXPECT_EQ(lives.exit_code, 0);
  EXPECT_VALUE(lives, "survived", "1");
  auto unranked = runTarget({"export"}, "kill_after_export:rank=0");
  EXPECT_EQ(unranked.exit_code, 0) << "a process without PEERLAB_RANK is no rank";
}

TEST(Interposer, KillAfterExportCanWait) {
  auto r = runTarget({"export"}, "kill_after_export:rank=0,delay_ms=3000", {"PEERLAB_RANK=0"});
  // The program exits before the delay runs out.
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_VALUE(r, "exported", "1");
}

TEST(Interposer, VerboseLogsEachActionOnStderr) {
  auto r = runTarget({"copy", "rt_peer_async", "write"}, "bitflip:offset=4096", {"PEERLAB_FAULTS_VERBOSE=1"});
  EXPECT_NE(r.err.find("peerlab-faults: loaded fault bitflip:offset=4096"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("peerlab-faults: bitflip at 0x"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("offset 4096"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("copy 0->1 side write"), std::string::npos) << r.err;
  auto quiet = runTarget({"copy", "rt_peer_async", "write"}, "bitflip:offset=4096");
  EXPECT_TRUE(announcesOnce(quiet.err, "fault bitflip:offset=4096")) << quiet.err;
}

TEST(Interposer, StatsFileGetsOneLinePerAction) {
  const std::string path = ::testing::TempDir() + "faults-stats-" + std::to_string(getpid()) + ".jsonl";
  std::remove(path.c_str());
  auto r = runTarget({"copy", "rt_peer_async", "write"}, "bitflip", {"PEERLAB_FAULTS_STATS=" + path});
  ASSERT_EQ(r.exit_code, 0);
  std::ifstream f(path);
  std::string line;
  int loaded = 0, flips = 0;
  while (std::getline(f, line)) {
    if (line.find("\"action\":\"loaded\"") != std::string::npos) ++loaded;
    if (line.find("\"action\":\"bitflip\"") != std::string::npos) ++flips;
    EXPECT_EQ(line.front(), '{');
    EXPECT_EQ(line.back(), '}');
  }
  EXPECT_EQ(loaded, 1);
  EXPECT_EQ(flips, 1);
  std::remove(path.c_str());
}

TEST(Interposer, BadSpecInTheEnvironmentInjectsNothing) {
  auto r = runTarget({"copy", "rt_peer_async", "write"}, "bitflip:bit=9");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_VALUE(r, "diff", "0");
  EXPECT_NE(r.err.find("no fault injected"), std::string::npos) << r.err;
}

TEST(Interposer, DlsymRtldNextKeepsItsMeaning) {
  auto r = runTarget({"dlsym_next"}, "none");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_VALUE(r, "next_is_interposer", "1");
  EXPECT_VALUE(r, "next_getpid_ok", "1");
  EXPECT_VALUE(r, "missing_is_null", "1");
}

// A tool that interposes dlopen and looks up the real one with dlsym(RTLD_NEXT) from inside it, preloaded before the
// interposer (as compute-sanitizer's library is): the interposer's RTLD_NEXT lookup must not call dlopen back.
TEST(Interposer, DlsymRtldNextNeverCallsBackIntoAnInterposedDlopen) {
  auto r = runProcess(
      {PEERLAB_FAULT_TARGET_PATH, "copy", "rt_peer_async", "write"},
      {"LD_PRELOAD=" + std::string(PEERLAB_DLOPEN_GUARD_PATH) + ":" + PEERLAB_FAULTS_LIB_PATH, "PEERLAB_FAULT=none"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("dlopen_guard: intercepted"), std::string::npos) << r.err;
  EXPECT_VALUE(r, "copy_rc", "0");
  EXPECT_VALUE(r, "diff", "0");
}

}  // namespace
}  // namespace peerlab::faults
