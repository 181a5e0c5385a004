#pragma once
/// Starting ranks and connecting them: one Bootstrap interface (reference/core/bootstrap.h), two implementations
/// chosen at run time: local (peerlab starts N ranks on this host, reference/core/local_bootstrap.h) and MPI
/// (mpirun -np N).

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "reference/core/bootstrap.h"
#include "reference/core/deadline.h"
#include "reference/core/local_bootstrap.h"
#include "reference/core/status.h"

namespace peerlab::launch {

struct LocalOptions {
  int ranks = 2;
  std::vector<std::string> argv;       ///< program and arguments; argv[0] may be "/proc/self/exe"
  std::vector<std::string> extra_env;  ///< "KEY=VALUE" added to (or replacing in) the parent's environment
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  ///< whole-job deadline
  bool quiet_ranks = false;                                    ///< ranks other than 0 write stdout/stderr to /dev/null
  std::string log_dir;  ///< when set: rank r writes stdout and stderr to <log_dir>/rank<r>.log
  std::chrono::milliseconds kill_grace{std::chrono::seconds(3)};  ///< SIGTERM to SIGKILL when stopping ranks
};

struct RankExit {
  int rank = -1;
  int exit_code = -1;  ///< valid when the rank exited
  int signal = 0;      ///< nonzero when it was killed by a signal
  bool timed_out = false;
  bool killed = false;  ///< stopped by runLocal (another rank failed, the deadline passed, or an interrupt)
};

/// Starts `ranks` copies of argv with PEERLAB_RANK / PEERLAB_SIZE / PEERLAB_BOOTSTRAP set, waits until all exit or
/// the deadline passes; when one rank fails or time runs out, the others are killed (SIGTERM, then SIGKILL). Every
/// child is reaped before this returns. Returns one RankExit per rank.
/// The socket directory is a fresh private directory under $TMPDIR, removed before this returns. While it runs,
/// SIGINT and SIGTERM of this process stop the ranks first and are then re-raised, so ^C leaves no rank behind.
StatusOr<std::vector<RankExit>> runLocal(const LocalOptions& options);

/// ok when every rank exited 0; otherwise one line naming the ranks that failed and how.
Status summarize(const std::vector<RankExit>& exits);
/// "rank 2 exited with code 1", "rank 0 killed by SIGTERM (stopped by the launcher)", "rank 1 timed out".
std::string describeExit(const RankExit& exit);

/// True in a process started by runLocal or by mpirun.
bool launchedAsRank();
/// True in a process started by an MPI launcher (OpenMPI, MPICH/Hydra, PMIx) without PEERLAB_BOOTSTRAP.
bool launchedByMpi();

/// The bootstrap for this process: local when PEERLAB_BOOTSTRAP is set, MPI when started by mpirun (and built with
/// MPI), otherwise a single-rank bootstrap (rank 0 of 1). Connecting has a deadline.
StatusOr<std::unique_ptr<Bootstrap>> bootstrapFromEnvironment(Deadline deadline);

/// MPI bootstrap over a duplicate of MPI_COMM_WORLD (MPI is initialized on first use and finalized at exit).
/// File descriptors pass between ranks of one host over side Unix sockets; across hosts `unavailable`. Sends are
/// buffered (they return once the message is handed to MPI); every wait polls MPI_Test until its deadline.
/// `unavailable` when peerlab was built without MPI.
StatusOr<std::unique_ptr<Bootstrap>> connectMpi(Deadline deadline);

}  // namespace peerlab::launch
