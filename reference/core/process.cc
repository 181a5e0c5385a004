#include "reference/core/process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "reference/core/fd.h"
#include "reference/core/files.h"

extern char** environ;

namespace peerlab::process {

namespace {

// Live children, for the interrupt handlers: plain atomics, so the handlers stay async-signal-safe.
constexpr int kRegistrySlots = 512;
std::atomic<pid_t> g_children[kRegistrySlots];

void registerChild(pid_t pid) {
  for (auto& slot : g_children) {
    pid_t expected = 0;
    if (slot.compare_exchange_strong(expected, pid)) return;
  }
}

void unregisterChild(pid_t pid) {
  for (auto& slot : g_children) {
    pid_t expected = pid;
    if (slot.compare_exchange_strong(expected, 0)) return;
  }
}

void signalChild(pid_t pid, int sig) {
  // A child leading its own group takes its descendants with it; for any other child the group kill finds nothing.
  (void)::kill(-pid, sig);
  (void)::kill(pid, sig);
}

// What tryReap returns for a child that is not ours any more (ECHILD: already reaped elsewhere).
constexpr int kLostStatus = -1;

// Reaps `pid` if it has exited: the raw wait status (kLostStatus when it is gone without one), or nullopt while it
// runs.
std::optional<int> tryReap(pid_t pid) {
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r == 0) return std::nullopt;
    if (errno == EINTR) continue;
    return kLostStatus;
  }
}

// Polls until the child is reaped or `deadline` passes; short naps that grow from 50 us to 5 ms, so a child that
// ends within milliseconds is seen within about as long.
std::optional<int> reapUntil(pid_t pid, Deadline deadline) {
  auto nap = std::chrono::microseconds(50);
  for (;;) {
    if (auto st = tryReap(pid)) return st;
    if (deadline.expired()) return std::nullopt;
    std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(nap, deadline.remaining()));
    nap = std::min(nap * 2, std::chrono::microseconds(5000));
  }
}

constexpr auto kStuckLimit = std::chrono::seconds(30);

void killAllHandler(int sig) {
  for (auto& slot : g_children) {
    const pid_t pid = slot.load();
    if (pid > 0) signalChild(pid, SIGKILL);
  }
  for (auto& slot : g_children) {
    const pid_t pid = slot.exchange(0);
    if (pid <= 0) continue;
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

// This process's environment (none with `clear`) with `changes` applied ("KEY=VALUE" adds or replaces, "KEY"
// removes), in order.
std::vector<std::string> childEnvironment(const std::vector<std::string>& changes, bool clear) {
  std::vector<std::string> order;
  std::map<std::string, std::optional<std::string>> env;
  auto apply = [&](const std::string& kv) {
    const auto eq = kv.find('=');
    const std::string key = kv.substr(0, eq);
    if (!env.count(key)) order.push_back(key);
    env[key] = eq == std::string::npos ? std::nullopt : std::optional<std::string>(kv);
  };
  for (char** e = clear ? nullptr : environ; e && *e; ++e)
    if (std::strchr(*e, '=') != nullptr) apply(*e);
  for (const auto& kv : changes)
    apply(kv);
  std::vector<std::string> out;
  for (const auto& k : order)
    if (env[k]) out.push_back(*env[k]);
  return out;
}

std::vector<char*> cStrings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v)
    out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

StatusOr<Fd> openOutput(const std::string& path) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd) return PEERLAB_INVALID_ARGUMENT(path + ": cannot write: " + std::strerror(errno));
  return fd;
}

// Interrupt scopes: how many are open, the handlers they replaced, and what arrived.
std::mutex g_scope_mu;
int g_scope_users = 0;
struct sigaction g_old_int {};
struct sigaction g_old_term {};
std::atomic<int> g_pending_signal{0};
std::atomic<bool> g_interrupted{false};

void recordInterrupt(int sig) {
  g_pending_signal.store(sig);
  g_interrupted.store(true);
}

}  // namespace

std::string signalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string signalText(int sig) {
  const char* desc = sigdescr_np(sig);
  return signalName(sig) + (desc ? std::string(" (") + desc + ")" : std::string());
}

std::string ExitStatus::describe() const {
  if (exited) return "exited with code " + std::to_string(code);
  if (signal != 0) return "killed by " + signalText(signal) + (core ? ", core dumped" : "");
  if (lost) return "was reaped elsewhere (how it ended is unknown)";
  return "ended";
}

ExitStatus decodeWaitStatus(int status) {
  ExitStatus e;
  if (WIFEXITED(status)) {
    e.exited = true;
    e.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    e.signal = WTERMSIG(status);
    e.core = WCOREDUMP(status);
  }
  return e;
}

void ProcessTraits::destroy(pid_t pid) noexcept {
  if (!tryReap(pid)) {
    signalChild(pid, SIGKILL);
    (void)reapUntil(pid, Deadline::after(kStuckLimit));
  }
  unregisterChild(pid);
}

StatusOr<Child> Child::spawn(const SpawnOptions& options) {
  if (options.argv.empty() || options.argv[0].empty()) return PEERLAB_INVALID_ARGUMENT("spawn: empty argv");
  Fd out, err;
  if (!options.stdout_path.empty()) {
    PEERLAB_ASSIGN_OR_RETURN(out, openOutput(options.stdout_path));
  }
  const bool err_to_out = !options.stderr_path.empty() && options.stderr_path == options.stdout_path;
  if (!options.stderr_path.empty() && !err_to_out) {
    PEERLAB_ASSIGN_OR_RETURN(err, openOutput(options.stderr_path));
  }

  std::vector<std::string> env = childEnvironment(options.env, options.clear_env);
  std::vector<std::string> args = options.argv;
  auto envp = cStrings(env);
  auto argv = cStrings(args);

  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  for (const auto& [from, to] : options.inherit_fds)
    posix_spawn_file_actions_adddup2(&actions, from, to);
  if (options.null_stdin) posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  if (out) {
    posix_spawn_file_actions_adddup2(&actions, out.get(), STDOUT_FILENO);
  } else if (options.null_stdout) {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  }
  if (err) {
    posix_spawn_file_actions_adddup2(&actions, err.get(), STDERR_FILENO);
  } else if (err_to_out) {
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  } else if (options.null_stderr) {
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  }
  if (!options.cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, options.cwd.c_str());
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  if (options.own_process_group) {
    flags |= POSIX_SPAWN_SETPGROUP;
    posix_spawnattr_setpgroup(&attr, 0);
  }
  sigset_t empty, defaults;
  sigemptyset(&empty);
  sigemptyset(&defaults);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD, SIGQUIT, SIGUSR1, SIGUSR2})
    sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, flags);

  pid_t pid = -1;
  const bool search = options.argv[0].find('/') == std::string::npos;
  const int rc = search ? ::posix_spawnp(&pid, argv[0], &actions, &attr, argv.data(), envp.data())
                        : ::posix_spawn(&pid, argv[0], &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    return PEERLAB_UNAVAILABLE("cannot run " + options.argv[0] + ": " + std::strerror(rc));
  }
  return adopt(pid, options.own_process_group);
}

Child Child::adopt(pid_t pid, bool own_process_group) {
  registerChild(pid);
  Child child;
  child.pid_.reset(pid);
  child.own_group_ = own_process_group;
  return child;
}

void Child::signal(int sig) {
  if (!pid_) return;
  if (own_group_) (void)::kill(-pid_.get(), sig);
  (void)::kill(pid_.get(), sig);
}

void Child::killGroupRemnants() {
  if (!pid_ && own_group_ && exited_pid_ > 0) (void)::kill(-exited_pid_, SIGKILL);
}

void Child::reaped(int status) {
  if (status == kLostStatus) {
    exit_ = ExitStatus{};
    exit_->lost = true;
  } else {
    exit_ = decodeWaitStatus(status);
  }
  exited_pid_ = pid_.get();
  unregisterChild(pid_.get());
  (void)pid_.release();
}

bool Child::isAlive() {
  if (!pid_) return false;
  if (auto st = tryReap(pid_.get())) {
    reaped(*st);
    return false;
  }
  return true;
}

StatusOr<ExitStatus> Child::wait(Deadline deadline) {
  if (!pid_) {
    if (exit_) return *exit_;
    return PEERLAB_INVALID_ARGUMENT("wait: no child");
  }
  if (auto st = reapUntil(pid_.get(), deadline)) {
    reaped(*st);
    return *exit_;
  }
  return PEERLAB_TIMEOUT("child " + std::to_string(pid_.get()) + " still running");
}

ExitStatus Child::kill(std::chrono::milliseconds grace) {
  if (!pid_) return exit_.value_or(ExitStatus{});
  if (auto st = tryReap(pid_.get())) {
    reaped(*st);
    return *exit_;
  }
  signal(SIGTERM);
  if (auto st = reapUntil(pid_.get(), Deadline::after(grace))) {
    reaped(*st);
    return *exit_;
  }
  signal(SIGKILL);
  if (auto st = reapUntil(pid_.get(), Deadline::after(kStuckLimit))) {
    reaped(*st);
    return *exit_;
  }
  // Stuck in the kernel past SIGKILL: nothing more can be done from here; init reaps it once it dies.
  ExitStatus stuck;
  stuck.signal = SIGKILL;
  exit_ = stuck;
  exited_pid_ = pid_.get();
  unregisterChild(pid_.get());
  (void)pid_.release();
  return stuck;
}

void installInterruptHandlers() {
  static std::atomic<bool> installed{false};
  if (installed.exchange(true)) return;
  struct sigaction sa {};
  sa.sa_handler = killAllHandler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  for (int sig : {SIGINT, SIGTERM, SIGHUP})
    (void)::sigaction(sig, &sa, nullptr);
}

int liveChildren() {
  int n = 0;
  for (auto& slot : g_children)
    n += slot.load() > 0 ? 1 : 0;
  return n;
}

InterruptScope::InterruptScope() {
  std::lock_guard<std::mutex> lock(g_scope_mu);
  if (g_scope_users++ > 0) return;
  g_pending_signal.store(0);
  struct sigaction sa {};
  sa.sa_handler = recordInterrupt;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
}

InterruptScope::~InterruptScope() {
  std::lock_guard<std::mutex> lock(g_scope_mu);
  if (--g_scope_users > 0) return;
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
}

int InterruptScope::pendingSignal() {
  return g_pending_signal.load();
}

bool interruptRequested() {
  return g_interrupted.load();
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
  SpawnOptions so;
  so.argv = options.argv;
  so.argv[0] = findInPath(options.argv[0]);
  if (so.argv[0].empty()) return PEERLAB_UNAVAILABLE(options.argv[0] + ": not found or not executable");
  so.env = options.env;
  so.clear_env = options.clear_env;
  so.cwd = options.cwd;
  so.stdout_path = options.stdout_path;
  so.stderr_path = options.stderr_path;
  so.own_process_group = true;  // so that the whole tree (ranks included) can be stopped together

  InterruptScope interrupts;
  const auto start = std::chrono::steady_clock::now();
  auto spawned = Child::spawn(so);
  if (!spawned.isOk()) {
    if (spawned.status().code() != StatusCode::kUnavailable) return spawned.status();
    return PEERLAB_UNAVAILABLE(so.argv[0] + ": cannot start: " + spawned.status().message());
  }
  Child child = std::move(*spawned);

  ProcessResult result;
  auto last_tick = start;
  while (child.isAlive()) {
    const auto now = std::chrono::steady_clock::now();
    if (now - start >= options.timeout || interruptRequested()) {
      result.interrupted = interruptRequested();
      result.timed_out = !result.interrupted;
      (void)child.kill(options.kill_grace);
      break;
    }
    if (options.tick && now - last_tick >= std::chrono::milliseconds(200)) {
      options.tick();
      last_tick = now;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Nothing of the child's group outlives it (ranks it started, tools).
  child.killGroupRemnants();
  result.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const ExitStatus e = child.exitStatus().value_or(ExitStatus{});
  if (e.exited) result.exit_code = e.code;
  result.signal = e.signal;
  return result;
}

}  // namespace peerlab::process
