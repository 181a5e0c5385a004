#include "harness/process/contained.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <stdexcept>

#include "reference/testing/testing.h"

namespace peerlab::process {
namespace {

// No child of this process is left unreaped.
void expectNoChildLeft() {
  errno = 0;
  EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

TEST(Contained, ReportsHowTheChildEndedAndReapsIt) {
  const Deadline later = Deadline::afterMs(10000);
  PEERLAB_ASSERT_OK_AND_ASSIGN(ContainedEnd exited, runContained([] { return 7; }, later));
  EXPECT_TRUE(exited.exitedWith(7)) << exited.describe();
  EXPECT_EQ(exited.describe(), "exited with status 7");

  PEERLAB_ASSERT_OK_AND_ASSIGN(ContainedEnd segv, runContained([] { return ::raise(SIGSEGV) == 0 ? 0 : 1; }, later));
  EXPECT_EQ(segv.kind, ContainedEnd::Kind::kSignaled) << segv.describe();
  EXPECT_EQ(segv.signal, SIGSEGV);
  EXPECT_EQ(segv.describe(), "crashed with SIGSEGV");

  PEERLAB_ASSERT_OK_AND_ASSIGN(ContainedEnd aborted, runContained([]() -> int { std::abort(); }, later));
  EXPECT_EQ(aborted.describe(), "crashed with SIGABRT");

  PEERLAB_ASSERT_OK_AND_ASSIGN(ContainedEnd threw, runContained([]() -> int { throw std::runtime_error("x"); }, later));
  EXPECT_EQ(threw.kind, ContainedEnd::Kind::kExited);
  EXPECT_NE(threw.exit_code, 0);

  // A hang is stopped at the deadline.
  const auto start = Deadline::Clock::now();
  auto forever = [] {
    while (true)
      ::pause();
    return 0;
  };
  PEERLAB_ASSERT_OK_AND_ASSIGN(ContainedEnd hung, runContained(forever, Deadline::afterMs(200)));
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Deadline::Clock::now() - start);
  EXPECT_EQ(hung.kind, ContainedEnd::Kind::kTimedOut) << hung.describe();
  EXPECT_GE(waited.count(), 190);
  EXPECT_LT(waited.count(), 5000);
  EXPECT_GE(hung.elapsed_ms, 190);
  for (pid_t pid : {exited.pid, segv.pid, aborted.pid, threw.pid, hung.pid}) {
    EXPECT_GT(pid, 0);
    EXPECT_NE(::kill(pid, 0), 0) << "child " << pid << " still exists";
  }
  expectNoChildLeft();
}

TEST(Contained, ChildReapedElsewhereIsAnErrorNotASuccess) {
  // With SIGCHLD ignored the kernel reaps the child itself: the body's answer never arrives, so it must not read as
  // "exited with status 0".
  struct sigaction ignore {};
  struct sigaction old {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ASSERT_EQ(::sigaction(SIGCHLD, &ignore, &old), 0);
  auto end = runContained([] { return 0; }, Deadline::afterMs(10000));
  ::sigaction(SIGCHLD, &old, nullptr);
  ASSERT_FALSE(end.isOk()) << end->describe();
  EXPECT_EQ(end.status().code(), StatusCode::kInternal);
  EXPECT_NE(end.status().message().find("lost the contained process"), std::string::npos) << end.status().toString();
  expectNoChildLeft();
}

}  // namespace
}  // namespace peerlab::process
