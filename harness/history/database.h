#pragma once
/// The SQL connection under the history store: SQLite (a file path) or PostgreSQL (a postgresql:// URL) behind one
/// small interface. Statements use $1, $2, ... placeholders on both.

#include <cstdint>
#include <functional>
#include <memory>
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

/// Whether opening may create a database.
enum class OpenMode {
  kCreate,    ///< a missing SQLite file is created (an empty file is taken as a new database)
  kExisting,  ///< the SQLite file must exist and be a SQLite database; nothing is created
};

/// Opens `url`: "postgresql://..." or "postgres://..." connects with libpq, anything else is a SQLite file path.
/// An existing file that is not a SQLite database (its first 16 bytes are not "SQLite format 3\0") is never opened
/// in either mode, so it is never converted. `invalid_argument` names the URL (secrets redacted) and the reason.
StatusOr<std::unique_ptr<Database>> openDatabase(const std::string& url, OpenMode mode = OpenMode::kCreate);

/// True for a PostgreSQL URL.
bool isPostgresUrl(const std::string& url);

/// The URL as messages show it: a password in it replaced by "***" (reference/core/text.h redactSecrets).
std::string redactUrl(const std::string& url);

}  // namespace peerlab::history
