#pragma once
/// How much a run measures: the one level type, its one parser and the one set of rules that turns command-line
/// flags into a level. qualify, bench, the Slurm commands and every reader of a run file (the plan's "level", or the
/// "mode" of files written before levels) go through here and carry a Level after that.

#include <optional>
#include <string>
#include <string_view>

#include "reference/core/status.h"

namespace peerlab::report {

/// quick (seconds: a pre-job gate), standard (every check family, the default), full (every size of every sweep).
enum class Level { kQuick = 0, kStandard = 1, kFull = 2 };
inline constexpr int kLevels = 3;

/// "quick", "standard" or "full".
std::string_view levelName(Level level);
/// "quick", "standard" or "full"; nullopt for anything else (case matters: the names are written as they are read).
std::optional<Level> parseLevel(std::string_view name);
/// "quick, standard, full"
std::string levelNames();

/// A level as a command line asks for it: `--level NAME` and the shorthands `--quick` and `--full`.
struct LevelFlags {
  std::string level;  ///< --level, "" when not given
  bool quick = false;
  bool full = false;
};

/// The level the flags ask for, `fallback` when none does. Flags that name the same level agree (`--full --level
/// full`); two different levels are refused. `invalid_argument`: "--level fast: unknown level (known: quick, standard,
/// full)", "--quick and --level full name different levels".
StatusOr<Level> chooseLevel(const LevelFlags& flags, Level fallback = Level::kStandard);

/// The level a stored plan records: "level", or for plans written before levels, "mode" ("quick" was then the default
/// sweep, today's standard; "full" is full). `invalid_argument` names the field and the value.
StatusOr<Level> levelOfRecord(const std::optional<std::string>& level, const std::optional<std::string>& mode);

}  // namespace peerlab::report
