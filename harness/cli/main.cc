#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>

#include "harness/cli/command.h"
#include "reference/core/files.h"
#include "reference/core/text.h"

namespace peerlab::cli {

std::vector<CommandInfo>& commands() {
  static std::vector<CommandInfo> all;
  return all;
}

CommandRegistrar::CommandRegistrar(std::string name, std::string description, CommandSetup setup) {
  commands().push_back({std::move(name), std::move(description), std::move(setup)});
}

int fail(const std::string& command, int code, const std::string& message) {
  std::string line = message;
  for (char& c : line) {
    if (c == '\n') c = ' ';
  }
  std::fflush(stdout);
  std::fprintf(stderr, "peerlab %s: %s\n", command.c_str(), printable(redactSecrets(line)).c_str());
  return code;
}

Status writeOutput(const std::string& path, const std::string& text) {
  if (path != "-") return writeTextFile(path, text);
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0) {
    return PEERLAB_INVALID_ARGUMENT(std::string("cannot write stdout: ") + std::strerror(errno));
  }
  return Status::ok();
}

FILE* summaryStream(const std::string& json_path) {
  return json_path == "-" ? stderr : stdout;
}

void addLevelOptions(CLI::App& sub, report::LevelFlags& flags, const std::string& what) {
  sub.add_option("--level", flags.level, what);
  sub.add_flag("--quick", flags.quick, "The same as --level quick");
  sub.add_flag("--full", flags.full, "The same as --level full");
}

StatusOr<double> parseNumberOption(const std::string& option, const std::string& text, double min, double max,
                                   bool integer) {
  auto range = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", v);
    return std::string(buf);
  };
  const std::string expected =
      std::string(integer ? "a whole number" : "a number") + " from " + range(min) + " to " + range(max);
  char* end = nullptr;
  errno = 0;
  const double v = text.empty() ? NAN : std::strtod(text.c_str(), &end);
  const bool whole = end != nullptr && *end == '\0';
  if (!whole || errno == ERANGE || !std::isfinite(v) || v < min || v > max || (integer && v != std::floor(v))) {
    return PEERLAB_INVALID_ARGUMENT(option + " \"" + printable(text, 40) + "\": expected " + expected);
  }
  return v;
}

// CLI11's range checks print their bounds with %f: the largest double becomes 309 digits. Numbers longer than 15
// digits are shown as %g ("1.79769e+308").
std::string readableNumbers(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    size_t j = i;
    while (j < text.size() && (std::isdigit(static_cast<unsigned char>(text[j])) || text[j] == '.'))
      ++j;
    if (j - i > 15 && std::isdigit(static_cast<unsigned char>(text[i]))) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%g", std::strtod(text.substr(i, j - i).c_str(), nullptr));
      out += buf;
    } else {
      out.append(text, i, std::max<size_t>(j - i, 1));
    }
    i = std::max(j, i + 1);
  }
  return out;
}

}  // namespace peerlab::cli

int main(int argc, char** argv) {
  using namespace peerlab::cli;
  // Multicast stays off for everything peerlab starts.
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", 0);
  setenv("NVSHMEM_DISABLE_NVLS", "1", 0);

  CLI::App app{"peerlab: verify and benchmark GPU peer-to-peer primitives", "peerlab"};
  app.set_version_flag("--version", std::string("peerlab ") + PEERLAB_VERSION);
  app.require_subcommand(1);
  std::map<CLI::App*, std::function<int()>> runners;
  for (auto& cmd : commands()) {
    CLI::App* sub = app.add_subcommand(cmd.name, cmd.description);
    runners[sub] = cmd.setup(*sub);
  }
  // A first word that is no command is a typo: say so and list the commands (CLI11 would say "A subcommand is
  // required" or list the word as an unexpected argument).
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    std::string names;
    for (auto& cmd : commands()) {
      known = known || cmd.name == argv[1];
      if (!app.get_subcommand(cmd.name)->get_group().empty()) names += (names.empty() ? "" : ", ") + cmd.name;
    }
    if (!known) {
      return fail("usage", kExitUsage,
                  std::string("unknown command ") + peerlab::printable(argv[1], 60) + " (known: " + names + ")");
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string where = "usage";
    for (CLI::App* sub : app.get_subcommands())
      where = sub->get_name();
    return fail(where, kExitUsage, readableNumbers(e.what()) + " (see peerlab --help)");
  }
  for (CLI::App* sub : app.get_subcommands()) {
    auto it = runners.find(sub);
    if (it == runners.end()) continue;
    const int rc = it->second();
    // What went to stdout is an output like any file: a write that failed (a full disk, `> /dev/full`, a closed
    // pipe) is an error, never a success.
    errno = 0;
    const bool flushed = std::fflush(stdout) == 0;
    if (!flushed || std::ferror(stdout)) {
      const std::string why = !flushed && errno != 0 ? std::strerror(errno) : "a write failed";
      const int code = fail(sub->get_name(), kExitRuntime, "cannot write stdout: " + why);
      return rc == kExitOk || rc == kExitCheckFailed ? code : rc;
    }
    return rc;
  }
  return fail("usage", kExitUsage, "no command given (see peerlab --help)");
}
