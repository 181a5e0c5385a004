// peerlab slurm: the health check, the prolog/epilog gate, the rolling sweep and the recovery of what a killed sweep
// left, over one Slurm client (harness/slurm/). What Slurm starts is a shim that execs these.
#include <pwd.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "harness/cli/command.h"
#include "harness/history/store.h"
#include "harness/slurm/client.h"
#include "harness/slurm/hostlist.h"
#include "harness/slurm/journal.h"
#include "harness/slurm/node_side.h"
#include "harness/slurm/settings.h"
#include "harness/slurm/sweep.h"
#include "reference/core/files.h"
#include "reference/core/process.h"
#include "reference/core/text.h"

namespace peerlab::cli {
namespace {

constexpr const char* kCmd = "slurm";

struct SlurmArgs {
  std::string settings;
  std::string node;
  std::string context;
  // sweep
  std::string partition, nodes, db, bundle_dir, level, crash_after;
  std::string batch, max_out, timeout, wait, poll;
  bool drain_outliers = false, dry_run = false;
  // recover
  std::string sweep;
  bool force = false;
  // job
  std::string dir;
};

StatusOr<slurm::Settings> readSettings(const SlurmArgs& a, std::string* path) {
  bool named = false;
  *path = slurm::settingsPath(a.settings, &named);
  return slurm::loadSettings(*path, named);
}

slurm::CommandOptions commandOptions(const slurm::Settings& s) {
  slurm::CommandOptions c;
  c.bin_dir = s.bin_dir;
  c.slurm_conf = s.slurm_conf;
  if (c.slurm_conf.empty() && std::getenv("SLURM_CONF")) c.slurm_conf = std::getenv("SLURM_CONF");
  c.timeout_s = s.command_timeout_s;
  return c;
}

// The history named by the settings or --db (never with a password on the command line).
StatusOr<std::unique_ptr<history::HistoryStore>> openHistory(const slurm::Settings& s, const std::string& db,
                                                             history::OpenMode mode) {
  slurm::Settings with = s;
  if (!db.empty()) {
    if (redactSecrets(db) != db) {
      return PEERLAB_INVALID_ARGUMENT(
          "--db holds a password: a password is never written on a command line; name a "
          "[history] password_file in the settings, or use PGPASSFILE");
    }
    with.db = db;
  }
  if (with.db.empty()) {
    return PEERLAB_INVALID_ARGUMENT("no history: give --db or [history] db in the settings (" +
                                    (s.source.empty() ? std::string("none read") : s.source) + ")");
  }
  PEERLAB_ASSIGN_OR_RETURN(std::string url, slurm::databaseUrl(with));
  auto store = history::HistoryStore::open(url, mode);
  if (!store.isOk()) return PEERLAB_UNAVAILABLE(store.status().message());
  return std::move(*store);
}

int runSweep(const SlurmArgs& a) {
  std::string path;
  auto settings = readSettings(a, &path);
  if (!settings.isOk()) return fail(kCmd, kExitUsage, "sweep: " + settings.status().message());
  slurm::Settings s = *settings;
  if (a.partition.empty() == a.nodes.empty()) return fail(kCmd, kExitUsage, "sweep: give --partition or --nodes");
  slurm::SweepOptions o;
  o.level = s.sweep_level;
  if (!a.level.empty()) {
    const auto l = qualify::parseLevel(a.level);
    if (!l) return fail(kCmd, kExitUsage, "sweep: --level " + printable(a.level, 40) + ": " + qualify::levelNames());
    o.level = *l;
  }
  auto seconds = [&](const std::string& opt, const std::string& text, double lo, double hi, double* out) {
    if (text.empty()) return true;
    auto v = parseNumberOption(opt, text, lo, hi);
    if (!v.isOk()) return false;
    *out = *v;
    return true;
  };
  o.timeout_s = s.sweep_timeout_s;
  o.wait_s = s.sweep_wait_s;
  o.poll_s = s.sweep_poll_s;
  if (!seconds("--timeout", a.timeout, 10, 7 * 86400, &o.timeout_s) ||
      !seconds("--wait", a.wait, 0, 7 * 86400, &o.wait_s) || !seconds("--poll", a.poll, 0.2, 3600, &o.poll_s)) {
    return fail(kCmd, kExitUsage,
                "sweep: --timeout (10 s to a week), --wait (0 to a week), --poll (0.2 to 3600 s): "
                "whole or decimal seconds");
  }
  if (!a.batch.empty() && !a.max_out.empty())
    return fail(kCmd, kExitUsage, "sweep: give --batch or --max-out, not both");
  double batch = s.sweep_batch, max_out = a.batch.empty() ? s.sweep_max_out_pct : 0;
  if (!a.batch.empty()) {
    auto v = parseNumberOption("--batch", a.batch, 1, 100000, true);
    if (!v.isOk()) return fail(kCmd, kExitUsage, "sweep: " + v.status().message());
    batch = *v;
  }
  if (!a.max_out.empty()) {
    std::string t = a.max_out;
    if (!t.empty() && t.back() == '%') t.pop_back();
    auto v = parseNumberOption("--max-out", t, 0.001, 100);
    if (!v.isOk())
      return fail(kCmd, kExitUsage,
                  "sweep: --max-out " + printable(a.max_out, 20) + ": a percentage above 0, at most 100");
    max_out = *v;
  }
  if (!a.crash_after.empty() &&
      std::find(slurm::kCrashSteps.begin(), slurm::kCrashSteps.end(), a.crash_after) == slurm::kCrashSteps.end()) {
    return fail(kCmd, kExitUsage,
                "sweep: --crash-after " + printable(a.crash_after, 20) +
                    ": reserved, resumed, submitted, running, ended or acted");
  }
  o.bundle_root = !a.bundle_dir.empty() ? a.bundle_dir : s.sweep_bundle_dir;
  if (o.bundle_root.empty() && !a.dry_run) {
    return fail(kCmd, kExitUsage,
                "sweep: no bundle directory: give --bundle-dir or [sweep] bundle_dir (a directory the "
                "nodes share with this host)");
  }
  if (!o.bundle_root.empty()) o.bundle_root = std::filesystem::absolute(o.bundle_root).lexically_normal().string();
  while (o.bundle_root.size() > 1 && o.bundle_root.back() == '/')
    o.bundle_root.pop_back();
  o.drain_outliers = a.drain_outliers || s.sweep_drain_outliers;
  o.dry_run = a.dry_run;
  o.crash_after = a.crash_after;
  o.settings_path = s.source;
  o.peerlab = s.peerlab.empty() ? selfExecutable() : s.peerlab;
  // The reservations are for the user running the sweep: its jobs run as that user.
  if (const passwd* pw = ::getpwuid(::geteuid()); pw != nullptr && pw->pw_name != nullptr) o.user = pw->pw_name;
  slurm::Log log("sweep", s.log);

  // The history first: without it nothing is reserved.
  auto store = openHistory(s, a.db, history::OpenMode::kCreate);
  if (!store.isOk()) {
    const int code = store.status().code() == StatusCode::kInvalidArgument && !a.db.empty() ? kExitUsage : kExitRuntime;
    return fail(kCmd, code, "sweep: the history cannot be opened, nothing reserved: " + store.status().message());
  }
  auto client = slurm::makeCommandClient(commandOptions(s));
  if (!a.partition.empty()) {
    auto nodes = client->partitionNodes(a.partition);
    if (!nodes.isOk()) {
      const int code = nodes.status().code() == StatusCode::kInvalidArgument ? kExitUsage : kExitRuntime;
      return fail(kCmd, code, "sweep: partition " + printable(a.partition, 60) + ": " + nodes.status().message());
    }
    o.nodes = *nodes;
    o.what = "partition " + a.partition;
  } else {
    auto nodes = slurm::expandHostlist(a.nodes);
    if (!nodes.isOk()) return fail(kCmd, kExitUsage, "sweep: --nodes: " + nodes.status().message());
    o.nodes = *nodes;
    o.what = "nodes " + a.nodes;
  }
  if (o.nodes.empty()) return fail(kCmd, kExitUsage, "sweep: no node in " + o.what);
  o.batch = max_out > 0 ? std::max(1, static_cast<int>(std::ceil(max_out / 100.0 * o.nodes.size() - 1e-9)))
                        : static_cast<int>(batch);
  if (!o.bundle_root.empty() && !a.dry_run) {
    std::error_code ec;
    std::filesystem::create_directories(o.bundle_root, ec);
    if (ec) return fail(kCmd, kExitRuntime, "sweep: cannot make " + o.bundle_root + ": " + ec.message());
  }
  const std::string level(qualify::levelName(o.level));
  const std::string settingsFile = s.source;
  const std::string peerlab = o.peerlab;
  const double timeout = o.timeout_s;
  const std::string slurmConf = commandOptions(s).slurm_conf;
  slurm::JobLauncher launcher = [=](const std::string& sweep, const std::string& node, const std::string& dir) {
    slurm::JobSpec spec;
    spec.name = slurm::sweepJobName(sweep);
    spec.node = node;
    spec.reservation = slurm::sweepReservation(sweep, node);
    spec.output = dir + "/job.log";
    spec.time_limit_min = static_cast<int>(std::ceil((timeout + 300) / 60));
    char t[32];
    std::snprintf(t, sizeof t, "%g", timeout);
    spec.argv = {peerlab, "slurm", "job",     "--sweep", sweep,       "--node", node,
                 "--dir", dir,     "--level", level,     "--timeout", t};
    if (!settingsFile.empty()) spec.argv.insert(spec.argv.end(), {"--settings", settingsFile});
    // An explicit, minimal environment: nothing of this process (LD_PRELOAD, PEERLAB_FAULT, ...) travels.
    spec.env = {{"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, {"LANG", "C"}};
    if (!slurmConf.empty()) spec.env["SLURM_CONF"] = slurmConf;
    return spec;
  };
  auto clock = slurm::realClock();
  slurm::Sweep sweep(*client, **store, *clock, log, s, o, launcher);
  const slurm::SweepResult r = sweep.run();
  std::printf("%s\n", printable(r.summary, 4000).c_str());
  return r.exit_code;
}

int runRecover(const SlurmArgs& a) {
  std::string path;
  auto settings = readSettings(a, &path);
  if (!settings.isOk()) return fail(kCmd, kExitUsage, "recover: " + settings.status().message());
  const slurm::Settings& s = *settings;
  slurm::Log log("recover", s.log);
  auto store = openHistory(s, a.db, history::OpenMode::kExisting);
  if (!store.isOk())
    return fail(kCmd, kExitRuntime, "recover: the history cannot be opened: " + store.status().message());
  auto client = slurm::makeCommandClient(commandOptions(s));
  slurm::RecoverOptions ro;
  if (!a.nodes.empty()) {
    auto nodes = slurm::expandHostlist(a.nodes);
    if (!nodes.isOk()) return fail(kCmd, kExitUsage, "recover: --nodes: " + nodes.status().message());
    ro.nodes = *nodes;
  }
  ro.sweep = a.sweep;
  ro.force = a.force;
  const std::string root = !a.bundle_dir.empty() ? a.bundle_dir : s.sweep_bundle_dir;
  if (!root.empty()) {
    auto replayed = slurm::replaySpool(root + "/spool", **store, log);
    if (!replayed.isOk()) return fail(kCmd, kExitRuntime, "recover: spool: " + replayed.status().message());
    if (*replayed > 0) std::printf("ingested %d spooled bundles\n", *replayed);
  }
  slurm::Recorder rec(store->get(), "", "recover", log);
  const slurm::RecoverResult r = slurm::recoverLeftovers(*client, rec, **store, log, ro);
  for (const std::string& line : r.lines)
    std::printf("%s\n", printable(line, 400).c_str());
  std::printf("recover: %d node%s finished or undone, %d held by a live sweep%s\n", r.nodes, r.nodes == 1 ? "" : "s",
              r.refused,
              r.ok ? "" : "; Slurm did not answer for some: run it again");
  return r.ok ? kExitOk : kExitRuntime;
}

int runSettings(const SlurmArgs& a) {
  std::string path;
  auto s = readSettings(a, &path);
  if (!s.isOk()) return fail(kCmd, kExitUsage, "settings: " + s.status().message());
  std::printf("%s", slurm::formatSettings(*s).c_str());
  return kExitOk;
}

std::function<int()> setup(CLI::App& sub) {
  auto a = std::make_shared<SlurmArgs>();
  sub.require_subcommand(1);
  auto settingsOption = [&](CLI::App* c) {
    c->add_option("--settings", a->settings,
                  "Settings file (default $PEERLAB_SLURM_SETTINGS, else /etc/peerlab/slurm.toml; docs/slurm.md)");
  };
  CLI::App* health =
      sub.add_subcommand("healthcheck", "Slurm's HealthCheckProgram: peerlab health, drain on a failure");
  settingsOption(health);
  health->add_option("--node", a->node, "This node's Slurm NodeName (default $SLURMD_NODENAME, else the host name)");

  CLI::App* gate = sub.add_subcommand("gate", "Slurm's Prolog and Epilog: qualify the node for jobs that ask for it");
  settingsOption(gate);
  gate->add_option("context", a->context, "prolog or epilog (default: $SLURM_SCRIPT_CONTEXT)");
  gate->add_option("--node", a->node, "This node's Slurm NodeName (default $SLURMD_NODENAME, else the host name)");

  CLI::App* sweep = sub.add_subcommand("sweep", "Qualify a partition or node list through Slurm, a batch at a time");
  settingsOption(sweep);
  sweep->add_option("--partition", a->partition, "The partition's nodes");
  sweep->add_option("--nodes", a->nodes, "A host list (gpu[01-16],gpu20)");
  sweep->add_option("--batch", a->batch, "Most nodes out of service at once (default [sweep] batch, 1)");
  sweep->add_option("--max-out", a->max_out, "Most nodes out of service at once as a share of the node set (5%)");
  sweep->add_option("--level", a->level, "qualify level (default [sweep] level, standard)");
  sweep->add_option("--timeout", a->timeout, "qualify's budget on a node, seconds (default 900)");
  sweep->add_option("--wait", a->wait, "How long a node's job may wait for the node's running jobs (default 3600)");
  sweep->add_option("--poll", a->poll, "Seconds between looks at the sweep's jobs (default 10)");
  sweep->add_option("--bundle-dir", a->bundle_dir,
                    "Where each sweep makes its directory (shared with the nodes; default [sweep] bundle_dir)");
  sweep->add_option("--db", a->db, "The history, without a password (default [history] db)");
  sweep->add_flag("--drain-outliers", a->drain_outliers, "Drain a node that passes but sits below its fleet");
  sweep->add_flag("--dry-run", a->dry_run, "Say which nodes would be qualified; change nothing");
  sweep->add_option("--crash-after", a->crash_after,
                    "For testing recovery: kill this sweep with SIGKILL right after a node passes this step "
                    "(reserved, resumed, submitted, running, ended, acted)");

  CLI::App* recover = sub.add_subcommand("recover", "Finish or undo what killed sweeps left (reservations, drains)");
  settingsOption(recover);
  recover->add_option("--nodes", a->nodes, "Only these nodes (a host list)");
  recover->add_option("--sweep", a->sweep, "Only this sweep's nodes");
  recover->add_option("--db", a->db, "The history, without a password (default [history] db)");
  recover->add_option("--bundle-dir", a->bundle_dir, "The sweeps' bundle directory, for its spool");
  recover->add_flag("--force", a->force, "Also take nodes whose sweep still looks alive (killed on another host)");

  CLI::App* job = sub.add_subcommand("job", "A sweep's job on its node (started by the sweep through sbatch)");
  settingsOption(job);
  job->add_option("--sweep", a->sweep, "The sweep")->required();
  job->add_option("--node", a->node, "The node")->required();
  job->add_option("--dir", a->dir, "The node's directory of the sweep")->required();
  job->add_option("--level", a->level, "qualify level")->required();
  job->add_option("--timeout", a->timeout, "qualify's budget, seconds")->required();

  CLI::App* settings = sub.add_subcommand("settings", "Read and check the settings file; print every setting");
  settingsOption(settings);

  sub.footer(
      "Examples:\n"
      "  peerlab slurm sweep --partition gpu --batch 4\n"
      "  peerlab slurm sweep --nodes 'gpu[01-64]' --max-out 5% --level standard --dry-run\n"
      "  peerlab slurm recover\n"
      "  peerlab slurm settings --settings /etc/peerlab/slurm.toml\n"
      "What Slurm starts (share/peerlab/slurm/): peerlab-healthcheck, peerlab-gate; docs/slurm.md");
  return [a, health, gate, sweep, recover, job, settings]() -> int {
    slurm::NodeSideOptions n;
    n.settings_path = a->settings;
    n.node = a->node;
    if (health->parsed()) return slurm::runHealthcheck(n);
    if (gate->parsed()) {
      n.context = a->context;
      return slurm::runGate(n);
    }
    if (job->parsed()) {
      auto t = parseNumberOption("--timeout", a->timeout, 1, 7 * 86400);
      if (!t.isOk()) return fail(kCmd, kExitUsage, "job: " + t.status().message());
      if (!report::isSlurmNodeName(a->node)) return fail(kCmd, kExitUsage, "job: --node: not a node name");
      n.sweep = a->sweep;
      n.dir = a->dir;
      n.level = a->level;
      n.timeout_s = *t;
      return slurm::runJob(n);
    }
    if (sweep->parsed()) return runSweep(*a);
    if (recover->parsed()) return runRecover(*a);
    if (settings->parsed()) return runSettings(*a);
    return fail(kCmd, kExitUsage, "no subcommand (healthcheck, gate, sweep, recover, job, settings)");
  };
}

}  // namespace

PEERLAB_REGISTER_COMMAND(slurm, "slurm", "Slurm integration: health check, prolog/epilog gate, rolling sweep, recovery",
                         setup);

}  // namespace peerlab::cli
