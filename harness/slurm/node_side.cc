#include "harness/slurm/node_side.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "harness/health/health.h"
#include "harness/history/store.h"
#include "harness/report/report.h"
#include "harness/slurm/client.h"
#include "harness/slurm/journal.h"
#include "harness/slurm/log.h"
#include "harness/slurm/outcome.h"
#include "harness/slurm/settings.h"
#include "harness/slurm/sweep.h"
#include "reference/core/files.h"
#include "reference/core/process.h"
#include "reference/core/text.h"

extern char** environ;

namespace peerlab::slurm {
namespace {

// The exit of a job whose qualify did not run to an exit of its own (README: runtime/setup error).
constexpr int kSetupExit = 4;

// The binary that runs health and qualify here: the settings' [slurm] peerlab, else this one.
std::string peerlabBinary(const NodeSideOptions& o, const Settings& s) {
  if (!o.peerlab.empty()) return o.peerlab;
  return s.peerlab.empty() ? selfExecutable() : s.peerlab;
}

CommandOptions commandOptions(const Settings& s) {
  CommandOptions c;
  c.bin_dir = s.bin_dir;
  c.slurm_conf = !s.slurm_conf.empty() ? s.slurm_conf : (std::getenv("SLURM_CONF") ? std::getenv("SLURM_CONF") : "");
  c.timeout_s = s.command_timeout_s;
  return c;
}

// The environment changes for what peerlab starts: the settings' [environment] and SLURM_CONF; `clean` also removes
// what would change the program itself (LD_PRELOAD, LD_AUDIT, PEERLAB_FAULT*).
std::vector<std::string> childEnv(const Settings& s, bool clean) {
  std::vector<std::string> env;
  if (clean) {
    env.push_back("LD_PRELOAD");
    env.push_back("LD_AUDIT");
    for (char** e = environ; e && *e; ++e) {
      const std::string kv = *e;
      if (kv.rfind("PEERLAB_FAULT", 0) == 0) env.push_back(kv.substr(0, kv.find('=')));
    }
  }
  if (!s.slurm_conf.empty()) env.push_back("SLURM_CONF=" + s.slurm_conf);
  for (const auto& [k, v] : s.environment)
    env.push_back(k + "=" + v);
  return env;
}

// The history of the settings: a PostgreSQL database gets its schema when it has none yet (migrations take turns); a
// SQLite path must exist (nothing is created on a node's local disk).
std::unique_ptr<history::HistoryStore> openHistory(const Settings& s, Log& log) {
  if (s.db.empty()) return nullptr;
  auto url = databaseUrl(s);
  if (!url.isOk()) {
    log.line("history: " + url.status().message());
    return nullptr;
  }
  const auto mode = history::isPostgresUrl(s.db) ? history::OpenMode::kCreate : history::OpenMode::kExisting;
  auto store = history::HistoryStore::open(*url, mode);
  if (!store.isOk()) {
    log.line("history unreachable (" + store.status().message() + "): records are spooled in " + s.spool_dir);
    return nullptr;
  }
  return std::move(*store);
}

// Drains `node` with `reason` by the one rule: never over a drain someone else set (a reason peerlab's journal does
// not record as its own), intent and fact journaled around the scontrol call. `info`: the node as Slurm shows it
// (nullopt when Slurm did not say). Returns whether the node is drained with `reason` now.
bool drainOwned(Client& slurm, Recorder& rec, Log& log, const std::string& node, const std::string& reason,
                const std::optional<NodeInfo>& info, const std::string& source) {
  if (info && info->drained()) {
    if (info->reason == reason) return true;
    if (!ownsDrain(rec.nodeJournal(node), info->reason)) {
      log.line(node,
               "not draining: drained by someone else (\"" + info->reason + "\"); would have said \"" + reason + "\"");
      return false;
    }
  }
  history::JournalEntry e;
  e.node = node;
  e.step = "drain";
  e.reason = reason;
  e.source = source;
  rec.record(e).ignore();
  if (Status st = slurm.drain(node, reason); !st.isOk()) {
    log.line(node, "scontrol could not drain it (\"" + reason + "\"): " + st.message());
    return false;
  }
  e.step = "drained";
  rec.record(e).ignore();
  rec.recordState({node, "drained", reason, "", "peerlab-slurm-" + source}).ignore();
  log.line(node, "drained \"" + reason + "\"");
  return true;
}

// A setup error before the settings could be read: the documented action is to drain (the file that could say
// otherwise did not read), with the reason naming the file and line.
int settingsBroken(const std::string& who, const std::string& node, const Status& why) {
  Log log(who);
  const Judgement j = setupError(why.message());
  log.line(node, "settings: " + why.message() + ": a setup error; drained (the settings' on_setup_error did not read)");
  auto slurm = makeCommandClient(commandOptions(Settings{}));
  Recorder rec(nullptr, "", who, log);
  std::optional<NodeInfo> info;
  if (auto i = slurm->nodes({node}); i.isOk()) info = i->front();
  drainOwned(*slurm, rec, log, node, j.reason, info, who);
  return 1;
}

// The settings' [environment] for this process and what it starts (NVML is read here too).
void applyEnvironment(const Settings& s) {
  for (const auto& [k, v] : s.environment)
    ::setenv(k.c_str(), v.c_str(), 1);
  if (!s.slurm_conf.empty()) ::setenv("SLURM_CONF", s.slurm_conf.c_str(), 1);
}

struct Loaded {
  Settings settings;
  std::unique_ptr<Log> log;
};

StatusOr<Loaded> load(const std::string& who, const NodeSideOptions& o) {
  bool named = false;
  const std::string path = settingsPath(o.settings_path, &named);
  PEERLAB_ASSIGN_OR_RETURN(Settings s, loadSettings(path, named));
  applyEnvironment(s);
  Loaded l;
  l.log = std::make_unique<Log>(who, s.log);
  l.settings = std::move(s);
  return l;
}

// The GPUs of the job's allocation (SLURM_JOB_GPUS: their /dev/nvidia minor numbers, "0,2" or "0-3") as a
// CUDA_VISIBLE_DEVICES for qualify, when the job holds fewer than the node has; "" for the whole node.
StatusOr<std::string> allocationGpus(const std::string& list) {
  std::vector<unsigned> minors;
  std::istringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    const size_t dash = item.find('-');
    const std::string lo = item.substr(0, dash), hi = dash == std::string::npos ? lo : item.substr(dash + 1);
    if (lo.empty() || hi.empty() || lo.size() > 4 || hi.size() > 4 ||
        lo.find_first_not_of("0123456789") != std::string::npos ||
        hi.find_first_not_of("0123456789") != std::string::npos || std::stoul(hi) < std::stoul(lo)) {
      return PEERLAB_INVALID_ARGUMENT("SLURM_JOB_GPUS \"" + printable(list, 60) + "\" is not a list of GPU numbers");
    }
    for (unsigned v = std::stoul(lo); v <= std::stoul(hi); ++v)
      minors.push_back(v);
  }
  size_t total = 0;
  PEERLAB_ASSIGN_OR_RETURN(std::vector<std::string> uuids, health::uuidsOfMinors(minors, &total));
  if (uuids.size() >= total) return std::string();
  std::string out;
  for (const std::string& u : uuids)
    out += (out.empty() ? "" : ",") + u;
  return out;
}

// Runs `argv` under `budget_s`, its output into `output`. `started` false when it could not start.
process::ProcessResult runChild(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                                const std::string& output, double budget_s, bool* started, std::string* error) {
  process::ProcessOptions po;
  po.argv = argv;
  po.env = env;
  po.stdout_path = output;
  po.stderr_path = output;
  po.timeout = std::chrono::milliseconds(static_cast<long long>(budget_s * 1000));
  po.kill_grace = std::chrono::seconds(5);
  auto r = process::runProcess(po);
  *started = r.isOk();
  if (!r.isOk()) {
    *error = r.status().message();
    return {};
  }
  return *r;
}

std::string lastLines(const std::string& path, int n) {
  std::string t = tailOfFile(path, n);
  for (char& c : t)
    if (c == '\n') c = ' ';
  return t;
}

// A directory of its own for one gate run: made here (never one that exists: a user could have planted links in it).
StatusOr<std::string> freshDir(const std::string& parent, const std::string& name) {
  if (::mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST) {
    return PEERLAB_UNAVAILABLE("cannot make " + parent + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (::lstat(parent.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return PEERLAB_UNAVAILABLE(parent + ": not a directory");
  }
  if (::geteuid() == 0 && (st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH)))) {
    return PEERLAB_UNAVAILABLE(parent + ": writable by a user other than root; refused");
  }
  for (int i = 0; i < 100; ++i) {
    const std::string dir = parent + "/" + name + (i ? "-" + std::to_string(i + 1) : "");
    if (::mkdir(dir.c_str(), 0750) == 0) return dir;
    if (errno != EEXIST) return PEERLAB_UNAVAILABLE("cannot make " + dir + ": " + std::strerror(errno));
  }
  return PEERLAB_UNAVAILABLE("no fresh directory for " + name + " under " + parent);
}

std::vector<std::string> qualifyArgv(const Settings& s, const std::string& peerlab, qualify::Level level,
                                     const std::string& out, const std::string& node) {
  std::vector<std::string> argv = {peerlab, "qualify", "--level", std::string(qualify::levelName(level)),
                                   "--out", out,       "--node",  node};
  if (!s.qualify_config.empty()) argv.insert(argv.end(), {"--config", s.qualify_config});
  if (!s.qualify_kind.empty()) argv.insert(argv.end(), {"--kind", s.qualify_kind});
  argv.insert(argv.end(), s.qualify_options.begin(), s.qualify_options.end());
  return argv;
}

std::string uts() {
  char buf[256] = {};
  const ssize_t n = ::readlink("/proc/self/ns/uts", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, n) : "";
}

}  // namespace

std::string thisNode(const std::string& option) {
  if (!option.empty()) return option;
  const char* env = std::getenv("SLURMD_NODENAME");
  if (env && *env) return env;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) return "";
  std::string h = host;
  return h.substr(0, h.find('.'));
}

bool jobStepsHere() {
  const std::string mine = uts();
  DIR* d = ::opendir("/proc");
  if (!d) return false;
  bool found = false;
  while (dirent* e = ::readdir(d)) {
    const std::string pid = e->d_name;
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream comm("/proc/" + pid + "/comm");
    std::string name;
    if (!std::getline(comm, name) || name != "slurmstepd") continue;
    char buf[256] = {};
    const ssize_t n = ::readlink(("/proc/" + pid + "/ns/uts").c_str(), buf, sizeof buf - 1);
    if (n > 0 && std::string(buf, n) == mine) {
      found = true;
      break;
    }
  }
  ::closedir(d);
  return found;
}

bool gateWanted(const std::string& constraints, const std::string& comment, const std::string& feature,
                const std::string& word) {
  auto words = [](std::string text, const std::string& seps) {
    for (char& c : text)
      if (seps.find(c) != std::string::npos || static_cast<unsigned char>(c) < 0x20) c = ' ';
    std::istringstream in(text);
    std::vector<std::string> out;
    for (std::string w; in >> w;)
      out.push_back(w);
    return out;
  };
  if (!feature.empty()) {
    for (std::string f : words(constraints, "&|,[]()")) {
      f = f.substr(0, f.find('*'));
      if (f == feature) return true;
    }
  }
  if (!word.empty()) {
    for (const std::string& w : words(comment, ""))
      if (w == word) return true;
  }
  return false;
}

int runHealthcheck(const NodeSideOptions& o) {
  const std::string node = thisNode(o.node);
  auto loaded = load("healthcheck", o);
  if (!loaded.isOk()) return settingsBroken("healthcheck", node, loaded.status());
  const Settings& s = loaded->settings;
  Log& log = *loaded->log;
  if (!s.health_enabled) return 0;
  auto slurm = makeCommandClient(commandOptions(s));
  auto store = openHistory(s, log);
  Recorder rec(store.get(), s.spool_dir, "healthcheck", log);
  if (store) {
    // What this node's spool holds goes in first; then what a gone sweep left on this node is finished or undone.
    if (auto replayed = replaySpool(s.spool_dir, *store, log); !replayed.isOk())
      log.line(node, "spool not replayed: " + replayed.status().message());
    RecoverOptions ro;
    ro.nodes = {node};
    recoverLeftovers(*slurm, rec, *store, log, ro);
  }
  std::optional<NodeInfo> info;
  if (auto i = slurm->nodes({node}); i.isOk()) {
    info = i->front();
  } else {
    log.line(node, "scontrol show node failed (" + i.status().message() + "): reading NVML only");
  }
  // On a node running jobs: NVML only, no CUDA context, no copies.
  const bool busy = !info || info->busy() || jobStepsHere();
  auto tmp = TempDir::make("peerlab-health");
  if (!tmp.isOk()) return settingsBroken("healthcheck", node, tmp.status());
  const std::string runFile = tmp->file("health.json");
  char watch[32];
  std::snprintf(watch, sizeof watch, "%g", s.health_watch_s);
  std::vector<std::string> argv = {peerlabBinary(o, s), "health", "--watch", watch, "--json", runFile, "--node", node};
  if (busy) argv.push_back("--nvml-only");
  bool started = false;
  std::string error;
  const process::ProcessResult r =
      runChild(argv, childEnv(s, false), tmp->file("out"), s.health_budget_s, &started, &error);
  const Judgement j = judge(RunKind::kHealth, started, error, r, runFile, s.health_budget_s);
  const std::string mode = busy ? " (NVML only: jobs run here)" : "";
  if (j.outcome == Outcome::kPass) {
    log.line(node, "peerlab health: PASS" + mode);
    return 0;
  }
  log.line(node, "peerlab health " + j.what + mode + ": " + lastLines(tmp->file("out"), 3));
  if (j.outcome == Outcome::kSetup && s.on_setup_error == OnSetupError::kLog) {
    log.line(node, "on_setup_error = \"log\": left as it is, NOT CHECKED");
    return 1;
  }
  drainOwned(*slurm, rec, log, node, j.reason, info, "healthcheck");
  return 1;
}

int runGate(const NodeSideOptions& o) {
  const std::string node = thisNode(o.node);
  std::string context = o.context;
  if (context.empty() && std::getenv("SLURM_SCRIPT_CONTEXT")) context = std::getenv("SLURM_SCRIPT_CONTEXT");
  if (context.find("prolog") != std::string::npos) {
    context = "prolog";
  } else if (context.find("epilog") != std::string::npos) {
    context = "epilog";
  } else {
    Log("gate").line(node, "unknown context \"" + context + "\" (prolog or epilog): nothing done");
    return 0;
  }
  const bool prolog = context == "prolog";
  auto loaded = load("gate", o);
  if (!loaded.isOk()) {
    settingsBroken("gate", node, loaded.status());
    return prolog ? 1 : 0;
  }
  const Settings& s = loaded->settings;
  Log& log = *loaded->log;
  auto env = [](const char* k) { return std::string(std::getenv(k) ? std::getenv(k) : ""); };
  bool wanted = s.gate_mode == GateMode::kAll;
  if (s.gate_mode == GateMode::kOptIn) {
    wanted = gateWanted(env("SLURM_JOB_CONSTRAINTS"), env("SLURM_JOB_COMMENT"), s.gate_feature, s.gate_comment_word);
  }
  if (!wanted) return 0;
  std::string job = env("SLURM_JOB_ID");
  if (job.empty() || job.size() > 20 || job.find_first_not_of("0123456789") != std::string::npos) job = "nojob";
  auto slurm = makeCommandClient(commandOptions(s));
  auto store = openHistory(s, log);
  Recorder rec(store.get(), s.spool_dir, "gate", log);
  Judgement j;
  std::string dir;
  std::vector<std::string> qenv = childEnv(s, false);
  // A job that holds some of the node's GPUs gets those qualified, never the GPUs of other jobs.
  if (const std::string gpus = env("SLURM_JOB_GPUS"); !gpus.empty()) {
    auto visible = allocationGpus(gpus);
    if (!visible.isOk()) {
      j = setupError("cannot tell the job's GPUs: " + visible.status().message());
    } else if (!visible->empty()) {
      qenv.push_back("CUDA_VISIBLE_DEVICES=" + *visible);
      qenv.push_back("CUDA_DEVICE_ORDER=PCI_BUS_ID");
      log.line(node, "job " + job + " holds GPUs " + gpus + " of the node: qualifying those (" + *visible + ")");
    }
  }
  auto made = j.reason.empty() ? freshDir(s.gate_bundle_dir, "gate-" + job + "-" + node + "-" + context)
                               : StatusOr<std::string>(PEERLAB_UNAVAILABLE(j.what));
  if (!made.isOk()) {
    if (j.reason.empty()) j = setupError(made.status().message());
  } else {
    dir = *made;
    bool started = false;
    std::string error;
    const process::ProcessResult r = runChild(qualifyArgv(s, peerlabBinary(o, s), s.gate_level, dir + "/bundle", node),
                                              qenv, dir + "/console.log", s.gate_budget_s, &started, &error);
    const std::string results = report::bundleResults(dir + "/bundle");
    j = judge(RunKind::kQualify, started, error, r, results, s.gate_budget_s);
    if (!results.empty() && s.gate_ingest && !s.db.empty()) {
      auto stored = rec.ingest(results, s.qualify_kind);
      if (!stored.isOk()) log.line(node, "gate bundle not ingested: " + stored.status().message());
    }
  }
  if (j.outcome == Outcome::kPass) {
    log.line(node, "job " + job + " " + context + ": PASS (bundle " + dir + ")");
    return 0;
  }
  log.line(node, "job " + job + " " + context + ": " + std::string(outcomeName(j.outcome)) + ": " + j.what +
                     " (bundle " + (dir.empty() ? std::string("none") : dir) + ")");
  if (j.outcome == Outcome::kSetup && s.on_setup_error == OnSetupError::kLog) {
    log.line(node, "on_setup_error = \"log\": the job runs, the node NOT CHECKED");
    return 0;
  }
  std::optional<NodeInfo> info;
  if (auto i = slurm->nodes({node}); i.isOk()) info = i->front();
  drainOwned(*slurm, rec, log, node, j.reason, info, "gate");
  // A failed prolog makes Slurm requeue the job elsewhere; after the job the drain is all that is needed.
  return prolog ? 1 : 0;
}

int runJob(const NodeSideOptions& o) {
  const std::string node = thisNode(o.node);
  Log log("job");
  auto write = [&](const nlohmann::json& j) {
    Status st = writeTextFile(o.dir + "/job.json", j.dump(2) + "\n");
    if (!st.isOk()) log.line(node, "cannot write " + o.dir + "/job.json: " + st.message());
  };
  nlohmann::json out = {{"sweep", o.sweep}, {"node", node}, {"started", false}};
  bool named = false;
  auto s = loadSettings(settingsPath(o.settings_path, &named), named);
  if (!s.isOk()) {
    out["error"] = "settings: " + s.status().message();
    write(out);
    return kSetupExit;
  }
  log.setFile(s->log);
  applyEnvironment(*s);
  const auto level = qualify::parseLevel(o.level);
  if (!level) {
    out["error"] = "level \"" + o.level + "\" is not " + qualify::levelNames();
    write(out);
    return kSetupExit;
  }
  bool started = false;
  std::string error;
  const auto t0 = std::chrono::steady_clock::now();
  // Nothing of the submitting side's interposers or faults runs here (sbatch exported a minimal environment; this
  // holds even when a job was submitted some other way).
  const process::ProcessResult r = runChild(qualifyArgv(*s, peerlabBinary(o, *s), *level, o.dir + "/bundle", node),
                                            childEnv(*s, true), o.dir + "/console.log", o.timeout_s, &started, &error);
  out["started"] = started;
  if (!started) out["error"] = error;
  out["rc"] = r.exit_code;
  out["signal"] = r.signal;
  out["timed_out"] = r.timed_out;
  out["wall_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  write(out);
  log.line(node, o.sweep + ": qualify " +
                     (started ? process::describeExit(
                                    r, std::chrono::milliseconds(static_cast<long long>(o.timeout_s * 1000)))
                              : "did not start: " + error));
  return started && !r.timed_out && r.signal == 0 ? r.exit_code : kSetupExit;
}

}  // namespace peerlab::slurm
