#pragma once
/// The local bootstrap: the ranks of one host connected by a mesh of Unix domain sockets, and the single-rank
/// bootstrap of a process that runs alone. A launcher starts each rank with the environment localRankEnvironment
/// returns; the rank connects with connectLocalFromEnvironment.

#include <memory>
#include <string>
#include <vector>

#include "reference/core/bootstrap.h"
#include "reference/core/deadline.h"
#include "reference/core/files.h"
#include "reference/core/status.h"

namespace peerlab {

/// Environment a local rank is started with.
inline constexpr const char* kEnvRank = "PEERLAB_RANK";
inline constexpr const char* kEnvSize = "PEERLAB_SIZE";
inline constexpr const char* kEnvBootstrap = "PEERLAB_BOOTSTRAP";  ///< "local:<socket directory>" or "mpi"
/// Pid of the process that started the ranks: a local rank asks to be killed (SIGTERM) when that process dies.
inline constexpr const char* kEnvLauncherPid = "PEERLAB_LAUNCHER_PID";

/// Local bootstrap: rank `rank` of `size` over Unix domain sockets in `dir` (each rank listens on <dir>/r<rank>).
/// Every call fails, naming the rank, once a peer aborted or died (EOF or reset without a goodbye).
/// Point-to-point, fd and collective calls may come from several threads; collectives from one thread at a time.
StatusOr<std::unique_ptr<Bootstrap>> connectLocal(int rank, int size, const std::string& dir, Deadline deadline);
/// The bootstrap of a process that runs alone: rank 0 of 1 (kind "local"); sends to itself are queued.
std::unique_ptr<Bootstrap> singleRankBootstrap();

/// "KEY=VALUE" entries that make a child rank `rank` of `size` of the local bootstrap in socket directory `dir`,
/// launched by this process.
std::vector<std::string> localRankEnvironment(int rank, int size, const std::string& dir);
/// True when PEERLAB_BOOTSTRAP is set (this process was started as a rank).
bool localBootstrapRequested();
/// Connects the bootstrap PEERLAB_BOOTSTRAP=local:<dir>, PEERLAB_RANK and PEERLAB_SIZE describe; `invalid_argument`
/// naming the variable when one is missing or malformed (PEERLAB_BOOTSTRAP=mpi included: that is the launcher's).
StatusOr<std::unique_ptr<Bootstrap>> connectLocalFromEnvironment(Deadline deadline);

}  // namespace peerlab
