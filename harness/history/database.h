#pragma once
/// The SQL connection under the history store: SQLite (a file path) or PostgreSQL (a postgresql:// URL or a libpq
/// keyword/value string) behind one small interface. Statements use $1, $2, ... placeholders on both.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "reference/core/status.h"

namespace peerlab::history {

/// A bound parameter: NULL, integer, real or text.
using SqlValue = std::variant<std::monostate, std::int64_t, double, std::string>;

/// One row of a query result, read by column.
class SqlRow {
 public:
  virtual ~SqlRow() = default;
  virtual bool isNull(int col) const = 0;
  virtual std::int64_t integer(int col) const = 0;
  virtual double real(int col) const = 0;
  virtual std::string text(int col) const = 0;
  /// Bytes of the column's text, without copying it (so a huge stored value is refused before it is read).
  virtual size_t size(int col) const = 0;
  /// The column when it holds an integer (SQLite: stored as one; PostgreSQL: its text is one), else nullopt; a
  /// column of another type is never converted silently (SQLite would read "abc" or 2.7 as an integer).
  virtual std::optional<std::int64_t> exactInteger(int col) const = 0;
  /// The column when it holds a number (integer or real), else nullopt.
  virtual std::optional<double> exactReal(int col) const = 0;
};

class Database {
 public:
  virtual ~Database() = default;
  /// "sqlite" or "postgresql".
  virtual const char* dialect() const = 0;
  /// Runs one statement without parameters or results.
  virtual Status exec(const std::string& sql) = 0;
  /// Runs one statement with parameters; `onRow` sees each result row. Repeated statements are prepared once.
  virtual Status query(const std::string& sql, const std::vector<SqlValue>& params,
                       const std::function<void(const SqlRow&)>& onRow = {}) = 0;
  /// Starts a transaction that holds the write lock until commit: SQLite BEGIN IMMEDIATE (waits up to the busy
  /// timeout), PostgreSQL BEGIN plus a transaction-level advisory lock, so writers take turns on both.
  virtual Status beginWrite() = 0;
  virtual Status commit() = 0;
  virtual Status rollback() = 0;
};

/// Runs `body` in one write transaction (Database::beginWrite), all or nothing: committed when the body returns ok,
/// rolled back when it returns an error (returned), when it clears `keep` (ok returned, nothing written), or when the
/// start or the commit fails.
Status writeTransaction(Database& db, const std::function<Status(bool& keep)>& body);
/// As above, for a body that keeps what it wrote whenever it succeeds.
Status writeTransaction(Database& db, const std::function<Status()>& body);

/// Whether opening may create a database, and whether it may write.
enum class OpenMode {
  kCreate,    ///< a missing SQLite file is created (an empty file is taken as a new database)
  kExisting,  ///< the SQLite file must exist and be a SQLite database; nothing is created
  /// As kExisting, and nothing is written: SQLite opens with mode=ro (immutable=1 where its directory cannot be
  /// written and no writer has a -wal file there) and leaves no -wal/-shm file of its own behind; PostgreSQL
  /// sessions are read-only (default_transaction_read_only).
  kReadOnly,
};

/// What a --db value names.
enum class Backend { kSqlite, kPostgres };

/// Decides what `url` names, before anything is opened: a PostgreSQL URL (the scheme postgresql:// or postgres://
/// in any case) or a libpq keyword/value string ("host=db dbname=peerlab ...", checked with libpq's own parser) is
/// PostgreSQL; an existing file is SQLite; a path that does not exist is SQLite only where `mode` creates, and only
/// when it holds no password (such a value is a mistyped connection string, never a file name). Anything else (an
/// unknown scheme, a keyword/value string libpq refuses, a URL whose password holds an unescaped '@') is refused
/// with `invalid_argument` naming the value with its password as "***".
StatusOr<Backend> classifyDatabase(const std::string& url, OpenMode mode);

/// Opens `url` (classifyDatabase says which backend). An existing file that is not a SQLite database (its first 16
/// bytes are not "SQLite format 3\0") is never opened in any mode, so it is never converted. `invalid_argument`
/// names the URL (secrets redacted) and the reason; libpq's own messages have the password masked.
StatusOr<std::unique_ptr<Database>> openDatabase(const std::string& url, OpenMode mode = OpenMode::kCreate);

/// True for a PostgreSQL URL (its scheme in any case) or keyword/value connection string.
bool isPostgresUrl(const std::string& url);

/// `url` (PostgreSQL, without a password) with `password` added as libpq reads it: a password= query parameter of a
/// URL (percent-encoded), a quoted password keyword of a keyword/value string. For this process's own connections:
/// the result is never printed (messages go through redactUrl) and never put on a command line.
std::string withPassword(const std::string& url, const std::string& password);

/// The URL as messages show it: a password in it replaced by "***" (reference/core/text.h redactSecrets).
std::string redactUrl(const std::string& url);

/// `message` (from libpq, about connecting with `url`) with every piece of the URL's password replaced by "***",
/// whichever way libpq split it.
std::string maskPassword(const std::string& message, const std::string& url);

}  // namespace peerlab::history
