#include "harness/slurm/log.h"

#include <fcntl.h>
#include <syslog.h>
#include <unistd.h>

#include <ctime>

#include "harness/report/report.h"
#include "reference/core/text.h"

namespace peerlab::slurm {

Log::Log(std::string who, std::string file, bool syslog)
    : who_(std::move(who)), file_(std::move(file)), syslog_(syslog) {}

void Log::line(const std::string& node, const std::string& message) {
  const std::string text = printable(redactSecrets(message), 2000);
  const std::string stamp = report::utcTimestamp();
  const std::string where = node.empty() ? "" : " [" + printable(node, 64) + "]";
  const std::string line = stamp + " peerlab-slurm " + who_ + where + " " + text + "\n";
  if (stderr_) {
    std::fputs(line.c_str(), stderr);
    std::fflush(stderr);
  }
  if (!file_.empty()) {
    // One write of the whole line, appended: lines of several processes do not interleave.
    const int fd = ::open(file_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0640);
    if (fd >= 0) {
      (void)!::write(fd, line.data(), line.size());
      ::close(fd);
    }
  }
  if (syslog_) ::syslog(LOG_NOTICE | LOG_DAEMON, "peerlab-slurm %s%s %s", who_.c_str(), where.c_str(), text.c_str());
}

}  // namespace peerlab::slurm
