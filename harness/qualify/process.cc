#include "harness/qualify/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "reference/core/fd.h"

extern char** environ;

namespace peerlab::qualify {

namespace {

std::atomic<bool> gInterrupted{false};

void onInterrupt(int) {
  gInterrupted.store(true);
}

// Installs SIGINT/SIGTERM handlers for the lifetime of one child, restoring the previous ones after.
class InterruptGuard {
 public:
  InterruptGuard() {
    struct sigaction sa {};
    sa.sa_handler = onInterrupt;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &oldInt_);
    sigaction(SIGTERM, &sa, &oldTerm_);
  }
  ~InterruptGuard() {
    sigaction(SIGINT, &oldInt_, nullptr);
    sigaction(SIGTERM, &oldTerm_, nullptr);
  }
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

 private:
  struct sigaction oldInt_ {};
  struct sigaction oldTerm_ {};
};

bool isExecutable(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

int openOutput(const std::string& path) {
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
}

// Waits for the child without blocking forever; true when it was reaped.
bool reap(pid_t pid, int* status, std::chrono::milliseconds within) {
  const auto until = std::chrono::steady_clock::now() + within;
  while (true) {
    const pid_t r = ::waitpid(pid, status, WNOHANG);
    if (r == pid) return true;
    if (r < 0 && errno != EINTR) return true;  // already reaped or not ours
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

bool interruptRequested() {
  return gInterrupted.load();
}

std::string selfExecutable() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  buf[n] = '\0';
  return buf;
}

std::string selfExecutableDir() {
  std::string exe = selfExecutable();
  const auto slash = exe.rfind('/');
  return slash == std::string::npos ? "" : exe.substr(0, slash);
}

std::string findInPath(const std::string& name) {
  if (name.find('/') != std::string::npos) return isExecutable(name) ? name : "";
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (dir.empty()) continue;
    const std::string candidate = dir + "/" + name;
    if (isExecutable(candidate)) return candidate;
  }
  return "";
}

StatusOr<std::string> readTextFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return PEERLAB_INVALID_ARGUMENT(path + ": cannot read: " + std::strerror(errno));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Status writeTextFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return PEERLAB_INVALID_ARGUMENT(path + ": cannot write: " + std::strerror(errno));
  f << text;
  f.flush();
  if (!f) return PEERLAB_INVALID_ARGUMENT(path + ": write failed");
  return Status::ok();
}

std::string tailOfFile(const std::string& path, int lines) {
  std::ifstream f(path);
  if (!f) return "";
  std::deque<std::string> keep;
  std::string line;
  while (std::getline(f, line)) {
    keep.push_back(line);
    if (static_cast<int>(keep.size()) > lines) keep.pop_front();
  }
  std::string out;
  for (const auto& l : keep)
    out += l + "\n";
  return out;
}

std::string describeExit(const ProcessResult& r, std::chrono::milliseconds timeout) {
  if (r.interrupted) return "interrupted";
  if (r.timed_out) {
    return "exceeded its deadline of " + std::to_string(timeout.count() / 1000) + " s and was killed";
  }
  if (r.signal) return "killed by signal " + std::to_string(r.signal) + " (" + strsignal(r.signal) + ")";
  return "exit code " + std::to_string(r.exit_code);
}

StatusOr<ProcessResult> runProcess(const ProcessOptions& options) {
  if (options.argv.empty() || options.argv[0].empty()) return PEERLAB_INVALID_ARGUMENT("no program to run");
  const std::string program = findInPath(options.argv[0]);
  if (program.empty()) {
    return PEERLAB_UNAVAILABLE(options.argv[0] + ": not found or not executable");
  }
  // Everything the child needs is prepared before fork: after fork only async-signal-safe calls are made.
  std::map<std::string, std::string> env;
  std::vector<std::string> order;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    const auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    if (!env.count(kv.substr(0, eq))) order.push_back(kv.substr(0, eq));
    env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const std::string& kv : options.env) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    if (!env.count(kv.substr(0, eq))) order.push_back(kv.substr(0, eq));
    env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  std::vector<std::string> envStrings;
  for (const std::string& k : order)
    envStrings.push_back(k + "=" + env[k]);
  std::vector<char*> envp, argv;
  for (auto& s : envStrings)
    envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = options.argv;
  for (auto& s : args)
    argv.push_back(s.data());
  argv.push_back(nullptr);

  Fd out, err;
  if (!options.stdout_path.empty()) {
    out.reset(openOutput(options.stdout_path));
    if (out.get() < 0) return PEERLAB_INVALID_ARGUMENT(options.stdout_path + ": cannot write: " + std::strerror(errno));
  }
  if (!options.stderr_path.empty() && options.stderr_path != options.stdout_path) {
    err.reset(openOutput(options.stderr_path));
    if (err.get() < 0) return PEERLAB_INVALID_ARGUMENT(options.stderr_path + ": cannot write: " + std::strerror(errno));
  }
  const bool errToOut = !options.stderr_path.empty() && options.stderr_path == options.stdout_path;
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return PEERLAB_INTERNAL(std::string("pipe2: ") + std::strerror(errno));
  Fd readEnd(pipefd[0]), writeEnd(pipefd[1]);

  InterruptGuard guard;
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) return PEERLAB_INTERNAL(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    // Child: own process group so that the whole tree (ranks included) can be stopped together.
    ::setpgid(0, 0);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    if (out.get() >= 0) ::dup2(out.get(), STDOUT_FILENO);
    if (err.get() >= 0) ::dup2(err.get(), STDERR_FILENO);
    if (errToOut) ::dup2(STDOUT_FILENO, STDERR_FILENO);
    if (!options.cwd.empty() && ::chdir(options.cwd.c_str()) != 0) {
      const int e = errno;
      (void)!::write(pipefd[1], &e, sizeof(e));
      ::_exit(127);
    }
    ::execve(program.c_str(), argv.data(), envp.data());
    const int e = errno;
    (void)!::write(pipefd[1], &e, sizeof(e));
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also from the parent, so the group exists before any kill below
  writeEnd.reset();
  int execErrno = 0;
  ssize_t n;
  do {
    n = ::read(readEnd.get(), &execErrno, sizeof(execErrno));
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof(execErrno))) {
    int status = 0;
    reap(pid, &status, std::chrono::seconds(5));
    return PEERLAB_UNAVAILABLE(program + ": cannot start: " + std::strerror(execErrno));
  }

  ProcessResult result;
  int status = 0;
  auto lastTick = start;
  bool exited = false;
  while (!exited) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      exited = true;
      break;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now - start >= options.timeout || gInterrupted.load()) {
      result.timed_out = !gInterrupted.load();
      result.interrupted = gInterrupted.load();
      ::kill(-pid, SIGTERM);
      if (!reap(pid, &status, options.kill_grace)) {
        ::kill(-pid, SIGKILL);
        reap(pid, &status, std::chrono::seconds(10));
      }
      exited = true;
      break;
    }
    if (options.tick && now - lastTick >= std::chrono::milliseconds(200)) {
      options.tick();
      lastTick = now;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Nothing of the child's group outlives it (ranks it started, helpers).
  ::kill(-pid, SIGKILL);
  result.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  return result;
}

}  // namespace peerlab::qualify
