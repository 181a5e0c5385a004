#include "harness/history/database.h"

#include <sqlite3.h>
#ifdef PEERLAB_HAVE_LIBPQ
#include <libpq-fe.h>
#endif

#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include "reference/core/text.h"

namespace peerlab::history {
namespace {

// `word` (lower case) at s[at], in any case.
bool startsWithNoCase(const std::string& s, size_t at, const char* word) {
  const size_t n = std::strlen(word);
  if (s.size() < at + n) return false;
  for (size_t i = 0; i < n; ++i)
    if (std::tolower(static_cast<unsigned char>(s[at + i])) != word[i]) return false;
  return true;
}

bool hasPostgresScheme(const std::string& url) {
  return startsWithNoCase(url, 0, "postgresql://") || startsWithNoCase(url, 0, "postgres://");
}

// The string as libpq takes it: libpq knows a URL's scheme in lower case only.
std::string libpqForm(const std::string& url) {
  std::string out = url;
  if (hasPostgresScheme(url)) {
    for (size_t i = 0, n = url.find("://"); i < n; ++i)
      out[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(out[i])));
  }
  return out;
}

// "host=db dbname=x ...": a libpq keyword (letters and '_') followed by '='.
bool looksLikeKeywordValue(const std::string& url) {
  size_t i = url.find_first_not_of(" \t");
  if (i == std::string::npos) return false;
  const size_t start = i;
  while (i < url.size() && (std::isalpha(static_cast<unsigned char>(url[i])) || url[i] == '_'))
    ++i;
  if (i == start) return false;
  while (i < url.size() && (url[i] == ' ' || url[i] == '\t'))
    ++i;
  return i < url.size() && url[i] == '=';
}

// Where passwords sit in a connection string: a URL's user info (between the user's ':' and the last '@' of the
// authority, whatever it holds) and every password= value (quoted, or up to a space or '&'; an unclosed quote runs
// to the end).
struct PasswordSpan {
  size_t begin, end;
};
std::vector<PasswordSpan> passwordSpans(const std::string& s) {
  std::vector<PasswordSpan> out;
  if (const size_t scheme = s.find("://"); scheme != std::string::npos) {
    const size_t start = scheme + 3;
    size_t stop = s.find_first_of(" \t", start);
    if (stop == std::string::npos) stop = s.size();
    const size_t at = s.rfind('@', stop);
    if (at != std::string::npos && at > start) {
      const size_t colon = s.find(':', start);
      if (colon != std::string::npos && colon < at) out.push_back({colon + 1, at});
    }
  }
  for (size_t i = 0; i < s.size(); ++i) {
    if (!startsWithNoCase(s, i, "password")) continue;
    if (i > 0 && (std::isalnum(static_cast<unsigned char>(s[i - 1])) || s[i - 1] == '_')) continue;
    size_t v = i + 8;
    while (v < s.size() && s[v] == ' ')
      ++v;
    if (v >= s.size() || s[v] != '=') continue;
    ++v;
    while (v < s.size() && s[v] == ' ')
      ++v;
    size_t end = v;
    if (end < s.size() && s[end] == '\'') {
      end = s.find('\'', end + 1);
      end = end == std::string::npos ? s.size() : end + 1;
    } else {
      while (end < s.size() && s[end] != '&' && s[end] != ' ' && s[end] != '#')
        ++end;
      // Words after an unquoted password that are no keyword=value pair belong to it (libpq quotes them in its
      // refusal).
      while (end < s.size() && s[end] == ' ') {
        size_t next = s.find_first_not_of(' ', end);
        if (next == std::string::npos) break;
        size_t stop = s.find(' ', next);
        if (stop == std::string::npos) stop = s.size();
        if (s.substr(next, stop - next).find('=') != std::string::npos) break;
        end = stop;
      }
    }
    if (end > v) out.push_back({v, end});
  }
  return out;
}

// A URL whose user info holds '@', '/', '?' or '#' unescaped: libpq would cut it there, take the rest of the
// password for the host and quote it in its errors; refused before connecting.
std::string unescapedUserInfo(const std::string& url) {
  const size_t start = url.find("://") + 3;
  size_t stop = url.find_first_of(" \t", start);
  if (stop == std::string::npos) stop = url.size();
  const size_t at = url.rfind('@', stop);
  if (at == std::string::npos || at < start) return "";
  const std::string info = url.substr(start, at - start);
  if (info.find(':') == std::string::npos) return "";
  if (info.find_first_of("@/?#") == std::string::npos) return "";
  return "the user name or password holds '@', '/', '?' or '#' unescaped (write them as %40, %2F, %3F, %23); not "
         "connected";
}

// Writers wait this long for the lock before giving up.
constexpr int kBusyTimeoutMs = 60000;
// Arbitrary key of PostgreSQL's advisory lock that serializes history writers.
constexpr std::int64_t kAdvisoryLockKey = 0x7065657268697374;  // "peerhist"

// ---- SQLite ----

class SqliteRow : public SqlRow {
 public:
  explicit SqliteRow(sqlite3_stmt* st) : st_(st) {}
  bool isNull(int col) const override { return sqlite3_column_type(st_, col) == SQLITE_NULL; }
  std::int64_t integer(int col) const override { return sqlite3_column_int64(st_, col); }
  double real(int col) const override { return sqlite3_column_double(st_, col); }
  std::string text(int col) const override {
    const unsigned char* t = sqlite3_column_text(st_, col);
    return t ? std::string(reinterpret_cast<const char*>(t), sqlite3_column_bytes(st_, col)) : std::string();
  }
  size_t size(int col) const override { return static_cast<size_t>(sqlite3_column_bytes(st_, col)); }
  std::optional<std::int64_t> exactInteger(int col) const override {
    if (sqlite3_column_type(st_, col) != SQLITE_INTEGER) return std::nullopt;
    return sqlite3_column_int64(st_, col);
  }
  std::optional<double> exactReal(int col) const override {
    const int type = sqlite3_column_type(st_, col);
    if (type != SQLITE_INTEGER && type != SQLITE_FLOAT) return std::nullopt;
    return sqlite3_column_double(st_, col);
  }

 private:
  sqlite3_stmt* st_;
};

// A statement that failed: invalid_argument where the data given was refused (a constraint, a value too large for a
// column), unavailable where the database itself failed (its disk full, an I/O error, a lost server, a lock not
// granted in time), so that a caller stops instead of blaming the next input.
Status statementError(bool data, const std::string& dialect, std::string msg, const std::string& sql) {
  if (msg.empty()) msg = "the database gave no message";
  msg = dialect + ": " + msg + " (in: " + sql.substr(0, 80) + ")";
  return data ? PEERLAB_INVALID_ARGUMENT(msg) : PEERLAB_UNAVAILABLE(msg);
}

bool sqliteDataError(int code) {
  const int primary = code & 0xff;
  return primary == SQLITE_CONSTRAINT || primary == SQLITE_MISMATCH || primary == SQLITE_TOOBIG ||
         primary == SQLITE_RANGE;
}

class SqliteDatabase : public Database {
 public:
  /// `tidy`: a file whose -wal/-shm this read-only connection made (none were there): closing removes them.
  SqliteDatabase(sqlite3* db, std::string tidy = {}) : db_(db), tidy_(std::move(tidy)) {}
  ~SqliteDatabase() override {
    for (auto& [sql, st] : cache_)
      sqlite3_finalize(st);
    sqlite3_close_v2(db_);
    if (!tidy_.empty()) removeWalFiles(tidy_);
  }
  const char* dialect() const override { return "sqlite"; }

  Status exec(const std::string& sql) override {
    char* err = nullptr;
    if (const int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err); rc != SQLITE_OK) {
      std::string msg = err ? err : sqlite3_errmsg(db_);
      sqlite3_free(err);
      return statementError(sqliteDataError(sqlite3_extended_errcode(db_)), "sqlite", msg, sql);
    }
    return Status::ok();
  }

  Status query(const std::string& sql, const std::vector<SqlValue>& params,
               const std::function<void(const SqlRow&)>& onRow) override {
    sqlite3_stmt* st = nullptr;
    auto it = cache_.find(sql);
    if (it != cache_.end()) {
      st = it->second;
    } else {
      // $N placeholders become ?N, SQLite's numbered form.
      std::string s = sql;
      for (size_t i = 0; i < s.size(); ++i)
        if (s[i] == '$' && i + 1 < s.size() && isdigit(static_cast<unsigned char>(s[i + 1]))) s[i] = '?';
      if (sqlite3_prepare_v2(db_, s.c_str(), -1, &st, nullptr) != SQLITE_OK) {
        return statementError(false, "sqlite", sqlite3_errmsg(db_), sql);
      }
      cache_.emplace(sql, st);
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    for (size_t i = 0; i < params.size(); ++i) {
      const int idx = static_cast<int>(i) + 1;
      const SqlValue& v = params[i];
      if (std::holds_alternative<std::int64_t>(v))
        sqlite3_bind_int64(st, idx, std::get<std::int64_t>(v));
      else if (std::holds_alternative<double>(v))
        sqlite3_bind_double(st, idx, std::get<double>(v));
      else if (std::holds_alternative<std::string>(v)) {
        const std::string& t = std::get<std::string>(v);
        sqlite3_bind_text(st, idx, t.data(), static_cast<int>(t.size()), SQLITE_TRANSIENT);
      } else
        sqlite3_bind_null(st, idx);
    }
    SqliteRow row(st);
    while (true) {
      const int rc = sqlite3_step(st);
      if (rc == SQLITE_ROW) {
        if (onRow) onRow(row);
        continue;
      }
      if (rc == SQLITE_DONE) break;
      std::string msg = sqlite3_errmsg(db_);
      const bool data = sqliteDataError(sqlite3_extended_errcode(db_));
      sqlite3_reset(st);
      return statementError(data, "sqlite", msg, sql);
    }
    sqlite3_reset(st);
    return Status::ok();
  }

  Status beginWrite() override { return exec("BEGIN IMMEDIATE"); }
  Status commit() override { return exec("COMMIT"); }
  Status rollback() override { return exec("ROLLBACK"); }

 private:
  // A read-only connection cannot checkpoint, so the -wal and -shm files it made stay behind; a read-write connection
  // that reads once and closes removes them when it is the last one (SQLite's own rule, safe beside other
  // connections, which keep them). Nothing is written to the database.
  static void removeWalFiles(const std::string& path) {
    sqlite3* db = nullptr;
    if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK) {
      sqlite3_busy_timeout(db, 1000);
      sqlite3_exec(db, "PRAGMA schema_version", nullptr, nullptr, nullptr);
    }
    sqlite3_close_v2(db);
  }

  sqlite3* db_;
  std::string tidy_;
  std::map<std::string, sqlite3_stmt*> cache_;
};

// Refuses what must not be opened as a SQLite database: a directory, a device, a file of another format.
Status checkSqliteFile(const std::string& path, OpenMode mode) {
  const std::string name = "--db " + redactUrl(path);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT && mode == OpenMode::kCreate) return Status::ok();
    if (err == ENOENT) {
      return PEERLAB_INVALID_ARGUMENT(name +
                                      ": no such history database (only `peerlab history ingest`, or --create, "
                                      "makes a new one)");
    }
    return PEERLAB_INVALID_ARGUMENT(name + ": " + std::strerror(err));
  }
  if (S_ISDIR(st.st_mode)) return PEERLAB_INVALID_ARGUMENT(name + ": is a directory, not a SQLite database");
  if (!S_ISREG(st.st_mode)) return PEERLAB_INVALID_ARGUMENT(name + ": not a regular file");
  if (st.st_size == 0) {
    if (mode == OpenMode::kCreate) return Status::ok();
    return PEERLAB_INVALID_ARGUMENT(name + ": empty file, not a history database");
  }
  static constexpr char kHeader[16] = {'S', 'Q', 'L', 'i', 't', 'e', ' ', 'f', 'o', 'r', 'm', 'a', 't', ' ', '3', '\0'};
  char head[16] = {};
  std::ifstream f(path, std::ios::binary);
  if (!f) return PEERLAB_INVALID_ARGUMENT(name + ": cannot read: " + std::strerror(errno));
  f.read(head, sizeof(head));
  if (f.gcount() != static_cast<std::streamsize>(sizeof(head)) || std::memcmp(head, kHeader, sizeof(head)) != 0) {
    return PEERLAB_INVALID_ARGUMENT(name + ": not a SQLite database (left as it is)");
  }
  return Status::ok();
}

// "file:" URI of a path for sqlite3_open_v2 (SQLITE_OPEN_URI): every byte but unreserved ones and '/' escaped.
std::string sqliteUri(const std::string& path) {
  std::error_code ec;
  const std::string abs = std::filesystem::absolute(path, ec).string();
  std::string out = "file:";
  for (unsigned char c : ec ? path : abs) {
    if (std::isalnum(c) || c == '/' || c == '.' || c == '-' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

StatusOr<std::unique_ptr<Database>> openSqlite(const std::string& path, OpenMode mode) {
  PEERLAB_RETURN_IF_ERROR(checkSqliteFile(path, mode));
  sqlite3* db = nullptr;
  std::string target = path;
  int flags = SQLITE_OPEN_READWRITE | (mode == OpenMode::kCreate ? SQLITE_OPEN_CREATE : 0);
  std::string tidy;
  if (mode == OpenMode::kReadOnly) {
    // Read-only: a WAL database needs its -shm index; where the directory takes no new file and no writer keeps one
    // there, the file is read as immutable (nothing else can be changing it through a WAL that does not exist).
    std::filesystem::path dir = std::filesystem::path(path).parent_path();
    if (dir.empty()) dir = ".";
    const bool dirWritable = ::access(dir.c_str(), W_OK | X_OK) == 0;
    const bool walThere = exists(path + "-wal"), shmThere = exists(path + "-shm");
    target = sqliteUri(path) + "?mode=ro" + (!dirWritable && !walThere ? "&immutable=1" : "");
    flags = SQLITE_OPEN_READONLY | SQLITE_OPEN_URI;
    if (dirWritable && !walThere && !shmThere) tidy = path;
  }
  const int rc = sqlite3_open_v2(target.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close_v2(db);
    return PEERLAB_INVALID_ARGUMENT("--db " + redactUrl(path) + ": cannot open SQLite database: " + msg);
  }
  sqlite3_busy_timeout(db, kBusyTimeoutMs);
  auto out = std::make_unique<SqliteDatabase>(db, tidy);
  Status st;
  if (mode == OpenMode::kReadOnly) {
    // Reading the schema now makes a database that cannot be read fail here, with its name.
    st = out->exec("PRAGMA query_only=ON");
    if (st.isOk()) st = out->query("SELECT COUNT(*) FROM sqlite_master", {}, {});
  } else {
    // NORMAL sync is durable at each WAL checkpoint (the store sets WAL, stored in the file, when it makes the schema).
    st = out->exec("PRAGMA synchronous=NORMAL");
    if (st.isOk()) st = out->exec("PRAGMA foreign_keys=ON");
  }
  if (!st.isOk()) {
    return PEERLAB_INVALID_ARGUMENT("--db " + redactUrl(path) + ": not a usable SQLite database: " + st.message());
  }
  return std::unique_ptr<Database>(std::move(out));
}

// ---- PostgreSQL ----
#ifdef PEERLAB_HAVE_LIBPQ

class PgRow : public SqlRow {
 public:
  PgRow(PGresult* res, int row) : res_(res), row_(row) {}
  bool isNull(int col) const override { return PQgetisnull(res_, row_, col); }
  std::int64_t integer(int col) const override { return std::strtoll(PQgetvalue(res_, row_, col), nullptr, 10); }
  double real(int col) const override { return std::strtod(PQgetvalue(res_, row_, col), nullptr); }
  std::string text(int col) const override {
    return std::string(PQgetvalue(res_, row_, col), PQgetlength(res_, row_, col));
  }
  size_t size(int col) const override { return static_cast<size_t>(PQgetlength(res_, row_, col)); }
  std::optional<std::int64_t> exactInteger(int col) const override {
    if (isNull(col)) return std::nullopt;
    const char* s = PQgetvalue(res_, row_, col);
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(s, &end, 10);
    if (end == s || *end != '\0' || errno != 0) return std::nullopt;
    return v;
  }
  std::optional<double> exactReal(int col) const override {
    if (isNull(col)) return std::nullopt;
    const char* s = PQgetvalue(res_, row_, col);
    char* end = nullptr;
    const double v = std::strtod(s, &end);
    if (end == s || *end != '\0') return std::nullopt;
    return v;
  }

 private:
  PGresult* res_;
  int row_;
};

std::string formatReal(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

class PgDatabase : public Database {
 public:
  explicit PgDatabase(PGconn* conn) : conn_(conn) {
    // libpq prints what the server sends beside a result on stderr by default; a server that ends the session says
    // why that way ("FATAL: terminating connection due to administrator command"): kept for the one error line.
    PQsetNoticeProcessor(conn_, &PgDatabase::onNotice, this);
  }
  ~PgDatabase() override { PQfinish(conn_); }
  const char* dialect() const override { return "postgresql"; }

  Status exec(const std::string& sql) override { return query(sql, {}, {}); }

  Status query(const std::string& sql, const std::vector<SqlValue>& params,
               const std::function<void(const SqlRow&)>& onRow) override {
    std::vector<std::string> text(params.size());
    std::vector<const char*> values(params.size(), nullptr);
    for (size_t i = 0; i < params.size(); ++i) {
      const SqlValue& v = params[i];
      if (std::holds_alternative<std::int64_t>(v))
        text[i] = std::to_string(std::get<std::int64_t>(v));
      else if (std::holds_alternative<double>(v))
        text[i] = formatReal(std::get<double>(v));
      else if (std::holds_alternative<std::string>(v))
        text[i] = std::get<std::string>(v);
      else
        continue;
      values[i] = text[i].c_str();
    }
    PGresult* res = nullptr;
    if (params.empty()) {
      res = PQexec(conn_, sql.c_str());
    } else {
      auto it = prepared_.find(sql);
      if (it == prepared_.end()) {
        const std::string name = "s" + std::to_string(prepared_.size());
        PGresult* prep = PQprepare(conn_, name.c_str(), sql.c_str(), static_cast<int>(params.size()), nullptr);
        if (PQresultStatus(prep) != PGRES_COMMAND_OK) return failure(prep, sql);
        PQclear(prep);
        it = prepared_.emplace(sql, name).first;
      }
      res = PQexecPrepared(conn_, it->second.c_str(), static_cast<int>(params.size()), values.data(), nullptr, nullptr,
                           0);
    }
    const ExecStatusType rc = PQresultStatus(res);
    if (rc != PGRES_COMMAND_OK && rc != PGRES_TUPLES_OK) return failure(res, sql);
    if (onRow) {
      for (int r = 0; r < PQntuples(res); ++r)
        onRow(PgRow(res, r));
    }
    PQclear(res);
    return Status::ok();
  }

  Status beginWrite() override {
    PEERLAB_RETURN_IF_ERROR(exec("BEGIN"));
    return exec("SELECT pg_advisory_xact_lock(" + std::to_string(kAdvisoryLockKey) + ")");
  }
  Status commit() override { return exec("COMMIT"); }
  Status rollback() override { return exec("ROLLBACK"); }

 private:
  // The failed statement's status (and `res` cleared): SQLSTATE class 22 (data exception) and 23 (integrity
  // constraint) are the data's fault; everything else (a connection lost, 53 insufficient resources such as a full
  // disk, 57 an administrator's shutdown) the database's. A lost connection leaves the result without a message:
  // the connection's own says what happened.
  Status failure(PGresult* res, const std::string& sql) {
    std::string msg = res != nullptr ? PQresultErrorMessage(res) : "";
    const char* state = res != nullptr ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : nullptr;
    const std::string sqlstate = state != nullptr ? state : "";
    PQclear(res);
    if (trim(msg).empty()) msg = PQerrorMessage(conn_);
    if (trim(msg).empty() && PQstatus(conn_) != CONNECTION_OK) msg = "the connection to the server is lost";
    // The server's own reason for ending the session comes first.
    if (!fatal_.empty() && msg.find(fatal_) == std::string::npos) msg = fatal_ + "; " + msg;
    fatal_.clear();
    const bool data = sqlstate.rfind("22", 0) == 0 || sqlstate.rfind("23", 0) == 0;
    return statementError(data, "postgresql", trim(msg), sql);
  }

  static void onNotice(void* self, const char* message) {
    std::string text = trim(message != nullptr ? message : "");
    for (const char* severity : {"FATAL:", "PANIC:"}) {
      if (text.rfind(severity, 0) == 0) {
        text = text.substr(std::strlen(severity));
        while (!text.empty() && text.front() == ' ')
          text.erase(0, 1);
        static_cast<PgDatabase*>(self)->fatal_ = text.substr(0, 500);
      }
    }
  }

  static std::string trim(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
      s.pop_back();
    for (char& c : s)
      if (c == '\n' || c == '\t') c = ' ';
    return s;
  }
  PGconn* conn_;
  std::map<std::string, std::string> prepared_;
  std::string fatal_;  ///< what the server said when it ended the session, until an error line carries it
};

std::string oneLine(std::string msg) {
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' '))
    msg.pop_back();
  for (char& c : msg)
    if (c == '\n' || c == '\t') c = ' ';
  return msg;
}

// libpq's parse of a connection string (URL or keyword/value): "" when it takes it, else its reason (password masked).
std::string conninfoError(const std::string& conninfo) {
  char* err = nullptr;
  PQconninfoOption* opts = PQconninfoParse(conninfo.c_str(), &err);
  std::string why;
  if (opts == nullptr) why = err != nullptr ? maskPassword(oneLine(err), conninfo) : std::string("out of memory");
  PQconninfoFree(opts);
  PQfreemem(err);
  return why;
}

StatusOr<std::unique_ptr<Database>> openPostgres(const std::string& url, OpenMode mode) {
  std::string conninfo = libpqForm(url);
  const bool isUrl = hasPostgresScheme(url);
  // Connecting waits at most 10 s unless the string says otherwise.
  if (url.find("connect_timeout") == std::string::npos) {
    if (isUrl) {
      conninfo += url.find('?') == std::string::npos ? "?connect_timeout=10" : "&connect_timeout=10";
    } else {
      conninfo += " connect_timeout=10";
    }
  }
  PGconn* conn = PQconnectdb(conninfo.c_str());
  if (PQstatus(conn) != CONNECTION_OK) {
    std::string msg = conn != nullptr ? PQerrorMessage(conn) : "out of memory";
    PQfinish(conn);
    return PEERLAB_INVALID_ARGUMENT("--db " + redactUrl(url) +
                                    ": cannot connect to PostgreSQL: " + printable(maskPassword(oneLine(msg), url)));
  }
  auto out = std::make_unique<PgDatabase>(conn);
  Status st = out->exec("SET client_min_messages TO warning");
  // Writers wait for each other's lock as long as SQLite's busy timeout, then fail instead of hanging.
  if (st.isOk()) st = out->exec("SET lock_timeout = '" + std::to_string(kBusyTimeoutMs) + "ms'");
  if (st.isOk() && mode == OpenMode::kReadOnly) st = out->exec("SET default_transaction_read_only = on");
  if (!st.isOk()) return PEERLAB_INVALID_ARGUMENT("--db " + redactUrl(url) + ": " + maskPassword(st.message(), url));
  return std::unique_ptr<Database>(std::move(out));
}
#else
std::string conninfoError(const std::string&) {
  return "";
}

StatusOr<std::unique_ptr<Database>> openPostgres(const std::string& url, OpenMode) {
  return PEERLAB_INVALID_ARGUMENT("--db " + redactUrl(url) +
                                  ": this peerlab was built without PostgreSQL's client library (libpq); install "
                                  "libpq-dev and rebuild, or use a SQLite path");
}
#endif

}  // namespace

std::string withPassword(const std::string& url, const std::string& password) {
  if (hasPostgresScheme(url)) {
    std::string enc;
    for (unsigned char c : password) {
      if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
        enc += static_cast<char>(c);
      } else {
        char b[4];
        std::snprintf(b, sizeof b, "%%%02X", c);
        enc += b;
      }
    }
    return url + (url.find('?') == std::string::npos ? "?" : "&") + "password=" + enc;
  }
  std::string quoted;
  for (char c : password) {
    if (c == '\\' || c == '\'') quoted += '\\';
    quoted += c;
  }
  return url + " password='" + quoted + "'";
}

bool isPostgresUrl(const std::string& url) {
  return hasPostgresScheme(url) || looksLikeKeywordValue(url);
}

std::string redactUrl(const std::string& url) {
  // Every password span, as maskPassword finds them (an unquoted keyword/value password runs up to the next
  // keyword=value pair), then whatever else redactSecrets knows.
  std::string out = url;
  const std::vector<PasswordSpan> spans = passwordSpans(url);
  for (auto it = spans.rbegin(); it != spans.rend(); ++it)
    out.replace(it->begin, it->end - it->begin, "***");
  return printable(redactSecrets(out));
}

std::string maskPassword(const std::string& message, const std::string& url) {
  std::vector<std::string> pieces;
  auto add = [&](const std::string& secret) {
    if (secret.empty()) return;
    pieces.push_back(secret);
    // libpq may cut an unescaped password at any of these and quote a piece of it.
    size_t start = 0;
    for (size_t i = 0; i <= secret.size(); ++i) {
      if (i == secret.size() || std::strchr("@/?#:&= \t'\"\\", secret[i]) != nullptr) {
        if (i > start) pieces.push_back(secret.substr(start, i - start));
        start = i + 1;
      }
    }
    // The percent-decoded form, as libpq uses it.
    std::string decoded;
    for (size_t i = 0; i < secret.size(); ++i) {
      if (secret[i] == '%' && i + 2 < secret.size() && std::isxdigit(static_cast<unsigned char>(secret[i + 1])) &&
          std::isxdigit(static_cast<unsigned char>(secret[i + 2]))) {
        decoded += static_cast<char>(std::stoi(secret.substr(i + 1, 2), nullptr, 16));
        i += 2;
      } else {
        decoded += secret[i];
      }
    }
    if (decoded != secret) pieces.push_back(decoded);
  };
  for (const PasswordSpan& span : passwordSpans(url))
    add(url.substr(span.begin, span.end - span.begin));
  // Longest first, so that a piece inside a longer one does not break it up.
  std::sort(pieces.begin(), pieces.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  std::string out = message;
  for (const std::string& p : pieces) {
    const bool word =
        std::isalnum(static_cast<unsigned char>(p.front())) && std::isalnum(static_cast<unsigned char>(p.back()));
    for (size_t at = out.find(p); at != std::string::npos; at = out.find(p, at)) {
      // A short piece is masked where it stands alone (a quoted value), not inside another word.
      const bool alone = (at == 0 || !std::isalnum(static_cast<unsigned char>(out[at - 1]))) &&
                         (at + p.size() == out.size() || !std::isalnum(static_cast<unsigned char>(out[at + p.size()])));
      if (p.size() >= 4 || !word || alone) {
        out.replace(at, p.size(), "***");
        at += 3;
      } else {
        at += p.size();
      }
    }
  }
  return out;
}

StatusOr<Backend> classifyDatabase(const std::string& url, OpenMode mode) {
  if (url.empty()) return PEERLAB_INVALID_ARGUMENT("--db: empty (give a SQLite path or a postgresql:// URL)");
  const std::string name = "--db " + redactUrl(url);
  if (hasPostgresScheme(url)) {
    if (const std::string why = unescapedUserInfo(url); !why.empty())
      return PEERLAB_INVALID_ARGUMENT(name + ": " + why);
    if (const std::string why = conninfoError(libpqForm(url)); !why.empty()) {
      return PEERLAB_INVALID_ARGUMENT(name + ": not a valid PostgreSQL URL (" + printable(why) + ")");
    }
    return Backend::kPostgres;
  }
  // An existing file is a SQLite database (or refused as one when it is not).
  if (exists(url)) return Backend::kSqlite;
  if (url.find("://") != std::string::npos) {
    return PEERLAB_INVALID_ARGUMENT(name +
                                    ": not a SQLite file nor a PostgreSQL URL (postgresql://user@host/db; no other "
                                    "scheme is read)");
  }
  if (looksLikeKeywordValue(url)) {
    if (const std::string why = conninfoError(url); !why.empty()) {
      return PEERLAB_INVALID_ARGUMENT(name + ": not a valid PostgreSQL connection string (" + printable(why) +
                                      ") and no such file");
    }
    return Backend::kPostgres;
  }
  // A value holding a password is a connection string gone wrong: it never becomes a file name.
  if (redactSecrets(url) != url) {
    return PEERLAB_INVALID_ARGUMENT(name +
                                    ": holds a password but is no PostgreSQL connection string (postgresql://... or "
                                    "host=... dbname=...); no file made");
  }
  if (mode != OpenMode::kCreate) {
    return PEERLAB_INVALID_ARGUMENT(name +
                                    ": no such history database (only `peerlab history ingest`, or --create, makes a "
                                    "new one)");
  }
  return Backend::kSqlite;
}

StatusOr<std::unique_ptr<Database>> openDatabase(const std::string& url, OpenMode mode) {
  PEERLAB_ASSIGN_OR_RETURN(Backend backend, classifyDatabase(url, mode));
  if (backend == Backend::kPostgres) return openPostgres(url, mode);
  return openSqlite(url, mode);
}

Status writeTransaction(Database& db, const std::function<Status(bool& keep)>& body) {
  Status st = db.beginWrite();
  bool keep = true;
  if (st.isOk()) st = body(keep);
  if (st.isOk() && keep) st = db.commit();
  if (!st.isOk() || !keep) db.rollback().ignore();
  return st;
}

Status writeTransaction(Database& db, const std::function<Status()>& body) {
  return writeTransaction(db, [&](bool&) { return body(); });
}

}  // namespace peerlab::history
