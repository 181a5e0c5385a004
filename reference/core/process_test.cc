#include "reference/core/process.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <thread>

#include "reference/core/fd.h"
#include "reference/core/files.h"
#include "reference/testing/testing.h"

namespace peerlab::process {
namespace {

std::string tempDir() {
  auto d = std::filesystem::temp_directory_path() / ("peerlab-process-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return d.string();
}

TEST(Process, ExitCodeOutputAndEnvironment) {
  const std::string out = tempDir() + "/out.txt";
  ProcessOptions o;
  o.argv = {"sh", "-c", "echo hello $PEERLAB_TEST_VALUE; echo oops >&2; exit 3"};
  o.env = {"PEERLAB_TEST_VALUE=42"};
  o.stdout_path = out;
  o.stderr_path = out;
  PEERLAB_ASSERT_OK_AND_ASSIGN(ProcessResult r, runProcess(o));
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_FALSE(r.ok());
  EXPECT_FALSE(r.timed_out);
  PEERLAB_ASSERT_OK_AND_ASSIGN(std::string text, readTextFile(out));
  EXPECT_EQ(text, "hello 42\noops\n");
  EXPECT_EQ(describeExit(r, o.timeout), "exit code 3");
}

TEST(Process, DeadlineKillsTheWholeGroup) {
  const std::string dir = tempDir();
  const std::string pidFile = dir + "/grandchild.pid";
  ProcessOptions o;
  // The child starts a grandchild that would outlive it, then hangs.
  o.argv = {"sh", "-c", "sleep 60 & echo $! > " + pidFile + "; sleep 60"};
  o.timeout = std::chrono::milliseconds(500);
  o.kill_grace = std::chrono::milliseconds(500);
  int ticks = 0;
  o.tick = [&] { ++ticks; };
  const auto start = std::chrono::steady_clock::now();
  PEERLAB_ASSERT_OK_AND_ASSIGN(ProcessResult r, runProcess(o));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(r.timed_out);
  EXPECT_FALSE(r.ok());
  EXPECT_LT(took, 10.0);
  EXPECT_GE(ticks, 1);
  EXPECT_NE(describeExit(r, o.timeout).find("deadline"), std::string::npos);
  PEERLAB_ASSERT_OK_AND_ASSIGN(std::string pid, readTextFile(pidFile));
  const pid_t grandchild = std::stoi(pid);
  // The grandchild was killed with its group (it may take a moment to be reaped by init).
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    gone = ::kill(grandchild, 0) != 0;
    if (!gone) {
      // A zombie still answers kill(0); check its state instead.
      std::string stat;
      auto s = readTextFile("/proc/" + pid.substr(0, pid.find('\n')) + "/stat");
      if (s.isOk() && s->find(") Z") != std::string::npos) gone = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  EXPECT_TRUE(gone) << "grandchild " << grandchild << " survived";
}

TEST(Process, MissingProgramIsUnavailable) {
  ProcessOptions o;
  o.argv = {"/nonexistent/peer_copy_bench"};
  auto r = runProcess(o);
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("/nonexistent/peer_copy_bench"), std::string::npos);
  o.argv = {"peerlab-no-such-program-anywhere"};
  EXPECT_EQ(runProcess(o).status().code(), StatusCode::kUnavailable);
}

TEST(Process, SignalIsReported) {
  ProcessOptions o;
  o.argv = {"sh", "-c", "kill -9 $$"};
  PEERLAB_ASSERT_OK_AND_ASSIGN(ProcessResult r, runProcess(o));
  EXPECT_EQ(r.signal, 9);
  EXPECT_NE(describeExit(r, o.timeout).find("signal 9"), std::string::npos);
}

TEST(Process, SelfAndPath) {
  EXPECT_FALSE(selfExecutableDir().empty());
  EXPECT_NE(selfExecutable().find("process_test"), std::string::npos);
  EXPECT_FALSE(findInPath("sh").empty());
  EXPECT_TRUE(findInPath("peerlab-no-such-program-anywhere").empty());
}

TEST(Process, EnvironmentChangesAndWorkingDirectory) {
  const std::string dir = tempDir();
  const std::string out = dir + "/env.txt";
  ::setenv("PEERLAB_PROCESS_TEST_GONE", "still here", 1);
  ProcessOptions o;
  o.argv = {"sh", "-c", "echo \"${PEERLAB_PROCESS_TEST_GONE-unset} $PEERLAB_PROCESS_TEST_SET $(pwd)\""};
  o.env = {"PEERLAB_PROCESS_TEST_GONE", "PEERLAB_PROCESS_TEST_SET=x=1"};
  o.cwd = "/";
  o.stdout_path = out;
  PEERLAB_ASSERT_OK_AND_ASSIGN(ProcessResult r, runProcess(o));
  ::unsetenv("PEERLAB_PROCESS_TEST_GONE");
  EXPECT_TRUE(r.ok()) << describeExit(r, o.timeout);
  PEERLAB_ASSERT_OK_AND_ASSIGN(std::string text, readTextFile(out));
  EXPECT_EQ(text, "unset x=1 /\n");
}

TEST(Process, InterruptStopsTheChildAndIsReported) {
  // Each ctest entry is its own process: the interrupt recorded here reaches no other case.
  ProcessOptions o;
  o.argv = {"sleep", "30"};
  o.kill_grace = std::chrono::milliseconds(200);
  // The signal goes once the child runs, so that runProcess's interrupt scope is open.
  std::thread interrupter([] {
    const Deadline give_up = Deadline::afterMs(10000);
    while (liveChildren() == 0 && !give_up.expired())
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ::kill(::getpid(), SIGINT);
  });
  const auto start = std::chrono::steady_clock::now();
  auto r = runProcess(o);
  interrupter.join();
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_TRUE(r->interrupted);
  EXPECT_FALSE(r->timed_out);
  EXPECT_EQ(r->signal, SIGTERM);
  EXPECT_EQ(describeExit(*r, o.timeout), "interrupted");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_TRUE(interruptRequested());
  EXPECT_EQ(InterruptScope::pendingSignal(), SIGINT);
  EXPECT_EQ(liveChildren(), 0);
}

TEST(Process, MissingWorkingDirectoryIsUnavailable) {
  ProcessOptions o;
  o.argv = {"sh", "-c", "exit 0"};
  o.cwd = "/nonexistent/peerlab-no-such-dir";
  auto r = runProcess(o);
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().toString();
}

TEST(Process, UnwritableOutputIsInvalidArgument) {
  ProcessOptions o;
  o.argv = {"sh", "-c", "exit 0"};
  o.stdout_path = "/nonexistent/peerlab-no-such-dir/out.txt";
  auto r = runProcess(o);
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("/nonexistent/peerlab-no-such-dir/out.txt"), std::string::npos);
}

TEST(Child, InheritedDescriptorAndKillAfterGrace) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  Fd read_end(p[0]), write_end(p[1]);
  {
    SpawnOptions so;
    // Ignores SIGTERM, then says so on descriptor 5: only the SIGKILL after the grace period ends it.
    so.argv = {"sh", "-c", "trap '' TERM; echo ready >&5; while :; do sleep 0.05; done"};
    so.inherit_fds = {{write_end.get(), 5}};
    PEERLAB_ASSERT_OK_AND_ASSIGN(Child child, Child::spawn(so));
    write_end.reset();
    char buf[6] = {};
    ASSERT_EQ(::read(read_end.get(), buf, 5), 5);
    EXPECT_EQ(std::string(buf), "ready");
    EXPECT_EQ(liveChildren(), 1);
    const auto start = std::chrono::steady_clock::now();
    const ExitStatus e = child.kill(std::chrono::milliseconds(300));
    EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(250));
    EXPECT_EQ(e.signal, SIGKILL) << e.describe();
    EXPECT_EQ(e.describe(), "killed by SIGKILL (Killed)");
    EXPECT_FALSE(child.isAlive());
  }
  EXPECT_EQ(liveChildren(), 0);
  errno = 0;
  EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

TEST(Child, WaitTimesOutThenOwnerReaps) {
  pid_t pid = -1;
  {
    SpawnOptions so;
    so.argv = {"sleep", "30"};
    PEERLAB_ASSERT_OK_AND_ASSIGN(Child child, Child::spawn(so));
    pid = child.pid();
    auto w = child.wait(Deadline::afterMs(50));
    EXPECT_EQ(w.status().code(), StatusCode::kTimeout);
  }
  // Destroying the owner killed and reaped it.
  EXPECT_EQ(::kill(pid, 0), -1);
  EXPECT_EQ(liveChildren(), 0);
}

TEST(Signals, NamesAndDecoding) {
  EXPECT_EQ(signalName(SIGSEGV), "SIGSEGV");
  EXPECT_EQ(signalText(SIGSEGV), "SIGSEGV (Segmentation fault)");
  EXPECT_EQ(signalName(70), "signal 70");
  EXPECT_EQ(decodeWaitStatus(7 << 8).describe(), "exited with code 7");
  EXPECT_TRUE(decodeWaitStatus(0).success());
  EXPECT_EQ(decodeWaitStatus(SIGABRT).signal, SIGABRT);
}

}  // namespace
}  // namespace peerlab::process
