#include "harness/watchdog/watchdog.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <thread>

#include "reference/testing/testing.h"

namespace peerlab::watchdog {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::vector<uint8_t> bytes(const std::string& s) {
  return {s.begin(), s.end()};
}
std::string text(const Message& m) {
  return {m.bytes.begin(), m.bytes.end()};
}

StatusOr<Child> standin(const std::string& mode) {
  SpawnOptions so;
  so.argv = {PEERLAB_STANDIN_PATH, mode};
  return Child::spawn(so);
}

// No child of this process is left: not in the registry, and waitpid has nobody to wait for.
void expectNoChildren() {
  EXPECT_EQ(liveChildren(), 0);
  errno = 0;
  EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

TEST(Watchdog, EchoesBytesAndPassesDescriptors) {
  {
    PEERLAB_ASSERT_OK_AND_ASSIGN(Child child, standin("echo"));
    int p[2];
    ASSERT_EQ(::pipe(p), 0);
    Fd read_end(p[0]), write_end(p[1]);
    const int fds[] = {write_end.get()};
    PEERLAB_ASSERT_OK(child.send(bytes("hello"), Deadline::afterMs(5000), fds));
    PEERLAB_ASSERT_OK_AND_ASSIGN(Message back, child.receive(Deadline::afterMs(5000)));
    EXPECT_EQ(text(back), "hello");
    ASSERT_EQ(back.fds.size(), 1u);
    // The descriptor came back as a duplicate of the same pipe end.
    struct stat a {
    }, b{};
    ASSERT_EQ(::fstat(write_end.get(), &a), 0);
    ASSERT_EQ(::fstat(back.fds[0].get(), &b), 0);
    EXPECT_EQ(a.st_ino, b.st_ino);
    EXPECT_NE(write_end.get(), back.fds[0].get());
    EXPECT_TRUE(child.isAlive());
    const ExitStatus e = child.kill();
    EXPECT_EQ(e.signal, SIGTERM) << e.describe();
    EXPECT_FALSE(child.isAlive());
  }
  expectNoChildren();
}

TEST(Watchdog, ReceiveFromAHangingChildHonoursTheDeadline) {
  {
    PEERLAB_ASSERT_OK_AND_ASSIGN(Child child, standin("echo"));
    PEERLAB_ASSERT_OK(child.send(bytes("hang"), Deadline::afterMs(5000)));
    const auto t0 = Clock::now();
    auto msg = child.receive(Deadline::afterMs(300));
    const auto waited = std::chrono::duration_cast<milliseconds>(Clock::now() - t0);
    ASSERT_FALSE(msg.isOk());
    EXPECT_EQ(msg.status().code(), StatusCode::kTimeout) << msg.status().toString();
    EXPECT_GE(waited.count(), 290);
    EXPECT_LT(waited.count(), 300 + 150) << "the deadline was not honoured";
    EXPECT_TRUE(child.isAlive());
    const ExitStatus e = child.kill();
    EXPECT_FALSE(e.exited);
    EXPECT_EQ(e.signal, SIGTERM) << e.describe();
  }
  expectNoChildren();
}

TEST(Watchdog, SegfaultIsDescribedWithTheSignal) {
  {
    PEERLAB_ASSERT_OK_AND_ASSIGN(Child child, standin("echo"));
    PEERLAB_ASSERT_OK(child.send(bytes("segv"), Deadline::afterMs(5000)));
    auto msg = child.receive(Deadline::afterMs(5000));
    ASSERT_FALSE(msg.isOk());
    EXPECT_EQ(msg.status().code(), StatusCode::kUnavailable) << msg.status().toString();
    PEERLAB_ASSERT_OK_AND_ASSIGN(ExitStatus e, child.wait(Deadline::afterMs(5000)));
    EXPECT_FALSE(e.exited);
    EXPECT_EQ(e.signal, SIGSEGV);
    EXPECT_NE(e.describe().find("SIGSEGV"), std::string::npos) << e.describe();
    EXPECT_FALSE(child.isAlive());
  }
  expectNoChildren();
}

TEST(Watchdog, ExitCodeIsReported) {
  {
    PEERLAB_ASSERT_OK_AND_ASSIGN(Child child, standin("echo"));
    PEERLAB_ASSERT_OK(child.send(bytes("exit:7"), Deadline::afterMs(5000)));
    auto msg = child.receive(Deadline::afterMs(5000));
    EXPECT_EQ(msg.status().code(), StatusCode::kUnavailable);
    PEERLAB_ASSERT_OK_AND_ASSIGN(ExitStatus e, child.wait(Deadline::afterMs(5000)));
    EXPECT_TRUE(e.exited);
    EXPECT_EQ(e.code, 7);
    EXPECT_EQ(e.describe(), "exited with code 7");
    // A reaped child keeps its status; kill() is harmless.
    EXPECT_EQ(child.kill().code, 7);
  }
  expectNoChildren();
}

TEST(Watchdog, KillEscalatesToSigkillAfterTheGrace) {
  {
    PEERLAB_ASSERT_OK_AND_ASSIGN(Child child, standin("echo"));
    PEERLAB_ASSERT_OK(child.send(bytes("ignore-term"), Deadline::afterMs(5000)));
    PEERLAB_ASSERT_OK_AND_ASSIGN(Message ack, child.receive(Deadline::afterMs(5000)));
    EXPECT_EQ(text(ack), "ignoring");
    const auto t0 = Clock::now();
    const ExitStatus e = child.kill(milliseconds(200));
    const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count();
    EXPECT_EQ(e.signal, SIGKILL) << e.describe();
    EXPECT_GE(took, 190);
    EXPECT_LT(took, 2000);
  }
  expectNoChildren();
}

TEST(Watchdog, DestroyingTheOwnerKillsAndReaps) {
  pid_t pid = -1;
  {
    PEERLAB_ASSERT_OK_AND_ASSIGN(Child child, standin("silent"));
    pid = child.pid();
    EXPECT_EQ(liveChildren(), 1);
  }
  EXPECT_EQ(::kill(pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
  expectNoChildren();
}

TEST(Watchdog, ChildWithoutChannelAndItsExitCode) {
  {
    SpawnOptions so;
    so.argv = {PEERLAB_STANDIN_PATH, "exit", "42"};
    so.channel = false;
    PEERLAB_ASSERT_OK_AND_ASSIGN(Child child, Child::spawn(so));
    PEERLAB_ASSERT_OK_AND_ASSIGN(ExitStatus e, child.wait(Deadline::afterMs(5000)));
    EXPECT_TRUE(e.exited);
    EXPECT_EQ(e.code, 42);
  }
  expectNoChildren();
}

TEST(Watchdog, MissingProgramIsUnavailable) {
  SpawnOptions so;
  so.argv = {"/nonexistent/peerlab-no-such-program"};
  auto child = Child::spawn(so);
  ASSERT_FALSE(child.isOk());
  EXPECT_EQ(child.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(child.status().message().find("/nonexistent/peerlab-no-such-program"), std::string::npos);
  SpawnOptions empty;
  EXPECT_EQ(Child::spawn(empty).status().code(), StatusCode::kInvalidArgument);
  expectNoChildren();
}

TEST(Watchdog, EnvironmentReachesTheChild) {
  {
    SpawnOptions so;
    so.argv = {"/bin/sh", "-c", "test \"$PEERLAB_WATCHDOG_TEST\" = forty-two && exit 9; exit 1"};
    so.env = {"PEERLAB_WATCHDOG_TEST=forty-two"};
    so.channel = false;
    PEERLAB_ASSERT_OK_AND_ASSIGN(Child child, Child::spawn(so));
    PEERLAB_ASSERT_OK_AND_ASSIGN(ExitStatus e, child.wait(Deadline::afterMs(5000)));
    EXPECT_EQ(e.code, 9) << e.describe();
  }
  expectNoChildren();
}

TEST(Watchdog, InterruptedParentTakesItsChildrenDown) {
  // The stand-in spawns a child of its own under the interrupt handlers; SIGINT to the stand-in must kill and reap
  // that grandchild, then end the stand-in with SIGINT.
  pid_t grandchild = -1;
  {
    PEERLAB_ASSERT_OK_AND_ASSIGN(Child parent, standin("echo"));
    PEERLAB_ASSERT_OK(parent.send(bytes("spawn"), Deadline::afterMs(5000)));
    PEERLAB_ASSERT_OK_AND_ASSIGN(Message reply, parent.receive(Deadline::afterMs(5000)));
    grandchild = std::stoi(text(reply));
    ASSERT_GT(grandchild, 0);
    EXPECT_EQ(::kill(grandchild, 0), 0) << "the grandchild should be running";
    ASSERT_EQ(::kill(parent.pid(), SIGINT), 0);
    PEERLAB_ASSERT_OK_AND_ASSIGN(ExitStatus e, parent.wait(Deadline::afterMs(5000)));
    EXPECT_EQ(e.signal, SIGINT) << e.describe();
  }
  // Reaped by the stand-in's handler: the pid is gone, not a zombie.
  EXPECT_EQ(::kill(grandchild, 0), -1);
  EXPECT_EQ(errno, ESRCH);
  expectNoChildren();
}

TEST(Watchdog, ClosedPeerIsUnavailableAndOversizedMessagesAreRefused) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto ends, Channel::pair());
  std::vector<uint8_t> big(kMaxMessageBytes + 1, 1);
  EXPECT_EQ(ends.first.send(big, Deadline::afterMs(100)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ends.first.send({}, Deadline::afterMs(100)).code(), StatusCode::kInvalidArgument);
  PEERLAB_ASSERT_OK(ends.first.send(bytes("last"), Deadline::afterMs(100)));
  ends.first.close();
  PEERLAB_ASSERT_OK_AND_ASSIGN(Message m, ends.second.receive(Deadline::afterMs(100)));
  EXPECT_EQ(text(m), "last");
  EXPECT_EQ(ends.second.receive(Deadline::afterMs(100)).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(ends.second.send(bytes("x"), Deadline::afterMs(100)).code(), StatusCode::kUnavailable);
}

TEST(Watchdog, AttachFailsOutsideAWatchedChild) {
  ::unsetenv(kEnvChannelFd);
  EXPECT_EQ(attachToParent().status().code(), StatusCode::kInvalidArgument);
}

TEST(ExitStatus, DecodesWaitStatuses) {
  EXPECT_EQ(decodeWaitStatus(7 << 8).describe(), "exited with code 7");
  const ExitStatus k = decodeWaitStatus(SIGKILL);
  EXPECT_FALSE(k.exited);
  EXPECT_EQ(k.signal, SIGKILL);
  EXPECT_NE(k.describe().find("SIGKILL"), std::string::npos);
  EXPECT_TRUE(decodeWaitStatus(0).success());
}

}  // namespace
}  // namespace peerlab::watchdog
