// What a killed sweep left, finished or undone from its journal.
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <set>

#include "harness/report/report.h"
#include "harness/slurm/sweep.h"
#include "reference/core/files.h"
#include "reference/core/text.h"

namespace peerlab::slurm {
namespace {

// What the journal of one node in one sweep says happened.
struct Facts {
  bool done = false;
  bool resume_intent = false;
  std::string old_reason;
  std::string job;
  std::string dir;
  bool has_verdict = false;
  Outcome outcome = Outcome::kSetup;
  std::string verdict_reason;
  std::string drain_intent;  // a drain intent with no fact after it
};

Outcome outcomeOf(const std::string& name) {
  if (name == "pass") return Outcome::kPass;
  if (name == "fail") return Outcome::kFail;
  if (name == "unknown") return Outcome::kUnknown;
  return Outcome::kSetup;
}

Facts factsOf(const std::vector<history::JournalEntry>& entries) {
  Facts f;
  for (const history::JournalEntry& e : entries) {
    auto detail = nlohmann::json::parse(e.detail, nullptr, false);
    auto text = [&](const char* key) {
      return detail.is_object() && detail.contains(key) && detail[key].is_string() ? detail[key].get<std::string>()
                                                                                   : std::string();
    };
    if (e.step == "done") f.done = true;
    if (e.step == "resume_for_job") {
      f.resume_intent = true;
      f.old_reason = e.reason;
    }
    if (e.step == "submit" || e.step == "submitted") f.dir = text("dir");
    if (!e.job.empty()) f.job = e.job;
    if (e.step == "verdict") {
      f.has_verdict = true;
      f.outcome = outcomeOf(text("outcome"));
      f.verdict_reason = e.reason;
    }
    if (e.step == "drain") f.drain_intent = e.reason;
    if (e.step == "drained") f.drain_intent.clear();
  }
  return f;
}

// The result a node's job left (job.json), judged; nullopt when there is none.
std::optional<Judgement> jobVerdict(const std::string& dir, const std::string& sweep, const std::string& node,
                                    double timeout_s) {
  if (dir.empty()) return std::nullopt;
  auto text = readTextFile(dir + "/job.json");
  if (!text.isOk() || text->size() > 65536) return std::nullopt;
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (!j.is_object() || j.value("sweep", "") != sweep || j.value("node", "") != node) return std::nullopt;
  process::ProcessResult r;
  r.exit_code = j.contains("rc") && j["rc"].is_number_integer() ? j["rc"].get<int>() : -1;
  r.signal = j.contains("signal") && j["signal"].is_number_integer() ? j["signal"].get<int>() : 0;
  r.timed_out = j.value("timed_out", false);
  const bool started = j.value("started", false);
  const std::string error = j.contains("error") && j["error"].is_string() ? j["error"].get<std::string>() : "";
  return judge(RunKind::kQualify, started, error, r, report::bundleResults(dir + "/bundle"), timeout_s);
}

}  // namespace

RecoverResult recoverClaims(Client& slurm, Recorder& rec, history::HistoryStore& store, Log& log,
                            const std::vector<history::Claim>& claims, bool release) {
  RecoverResult out;
  std::map<std::string, std::vector<history::Claim>> bySweep;
  for (const history::Claim& c : claims)
    bySweep[c.sweep].push_back(c);
  for (const auto& [sweep, list] : bySweep) {
    // One look at the sweep's jobs.
    auto jobs = slurm.jobsNamed(sweepJobName(sweep));
    if (!jobs.isOk()) {
      log.line("recover " + sweep + ": squeue failed (" + jobs.status().message() + "); asking again later");
      out.ok = false;
      continue;
    }
    for (const history::Claim& c : list) {
      const std::string& node = c.node;
      auto journal = store.journal(node, sweep);
      if (!journal.isOk()) {
        out.ok = false;
        continue;
      }
      const Facts f = factsOf(*journal);
      auto entry = [&](const std::string& step, const std::string& reason, const nlohmann::json& detail) {
        history::JournalEntry e;
        e.sweep = sweep;
        e.node = node;
        e.step = step;
        e.job = f.job;
        e.reason = reason;
        e.detail = detail.is_null() ? "{}" : detail.dump();
        rec.record(e).ignore();
      };
      if (f.done) {
        if (release) store.releaseClaims(sweep, {node}).ignore();
        continue;
      }
      auto info = slurm.nodes({node});
      if (!info.isOk()) {
        log.line(node, "recover " + sweep + ": scontrol failed (" + info.status().message() + "); asking again later");
        out.ok = false;
        continue;
      }
      NodeInfo cur = info->front();
      // A drain it was about to write and did: the fact is recorded now (it happened).
      if (!f.drain_intent.empty() && cur.drained() && cur.reason == f.drain_intent) {
        entry("drained", f.drain_intent, {{"recovered", true}});
      }
      // Its job: a running one is cancelled (no verdict is waited for); an ended one is read.
      bool running = false;
      std::string jobState;
      for (const JobInfo& j : *jobs) {
        if (j.id != f.job && !(f.job.empty() && j.nodes == node)) continue;
        jobState = j.state;
        if (j.active()) {
          running = true;
          slurm.cancel(j.id).ignore();
          log.line(node, "recover " + sweep + ": job " + j.id + " cancelled (" + j.state + ")");
        }
      }
      std::optional<Judgement> verdict;
      if (f.has_verdict) {
        verdict = Judgement{f.outcome, f.verdict_reason, "recorded"};
      } else if (!running && !f.job.empty()) {
        verdict = jobVerdict(f.dir, sweep, node, 86400);
        if (verdict) {
          entry("verdict", verdict->reason,
                {{"outcome", outcomeName(verdict->outcome)}, {"what", verdict->what}, {"recovered", true}});
          const std::string results = report::bundleResults(f.dir + "/bundle");
          if (!results.empty()) {
            auto stored = rec.ingest(results);
            if (!stored.isOk())
              log.line(node, "recover " + sweep + ": bundle not ingested: " + stored.status().message());
          }
        }
      }
      std::string state = cur.down() ? "down" : cur.drained() ? "drained" : "in_service";
      std::string reason = cur.drained() || cur.down() ? cur.reason : "";
      const bool ownedNow = cur.drained() && ownsDrain(rec.nodeJournal(node), cur.reason);
      auto drain = [&](const std::string& why, const char* what) -> bool {
        entry("drain", why, {{"why", what}});
        if (Status st = slurm.drain(node, why); !st.isOk()) {
          log.line(node, "recover " + sweep + ": could not drain (" + st.message() + "); asking again later");
          return false;
        }
        entry("drained", why, {{"why", what}});
        log.line(node, "recover " + sweep + ": drained \"" + why + "\" (" + what + ")");
        state = "drained";
        reason = why;
        return true;
      };
      if (verdict && (verdict->outcome == Outcome::kFail || verdict->outcome == Outcome::kUnknown)) {
        // The verdict is acted on, over peerlab's own drain but never over someone else's.
        if (!(cur.drained() && (cur.reason == verdict->reason || !ownedNow))) {
          if (!drain(verdict->reason, "its verdict")) {
            out.ok = false;
            continue;
          }
        }
      } else if (!(verdict && verdict->outcome == Outcome::kPass) && f.resume_intent && !cur.drained()) {
        // Resumed for its job and never judged: back to the drain it had.
        if (!drain(f.old_reason, "resumed for its job, no verdict")) {
          out.ok = false;
          continue;
        }
      }
      if (Status st = slurm.deleteReservation(sweepReservation(sweep, node)); !st.isOk()) {
        log.line(node, "recover " + sweep + ": could not delete reservation " + sweepReservation(sweep, node) + " (" +
                           st.message() + "); asking again later");
        out.ok = false;
        continue;
      }
      entry("released", "", {{"reservation", sweepReservation(sweep, node)}, {"recovered", true}});
      rec.recordState({node, state, reason, "", "peerlab-slurm-recover"}).ignore();
      entry("recovered", "", {{"verdict", verdict ? outcomeName(verdict->outcome) : "none"}, {"state", state}});
      if (release) store.releaseClaims(sweep, {node}).ignore();
      const std::string line = "recovered from " + sweep + ": " +
                               (verdict ? std::string("verdict ") + outcomeName(verdict->outcome) : "no verdict") +
                               ", now " + state + (reason.empty() ? "" : " (\"" + reason + "\")") +
                               ", reservation gone";
      log.line(node, line);
      out.lines.push_back(node + ": " + line);
      ++out.nodes;
    }
  }
  return out;
}

RecoverResult recoverLeftovers(Client& slurm, Recorder& rec, history::HistoryStore& store, Log& log,
                               const RecoverOptions& options) {
  RecoverResult out;
  auto claims = store.claims();
  if (!claims.isOk()) {
    out.ok = false;
    out.lines.push_back("cannot read the claims: " + claims.status().message());
    return out;
  }
  const std::string now = report::utcTimestamp();
  std::vector<history::Claim> gone;
  for (const history::Claim& c : *claims) {
    if (!options.sweep.empty() && c.sweep != options.sweep) continue;
    if (!options.nodes.empty() && std::find(options.nodes.begin(), options.nodes.end(), c.node) == options.nodes.end())
      continue;
    if (options.force || holderGone(c, now)) {
      gone.push_back(c);
    } else {
      ++out.refused;
      out.lines.push_back(c.node + ": held by a live sweep (" + c.sweep + ", heartbeat " + c.heartbeat_at +
                          "): left to it");
    }
  }
  RecoverResult r = recoverClaims(slurm, rec, store, log, gone, true);
  r.refused = out.refused;
  r.lines.insert(r.lines.begin(), out.lines.begin(), out.lines.end());
  return r;
}

}  // namespace peerlab::slurm
