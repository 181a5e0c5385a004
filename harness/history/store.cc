#include "harness/history/store.h"

#include "harness/report/evaluate.h"
#include "harness/report/json_in.h"
#include "harness/report/report.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <limits>
#include <map>
#include <set>

#include "reference/core/text.h"

namespace peerlab::history {
namespace {

SqlValue opt(const std::optional<double>& v) {
  return v ? SqlValue(*v) : SqlValue();
}
SqlValue opt(const std::optional<int>& v) {
  return v ? SqlValue(static_cast<std::int64_t>(*v)) : SqlValue();
}

std::optional<double> numberIn(const nlohmann::json& extra, const char* key) {
  auto it = extra.find(key);
  if (it == extra.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

// Larger figures are not measurements (1e15 GB/s, 31 years in us).
constexpr double kMaxFigure = 1e15;
// Stored JSON columns: the GPU names, the plan's expectations, the check counts; larger or deeper ones are refused.
constexpr size_t kMaxGpusColumnBytes = size_t{1} << 20;
constexpr size_t kMaxExpectationsBytes = size_t{64} << 20;
constexpr size_t kMaxChecksColumnBytes = 4096;
constexpr size_t kMaxCheckDetailsBytes = size_t{1} << 20;
// Most check categories a run's check_details may count (the engine has eight).
constexpr size_t kMaxStoredCategories = 64;
constexpr size_t kMaxSampleValuesBytes = size_t{64} << 20;

// One stored row read through bounds: text no longer than its limit, numbers of their column's type and range, JSON
// bounded in size and depth before it is parsed. The first problem is kept (the row is then left out).
class RowReader {
 public:
  explicit RowReader(const SqlRow& row) : row_(row) {}
  bool ok() const { return why_.empty(); }
  const std::string& why() const { return why_; }
  void fail(const std::string& why) {
    if (why_.empty()) why_ = why;
  }

  std::string text(int col, const char* name, size_t max_bytes = report::kMaxTextBytes) {
    if (row_.isNull(col)) return {};
    const size_t n = row_.size(col);
    if (n > max_bytes) {
      fail(std::string(name) + ": " + std::to_string(n) + " bytes, more than the " + std::to_string(max_bytes) +
           " allowed");
      return {};
    }
    return row_.text(col);
  }

  // An integer column in [lo, hi]; nullopt for NULL (and for anything else, which fails the row).
  std::optional<std::int64_t> integer(int col, const char* name, std::int64_t lo, std::int64_t hi) {
    if (row_.isNull(col)) return std::nullopt;
    const std::optional<std::int64_t> v = row_.exactInteger(col);
    if (!v) {
      fail(std::string(name) + ": not an integer");
      return std::nullopt;
    }
    if (*v < lo || *v > hi) {
      fail(std::string(name) + " " + std::to_string(*v) + " is outside " + std::to_string(lo) + " .. " +
           std::to_string(hi));
      return std::nullopt;
    }
    return v;
  }

  // A figure: nullopt for NULL; a value that is not a number, not finite, negative or beyond kMaxFigure fails the row.
  std::optional<double> figure(int col, const char* name) {
    if (row_.isNull(col)) return std::nullopt;
    const std::optional<double> v = row_.exactReal(col);
    if (!v) {
      fail(std::string(name) + ": not a number");
      return std::nullopt;
    }
    if (!std::isfinite(*v) || *v < 0 || *v > kMaxFigure) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%s %.6g is not a figure (0 .. 1e15)", name, *v);
      fail(buf);
      return std::nullopt;
    }
    return v;
  }

  nlohmann::json json(int col, const char* name, size_t max_bytes, int max_depth) {
    if (row_.isNull(col)) return nullptr;
    const size_t n = row_.size(col);
    if (n > max_bytes) {
      fail(std::string(name) + ": " + std::to_string(n) + " bytes, more than the " + std::to_string(max_bytes) +
           " allowed");
      return nullptr;
    }
    auto doc = report::parseJsonText(row_.text(col), max_bytes, max_depth);
    if (!doc.isOk()) {
      fail(std::string(name) + ": " + doc.status().message());
      return nullptr;
    }
    return std::move(*doc);
  }

 private:
  const SqlRow& row_;
  std::string why_;
};

// The stored GPU names: an array of at most kMaxGpus strings.
std::vector<std::string> readGpuNames(const nlohmann::json& doc, RowReader& row) {
  std::vector<std::string> out;
  auto read = report::readJson([&] {
    report::In in(doc, "gpus");
    if (in.size() > static_cast<size_t>(kMaxGpus)) in.fail("more than " + std::to_string(kMaxGpus) + " GPUs");
    std::vector<std::string> names;
    for (size_t i = 0; i < in.size(); ++i)
      names.push_back(in.item(i).str(report::kMaxNameBytes));
    return names;
  });
  if (!read.isOk()) {
    row.fail(read.status().message());
    return out;
  }
  return std::move(*read);
}

// One set of counts: every count, adding up to the total.
report::CheckCounts readCounts(const report::In& in) {
  in.requireObject();
  constexpr long long kMost = 1LL << 30;
  report::CheckCounts c;
  c.total = in.at("total").integer(0, kMost);
  c.passed = in.at("passed").integer(0, kMost);
  c.failed = in.at("failed").integer(0, kMost);
  c.warnings = in.at("warnings").integer(0, kMost);
  c.unsupported = in.at("unsupported").integer(0, kMost);
  c.skipped = in.at("skipped").integer(0, kMost);
  if (static_cast<long long>(c.passed) + c.failed + c.warnings + c.unsupported + c.skipped != c.total) {
    in.fail("the counts do not add up to the total " + std::to_string(c.total));
  }
  return c;
}

// The stored check counts: {} (a run stored before verdicts were kept) or every count, adding up, with its verdict.
std::optional<report::CheckCounts> readCheckCounts(const nlohmann::json& doc, const std::string& verdict,
                                                   RowReader& row) {
  if (doc.is_object() && doc.empty() && verdict.empty()) return std::nullopt;
  auto read = report::readJson([&] {
    report::In in(doc, "checks");
    const report::CheckCounts c = readCounts(in);
    const std::string word = in.str("verdict", verdict, report::kMaxNameBytes);
    if (word != report::verdictWord(c) || verdict != word) {
      in.fail("verdict \"" + printable(verdict, 16) + "\" does not match " + std::to_string(c.failed) +
              " failed checks");
    }
    return c;
  });
  if (!read.isOk()) {
    row.fail(read.status().message());
    return std::nullopt;
  }
  return *read;
}

// The stored check details: {} (a run stored before schema step 4) or {"categories": {name: counts}, "failures":
// [{"category", "name", "action"}]}, rebuilt from what reads (nothing else the column holds is passed on).
nlohmann::json readCheckDetails(const nlohmann::json& doc, RowReader& row) {
  if (doc.is_object() && doc.empty()) return nlohmann::json::object();
  auto read = report::readJson([&] {
    report::In in(doc, "check_details");
    in.requireObject();
    nlohmann::json out = nlohmann::json::object();
    nlohmann::json categories = nlohmann::json::object();
    const report::In cats = in.at("categories");
    cats.requireObject();
    if (cats.json().size() > kMaxStoredCategories) {
      cats.fail("more than " + std::to_string(kMaxStoredCategories) + " categories");
    }
    for (const auto& [name, value] : cats.json().items()) {
      if (name.empty() || name.size() > report::kMaxNameBytes)
        cats.fail("a category name of " + std::to_string(name.size()) + " bytes");
      categories[name] = report::toJson(readCounts(cats.member(name, value)));
    }
    nlohmann::json failures = nlohmann::json::array();
    const report::In list = in.at("failures");
    list.requireArray();
    if (list.size() > kMaxStoredFailures) list.fail("more than " + std::to_string(kMaxStoredFailures) + " failures");
    for (size_t i = 0; i < list.size(); ++i) {
      const report::In f = list.item(i);
      f.requireObject();
      failures.push_back({{"category", f.at("category").str(report::kMaxNameBytes)},
                          {"name", f.at("name").str()},
                          {"action", f.str("action", "", report::kMaxNameBytes)}});
    }
    out["categories"] = std::move(categories);
    out["failures"] = std::move(failures);
    return out;
  });
  if (!read.isOk()) {
    row.fail(read.status().message());
    return nlohmann::json::object();
  }
  return std::move(*read);
}

// Depth of a JSON value, walked without recursion (a run file's unknown keys may nest arbitrarily).
size_t jsonDepth(const nlohmann::json& root) {
  size_t deepest = 0;
  std::vector<std::pair<const nlohmann::json*, size_t>> todo{{&root, 1}};
  while (!todo.empty()) {
    auto [j, depth] = todo.back();
    todo.pop_back();
    deepest = std::max(deepest, depth);
    if (j->is_structured()) {
      for (const auto& child : *j)
        if (child.is_structured()) todo.emplace_back(&child, depth + 1);
    }
  }
  return deepest;
}

// Deeper values are refused at ingest: the content hash and the stored JSON are written recursively.
constexpr size_t kMaxStoredDepth = 64;

int digits(const std::string& s, size_t at, size_t n) {
  int v = 0;
  for (size_t i = at; i < at + n; ++i) {
    if (i >= s.size() || s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v;
}

std::optional<std::time_t> parseUtc(const std::string& text) {
  auto norm = normalizeTimestamp(text);
  if (!norm) return std::nullopt;
  std::tm tm{};
  tm.tm_year = digits(*norm, 0, 4) - 1900;
  tm.tm_mon = digits(*norm, 5, 2) - 1;
  tm.tm_mday = digits(*norm, 8, 2);
  tm.tm_hour = digits(*norm, 11, 2);
  tm.tm_min = digits(*norm, 14, 2);
  tm.tm_sec = digits(*norm, 17, 2);
  return timegm(&tm);
}

// The time a run is ordered by (RunInfo::time).
std::string orderTime(const std::string& timestamp, const std::string& ingested_at) {
  const auto ingested = parseUtc(ingested_at);
  const auto norm = normalizeTimestamp(timestamp);
  if (norm && ingested && *parseUtc(*norm) <= *ingested + kClockSkewSeconds) return *norm;
  if (ingested) return *normalizeTimestamp(ingested_at);
  return norm ? *norm : std::string();
}

// What the injected column holds: the run's stand-ins and faults, and the cells a fault was injected into.
std::string injectedText(const report::Run& run) {
  std::string what = run.fingerprint.injected.describe();
  size_t cells = 0;
  for (const report::Result& r : run.results)
    cells += r.extra.contains("injected") && r.extra["injected"].is_string();
  if (cells > 0)
    what += (what.empty() ? "" : ", ") + std::string("faults injected into ") + std::to_string(cells) + " cells";
  return what;
}

bool isKey(const std::string& s, size_t len, const char* allowed) {
  return s.size() == len && s.find_first_not_of(allowed) == std::string::npos;
}

// What the fleet page's node x check matrix reads: the counts per check category, and the first failed checks with
// their actions.
nlohmann::json checkDetails(const report::RunVerdict& v) {
  nlohmann::json j = nlohmann::json::object();
  std::map<std::string, std::vector<report::Check>> byCategory;
  nlohmann::json failures = nlohmann::json::array();
  for (const report::Check& c : v.checks) {
    byCategory[c.category].push_back(c);
    if (c.failed() && failures.size() < kMaxStoredFailures)
      failures.push_back({{"category", c.category}, {"name", c.name}, {"action", c.action}});
  }
  nlohmann::json categories = nlohmann::json::object();
  for (const auto& [category, checks] : byCategory)
    categories[category] = report::toJson(report::countChecks(checks));
  j["categories"] = std::move(categories);
  j["failures"] = std::move(failures);
  return j;
}

}  // namespace

std::optional<std::string> normalizeTimestamp(const std::string& text) {
  // YYYY-MM-DDTHH:MM:SS[.frac][Z|+hh:mm|-hh:mm]
  if (text.size() < 19 || text.size() > 40) return std::nullopt;
  const int year = digits(text, 0, 4), mon = digits(text, 5, 2), day = digits(text, 8, 2);
  const int hour = digits(text, 11, 2), min = digits(text, 14, 2), sec = digits(text, 17, 2);
  if (text[4] != '-' || text[7] != '-' || (text[10] != 'T' && text[10] != 't' && text[10] != ' ') || text[13] != ':' ||
      text[16] != ':') {
    return std::nullopt;
  }
  if (year < 1970 || year > 9999 || mon < 1 || mon > 12 || day < 1 || hour < 0 || hour > 23 || min < 0 || min > 59 ||
      sec < 0 || sec > 60) {
    return std::nullopt;
  }
  static constexpr int kDays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
  if (day > kDays[mon - 1] || (mon == 2 && day == 29 && !leap)) return std::nullopt;
  size_t at = 19;
  if (at < text.size() && (text[at] == '.' || text[at] == ',')) {
    ++at;
    const size_t start = at;
    while (at < text.size() && text[at] >= '0' && text[at] <= '9')
      ++at;
    if (at == start) return std::nullopt;
  }
  long offset = 0;
  if (at == text.size() || ((text[at] == 'Z' || text[at] == 'z') && at + 1 == text.size())) {
    offset = 0;
  } else if ((text[at] == '+' || text[at] == '-') && text.size() == at + 6 && text[at + 3] == ':') {
    const int oh = digits(text, at + 1, 2), om = digits(text, at + 4, 2);
    if (oh < 0 || oh > 23 || om < 0 || om > 59) return std::nullopt;
    offset = (text[at] == '+' ? 1 : -1) * (oh * 3600L + om * 60L);
  } else {
    return std::nullopt;
  }
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = mon - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = min;
  tm.tm_sec = std::min(sec, 59);
  const std::time_t utc = timegm(&tm) - offset;
  std::tm out{};
  if (gmtime_r(&utc, &out) == nullptr || out.tm_year + 1900 < 1970 || out.tm_year + 1900 > 9999) return std::nullopt;
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &out);
  return std::string(buf);
}

nlohmann::json sanitizeExpectations(const nlohmann::json& expectations) {
  nlohmann::json out = nlohmann::json::array();
  if (!expectations.is_array()) return out;
  for (const auto& e : expectations) {
    if (!e.is_object()) continue;
    bool ok = true;
    for (const char* key : {"suite", "impl", "name", "metric"}) {
      if (auto it = e.find(key); it != e.end() && !it->is_string()) ok = false;
    }
    for (const char* key : {"src", "dst"}) {
      if (auto it = e.find(key); it != e.end() && !it->is_null()) {
        ok = ok && it->is_number_integer() && it->get<std::int64_t>() >= 0 && it->get<std::int64_t>() < kMaxGpus;
      }
    }
    for (const char* key : {"min_bytes", "gbps"}) {
      if (auto it = e.find(key); it != e.end() && !it->is_null()) {
        ok = ok && it->is_number() && std::isfinite(it->get<double>()) && it->get<double>() >= 0;
      }
    }
    if (ok && jsonDepth(e) <= 4) out.push_back(e);
  }
  return out;
}

const std::vector<std::string>& schemaMigrations() {
  static const std::vector<std::string> steps = {
      // 1: runs and results.
      "CREATE TABLE runs ("
      " id %ID%,"
      " content_hash TEXT NOT NULL UNIQUE,"
      " host TEXT NOT NULL, kind TEXT NOT NULL, git_sha TEXT NOT NULL, timestamp TEXT NOT NULL, tool TEXT NOT NULL,"
      " driver TEXT NOT NULL, cuda TEXT NOT NULL, nccl TEXT NOT NULL, gpus TEXT NOT NULL,"
      " results INTEGER NOT NULL, source TEXT NOT NULL, ingested_at TEXT NOT NULL);"
      "CREATE INDEX runs_by_time ON runs (timestamp, id);"
      "CREATE TABLE results ("
      " run_id BIGINT NOT NULL REFERENCES runs (id) ON DELETE CASCADE, seq INTEGER NOT NULL,"
      " suite TEXT NOT NULL, impl TEXT NOT NULL, name TEXT NOT NULL, src INTEGER, dst INTEGER, ranks INTEGER NOT NULL,"
      " bytes DOUBLE PRECISION, time_us DOUBLE PRECISION, algbw_gbps DOUBLE PRECISION, busbw_gbps DOUBLE PRECISION,"
      " wrong DOUBLE PRECISION, status TEXT NOT NULL, p10_us DOUBLE PRECISION, p90_us DOUBLE PRECISION,"
      " samples DOUBLE PRECISION, sample_values TEXT NOT NULL,"
      " PRIMARY KEY (run_id, seq))",
      // 2: the qualify plan's expectations, for heatmaps as a percentage of the expected figure.
      "ALTER TABLE runs ADD COLUMN expectations TEXT NOT NULL DEFAULT '[]'",
      // 3: the run's verdict and check counts from the checks engine, as qualify and report give them.
      "ALTER TABLE runs ADD COLUMN verdict TEXT NOT NULL DEFAULT '';"
      "ALTER TABLE runs ADD COLUMN checks TEXT NOT NULL DEFAULT '{}'",
      // 4: nodes' scheduler states (drained, in service), as the Slurm sweep records them; the checks per category
      // and the first failed checks of each run (the fleet page).
      "ALTER TABLE runs ADD COLUMN check_details TEXT NOT NULL DEFAULT '{}';"
      "CREATE TABLE node_states ("
      " id %ID%, node TEXT NOT NULL, state TEXT NOT NULL, reason TEXT NOT NULL, recorded_at TEXT NOT NULL,"
      " source TEXT NOT NULL);"
      "CREATE INDEX node_states_by_node ON node_states (node, id)",
      // 5: the node identity (GPU UUIDs, board serial or host name), what fleets and --by-host group by.
      "ALTER TABLE runs ADD COLUMN node TEXT NOT NULL DEFAULT ''",
      // 6: what a run ran with that is not the machine's own (stand-ins, injected faults): such a run is listed, never
      // counted.
      "ALTER TABLE runs ADD COLUMN injected TEXT NOT NULL DEFAULT ''",
      // 7: the Slurm NodeName a run ran under (node states are keyed by it); the journal of what `peerlab slurm` did
      // to nodes, written before it acts, and the claims that keep two sweeps off one node.
      "ALTER TABLE runs ADD COLUMN slurm_node TEXT NOT NULL DEFAULT '';"
      "CREATE TABLE slurm_journal ("
      " id %ID%, sweep TEXT NOT NULL, node TEXT NOT NULL, step TEXT NOT NULL, job TEXT NOT NULL, reason TEXT NOT NULL,"
      " detail TEXT NOT NULL, recorded_at TEXT NOT NULL, source TEXT NOT NULL);"
      "CREATE INDEX slurm_journal_by_node ON slurm_journal (node, id);"
      "CREATE INDEX slurm_journal_by_sweep ON slurm_journal (sweep, id);"
      "CREATE TABLE slurm_claims ("
      " node TEXT NOT NULL PRIMARY KEY, sweep TEXT NOT NULL, holder TEXT NOT NULL, claimed_at TEXT NOT NULL,"
      " heartbeat_at TEXT NOT NULL)",
  };
  return steps;
}

std::string runContentHash(const report::Run& run) {
  const std::string text = report::toJson(run).dump();
  std::uint64_t a = 0xcbf29ce484222325ull, b = 0x84222325cbf29ce4ull;
  for (unsigned char c : text) {
    a = (a ^ c) * 0x100000001b3ull;
    b = (b ^ c) * 0x100000001b3ull;
    b ^= b >> 29;
  }
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b));
  return buf;
}

StatusOr<std::unique_ptr<HistoryStore>> HistoryStore::open(const std::string& url, OpenMode mode) {
  // A SQLite file this open makes is taken away again when it cannot be made a history (a full disk): nothing is left
  // that would later read as "not a peerlab history".
  struct stat st {};
  auto backend = classifyDatabase(url, mode);
  const bool makes = mode == OpenMode::kCreate && backend.isOk() && *backend == Backend::kSqlite && url != ":memory:" &&
                     ::lstat(url.c_str(), &st) != 0 && errno == ENOENT;
  auto unmake = [&] {
    if (!makes) return;
    for (const char* suffix : {"", "-wal", "-shm", "-journal"})
      ::unlink((url + suffix).c_str());
  };
  auto db = openDatabase(url, mode);
  if (!db.isOk()) {
    unmake();
    return db.status();
  }
  std::unique_ptr<HistoryStore> store(new HistoryStore(std::move(*db)));
  store->read_only_ = mode == OpenMode::kReadOnly;
  if (Status migrated = store->migrate(mode, url); !migrated.isOk()) {
    store.reset();
    unmake();
    return migrated;
  }
  return store;
}

nlohmann::json RunInfo::checksJson() const {
  return checks ? report::toJson(*checks) : nlohmann::json::object();
}

void HistoryStore::warn(const std::string& key, const std::string& message) {
  if (!warned_.insert(key).second) return;
  if (warnings_.size() + 1 < kMaxWarnings) {
    warnings_.push_back(message);
    if (warning_sink_) warning_sink_(message);
    return;
  }
  // The last one counts the rest.
  ++unshown_warnings_;
  const std::string more = std::to_string(unshown_warnings_) + " more stored rows left out (not listed)";
  if (warnings_.size() < kMaxWarnings) {
    warnings_.push_back(more);
  } else {
    warnings_.back() = more;
  }
  if (warning_sink_ && unshown_warnings_ == 1) warning_sink_("more stored rows left out; the count is at the end");
}

Status HistoryStore::migrate(OpenMode mode, const std::string& url) {
  const std::string name = "--db " + redactUrl(url);
  // What is there already (one statement, so one snapshot): a store at the latest version is only read.
  const bool sqlite = std::string(db_->dialect()) == "sqlite";
  bool hasSchema = false;
  int tables = 0;
  PEERLAB_RETURN_IF_ERROR(
      db_->query(sqlite ? "SELECT name FROM sqlite_master WHERE type = 'table'"
                        : "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()",
                 {}, [&](const SqlRow& r) {
                   ++tables;
                   hasSchema = hasSchema || r.text(0) == "schema_version";
                 }));
  if (!hasSchema && mode != OpenMode::kCreate) {
    return PEERLAB_INVALID_ARGUMENT(name +
                                    ": not a peerlab history (no schema_version table; only `peerlab history "
                                    "ingest`, or --create, makes one)");
  }
  if (!hasSchema && sqlite) {
    // A SQLite file is one program's: one that holds other tables is not made a history.
    if (tables > 0) {
      return PEERLAB_INVALID_ARGUMENT(name + ": a SQLite database of something else (" + std::to_string(tables) +
                                      " tables, none of them peerlab's); left as it is");
    }
    // WAL lets readers run beside the one writer; the mode is kept in the file.
    PEERLAB_RETURN_IF_ERROR(db_->exec("PRAGMA journal_mode=WAL"));
  }
  const int latest = static_cast<int>(schemaMigrations().size());
  if (hasSchema) {
    int current = 0;
    PEERLAB_RETURN_IF_ERROR(db_->query("SELECT MAX(version) FROM schema_version", {}, [&](const SqlRow& r) {
      if (!r.isNull(0)) current = static_cast<int>(r.integer(0));
    }));
    if (current == latest) {
      version_ = latest;
      return Status::ok();
    }
    // A reader reads an older store as it is (runs() leaves the columns it lacks empty) and never migrates it.
    if (mode == OpenMode::kReadOnly && current >= 1 && current < latest) {
      version_ = current;
      return Status::ok();
    }
    if (mode == OpenMode::kReadOnly) {
      return PEERLAB_INVALID_ARGUMENT(name + ": schema version " + std::to_string(current) +
                                      (current > latest
                                           ? " is newer than this peerlab's (" + std::to_string(latest) + ")"
                                           : " is not one this peerlab knows"));
    }
  }
  Status st = applyMigrations();
  if (!st.isOk()) return Status(st.code(), name + ": schema migration failed: " + st.message());
  return Status::ok();
}

Status HistoryStore::applyMigrations() {
  auto body = [&]() -> Status {
    PEERLAB_RETURN_IF_ERROR(db_->exec("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)"));
    int current = 0;
    PEERLAB_RETURN_IF_ERROR(db_->query("SELECT MAX(version) FROM schema_version", {}, [&](const SqlRow& r) {
      if (!r.isNull(0)) current = static_cast<int>(r.integer(0));
    }));
    const auto& steps = schemaMigrations();
    if (current > static_cast<int>(steps.size())) {
      return PEERLAB_INVALID_ARGUMENT("schema version " + std::to_string(current) + " is newer than this peerlab (" +
                                      std::to_string(steps.size()) + ")");
    }
    const std::string idColumn = std::string(db_->dialect()) == "sqlite"
                                     ? "INTEGER PRIMARY KEY"
                                     : "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY";
    for (int v = current; v < static_cast<int>(steps.size()); ++v) {
      std::string sql = steps[v];
      for (size_t at; (at = sql.find("%ID%")) != std::string::npos;)
        sql.replace(at, 4, idColumn);
      // Steps may hold several statements separated by ';'.
      size_t start = 0;
      while (start < sql.size()) {
        size_t end = sql.find(';', start);
        if (end == std::string::npos) end = sql.size();
        const std::string one = sql.substr(start, end - start);
        if (one.find_first_not_of(" \n") != std::string::npos) PEERLAB_RETURN_IF_ERROR(db_->exec(one));
        start = end + 1;
      }
      PEERLAB_RETURN_IF_ERROR(
          db_->query("INSERT INTO schema_version (version) VALUES ($1)", {static_cast<std::int64_t>(v + 1)}));
    }
    version_ = static_cast<int>(steps.size());
    return Status::ok();
  };
  return writeTransaction(*db_, body);
}

StatusOr<IngestOutcome> HistoryStore::ingest(const report::Run& run, const IngestOptions& options) {
  if (jsonDepth(run.extra) > kMaxStoredDepth) {
    return PEERLAB_INVALID_ARGUMENT("nests deeper than " + std::to_string(kMaxStoredDepth) + " levels");
  }
  for (size_t i = 0; i < run.results.size(); ++i) {
    if (jsonDepth(run.results[i].extra) > kMaxStoredDepth) {
      return PEERLAB_INVALID_ARGUMENT("$.results[" + std::to_string(i) + "] nests deeper than " +
                                      std::to_string(kMaxStoredDepth) + " levels");
    }
  }
  const std::string hash = runContentHash(run);
  const std::string kind = !options.kind.empty() ? options.kind : run.kind.name;
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& g : run.fingerprint.gpus)
    gpus.push_back(g.name);
  nlohmann::json expectations = nlohmann::json::array();
  if (auto plan = run.extra.find("plan"); plan != run.extra.end() && plan->is_object()) {
    if (auto e = plan->find("expectations"); e != plan->end()) expectations = sanitizeExpectations(*e);
  }

  // The verdict the checks engine gives the run: the same qualify --results and report give it.
  const report::RunVerdict verdict = report::verdictOf(run);
  const nlohmann::json details = checkDetails(verdict);

  IngestOutcome out;
  auto body = [&]() -> Status {
    PEERLAB_RETURN_IF_ERROR(db_->query(
        "INSERT INTO runs (content_hash, host, kind, git_sha, timestamp, tool, driver, cuda, nccl, gpus, results,"
        " source, ingested_at, expectations, verdict, checks, check_details, node, injected, slurm_node)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)"
        " ON CONFLICT (content_hash) DO NOTHING RETURNING id",
        {hash,
         run.fingerprint.hostname,
         kind,
         run.git_sha,
         run.timestamp,
         run.tool,
         run.fingerprint.driver,
         run.fingerprint.cuda_runtime,
         run.fingerprint.nccl,
         gpus.dump(),
         static_cast<std::int64_t>(run.results.size()),
         options.source,
         report::utcTimestamp(),
         expectations.dump(),
         std::string(report::verdictWord(verdict.counts)),
         report::toJson(verdict.counts).dump(),
         details.dump(),
         run.node.id,
         injectedText(run),
         run.node.slurm_node},
        [&](const SqlRow& r) {
          out.run_id = r.integer(0);
          out.inserted = true;
        }));
    if (!out.inserted) {
      return db_->query("SELECT id FROM runs WHERE content_hash = $1", {hash},
                        [&](const SqlRow& r) { out.run_id = r.integer(0); });
    }
    std::int64_t seq = 0;
    for (const report::Result& r : run.results) {
      std::string sampleValues;
      std::optional<double> samples = numberIn(r.extra, "samples");
      if (auto it = r.extra.find("samples_us"); it != r.extra.end() && it->is_array()) {
        sampleValues = it->dump();
        samples = static_cast<double>(it->size());
      }
      PEERLAB_RETURN_IF_ERROR(db_->query(
          "INSERT INTO results (run_id, seq, suite, impl, name, src, dst, ranks, bytes, time_us, algbw_gbps,"
          " busbw_gbps, wrong, status, p10_us, p90_us, samples, sample_values)"
          " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)",
          {out.run_id, seq++, r.suite, r.impl, r.name, opt(r.src), opt(r.dst), static_cast<std::int64_t>(r.ranks),
           opt(r.bytes), opt(r.time_us), opt(r.algbw_gbps), opt(r.busbw_gbps), opt(r.wrong), r.status,
           opt(numberIn(r.extra, "p10_us")), opt(numberIn(r.extra, "p90_us")), opt(samples), sampleValues}));
    }
    return Status::ok();
  };
  PEERLAB_RETURN_IF_ERROR(writeTransaction(*db_, body));
  return out;
}

StatusOr<std::vector<RunInfo>> HistoryStore::runs() {
  std::vector<RunInfo> out;
  // Columns a store of an older schema (read, not migrated) does not have yet read as their defaults.
  const std::string expectations = version_ >= 2 ? "expectations" : "'[]'";
  const std::string verdict = version_ >= 3 ? "verdict, checks" : "'', '{}'";
  const std::string details = version_ >= 4 ? "check_details" : "'{}'";
  const std::string node = version_ >= 5 ? "node" : "''";
  const std::string injected = version_ >= 6 ? "injected" : "''";
  const std::string slurmNode = version_ >= 7 ? "slurm_node" : "''";
  PEERLAB_RETURN_IF_ERROR(db_->query(
      "SELECT id, content_hash, host, kind, git_sha, timestamp, tool, driver, cuda, nccl, gpus, results, source, " +
          expectations + ", ingested_at, " + verdict + ", " + details + ", " + node + ", " + injected + ", " +
          slurmNode + " FROM runs ORDER BY id",
      {}, [&](const SqlRow& r) {
        RowReader row(r);
        RunInfo info;
        info.id = row.integer(0, "id", 1, std::numeric_limits<std::int64_t>::max()).value_or(0);
        info.content_hash = row.text(1, "content_hash", 64);
        if (!isKey(info.content_hash, 32, "0123456789abcdef")) row.fail("content_hash is not 32 hex digits");
        info.host = row.text(2, "host");
        info.kind = row.text(3, "kind");
        info.git_sha = row.text(4, "git_sha");
        info.timestamp = row.text(5, "timestamp");
        info.tool = row.text(6, "tool");
        info.driver = row.text(7, "driver");
        info.cuda = row.text(8, "cuda");
        info.nccl = row.text(9, "nccl");
        info.gpus = readGpuNames(row.json(10, "gpus", kMaxGpusColumnBytes, 2), row);
        info.results = static_cast<int>(row.integer(11, "results", 0, report::kMaxResults).value_or(0));
        info.source = row.text(12, "source");
        info.expectations =
            sanitizeExpectations(row.json(13, "expectations", kMaxExpectationsBytes, report::kMaxJsonDepth));
        info.ingested_at = row.text(14, "ingested_at");
        info.verdict = row.text(15, "verdict", 8);
        if (!info.verdict.empty() && info.verdict != "PASS" && info.verdict != "FAIL" && info.verdict != "EMPTY") {
          row.fail("verdict \"" + printable(info.verdict, 16) + "\" is not PASS, FAIL or EMPTY");
        }
        const nlohmann::json checks = row.json(16, "checks", kMaxChecksColumnBytes, 2);
        if (row.ok()) info.checks = readCheckCounts(checks, info.verdict, row);
        const nlohmann::json details = row.json(17, "check_details", kMaxCheckDetailsBytes, 4);
        if (row.ok()) info.check_details = readCheckDetails(details, row);
        info.node = row.text(18, "node", kMaxNodeNameBytes);
        info.injected = printable(row.text(19, "injected"), report::kMaxTextBytes);
        info.slurm_node = row.text(20, "slurm_node", kMaxNodeNameBytes);
        if (!info.slurm_node.empty() && !report::isSlurmNodeName(info.slurm_node))
          row.fail("slurm_node \"" + printable(info.slurm_node, 64) + "\" is not a node name");
        if (!row.ok()) {
          const std::string which = info.id > 0 ? "run " + std::to_string(info.id) : std::string("a run without an id");
          const std::string hash =
              isKey(info.content_hash, 32, "0123456789abcdef") ? " (" + info.content_hash + ")" : "";
          warn("run:" + std::to_string(info.id) + ":" + info.content_hash,
               "stored " + which + hash + " left out: " + printable(row.why(), 200));
          return;
        }
        info.time = orderTime(info.timestamp, info.ingested_at);
        out.push_back(std::move(info));
      }));
  std::stable_sort(out.begin(), out.end(),
                   [](const RunInfo& a, const RunInfo& b) { return a.time != b.time ? a.time < b.time : a.id < b.id; });
  return out;
}

StatusOr<std::vector<RunInfo>> HistoryStore::remove(const std::vector<std::string>& which) {
  if (which.empty()) return PEERLAB_INVALID_ARGUMENT("no run named (a run id or a content hash)");
  PEERLAB_ASSIGN_OR_RETURN(std::vector<RunInfo> all, runs());
  // A run left out of runs() (a stored row that does not read) can be removed all the same, by id or hash.
  {
    std::set<std::int64_t> listed;
    for (const RunInfo& r : all)
      listed.insert(r.id);
    PEERLAB_RETURN_IF_ERROR(db_->query("SELECT id, content_hash FROM runs", {}, [&](const SqlRow& r) {
      RowReader row(r);
      RunInfo info;
      info.id = row.integer(0, "id", 1, std::numeric_limits<std::int64_t>::max()).value_or(0);
      info.content_hash = row.text(1, "content_hash", 64);
      if (info.id > 0 && !listed.count(info.id)) all.push_back(std::move(info));
    }));
  }
  std::vector<RunInfo> chosen;
  for (const std::string& w : which) {
    const RunInfo* found = nullptr;
    const bool isId = !w.empty() && w.size() <= 18 && w.find_first_not_of("0123456789") == std::string::npos;
    const bool isHash = isKey(w, 32, "0123456789abcdef");
    if (!isId && !isHash) {
      return PEERLAB_INVALID_ARGUMENT("\"" + printable(w, 64) +
                                      "\" is neither a run id nor a content hash (32 hex digits; see history list)");
    }
    for (const RunInfo& r : all) {
      if ((isId && std::to_string(r.id) == w) || (isHash && r.content_hash == w)) found = &r;
    }
    if (found == nullptr) return PEERLAB_INVALID_ARGUMENT("no stored run " + w + " (nothing removed)");
    bool dup = false;
    for (const RunInfo& c : chosen)
      dup = dup || c.id == found->id;
    if (!dup) chosen.push_back(*found);
  }
  auto body = [&]() -> Status {
    for (const RunInfo& r : chosen) {
      // Results first: a store opened without foreign keys enforced keeps no orphans either.
      PEERLAB_RETURN_IF_ERROR(db_->query("DELETE FROM results WHERE run_id = $1", {r.id}));
      bool gone = false;
      PEERLAB_RETURN_IF_ERROR(
          db_->query("DELETE FROM runs WHERE id = $1 RETURNING id", {r.id}, [&](const SqlRow&) { gone = true; }));
      if (!gone) return PEERLAB_INVALID_ARGUMENT("run " + std::to_string(r.id) + " was removed meanwhile");
    }
    return Status::ok();
  };
  PEERLAB_RETURN_IF_ERROR(writeTransaction(*db_, body));
  return chosen;
}

Status HistoryStore::forEachResult(const std::function<void(const StoredResult&)>& fn) {
  return readResults("ORDER BY run_id, seq", {}, fn);
}

Status HistoryStore::forEachResultOfRun(std::int64_t run_id, const std::function<void(const StoredResult&)>& fn) {
  return readResults("WHERE run_id = $1 ORDER BY seq", {run_id}, fn);
}

Status HistoryStore::readResults(const std::string& where, const std::vector<SqlValue>& params,
                                 const std::function<void(const StoredResult&)>& fn) {
  // Rows left out, per run: how many and the first one's reason (one warning per run).
  struct LeftOut {
    std::int64_t count = 0;
    std::string first;
  };
  std::map<std::int64_t, LeftOut> leftOut;
  StoredResult s;
  Status st = db_->query(
      "SELECT run_id, suite, impl, name, src, dst, ranks, bytes, time_us, algbw_gbps, busbw_gbps, wrong, status,"
      " p10_us, p90_us, samples, sample_values, seq FROM results " +
          where,
      params, [&](const SqlRow& r) {
        RowReader row(r);
        s.run_id = row.integer(0, "run_id", 0, std::numeric_limits<std::int64_t>::max()).value_or(0);
        report::Result& x = s.result;
        x.suite = row.text(1, "suite");
        x.impl = row.text(2, "impl");
        x.name = row.text(3, "name");
        auto gpu = [&](int col, const char* name) -> std::optional<int> {
          auto v = row.integer(col, name, 0, kMaxGpus - 1);
          return v ? std::optional<int>(static_cast<int>(*v)) : std::nullopt;
        };
        x.src = gpu(4, "src");
        x.dst = gpu(5, "dst");
        const auto ranks = row.integer(6, "ranks", 1, kMaxGpus);
        if (!ranks && r.isNull(6)) row.fail("ranks is NULL");
        x.ranks = ranks ? static_cast<int>(*ranks) : 1;
        x.bytes = row.figure(7, "bytes");
        x.time_us = row.figure(8, "time_us");
        x.algbw_gbps = row.figure(9, "algbw_gbps");
        x.busbw_gbps = row.figure(10, "busbw_gbps");
        x.wrong = row.figure(11, "wrong");
        x.status = row.text(12, "status");
        s.p10_us = row.figure(13, "p10_us");
        s.p90_us = row.figure(14, "p90_us");
        s.samples = row.figure(15, "samples");
        s.sample_values = row.text(16, "sample_values", kMaxSampleValuesBytes);
        s.valid = row.ok();
        s.invalid_reason = row.why();
        if (!s.valid) {
          LeftOut& l = leftOut[s.run_id];
          if (l.count++ == 0) {
            const auto seq = r.exactInteger(17);
            l.first = (seq ? "row " + std::to_string(*seq) + ": " : std::string()) + row.why();
          }
        }
        fn(s);
      });
  for (const auto& [run, l] : leftOut) {
    warn("results:" + std::to_string(run), "run " + std::to_string(run) + ": " + std::to_string(l.count) +
                                               " stored result" + (l.count == 1 ? "" : "s") + " left out (" +
                                               printable(l.first, 200) + ")");
  }
  return st;
}

Status HistoryStore::recordNodeState(const NodeState& s) {
  if (std::find(kNodeStates.begin(), kNodeStates.end(), s.state) == kNodeStates.end()) {
    return PEERLAB_INVALID_ARGUMENT("state \"" + printable(s.state, 40) + "\": not one of in_service, drained, down");
  }
  auto plain = [](const std::string& text) {
    return std::all_of(text.begin(), text.end(),
                       [](char c) { return static_cast<unsigned char>(c) >= 0x20 && c != 0x7f; });
  };
  if (s.node.empty() || s.node.size() > kMaxNodeNameBytes || !plain(s.node)) {
    return PEERLAB_INVALID_ARGUMENT("node \"" + printable(s.node, 64) + "\": 1 to " +
                                    std::to_string(kMaxNodeNameBytes) + " bytes without control characters");
  }
  if (s.reason.size() > kMaxNodeReasonBytes || !plain(s.reason) || !plain(s.source)) {
    return PEERLAB_INVALID_ARGUMENT("reason \"" + printable(s.reason, 64) + "\": at most " +
                                    std::to_string(kMaxNodeReasonBytes) + " bytes without control characters");
  }
  return writeTransaction(*db_, [&] {
    return db_->query("INSERT INTO node_states (node, state, reason, recorded_at, source) VALUES ($1, $2, $3, $4, $5)",
                      {s.node, s.state, s.reason, report::utcTimestamp(), s.source});
  });
}

StatusOr<std::vector<NodeState>> HistoryStore::nodeStates() {
  std::map<std::string, NodeState> latest;
  // A store of an older schema (read, not migrated) has no node states yet.
  if (version_ < 4) return std::vector<NodeState>{};
  PEERLAB_RETURN_IF_ERROR(db_->query(
      "SELECT id, node, state, reason, recorded_at, source FROM node_states ORDER BY id", {}, [&](const SqlRow& r) {
        RowReader row(r);
        const std::int64_t id = row.integer(0, "id", 1, std::numeric_limits<std::int64_t>::max()).value_or(0);
        NodeState s{row.text(1, "node", kMaxNodeNameBytes),       row.text(2, "state", 16),
                    row.text(3, "reason", kMaxNodeReasonBytes),   row.text(4, "recorded_at", report::kMaxNameBytes),
                    row.text(5, "source", report::kMaxNameBytes), id};
        if (row.ok() && s.node.empty()) row.fail("node is empty");
        if (!row.ok()) {
          warn("node_state:" + std::to_string(id),
               "stored node state " + std::to_string(id) + " left out: " + printable(row.why(), 200));
          return;
        }
        // What another version stored is read as it is checked on the way in.
        if (std::find(kNodeStates.begin(), kNodeStates.end(), s.state) == kNodeStates.end()) s.state = "down";
        s.node = printable(s.node, kMaxNodeNameBytes);
        s.reason = printable(s.reason, kMaxNodeReasonBytes);
        // Ordered by when it was recorded (UTC, any spelling of it), not by the order of the rows.
        s.recorded_at = normalizeTimestamp(s.recorded_at).value_or(s.recorded_at);
        auto [it, fresh] = latest.emplace(s.node, s);
        if (!fresh && s.after(it->second)) it->second = std::move(s);
      }));
  std::vector<NodeState> out;
  for (auto& [node, s] : latest)
    out.push_back(std::move(s));
  return out;
}

namespace {

bool plainText(const std::string& text) {
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return static_cast<unsigned char>(c) >= 0x20 && c != 0x7f; });
}

}  // namespace

StatusOr<std::int64_t> HistoryStore::appendJournal(const JournalEntry& e) {
  if (std::find(kJournalSteps.begin(), kJournalSteps.end(), e.step) == kJournalSteps.end()) {
    return PEERLAB_INVALID_ARGUMENT("journal step \"" + printable(e.step, 40) + "\" is not one peerlab writes");
  }
  if (e.node.empty() || e.node.size() > kMaxNodeNameBytes || !plainText(e.node) || e.sweep.size() > 128 ||
      !plainText(e.sweep) || e.job.size() > 64 || !plainText(e.job) || e.reason.size() > kMaxNodeReasonBytes ||
      !plainText(e.reason) || e.detail.size() > 65536 || e.source.size() > 64 || !plainText(e.source)) {
    return PEERLAB_INVALID_ARGUMENT("journal entry for node \"" + printable(e.node, 64) +
                                    "\": a field is empty, too long or holds control characters");
  }
  if (version_ < 7) return PEERLAB_INVALID_ARGUMENT("the history's schema is older than the journal's");
  std::int64_t id = 0;
  PEERLAB_RETURN_IF_ERROR(writeTransaction(*db_, [&] {
    return db_->query(
        "INSERT INTO slurm_journal (sweep, node, step, job, reason, detail, recorded_at, source)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
        {e.sweep, e.node, e.step, e.job, e.reason, e.detail.empty() ? std::string("{}") : e.detail,
         e.recorded_at.empty() ? report::utcTimestamp() : e.recorded_at, e.source},
        [&](const SqlRow& r) { id = r.integer(0); });
  }));
  return id;
}

StatusOr<std::vector<JournalEntry>> HistoryStore::journal(const std::string& node, const std::string& sweep,
                                                          std::int64_t after) {
  std::vector<JournalEntry> out;
  if (version_ < 7) return out;
  std::string where = " WHERE id > $1";
  std::vector<SqlValue> params = {after};
  if (!node.empty()) {
    params.push_back(node);
    where += " AND node = $" + std::to_string(params.size());
  }
  if (!sweep.empty()) {
    params.push_back(sweep);
    where += " AND sweep = $" + std::to_string(params.size());
  }
  PEERLAB_RETURN_IF_ERROR(
      db_->query("SELECT id, sweep, node, step, job, reason, detail, recorded_at, source FROM slurm_journal" + where +
                     " ORDER BY id",
                 params, [&](const SqlRow& r) {
                   RowReader row(r);
                   JournalEntry e;
                   e.id = row.integer(0, "id", 1, std::numeric_limits<std::int64_t>::max()).value_or(0);
                   e.sweep = row.text(1, "sweep", 128);
                   e.node = row.text(2, "node", kMaxNodeNameBytes);
                   e.step = row.text(3, "step", 32);
                   e.job = row.text(4, "job", 64);
                   e.reason = row.text(5, "reason", kMaxNodeReasonBytes);
                   e.detail = row.text(6, "detail", 65536);
                   e.recorded_at = row.text(7, "recorded_at", 64);
                   e.source = row.text(8, "source", 64);
                   if (row.ok() && std::find(kJournalSteps.begin(), kJournalSteps.end(), e.step) == kJournalSteps.end())
                     row.fail("step \"" + printable(e.step, 32) + "\" is not one peerlab writes");
                   if (!row.ok()) {
                     warn("journal:" + std::to_string(e.id),
                          "journal entry " + std::to_string(e.id) + " left out: " + printable(row.why(), 200));
                     return;
                   }
                   out.push_back(std::move(e));
                 }));
  return out;
}

namespace {

Claim readClaim(const SqlRow& r) {
  return {r.text(0), r.text(1), r.text(2), r.text(3), r.text(4)};
}

}  // namespace

StatusOr<std::vector<Claim>> HistoryStore::claims() {
  std::vector<Claim> out;
  if (version_ < 7) return out;
  PEERLAB_RETURN_IF_ERROR(
      db_->query("SELECT node, sweep, holder, claimed_at, heartbeat_at FROM slurm_claims ORDER BY node", {},
                 [&](const SqlRow& r) { out.push_back(readClaim(r)); }));
  return out;
}

StatusOr<ClaimOutcome> HistoryStore::claimNodes(const std::string& sweep, const std::string& holder,
                                                const std::vector<std::string>& nodes,
                                                const std::function<bool(const Claim&)>& stale) {
  if (version_ < 7) return PEERLAB_INVALID_ARGUMENT("the history's schema is older than the claims'");
  ClaimOutcome out;
  // Nothing is written where another sweep holds one of the nodes.
  auto body = [&](bool& keep) -> Status {
    std::map<std::string, Claim> held;
    PEERLAB_RETURN_IF_ERROR(
        db_->query("SELECT node, sweep, holder, claimed_at, heartbeat_at FROM slurm_claims", {}, [&](const SqlRow& r) {
          Claim c = readClaim(r);
          held[c.node] = c;
        }));
    for (const std::string& n : nodes) {
      auto it = held.find(n);
      if (it == held.end() || it->second.sweep == sweep) continue;
      if (stale && stale(it->second)) {
        out.taken_over.push_back(it->second);
      } else {
        out.conflicts.push_back(it->second);
      }
    }
    if (!out.conflicts.empty()) {
      keep = false;
      return Status::ok();
    }
    const std::string now = report::utcTimestamp();
    for (const std::string& n : nodes) {
      PEERLAB_RETURN_IF_ERROR(db_->query("DELETE FROM slurm_claims WHERE node = $1", {n}));
      PEERLAB_RETURN_IF_ERROR(db_->query(
          "INSERT INTO slurm_claims (node, sweep, holder, claimed_at, heartbeat_at) VALUES ($1, $2, $3, $4, $5)",
          {n, sweep, holder, now, now}));
    }
    out.granted = true;
    return Status::ok();
  };
  PEERLAB_RETURN_IF_ERROR(writeTransaction(*db_, body));
  if (!out.granted) out.taken_over.clear();
  return out;
}

Status HistoryStore::heartbeat(const std::string& sweep) {
  if (version_ < 7) return Status::ok();
  return writeTransaction(*db_, [&] {
    return db_->query("UPDATE slurm_claims SET heartbeat_at = $1 WHERE sweep = $2", {report::utcTimestamp(), sweep});
  });
}

Status HistoryStore::releaseClaims(const std::string& sweep, const std::vector<std::string>& nodes) {
  if (version_ < 7) return Status::ok();
  return writeTransaction(*db_, [&]() -> Status {
    if (nodes.empty()) return db_->query("DELETE FROM slurm_claims WHERE sweep = $1", {sweep});
    for (const std::string& n : nodes)
      PEERLAB_RETURN_IF_ERROR(db_->query("DELETE FROM slurm_claims WHERE sweep = $1 AND node = $2", {sweep, n}));
    return Status::ok();
  });
}

StatusOr<std::int64_t> HistoryStore::count(const std::string& table) {
  if (table != "runs" && table != "results") return PEERLAB_INVALID_ARGUMENT("no table " + table);
  std::int64_t n = 0;
  PEERLAB_RETURN_IF_ERROR(db_->query("SELECT COUNT(*) FROM " + table, {}, [&](const SqlRow& r) { n = r.integer(0); }));
  return n;
}

}  // namespace peerlab::history
