#include "harness/slurm/journal.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include "harness/report/report.h"
#include "reference/core/text.h"

namespace peerlab::slurm {
namespace {

bool isDrainFact(const std::string& step) {
  return step == "drained" || step == "resumed" || step == "resumed_for_job";
}

std::string hostName() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) return "unknown";
  return host;
}

// Field 22 of /proc/<pid>/stat: when the process started, in clock ticks since boot ("" when it is not running).
std::string startTicks(long pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string all;
  if (!std::getline(f, all)) return "";
  const size_t close = all.rfind(')');
  if (close == std::string::npos) return "";
  std::istringstream rest(all.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i == 22) return field;
  }
  return "";
}

std::optional<long long> seconds(const std::string& utc) {
  return report::parseIsoTimestamp(utc);
}

nlohmann::json toJson(const history::JournalEntry& e) {
  return {{"sweep", e.sweep},
          {"node", e.node},
          {"step", e.step},
          {"job", e.job},
          {"reason", e.reason},
          {"detail", e.detail},
          {"recorded_at", e.recorded_at},
          {"source", e.source}};
}

std::string str(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}

}  // namespace

bool ownsDrain(const std::vector<history::JournalEntry>& journal, const std::string& slurm_reason) {
  for (auto it = journal.rbegin(); it != journal.rend(); ++it) {
    if (!isDrainFact(it->step)) continue;
    return it->step == "drained" && it->reason == slurm_reason && !slurm_reason.empty();
  }
  return false;
}

std::string holderId(double poll_s) {
  const long pid = static_cast<long>(::getpid());
  char poll[32];
  std::snprintf(poll, sizeof poll, "%g", poll_s);
  return hostName() + " " + std::to_string(pid) + " " + startTicks(pid) + " " + poll;
}

bool holderGone(const history::Claim& c, const std::string& now_utc) {
  std::istringstream in(c.holder);
  std::string host, start;
  long pid = 0;
  double poll = 30;
  in >> host >> pid >> start >> poll;
  if (host == hostName() && pid > 0) {
    // This host: the process itself says.
    const std::string now = startTicks(pid);
    return now.empty() || now != start;
  }
  const auto beat = seconds(c.heartbeat_at), now = seconds(now_utc);
  if (!beat || !now) return true;
  return *now - *beat > static_cast<long long>(3 * poll + 60);
}

Recorder::Recorder(history::HistoryStore* store, std::string spool_dir, std::string source, Log& log)
    : store_(store), spool_dir_(std::move(spool_dir)), source_(std::move(source)), log_(log) {
  if (!store_) {
    lost_ = true;
    lost_reason_ = "no history configured";
  }
}

void Recorder::lose(const Status& why) {
  if (lost_) return;
  lost_ = true;
  lost_reason_ = why.message();
  log_.line("the history stopped answering (" + why.message() + "): what follows is spooled in " +
            (spool_dir_.empty() ? std::string("nowhere (no spool directory)") : spool_dir_));
}

Status Recorder::spool(const nlohmann::json& record) {
  if (spool_dir_.empty()) return PEERLAB_UNAVAILABLE("no spool directory");
  if (spool_file_.empty()) {
    if (::mkdir(spool_dir_.c_str(), 0700) != 0 && errno != EEXIST) {
      return PEERLAB_UNAVAILABLE("spool " + spool_dir_ + ": " + std::strerror(errno));
    }
    std::time_t t = std::time(nullptr);
    char stamp[32];
    std::tm tm{};
    gmtime_r(&t, &tm);
    std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%S", &tm);
    spool_file_ =
        spool_dir_ + "/" + stamp + "-" + source_ + "-" + hostName() + "-" + std::to_string(::getpid()) + ".jsonl";
  }
  const std::string line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  const int fd = ::open(spool_file_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return PEERLAB_UNAVAILABLE("spool " + spool_file_ + ": " + std::strerror(errno));
  const bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) && ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) return PEERLAB_UNAVAILABLE("spool " + spool_file_ + ": " + std::strerror(err));
  return Status::ok();
}

Status Recorder::record(history::JournalEntry e) {
  if (e.source.empty()) e.source = source_;
  if (e.recorded_at.empty()) e.recorded_at = report::utcTimestamp();
  if (!lost_) {
    auto id = store_->appendJournal(e);
    if (id.isOk()) return Status::ok();
    if (id.status().code() == StatusCode::kInvalidArgument &&
        id.status().message().find("journal") != std::string::npos)
      return id.status();
    lose(id.status());
  }
  spooled_.push_back(e);
  return spool({{"journal", toJson(e)}});
}

StatusOr<std::int64_t> Recorder::ingest(const std::string& run_file, const std::string& kind) {
  auto run = report::readRun(run_file);
  if (!run.isOk()) return run.status();
  if (!lost_) {
    history::IngestOptions o;
    o.kind = kind;
    o.source = run_file.substr(run_file.rfind('/') == std::string::npos ? 0 : run_file.rfind('/') + 1);
    auto out = store_->ingest(*run, o);
    if (out.isOk()) return out->run_id;
    if (out.status().code() == StatusCode::kInvalidArgument &&
        out.status().message().find("nests deeper") != std::string::npos) {
      return out.status();
    }
    lose(out.status());
  }
  PEERLAB_RETURN_IF_ERROR(spool({{"ingest", {{"file", run_file}, {"kind", kind}}}}));
  ++spooled_bundles_;
  return 0;
}

Status Recorder::recordState(const history::NodeState& s) {
  if (!lost_) {
    Status st = store_->recordNodeState(s);
    if (st.isOk() || st.code() == StatusCode::kInvalidArgument) return st;
    lose(st);
  }
  return spool({{"state", {{"node", s.node}, {"state", s.state}, {"reason", s.reason}, {"source", s.source}}}});
}

std::vector<history::JournalEntry> Recorder::nodeJournal(const std::string& node) {
  std::vector<history::JournalEntry> out;
  if (!lost_) {
    auto j = store_->journal(node);
    if (j.isOk()) {
      out = std::move(*j);
    } else {
      lose(j.status());
    }
  }
  for (const history::JournalEntry& e : spooled_)
    if (e.node == node) out.push_back(e);
  return out;
}

StatusOr<int> replaySpool(const std::string& dir, history::HistoryStore& store, Log& log) {
  int ingested = 0;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;
  std::vector<std::string> files;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() > 6 && name.compare(name.size() - 6, 6, ".jsonl") == 0) files.push_back(name);
  }
  ::closedir(d);
  std::sort(files.begin(), files.end());
  struct stat ds {};
  if (::stat(dir.c_str(), &ds) != 0) return 0;
  for (const std::string& name : files) {
    const std::string path = dir + "/" + name;
    struct stat st {};
    // A spool entry can say that peerlab drained a node: only this user's own files, in a directory no one else can
    // write to, are believed.
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() ||
        (st.st_mode & (S_IWGRP | S_IWOTH)) || ds.st_uid != ::geteuid() || (ds.st_mode & (S_IWGRP | S_IWOTH))) {
      log.line("spool file " + path + " left alone: not this user's own, or writable by others");
      continue;
    }
    std::ifstream in(path);
    std::string line;
    int lineNo = 0;
    Status failed = Status::ok();
    while (failed.isOk() && std::getline(in, line)) {
      ++lineNo;
      if (line.empty()) continue;
      // A torn last line (killed while writing) is the end of the file.
      auto doc = nlohmann::json::parse(line, nullptr, false);
      if (doc.is_discarded() || !doc.is_object()) continue;
      if (doc.contains("journal")) {
        const nlohmann::json& j = doc["journal"];
        history::JournalEntry e{0,
                                str(j, "sweep"),
                                str(j, "node"),
                                str(j, "step"),
                                str(j, "job"),
                                str(j, "reason"),
                                str(j, "detail"),
                                str(j, "recorded_at"),
                                str(j, "source")};
        auto id = store.appendJournal(e);
        if (!id.isOk() && id.status().code() != StatusCode::kInvalidArgument) failed = id.status();
        // The claim a sweep could not release while the history was away.
        if (id.isOk() && e.step == "done" && !e.sweep.empty()) store.releaseClaims(e.sweep, {e.node}).ignore();
      } else if (doc.contains("state")) {
        const nlohmann::json& j = doc["state"];
        Status st = store.recordNodeState({str(j, "node"), str(j, "state"), str(j, "reason"), "", str(j, "source")});
        if (!st.isOk() && st.code() != StatusCode::kInvalidArgument) failed = st;
      } else if (doc.contains("ingest")) {
        const std::string file = str(doc["ingest"], "file");
        auto run = report::readRun(file);
        if (!run.isOk()) {
          log.line("spooled bundle " + file + " not ingested: " + run.status().message());
          continue;
        }
        history::IngestOptions o;
        o.kind = str(doc["ingest"], "kind");
        o.source = file.substr(file.rfind('/') == std::string::npos ? 0 : file.rfind('/') + 1);
        auto out = store.ingest(*run, o);
        if (out.isOk()) {
          ++ingested;
        } else if (out.status().code() != StatusCode::kInvalidArgument) {
          failed = out.status();
        } else {
          log.line("spooled bundle " + file + " refused by the history: " + out.status().message());
        }
      }
    }
    if (!failed.isOk()) return failed;
    ::unlink(path.c_str());
    log.line("replayed spool file " + path + " into the history (" + std::to_string(lineNo) + " records)");
  }
  return ingested;
}

}  // namespace peerlab::slurm
