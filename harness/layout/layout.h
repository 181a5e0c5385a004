#pragma once
/// Where peerlab's own files are, found relative to the running executable (/proc/self/exe), never from paths
/// compiled in: a build tree keeps the programs in bin/, libraries in lib/ and data in share/peerlab/; an installed
/// tree (`cmake --install`, moved anywhere) has bin/peerlab, the benchmarks and helpers in libexec/peerlab/, the
/// fault interposer in lib/ and share/peerlab/ (qualify.toml, Chart.js). The relative directories come from
/// GNUInstallDirs at configure time.

#include <string>
#include <vector>

namespace peerlab::layout {

/// Directories a helper executable (a benchmark) is looked up in, in order, for a program at `self_exe` (default:
/// this process): <exe dir>/<bin to libexec/peerlab> (installed), then <exe dir> (build tree). Absolute, normalized,
/// without duplicates; they need not exist.
std::vector<std::string> executableDirs(const std::string& self_exe = "");
/// Directories of peerlab's libraries (the fault interposer): <exe dir>/<bin to lib>, <exe dir>/../lib, <exe dir>.
std::vector<std::string> libraryDirs(const std::string& self_exe = "");
/// Directories of peerlab's data (qualify.toml, chart.min.js): <exe dir>/<bin to share/peerlab>.
std::vector<std::string> dataDirs(const std::string& self_exe = "");

/// The first `dirs[i]/name` that is an executable regular file, "" when none is.
std::string findExecutable(const std::string& name, const std::vector<std::string>& dirs);
/// The first `dirs[i]/name` that is a regular file, "" when none is.
std::string findFile(const std::string& name, const std::vector<std::string>& dirs);

/// The `peerlab` binary for a helper that runs it (probe_bench's workers): beside the helper (build tree) or in
/// <libexec to bin> (installed); "" when neither holds it.
std::string peerlabBinary(const std::string& self_exe = "");

/// The build tree a program runs from (the directory above its bin/ holding CMakeCache.txt), "" when installed.
std::string buildTree(const std::string& self_exe = "");
/// What builds every executable qualify runs: "cmake --build <build tree> --target peerlab_qualify", or with
/// "<build dir>" when the program is not in a build tree.
std::string buildCommand(const std::string& self_exe = "");

/// The name of the target that builds everything `peerlab qualify` and `peerlab bench` can run.
inline constexpr const char* kQualifyTarget = "peerlab_qualify";

}  // namespace peerlab::layout
