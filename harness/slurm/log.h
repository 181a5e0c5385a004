#pragma once
/// The log of `peerlab slurm`: one line per event, with time, command and node, on stderr, in the settings' log file
/// and in syslog (tag peerlab-slurm). Text from Slurm or jobs goes through printable() and the password rule.

#include <cstdio>
#include <string>

namespace peerlab::slurm {

class Log {
 public:
  /// `who`: "healthcheck", "gate", "sweep", "recover", "job"; `file`: "" for none; `syslog`: also to syslog.
  Log(std::string who, std::string file = "", bool syslog = true);
  /// "2026-12-01T23:26:13Z peerlab-slurm sweep [node3] message"
  void line(const std::string& node, const std::string& message);
  void line(const std::string& message) { line("", message); }
  /// The file the log goes to ("" for none).
  const std::string& file() const { return file_; }
  void setFile(const std::string& file) { file_ = file; }
  /// Lines go to stderr too (default); off for the simulation.
  void setStderr(bool on) { stderr_ = on; }

 private:
  std::string who_;
  std::string file_;
  bool syslog_;
  bool stderr_ = true;
};

}  // namespace peerlab::slurm
