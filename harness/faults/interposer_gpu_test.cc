// libpeerlab_faults.so over the real CUDA runtime and driver: the same test program as interposer_test, linked with
// the real libcudart (fault_target_cuda), on two GPUs. Checks that each fault reaches real calls on both the runtime
// and the driver-entry-point path, exactly once, and that stalls and delays end.

#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>
#include <string>
#include <vector>

#include "harness/faults/testing/run_process.h"
#include "reference/testing/testing.h"

namespace peerlab::faults {
namespace {

using testing::ProcessResult;

ProcessResult runTarget(const std::vector<std::string>& args, const std::string& fault,
                        const std::vector<std::string>& env = {}) {
  return testing::runUnderFault(PEERLAB_FAULT_TARGET_CUDA_PATH, PEERLAB_FAULTS_LIB_PATH, args, fault, env,
                                std::chrono::seconds(60));
}

TEST(InterposerGpu, NoneIsTransparentOnEveryCopyPath) {
  PEERLAB_REQUIRE_GPUS(2);
  for (const char* api :
       {"rt_peer_async", "rt_peer", "rt_async", "rt_sync", "drv_peer_async", "drv_async", "drv_dtod_async"}) {
    auto r = runTarget({"copy", api, "write"}, "none");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_VALUE(r, "copy_rc", "0");
    EXPECT_VALUE(r, "sync_rc", "0");
    EXPECT_VALUE(r, "diff", "0");
  }
}

TEST(InterposerGpu, BitflipFlipsOneBitOnceOnEveryCopyPath) {
  PEERLAB_REQUIRE_GPUS(2);
  for (const char* side : {"write", "read"}) {
    for (const char* api :
         {"rt_peer_async", "rt_peer", "rt_async", "rt_sync", "drv_peer_async", "drv_async", "drv_dtod_async"}) {
      auto r = runTarget({"copy", api, side}, "bitflip:offset=4096,bit=3");
      ASSERT_EQ(r.exit_code, 0) << api << r.err;
      EXPECT_VALUE(r, "copy_rc", "0");
      EXPECT_VALUE(r, "sync_rc", "0");
      EXPECT_VALUE(r, "diff", "1");
      EXPECT_VALUE(r, "first", "4096");
      EXPECT_VALUE(r, "mask", "8");
    }
  }
  EXPECT_VALUE(runTarget({"copy", "rt_peer_async", "read"}, "bitflip:side=write"), "diff", "0");
}

TEST(InterposerGpu, LieAndDropWritesOnRealCopies) {
  PEERLAB_REQUIRE_GPUS(2);
  auto lie = runTarget({"copy", "rt_peer_async", "write"}, "lie:flips=5");
  EXPECT_VALUE(lie, "diff", "5");
  auto caps = runTarget({"caps"}, "lie");
  EXPECT_VALUE(caps, "rt_can_access", "1");
  EXPECT_VALUE(caps, "rt_p2p_access", "1");
  EXPECT_VALUE(caps, "drv_can_access", "1");
  auto drop = runTarget({"copy", "drv_async", "write"}, "drop_writes");
  EXPECT_VALUE(drop, "copy_rc", "0");
  EXPECT_VALUE(drop, "untouched", "1");
}

TEST(InterposerGpu, EnableErrorReturnsTheCode) {
  PEERLAB_REQUIRE_GPUS(2);
  auto r = runTarget({"enable"}, "enable_error:code=711,direction=second");
  EXPECT_VALUE(r, "rt_enable_1_0", "711");
  const std::string forward = r.values()["rt_enable_0_1"];
  // Really enabled (0) unless the GPUs have no peer path at all (217).
  EXPECT_TRUE(forward == "0" || forward == "217") << r.out;
}

TEST(InterposerGpu, CopyHangStallsARealStreamUntilTeardown) {
  PEERLAB_REQUIRE_GPUS(2);
  auto r = runTarget({"hang", "teardown"}, "copy_hang");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_VALUE(r, "pending", "1");
  EXPECT_NE(r.values()["completed_ms"], "-1") << r.out;
  EXPECT_VALUE(r, "data_ok", "1");
  auto timed = runTarget({"hang", "wait"}, "copy_hang:release_ms=300");
  EXPECT_VALUE(timed, "pending", "1");
  EXPECT_GE(std::stol(timed.values()["completed_ms"]), 290) << timed.out;
  EXPECT_VALUE(timed, "data_ok", "1");
  // Never let go while the program runs: the process still exits cleanly.
  auto stuck = runTarget({"hang", "wait", "1000"}, "copy_hang:release=exit");
  EXPECT_EQ(stuck.exit_code, 0) << stuck.err;
  EXPECT_VALUE(stuck, "completed_ms", "-1");
}

TEST(InterposerGpu, SignalsAreWithheldOrLate) {
  PEERLAB_REQUIRE_GPUS(1);
  EXPECT_VALUE(runTarget({"signal"}, "none"), "word", "7");
  EXPECT_VALUE(runTarget({"signal"}, "signal_withhold"), "word", "0");
  auto late = runTarget({"signal"}, "signal_late:ms=300");
  EXPECT_VALUE(late, "word", "7");
  EXPECT_GE(std::stol(late.values()["elapsed_ms"]), 290) << late.out;
}

TEST(InterposerGpu, KillAfterExportOnARealHandle) {
  PEERLAB_REQUIRE_GPUS(1);
  auto dies = runTarget({"export"}, "kill_after_export:rank=1", {"PEERLAB_RANK=1"});
  EXPECT_EQ(dies.signal, SIGKILL) << dies.out << dies.err;
  auto lives = runTarget({"export"}, "kill_after_export:rank=1", {"PEERLAB_RANK=0"});
  EXPECT_EQ(lives.exit_code, 0) << lives.err;
  EXPECT_VALUE(lives, "exported", "1");
}

}  // namespace
}  // namespace peerlab::faults
