// `peerlab history` through the built binary, on SQLite and PostgreSQL: rejected files, parallel writers, list,
// regressions and fleet exit codes and JSON, and the committed run files as the first history.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "harness/history/store.h"
#include "harness/history/testing/history_testing.h"
#include "harness/qualify/pipeline.h"
#include "harness/testing/cli.h"
#include "reference/testing/testing.h"

namespace peerlab::history {
namespace {

using peerlab::testing::CliRun;
using peerlab::testing::readFile;
using peerlab::testing::runPeerlab;
using peerlab::testing::scratchDir;

class HistoryCliTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = scratchDir(std::string("history-cli-") + GetParam());
    if (GetParam() == "sqlite") {
      url_ = dir_ + "/history.sqlite";
    } else {
      std::string why;
      const std::string server = testing::postgresServerUrl(&why);
      if (server.empty()) GTEST_SKIP() << why;
      url_ = testing::freshPostgresDatabase(server, "cli");
      ASSERT_FALSE(url_.empty());
    }
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string writeRun(const report::Run& run, const std::string& name) {
    const std::string path = dir_ + "/" + name;
    EXPECT_TRUE(report::writeRun(run, path).isOk());
    return path;
  }
  std::int64_t count(const std::string& table) {
    auto s = HistoryStore::open(url_);
    EXPECT_TRUE(s.isOk()) << s.status().toString();
    if (!s.isOk()) return -1;
    auto n = (*s)->count(table);
    return n.isOk() ? *n : -1;
  }

  std::string dir_;
  std::string url_;
};

TEST_P(HistoryCliTest, TruncatedFileIsRejectedWithExitTwoAndNothingOfItStored) {
  std::mt19937_64 rng(1);
  const std::string good = writeRun(testing::syntheticRun(rng, 0, "node-a", "kind-x"), "good.json");
  const std::string whole = readFile(writeRun(testing::syntheticRun(rng, 1, "node-a", "kind-x"), "whole.json"));
  const std::string truncated = dir_ + "/truncated.json";
  std::ofstream(truncated) << whole.substr(0, whole.size() * 2 / 3);
  CliRun r = runPeerlab({"history", "ingest", "--db", url_, good, truncated});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("truncated.json"), std::string::npos) << r.err;
  EXPECT_EQ(peerlab::testing::lineCount(r.err), 1) << r.err;
  EXPECT_EQ(count("runs"), 1);
  EXPECT_EQ(count("results"), testing::syntheticResults());
  // A file of the wrong schema is rejected the same way.
  const std::string wrong = dir_ + "/wrong.json";
  std::ofstream(wrong) << R"({"schema_version": 99, "results": []})";
  EXPECT_EQ(runPeerlab({"history", "ingest", "--db", url_, wrong}).exit_code, 2);
  EXPECT_EQ(count("runs"), 1);
}

TEST_P(HistoryCliTest, ParallelIngestProcessesStoreEachRunOnce) {
  std::mt19937_64 rng(2);
  std::vector<std::string> files;
  for (int i = 0; i < 8; ++i)
    files.push_back(writeRun(testing::syntheticRun(rng, i, "node-a", "kind-x"), "run" + std::to_string(i) + ".json"));
  // Six writers at once, each with an overlapping half of the files in its own order.
  const int writers = 6;
  std::string script;
  for (int w = 0; w < writers; ++w) {
    std::string args;
    for (int k = 0; k < 4; ++k)
      args += " " + qualify::shellQuote(files[(w + k * (w % 2 ? 3 : 1)) % files.size()]);
    script += "(" + qualify::shellQuote(PEERLAB_BINARY) + " history ingest --db " + qualify::shellQuote(url_) + args +
              " >" + dir_ + "/w" + std::to_string(w) + ".out 2>&1; echo $? >" + dir_ + "/w" + std::to_string(w) +
              ".rc) & ";
  }
  script += "wait";
  ASSERT_EQ(std::system(("timeout 120 sh -c " + qualify::shellQuote(script)).c_str()), 0);
  std::set<std::string> stored;
  for (int w = 0; w < writers; ++w) {
    const std::string out = readFile(dir_ + "/w" + std::to_string(w) + ".out");
    EXPECT_EQ(readFile(dir_ + "/w" + std::to_string(w) + ".rc"), "0\n") << out;
  }
  std::set<std::string> expected;
  for (int w = 0; w < writers; ++w)
    for (int k = 0; k < 4; ++k)
      expected.insert(files[(w + k * (w % 2 ? 3 : 1)) % files.size()]);
  EXPECT_EQ(count("runs"), static_cast<std::int64_t>(expected.size()));
  EXPECT_EQ(count("results"), static_cast<std::int64_t>(expected.size()) * testing::syntheticResults());
}

TEST_P(HistoryCliTest, ListJsonHasTheAgreedKeys) {
  std::mt19937_64 rng(3);
  const std::string a = writeRun(testing::syntheticRun(rng, 0, "node-a", "kind-x"), "a.json");
  const std::string b = writeRun(testing::syntheticRun(rng, 1, "node-b", "kind-x"), "b.json");
  ASSERT_EQ(runPeerlab({"history", "ingest", "--db", url_, a, b, a}).exit_code, 0);
  CliRun r = runPeerlab({"history", "list", "--db", url_, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["runs"].size(), 2u);
  for (const auto& run : j["runs"]) {
    for (const char* key : {"id", "host", "kind", "git_sha", "timestamp", "results"})
      EXPECT_TRUE(run.contains(key)) << key;
    EXPECT_EQ(run["results"], testing::syntheticResults());
    EXPECT_EQ(run["kind"], "kind-x");
  }
  EXPECT_EQ(j["runs"][0]["host"], "node-a");
  EXPECT_EQ(j["runs"][1]["host"], "node-b");
}

TEST_P(HistoryCliTest, RegressionsExitOneWithTheWorstFirstAndZeroOnNoise) {
  std::mt19937_64 rng(4);
  std::vector<std::string> files;
  std::vector<std::string> shas;
  for (int i = 0; i < 36; ++i) {
    // From run 28 on: NCCL 2.29 and every latency 12% slower; copies 1->2 6% slower.
    report::Run run = testing::syntheticRun(rng, i, "node-a", "kind-x");
    if (i >= 28) {
      run.fingerprint.nccl = "2.29.1";
      for (report::Result& r : run.results) {
        if (r.suite == "peer_latency") *r.time_us *= 1.12;
        if (r.suite == "peer_copy" && r.src == 1 && r.dst == 2) *r.algbw_gbps *= 0.94;
      }
    }
    shas.push_back(run.git_sha);
    files.push_back(writeRun(run, "n" + std::to_string(i) + ".json"));
  }
  std::vector<std::string> args = {"history", "ingest", "--db", url_};
  args.insert(args.end(), files.begin(), files.begin() + 27);
  ASSERT_EQ(runPeerlab(args).exit_code, 0);
  // Before the change: nothing to report.
  CliRun quiet = runPeerlab({"history", "regressions", "--db", url_, "--json", dir_ + "/quiet.json"});
  EXPECT_EQ(quiet.exit_code, 0) << quiet.out << quiet.err;
  EXPECT_TRUE(nlohmann::json::parse(readFile(dir_ + "/quiet.json"))["regressions"].empty());

  args = {"history", "ingest", "--db", url_};
  args.insert(args.end(), files.begin() + 27, files.end());
  ASSERT_EQ(runPeerlab(args).exit_code, 0);
  CliRun r = runPeerlab({"history", "regressions", "--db", url_, "--json", dir_ + "/r.json"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const nlohmann::json regs = nlohmann::json::parse(readFile(dir_ + "/r.json"))["regressions"];
  ASSERT_EQ(regs.size(), 13u) << regs.dump(1);  // 12 latencies and one copy
  double last = 1e9;
  for (const auto& reg : regs) {
    EXPECT_EQ(reg["git_sha"], shas[28]);
    EXPECT_EQ(reg["fingerprint_changes"], nlohmann::json::array({"NCCL 2.28.3 -> 2.29.1"}));
    EXPECT_LE(reg["worsening_pct"].get<double>(), last);  // worst first
    last = reg["worsening_pct"].get<double>();
  }
  EXPECT_EQ(regs.back()["suite"], "peer_copy");
  EXPECT_EQ(regs.back()["metric"], "algbw_gbps");
  EXPECT_NEAR(regs.back()["change_pct"].get<double>(), -6.0, 1.5);
  EXPECT_EQ(regs.front()["metric"], "time_us");
  // A higher threshold leaves only the latencies.
  CliRun high = runPeerlab({"history", "regressions", "--db", url_, "--threshold", "9", "--json", "-"});
  EXPECT_EQ(high.exit_code, 1);
  EXPECT_EQ(nlohmann::json::parse(high.out.substr(high.out.find("{\n")))["regressions"].size(), 12u);
}

TEST_P(HistoryCliTest, FleetNamesTheBadNode) {
  std::mt19937_64 rng(5);
  std::vector<std::string> args = {"history", "ingest", "--db", url_};
  for (int host = 0; host < 8; ++host) {
    report::Run run =
        testing::syntheticRun(rng, host, "node-" + std::to_string(host), "kind-x", 1.0, host == 5 ? 1.25 : 1.0);
    args.push_back(writeRun(run, "h" + std::to_string(host) + ".json"));
  }
  ASSERT_EQ(runPeerlab(args).exit_code, 0);
  CliRun r = runPeerlab({"history", "fleet", "--db", url_, "--kind", "kind-x", "--json", dir_ + "/f.json"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const nlohmann::json out = nlohmann::json::parse(readFile(dir_ + "/f.json"))["outliers"];
  ASSERT_EQ(out.size(), 13u) << out.dump(1);  // node-5's 12 latencies and its alltoallv time
  for (const auto& o : out) {
    EXPECT_EQ(o["host"], "node-5");
    EXPECT_GT(o["z"].get<double>(), 3.5);
  }
  EXPECT_EQ(runPeerlab({"history", "fleet", "--db", url_, "--kind", "other-kind"}).exit_code, 0);
}

INSTANTIATE_TEST_SUITE_P(Backends, HistoryCliTest, ::testing::Values("sqlite", "postgresql"),
                         [](const auto& info) { return info.param; });

TEST(HistoryCli, BadInputsAreOneLineErrorsWithExitTwo) {
  const std::string dir = scratchDir("history-bad");
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"history", "ingest", "--db", dir + "/h.sqlite", dir + "/missing.json"}, "missing.json"},
      {{"history", "list", "--db", dir + "/no/such/dir/h.sqlite"}, "no/such/dir"},
      {{"history", "list", "--db", "postgresql://nobody@127.0.0.1:1/none"}, "cannot connect"},
      {{"history", "regressions"}, "--db"},
      {{"history"}, "subcommand"},
  };
  for (const Case& c : cases) {
    CliRun r = runPeerlab(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args.back() << ": " << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_EQ(peerlab::testing::lineCount(r.err), 1) << r.err;
  }
  std::filesystem::remove_all(dir);
}

// The committed run files are the first history: every command runs on them.
TEST(HistoryCli, CommittedRunFilesAreTheFirstHistory) {
  const std::string dir = scratchDir("history-smoke");
  const std::string db = dir + "/history.sqlite";
  std::vector<std::string> args = {"history", "ingest", "--db", db};
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(peerlab::testing::sourcePath("reports/runs"))) {
    if (e.path().extension() != ".json") continue;
    args.push_back(e.path().string());
    ++files;
  }
  ASSERT_GE(files, 3) << "reports/runs holds the example runs of at least two machine kinds";
  CliRun ingest = runPeerlab(args);
  ASSERT_EQ(ingest.exit_code, 0) << ingest.out << ingest.err;
  EXPECT_EQ(runPeerlab(args).exit_code, 0);  // again: all already stored
  CliRun list = runPeerlab({"history", "list", "--db", db, "--json"});
  ASSERT_EQ(list.exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(list.out)["runs"].size(), static_cast<size_t>(files));
  // Regressions may or may not be there in real history; the command must answer (0 or 1) with valid JSON.
  CliRun regs = runPeerlab({"history", "regressions", "--db", db, "--json", dir + "/r.json"});
  EXPECT_TRUE(regs.exit_code == 0 || regs.exit_code == 1) << regs.err;
  EXPECT_TRUE(nlohmann::json::parse(readFile(dir + "/r.json"))["regressions"].is_array());
  CliRun fleet = runPeerlab({"history", "fleet", "--db", db, "--json", dir + "/f.json"});
  EXPECT_EQ(fleet.exit_code, 0) << fleet.err;  // one host per kind: no fleet
  CliRun html = runPeerlab({"history", "html", "--db", db, "--out", dir + "/site", "--model", dir + "/model.json"});
  EXPECT_EQ(html.exit_code, 0) << html.err;
  EXPECT_TRUE(std::filesystem::exists(dir + "/site/index.html")) << html.out;
  const nlohmann::json model = nlohmann::json::parse(readFile(dir + "/model.json"));
  EXPECT_GE(model["kinds"].size(), 2u);
  int with_pairs = 0;
  for (const auto& k : model["kinds"]) {
    EXPECT_FALSE(k["series"].empty());
    // A kind whose runs measured GPU pairs gets pair heatmaps; a one-GPU kind has none to draw.
    bool pairs = false;
    for (const auto& s : k["series"])
      pairs |= s["src"].is_number() && s["dst"].is_number() && s["src"] != s["dst"];
    with_pairs += pairs;
    if (pairs) {
      EXPECT_FALSE(k["heatmaps"].empty()) << k["kind"];
    }
  }
  EXPECT_GE(with_pairs, 2);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace peerlab::history
