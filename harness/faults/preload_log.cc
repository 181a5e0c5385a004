// The record of what the interposer did: a line on stderr (PEERLAB_FAULTS_VERBOSE) and a JSON line per action in
// PEERLAB_FAULTS_STATS.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include <nlohmann/json.hpp>

#include "harness/faults/preload_internal.h"

namespace peerlab::faults::preload {

std::string format(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return buf;
}

namespace {

int64_t realtimeNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::atomic<int> g_lines{0};
constexpr int kMaxLines = 64;

void writeStats(const char* action, const std::string& detail) {
  const char* path = std::getenv(kEnvStats);
  if (path == nullptr || *path == '\0') return;
  const Config& cfg = config();
  const nlohmann::ordered_json event = {
      {"pid", getpid()},  {"rank", cfg.rank},     {"fault", cfg.spec.name},
      {"action", action}, {"t_ns", realtimeNs()}, {"detail", detail},
  };
  const std::string line = event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  // One write of one short line: appends from several processes do not interleave.
  ssize_t n = write(fd, line.data(), line.size());
  (void)n;
  close(fd);
}

}  // namespace

void announceLoaded(const std::string& detail) {
  std::fprintf(stderr, "peerlab-faults: loaded %s (pid %d, rank %d)\n", detail.c_str(), getpid(), config().rank);
  writeStats("loaded", detail);
}

void note(const char* action, const std::string& detail) {
  const Config& cfg = config();
  if (cfg.verbose) {
    int line = g_lines.fetch_add(1);
    if (line < kMaxLines) {
      std::fprintf(stderr, "peerlab-faults: %s %s (pid %d, rank %d)\n", action, detail.c_str(), getpid(), cfg.rank);
    } else if (line == kMaxLines) {
      std::fprintf(stderr, "peerlab-faults: further actions are not logged (pid %d)\n", getpid());
    }
  }
  writeStats(action, detail);
}

}  // namespace peerlab::faults::preload
