#include "harness/report/level.h"

#include <vector>

namespace peerlab::report {

std::string_view levelName(Level level) {
  switch (level) {
    case Level::kQuick:
      return "quick";
    case Level::kStandard:
      return "standard";
    case Level::kFull:
      return "full";
  }
  return "standard";
}

std::optional<Level> parseLevel(std::string_view name) {
  for (Level l : {Level::kQuick, Level::kStandard, Level::kFull}) {
    if (levelName(l) == name) return l;
  }
  return std::nullopt;
}

std::string levelNames() {
  return "quick, standard, full";
}

StatusOr<Level> chooseLevel(const LevelFlags& flags, Level fallback) {
  // Each flag given, with the level it names.
  std::vector<std::pair<std::string, Level>> asked;
  if (!flags.level.empty()) {
    const std::optional<Level> l = parseLevel(flags.level);
    if (!l) {
      return PEERLAB_INVALID_ARGUMENT("--level " + flags.level + ": unknown level (known: " + levelNames() + ")");
    }
    asked.emplace_back("--level " + flags.level, *l);
  }
  if (flags.quick) asked.emplace_back("--quick", Level::kQuick);
  if (flags.full) asked.emplace_back("--full", Level::kFull);
  if (asked.empty()) return fallback;
  for (const auto& [flag, level] : asked) {
    if (level != asked.front().second) {
      return PEERLAB_INVALID_ARGUMENT(asked.front().first + " and " + flag + " name different levels");
    }
  }
  return asked.front().second;
}

StatusOr<Level> levelOfRecord(const std::optional<std::string>& level, const std::optional<std::string>& mode) {
  if (level) {
    if (const std::optional<Level> l = parseLevel(*level)) return *l;
    return PEERLAB_INVALID_ARGUMENT("level \"" + *level + "\" is not one of " + levelNames());
  }
  if (mode) {
    if (*mode == "quick") return Level::kStandard;
    if (*mode == "full") return Level::kFull;
    return PEERLAB_INVALID_ARGUMENT("mode \"" + *mode + "\" is not one of quick, full");
  }
  return Level::kStandard;
}

}  // namespace peerlab::report
