#include "harness/process/contained.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "reference/core/process.h"

namespace peerlab::process {
namespace {

// The exit status when the body throws or the caller is already gone.
constexpr int kChildFailed = 125;

int64_t elapsedMs(Deadline::Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Deadline::Clock::now() - start).count();
}

[[noreturn]] void runChild(const std::function<int()>& body, pid_t parent, Deadline deadline) {
  // A crash must end the child as the signal itself, not in a handler inherited from the caller.
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS, SIGALRM}) {
    ::signal(sig, SIG_DFL);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  // Die with the caller, and on our own shortly after the deadline should the caller be gone.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(kChildFailed);
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(deadline.remaining()).count();
  ::alarm(static_cast<unsigned>(std::max<int64_t>(1, seconds + 1)));
  const rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
  const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (null >= 0) ::dup2(null, STDERR_FILENO);
  int code = kChildFailed;
  try {
    code = body();
  } catch (...) {
  }
  ::_exit(code & 0xff);
}

}  // namespace

std::string ContainedEnd::describe() const {
  switch (kind) {
    case Kind::kExited:
      return "exited with status " + std::to_string(exit_code);
    case Kind::kSignaled:
      return "crashed with " + signalName(signal);
    case Kind::kTimedOut:
      break;
  }
  return "did not finish within " + std::to_string(elapsed_ms) + " ms (stopped)";
}

StatusOr<ContainedEnd> runContained(const std::function<int()>& body, Deadline deadline) {
  const auto start = Deadline::Clock::now();
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return PEERLAB_UNAVAILABLE(std::string("cannot start a process: fork: ") + std::strerror(errno));
  if (pid == 0) runChild(body, parent, deadline);

  // Not a group leader: a forked copy shares the caller's group until it execs, and it never does.
  Child child = Child::adopt(pid, false);
  ContainedEnd end;
  end.pid = pid;
  auto ended = child.wait(deadline);
  if (!ended.isOk()) {
    // SIGKILL only: a SIGTERM would run the handlers the child inherited from the caller.
    child.signal(SIGKILL);
    (void)child.wait(Deadline::after(std::chrono::seconds(30)));
    end.kind = ContainedEnd::Kind::kTimedOut;
    end.elapsed_ms = elapsedMs(start);
    return end;
  }
  end.elapsed_ms = elapsedMs(start);
  // Something else in this process reaped the child (SIGCHLD ignored, a handler): its verdict is unknown.
  if (ended->lost) return PEERLAB_INTERNAL("lost the contained process: it " + ended->describe());
  if (ended->signal != 0) {
    end.kind = ContainedEnd::Kind::kSignaled;
    end.signal = ended->signal;
  } else {
    end.kind = ContainedEnd::Kind::kExited;
    end.exit_code = ended->code;
  }
  return end;
}

}  // namespace peerlab::process
