#include "harness/slurm/sweep.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <random>
#include <set>
#include <thread>

#include "harness/history/analysis.h"
#include "harness/report/report.h"
#include "reference/core/files.h"
#include "reference/core/process.h"
#include "reference/core/text.h"

namespace peerlab::slurm {
namespace {

class RealClock final : public Clock {
 public:
  double now() override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  void sleep(double seconds) override {
    const double until = now() + seconds;
    while (now() < until && !interrupted())
      std::this_thread::sleep_for(
          std::chrono::milliseconds(std::min<long long>(100, 1 + static_cast<long long>((until - now()) * 1000))));
  }
  bool interrupted() override { return process::InterruptScope::pendingSignal() != 0; }

 private:
  process::InterruptScope scope_;
};

std::string newSweepId() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%S", &tm);
  std::random_device rd;
  char tail[8];
  std::snprintf(tail, sizeof tail, "%04x", static_cast<unsigned>(rd() & 0xffff));
  return std::string("sweep-") + stamp + "-" + tail;
}

std::string str(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}

// What a node's job left in its directory (job.json, written by `peerlab slurm job`).
struct JobFile {
  bool present = false;
  bool started = false;
  std::string error;
  process::ProcessResult result;
};

JobFile readJobFile(const std::string& dir, const std::string& sweep, const std::string& node) {
  JobFile f;
  struct stat st {};
  const std::string path = dir + "/job.json";
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > 65536) return f;
  auto text = readTextFile(path);
  if (!text.isOk()) return f;
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (!j.is_object() || str(j, "sweep") != sweep || str(j, "node") != node) return f;
  f.present = true;
  f.started = j.value("started", false);
  f.error = str(j, "error");
  f.result.exit_code = j.contains("rc") && j["rc"].is_number_integer() ? j["rc"].get<int>() : -1;
  f.result.signal = j.contains("signal") && j["signal"].is_number_integer() ? j["signal"].get<int>() : 0;
  f.result.timed_out = j.value("timed_out", false);
  f.result.wall_s = j.contains("wall_s") && j["wall_s"].is_number() ? j["wall_s"].get<double>() : 0;
  return f;
}

// The judgement of a job that ended: from its job.json, or from how Slurm says it ended.
Judgement judgeJob(const JobFile& f, const std::string& dir, const std::string& slurm_state, double timeout_s) {
  if (f.present) {
    return judge(RunKind::kQualify, f.started, f.error, f.result, report::bundleResults(dir + "/bundle"), timeout_s);
  }
  if (slurm_state == "NODE_FAIL" || slurm_state == "BOOT_FAIL") {
    return {Outcome::kUnknown, std::string(kReasonPrefix) + "unknown (node failed during its qualification)",
            "Slurm says " + slurm_state};
  }
  if (slurm_state == "TIMEOUT") {
    return {Outcome::kUnknown, std::string(kReasonPrefix) + "unknown (the qualification job hit its time limit)",
            "Slurm says TIMEOUT"};
  }
  // No result and no sign of the node itself: peerlab could not run there (see the job's output).
  return setupError("the job left no result (" +
                    (slurm_state.empty() ? std::string("gone from the queue") : slurm_state) + "; see " + dir +
                    "/job.log)");
}

}  // namespace

std::unique_ptr<Clock> realClock() {
  return std::make_unique<RealClock>();
}

std::string sweepReservation(const std::string& sweep, const std::string& node) {
  return "peerlab_" + sweep + "_" + node;
}

std::string sweepJobName(const std::string& sweep) {
  return "peerlab-" + sweep;
}

struct Sweep::NodeRun {
  std::string name;
  enum class Phase { kLeftAlone, kQueued, kActive, kEnding, kDone } phase = Phase::kQueued;
  std::string why_left;
  bool was_drained = false;  // drained by peerlab when the sweep started: resumed for its job
  std::string old_reason;
  bool reserved = false;
  bool resumed = false;
  std::string job;
  double submitted_at = 0;
  double started_at = -1;
  std::string slurm_state;
  bool cancel_sent = false;
  std::string end_how;  // ended, busy, interrupted, setup
  std::string dir;
  // What finishing has done so far (each step once; a failing Slurm call is asked again on the next poll).
  bool judged = false, acted = false, released = false;
  Judgement judgement;
  std::string final_state, final_reason;
  double ending_since = 0;
  bool abandoned = false;  // left in its reservation, its claim kept, for recover
};

Sweep::Sweep(Client& slurm, history::HistoryStore& store, Clock& clock, Log& log, const Settings& settings,
             SweepOptions options, JobLauncher launcher)
    : slurm_(slurm),
      store_(store),
      clock_(clock),
      log_(log),
      settings_(settings),
      o_(std::move(options)),
      launcher_(std::move(launcher)) {}

std::string Sweep::reservationName(const std::string& node) const {
  return sweepReservation(id_, node);
}

void Sweep::record(NodeRun& n, const std::string& step, const std::string& reason, const nlohmann::json& detail) {
  history::JournalEntry e;
  e.sweep = id_;
  e.node = n.name;
  e.step = step;
  e.job = n.job;
  e.reason = reason;
  e.detail = detail.is_null() ? "{}" : detail.dump();
  if (Status st = rec_->record(e); !st.isOk()) {
    log_.line(n.name, "could not journal \"" + step + "\" (history and spool both failed): " + st.message());
  }
}

void Sweep::crashAfter(const std::string& step) {
  if (o_.on_step) {
    o_.on_step(step);
    return;
  }
  if (o_.crash_after != step) return;
  log_.line("--crash-after " + step + ": killing this sweep with SIGKILL (testing recovery)");
  ::kill(::getpid(), SIGKILL);
}

// Which nodes are qualified and which are left alone, from one look at all of them.
void Sweep::classify(std::vector<NodeRun>& runs) {
  auto infos = slurm_.nodes(o_.nodes);
  std::map<std::string, NodeInfo> byName;
  if (infos.isOk()) {
    for (const NodeInfo& i : *infos)
      byName[i.name] = i;
  } else {
    log_.line("cannot read the nodes' states: " + infos.status().message());
  }
  std::map<std::string, std::string> heldBy;
  if (auto resv = slurm_.reservations(); resv.isOk()) {
    for (const Reservation& r : *resv) {
      if (r.name.rfind("peerlab_", 0) != 0 || r.name.rfind("peerlab_" + id_ + "_", 0) == 0) continue;
      for (const std::string& node : r.nodes)
        heldBy[node] = r.name;
    }
  } else {
    log_.line("cannot read the reservations: " + resv.status().message());
  }
  for (NodeRun& n : runs) {
    auto it = byName.find(n.name);
    if (it == byName.end()) {
      n.phase = NodeRun::Phase::kLeftAlone;
      n.why_left = "state unknown (Slurm did not answer for it)";
      continue;
    }
    const NodeInfo& i = it->second;
    const bool owned = i.drained() && ownsDrain(rec_->nodeJournal(n.name), i.reason);
    if (i.down()) {
      n.phase = NodeRun::Phase::kLeftAlone;
      n.why_left = i.state + (i.reason.empty() ? "" : " (" + i.reason + ")") + ": down";
      if (!o_.dry_run) rec_->recordState({n.name, "down", i.reason, "", "peerlab-slurm-sweep"}).ignore();
    } else if (heldBy.count(n.name)) {
      n.phase = NodeRun::Phase::kLeftAlone;
      n.why_left = "held by another peerlab reservation (" + heldBy[n.name] + ")";
    } else if (i.drained() && !owned) {
      n.phase = NodeRun::Phase::kLeftAlone;
      n.why_left = "drained by someone else (\"" + i.reason + "\")";
      if (!o_.dry_run) rec_->recordState({n.name, "drained", i.reason, "", "peerlab-slurm-sweep"}).ignore();
    } else {
      n.was_drained = i.drained();
      n.old_reason = i.reason;
      log_.line(n.name, i.state + (i.reason.empty() ? "" : " (" + i.reason + ")") + ": to qualify" +
                            (n.was_drained ? " (peerlab drained it: resumed inside its reservation for its job)" : ""));
      continue;
    }
    log_.line(n.name, n.why_left + ": left alone");
  }
}

bool Sweep::start(NodeRun& n) {
  const std::string resv = reservationName(n.name);
  record(n, "reserve", "", {{"reservation", resv}});
  if (Status st = slurm_.createReservation(resv, {n.name}, o_.user); !st.isOk()) {
    record(n, "released", "", {{"error", st.message()}});
    n.phase = NodeRun::Phase::kLeftAlone;
    n.why_left = "no maintenance reservation (" + st.message() + ")";
    log_.line(n.name, n.why_left + ": left alone");
    return false;
  }
  n.reserved = true;
  n.phase = NodeRun::Phase::kActive;
  counts_.max_out = std::max(counts_.max_out, ++out_);
  record(n, "reserved", "", {{"reservation", resv}});
  log_.line(n.name, "reserved (" + resv + ": MAINT, IGNORE_JOBS; its running jobs finish, no new job lands)");
  crashAfter("reserved");
  if (n.was_drained) {
    record(n, "resume_for_job", n.old_reason);
    if (Status st = slurm_.resume(n.name); !st.isOk()) {
      log_.line(n.name, "could not resume it for its job: " + st.message());
      n.end_how = "setup";
      n.judgement = setupError("could not resume the node for its job");
      n.judged = n.acted = true;
      n.phase = NodeRun::Phase::kEnding;
      n.ending_since = clock_.now();
      return true;
    }
    n.resumed = true;
    record(n, "resumed_for_job", n.old_reason);
    log_.line(n.name, "resumed inside its reservation for its job (was \"" + n.old_reason + "\")");
    crashAfter("resumed");
  }
  n.dir = dir_ + "/" + n.name;
  if (::mkdir(n.dir.c_str(), 0755) != 0) {
    n.end_how = "setup";
    n.judgement = setupError("cannot make " + n.dir + ": " + std::strerror(errno));
  } else {
    const JobSpec spec = launcher_(id_, n.name, n.dir);
    record(n, "submit", "", {{"dir", n.dir}});
    auto id = slurm_.submit(spec);
    if (id.isOk()) {
      n.job = *id;
      n.submitted_at = clock_.now();
      record(n, "submitted", "", {{"dir", n.dir}});
      log_.line(n.name, "job " + n.job + " submitted (qualify --level " + std::string(qualify::levelName(o_.level)) +
                            ", bundle " + n.dir + "/bundle)");
      crashAfter("submitted");
      return true;
    }
    n.end_how = "setup";
    n.judgement = setupError("sbatch: " + id.status().message());
  }
  log_.line(n.name, n.judgement.what);
  n.phase = NodeRun::Phase::kEnding;
  n.ending_since = clock_.now();
  return true;
}

void Sweep::poll(std::vector<NodeRun*>& active) {
  bool any = false;
  for (NodeRun* n : active)
    any = any || (n->phase == NodeRun::Phase::kActive && !n->job.empty());
  if (!any) return;
  // One look at every job of the sweep.
  auto jobs = slurm_.jobsNamed(sweepJobName(id_));
  if (!jobs.isOk()) {
    log_.line("squeue failed (" + jobs.status().message() + "): the jobs' states are unknown; asking again");
    // Every wait has its end: a node whose job Slurm has not answered for past all its budgets is left as it is.
    for (NodeRun* n : active) {
      if (n->phase == NodeRun::Phase::kActive && clock_.now() - n->submitted_at > o_.wait_s + o_.timeout_s + 900)
        abandon(*n, "Slurm did not say how its job ended");
    }
    return;
  }
  std::map<std::string, JobInfo> byId;
  for (const JobInfo& j : *jobs)
    byId[j.id] = j;
  const double now = clock_.now();
  for (NodeRun* n : active) {
    if (n->phase != NodeRun::Phase::kActive || n->job.empty()) continue;
    auto it = byId.find(n->job);
    if (it != byId.end() && it->second.active()) {
      const JobInfo& j = it->second;
      if (j.state == "PENDING" && now - n->submitted_at > o_.wait_s && !n->cancel_sent) {
        log_.line(n->name, "job " + n->job + " still waits for the node after " + std::to_string(int(o_.wait_s)) +
                               " s (" + j.reason + "): cancelled, node not qualified");
        slurm_.cancel(n->job).ignore();
        n->cancel_sent = true;
        n->end_how = "busy";
        n->phase = NodeRun::Phase::kEnding;
        n->ending_since = now;
        continue;
      }
      if (j.started() && n->started_at < 0) {
        n->started_at = now;
        crashAfter("running");
      }
      if (n->started_at >= 0 && now - n->started_at > o_.timeout_s + 300 && !n->cancel_sent) {
        log_.line(n->name, "job " + n->job + " runs past its deadline: cancelled");
        slurm_.cancel(n->job).ignore();
        n->cancel_sent = true;
      }
      continue;
    }
    n->slurm_state = it != byId.end() ? it->second.state : "";
    // A job that started and ended between two looks went through "running" all the same.
    if (it != byId.end() && it->second.started() && n->started_at < 0) {
      n->started_at = now;
      crashAfter("running");
    }
    n->end_how = "ended";
    n->phase = NodeRun::Phase::kEnding;
    n->ending_since = now;
    log_.line(n->name,
              "job " + n->job + " ended (" + (n->slurm_state.empty() ? "gone from the queue" : n->slurm_state) + ")");
  }
}

// Puts a node back as it was when the sweep took it: a node resumed for its job is drained again with its old
// reason, unless someone drained it since (their newer reason stays).
void Sweep::putBack(NodeRun& n, const std::string& why) {
  if (!n.resumed) return;
  auto info = nodeInfo(n.name);
  if (!info.isOk()) return;  // asked again on the next poll (acted stays false)
  const NodeInfo& i = *info;
  if (i.drained()) {
    log_.line(n.name, "not drained again: drained meanwhile (\"" + i.reason + "\")");
    n.final_state = "drained";
    n.final_reason = i.reason;
    n.acted = true;
    return;
  }
  record(n, "drain", n.old_reason, {{"why", why}});
  if (Status st = slurm_.drain(n.name, n.old_reason); !st.isOk()) {
    log_.line(n.name, "could not drain it again: " + st.message() + "; asking again");
    return;
  }
  record(n, "drained", n.old_reason, {{"why", why}});
  log_.line(n.name, "put back as it was: drained \"" + n.old_reason + "\" (" + why + ")");
  n.final_state = "drained";
  n.final_reason = n.old_reason;
  n.acted = true;
}

void Sweep::release(NodeRun& n) {
  if (!n.reserved) {
    n.released = true;
    return;
  }
  record(n, "release", "", {{"reservation", reservationName(n.name)}});
  if (Status st = slurm_.deleteReservation(reservationName(n.name)); !st.isOk()) {
    log_.line(n.name,
              "could not delete reservation " + reservationName(n.name) + " (" + st.message() + "); asking again");
    return;
  }
  record(n, "released", "", {{"reservation", reservationName(n.name)}});
  n.released = true;
  --out_;
}

StatusOr<NodeInfo> Sweep::nodeInfo(const std::string& node) {
  auto it = fresh_.find(node);
  if (it != fresh_.end()) {
    NodeInfo i = it->second;
    fresh_.erase(it);
    return i;
  }
  auto all = slurm_.nodes({node});
  if (!all.isOk()) return all.status();
  return all->front();
}

void Sweep::abandon(NodeRun& n, const std::string& why) {
  log_.line(n.name, why + " past every deadline: left as it is, in its reservation " + reservationName(n.name) +
                        " (no job lands there); `peerlab slurm recover` finishes it once Slurm answers");
  n.phase = NodeRun::Phase::kDone;
  n.abandoned = true;
  ++counts_.setup;
}

void Sweep::finish(NodeRun& n, const std::string&) {
  // Slurm has not let the node be finished (drained, released) for ten minutes: left to recover.
  if (clock_.now() - n.ending_since > 600) {
    abandon(n, "Slurm did not take the node's last steps");
    return;
  }
  if (!n.judged) {
    if (n.end_how == "ended") {
      crashAfter("ended");
      const JobFile f = readJobFile(n.dir, id_, n.name);
      n.judgement = judgeJob(f, n.dir, n.slurm_state, o_.timeout_s);
      const std::string results = report::bundleResults(n.dir + "/bundle");
      nlohmann::json detail = {
          {"outcome", outcomeName(n.judgement.outcome)}, {"what", n.judgement.what}, {"bundle", n.dir + "/bundle"}};
      if (f.present) detail["rc"] = f.result.exit_code;
      record(n, "verdict", n.judgement.reason, detail);
      if (!results.empty()) {
        auto stored = rec_->ingest(results, settings_.qualify_kind);
        if (!stored.isOk()) {
          log_.line(n.name, "bundle not ingested: " + stored.status().message());
        } else if (*stored == 0) {
          record(n, "spooled", "", {{"bundle", results}});
          ++counts_.spooled;
        } else {
          record(n, "ingested", "", {{"bundle", results}, {"run_id", *stored}});
        }
      }
    } else if (n.end_how == "busy") {
      n.judgement = {Outcome::kSetup, "", "busy: its job waited for the node's jobs past --wait"};
    } else if (n.end_how == "interrupted") {
      n.judgement = {Outcome::kSetup, "", "interrupted"};
    }
    n.judged = true;
  }
  if (!n.acted) {
    const Outcome o = n.judgement.outcome;
    if (n.end_how == "ended" && (o == Outcome::kFail || o == Outcome::kUnknown)) {
      auto info = nodeInfo(n.name);
      if (!info.isOk()) return;
      const NodeInfo& i = *info;
      if (i.drained() && !ownsDrain(rec_->nodeJournal(n.name), i.reason) && !(n.resumed && i.reason == n.old_reason)) {
        log_.line(n.name, "not drained: drained meanwhile by someone else (\"" + i.reason + "\"); would have said \"" +
                              n.judgement.reason + "\"");
        n.final_state = "drained";
        n.final_reason = i.reason;
      } else {
        record(n, "drain", n.judgement.reason);
        if (Status st = slurm_.drain(n.name, n.judgement.reason); !st.isOk()) {
          log_.line(n.name, "could not drain it: " + st.message() + "; asking again");
          return;
        }
        record(n, "drained", n.judgement.reason);
        log_.line(n.name, std::string(o == Outcome::kFail ? "FAIL" : "UNKNOWN") + ": drained \"" + n.judgement.reason +
                              "\" (" + n.judgement.what + ", bundle " + n.dir + "/bundle)");
        n.final_state = "drained";
        n.final_reason = n.judgement.reason;
      }
      n.acted = true;
    } else if (n.end_how == "ended" && o == Outcome::kPass) {
      log_.line(n.name, std::string("PASS") +
                            (n.resumed ? " (peerlab had drained it: \"" + n.old_reason + "\"; stays resumed)" : ""));
      n.acted = true;
    } else {
      // Not judged by a run of its own (busy, interrupted, a setup error): put back as it was.
      if (o == Outcome::kSetup && n.end_how != "busy" && n.end_how != "interrupted") {
        log_.line(n.name, "peerlab could not run on the node (" + n.judgement.what + "): put back as it was");
      }
      putBack(n, n.judgement.what);
      if (!n.resumed) n.acted = true;
      if (!n.acted) return;
    }
    crashAfter("acted");
  }
  if (!n.released) {
    release(n);
    if (!n.released) return;
  }
  // The state as it is now: what the sweep did, or what Slurm said before it acted. A node only NOT_RESPONDING for a
  // moment after a resume is in service: no transient state is recorded.
  if (n.final_state.empty()) {
    auto info = nodeInfo(n.name);
    if (info.isOk()) {
      const NodeInfo& i = *info;
      n.final_state = i.down() ? "down" : i.drained() ? "drained" : "in_service";
      n.final_reason = i.drained() || i.down() ? i.reason : "";
    }
  }
  if (!n.final_state.empty()) {
    rec_->recordState({n.name, n.final_state, n.final_reason, "", "peerlab-slurm-sweep"}).ignore();
  }
  record(n, "done", "", {{"outcome", outcomeName(n.judgement.outcome)}, {"how", n.end_how}});
  if (!rec_->historyLost()) store_.releaseClaims(id_, {n.name}).ignore();
  n.phase = NodeRun::Phase::kDone;
  const Outcome o = n.judgement.outcome;
  if (n.end_how == "busy") {
    ++counts_.busy;
  } else if (n.end_how == "ended" && o == Outcome::kPass) {
    ++counts_.passed;
  } else if (n.end_how == "ended" && o == Outcome::kFail) {
    ++counts_.failed;
  } else if (n.end_how == "ended" && o == Outcome::kUnknown) {
    ++counts_.unknown;
  } else {
    ++counts_.setup;
  }
}

void Sweep::outliers(std::vector<NodeRun>& runs) {
  if (rec_->historyLost()) return;
  auto h = history::loadHistory(store_);
  if (!h.isOk()) return;
  const std::vector<history::FleetOutlier> found = history::fleetOutliers(*h);
  std::map<std::string, int> below;
  for (const history::FleetOutlier& f : found)
    if (!f.slurm_node.empty()) ++below[f.slurm_node];
  for (NodeRun& n : runs) {
    if (n.phase != NodeRun::Phase::kDone || n.end_how != "ended" || n.judgement.outcome != Outcome::kPass) continue;
    auto it = below.find(n.name);
    if (it == below.end()) continue;
    const std::string why = std::string(kReasonPrefix) + "below its fleet on " + std::to_string(it->second) +
                            " series: check links/settings";
    log_.line(n.name, "below its fleet on " + std::to_string(it->second) + " series (passes its own thresholds)" +
                          (o_.drain_outliers ? "" : ": reported, not drained (--drain-outliers drains)"));
    if (!o_.drain_outliers) continue;
    auto info = slurm_.nodes({n.name});
    if (!info.isOk() || info->front().drained()) continue;
    record(n, "drain", why, {{"why", "fleet outlier"}});
    if (slurm_.drain(n.name, why).isOk()) {
      record(n, "drained", why, {{"why", "fleet outlier"}});
      rec_->recordState({n.name, "drained", why, "", "peerlab-slurm-sweep"}).ignore();
      log_.line(n.name, "drained \"" + why + "\"");
      ++counts_.outliers_drained;
    }
  }
}

SweepResult Sweep::run() {
  SweepResult out;
  const double t0 = clock_.now();
  const std::int64_t calls0 = slurm_.calls();
  id_ = o_.sweep_id.empty() ? newSweepId() : o_.sweep_id;
  out.sweep_id = id_;
  rec_ = std::make_unique<Recorder>(&store_, o_.bundle_root.empty() ? "" : o_.bundle_root + "/spool", "sweep", log_);
  auto fail = [&](int code, const std::string& why) {
    log_.line(why);
    out.exit_code = code;
    out.summary = why;
    out.wall_s = clock_.now() - t0;
    out.slurm_calls = slurm_.calls() - calls0;
    return out;
  };
  std::vector<NodeRun> runs;
  for (const std::string& n : o_.nodes) {
    NodeRun r;
    r.name = n;
    runs.push_back(std::move(r));
  }
  counts_.nodes = static_cast<int>(runs.size());
  log_.line(id_ + ": " + std::to_string(runs.size()) + (runs.size() == 1 ? " node (" : " nodes (") + o_.what +
            ") at level " + std::string(qualify::levelName(o_.level)) + ", at most " + std::to_string(o_.batch) +
            " out of service at once; history " + redactSecrets(store_.dialect()));

  if (!o_.dry_run) {
    // What a spool holds goes into the history first; then what gone sweeps left is finished or undone.
    if (!o_.bundle_root.empty()) {
      auto replayed = replaySpool(o_.bundle_root + "/spool", store_, log_);
      if (!replayed.isOk())
        return fail(4, "setup error: the spool could not be replayed: " + replayed.status().message());
      if (*replayed > 0) log_.line("ingested " + std::to_string(*replayed) + " spooled bundles");
    }
    const std::string holder = holderId(o_.poll_s);
    auto claimed = store_.claimNodes(id_, holder, o_.nodes,
                                     [](const history::Claim& c) { return holderGone(c, report::utcTimestamp()); });
    if (!claimed.isOk())
      return fail(4, "setup error: cannot claim the nodes in the history: " + claimed.status().message());
    if (!claimed->granted) {
      std::string who;
      for (const history::Claim& c : claimed->conflicts) {
        if (who.size() > 300) {
          who += ", ...";
          break;
        }
        who += (who.empty() ? "" : ", ") + c.node;
      }
      const history::Claim& c = claimed->conflicts.front();
      return fail(4, "refused: another sweep (" + c.sweep + ", " +
                         c.holder.substr(0, c.holder.find(' ', c.holder.find(' ') + 1)) + ", heartbeat " +
                         c.heartbeat_at + ") holds " + std::to_string(claimed->conflicts.size()) + " of these nodes (" +
                         who + "); nothing done");
    }
    if (!claimed->taken_over.empty()) {
      std::set<std::string> sweeps;
      for (const history::Claim& c : claimed->taken_over)
        sweeps.insert(c.sweep);
      log_.line("taking over the nodes of " + std::to_string(sweeps.size()) +
                " gone sweep(s): finishing or undoing what they left first");
      // Their claims are this sweep's now: recovered under it, not released.
      Recorder recoverRec(&store_, "", "recover", log_);
      const RecoverResult rr = recoverClaims(slurm_, recoverRec, store_, log_, claimed->taken_over, false);
      if (!rr.ok) {
        store_.releaseClaims(id_).ignore();
        return fail(4,
                    "setup error: what a gone sweep left could not be finished (Slurm did not answer); nothing "
                    "else done: run `peerlab slurm recover`");
      }
    }
    for (NodeRun& n : runs)
      record(n, "claimed", "", {{"holder", holder}});
  }

  classify(runs);
  if (o_.dry_run) {
    std::string list;
    for (const NodeRun& n : runs)
      if (n.phase == NodeRun::Phase::kQueued) list += (list.empty() ? "" : " ") + n.name;
    return fail(0, "dry run: would qualify " + (list.empty() ? std::string("no node") : list) + ", at most " +
                       std::to_string(o_.batch) + " at once; nothing changed");
  }
  // The nodes left alone are not the sweep's.
  {
    std::vector<std::string> alone;
    for (NodeRun& n : runs) {
      if (n.phase != NodeRun::Phase::kLeftAlone) continue;
      alone.push_back(n.name);
      record(n, "done", "", {{"how", "left alone"}, {"why", n.why_left}});
    }
    if (!alone.empty()) store_.releaseClaims(id_, alone).ignore();
  }

  dir_ = o_.bundle_root + "/" + id_;
  if (std::count_if(runs.begin(), runs.end(), [](const NodeRun& n) { return n.phase == NodeRun::Phase::kQueued; }) >
      0) {
    if (::mkdir(dir_.c_str(), 0755) != 0) {
      store_.releaseClaims(id_).ignore();
      return fail(4, "setup error: cannot make the sweep's directory " + dir_ + ": " + std::strerror(errno));
    }
    out.sweep_dir = dir_;
  }

  // The rolling loop: keep up to a batch of nodes out of service; one look at the jobs per poll.
  std::vector<NodeRun*> queue, active;
  for (NodeRun& n : runs)
    if (n.phase == NodeRun::Phase::kQueued) queue.push_back(&n);
  size_t next = 0;
  int setupInARow = 0;
  bool stopping = false;
  std::string stopWhy;
  double lastBeat = clock_.now();
  while (true) {
    if (clock_.interrupted() && !stopping) {
      stopping = true;
      stopWhy = "interrupted";
      log_.line("interrupted: no node is started any more; the running jobs are cancelled and their nodes put back");
      for (NodeRun* n : active) {
        if (n->phase == NodeRun::Phase::kActive) {
          if (!n->job.empty()) slurm_.cancel(n->job).ignore();
          n->end_how = "interrupted";
          n->phase = NodeRun::Phase::kEnding;
          n->ending_since = clock_.now();
        }
      }
    }
    if (rec_->historyLost() && !stopping) {
      stopping = true;
      stopWhy = "the history stopped answering (" + rec_->lostReason() + ")";
      log_.line(stopWhy + ": no node is started any more; the nodes in flight are finished, their bundles spooled");
    }
    if (setupInARow >= 2 && !stopping) {
      stopping = true;
      stopWhy = "peerlab could not run on two nodes in a row";
      log_.line(stopWhy + ": no node is started any more (see the nodes' job.log)");
    }
    // Start nodes while fewer than a batch are out.
    while (!stopping && next < queue.size() && out_ < o_.batch) {
      NodeRun& n = *queue[next++];
      if (start(n)) active.push_back(&n);
    }
    // Finish what ended, from one read of all those nodes.
    {
      std::vector<std::string> ending;
      for (NodeRun* n : active)
        if (n->phase == NodeRun::Phase::kEnding) ending.push_back(n->name);
      fresh_.clear();
      if (!ending.empty()) {
        if (auto infos = slurm_.nodes(ending); infos.isOk()) {
          for (const NodeInfo& i : *infos)
            fresh_[i.name] = i;
        }
      }
    }
    for (NodeRun* n : active) {
      if (n->phase != NodeRun::Phase::kEnding) continue;
      finish(*n, n->end_how);
      if (n->phase == NodeRun::Phase::kDone) {
        const bool setup =
            n->end_how != "busy" && n->end_how != "interrupted" && n->judgement.outcome == Outcome::kSetup;
        setupInARow = setup ? setupInARow + 1 : 0;
      }
    }
    active.erase(std::remove_if(active.begin(), active.end(),
                                [](NodeRun* n) {
                                  return n->phase == NodeRun::Phase::kDone || n->phase == NodeRun::Phase::kLeftAlone;
                                }),
                 active.end());
    const bool more = !stopping && next < queue.size();
    if (active.empty() && !more) break;
    // A place came free: the next node starts now, not after a poll.
    if (more && out_ < o_.batch) continue;
    clock_.sleep(o_.poll_s);
    if (clock_.now() - lastBeat >= o_.poll_s && !rec_->historyLost()) {
      if (Status st = store_.heartbeat(id_); !st.isOk()) rec_->markLost(st);
      lastBeat = clock_.now();
    }
    poll(active);
  }
  for (size_t i = next; i < queue.size(); ++i) {
    ++counts_.not_started;
    record(*queue[i], "done", "", {{"how", "not started"}, {"why", stopWhy}});
  }
  if (!rec_->historyLost()) {
    std::vector<std::string> release;
    for (const NodeRun& n : runs)
      if (!n.abandoned) release.push_back(n.name);
    store_.releaseClaims(id_, release).ignore();
  }
  outliers(runs);

  for (const NodeRun& n : runs)
    if (n.phase == NodeRun::Phase::kLeftAlone) ++counts_.left_alone;
  out.counts = counts_;
  out.counts.spooled = rec_->spooledBundles();
  out.wall_s = clock_.now() - t0;
  out.slurm_calls = slurm_.calls() - calls0;
  char rate[64];
  std::snprintf(rate, sizeof rate, "%.2f", out.wall_s > 0 ? out.slurm_calls / out.wall_s : 0.0);
  std::string summary = id_ + " done: " + std::to_string(counts_.nodes) +
                        (counts_.nodes == 1 ? " node: " : " nodes: ") + std::to_string(counts_.passed) + " passed, " +
                        std::to_string(counts_.failed) + " failed (drained), " + std::to_string(counts_.unknown) +
                        " unknown (drained), " + std::to_string(counts_.setup) + " setup errors (put back), " +
                        std::to_string(counts_.busy) + " busy (not qualified), " + std::to_string(counts_.left_alone) +
                        " left alone, " + std::to_string(counts_.not_started) + " not started; at most " +
                        std::to_string(counts_.max_out) + " out of service at once; " +
                        std::to_string(out.slurm_calls) + " Slurm calls (" + rate + "/s)";
  if (counts_.outliers_drained) summary += "; " + std::to_string(counts_.outliers_drained) + " fleet outliers drained";
  if (rec_->historyLost()) {
    summary += "; the history stopped answering: " + std::to_string(out.counts.spooled) + " bundles spooled in " +
               o_.bundle_root + "/spool (the next sweep ingests them)";
  }
  if (!stopWhy.empty() && !rec_->historyLost()) summary += "; stopped early: " + stopWhy;
  if (!dir_.empty()) summary += "; bundles in " + dir_;
  log_.line(summary);
  out.summary = summary;
  if (rec_->historyLost() || counts_.setup > 0 || stopWhy == "interrupted" || counts_.not_started > 0) {
    out.exit_code = 4;
  } else if (counts_.failed + counts_.unknown + counts_.outliers_drained > 0) {
    out.exit_code = 1;
  }
  return out;
}

}  // namespace peerlab::slurm
