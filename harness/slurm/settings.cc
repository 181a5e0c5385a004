// The settings file of `peerlab slurm`, read with toml++.
#include "harness/slurm/settings.h"

#include <sys/stat.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <set>
#include <sstream>

#include "harness/history/database.h"
#include "reference/core/files.h"
#include "reference/core/text.h"

namespace peerlab::slurm {
namespace {

constexpr const char* kDefaultPath = "/etc/peerlab/slurm.toml";
// Larger settings files are not settings.
constexpr size_t kMaxSettingsBytes = 1 << 20;

std::string number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// One key of one section: how it is read and stored.
struct Key {
  const char* name;
  const char* what;  // what a good value is, for messages
  std::function<Status(const toml::node&, Settings&)> read;
};

class Reader {
 public:
  Reader(std::string name) : name_(std::move(name)) {}

  std::string where(const toml::node& n, const std::string& section, const std::string& key) const {
    const auto line = n.source().begin.line;
    return name_ + (line ? ":" + std::to_string(line) : std::string()) + ": [" + section + "] " + key;
  }

 private:
  std::string name_;
};

Status bad(const std::string& where, const std::string& why) {
  return PEERLAB_INVALID_ARGUMENT(where + ": " + why);
}

StatusOr<std::string> text(const toml::node& n, size_t max_bytes = 4096) {
  auto v = n.value<std::string>();
  if (!n.is_string() || !v) return PEERLAB_INVALID_ARGUMENT("expected a string");
  for (unsigned char c : *v) {
    if (c < 0x20 || c == 0x7f) return PEERLAB_INVALID_ARGUMENT("holds a control character");
  }
  if (v->size() > max_bytes) return PEERLAB_INVALID_ARGUMENT("longer than " + std::to_string(max_bytes) + " bytes");
  return *v;
}

StatusOr<std::string> absolutePath(const toml::node& n) {
  PEERLAB_ASSIGN_OR_RETURN(std::string p, text(n));
  if (p.empty() || p[0] != '/') return PEERLAB_INVALID_ARGUMENT("\"" + printable(p, 80) + "\" is not an absolute path");
  return p;
}

StatusOr<double> seconds(const toml::node& n, double lo, double hi) {
  if (!n.is_integer() && !n.is_floating_point()) {
    return PEERLAB_INVALID_ARGUMENT("expected a number of seconds from " + number(lo) + " to " + number(hi));
  }
  const double v = *n.value<double>();
  if (!std::isfinite(v) || v < lo || v > hi) {
    return PEERLAB_INVALID_ARGUMENT("= " + number(v) + ": expected a number of seconds from " + number(lo) + " to " +
                                    number(hi));
  }
  return v;
}

StatusOr<bool> boolean(const toml::node& n) {
  if (!n.is_boolean()) return PEERLAB_INVALID_ARGUMENT("expected true or false");
  return *n.value<bool>();
}

StatusOr<qualify::Level> level(const toml::node& n) {
  PEERLAB_ASSIGN_OR_RETURN(std::string t, text(n));
  const auto l = qualify::parseLevel(t);
  if (!l) return PEERLAB_INVALID_ARGUMENT("\"" + printable(t, 40) + "\": expected " + qualify::levelNames());
  return *l;
}

bool envName(const std::string& k) {
  if (k.empty() || (k[0] >= '0' && k[0] <= '9')) return false;
  for (char c : k) {
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

// Set by the setting, never by [environment]: they decide what runs and where it loads from.
bool forbiddenEnv(const std::string& k) {
  return k == "LD_PRELOAD" || k == "LD_AUDIT" || k.rfind("PEERLAB_FAULT", 0) == 0 || k == "PEERLAB_SLURM_SETTINGS";
}

#define PEERLAB_SET(expr, field)                   \
  [](const toml::node& n, Settings& s) -> Status { \
    auto v = expr;                                 \
    if (!v.isOk()) return v.status();              \
    s.field = *v;                                  \
    return Status::ok();                           \
  }

const std::map<std::string, std::vector<Key>>& schema() {
  static const std::map<std::string, std::vector<Key>> keys = {
      {"slurm",
       {
           {"bin_dir", "an absolute path", PEERLAB_SET(absolutePath(n), bin_dir)},
           {"conf", "an absolute path", PEERLAB_SET(absolutePath(n), slurm_conf)},
           {"command_timeout_s", "seconds", PEERLAB_SET(seconds(n, 1, 600), command_timeout_s)},
           {"on_setup_error", "\"drain\" or \"log\"",
            [](const toml::node& n, Settings& s) -> Status {
              auto v = text(n);
              if (!v.isOk()) return v.status();
              if (*v == "drain") {
                s.on_setup_error = OnSetupError::kDrain;
              } else if (*v == "log") {
                s.on_setup_error = OnSetupError::kLog;
              } else {
                return PEERLAB_INVALID_ARGUMENT("\"" + printable(*v, 40) + "\": expected \"drain\" or \"log\"");
              }
              return Status::ok();
            }},
           {"log", "an absolute path", PEERLAB_SET(absolutePath(n), log)},
           {"peerlab", "an absolute path", PEERLAB_SET(absolutePath(n), peerlab)},
           {"spool_dir", "an absolute path", PEERLAB_SET(absolutePath(n), spool_dir)},
       }},
      {"history",
       {
           {"db", "a postgresql:// URL, a libpq keyword/value string or a SQLite path",
            [](const toml::node& n, Settings& s) -> Status {
              auto v = text(n);
              if (!v.isOk()) return v.status();
              if (v->empty()) return PEERLAB_INVALID_ARGUMENT("is empty");
              if (redactSecrets(*v) != *v) {
                return PEERLAB_INVALID_ARGUMENT(
                    "holds a password: name a password_file (readable by its owner only), or use libpq's "
                    "PGPASSFILE or a service file");
              }
              s.db = *v;
              return Status::ok();
            }},
           {"password_file", "an absolute path", PEERLAB_SET(absolutePath(n), password_file)},
       }},
      {"health",
       {
           {"enabled", "true or false", PEERLAB_SET(boolean(n), health_enabled)},
           {"budget_s", "seconds", PEERLAB_SET(seconds(n, 5, 55), health_budget_s)},
           {"watch_s", "seconds", PEERLAB_SET(seconds(n, 0, 30), health_watch_s)},
       }},
      {"gate",
       {
           {"mode", "\"opt-in\", \"all\" or \"off\"",
            [](const toml::node& n, Settings& s) -> Status {
              auto v = text(n);
              if (!v.isOk()) return v.status();
              if (*v == "opt-in") {
                s.gate_mode = GateMode::kOptIn;
              } else if (*v == "all") {
                s.gate_mode = GateMode::kAll;
              } else if (*v == "off") {
                s.gate_mode = GateMode::kOff;
              } else {
                return PEERLAB_INVALID_ARGUMENT("\"" + printable(*v, 40) +
                                                "\": expected \"opt-in\", \"all\" or \"off\"");
              }
              return Status::ok();
            }},
           {"feature", "a node feature", PEERLAB_SET(text(n, 128), gate_feature)},
           {"comment_word", "a word", PEERLAB_SET(text(n, 128), gate_comment_word)},
           {"level", "a qualify level", PEERLAB_SET(level(n), gate_level)},
           {"budget_s", "seconds", PEERLAB_SET(seconds(n, 10, 86400), gate_budget_s)},
           {"bundle_dir", "an absolute path", PEERLAB_SET(absolutePath(n), gate_bundle_dir)},
           {"ingest", "true or false", PEERLAB_SET(boolean(n), gate_ingest)},
       }},
      {"sweep",
       {
           {"level", "a qualify level", PEERLAB_SET(level(n), sweep_level)},
           {"timeout_s", "seconds", PEERLAB_SET(seconds(n, 10, 7 * 86400), sweep_timeout_s)},
           {"wait_s", "seconds", PEERLAB_SET(seconds(n, 0, 7 * 86400), sweep_wait_s)},
           {"poll_s", "seconds", PEERLAB_SET(seconds(n, 0.2, 3600), sweep_poll_s)},
           {"batch", "a whole number from 1 to 100000",
            [](const toml::node& n, Settings& s) -> Status {
              if (!n.is_integer() || *n.value<long long>() < 1 || *n.value<long long>() > 100000) {
                return PEERLAB_INVALID_ARGUMENT("expected a whole number from 1 to 100000");
              }
              s.sweep_batch = static_cast<int>(*n.value<long long>());
              return Status::ok();
            }},
           {"max_out_pct", "a percentage",
            [](const toml::node& n, Settings& s) -> Status {
              if (!n.is_integer() && !n.is_floating_point()) return PEERLAB_INVALID_ARGUMENT("expected a number");
              const double v = *n.value<double>();
              if (!(v > 0 && v <= 100))
                return PEERLAB_INVALID_ARGUMENT("= " + number(v) + ": expected more than 0, at most 100");
              s.sweep_max_out_pct = v;
              return Status::ok();
            }},
           {"bundle_dir", "an absolute path", PEERLAB_SET(absolutePath(n), sweep_bundle_dir)},
           {"drain_outliers", "true or false", PEERLAB_SET(boolean(n), sweep_drain_outliers)},
       }},
      {"qualify",
       {
           {"config", "an absolute path", PEERLAB_SET(absolutePath(n), qualify_config)},
           {"kind", "a machine kind", PEERLAB_SET(text(n, 128), qualify_kind)},
           {"options", "an array of strings",
            [](const toml::node& n, Settings& s) -> Status {
              const toml::array* a = n.as_array();
              if (!a) return PEERLAB_INVALID_ARGUMENT("expected an array of strings ([\"--timeout\", \"60\"])");
              std::vector<std::string> out;
              for (const toml::node& item : *a) {
                auto v = text(item);
                if (!v.isOk()) return PEERLAB_INVALID_ARGUMENT("an item " + v.status().message());
                // What the gate and the sweep choose themselves is not an option here.
                for (const char* own : {"--out", "--level", "--full", "--results", "--dry-run", "--node"}) {
                  if (*v == own || v->rfind(std::string(own) + "=", 0) == 0) {
                    return PEERLAB_INVALID_ARGUMENT(std::string(own) + " is set by the gate and the sweep themselves");
                  }
                }
                out.push_back(*v);
              }
              s.qualify_options = std::move(out);
              return Status::ok();
            }},
       }},
  };
  return keys;
}

#undef PEERLAB_SET

std::string knownKeys(const std::vector<Key>& keys) {
  std::string out;
  for (const Key& k : keys)
    out += (out.empty() ? "" : ", ") + std::string(k.name);
  return out;
}

}  // namespace

std::string settingsPath(const std::string& path, bool* explicit_choice) {
  if (!path.empty()) {
    if (explicit_choice) *explicit_choice = true;
    return path;
  }
  const char* env = std::getenv("PEERLAB_SLURM_SETTINGS");
  if (env && *env) {
    if (explicit_choice) *explicit_choice = true;
    return env;
  }
  if (explicit_choice) *explicit_choice = false;
  return kDefaultPath;
}

StatusOr<Settings> parseSettings(const std::string& text_in, const std::string& name) {
  Settings s;
  s.source = name;
  toml::table doc;
  try {
    doc = toml::parse(text_in, name);
  } catch (const toml::parse_error& e) {
    std::ostringstream why;
    why << name << ":" << e.source().begin.line << ": not TOML: " << e.description();
    return PEERLAB_INVALID_ARGUMENT(why.str());
  }
  std::string sections;
  for (const auto& [sec, keys] : schema())
    sections += sec + ", ";
  sections += "environment";
  for (const auto& [section_view, node] : doc) {
    const std::string section(section_view.str());
    const auto line = node.source().begin.line;
    const std::string at = name + (line ? ":" + std::to_string(line) : std::string());
    const toml::table* table = node.as_table();
    if (section == "environment") {
      if (!table) return PEERLAB_INVALID_ARGUMENT(at + ": environment must be a table ([environment])");
      for (const auto& [key_view, value] : *table) {
        const std::string key(key_view.str());
        const std::string where = Reader(name).where(value, "environment", key);
        if (!envName(key)) return bad(where, "not a variable name (letters, digits and _)");
        if (forbiddenEnv(key)) return bad(where, "may not be set here (it would change what runs, not where)");
        auto v = text(value);
        if (!v.isOk()) return bad(where, v.status().message());
        s.environment[key] = *v;
      }
      continue;
    }
    auto sec = schema().find(section);
    if (sec == schema().end()) {
      return PEERLAB_INVALID_ARGUMENT(at + ": unknown section [" + printable(section, 40) + "] (known: " + sections +
                                      ")");
    }
    if (!table) return PEERLAB_INVALID_ARGUMENT(at + ": " + section + " must be a table ([" + section + "])");
    for (const auto& [key_view, value] : *table) {
      const std::string key(key_view.str());
      const std::string where = Reader(name).where(value, section, key);
      const Key* k = nullptr;
      for (const Key& cand : sec->second)
        if (key == cand.name) k = &cand;
      if (!k) return bad(where, "unknown key (known: " + knownKeys(sec->second) + ")");
      if (Status st = k->read(value, s); !st.isOk()) return bad(where, st.message());
    }
  }
  if (s.sweep_max_out_pct > 0 && doc["sweep"]["batch"]) {
    return PEERLAB_INVALID_ARGUMENT(name + ": [sweep] batch and max_out_pct: give one of them");
  }
  return s;
}

StatusOr<Settings> loadSettings(const std::string& path, bool must_exist) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (!must_exist && errno == ENOENT) {
      Settings s;
      s.source = "";
      return s;
    }
    return PEERLAB_INVALID_ARGUMENT(path + ": cannot read: " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return PEERLAB_INVALID_ARGUMENT(path + ": not a regular file");
  if (st.st_size > static_cast<off_t>(kMaxSettingsBytes)) {
    return PEERLAB_INVALID_ARGUMENT(path + ": larger than " + std::to_string(kMaxSettingsBytes) + " bytes");
  }
  // As root, the file decides what root runs: only root may be able to change it (the file and its directory).
  if (::geteuid() == 0) {
    const std::string dir = std::filesystem::path(path).parent_path().string();
    struct stat ds {};
    if (st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH))) {
      return PEERLAB_INVALID_ARGUMENT(path + ": writable by a user other than root (owner uid " +
                                      std::to_string(st.st_uid) + ", mode " +
                                      [&] {
                                        char b[8];
                                        std::snprintf(b, sizeof b, "%04o", st.st_mode & 07777);
                                        return std::string(b);
                                      }() +
                                      "); refused, as root runs what it says");
    }
    if (::stat(dir.empty() ? "." : dir.c_str(), &ds) == 0 &&
        (ds.st_uid != 0 || ((ds.st_mode & (S_IWGRP | S_IWOTH)) && !(ds.st_mode & S_ISVTX)))) {
      return PEERLAB_INVALID_ARGUMENT(path + ": its directory " + dir +
                                      " is writable by a user other than root; refused, as root runs what it says");
    }
  }
  PEERLAB_ASSIGN_OR_RETURN(std::string body, readTextFile(path));
  return parseSettings(body, path);
}

StatusOr<std::string> databaseUrl(const Settings& s) {
  if (s.db.empty()) return PEERLAB_INVALID_ARGUMENT("no history: the settings name no [history] db");
  if (s.password_file.empty()) return s.db;
  struct stat st {};
  if (::stat(s.password_file.c_str(), &st) != 0) {
    return PEERLAB_INVALID_ARGUMENT("[history] password_file " + s.password_file +
                                    ": cannot read: " + std::strerror(errno));
  }
  if (st.st_mode & (S_IRWXG | S_IRWXO)) {
    return PEERLAB_INVALID_ARGUMENT("[history] password_file " + s.password_file +
                                    ": readable by others (chmod 600 it)");
  }
  if (!history::isPostgresUrl(s.db)) {
    return PEERLAB_INVALID_ARGUMENT("[history] password_file is for PostgreSQL; db is a SQLite path");
  }
  PEERLAB_ASSIGN_OR_RETURN(std::string pw, readTextFile(s.password_file));
  pw = pw.substr(0, pw.find('\n'));
  if (pw.empty()) return PEERLAB_INVALID_ARGUMENT("[history] password_file " + s.password_file + ": empty");
  return history::withPassword(s.db, pw);
}

std::string formatSettings(const Settings& s) {
  auto q = [](const std::string& v) {
    std::string out = "\"";
    for (char c : v) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    return out + "\"";
  };
  std::ostringstream o;
  o << "# " << (s.source.empty() ? "built-in defaults (no settings file)" : s.source) << "\n";
  o << "[slurm]\nbin_dir = " << q(s.bin_dir) << "\nconf = " << q(s.slurm_conf)
    << "\ncommand_timeout_s = " << s.command_timeout_s
    << "\non_setup_error = " << q(s.on_setup_error == OnSetupError::kDrain ? "drain" : "log") << "\nlog = " << q(s.log)
    << "\npeerlab = " << q(s.peerlab) << "\nspool_dir = " << q(s.spool_dir) << "\n\n";
  o << "[history]\ndb = " << q(s.db) << "\npassword_file = " << q(s.password_file) << "\n\n";
  o << "[health]\nenabled = " << (s.health_enabled ? "true" : "false") << "\nbudget_s = " << s.health_budget_s
    << "\nwatch_s = " << s.health_watch_s << "\n\n";
  o << "[gate]\nmode = "
    << q(s.gate_mode == GateMode::kOptIn ? "opt-in"
         : s.gate_mode == GateMode::kAll ? "all"
                                         : "off")
    << "\nfeature = " << q(s.gate_feature) << "\ncomment_word = " << q(s.gate_comment_word)
    << "\nlevel = " << q(std::string(qualify::levelName(s.gate_level))) << "\nbudget_s = " << s.gate_budget_s
    << "\nbundle_dir = " << q(s.gate_bundle_dir) << "\ningest = " << (s.gate_ingest ? "true" : "false") << "\n\n";
  o << "[sweep]\nlevel = " << q(std::string(qualify::levelName(s.sweep_level))) << "\ntimeout_s = " << s.sweep_timeout_s
    << "\nwait_s = " << s.sweep_wait_s << "\npoll_s = " << s.sweep_poll_s;
  if (s.sweep_max_out_pct > 0) {
    o << "\nmax_out_pct = " << s.sweep_max_out_pct;
  } else {
    o << "\nbatch = " << s.sweep_batch;
  }
  o << "\nbundle_dir = " << q(s.sweep_bundle_dir)
    << "\ndrain_outliers = " << (s.sweep_drain_outliers ? "true" : "false") << "\n\n";
  o << "[qualify]\nconfig = " << q(s.qualify_config) << "\nkind = " << q(s.qualify_kind) << "\noptions = [";
  for (size_t i = 0; i < s.qualify_options.size(); ++i)
    o << (i ? ", " : "") << q(s.qualify_options[i]);
  o << "]\n\n[environment]\n";
  for (const auto& [k, v] : s.environment)
    o << k << " = " << q(v) << "\n";
  return o.str();
}

}  // namespace peerlab::slurm
