// peerlab history: a store of run files (SQLite or PostgreSQL), change points, regressions, fleet outliers, the site.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "harness/cli/command.h"
#include "harness/history/analysis.h"
#include "harness/history/site_model.h"
#include "harness/history/store.h"
#include "harness/report/baseline.h"
#include "harness/report/compare.h"
#include "harness/report/report.h"
#include "reference/core/text.h"

#if __has_include("harness/report/render/site.h")
#include "harness/report/render/site.h"
#define PEERLAB_HAVE_HISTORY_SITE 1
#endif

namespace peerlab::cli {
namespace {

constexpr const char* kCmd = "history";

struct HistoryArgs {
  std::string db;
  std::vector<std::string> files;
  std::vector<std::string> remove;
  std::string kind;
  bool kind_override = false;
  bool json = false;
  bool create = false;
  std::string json_out;
  std::string out_dir;
  std::string model_out;
  bool by_host = false;
  // Numbers are taken as text and checked here, so that a bad value gets a message a person can read.
  std::string threshold = "3";
  std::string min_change = "3";
  std::string p_value = "0.01";
  std::string permutations = "99";
  std::string z = "3.5";
  std::string min_hosts = "4";
  history::NodeState node_state;
  bool new_node = false;
};

struct Numbers {
  double threshold_pct = 3.0;
  double min_change_pct = 3.0;
  double max_p_value = 0.01;
  int permutations = 99;
  double z_threshold = 3.5;
  int min_hosts = 4;
};

StatusOr<Numbers> parseNumbers(const HistoryArgs& a) {
  Numbers n;
  auto pct = [](const char* option, const std::string& text) -> StatusOr<double> {
    auto v = report::parseThresholdPct(text);
    if (!v.isOk()) {
      return PEERLAB_INVALID_ARGUMENT(std::string(option) + " \"" + printable(text, 40) +
                                      "\": expected a percentage from 0 to 999, such as 5 or 2.5%");
    }
    return *v;
  };
  PEERLAB_ASSIGN_OR_RETURN(n.threshold_pct, pct("--threshold", a.threshold));
  PEERLAB_ASSIGN_OR_RETURN(n.min_change_pct, pct("--min-change", a.min_change));
  PEERLAB_ASSIGN_OR_RETURN(n.max_p_value, parseNumberOption("--p-value", a.p_value, 1e-9, 1.0));
  PEERLAB_ASSIGN_OR_RETURN(double perms, parseNumberOption("--permutations", a.permutations, 1, 100000, true));
  n.permutations = static_cast<int>(perms);
  PEERLAB_ASSIGN_OR_RETURN(n.z_threshold, parseNumberOption("--z", a.z, 0.5, 100.0));
  PEERLAB_ASSIGN_OR_RETURN(double hosts, parseNumberOption("--min-hosts", a.min_hosts, 3, 100000, true));
  n.min_hosts = static_cast<int>(hosts);
  return n;
}

// Read commands open the store read-only (--create: read-write, to make it); ingest and remove keep what they write,
// so an in-memory SQLite database, which keeps nothing, is refused for them. A stored row that does not read is left
// out with one warning line on stderr naming it.
StatusOr<std::unique_ptr<history::HistoryStore>> openStore(const HistoryArgs& a, history::OpenMode mode) {
  if (a.db.empty()) return PEERLAB_INVALID_ARGUMENT("--db is required (a SQLite path or a postgresql:// URL)");
  const bool keeps = mode != history::OpenMode::kReadOnly;
  if (keeps && (a.db == ":memory:" || a.db.rfind("file::memory:", 0) == 0)) {
    return PEERLAB_INVALID_ARGUMENT("--db " + a.db +
                                    ": an in-memory database keeps nothing; give a SQLite file or a PostgreSQL URL");
  }
  auto store = history::HistoryStore::open(a.db, a.create ? history::OpenMode::kCreate : mode);
  if (store.isOk()) {
    (*store)->onWarning(
        [](const std::string& w) { std::fprintf(stderr, "peerlab %s: warning: %s\n", kCmd, w.c_str()); });
  }
  return store;
}

// A store that cannot be used: exit 2 for what --db names (no such history, a refused URL), exit 4 for a database
// that failed (lost, full).
int exitCodeOf(const Status& st) {
  return st.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitRuntime;
}

// An unknown --kind is a typo, not an empty answer: the kinds (and hosts) the store holds are listed.
Status checkKind(history::HistoryStore& store, const std::string& kind) {
  if (kind.empty()) return Status::ok();
  PEERLAB_ASSIGN_OR_RETURN(std::vector<history::RunInfo> runs, store.runs());
  std::set<std::string> kinds;
  for (const history::RunInfo& r : runs) {
    if (history::machineMatches(r, kind)) return Status::ok();
    kinds.insert(r.machine());
  }
  std::string known;
  for (const std::string& k : kinds) {
    if (known.size() > 400) {
      known += ", ...";
      break;
    }
    known += (known.empty() ? "" : ", ") + printable(k, 80);
  }
  return PEERLAB_INVALID_ARGUMENT("--kind " + printable(kind, 80) + ": no stored run of that kind or host (known: " +
                                  (known.empty() ? std::string("none, the history is empty") : known) + ")");
}

// Why a run file is no node's run to store, "" when it is one: a baseline (made from runs; a reference for qualify
// --baseline and report --compare, never a run of its own).
std::string notANodeRun(const report::Run& run) {
  if (!report::isBaseline(run)) return "";
  const int n = report::baselineRunCount(run);
  return "a baseline (made by peerlab baseline make from " + std::to_string(n) + (n == 1 ? " run" : " runs") +
         "), not a node's run; a baseline is what qualify --baseline and report --compare hold runs against";
}

// The kind a run is stored under, held against its hardware by the one rule qualify holds --kind to: --kind when
// given, else the run file's own kind. A file's kind that contradicts its hardware is refused unless the run says it
// was accepted so (qualify --kind-override) or --kind-override is given here; then it is stored marked overridden.
StatusOr<std::string> ingestKind(const HistoryArgs& a, const report::Run& run) {
  const report::DerivedKind hardware = report::hardwareOf(run);
  if (!a.kind.empty()) {
    PEERLAB_ASSIGN_OR_RETURN(report::RunKind kind, report::chooseKind({a.kind, "", a.kind_override}, hardware));
    return kind.name;
  }
  if (!run.kind.overridden || run.kind.override_recorded || a.kind_override || hardware.kind.empty())
    return run.kind.name;
  auto checked = report::chooseKind({run.kind.name, "", false}, hardware);
  if (checked.isOk()) return checked->name;
  return PEERLAB_INVALID_ARGUMENT("its kind " + run.kind.name + " contradicts its hardware, " + hardware.kind + " (" +
                                  hardware.basis +
                                  "), and the run does not say it was accepted so (kind_overridden); "
                                  "pass --kind-override to store it under " +
                                  run.kind.name + " anyway");
}

int runIngest(const HistoryArgs& a) {
  if (a.files.empty()) return fail(kCmd, kExitUsage, "ingest: no run file given");
  auto store = openStore(a, history::OpenMode::kCreate);
  if (!store.isOk()) return fail(kCmd, exitCodeOf(store.status()), store.status().message());
  int bad = 0, added = 0, known = 0;
  auto rejected = [&](const std::string& file, const std::string& why) {
    fail(kCmd, kExitUsage, "ingest: " + file + ": " + why + " (nothing of it stored)");
    ++bad;
  };
  for (const std::string& file : a.files) {
    // The whole file is read and validated before anything of it is written.
    auto run = report::readRun(file);
    if (!run.isOk()) {
      fail(kCmd, kExitUsage, "ingest: " + run.status().message() + " (nothing of it stored)");
      ++bad;
      continue;
    }
    if (const std::string why = notANodeRun(*run); !why.empty()) {
      rejected(file, why);
      continue;
    }
    auto kind = ingestKind(a, *run);
    if (!kind.isOk()) {
      rejected(file, kind.status().message());
      continue;
    }
    history::IngestOptions opts;
    opts.kind = *kind;
    opts.source = std::filesystem::path(file).filename().string();
    auto outcome = (*store)->ingest(*run, opts);
    if (!outcome.isOk()) {
      if (outcome.status().code() == StatusCode::kInvalidArgument) {
        rejected(file, outcome.status().message());
        continue;
      }
      // The database failed (lost, full): no later file would fare better, and none of them is to blame.
      std::printf("%d stored, %d already there, %d rejected; stopped at %s\n", added, known, bad,
                  printable(file).c_str());
      return fail(kCmd, kExitRuntime,
                  "ingest: the database failed while storing " + file + ": " + outcome.status().message() +
                      " (that file is not stored; the files after it were not tried)");
    }
    const std::string injected = run->fingerprint.injected.any() ? " as INJECTED (counted nowhere)" : "";
    if (outcome->inserted) {
      ++added;
      std::printf("%s: stored as run %lld (%zu results)%s\n", printable(file).c_str(),
                  static_cast<long long>(outcome->run_id), run->results.size(), injected.c_str());
    } else {
      ++known;
      std::printf("%s: already stored as run %lld\n", printable(file).c_str(), static_cast<long long>(outcome->run_id));
    }
  }
  std::printf("%d stored, %d already there, %d rejected\n", added, known, bad);
  return bad ? kExitUsage : kExitOk;
}

int runRemove(const HistoryArgs& a) {
  auto store = openStore(a, history::OpenMode::kExisting);
  if (!store.isOk()) return fail(kCmd, exitCodeOf(store.status()), store.status().message());
  auto removed = (*store)->remove(a.remove);
  if (!removed.isOk()) {
    const int code = removed.status().code() == StatusCode::kInvalidArgument ? kExitUsage : kExitRuntime;
    return fail(kCmd, code, "remove: " + removed.status().message());
  }
  for (const history::RunInfo& r : *removed) {
    std::printf("removed run %lld (%s, host %s, %s, %d results, from %s)\n", static_cast<long long>(r.id),
                printable(r.machine(), 80).c_str(), printable(r.host, 80).c_str(), printable(r.timestamp, 40).c_str(),
                r.results, printable(r.source, 120).c_str());
  }
  return kExitOk;
}

int runList(const HistoryArgs& a) {
  auto store = openStore(a, history::OpenMode::kReadOnly);
  if (!store.isOk()) return fail(kCmd, exitCodeOf(store.status()), store.status().message());
  auto runs = (*store)->runs();
  if (!runs.isOk()) return fail(kCmd, kExitRuntime, runs.status().message());
  if (a.json) {
    nlohmann::json arr = nlohmann::json::array();
    for (const history::RunInfo& r : *runs) {
      arr.push_back({{"id", r.id},
                     {"content_hash", r.content_hash},
                     {"host", r.host},
                     {"kind", r.kind},
                     {"node", r.node},
                     {"slurm_node", r.slurm_node},
                     {"git_sha", r.git_sha},
                     {"timestamp", r.timestamp},
                     {"time", r.time},
                     {"ingested_at", r.ingested_at},
                     {"results", r.results},
                     {"driver", r.driver},
                     {"cuda", r.cuda},
                     {"nccl", r.nccl},
                     {"gpus", r.gpus},
                     {"source", r.source},
                     {"verdict", r.verdict},
                     {"checks", r.checksJson()},
                     {"injected", r.injected}});
    }
    // Strings from run files are kept as they are: JSON escapes every control character.
    Status st = writeOutput(
        "-", nlohmann::json({{"runs", arr}}).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    if (!st.isOk()) return fail(kCmd, kExitRuntime, st.message());
    return kExitOk;
  }
  // Run-file strings go through printable(): an escape sequence in a host name is shown, not obeyed.
  std::printf("%-5s %-20s %-16s %-12s %-20s %8s  %-7s %-40s %s\n", "id", "time", "kind", "git", "host", "results",
              "verdict", "checks", "driver");
  for (const history::RunInfo& r : *runs) {
    std::string time = r.time;
    if (history::normalizeTimestamp(r.timestamp) != r.time) time += " (file: " + printable(r.timestamp, 40) + ")";
    std::string checks;
    if (r.checks) {
      checks = std::to_string(r.checks->total) + ": " + std::to_string(r.checks->failed) + " failed, " +
               std::to_string(r.checks->warnings) + " warn, " +
               std::to_string(r.checks->unsupported + r.checks->skipped) + " not checked";
    }
    std::printf("%-5lld %-20s %-16s %-12s %-20s %8d  %-7s %-40s %s%s\n", static_cast<long long>(r.id), time.c_str(),
                printable(r.kind, 64).c_str(), printable(r.git_sha.substr(0, 12)).c_str(),
                printable(r.host, 64).c_str(), r.results, r.verdict.empty() ? "-" : r.verdict.c_str(), checks.c_str(),
                printable(r.driver, 64).c_str(),
                r.injected.empty() ? "" : ("  INJECTED (not counted): " + printable(r.injected, 300)).c_str());
  }
  size_t injected = 0;
  for (const history::RunInfo& r : *runs)
    injected += !r.injected.empty();
  std::printf("%zu runs", runs->size());
  if (injected > 0) std::printf(" (%zu with stand-ins or injected faults, counted nowhere)", injected);
  std::printf("\n");
  return kExitOk;
}

history::EDivisiveOptions detectOptions(const Numbers& n) {
  history::EDivisiveOptions o;
  o.max_p_value = n.max_p_value;
  o.permutations = n.permutations;
  o.min_change_pct = n.min_change_pct;
  return o;
}

std::string jsonText(const nlohmann::json& doc) {
  return doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

int runRegressions(const HistoryArgs& a) {
  auto n = parseNumbers(a);
  if (!n.isOk()) return fail(kCmd, kExitUsage, n.status().message());
  auto store = openStore(a, history::OpenMode::kReadOnly);
  if (!store.isOk()) return fail(kCmd, exitCodeOf(store.status()), store.status().message());
  if (Status st = checkKind(**store, a.kind); !st.isOk()) return fail(kCmd, kExitUsage, st.message());
  auto h = history::loadHistory(**store, {a.kind, a.by_host});
  if (!h.isOk()) return fail(kCmd, kExitRuntime, h.status().message());
  const history::EDivisiveOptions detect = detectOptions(*n);
  history::detectChangePoints(*h, detect);
  const std::vector<history::Regression> regs = history::findRegressions(*h, n->threshold_pct);
  // A series shorter than the test needs (min_segment runs on each side of a change) is not tested at all.
  const size_t minRuns = 2 * static_cast<size_t>(std::max(1, detect.min_segment));
  size_t tooShort = 0;
  for (const history::Series& s : h->series)
    tooShort += s.points.size() < minRuns;
  // With --json - the JSON is stdout's only content.
  FILE* out = summaryStream(a.json_out);
  std::fprintf(out,
               "%zu runs, %zu series%s; %zu regressions (latest change point, E-Divisive p <= %g, worse by more than "
               "%g%%)\n",
               h->runs.size(), h->series.size(), a.by_host ? " (one per node within each kind)" : " (one per kind)",
               regs.size(), n->max_p_value, n->threshold_pct);
  if (tooShort > 0) {
    std::fprintf(out, "%zu of %zu series too few runs to test (a change point needs %zu runs on each side)\n", tooShort,
                 h->series.size(), minRuns / 2);
  }
  if (!h->injected.empty()) {
    std::fprintf(out, "%zu %s with stand-ins or injected faults left out (history list marks them)\n",
                 h->injected.size(), h->injected.size() == 1 ? "run" : "runs");
  }
  for (const history::Regression& r : regs) {
    std::string fp;
    for (const std::string& c : r.fingerprint_changes)
      fp += (fp.empty() ? " [" : ", ") + c;
    if (!fp.empty()) fp += "]";
    std::fprintf(out, "  %+.1f%%  %s  %s: %.4g -> %.4g %s since %s %s on %s%s; rule: %s\n", r.change.change_pct,
                 r.series->metric.field.c_str(), printable(r.series->id, 200).c_str(), r.change.before, r.change.after,
                 r.series->metric.unit.c_str(), printable(r.run->git_sha.substr(0, 12)).c_str(), r.run->time.c_str(),
                 printable(r.run->nodeOrHost(), 64).c_str(), printable(fp, 300).c_str(), r.decision.rule.c_str());
  }
  if (!a.json_out.empty()) {
    nlohmann::json arr = nlohmann::json::array();
    for (const history::Regression& r : regs)
      arr.push_back(history::toJson(r));
    Status st = writeOutput(a.json_out, jsonText({{"regressions", arr}}));
    if (!st.isOk()) return fail(kCmd, kExitUsage, "--json: " + st.message());
  }
  return regs.empty() ? kExitOk : kExitCheckFailed;
}

int runFleet(const HistoryArgs& a) {
  auto n = parseNumbers(a);
  if (!n.isOk()) return fail(kCmd, kExitUsage, n.status().message());
  auto store = openStore(a, history::OpenMode::kReadOnly);
  if (!store.isOk()) return fail(kCmd, exitCodeOf(store.status()), store.status().message());
  if (Status st = checkKind(**store, a.kind); !st.isOk()) return fail(kCmd, kExitUsage, st.message());
  auto h = history::loadHistory(**store, {a.kind, false});
  if (!h.isOk()) return fail(kCmd, kExitRuntime, h.status().message());
  history::FleetOptions fo;
  fo.z_threshold = n->z_threshold;
  fo.min_change_pct = n->min_change_pct;
  fo.min_hosts = n->min_hosts;
  const std::vector<history::FleetOutlier> found = history::fleetOutliers(*h, fo);
  auto states = (*store)->nodeStates();
  if (!states.isOk()) return fail(kCmd, kExitRuntime, states.status().message());
  const std::vector<history::FleetNode> nodes = history::fleetNodes(*h, *states, found);
  FILE* out = summaryStream(a.json_out);
  // Every node with its latest verdict and scheduler state, out-of-service and failing nodes first.
  std::string kind;
  for (const history::FleetNode& n : nodes) {
    if (n.machine != kind) {
      kind = n.machine;
      int count = 0, outOfService = 0, failing = 0, unchecked = 0;
      for (const history::FleetNode& m : nodes) {
        if (m.machine != kind) continue;
        ++count;
        outOfService += m.outOfService();
        failing += m.failed();
        unchecked += m.unchecked();
      }
      if (kind.empty()) {
        std::fprintf(out, "no counted run in the history: %d nodes with a recorded state\n", count);
      } else {
        std::fprintf(out,
                     "%s: %d node%s, %d out of service, %d failing their latest run, %d whose latest run checked "
                     "nothing (EMPTY)\n",
                     printable(kind, 80).c_str(), count, count == 1 ? "" : "s", outOfService, failing, unchecked);
      }
    }
    std::string failures;
    if (n.latest && n.latest->check_details.contains("failures") && n.latest->check_details["failures"].is_array()) {
      for (const auto& f : n.latest->check_details["failures"]) {
        if (!f.is_object() || !f.contains("name") || !f["name"].is_string()) continue;
        if (failures.size() > 200) {
          failures += ", ...";
          break;
        }
        const std::string category =
            f.contains("category") && f["category"].is_string() ? f["category"].get<std::string>() : std::string();
        failures +=
            (failures.empty() ? "" : ", ") + category + (category.empty() ? "" : ": ") + f["name"].get<std::string>();
      }
    }
    std::string state = n.state ? n.state->state : "state not recorded";
    if (n.state && !n.state->reason.empty()) state += " (" + n.state->reason + ")";
    std::string below;
    if (n.outliers > 0) {
      below = "; below its fleet on " + std::to_string(n.outliers) + " series" +
              (n.failed() ? "" : " (reported, not a failure of its own thresholds)");
    }
    std::fprintf(out, "  %-20s %-4s %s; run %lld at %s%s%s\n", printable(n.name, 64).c_str(),
                 n.latest && !n.latest->verdict.empty() ? n.latest->verdict.c_str() : "-",
                 printable(state, 300).c_str(), static_cast<long long>(n.latest ? n.latest->id : 0),
                 n.latest ? n.latest->time.c_str() : "-",
                 failures.empty() ? "" : ("; failed: " + printable(failures, 300)).c_str(), below.c_str());
  }
  if (!h->injected.empty()) {
    std::fprintf(out, "%zu %s with stand-ins or injected faults, counted nowhere:\n", h->injected.size(),
                 h->injected.size() == 1 ? "run" : "runs");
    for (const history::RunInfo& r : h->injected) {
      std::fprintf(out, "  run %lld %s %s %s at %s: %s\n", static_cast<long long>(r.id),
                   printable(r.machine(), 80).c_str(),
                   printable(history::nodeLabel(r.slurm_node, r.node, r.host), 120).c_str(),
                   r.verdict.empty() ? "-" : r.verdict.c_str(), r.time.c_str(), printable(r.injected, 300).c_str());
    }
  }
  std::fprintf(out,
               "%zu series; %zu outliers (modified z beyond %g on the worse side, at least %g%% off the median, "
               "fleets of %d or more hosts)\n",
               h->series.size(), found.size(), fo.z_threshold, fo.min_change_pct, fo.min_hosts);
  for (const history::FleetOutlier& f : found) {
    std::fprintf(out, "  %s  %s: %.4g %s, fleet median %.4g (MAD %.3g); rule: %s\n", printable(f.label, 80).c_str(),
                 printable(f.series->id, 200).c_str(), f.value, f.series->metric.unit.c_str(), f.median, f.mad,
                 f.decision.rule.c_str());
  }
  if (!a.json_out.empty()) {
    nlohmann::json arr = nlohmann::json::array();
    for (const history::FleetOutlier& f : found)
      arr.push_back(history::toJson(f));
    nlohmann::json nodeArr = nlohmann::json::array();
    for (const history::FleetNode& n : nodes)
      nodeArr.push_back(history::toJson(n));
    nlohmann::json injectedArr = nlohmann::json::array();
    for (const history::RunInfo& r : h->injected)
      injectedArr.push_back(history::injectedRunJson(r));
    Status st = writeOutput(a.json_out, jsonText({{"outliers", arr}, {"nodes", nodeArr}, {"injected", injectedArr}}));
    if (!st.isOk()) return fail(kCmd, kExitUsage, "--json: " + st.message());
  }
  return found.empty() ? kExitOk : kExitCheckFailed;
}

// The name a node's state is recorded under: a Slurm NodeName its runs (or earlier states) name, or a machine's
// identity (the NodeName of that machine's newest run that names one, else the identity itself). A host name is no
// key (cloud VMs share them); a name that matches nothing is refused with what is known.
StatusOr<std::string> nodeStateKey(history::HistoryStore& store, const std::string& name) {
  PEERLAB_ASSIGN_OR_RETURN(std::vector<history::RunInfo> runs, store.runs());
  PEERLAB_ASSIGN_OR_RETURN(std::vector<history::NodeState> states, store.nodeStates());
  std::string key;
  std::set<std::string> names, ids, hostMachines;
  for (const history::RunInfo& r : runs) {
    if (!r.slurm_node.empty()) names.insert(r.slurm_node);
    if (!r.node.empty()) ids.insert(r.node);
    if (r.host == name) hostMachines.insert(r.nodeOrHost());
    if (r.slurm_node == name) key = name;
    if (key.empty() && r.node == name) key = r.slurm_node.empty() ? name : r.slurm_node;
  }
  for (const history::NodeState& s : states) {
    names.insert(s.node);
    if (key.empty() && s.node == name) key = name;
  }
  if (!key.empty()) return key;
  std::string known;
  for (const auto* set : {&names, &ids}) {
    for (const std::string& k : *set) {
      if (known.size() > 300) break;
      known += (known.empty() ? "" : ", ") + printable(k, 64);
    }
  }
  std::string hint;
  if (!hostMachines.empty()) {
    hint = "; \"" + printable(name, 64) + "\" is the host name of " + std::to_string(hostMachines.size()) + " machine" +
           (hostMachines.size() == 1 ? "" : "s") + " (" + printable(*hostMachines.begin(), 64) +
           (hostMachines.size() > 1 ? ", ..." : "") + "): name the machine's identity or its Slurm NodeName";
  }
  return PEERLAB_INVALID_ARGUMENT("--node " + printable(name, 64) +
                                  ": no run names that Slurm NodeName or machine identity, and no state was recorded "
                                  "for it (known: " +
                                  (known.empty() ? std::string("none") : known) + ")" + hint +
                                  "; --new-node records a NodeName Slurm knows that has no run yet");
}

int runNodeState(const HistoryArgs& a) {
  auto store = openStore(a, history::OpenMode::kExisting);
  if (!store.isOk()) return fail(kCmd, exitCodeOf(store.status()), store.status().message());
  history::NodeState state = a.node_state;
  if (!a.new_node) {
    auto key = nodeStateKey(**store, state.node);
    if (!key.isOk()) {
      return fail(kCmd, key.status().code() == StatusCode::kInvalidArgument ? kExitUsage : kExitRuntime,
                  "node-state: " + key.status().message());
    }
    state.node = *key;
  } else if (!report::isSlurmNodeName(state.node)) {
    return fail(kCmd, kExitUsage, "node-state: --node " + printable(state.node, 64) + ": not a Slurm NodeName");
  }
  Status st = (*store)->recordNodeState(state);
  if (!st.isOk()) {
    return fail(kCmd, st.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitRuntime,
                "node-state: " + st.message());
  }
  std::printf("node %s: %s%s\n", printable(state.node, 80).c_str(), a.node_state.state.c_str(),
              a.node_state.reason.empty() ? "" : (" (" + printable(a.node_state.reason, 200) + ")").c_str());
  return kExitOk;
}

int runHtml(const HistoryArgs& a) {
  if (a.out_dir.empty()) return fail(kCmd, kExitUsage, "html: --out DIR is required");
  if (a.out_dir == "-") return fail(kCmd, kExitUsage, "html: --out takes a directory, not \"-\"");
  auto n = parseNumbers(a);
  if (!n.isOk()) return fail(kCmd, kExitUsage, n.status().message());
  // Everything that can be refused is checked before the output directory is touched.
  auto store = openStore(a, history::OpenMode::kReadOnly);
  if (!store.isOk()) return fail(kCmd, exitCodeOf(store.status()), store.status().message());
  history::SiteOptions so;
  so.detect = detectOptions(*n);
  so.threshold_pct = n->threshold_pct;
  so.fleet.z_threshold = n->z_threshold;
  so.fleet.min_hosts = n->min_hosts;
  auto model = history::buildSiteModel(**store, so);
  if (!model.isOk()) {
    const int code = model.status().code() == StatusCode::kInvalidArgument ? kExitUsage : kExitRuntime;
    return fail(kCmd, code, "html: " + model.status().message());
  }
  FILE* out = summaryStream(a.model_out);
  if (!a.model_out.empty()) {
    Status st = writeOutput(
        a.model_out, report::toJson(*model).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    if (!st.isOk()) return fail(kCmd, kExitUsage, "--model: " + st.message());
  }
#ifdef PEERLAB_HAVE_HISTORY_SITE
  std::vector<std::string> failures;
  Status st = report::renderHistorySite(*model, a.out_dir, &failures);
  if (!failures.empty()) {
    // The other kinds and index.html are written; the kinds that are not are named on one line.
    return fail(kCmd, kExitUsage, "html: " + st.message());
  }
  if (!st.isOk()) return fail(kCmd, kExitRuntime, "html: " + st.message());
  std::fprintf(out, "wrote %s (%zu kinds)\n", printable(a.out_dir).c_str(), model->kinds.size());
#else
  if (a.model_out.empty()) {
    Status st =
        writeOutput((std::filesystem::path(a.out_dir) / "history.json").string(), report::toJson(*model).dump() + "\n");
    if (!st.isOk()) return fail(kCmd, kExitRuntime, "html: " + st.message());
  }
  std::fprintf(out, "the site renderer (harness/report/render/site.h) is not built in: wrote the model only\n");
#endif
  return kExitOk;
}

CLI::App* addDb(CLI::App* s, HistoryArgs& a, bool create_flag) {
  s->add_option("--db", a.db, "SQLite path or postgresql:// URL (an existing history)")->required();
  if (create_flag) s->add_flag("--create", a.create, "Create an empty history when --db names none");
  return s;
}

void addDetectOptions(CLI::App* s, HistoryArgs& a) {
  s->add_option("--min-change", a.min_change, "Smallest change point kept, percent of the median (default 3)");
  s->add_option("--p-value", a.p_value, "Permutation test significance, 0 to 1 (default 0.01)");
  s->add_option("--permutations", a.permutations, "Permutations per test, 1 to 100000 (default 99)");
}

std::function<int()> setup(CLI::App& sub) {
  auto a = std::make_shared<HistoryArgs>();
  sub.require_subcommand(1);
  CLI::App* ingest = sub.add_subcommand("ingest", "Store run files (idempotent; one transaction per file)");
  ingest->add_option("--db", a->db, "SQLite path or postgresql:// URL (created when missing)")->required();
  ingest->add_option("--kind", a->kind,
                     "Machine kind of these runs (default: the run file's `kind`); held against each run's hardware");
  ingest->add_flag("--kind-override", a->kind_override,
                   "Store under --kind even where it contradicts a run's hardware");
  ingest->add_option("files", a->files, "Run files")->required();

  CLI::App* remove = sub.add_subcommand("remove", "Remove stored runs by id or content hash (one transaction)");
  addDb(remove, *a, false);
  remove->add_option("runs", a->remove, "Run ids or content hashes (history list --json shows both)")->required();

  CLI::App* list = sub.add_subcommand("list", "List stored runs");
  addDb(list, *a, true);
  list->add_flag("--json", a->json, "Print {\"runs\":[...]} as JSON (stdout holds only the JSON)");

  CLI::App* regs = sub.add_subcommand("regressions", "Series whose latest change point is a worsening; exit 1 if any");
  addDb(regs, *a, true);
  regs->add_option("--json", a->json_out, "Write {\"regressions\":[...]} here (\"-\": stdout, the summary to stderr)");
  regs->add_option("--kind", a->kind, "Only runs of this kind (or host)");
  regs->add_flag("--by-host", a->by_host, "One series per node within each kind (never two kinds in one series)");
  regs->add_option("--threshold", a->threshold, "Worsening that counts, percent: 3 or 2.5% (default 3)");
  addDetectOptions(regs, *a);

  CLI::App* fleet =
      sub.add_subcommand("fleet",
                         "Each kind's nodes (out of service and failing first) and the hosts whose latest figures sit "
                         "outside their fleet; exit 1 if any sits outside");
  addDb(fleet, *a, true);
  fleet->add_option("--kind", a->kind, "Only this machine kind");
  fleet->add_option("--json", a->json_out,
                    "Write {\"outliers\":[...],\"nodes\":[...]} here (\"-\": stdout, the summary to stderr)");
  fleet->add_option("--z", a->z, "Modified z-score threshold, 0.5 to 100 (default 3.5)");
  fleet->add_option("--min-change", a->min_change, "And at least this far from the median, percent (default 3)");
  fleet->add_option("--min-hosts", a->min_hosts, "Smallest fleet, 3 or more (default 4)");

  CLI::App* nodeState = sub.add_subcommand(
      "node-state", "Record a node's scheduler state (the Slurm sweep records every node it looks at)");
  addDb(nodeState, *a, true);
  nodeState
      ->add_option("--node", a->node_state.node,
                   "The node: its Slurm NodeName (as its runs record it) or its machine identity (gpus-...)")
      ->required();
  nodeState->add_flag("--new-node", a->new_node, "--node is a Slurm NodeName that has no run in the history yet");
  nodeState->add_option("--state", a->node_state.state, "in_service, drained or down")->required();
  nodeState->add_option("--reason", a->node_state.reason, "The scheduler's reason (a drain reason)");
  nodeState->add_option("--source", a->node_state.source, "What records it (default peerlab)")->default_str("peerlab");
  a->node_state.source = "peerlab";

  CLI::App* html = sub.add_subcommand("html", "Write the history site: one page per machine kind");
  addDb(html, *a, true);
  html->add_option("--out", a->out_dir, "Output directory (created when missing)")->required();
  html->add_option("--threshold", a->threshold, "Worsening listed as a regression, percent (default 3)");
  html->add_option("--model", a->model_out, "Also write the site's data model (JSON) here (\"-\": stdout)");
  addDetectOptions(html, *a);

  sub.footer(
      "Examples:\n"
      "  peerlab history ingest --db history.sqlite reports/runs/*.json.gz\n"
      "  peerlab history list --db postgresql://peerlab@db/peerlab --json\n"
      "  peerlab history regressions --db history.sqlite --json regressions.json\n"
      "  peerlab history fleet --db history.sqlite --kind h200-x4-nvswitch\n"
      "  peerlab history html --db history.sqlite --out site/\n"
      "  peerlab history remove --db history.sqlite 12\n"
      "  peerlab history node-state --db history.sqlite --node gpu07 --state drained --reason 'peerlab: ...'");
  return [a, ingest, remove, list, regs, fleet, nodeState, html]() -> int {
    if (ingest->parsed()) return runIngest(*a);
    if (remove->parsed()) return runRemove(*a);
    if (list->parsed()) return runList(*a);
    if (regs->parsed()) return runRegressions(*a);
    if (fleet->parsed()) return runFleet(*a);
    if (nodeState->parsed()) return runNodeState(*a);
    if (html->parsed()) return runHtml(*a);
    return fail(kCmd, kExitUsage, "no subcommand (ingest, remove, list, regressions, fleet, node-state, html)");
  };
}

}  // namespace

PEERLAB_REGISTER_COMMAND(history, "history",
                         "Store run files and find regressions over their history (SQLite or PostgreSQL)", setup);

}  // namespace peerlab::cli
