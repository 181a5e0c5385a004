// Fuzz target: stored rows read back from SQLite (harness/history store readers). Whatever another program or an
// older peerlab wrote into a history's tables, every reader (runs, results, the history, regressions, fleet, the site
// model and pages) answers: a row that does not read is left out with a warning, never a crash.
//
// Input: fields separated by '\n'. The first 18 fill one row of `runs` (its columns in schema order, id first), the
// next 5 one row of `node_states` (node, state, reason, recorded_at, source), the rest rows of `results` 18 at a
// time. A field's first byte gives its SQLite type: 'i' integer, 'r' real, 'n'
// NULL, 'b' blob, 'D' JSON nested as deep as the number after it ("D200000": [[[...]]]), anything else text (the
// whole field).

#include <sqlite3.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "harness/faults/fuzz/fuzz_util.h"
#include "harness/history/analysis.h"
#include "harness/history/site_model.h"
#include "harness/history/store.h"
#include "harness/report/render/site.h"
#include "reference/core/files.h"

namespace {

constexpr int kRunColumns = 18;
constexpr int kNodeStateColumns = 5;
constexpr int kResultColumns = 18;

void bindField(sqlite3_stmt* st, int index, const std::string& field) {
  const char type = field.empty() ? 't' : field[0];
  const std::string rest = field.empty() ? std::string() : field.substr(1);
  if (type == 'i') {
    sqlite3_bind_int64(st, index, std::strtoll(rest.c_str(), nullptr, 10));
  } else if (type == 'r') {
    sqlite3_bind_double(st, index, std::strtod(rest.c_str(), nullptr));
  } else if (type == 'n') {
    sqlite3_bind_null(st, index);
  } else if (type == 'b') {
    sqlite3_bind_blob(st, index, rest.data(), static_cast<int>(rest.size()), SQLITE_TRANSIENT);
  } else if (type == 'D') {
    const long depth = std::min(std::strtol(rest.c_str(), nullptr, 10), 1000000L);
    const std::string deep = std::string(std::max(depth, 0L), '[') + std::string(std::max(depth, 0L), ']');
    sqlite3_bind_text(st, index, deep.data(), static_cast<int>(deep.size()), SQLITE_TRANSIENT);
  } else {
    sqlite3_bind_text(st, index, field.data(), static_cast<int>(field.size()), SQLITE_TRANSIENT);
  }
}

bool insert(sqlite3* db, const std::string& sql, const std::vector<std::string>& fields, size_t from, int n) {
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) return false;
  for (int i = 0; i < n; ++i)
    bindField(st, i + 1, from + i < fields.size() ? fields[from + i] : std::string("n"));
  const bool ok = sqlite3_step(st) == SQLITE_DONE;
  sqlite3_finalize(st);
  return ok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace peerlab;
  static const std::string dir = [] {
    auto d = makePrivateDir("peerlab-fuzz-stored");
    return d.isOk() ? *d : std::string("/tmp/peerlab-fuzz-stored");
  }();
  const std::string path = dir + "/h.sqlite";
  const std::string site = dir + "/site";
  std::error_code ec;
  std::filesystem::remove(path, ec);
  std::filesystem::remove_all(site, ec);
  {
    // The schema, as ingest makes it.
    auto made = history::HistoryStore::open(path, history::OpenMode::kCreate);
    if (!made.isOk()) fuzz::invariantFailed("cannot make a history");
  }
  std::vector<std::string> fields;
  std::string text(reinterpret_cast<const char*>(data), size);
  for (size_t start = 0;;) {
    const size_t end = text.find('\n', start);
    fields.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK) {
    fuzz::invariantFailed("cannot open the history to write rows");
  }
  // Constraints (NOT NULL, keys) are the schema's own: a row they refuse is simply not there.
  sqlite3_exec(db, "PRAGMA foreign_keys=OFF", nullptr, nullptr, nullptr);
  insert(db,
         "INSERT INTO runs (id, content_hash, host, kind, git_sha, timestamp, tool, driver, cuda, nccl, gpus, results,"
         " source, expectations, ingested_at, verdict, checks, check_details) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8,"
         " ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
         fields, 0, kRunColumns);
  insert(db, "INSERT INTO node_states (node, state, reason, recorded_at, source) VALUES (?1, ?2, ?3, ?4, ?5)", fields,
         kRunColumns, kNodeStateColumns);
  constexpr size_t kFirstResult = kRunColumns + kNodeStateColumns;
  for (size_t at = kFirstResult; at < fields.size() && at < kFirstResult + 64 * kResultColumns; at += kResultColumns) {
    insert(db,
           "INSERT INTO results (run_id, seq, suite, impl, name, src, dst, ranks, bytes, time_us, algbw_gbps,"
           " busbw_gbps, wrong, status, p10_us, p90_us, samples, sample_values) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7,"
           " ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
           fields, at, kResultColumns);
  }
  sqlite3_close_v2(db);

  auto store = history::HistoryStore::open(path, history::OpenMode::kReadOnly);
  if (!store.isOk()) fuzz::invariantFailed("a history with rows in it does not open read-only");
  auto runs = (*store)->runs();
  if (!runs.isOk()) fuzz::invariantFailed("the stored runs do not list");
  for (const history::RunInfo& r : *runs) {
    if (r.checks &&
        (r.checks->passed + r.checks->failed + r.checks->warnings + r.checks->unsupported + r.checks->skipped !=
         r.checks->total)) {
      fuzz::invariantFailed("stored counts that do not add up were read");
    }
    (void)r.checksJson().dump();
    if (!r.check_details.is_object()) fuzz::invariantFailed("stored check details that are no object were read");
  }
  auto states = (*store)->nodeStates();
  if (!states.isOk()) fuzz::invariantFailed("the stored node states do not read");
  for (const history::NodeState& n : *states) {
    if (n.node.empty() || n.reason.size() > history::kMaxNodeReasonBytes * 4) {
      fuzz::invariantFailed("a stored node state beyond its bounds was read");
    }
  }
  Status each = (*store)->forEachResult([](const history::StoredResult& s) {
    if (s.valid && s.result.src && (*s.result.src < 0 || *s.result.src >= history::kMaxGpus)) {
      fuzz::invariantFailed("a result naming no GPU was taken as valid");
    }
  });
  if (!each.isOk()) fuzz::invariantFailed("the stored results do not read");
  auto h = history::loadHistory(**store);
  if (!h.isOk()) fuzz::invariantFailed("the stored history does not load");
  history::detectChangePoints(*h, {}, 1);
  history::findRegressions(*h, 3.0);
  history::fleetOutliers(*h);
  history::SiteOptions so;
  so.generated = "2026-01-01T00:00:00Z";
  auto model = history::buildSiteModel(**store, so);
  if (!model.isOk()) fuzz::invariantFailed("the site model of a stored history fails");
  std::vector<std::string> failures;
  Status st = report::renderHistorySite(*model, site, &failures);
  if (!failures.empty()) fuzz::invariantFailed("a kind of a stored history does not render");
  if (!st.isOk()) fuzz::invariantFailed("the site of a stored history cannot be written");
  if ((*store)->warnings().size() > history::HistoryStore::kMaxWarnings) fuzz::invariantFailed("unbounded warnings");
  return 0;
}
