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

/// Opens `url`: "postgresql://..." or "postgres://..." connects with libpq, anything else is a SQLite file path
/// (created when missing). `invalid_argument` names the URL and the reason.
StatusOr<std::unique_ptr<Database>> openDatabase(const std::string& url);

/// True for a PostgreSQL URL.
bool isPostgresUrl(const std::string& url);

}  // namespace peerlab::history
