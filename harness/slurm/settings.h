#pragma once
/// The settings of `peerlab slurm`: one TOML file (/etc/peerlab/slurm.toml, beside qualify.toml), read into typed
/// values and checked. An unknown section or key, a value of the wrong type or out of range, or a line that is not
/// TOML is refused with one line naming the file, the line and the key. docs/slurm.md lists every key.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "harness/qualify/suite_spec.h"
#include "reference/core/status.h"

namespace peerlab::slurm {

/// What a health check, gate or sweep does when peerlab itself cannot run (a setup error): drain the node with a
/// reason that says so, or only log it (the node stays as it is, marked NOT CHECKED in the log).
enum class OnSetupError { kDrain, kLog };
/// Which jobs the prolog/epilog gate qualifies the node for.
enum class GateMode { kOptIn, kAll, kOff };

struct Settings {
  std::string source;  ///< the file read ("" for the built-in defaults)

  // [slurm]
  std::string bin_dir;            ///< Slurm's client commands ("" : the usual places)
  std::string slurm_conf;         ///< SLURM_CONF for them and for the jobs ("": Slurm's default)
  double command_timeout_s = 30;  ///< deadline of one Slurm command
  OnSetupError on_setup_error = OnSetupError::kDrain;
  std::string log;      ///< a file every command appends its log lines to ("": stderr and syslog only)
  std::string peerlab;  ///< the peerlab binary the sweep's jobs run on the nodes ("": this one)
  std::string spool_dir = "/var/spool/peerlab";  ///< node-local: drain records the history could not take yet

  // [history]
  std::string db;             ///< the history (a postgresql:// URL or libpq string without password, or a SQLite path)
  std::string password_file;  ///< a file holding the database password alone, readable by its owner only

  // [health]
  bool health_enabled = true;
  double health_budget_s = 40;
  double health_watch_s = 2;

  // [gate]
  GateMode gate_mode = GateMode::kOptIn;
  std::string gate_feature = "peerlab_gate";
  std::string gate_comment_word = "peerlab-gate";
  qualify::Level gate_level = qualify::Level::kQuick;
  double gate_budget_s = 120;
  std::string gate_bundle_dir = "/var/lib/peerlab/slurm";
  bool gate_ingest = true;  ///< ingest gate bundles into [history] db when one is named

  // [sweep]
  qualify::Level sweep_level = qualify::Level::kStandard;
  double sweep_timeout_s = 900;
  double sweep_wait_s = 3600;
  double sweep_poll_s = 10;
  int sweep_batch = 1;
  double sweep_max_out_pct = 0;  ///< > 0: the batch is this share of the node set (rounded up), not `sweep_batch`
  std::string sweep_bundle_dir;  ///< shared by the nodes and the host running the sweep
  bool sweep_drain_outliers = false;

  // [qualify]
  std::string qualify_config;                ///< qualify's --config
  std::string qualify_kind;                  ///< qualify's --kind
  std::vector<std::string> qualify_options;  ///< more qualify options, one argument each

  // [environment]
  std::map<std::string, std::string> environment;  ///< set for peerlab and what it starts (health, qualify, jobs)
};

/// Where the settings are read from: `path` when given, else $PEERLAB_SLURM_SETTINGS, else
/// /etc/peerlab/slurm.toml. `explicit_choice` is set when the file was named (then it must exist).
std::string settingsPath(const std::string& path, bool* explicit_choice = nullptr);

/// Reads and checks the settings file. A missing file that was not named explicitly gives the defaults. When this
/// process runs as root, a file (or its directory) that another user can write, or that root does not own, is refused:
/// it would decide what root runs. `invalid_argument` names the file, the line and the key.
StatusOr<Settings> loadSettings(const std::string& path, bool must_exist);
/// The same checks on text (name: how messages call it).
StatusOr<Settings> parseSettings(const std::string& text, const std::string& name);

/// The database location with the password of password_file added, for this process only (never a command line or
/// an environment variable). `invalid_argument` when db itself holds a password, or the file is readable by others.
StatusOr<std::string> databaseUrl(const Settings& s);

/// The settings as TOML (every key with its value), for `peerlab slurm settings`.
std::string formatSettings(const Settings& s);

}  // namespace peerlab::slurm
