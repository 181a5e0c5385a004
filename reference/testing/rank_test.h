#pragma once
/// Multi-rank GoogleTest tests: the test body runs once per rank, each rank a separate process connected by the local
/// bootstrap (reference/core/local_bootstrap.h).
///
///   TEST(Zcopy, GetMovesData) {
///     PEERLAB_REQUIRE_GPUS(2);
///     PEERLAB_TEST_RANKS(2, boot);   // the parent spawns 2 ranks running only this test, checks they pass, returns
///     int me = boot.rank();          // from here on: inside rank `me`, with a connected Bootstrap
///     ...
///   }

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "reference/core/bootstrap.h"
#include "reference/core/deadline.h"
#include "reference/core/status.h"

namespace peerlab::testing {

struct TestRanks {
  bool is_parent = true;                 ///< the gtest process that spawned the ranks
  std::unique_ptr<Bootstrap> bootstrap;  ///< set inside a rank
  Status status;                         ///< parent: ok when every rank exited 0, else which ranks failed and how
  bool skipped = false;                  ///< parent: the ranks passed, but at least one skipped the test
  std::string skip_reason;               ///< parent: "rank 1: needs 2 GPUs, 1 visible"
};

/// Parent: re-runs the current test (--gtest_filter=<this test>) as `ranks` local ranks and waits (timeout); when one
/// rank fails the others are stopped. Rank: connects the bootstrap. `extra_env` is added to the ranks' environment.
/// Each rank's output goes to a log; the logs of failed ranks are appended to `status` (set PEERLAB_RANK_OUTPUT=1
/// to print every rank's log). A process an outside launcher started (see setOutsideLauncher) is already a rank:
/// it gets that launcher's bootstrap, whose size must equal `ranks`.
TestRanks runTestAsRanks(int ranks, std::chrono::seconds timeout = std::chrono::seconds(120),
                         std::vector<std::string> extra_env = {});

/// Rank side: ends this rank at once with exit code 0, without destructors or a goodbye (a crash, as far as its peers
/// can tell), after noting in its result file that it left on purpose. The parent counts a rank that exits 0 without
/// a result as one that never ran the test.
[[noreturn]] void exitRankAbruptly();

/// An outside launcher (mpirun): `launched` tells whether it started this process, `connect` connects its bootstrap.
struct OutsideLauncher {
  bool (*launched)() = nullptr;
  StatusOr<std::unique_ptr<Bootstrap>> (*connect)(Deadline deadline) = nullptr;
};
/// Lets the tests of this executable run as ranks of an outside launcher. Call it before the tests run (a static
/// initializer of the test file); returns true.
bool setOutsideLauncher(OutsideLauncher launcher);

}  // namespace peerlab::testing

#define PEERLAB_TEST_RANKS_TIMEOUT(n, boot, timeout_s, env)                                         \
  auto boot##_ranks_ = ::peerlab::testing::runTestAsRanks(n, std::chrono::seconds(timeout_s), env); \
  if (boot##_ranks_.is_parent) {                                                                    \
    ASSERT_TRUE(boot##_ranks_.status.isOk()) << boot##_ranks_.status.toString();                    \
    if (boot##_ranks_.skipped) GTEST_SKIP() << boot##_ranks_.skip_reason;                           \
    return;                                                                                         \
  }                                                                                                 \
  ASSERT_TRUE(boot##_ranks_.bootstrap != nullptr) << boot##_ranks_.status.toString();               \
  ::peerlab::Bootstrap& boot = *boot##_ranks_.bootstrap

#define PEERLAB_TEST_RANKS(n, boot) PEERLAB_TEST_RANKS_TIMEOUT(n, boot, 120, {})
