#pragma once
/// What `peerlab inject` does before it runs a command: find the interposer, build the environment, apply the
/// file faults (cache_corrupt, cache_stale) to the probe cache.

#include <string>
#include <utility>
#include <vector>

#include "harness/faults/fault_spec.h"
#include "reference/core/status.h"

namespace peerlab::faults {

/// libpeerlab_faults.so: $PEERLAB_FAULTS_LIB, else in the lib/ directory of the tree `self_exe` is in (build or
/// installed, harness/layout/layout.h), else beside it. `invalid_argument` naming the places looked at when none
/// exists.
StatusOr<std::string> interposerPath(const std::string& self_exe);

/// `existing` with `lib` appended (':'-separated, no duplicate). An empty `existing` gives `lib`.
std::string appendPreload(const std::string& existing, const std::string& lib);

struct InjectOptions {
  FaultSpec spec;
  std::string interposer;  ///< absolute path of libpeerlab_faults.so ("" when the fault needs none)
  bool verbose = false;    ///< PEERLAB_FAULTS_VERBOSE=1
  std::string stats;       ///< PEERLAB_FAULTS_STATS
};

/// KEY=VALUE pairs to set for the command: PEERLAB_FAULT, LD_PRELOAD (appended to `current_preload`), and the
/// verbosity and stats variables when asked for.
std::vector<std::pair<std::string, std::string>> injectEnvironment(const InjectOptions& options,
                                                                   const std::string& current_preload);

/// Damages or ages the probe cache at `path` for cache_corrupt / cache_stale, deterministically for the spec's
/// seed. Returns a one-line description of what was done. A missing file is `invalid_argument`.
StatusOr<std::string> applyCacheFault(const FaultSpec& spec, const std::string& path);

/// The cache path a cache fault applies to: the spec's path=, else `default_path`.
std::string cachePathFor(const FaultSpec& spec, const std::string& default_path);

}  // namespace peerlab::faults
