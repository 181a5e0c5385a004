#pragma once
/// The `peerlab` command line: each subcommand lives in its own cmd_<name>.cc and registers itself here.

#include <CLI/CLI.hpp>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "harness/report/level.h"
#include "reference/core/status.h"

namespace peerlab::cli {

/// Exit codes, documented in README.md. Every command uses these and nothing else.
enum ExitCode : int {
  kExitOk = 0,           ///< success; every check passed
  kExitCheckFailed = 1,  ///< a verification or check failed (probe claimed-yes cell failed, qualify FAIL, regression)
  kExitUsage = 2,        ///< usage error or bad input (missing, unreadable or malformed file; bad option value)
  kExitNoGpu = 3,        ///< no NVIDIA GPU in the topology or on this machine
  kExitRuntime = 4,      ///< a CUDA, NCCL or internal error stopped the command
  kExitNothingChecked = 5,  ///< the verdict is EMPTY: zero checks (nothing in the run any check applies to)
};

/// Configures `sub` (options, flags) and returns the function that runs the command and gives its exit code.
using CommandSetup = std::function<std::function<int()>(CLI::App& sub)>;

struct CommandInfo {
  std::string name;
  std::string description;
  CommandSetup setup;
};

/// All registered commands, in registration order.
std::vector<CommandInfo>& commands();

/// Registers a command at static-initialization time (cmd_*.cc files are linked directly into the binary).
struct CommandRegistrar {
  CommandRegistrar(std::string name, std::string description, CommandSetup setup);
};

/// Prints "peerlab <command>: <message>" as one line on stderr and returns `code`. The message is made safe to print:
/// newlines become spaces, control characters are escaped (peerlab::printable) and passwords in URLs are redacted.
int fail(const std::string& command, int code, const std::string& message);

/// Writes an output file the one way every command does: "-" is stdout; anything else goes through
/// peerlab::writeTextFile (a temporary renamed into place, parent directories created). The message on failure is
/// "cannot write PATH: <reason>".
Status writeOutput(const std::string& path, const std::string& text);

/// Where a command prints its human-readable lines: stderr when `json_path` is "-" (stdout then holds exactly one
/// JSON document), else stdout.
FILE* summaryStream(const std::string& json_path);

/// An option's number, checked here so that a bad value gets a readable message: "--z \"abc\": expected a number
/// from 0.5 to 100". `integer`: whole numbers only.
StatusOr<double> parseNumberOption(const std::string& option, const std::string& text, double min, double max,
                                   bool integer = false);

/// The level options every command that measures takes, parsed the one way (report::chooseLevel): `--level NAME`,
/// `--quick` and `--full`. `what` says what each level runs for this command.
void addLevelOptions(CLI::App& sub, report::LevelFlags& flags, const std::string& what);

}  // namespace peerlab::cli

#define PEERLAB_REGISTER_COMMAND(ident, name, description, setup) \
  static ::peerlab::cli::CommandRegistrar peerlab_command_##ident(name, description, setup)
