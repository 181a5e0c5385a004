#include "harness/launch/launch.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "reference/core/process.h"

namespace peerlab::launch {

namespace {

std::vector<std::string> rankEnvironment(const LocalOptions& o, int rank, const std::string& dir) {
  std::vector<std::string> env = o.extra_env;
  for (std::string& e : localRankEnvironment(rank, o.ranks, dir))
    env.push_back(std::move(e));
  return env;
}

bool failed(const RankExit& e) {
  return e.timed_out || e.signal != 0 || e.exit_code != 0;
}

}  // namespace

StatusOr<std::vector<RankExit>> runLocal(const LocalOptions& options) {
  if (options.ranks < 1) return PEERLAB_INVALID_ARGUMENT("runLocal: ranks must be >= 1");
  if (options.argv.empty() || options.argv[0].empty()) return PEERLAB_INVALID_ARGUMENT("runLocal: empty argv");
  if (options.timeout.count() <= 0) return PEERLAB_INVALID_ARGUMENT("runLocal: timeout must be > 0");

  std::string program = options.argv[0];
  if (program == "/proc/self/exe") {
    std::error_code ec;
    auto resolved = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) program = resolved.string();
  }

  PEERLAB_ASSIGN_OR_RETURN(const std::string dir, makePrivateDir("peerlab-ranks"));
  int interrupt = 0;
  std::vector<RankExit> exits(static_cast<size_t>(options.ranks));
  Status spawn_error = Status::ok();
  {
    // SIGINT / SIGTERM stop the ranks first; the signal is raised again once every rank is reaped.
    process::InterruptScope interrupts;
    const Deadline deadline = Deadline::after(options.timeout);
    std::vector<process::Child> children(static_cast<size_t>(options.ranks));
    for (int r = 0; r < options.ranks; ++r) {
      exits[static_cast<size_t>(r)].rank = r;
      process::SpawnOptions so;
      so.argv = options.argv;
      so.argv[0] = program;
      so.env = rankEnvironment(options, r, dir);
      so.own_process_group = false;
      if (!options.log_dir.empty()) {
        so.stdout_path = so.stderr_path = options.log_dir + "/rank" + std::to_string(r) + ".log";
      } else if (options.quiet_ranks && r != 0) {
        so.null_stdout = so.null_stderr = true;
      }
      auto child = process::Child::spawn(so);
      if (!child.isOk()) {
        spawn_error = PEERLAB_STATUS(child.status().code(), "runLocal: cannot start rank " + std::to_string(r) + ": " +
                                                                child.status().message());
        break;
      }
      children[static_cast<size_t>(r)] = std::move(*child);
    }

    // Wait for every child; on the first failure, the deadline, an interrupt or a spawn error, stop the rest.
    bool stopping = !spawn_error.isOk();
    bool term_sent = false;
    bool kill_sent = false;
    auto term_time = Deadline::Clock::now();
    while (true) {
      int alive = 0;
      for (int r = 0; r < options.ranks; ++r) {
        process::Child& c = children[static_cast<size_t>(r)];
        RankExit& e = exits[static_cast<size_t>(r)];
        if (c.isAlive()) {
          ++alive;
        } else if (c.exitStatus() && e.exit_code < 0 && e.signal == 0) {
          if (c.exitStatus()->exited) e.exit_code = c.exitStatus()->code;
          e.signal = c.exitStatus()->signal;
          if (failed(e)) stopping = true;
        }
      }
      if (alive == 0) break;
      if (!stopping && process::InterruptScope::pendingSignal() != 0) stopping = true;
      if (!stopping && deadline.expired()) {
        for (int r = 0; r < options.ranks; ++r) {
          if (children[static_cast<size_t>(r)].isAlive()) exits[static_cast<size_t>(r)].timed_out = true;
        }
        stopping = true;
      }
      if (stopping && !term_sent) {
        for (int r = 0; r < options.ranks; ++r) {
          process::Child& c = children[static_cast<size_t>(r)];
          if (c.isAlive()) {
            c.signal(SIGTERM);
            exits[static_cast<size_t>(r)].killed = true;
          }
        }
        term_sent = true;
        term_time = Deadline::Clock::now();
      }
      if (term_sent && !kill_sent && Deadline::Clock::now() - term_time >= options.kill_grace) {
        for (auto& c : children)
          c.signal(SIGKILL);
        kill_sent = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    interrupt = process::InterruptScope::pendingSignal();
  }

  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  // Every rank is reaped by now: let the interrupt do what it would have done.
  if (interrupt != 0) ::raise(interrupt);
  if (!spawn_error.isOk()) return spawn_error;
  return exits;
}

std::string describeExit(const RankExit& e) {
  const std::string who = "rank " + std::to_string(e.rank);
  if (e.timed_out) {
    return who + " timed out" + (e.signal ? " (stopped with " + process::signalName(e.signal) + ")" : std::string());
  }
  if (e.signal != 0) {
    if (e.killed) return who + " stopped by the launcher with " + process::signalName(e.signal);
    return who + " killed by " + process::signalName(e.signal);
  }
  if (e.exit_code < 0) return who + " was never started";
  return who + " exited with code " + std::to_string(e.exit_code);
}

Status summarize(const std::vector<RankExit>& exits) {
  if (exits.empty()) return PEERLAB_INVALID_ARGUMENT("no ranks ran");
  std::vector<const RankExit*> causes, timeouts, stopped;
  for (const RankExit& e : exits) {
    if (!failed(e)) continue;
    if (e.timed_out) {
      timeouts.push_back(&e);
    } else if (e.killed) {
      stopped.push_back(&e);
    } else {
      causes.push_back(&e);
    }
  }
  const size_t bad = causes.size() + timeouts.size() + stopped.size();
  if (bad == 0) return Status::ok();
  std::string msg = std::to_string(bad) + " of " + std::to_string(exits.size()) + " ranks failed: ";
  bool first = true;
  for (const auto* group : {&causes, &timeouts, &stopped}) {
    for (const RankExit* e : *group) {
      msg += (first ? "" : "; ") + describeExit(*e);
      first = false;
    }
  }
  return PEERLAB_STATUS(timeouts.empty() ? StatusCode::kInternal : StatusCode::kTimeout, msg);
}

bool launchedByMpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) {
    const char* s = std::getenv(v);
    if (s != nullptr && *s != '\0') return true;
  }
  return false;
}

bool launchedAsRank() {
  const char* r = std::getenv(kEnvRank);
  return (r != nullptr && *r != '\0') || launchedByMpi();
}

StatusOr<std::unique_ptr<Bootstrap>> bootstrapFromEnvironment(Deadline deadline) {
  const char* b = std::getenv(kEnvBootstrap);
  if (b != nullptr && *b != '\0') {
    const std::string v(b);
    if (v.rfind("local:", 0) == 0) return connectLocalFromEnvironment(deadline);
    if (v == "mpi") return connectMpi(deadline);
    return PEERLAB_INVALID_ARGUMENT(std::string(kEnvBootstrap) + "='" + v + "' is neither local:<dir> nor mpi");
  }
  if (launchedByMpi()) return connectMpi(deadline);
  return singleRankBootstrap();
}

#ifndef PEERLAB_HAVE_MPI
StatusOr<std::unique_ptr<Bootstrap>> connectMpi(Deadline) {
  return PEERLAB_UNAVAILABLE("this process was started by an MPI launcher, but peerlab was built without MPI");
}
#endif

}  // namespace peerlab::launch
