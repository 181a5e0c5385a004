#include "harness/history/database.h"

#include <sqlite3.h>
#ifdef PEERLAB_HAVE_LIBPQ
#include <libpq-fe.h>
#endif

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>

#include "reference/core/text.h"

namespace peerlab::history {
namespace {

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

 private:
  sqlite3_stmt* st_;
};

class SqliteDatabase : public Database {
 public:
  explicit SqliteDatabase(sqlite3* db) : db_(db) {}
  ~SqliteDatabase() override {
    for (auto& [sql, st] : cache_)
      sqlite3_finalize(st);
    sqlite3_close_v2(db_);
  }
  const char* dialect() const override { return "sqlite"; }

  Status exec(const std::string& sql) override {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
      std::string msg = err ? err : sqlite3_errmsg(db_);
      sqlite3_free(err);
      return PEERLAB_INVALID_ARGUMENT("sqlite: " + msg + " (in: " + sql.substr(0, 80) + ")");
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
        return PEERLAB_INVALID_ARGUMENT(std::string("sqlite: ") + sqlite3_errmsg(db_) + " (in: " + sql.substr(0, 80) +
                                        ")");
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
      sqlite3_reset(st);
      return PEERLAB_INVALID_ARGUMENT("sqlite: " + msg + " (in: " + sql.substr(0, 80) + ")");
    }
    sqlite3_reset(st);
    return Status::ok();
  }

  Status beginWrite() override { return exec("BEGIN IMMEDIATE"); }
  Status commit() override { return exec("COMMIT"); }
  Status rollback() override { return exec("ROLLBACK"); }

 private:
  sqlite3* db_;
  std::map<std::string, sqlite3_stmt*> cache_;
};

// Refuses what must not be opened as a SQLite database: a directory, a device, a file of another format.
Status checkSqliteFile(const std::string& path, OpenMode mode) {
  const std::string name = "--db " + printable(path);
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

StatusOr<std::unique_ptr<Database>> openSqlite(const std::string& path, OpenMode mode) {
  PEERLAB_RETURN_IF_ERROR(checkSqliteFile(path, mode));
  sqlite3* db = nullptr;
  const int flags = SQLITE_OPEN_READWRITE | (mode == OpenMode::kCreate ? SQLITE_OPEN_CREATE : 0);
  const int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close_v2(db);
    return PEERLAB_INVALID_ARGUMENT("--db " + printable(path) + ": cannot open SQLite database: " + msg);
  }
  sqlite3_busy_timeout(db, kBusyTimeoutMs);
  auto out = std::make_unique<SqliteDatabase>(db);
  // NORMAL sync is durable at each WAL checkpoint (the store sets WAL, stored in the file, when it makes the schema).
  Status st = out->exec("PRAGMA synchronous=NORMAL");
  if (st.isOk()) st = out->exec("PRAGMA foreign_keys=ON");
  if (!st.isOk()) {
    return PEERLAB_INVALID_ARGUMENT("--db " + printable(path) + ": not a usable SQLite database: " + st.message());
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
  explicit PgDatabase(PGconn* conn) : conn_(conn) {}
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
        const bool ok = PQresultStatus(prep) == PGRES_COMMAND_OK;
        std::string msg = ok ? "" : PQresultErrorMessage(prep);
        PQclear(prep);
        if (!ok) return PEERLAB_INVALID_ARGUMENT("postgresql: " + trim(msg) + " (in: " + sql.substr(0, 80) + ")");
        it = prepared_.emplace(sql, name).first;
      }
      res = PQexecPrepared(conn_, it->second.c_str(), static_cast<int>(params.size()), values.data(), nullptr, nullptr,
                           0);
    }
    const ExecStatusType rc = PQresultStatus(res);
    if (rc != PGRES_COMMAND_OK && rc != PGRES_TUPLES_OK) {
      std::string msg = PQresultErrorMessage(res);
      PQclear(res);
      return PEERLAB_INVALID_ARGUMENT("postgresql: " + trim(msg) + " (in: " + sql.substr(0, 80) + ")");
    }
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
  static std::string trim(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
      s.pop_back();
    for (char& c : s)
      if (c == '\n' || c == '\t') c = ' ';
    return s;
  }
  PGconn* conn_;
  std::map<std::string, std::string> prepared_;
};

StatusOr<std::unique_ptr<Database>> openPostgres(const std::string& url) {
  // Connecting waits at most 10 s unless the URL says otherwise.
  std::string withTimeout = url;
  if (url.find("connect_timeout=") == std::string::npos) {
    withTimeout += url.find('?') == std::string::npos ? "?connect_timeout=10" : "&connect_timeout=10";
  }
  PGconn* conn = PQconnectdb(withTimeout.c_str());
  if (PQstatus(conn) != CONNECTION_OK) {
    std::string msg = PQerrorMessage(conn);
    PQfinish(conn);
    while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' '))
      msg.pop_back();
    for (char& c : msg)
      if (c == '\n' || c == '\t') c = ' ';
    return PEERLAB_INVALID_ARGUMENT("--db " + redactUrl(url) + ": cannot connect to PostgreSQL: " + redactSecrets(msg));
  }
  auto out = std::make_unique<PgDatabase>(conn);
  Status st = out->exec("SET client_min_messages TO warning");
  // Writers wait for each other's lock as long as SQLite's busy timeout, then fail instead of hanging.
  if (st.isOk()) st = out->exec("SET lock_timeout = '" + std::to_string(kBusyTimeoutMs) + "ms'");
  if (!st.isOk()) return st;
  return std::unique_ptr<Database>(std::move(out));
}
#else
StatusOr<std::unique_ptr<Database>> openPostgres(const std::string& url) {
  return PEERLAB_INVALID_ARGUMENT("--db " + redactUrl(url) +
                                  ": this peerlab was built without PostgreSQL's client library (libpq); install "
                                  "libpq-dev and rebuild, or use a SQLite path");
}
#endif

}  // namespace

bool isPostgresUrl(const std::string& url) {
  return url.rfind("postgresql://", 0) == 0 || url.rfind("postgres://", 0) == 0;
}

std::string redactUrl(const std::string& url) {
  return printable(redactSecrets(url));
}

StatusOr<std::unique_ptr<Database>> openDatabase(const std::string& url, OpenMode mode) {
  if (url.empty()) return PEERLAB_INVALID_ARGUMENT("--db: empty (give a SQLite path or a postgresql:// URL)");
  if (isPostgresUrl(url)) return openPostgres(url);
  return openSqlite(url, mode);
}

}  // namespace peerlab::history
