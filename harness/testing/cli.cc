#include "harness/testing/cli.h"

#include <unistd.h>

#include <filesystem>

#include "reference/core/process.h"
#include "reference/testing/temp_dir.h"

namespace peerlab::testing {

CliRun runCommand(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                  std::chrono::milliseconds timeout, std::chrono::milliseconds kill_grace) {
  CliRun r;
  TempDir io("peerlab-cli");
  process::ProcessOptions o;
  o.argv = argv;
  o.env = env;
  o.stdout_path = io.file("out");
  o.stderr_path = io.file("err");
  o.timeout = timeout;
  o.kill_grace = kill_grace;
  auto result = process::runProcess(o);
  if (!result.isOk()) {
    r.err = result.status().toString();
    return r;
  }
  if (result->signal == 0 && !result->timed_out && !result->interrupted) r.exit_code = result->exit_code;
  r.signal = result->signal;
  r.timed_out = result->timed_out;
  r.out = readFile(io.file("out"));
  r.err = readFile(io.file("err"));
  if (result->timed_out) r.err += "\n(" + process::describeExit(*result, o.timeout) + ")";
  return r;
}

std::string scratchDir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("peerlab-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}

int lineCount(const std::string& text) {
  int n = 0;
  for (char c : text)
    n += c == '\n';
  if (!text.empty() && text.back() != '\n') ++n;
  return n;
}

}  // namespace peerlab::testing
