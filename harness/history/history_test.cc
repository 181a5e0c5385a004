// The history store, series, regressions, fleet outliers and the site model, on SQLite and on PostgreSQL.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <set>

#include "harness/history/analysis.h"
#include "harness/history/site_model.h"
#include "harness/history/store.h"
#include "harness/report/metric.h"
#include "harness/report/render/site.h"
#include "harness/testing/history.h"
#include "reference/testing/testing.h"

namespace peerlab::history {
namespace {

using testing::syntheticResults;
using testing::syntheticRun;

TEST(StoredRuns, TimestampsAreNormalizedToUtcOrRefused) {
  EXPECT_EQ(normalizeTimestamp("2026-11-21T19:45:53Z"), "2026-11-21T19:45:53Z");
  EXPECT_EQ(normalizeTimestamp("2026-11-21T19:45:53.123456Z"), "2026-11-21T19:45:53Z");
  EXPECT_EQ(normalizeTimestamp("2026-11-21T21:45:53+02:00"), "2026-11-21T19:45:53Z");
  EXPECT_EQ(normalizeTimestamp("2026-11-21T00:15:00-01:00"), "2026-11-21T01:15:00Z");
  EXPECT_EQ(normalizeTimestamp("2026-11-21T19:45:53"), "2026-11-21T19:45:53Z");
  EXPECT_EQ(normalizeTimestamp("9999-12-31T23:59:59Z"), "9999-12-31T23:59:59Z");  // valid; the store orders it
  for (const char* bad : {"yesterday", "", "2026-13-01T00:00:00Z", "2026-02-30T00:00:00Z", "2025-02-29T00:00:00Z",
                          "2026-11-21 19:45", "2026-11-21T19:45:53Zjunk", "1969-12-31T23:59:59Z",
                          "2026-11-21T25:00:00Z", "2026-11-21T19:45:53+24:00", "<!--<script>2026-11-21T19:45:53Z"}) {
    EXPECT_FALSE(normalizeTimestamp(bad).has_value()) << bad;
  }
}

TEST(StoredRuns, ExpectationsKeepOnlyWellTypedEntries) {
  const nlohmann::json in = nlohmann::json::parse(R"([
    {"suite": "peer_copy", "impl": "peerlab.*", "gbps": 380.5, "src": 0, "dst": 1, "min_bytes": 1048576},
    {"suite": 5, "gbps": 380},
    {"suite": "peer_copy", "gbps": "fast"},
    {"suite": "peer_copy", "src": 1024, "gbps": 1},
    {"suite": "peer_copy", "src": -1, "gbps": 1},
    {"suite": "peer_copy", "gbps": -3},
    7, "text", null,
    {"suite": "host_copy", "metric": "busbw_gbps", "gbps": 50.4}
  ])");
  const nlohmann::json out = sanitizeExpectations(in);
  ASSERT_EQ(out.size(), 2u) << out.dump();
  EXPECT_EQ(out[0]["impl"], "peerlab.*");
  EXPECT_EQ(out[1]["suite"], "host_copy");
  EXPECT_TRUE(sanitizeExpectations(nlohmann::json::object()).empty());
}

// What --db names is decided from the value alone (and whether a file is there), before anything is opened.
TEST(ConnectionStrings, AreClassifiedBeforeAnythingIsOpened) {
  const std::string dir = ::testing::TempDir() + "/peerlab-classify-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string file = dir + "/h.sqlite";
  std::ofstream(file) << "x";
  struct Case {
    std::string db;
    OpenMode mode;
    std::optional<Backend> backend;  // nullopt: refused
  };
  const std::vector<Case> cases = {
      {"postgresql://u@db/x", OpenMode::kReadOnly, Backend::kPostgres},
      {"POSTGRESQL://u@db/x", OpenMode::kReadOnly, Backend::kPostgres},
      {"PostGres://u@db/x", OpenMode::kCreate, Backend::kPostgres},
      {"host=db dbname=x user=u", OpenMode::kCreate, Backend::kPostgres},
      {" dbname = x", OpenMode::kReadOnly, Backend::kPostgres},
      {"postgresql://u:p@ss@db/x", OpenMode::kCreate, std::nullopt},
      {"sqlite://x.db", OpenMode::kCreate, std::nullopt},
      {file, OpenMode::kReadOnly, Backend::kSqlite},
      {dir + "/new.sqlite", OpenMode::kCreate, Backend::kSqlite},
      {dir + "/new.sqlite", OpenMode::kReadOnly, std::nullopt},
      {dir + "/new.sqlite", OpenMode::kExisting, std::nullopt},
      {dir + "/new.sqlite password=x", OpenMode::kCreate, std::nullopt},
      {"", OpenMode::kCreate, std::nullopt},
  };
  for (const Case& c : cases) {
    auto b = classifyDatabase(c.db, c.mode);
    if (c.backend) {
      ASSERT_TRUE(b.isOk()) << c.db << ": " << b.status().toString();
      EXPECT_EQ(*b, *c.backend) << c.db;
    } else {
      EXPECT_FALSE(b.isOk()) << c.db;
    }
  }
#ifdef PEERLAB_HAVE_LIBPQ
  // libpq's own parser refuses what it cannot take.
  EXPECT_FALSE(classifyDatabase("host=db bogus_keyword=1", OpenMode::kCreate).isOk());
  EXPECT_FALSE(classifyDatabase("host=db dbname='x", OpenMode::kCreate).isOk());
#endif
  EXPECT_FALSE(std::filesystem::exists(dir + "/new.sqlite"));
  std::filesystem::remove_all(dir);
}

// libpq's messages quote pieces of a password it split wrongly; every piece is masked.
TEST(ConnectionStrings, LibpqMessagesNeverShowThePassword) {
  struct Case {
    std::string message;
    std::string url;
    std::vector<std::string> secrets;
  };
  const std::vector<Case> cases = {
      {"could not translate host name \"ss-w0rd@db\" to address", "postgresql://u:p@ss-w0rd@db/x", {"ss-w0rd"}},
      {"invalid port number: \"s3cr3t\"", "postgresql://u:s3cr3t/tail@db/x", {"s3cr3t"}},
      {"missing \"=\" after \"tail\" in connection info string", "host=db password=s3cr3t tail", {"tail", "s3cr3t"}},
      {"password s3cr3t rejected", "host=db password='s3cr3t'", {"s3cr3t"}},
      {"user p%40ss: p@ss", "postgresql://u:p%40ss@db/x", {"p@ss", "p%40ss"}},
  };
  for (const Case& c : cases) {
    const std::string masked = maskPassword(c.message, c.url);
    for (const std::string& secret : c.secrets)
      EXPECT_EQ(masked.find(secret), std::string::npos) << c.message << " -> " << masked;
    EXPECT_NE(masked.find("***"), std::string::npos) << masked;
  }
  // Words that only contain a short piece are left alone.
  EXPECT_EQ(maskPassword("database \"x\" does not exist", "postgresql://u:ab@db/x"), "database \"x\" does not exist");
}

// A history of more machine kinds than a site shows is refused before its series are read.
TEST(SiteModel, MoreKindsThanASiteShowsAreRefused) {
  const std::string dir = ::testing::TempDir() + "/peerlab-kinds-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  auto store = HistoryStore::open(dir + "/h.sqlite");
  ASSERT_TRUE(store.isOk()) << store.status().toString();
  std::mt19937_64 rng(31);
  ASSERT_TRUE((*store)->ingest(syntheticRun(rng, 0, "node", "kind-0", 1.0, 1.0, 0.01, 2)).isOk());
  auto one = buildSiteModel(**store);
  ASSERT_TRUE(one.isOk()) << one.status().toString();
  for (size_t k = 1; k <= report::kMaxSiteKinds; ++k) {
    report::Run run =
        syntheticRun(rng, static_cast<int>(k % 300), "node", "kind-" + std::to_string(k), 1.0, 1.0, 0.01, 2);
    run.results.resize(1);
    ASSERT_TRUE((*store)->ingest(run).isOk());
  }
  auto many = buildSiteModel(**store);
  ASSERT_FALSE(many.isOk());
  EXPECT_NE(many.status().message().find("1001 machine kinds; a site shows at most 1000"), std::string::npos)
      << many.status().message();
  store->reset();
  std::filesystem::remove_all(dir);
}

TEST(SeriesMetric, TimeForSmallSizesAndBandwidthAboveNothingForTestsAndProbes) {
  report::Result r;
  r.suite = "zcopy";
  r.bytes = 8.0;
  r.algbw_gbps = 0.0007;
  r.time_us = 10.8;
  ASSERT_TRUE(report::seriesMetric(r));
  EXPECT_EQ(report::seriesMetric(r)->field, "time_us");
  r.bytes = 1024.0 * 1024.0;
  r.algbw_gbps = 90.0;
  EXPECT_EQ(report::seriesMetric(r)->field, "algbw_gbps");
  EXPECT_TRUE(report::seriesMetric(r)->higher_is_better);
  r.suite = "test";
  EXPECT_FALSE(report::seriesMetric(r));
  r.suite = "probe";
  EXPECT_FALSE(report::seriesMetric(r));
  EXPECT_GT(worseningPct({"algbw_gbps", "GB/s", true}, 100, 90), 9.9);
  EXPECT_GT(worseningPct({"time_us", "us", false}, 10, 11), 9.9);
}

class HistoryStoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    if (GetParam() == "sqlite") {
      dir_ = std::filesystem::temp_directory_path() / ("peerlab-history-" + std::to_string(::getpid()));
      std::filesystem::create_directories(dir_);
      url_ = (dir_ / (std::to_string(counter_++) + ".sqlite")).string();
      std::filesystem::remove(url_);
    } else {
      std::string why;
      const std::string server = testing::postgresServerUrl(&why);
      if (server.empty()) GTEST_SKIP() << why;
      url_ = testing::freshPostgresDatabase(server, "store");
      ASSERT_FALSE(url_.empty());
    }
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::unique_ptr<HistoryStore> open() {
    auto s = HistoryStore::open(url_);
    EXPECT_TRUE(s.isOk()) << s.status().toString();
    return s.isOk() ? std::move(*s) : nullptr;
  }

  std::filesystem::path dir_;
  std::string url_;
  static inline int counter_ = 0;
};

TEST_P(HistoryStoreTest, MigratesToTheLatestVersionOnce) {
  auto s = open();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->schemaVersion(), static_cast<int>(schemaMigrations().size()));
  s.reset();
  auto again = open();  // reopening applies nothing twice
  ASSERT_TRUE(again);
  EXPECT_EQ(again->schemaVersion(), static_cast<int>(schemaMigrations().size()));
  auto db = openDatabase(url_);
  ASSERT_TRUE(db.isOk());
  int rows = 0;
  PEERLAB_ASSERT_OK((*db)->query("SELECT version FROM schema_version ORDER BY version", {},
                                 [&](const SqlRow& r) { EXPECT_EQ(r.integer(0), ++rows); }));
  EXPECT_EQ(rows, static_cast<int>(schemaMigrations().size()));
}

// A write transaction is all or nothing: a body that fails part way or clears `keep` leaves no row behind, and the
// error is the body's; a body that succeeds is committed, and the connection takes the next transaction.
TEST_P(HistoryStoreTest, WriteTransactionsAreAllOrNothing) {
  auto db = openDatabase(url_);
  ASSERT_TRUE(db.isOk()) << db.status().toString();
  Database& d = **db;
  PEERLAB_ASSERT_OK(d.exec("CREATE TABLE tx_probe (v INTEGER NOT NULL)"));
  auto rows = [&] {
    std::int64_t n = -1;
    EXPECT_TRUE(d.query("SELECT COUNT(*) FROM tx_probe", {}, [&](const SqlRow& r) { n = r.integer(0); }).isOk());
    return n;
  };
  const Status failed = writeTransaction(d, [&]() -> Status {
    PEERLAB_RETURN_IF_ERROR(d.query("INSERT INTO tx_probe (v) VALUES ($1)", {std::int64_t{1}}));
    return d.query("INSERT INTO tx_probe (v) VALUES (NULL)", {});  // NOT NULL: refused
  });
  EXPECT_FALSE(failed.isOk());
  EXPECT_EQ(rows(), 0);
  PEERLAB_ASSERT_OK(writeTransaction(d, [&](bool& keep) -> Status {
    PEERLAB_RETURN_IF_ERROR(d.query("INSERT INTO tx_probe (v) VALUES ($1)", {std::int64_t{2}}));
    keep = false;
    return Status::ok();
  }));
  EXPECT_EQ(rows(), 0);
  PEERLAB_ASSERT_OK(writeTransaction(d, [&]() -> Status {
    PEERLAB_RETURN_IF_ERROR(d.query("INSERT INTO tx_probe (v) VALUES ($1)", {std::int64_t{3}}));
    return d.query("INSERT INTO tx_probe (v) VALUES ($1)", {std::int64_t{4}});
  }));
  EXPECT_EQ(rows(), 2);
}

TEST_P(HistoryStoreTest, IngestIsIdempotentAndKeepsSpreadFingerprintAndSha) {
  auto s = open();
  ASSERT_TRUE(s);
  std::mt19937_64 rng(7);
  const report::Run run = syntheticRun(rng, 0, "node-a", "h200-x4-nvswitch");
  PEERLAB_ASSERT_OK_AND_ASSIGN(IngestOutcome first, s->ingest(run, {"", "a.json"}));
  PEERLAB_ASSERT_OK_AND_ASSIGN(IngestOutcome second, s->ingest(run, {"", "copy-of-a.json"}));
  EXPECT_TRUE(first.inserted);
  EXPECT_FALSE(second.inserted);
  EXPECT_EQ(first.run_id, second.run_id);
  EXPECT_EQ(*s->count("runs"), 1);
  EXPECT_EQ(*s->count("results"), syntheticResults());

  PEERLAB_ASSERT_OK_AND_ASSIGN(std::vector<RunInfo> runs, s->runs());
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].git_sha, run.git_sha);
  EXPECT_EQ(runs[0].kind, "h200-x4-nvswitch");
  EXPECT_EQ(runs[0].host, "node-a");
  EXPECT_EQ(runs[0].driver, "580.159.04");
  EXPECT_EQ(runs[0].cuda, "13.0");
  EXPECT_EQ(runs[0].nccl, "2.28.3");
  EXPECT_EQ(runs[0].gpus.size(), 4u);
  EXPECT_EQ(runs[0].results, syntheticResults());
  EXPECT_EQ(runs[0].source, "a.json");

  std::vector<StoredResult> rows;
  PEERLAB_ASSERT_OK(s->forEachResult([&](const StoredResult& r) { rows.push_back(r); }));
  ASSERT_EQ(rows.size(), run.results.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const report::Result& want = run.results[i];
    const StoredResult& got = rows[i];
    EXPECT_EQ(got.result.suite, want.suite);
    EXPECT_EQ(got.result.src, want.src);
    EXPECT_EQ(got.result.bytes, want.bytes);
    ASSERT_EQ(got.result.time_us.has_value(), want.time_us.has_value());
    if (want.time_us) {
      EXPECT_DOUBLE_EQ(*got.result.time_us, *want.time_us);
    }
    if (want.extra.contains("p10_us")) {
      ASSERT_TRUE(got.p10_us && got.p90_us && got.samples) << i;
      EXPECT_DOUBLE_EQ(*got.p10_us, want.extra["p10_us"].get<double>());
      EXPECT_DOUBLE_EQ(*got.p90_us, want.extra["p90_us"].get<double>());
    }
    if (want.extra.contains("samples_us") && want.extra["samples_us"].is_array()) {
      EXPECT_EQ(nlohmann::json::parse(got.sample_values), want.extra["samples_us"]);
      EXPECT_EQ(got.samples, 3.0);
    }
  }
  // --kind overrides the run file's kind.
  report::Run other = syntheticRun(rng, 1, "node-a", "");
  PEERLAB_ASSERT_OK_AND_ASSIGN(IngestOutcome third, s->ingest(other, {"custom-kind", "b.json"}));
  EXPECT_TRUE(third.inserted);
  PEERLAB_ASSERT_OK_AND_ASSIGN(runs, s->runs());
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[1].kind, "custom-kind");
}

// 40 nightly runs; from run 30 on a new driver and a 10% slower copy between GPUs 1 and 2.
std::unique_ptr<HistoryStore> withStep(std::unique_ptr<HistoryStore> s, std::vector<report::Run>* runs) {
  std::mt19937_64 rng(30);
  for (int i = 0; i < 40; ++i) {
    report::Run run = syntheticRun(rng, i, "node-a", "kind-x", 1.0, 1.0, 0.01, 4, i < 30 ? "580.159.04" : "590.10");
    if (i >= 30) {
      for (report::Result& r : run.results) {
        if (r.suite == "peer_copy" && r.src == 1 && r.dst == 2) {
          *r.algbw_gbps *= 0.9;
          *r.time_us /= 0.9;
        }
      }
    }
    EXPECT_TRUE(s->ingest(run).isOk());
    if (runs) runs->push_back(run);
  }
  return s;
}

TEST_P(HistoryStoreTest, RegressionNamesTheFirstRunAfterTheChangeAndTheDriverChange) {
  std::vector<report::Run> runs;
  auto s = withStep(open(), &runs);
  PEERLAB_ASSERT_OK_AND_ASSIGN(History h, loadHistory(*s));
  // 12 copies + 12 latencies + alltoallv; ctest and probe rows are not series.
  EXPECT_EQ(h.series.size(), 25u);
  for (const Series& series : h.series) {
    EXPECT_NE(series.suite, "test");
    EXPECT_NE(series.suite, "probe");
    EXPECT_EQ(series.points.size(), 40u) << series.id;
    EXPECT_EQ(series.metric.field, series.suite == "peer_copy" ? "algbw_gbps" : "time_us") << series.id;
  }
  detectChangePoints(h);
  const std::vector<Regression> regs = findRegressions(h, 3.0);
  ASSERT_EQ(regs.size(), 1u);
  const Regression& r = regs[0];
  EXPECT_EQ(r.series->suite, "peer_copy");
  EXPECT_EQ(r.series->src, 1);
  EXPECT_EQ(r.series->dst, 2);
  EXPECT_EQ(r.run->git_sha, runs[30].git_sha);
  EXPECT_NEAR(r.change.change_pct, -10.0, 1.5);
  EXPECT_NEAR(r.worsening_pct, 10.0, 1.5);
  EXPECT_LE(r.change.p_value, 0.01);
  ASSERT_EQ(r.fingerprint_changes.size(), 1u);
  EXPECT_EQ(r.fingerprint_changes[0], "driver 580.159.04 -> 590.10");
  const nlohmann::json j = toJson(r);
  for (const char* key : {"suite", "impl", "name", "src", "dst", "ranks", "bytes", "metric", "host", "git_sha",
                          "timestamp", "before", "after", "change_pct", "p_value", "fingerprint_changes"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  // An improvement as the latest change is not a regression.
  EXPECT_TRUE(findRegressions(h, 15.0).empty());
}

TEST_P(HistoryStoreTest, FleetFindsTheBadNodeAmongTen) {
  auto s = open();
  ASSERT_TRUE(s);
  std::mt19937_64 rng(40);
  for (int night = 0; night < 3; ++night) {
    for (int host = 0; host < 10; ++host) {
      // node-7 copies 15% slower on its latest night; node-3 was slow once before and recovered.
      const bool slow = (host == 7 && night == 2) || (host == 3 && night == 0);
      report::Run run =
          syntheticRun(rng, night * 10 + host, "node-" + std::to_string(host), "kind-x", slow ? 0.85 : 1.0, 1.0, 0.01);
      PEERLAB_ASSERT_OK(s->ingest(run).status());
    }
  }
  PEERLAB_ASSERT_OK_AND_ASSIGN(History h, loadHistory(*s));
  const std::vector<FleetOutlier> out = fleetOutliers(h);
  std::set<std::string> hosts;
  int copies = 0;
  for (const FleetOutlier& f : out) {
    hosts.insert(f.host);
    copies += f.series->suite == "peer_copy";
    EXPECT_LT(f.z, -3.5);  // bandwidth: the bad side is below the median
    EXPECT_NEAR(f.value / f.median, 0.85, 0.04);
  }
  EXPECT_EQ(hosts, std::set<std::string>{"node-7"});
  EXPECT_EQ(copies, 12);  // every pair of node-7, nothing else
  EXPECT_EQ(out.size(), 12u);
}

TEST_P(HistoryStoreTest, SiteModelHasTheAgreedShape) {
  auto s = withStep(open(), nullptr);
  // A run of a second kind, with a plan that expects 400 GB/s of every copy (an expectation as a plan stores it:
  // named by its rule, read by the one reader and matched by the one matcher).
  std::mt19937_64 rng(50);
  report::Run other = syntheticRun(rng, 99, "node-b", "kind-y", 1.0, 1.0, 0.0, 2);
  other.extra["plan"] = {{"expectations",
                          {{{"rule", "ce_uni"},
                            {"suite", "peer_copy"},
                            {"impl", "peerlab.ce"},
                            {"name", "uni"},
                            {"src", nullptr},
                            {"dst", nullptr},
                            {"metric", "algbw_gbps"},
                            {"gbps", 400.0},
                            {"min_bytes", 1048576.0}}}}};
  PEERLAB_ASSERT_OK(s->ingest(other).status());
  SiteOptions so;
  so.generated = "2026-11-25T00:00:00Z";
  PEERLAB_ASSERT_OK_AND_ASSIGN(report::SiteModel built, buildSiteModel(*s, so));
  // The shape as `history html --model` writes it.
  const nlohmann::json model = report::toJson(built);
  EXPECT_EQ(model["generated"], "2026-11-25T00:00:00Z");
  ASSERT_EQ(model["kinds"].size(), 2u);
  const nlohmann::json& x = model["kinds"][0];
  EXPECT_EQ(x["kind"], "kind-x");
  EXPECT_EQ(x["series"].size(), 25u);
  std::map<std::string, int> groupSizes;
  for (const auto& series : x["series"]) {
    for (const char* key : {"id", "group", "suite", "impl", "name", "src", "dst", "ranks", "bytes", "metric", "unit",
                            "host", "points", "change_points"}) {
      EXPECT_TRUE(series.contains(key)) << key;
    }
    ++groupSizes[series["group"]];
    ASSERT_EQ(series["points"].size(), 40u);
    const auto& p = series["points"][0];
    for (const char* key : {"run_id", "timestamp", "git_sha", "driver", "value", "p10", "p90"})
      EXPECT_TRUE(p.contains(key)) << key;
    if (series["suite"] == "peer_copy") {
      // Bandwidth spread comes from the time percentiles: p10 <= value <= p90.
      EXPECT_LE(p["p10"].get<double>(), p["value"].get<double>());
      EXPECT_GE(p["p90"].get<double>(), p["value"].get<double>());
    }
  }
  for (auto& [group, n] : groupSizes)
    EXPECT_LE(n, static_cast<int>(kMaxSeriesPerPlot)) << group;
  EXPECT_EQ(groupSizes.count("peer_copy uni peerlab.ce (GB/s) 1/2"), 1u);
  ASSERT_EQ(x["regressions"].size(), 1u);
  EXPECT_EQ(x["regressions"][0]["fingerprint_changes"][0], "driver 580.159.04 -> 590.10");
  EXPECT_TRUE(x["fleet"].is_array());
  // Heatmaps of kind-x's latest run: copies in GB/s (no plan), latency in us; 4 GPUs, 12 cells each.
  ASSERT_EQ(x["heatmaps"].size(), 2u);
  for (const auto& hm : x["heatmaps"]) {
    EXPECT_EQ(hm["gpus"], 4);
    EXPECT_EQ(hm["cells"].size(), 12u);
    EXPECT_TRUE(hm["unit"] == "GB/s" || hm["unit"] == "us") << hm["unit"];
  }
  // kind-y's run carries expectations: its copies carry 380 GB/s measured beside 400 expected.
  const nlohmann::json& y = model["kinds"][1];
  bool sawExpected = false;
  for (const auto& hm : y["heatmaps"]) {
    if (hm["unit"] != "GB/s") continue;
    sawExpected = true;
    ASSERT_EQ(hm["cells"].size(), 2u);
    for (const auto& c : hm["cells"]) {
      EXPECT_NEAR(c["value"].get<double>(), 380.0, 0.01);
      EXPECT_EQ(c["expected"], 400.0);
    }
  }
  EXPECT_TRUE(sawExpected);
}

INSTANTIATE_TEST_SUITE_P(Backends, HistoryStoreTest, ::testing::Values("sqlite", "postgresql"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace peerlab::history
