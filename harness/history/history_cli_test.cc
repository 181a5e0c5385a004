// `peerlab history` through the built binary, on SQLite and PostgreSQL: rejected files, parallel writers, list,
// regressions and fleet exit codes and JSON, and the committed run files as the first history.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <csignal>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include "harness/history/analysis.h"
#include "harness/history/store.h"
#include "harness/qualify/pipeline.h"
#include "harness/report/render/fleet_page.h"
#include "harness/report/render/site.h"
#include "harness/report/report.h"
#include "harness/testing/cli.h"
#include "harness/testing/history.h"
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
  // A kind the store does not hold is a typo, not an empty fleet.
  EXPECT_EQ(runPeerlab({"history", "fleet", "--db", url_, "--kind", "other-kind"}).exit_code, 2);
}

// Cloud VMs all call themselves "vm": --by-host keys series by node within each kind, so a run of one GPU model
// never sits in another model's series (interleaved, they would read as change points every run).
TEST_P(HistoryCliTest, ByHostNeverJoinsTwoKinds) {
  std::mt19937_64 rng(6);
  std::vector<std::string> args = {"history", "ingest", "--db", url_};
  for (int i = 0; i < 24; ++i) {
    const bool h100 = i % 2 == 1;
    report::Run run = testing::syntheticRun(rng, i, "vm", h100 ? "h100-x4-nvswitch" : "h200-x4-nvswitch",
                                            h100 ? 0.6 : 1.0, h100 ? 1.4 : 1.0);
    if (h100) {
      for (auto& g : run.fingerprint.gpus)
        g.name = "NVIDIA H100 80GB HBM3";
    }
    args.push_back(writeRun(run, "k" + std::to_string(i) + ".json"));
  }
  ASSERT_EQ(runPeerlab(args).exit_code, 0);
  CliRun r = runPeerlab({"history", "regressions", "--db", url_, "--by-host", "--json", dir_ + "/r.json"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("(one per node within each kind)"), std::string::npos) << r.out;
  EXPECT_TRUE(nlohmann::json::parse(readFile(dir_ + "/r.json"))["regressions"].empty());
  auto store = HistoryStore::open(url_);
  ASSERT_TRUE(store.isOk());
  auto h = loadHistory(**store, {"", true});
  ASSERT_TRUE(h.isOk());
  std::set<std::string> machines;
  for (const Series& series : h->series) {
    machines.insert(series.machine);
    for (const SeriesPoint& p : series.points)
      EXPECT_EQ(h->run(p.run_id).kind + "@" + h->run(p.run_id).nodeOrHost(), series.machine) << series.id;
  }
  EXPECT_EQ(machines.size(), 2u);
}

// The fleet view: every node of the kind with its latest verdict and recorded scheduler state (keyed by its Slurm
// NodeName), out of service first, then failing, then the rest; a node below its fleet but passing its own checks is
// reported as such; the site's fleet page shows the same order, the failed checks with their actions, and escapes what
// it was given.
TEST_P(HistoryCliTest, FleetListsNodesWithTheirStatesDrainedFirst) {
  std::mt19937_64 rng(7);
  std::vector<std::string> args = {"history", "ingest", "--db", url_};
  for (int host = 0; host < 6; ++host) {
    // node-4's runs carry its full host name; the scheduler names it node-4.
    const std::string name = "node-" + std::to_string(host) + (host == 4 ? ".example" : "");
    report::Run run = testing::syntheticRun(rng, host, name, "kind-x", 1.0, host == 5 ? 1.25 : 1.0);
    run.node.slurm_node = "node-" + std::to_string(host);
    // node-3's copies ran but their data did not verify: its run fails.
    if (host == 3) run.results.front().wrong = 7;
    args.push_back(writeRun(run, "h" + std::to_string(host) + ".json"));
  }
  ASSERT_EQ(runPeerlab(args).exit_code, 0);
  auto state = [&](const std::string& node, const std::string& st, const std::string& reason) {
    return runPeerlab({"history", "node-state", "--db", url_, "--node", node, "--state", st, "--reason", reason});
  };
  EXPECT_EQ(state("node-1", "drained", "peerlab: nvlink_state GPU0: reset GPU, reseat NVLink").exit_code, 0);
  EXPECT_EQ(state("node-4", "drained", "disk swap by admin").exit_code, 0);
  // The latest state counts.
  EXPECT_EQ(state("node-4", "in_service", "").exit_code, 0);
  EXPECT_EQ(state("node-0", "down", "Not responding").exit_code, 0);
  // Bad states and names are one line, exit 2, nothing stored: a name that matches no NodeName or identity, a host
  // name (node-4.example is node-4's host, not its NodeName).
  for (const auto& [node, st] : std::vector<std::pair<std::string, std::string>>{{"node-2", "broken"},
                                                                                 {"", "drained"},
                                                                                 {"node\x1b[2J", "drained"},
                                                                                 {std::string(300, 'n'), "drained"},
                                                                                 {"vm", "drained"},
                                                                                 {"node-4.example", "drained"}}) {
    CliRun bad = state(node, st, "");
    EXPECT_EQ(bad.exit_code, 2) << node << " " << st << ": " << bad.err;
    EXPECT_EQ(peerlab::testing::lineCount(bad.err), 1) << bad.err;
  }

  CliRun r = runPeerlab({"history", "fleet", "--db", url_, "--kind", "kind-x", "--json", dir_ + "/f.json"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;  // node-5 sits outside the fleet
  const nlohmann::json nodes = nlohmann::json::parse(readFile(dir_ + "/f.json"))["nodes"];
  ASSERT_EQ(nodes.size(), 6u) << nodes.dump(1);
  std::vector<std::string> order;
  for (const auto& n : nodes) {
    order.push_back(n["name"]);
    // Named by the Slurm NodeName, identified by the GPUs (a host name identifies nothing on cloud VMs).
    EXPECT_EQ(n["name"], n["slurm_node"]);
    EXPECT_EQ(n["node"].get<std::string>().rfind("gpus-", 0), 0u) << n.dump();
  }
  EXPECT_EQ(order, (std::vector<std::string>{"node-0", "node-1", "node-3", "node-2", "node-4", "node-5"}));
  EXPECT_EQ(nodes[4]["host"], "node-4.example");
  EXPECT_EQ(nodes[1]["state"], "drained");
  EXPECT_EQ(nodes[1]["reason"], "peerlab: nvlink_state GPU0: reset GPU, reseat NVLink");
  EXPECT_EQ(nodes[2]["verdict"], "FAIL");
  EXPECT_EQ(nodes[4]["state"], "in_service");
  EXPECT_EQ(nodes[5]["verdict"], "PASS");
  EXPECT_EQ(nodes[5]["outliers"], 13);
  EXPECT_NE(r.out.find("kind-x: 6 nodes, 2 out of service, 1 failing their latest run"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  node-1               PASS drained (peerlab: nvlink_state GPU0: reset GPU, reseat NVLink)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("failed: data: peer_copy: results ran and verified"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("below its fleet on 13 series (reported, not a failure of its own thresholds)"),
            std::string::npos)
      << r.out;

  ASSERT_EQ(runPeerlab({"history", "html", "--db", url_, "--out", dir_ + "/site"}).exit_code, 0);
  const std::string page = readFile(dir_ + "/site/" + report::fleetPageName("kind-x"));
  const size_t n0 = page.find(">node-0<"), n1 = page.find(">node-1<"), n3 = page.find(">node-3<"),
               n5 = page.find(">node-5<");
  ASSERT_NE(n0, std::string::npos) << page;
  EXPECT_LT(n0, n1);
  EXPECT_LT(n1, n3);
  EXPECT_LT(n3, n5);
  EXPECT_NE(page.find("drained: peerlab: nvlink_state GPU0: reset GPU, reseat NVLink"), std::string::npos);
  EXPECT_NE(page.find("data: peer_copy: results ran and verified: driver bug: peerlab repro"), std::string::npos)
      << page;
  EXPECT_NE(page.find("6 nodes: 2 out of service, 1 failing their latest run"), std::string::npos);
  // The trend page and the index link to it.
  EXPECT_NE(readFile(dir_ + "/site/" + report::kindPageName("kind-x")).find(report::fleetPageName("kind-x")),
            std::string::npos);
  EXPECT_NE(readFile(dir_ + "/site/index.html").find(report::fleetPageName("kind-x")), std::string::npos);
}

// Read-only commands open an existing history only: on a fresh PostgreSQL database (or a SQLite store that is not
// there) they exit 2 naming it and create nothing; --create makes an empty history.
TEST_P(HistoryCliTest, ReadOnlyCommandsNeverCreateAHistory) {
  const std::string target = GetParam() == "sqlite" ? dir_ + "/typo.sqlite" : url_;
  const std::string site = dir_ + "/site";
  std::filesystem::create_directories(site);
  std::ofstream(site + "/index.html") << "published";
  const auto published = std::filesystem::last_write_time(site + "/index.html");
  const std::vector<std::vector<std::string>> commands = {
      {"history", "list", "--db", target},
      {"history", "regressions", "--db", target, "--json", dir_ + "/r.json"},
      {"history", "fleet", "--db", target},
      {"history", "html", "--db", target, "--out", site},
      {"history", "remove", "--db", target, "1"},
  };
  for (const auto& args : commands) {
    CliRun r = runPeerlab(args);
    EXPECT_EQ(r.exit_code, 2) << args[1] << ": " << r.out << r.err;
    EXPECT_EQ(peerlab::testing::lineCount(r.err), 1) << r.err;
    EXPECT_NE(r.err.find(GetParam() == "sqlite" ? "typo.sqlite" : "not a peerlab history"), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("0 runs"), std::string::npos) << r.out;
  }
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/r.json"));
  EXPECT_EQ(readFile(site + "/index.html"), "published");
  EXPECT_EQ(std::filesystem::last_write_time(site + "/index.html"), published);
  EXPECT_EQ(std::vector<std::string>({"index.html"}), [&] {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(site))
      names.push_back(e.path().filename().string());
    return names;
  }());
  if (GetParam() == "sqlite") {
    EXPECT_FALSE(std::filesystem::exists(target));
  } else {
    // The database holds no table afterwards.
    auto db = openDatabase(url_);
    ASSERT_TRUE(db.isOk()) << db.status().toString();
    std::int64_t tables = -1;
    ASSERT_TRUE((*db)
                    ->query("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema()", {},
                            [&](const SqlRow& row) { tables = row.integer(0); })
                    .isOk());
    EXPECT_EQ(tables, 0);
  }
  // --create: an empty history, "0 runs".
  CliRun created = runPeerlab({"history", "list", "--db", target, "--create"});
  EXPECT_EQ(created.exit_code, 0) << created.err;
  EXPECT_NE(created.out.find("0 runs"), std::string::npos) << created.out;
  EXPECT_EQ(runPeerlab({"history", "list", "--db", target}).exit_code, 0);
}

TEST_P(HistoryCliTest, UnknownKindExitsTwoListingTheKnownKinds) {
  std::mt19937_64 rng(7);
  const std::string a = writeRun(testing::syntheticRun(rng, 0, "node-a", "kind-x"), "a.json");
  const std::string b = writeRun(testing::syntheticRun(rng, 1, "node-b", "kind-y"), "b.json");
  ASSERT_EQ(runPeerlab({"history", "ingest", "--db", url_, a, b}).exit_code, 0);
  for (const char* cmd : {"regressions", "fleet"}) {
    CliRun r = runPeerlab({"history", cmd, "--db", url_, "--kind", "kind-z", "--json", dir_ + "/out.json"});
    EXPECT_EQ(r.exit_code, 2) << cmd << ": " << r.out << r.err;
    EXPECT_NE(r.err.find("--kind kind-z: no stored run of that kind or host (known: kind-x, kind-y)"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(peerlab::testing::lineCount(r.err), 1) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir_ + "/out.json"));
    // A kind or a host that is stored answers.
    EXPECT_EQ(runPeerlab({"history", cmd, "--db", url_, "--kind", "kind-y"}).exit_code, 0);
    EXPECT_EQ(runPeerlab({"history", cmd, "--db", url_, "--kind", "node-a"}).exit_code, 0);
  }
}

TEST_P(HistoryCliTest, JsonDashIsTheOnlyThingOnStdout) {
  std::mt19937_64 rng(8);
  std::vector<std::string> args = {"history", "ingest", "--db", url_};
  for (int i = 0; i < 6; ++i)
    args.push_back(writeRun(testing::syntheticRun(rng, i, "node-" + std::to_string(i % 4), "kind-x"),
                            "j" + std::to_string(i) + ".json"));
  ASSERT_EQ(runPeerlab(args).exit_code, 0);
  struct Case {
    std::vector<std::string> args;
    const char* key;
    const char* summary;
  };
  const std::vector<Case> cases = {
      {{"history", "regressions", "--db", url_, "--json", "-"}, "regressions", "regressions (latest change point"},
      {{"history", "fleet", "--db", url_, "--json", "-"}, "outliers", "outliers (modified z"},
      {{"history", "list", "--db", url_, "--json"}, "runs", nullptr},
      {{"history", "html", "--db", url_, "--out", dir_ + "/site", "--model", "-"}, "kinds", "wrote "},
  };
  for (const Case& c : cases) {
    CliRun r = runPeerlab(c.args);
    EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 1) << r.err;
    // The whole of stdout is one JSON document.
    const nlohmann::json doc = nlohmann::json::parse(r.out, nullptr, false);
    ASSERT_FALSE(doc.is_discarded()) << c.args[1] << ": stdout is not one JSON document:\n" << r.out.substr(0, 300);
    EXPECT_TRUE(doc.contains(c.key)) << c.key;
    if (c.summary) {
      EXPECT_NE(r.err.find(c.summary), std::string::npos) << r.err;
    }
  }
}

// An operator takes a bad run out: by id or content hash, all named runs or none.
TEST_P(HistoryCliTest, RemoveTakesRunsOutAllOrNothing) {
  std::mt19937_64 rng(9);
  std::vector<std::string> args = {"history", "ingest", "--db", url_};
  for (int i = 0; i < 3; ++i)
    args.push_back(writeRun(testing::syntheticRun(rng, i, "node-a", "kind-x"), "m" + std::to_string(i) + ".json"));
  ASSERT_EQ(runPeerlab(args).exit_code, 0);
  const nlohmann::json list = nlohmann::json::parse(runPeerlab({"history", "list", "--db", url_, "--json"}).out);
  ASSERT_EQ(list["runs"].size(), 3u);
  const std::string first = std::to_string(list["runs"][0]["id"].get<std::int64_t>());
  const std::string hash = list["runs"][2]["content_hash"];
  // One unknown id among known ones: nothing removed.
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{first, "9999"}, std::vector<std::string>{hash, "nonsense; DROP TABLE runs"}}) {
    std::vector<std::string> rm = {"history", "remove", "--db", url_};
    rm.insert(rm.end(), bad.begin(), bad.end());
    CliRun r = runPeerlab(rm);
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_EQ(peerlab::testing::lineCount(r.err), 1) << r.err;
    EXPECT_EQ(count("runs"), 3);
    EXPECT_EQ(count("results"), 3 * testing::syntheticResults());
  }
  CliRun r = runPeerlab({"history", "remove", "--db", url_, first, hash});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("removed run " + first), std::string::npos) << r.out;
  EXPECT_EQ(count("runs"), 1);
  EXPECT_EQ(count("results"), testing::syntheticResults());
  // Removed runs can be ingested again.
  ASSERT_EQ(runPeerlab(args).exit_code, 0);
  EXPECT_EQ(count("runs"), 3);
}

// What is already stored renders whatever it holds: pairs far outside any GPU count, expectations of the wrong type,
// kinds that sanitize alike, a 300-character kind, timestamps in the far future or not ISO at all.
TEST_P(HistoryCliTest, SiteRendersWhatIsStoredKindByKind) {
  auto store = HistoryStore::open(url_);
  ASSERT_TRUE(store.isOk()) << store.status().toString();
  std::mt19937_64 rng(10);
  const std::string longKind(300, 'k');
  const std::vector<std::string> kinds = {"a/b", "a_b", longKind, "kind-x"};
  int index = 0;
  for (const std::string& kind : kinds) {
    for (int i = 0; i < 4; ++i) {
      report::Run run = testing::syntheticRun(rng, index++, "node-a", kind);
      if (kind == "kind-x" && i == 1) run.timestamp = "9999-12-31T23:59:59Z";
      if (kind == "kind-x" && i == 2) run.timestamp = "yesterday <!--<script>";
      if (kind == "a/b" && i == 3) {
        for (int bad : {1024, -1, INT_MAX}) {
          report::Result r = run.results.front();
          r.src = bad;
          r.dst = 0;
          run.results.push_back(r);
        }
      }
      run.extra["plan"] = {{"expectations", {{{"suite", "peer_copy"}, {"gbps", 400.0}}}}};
      ASSERT_TRUE((*store)->ingest(run).isOk());
    }
  }
  // A run that names neither a kind nor a host, nor GPUs a kind or node could come from.
  {
    report::Run anonymous = testing::syntheticRun(rng, index++, "", "");
    anonymous.node = {};
    ASSERT_TRUE((*store)->ingest(anonymous).isOk());
  }
  // Expectations stored by an older peerlab, whose suite is a number.
  {
    auto db = openDatabase(url_);
    ASSERT_TRUE(db.isOk());
    ASSERT_TRUE((*db)->exec("UPDATE runs SET expectations = '[{\"suite\": 5, \"gbps\": \"x\"}, 7]'").isOk());
  }
  store->reset();
  const std::string site = dir_ + "/site";
  CliRun r = runPeerlab({"history", "html", "--db", url_, "--out", site, "--model", dir_ + "/model.json"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string indexPage = readFile(site + "/index.html");
  std::set<std::string> pages;
  for (const std::string& kind : kinds) {
    const std::string page = report::kindPageName(kind);
    EXPECT_LT(page.size(), 80u);
    EXPECT_TRUE(pages.insert(page).second) << page;
    EXPECT_TRUE(std::filesystem::is_regular_file(site + "/" + page)) << kind.substr(0, 20);
    EXPECT_NE(indexPage.find("href=\"" + page + "\""), std::string::npos) << page;
  }
  EXPECT_NE(indexPage.find("href=\"" + report::kindPageName("(no kind or host)") + "\""), std::string::npos);
  // Runs dated 9999 or not dated in ISO are placed at their ingest time: every point's time is a valid one before
  // the year 9999.
  const nlohmann::json model = nlohmann::json::parse(readFile(dir_ + "/model.json"));
  for (const auto& k : model["kinds"]) {
    for (const auto& s : k["series"]) {
      for (const auto& p : s["points"]) {
        const std::string ts = p["timestamp"];
        EXPECT_TRUE(normalizeTimestamp(ts).has_value()) << ts;
        EXPECT_LT(ts, "9999") << ts;
      }
      // Out-of-range pairs make no series.
      if (s["src"].is_number()) {
        EXPECT_GE(s["src"].get<std::int64_t>(), 0);
        EXPECT_LT(s["src"].get<std::int64_t>(), 4);
      }
    }
    int leftOut = 0;
    for (const auto& hm : k["heatmaps"]) {
      EXPECT_LE(hm["gpus"].get<int>(), 4);
      leftOut += hm.value("left_out", 0);
    }
    EXPECT_EQ(leftOut, k["kind"] == "a/b" ? 3 : 0) << k["kind"];
  }
  EXPECT_EQ(indexPage.find("9999-12"), std::string::npos);
}

// A stored row that does not read (a `checks` column nested 200,000 deep, GPU names of the wrong type, a result of
// the wrong type) is left out with one warning naming it; every read command answers for the rest, on both backends.
TEST_P(HistoryCliTest, StoredRowsThatDoNotReadAreLeftOutWithAWarning) {
  std::mt19937_64 rng(21);
  std::vector<std::string> args = {"history", "ingest", "--db", url_};
  for (int i = 0; i < 4; ++i)
    args.push_back(writeRun(testing::syntheticRun(rng, i, "node-a", "kind-x"), "run" + std::to_string(i) + ".json"));
  ASSERT_EQ(runPeerlab(args).exit_code, 0);
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  {
    auto db = openDatabase(url_);
    ASSERT_TRUE(db.isOk()) << db.status().toString();
    PEERLAB_ASSERT_OK((*db)->query("UPDATE runs SET checks = $1 WHERE id = 1", {deep}));
    PEERLAB_ASSERT_OK((*db)->query("UPDATE runs SET expectations = $1 WHERE id = 4", {deep}));
    PEERLAB_ASSERT_OK((*db)->query("UPDATE runs SET gpus = $1 WHERE id = 2", {std::string("[1, 2]")}));
    // A result of run 3 whose ranks is far out of range (SQLite: a text where an integer belongs).
    PEERLAB_ASSERT_OK((*db)->exec(GetParam() == "sqlite"
                                      ? "UPDATE results SET ranks = 'many' WHERE run_id = 3 AND seq = 0"
                                      : "UPDATE results SET ranks = 99999 WHERE run_id = 3 AND seq = 0"));
  }
  const std::string site = dir_ + "/site";
  const std::vector<std::vector<std::string>> commands = {
      {"history", "list", "--db", url_},
      {"history", "list", "--db", url_, "--json"},
      {"history", "regressions", "--db", url_, "--json", dir_ + "/r.json"},
      {"history", "fleet", "--db", url_},
      {"history", "html", "--db", url_, "--out", site, "--model", dir_ + "/model.json"},
  };
  for (const auto& cmd : commands) {
    CliRun r = runPeerlab(cmd);
    EXPECT_EQ(r.signal, 0) << cmd[1];
    EXPECT_TRUE(r.exit_code == 0 || (cmd[1] == "regressions" && r.exit_code == 1)) << cmd[1] << ": " << r.err;
    EXPECT_NE(r.err.find("warning: stored run 1 ("), std::string::npos) << cmd[1] << ": " << r.err;
    EXPECT_NE(r.err.find("left out: checks: 400000 bytes, more than the 4096 allowed"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("warning: stored run 4 ("), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("left out: expectations: nested deeper than the 64 levels allowed"), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("warning: stored run 2 ("), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("gpus[0]: must be a string"), std::string::npos) << r.err;
    if (cmd[1] != "list") {
      EXPECT_NE(r.err.find("run 3: 1 stored result left out (row 0: ranks"), std::string::npos) << cmd[1] << r.err;
    }
    EXPECT_LT(r.err.size(), 2000u) << r.err.substr(0, 300);
  }
  const nlohmann::json list = nlohmann::json::parse(runPeerlab({"history", "list", "--db", url_, "--json"}).out);
  ASSERT_EQ(list["runs"].size(), 1u);
  EXPECT_EQ(list["runs"][0]["id"], 3);
  EXPECT_EQ(list["runs"][0]["checks"]["total"].get<int>(),
            list["runs"][0]["checks"]["passed"].get<int>() + list["runs"][0]["checks"]["failed"].get<int>() +
                list["runs"][0]["checks"]["warnings"].get<int>() + list["runs"][0]["checks"]["unsupported"].get<int>() +
                list["runs"][0]["checks"]["skipped"].get<int>());
  EXPECT_TRUE(std::filesystem::is_regular_file(site + "/index.html"));
  // The run left out can still be taken out.
  CliRun removed = runPeerlab({"history", "remove", "--db", url_, "1"});
  EXPECT_EQ(removed.exit_code, 0) << removed.err;
  EXPECT_EQ(count("runs"), 3);
  // Stored by this peerlab, such a depth is refused at ingest already; the readers bound it all the same.
  EXPECT_EQ(runPeerlab({"history", "list", "--db", url_}).signal, 0);
}

// Check counts that do not add up, or a verdict that contradicts them, are a row that does not read either.
TEST_P(HistoryCliTest, StoredCountsThatContradictThemselvesAreLeftOut) {
  std::mt19937_64 rng(22);
  ASSERT_EQ(runPeerlab({"history", "ingest", "--db", url_,
                        writeRun(testing::syntheticRun(rng, 0, "node-a", "kind-x"), "a.json"),
                        writeRun(testing::syntheticRun(rng, 1, "node-a", "kind-x"), "b.json")})
                .exit_code,
            0);
  {
    auto db = openDatabase(url_);
    ASSERT_TRUE(db.isOk()) << db.status().toString();
    PEERLAB_ASSERT_OK((*db)->exec(
        "UPDATE runs SET verdict = 'PASS', checks = '{\"verdict\":\"PASS\",\"total\":5,\"passed\":2,\"failed\":3,"
        "\"warnings\":0,\"unsupported\":0,\"skipped\":0}' WHERE id = 1"));
    PEERLAB_ASSERT_OK((*db)->exec("UPDATE runs SET checks = '{\"total\":\"7\"}' WHERE id = 2"));
  }
  CliRun r = runPeerlab({"history", "list", "--db", url_, "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(nlohmann::json::parse(r.out)["runs"].empty());
  EXPECT_NE(r.err.find("stored run 1 ("), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("verdict \"PASS\" does not match 3 failed checks"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("stored run 2 ("), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("checks.total: must be an integer"), std::string::npos) << r.err;
}

// The fleet columns go through the same bounds: a check_details column nested 200,000 deep or of the wrong shape
// leaves its run out with a warning, a stored node state whose reason is larger than any recorded one is left out
// with a warning; `history fleet` and the fleet page answer for the rest.
TEST_P(HistoryCliTest, StoredCheckDetailsAndNodeStatesAreReadThroughBounds) {
  std::mt19937_64 rng(23);
  std::vector<std::string> args = {"history", "ingest", "--db", url_};
  for (int i = 0; i < 3; ++i) {
    report::Run run = testing::syntheticRun(rng, i, "node-" + std::to_string(i), "kind-x");
    run.node.slurm_node = "node-" + std::to_string(i);
    args.push_back(writeRun(run, "run" + std::to_string(i) + ".json"));
  }
  ASSERT_EQ(runPeerlab(args).exit_code, 0);
  ASSERT_EQ(runPeerlab({"history", "node-state", "--db", url_, "--node", "node-2", "--state", "drained", "--reason",
                        "peerlab: reset GPU"})
                .exit_code,
            0);
  {
    auto db = openDatabase(url_);
    ASSERT_TRUE(db.isOk()) << db.status().toString();
    const std::string deep = std::string(200000, '[') + std::string(200000, ']');
    PEERLAB_ASSERT_OK((*db)->query("UPDATE runs SET check_details = $1 WHERE id = 1", {deep}));
    PEERLAB_ASSERT_OK((*db)->exec(
        "UPDATE runs SET check_details = '{\"categories\": {}, \"failures\": [{\"category\": 7}]}' WHERE id = 2"));
    PEERLAB_ASSERT_OK(
        (*db)->query("INSERT INTO node_states (node, state, reason, recorded_at, source) VALUES ($1, $2, $3, $4, $5)",
                     {std::string("node-2"), std::string("drained"), std::string(size_t{2} << 20, 'r'),
                      std::string("2026-01-01T00:00:00Z"), std::string("x")}));
  }
  CliRun fleet = runPeerlab({"history", "fleet", "--db", url_, "--json", dir_ + "/f.json"});
  EXPECT_EQ(fleet.signal, 0);
  EXPECT_TRUE(fleet.exit_code == 0 || fleet.exit_code == 1) << fleet.err;
  EXPECT_NE(fleet.err.find("warning: stored run 1 ("), std::string::npos) << fleet.err;
  EXPECT_NE(fleet.err.find("left out: check_details: nested deeper than"), std::string::npos) << fleet.err;
  EXPECT_NE(fleet.err.find("warning: stored run 2 ("), std::string::npos) << fleet.err;
  EXPECT_NE(fleet.err.find("check_details.failures[0].category: must be a string"), std::string::npos) << fleet.err;
  EXPECT_NE(fleet.err.find("warning: stored node state 2 left out: reason: 2097152 bytes"), std::string::npos)
      << fleet.err;
  EXPECT_LT(fleet.err.size(), 2000u) << fleet.err.substr(0, 300);
  const nlohmann::json nodes = nlohmann::json::parse(readFile(dir_ + "/f.json"))["nodes"];
  ASSERT_EQ(nodes.size(), 1u) << nodes.dump(1);
  EXPECT_EQ(nodes[0]["name"], "node-2");  // by its NodeName; "node" is its identity
  // The state recorded before the bad row still counts.
  EXPECT_EQ(nodes[0]["state"], "drained");
  EXPECT_EQ(nodes[0]["reason"], "peerlab: reset GPU");
  EXPECT_TRUE(nodes[0]["check_details"]["categories"].is_object()) << nodes[0].dump();
  CliRun html = runPeerlab({"history", "html", "--db", url_, "--out", dir_ + "/site"});
  EXPECT_EQ(html.exit_code, 0) << html.err;
  EXPECT_NE(readFile(dir_ + "/site/" + report::fleetPageName("kind-x")).find(">node-2<"), std::string::npos);
}

// "Now" plus `seconds`, as a run file's timestamp.
std::string timestampIn(long seconds) {
  const std::time_t t = std::time(nullptr) + seconds;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// A node's PASS, then its run that checked nothing (no result) at a later time: every reader shows the EMPTY run as
// stored and as the node's newest, never the older PASS, and no page colours it as a pass.
TEST_P(HistoryCliTest, EmptyAfterPassIsTheNodesVerdict) {
  std::mt19937_64 rng(41);
  report::Run pass = testing::syntheticRun(rng, 0, "node-a", "kind-x");
  report::Run empty = testing::syntheticRun(rng, 1, "node-a", "kind-x");
  empty.results.clear();
  ASSERT_EQ(runPeerlab({"history", "ingest", "--db", url_, writeRun(pass, "pass.json"), writeRun(empty, "empty.json")})
                .exit_code,
            0);
  CliRun list = runPeerlab({"history", "list", "--db", url_, "--json"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_EQ(list.err.find("left out"), std::string::npos) << list.err;
  const nlohmann::json runs = nlohmann::json::parse(list.out)["runs"];
  ASSERT_EQ(runs.size(), 2u) << list.out;
  EXPECT_EQ(runs[0]["verdict"], "PASS");
  EXPECT_EQ(runs[1]["verdict"], "EMPTY");
  CliRun fleet = runPeerlab({"history", "fleet", "--db", url_, "--json", dir_ + "/f.json"});
  EXPECT_EQ(fleet.exit_code, 0) << fleet.err;
  const nlohmann::json nodes = nlohmann::json::parse(readFile(dir_ + "/f.json"))["nodes"];
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0]["verdict"], "EMPTY");
  EXPECT_EQ(nodes[0]["run_id"], runs[1]["id"]);
  EXPECT_NE(fleet.out.find("1 whose latest run checked nothing (EMPTY)"), std::string::npos) << fleet.out;
  // A run without a Slurm NodeName is named by its machine identity and host.
  EXPECT_NE(fleet.out.find(runs[1]["node"].get<std::string>() + " (host node-a) EMPTY"), std::string::npos)
      << fleet.out;
  ASSERT_EQ(runPeerlab({"history", "html", "--db", url_, "--out", dir_ + "/site"}).exit_code, 0);
  const std::string page = readFile(dir_ + "/site/" + report::fleetPageName("kind-x"));
  EXPECT_NE(page.find("title=\"the latest run checked nothing: not a pass\">EMPTY</td>"), std::string::npos) << page;
  EXPECT_EQ(page.find(">PASS</td>"), std::string::npos) << page;
  EXPECT_NE(page.find("1 whose latest run checked nothing (EMPTY)"), std::string::npos);
  const std::string index = readFile(dir_ + "/site/index.html");
  EXPECT_NE(index.find("cell-warn\">EMPTY: 0 checks"), std::string::npos) << index;
}

// A run dated more than a few minutes ahead is refused at ingest (a copy of a PASS dated ahead would stand as its
// node's newest run over a real FAIL); a clock a minute fast is not.
TEST_P(HistoryCliTest, FutureTimestampsAreRefused) {
  std::mt19937_64 rng(42);
  report::Run fail = testing::syntheticRun(rng, 0, "node-a", "kind-x");
  fail.timestamp = timestampIn(-600);
  fail.results.front().wrong = 3;
  report::Run ahead = testing::syntheticRun(rng, 1, "node-a", "kind-x");
  ahead.timestamp = timestampIn(50 * 60);
  report::Run fast = testing::syntheticRun(rng, 2, "node-b", "kind-x");
  fast.timestamp = timestampIn(60);
  CliRun r = runPeerlab({"history", "ingest", "--db", url_, writeRun(fail, "fail.json"), writeRun(ahead, "ahead.json"),
                         writeRun(fast, "fast.json")});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("ahead.json: $.timestamp: \"" + ahead.timestamp + "\" lies in the future (more than 5 minutes"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(peerlab::testing::lineCount(r.err), 1) << r.err;
  EXPECT_EQ(count("runs"), 2);
  CliRun fleet = runPeerlab({"history", "fleet", "--db", url_, "--json", "-"});
  const nlohmann::json nodes = nlohmann::json::parse(fleet.out)["nodes"];
  ASSERT_EQ(nodes.size(), 2u) << fleet.out;
  EXPECT_EQ(nodes[0]["host"], "node-a");
  EXPECT_EQ(nodes[0]["verdict"], "FAIL");
}

// A run file's own kind goes through the check --kind goes through: one that contradicts its hardware is refused
// unless the run says it was overridden (qualify --kind-override) or ingest is told --kind-override.
TEST_P(HistoryCliTest, AKindThatContradictsTheHardwareIsRefused) {
  std::mt19937_64 rng(43);
  report::Run forged = testing::syntheticRun(rng, 0, "node-a", "h100-x8-nvswitch", 1.0, 1.0, 0.01, 2);
  forged.kind.overridden = false;  // the file does not say it was overridden
  const std::string file = writeRun(forged, "forged.json");
  CliRun r = runPeerlab({"history", "ingest", "--db", url_, file});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("forged.json: its kind h100-x8-nvswitch contradicts its hardware, h200-x2"), std::string::npos)
      << r.err;
  EXPECT_EQ(count("runs"), 0);
  CliRun option = runPeerlab({"history", "ingest", "--db", url_, "--kind", "h100-x8-nvswitch", file});
  EXPECT_EQ(option.exit_code, 2) << option.err;
  EXPECT_NE(option.err.find("--kind h100-x8-nvswitch contradicts the hardware"), std::string::npos) << option.err;
  EXPECT_EQ(count("runs"), 0);
  // An alias of the hardware's kind is filed under the canonical one; an override is kept, and says so.
  report::Run alias = testing::syntheticRun(rng, 1, "node-a", "NVIDIA-H200-x2", 1.0, 1.0, 0.01, 2);
  report::Run overridden = testing::syntheticRun(rng, 2, "node-b", "lab-rack-3", 1.0, 1.0, 0.01, 2);
  ASSERT_TRUE(overridden.kind.overridden);
  CliRun ok = runPeerlab(
      {"history", "ingest", "--db", url_, writeRun(alias, "alias.json"), writeRun(overridden, "overridden.json")});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  CliRun forced = runPeerlab({"history", "ingest", "--db", url_, "--kind-override", file});
  EXPECT_EQ(forced.exit_code, 0) << forced.err;
  const nlohmann::json runs =
      nlohmann::json::parse(runPeerlab({"history", "list", "--db", url_, "--json"}).out)["runs"];
  std::set<std::string> kinds;
  for (const auto& run : runs)
    kinds.insert(run["kind"]);
  EXPECT_EQ(kinds, (std::set<std::string>{"h200-x2", "lab-rack-3", "h100-x8-nvswitch"}));
}

// One GPU listed twice (its UUID) is no machine: refused with the path of the second listing.
TEST_P(HistoryCliTest, DuplicateGpuUuidsAreRefused) {
  std::mt19937_64 rng(44);
  report::Run run = testing::syntheticRun(rng, 0, "node-a", "kind-x");
  run.fingerprint.gpus[2].uuid = run.fingerprint.gpus[0].uuid;
  CliRun r = runPeerlab({"history", "ingest", "--db", url_, writeRun(run, "dup.json")});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("dup.json: $.fingerprint.gpus[2].uuid: \"GPU-node-a-0\" is the UUID of GPU 0 too"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(count("runs"), 0);
}

// States recorded under a machine's identity (before any run named its Slurm NodeName) and under its NodeName apply
// in the order they were recorded, not in the order of their names.
TEST_P(HistoryCliTest, NodeStatesApplyInTheOrderRecorded) {
  std::mt19937_64 rng(45);
  report::Run before = testing::syntheticRun(rng, 0, "gpu07", "kind-x");
  ASSERT_EQ(runPeerlab({"history", "ingest", "--db", url_, writeRun(before, "before.json")}).exit_code, 0);
  const std::string identity = before.node.id;
  ASSERT_LT(std::string("gpu07"), identity);  // by name, the identity's record would come last
  auto state = [&](const std::string& node, const std::string& st) {
    return runPeerlab({"history", "node-state", "--db", url_, "--node", node, "--state", st}).exit_code;
  };
  ASSERT_EQ(state(identity, "drained"), 0);
  // The same machine's later run, under Slurm as gpu07.
  report::Run after = before;
  after.timestamp = "2026-10-02T00:00:00Z";
  after.node.slurm_node = "gpu07";
  ASSERT_EQ(runPeerlab({"history", "ingest", "--db", url_, writeRun(after, "after.json")}).exit_code, 0);
  ASSERT_EQ(state("gpu07", "in_service"), 0);
  CliRun fleet = runPeerlab({"history", "fleet", "--db", url_, "--json", "-"});
  const nlohmann::json nodes = nlohmann::json::parse(fleet.out)["nodes"];
  ASSERT_EQ(nodes.size(), 1u) << nodes.dump();
  EXPECT_EQ(nodes[0]["state"], "in_service") << nodes.dump();
  ASSERT_EQ(state(identity, "down"), 0);
  EXPECT_EQ(
      nlohmann::json::parse(runPeerlab({"history", "fleet", "--db", url_, "--json", "-"}).out)["nodes"][0]["state"],
      "down");
}

// A run made with stand-ins or injected faults is stored as injected: listed and marked, in no fleet view, series,
// regression or latest verdict; baseline make refuses it, and ingest refuses a baseline file.
TEST_P(HistoryCliTest, InjectedRunsAreStoredMarkedAndCountedNowhere) {
  std::mt19937_64 rng(46);
  std::vector<std::string> files;
  // Steady real runs (no change point of their own), then the injected one: the node's newest, slow and failing.
  for (int i = 0; i < 8; ++i) {
    files.push_back(writeRun(testing::syntheticRun(rng, i, "node-a", "kind-x", 1.0, 1.0, 1e-6),
                             "real" + std::to_string(i) + ".json"));
  }
  report::Run injected = testing::syntheticRun(rng, 9, "node-a", "kind-x", 0.5, 1.0, 1e-6);
  injected.results.front().wrong = 5;
  injected.fingerprint.injected.fault = "copy_slow:percent=50";
  injected.fingerprint.injected.interposer = "/opt/peerlab/lib/libpeerlab_faults.so";
  injected.fingerprint.injected.nvml = "/opt/peerlab/lib/libpeerlab_fake_nvml.so";
  const std::string injectedFile = writeRun(injected, "injected.json");
  std::vector<std::string> args = {"history", "ingest", "--db", url_};
  args.insert(args.end(), files.begin(), files.end());
  args.push_back(injectedFile);
  CliRun ingest = runPeerlab(args);
  ASSERT_EQ(ingest.exit_code, 0) << ingest.err;
  EXPECT_NE(ingest.out.find("injected.json: stored as run 9 (" + std::to_string(injected.results.size()) +
                            " results) as INJECTED (counted nowhere)"),
            std::string::npos)
      << ingest.out;
  CliRun list = runPeerlab({"history", "list", "--db", url_});
  EXPECT_NE(list.out.find("INJECTED (not counted): fault copy_slow:percent=50 (interposer "
                          "/opt/peerlab/lib/libpeerlab_faults.so), stand-in NVML"),
            std::string::npos)
      << list.out;
  EXPECT_NE(list.out.find("9 runs (1 with stand-ins or injected faults, counted nowhere)"), std::string::npos);
  const nlohmann::json runs =
      nlohmann::json::parse(runPeerlab({"history", "list", "--db", url_, "--json"}).out)["runs"];
  EXPECT_EQ(runs.back()["injected"].get<std::string>().rfind("fault copy_slow:percent=50", 0), 0u);
  EXPECT_EQ(runs.front()["injected"], "");
  // The fleet view: the node's newest real run (PASS), the injected one listed apart.
  CliRun fleet = runPeerlab({"history", "fleet", "--db", url_, "--json", dir_ + "/f.json"});
  EXPECT_EQ(fleet.exit_code, 0) << fleet.err;
  const nlohmann::json f = nlohmann::json::parse(readFile(dir_ + "/f.json"));
  ASSERT_EQ(f["nodes"].size(), 1u);
  EXPECT_EQ(f["nodes"][0]["verdict"], "PASS");
  EXPECT_EQ(f["nodes"][0]["run_id"], 8);
  ASSERT_EQ(f["injected"].size(), 1u);
  EXPECT_EQ(f["injected"][0]["run_id"], 9);
  EXPECT_EQ(f["injected"][0]["verdict"], "FAIL");
  // No series holds the injected run's halved figures: no regression.
  CliRun regs = runPeerlab({"history", "regressions", "--db", url_, "--json", dir_ + "/r.json"});
  EXPECT_EQ(regs.exit_code, 0) << regs.out;
  EXPECT_NE(regs.out.find("1 run with stand-ins or injected faults left out"), std::string::npos) << regs.out;
  CliRun html = runPeerlab({"history", "html", "--db", url_, "--out", dir_ + "/site", "--model", dir_ + "/m.json"});
  ASSERT_EQ(html.exit_code, 0) << html.err;
  const nlohmann::json model = nlohmann::json::parse(readFile(dir_ + "/m.json"));
  for (const auto& k : model["kinds"]) {
    EXPECT_EQ(k["latest_verdict"]["run_id"], 8);
    for (const auto& s : k["series"])
      for (const auto& p : s["points"])
        EXPECT_NE(p["run_id"], 9);
  }
  for (const std::string& page : {report::fleetPageName("kind-x"), report::kindPageName("kind-x")}) {
    const std::string text = readFile(dir_ + "/site/" + page);
    EXPECT_NE(text.find("Runs counted nowhere: stand-ins or injected faults"), std::string::npos) << page;
    EXPECT_NE(text.find("FAIL (injected)"), std::string::npos) << page;
  }
  EXPECT_NE(readFile(dir_ + "/site/index.html").find("+1 injected, not counted"), std::string::npos);
  // baseline make refuses the injected run, and ingest refuses a baseline.
  CliRun base = runPeerlab({"baseline", "make", "--from", files[0], injectedFile, "--out", dir_ + "/b.json"});
  EXPECT_EQ(base.exit_code, 2) << base.err;
  EXPECT_NE(base.err.find("injected.json ran with stand-ins or injected faults (fault copy_slow:percent=50"),
            std::string::npos)
      << base.err;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/b.json"));
  ASSERT_EQ(runPeerlab({"baseline", "make", "--from", files[0], files[1], "--out", dir_ + "/b.json"}).exit_code, 0);
  CliRun baseline = runPeerlab({"history", "ingest", "--db", url_, dir_ + "/b.json"});
  EXPECT_EQ(baseline.exit_code, 2) << baseline.err;
  EXPECT_NE(baseline.err.find("b.json: a baseline (made by peerlab baseline make from 2 runs), not a node's run"),
            std::string::npos)
      << baseline.err;
  EXPECT_EQ(count("runs"), 9);
}

// A series shorter than the change-point test needs is said to be too short to test, never a green "no
// regressions"; a regression's p-value is printed as the permutation count bounds it.
TEST_P(HistoryCliTest, ShortSeriesAreNotTestedAndPValuesAreBounded) {
  std::mt19937_64 rng(47);
  std::vector<std::string> args = {"history", "ingest", "--db", url_};
  for (int i = 0; i < 4; ++i)
    args.push_back(writeRun(testing::syntheticRun(rng, i, "node-a", "short-kind"), "s" + std::to_string(i) + ".json"));
  for (int i = 0; i < 24; ++i) {
    args.push_back(writeRun(testing::syntheticRun(rng, 10 + i, "node-b", "long-kind", i < 12 ? 1.0 : 0.8, 1.0, 0.002),
                            "l" + std::to_string(i) + ".json"));
  }
  ASSERT_EQ(runPeerlab(args).exit_code, 0);
  CliRun regs = runPeerlab({"history", "regressions", "--db", url_, "--json", dir_ + "/r.json"});
  EXPECT_EQ(regs.exit_code, 1) << regs.out << regs.err;
  EXPECT_NE(regs.out.find("series too few runs to test (a change point needs 3 runs on each side)"), std::string::npos)
      << regs.out;
  EXPECT_NE(regs.out.find("e-divisive p < 0.01 n="), std::string::npos) << regs.out;
  EXPECT_EQ(regs.out.find("p=0 "), std::string::npos) << regs.out;
  for (const auto& r : nlohmann::json::parse(readFile(dir_ + "/r.json"))["regressions"]) {
    EXPECT_DOUBLE_EQ(r["p_floor"].get<double>(), 0.01);
    EXPECT_EQ(r["noise_rule"]["p_floor"], 0.01);
  }
  ASSERT_EQ(runPeerlab({"history", "html", "--db", url_, "--out", dir_ + "/site"}).exit_code, 0);
  const std::string shortPage = readFile(dir_ + "/site/" + report::kindPageName("short-kind"));
  EXPECT_NE(
      shortPage.find("verdict-none\">regressions: too few runs to test: a change point needs 3 runs on each side"),
      std::string::npos)
      << shortPage;
  EXPECT_EQ(shortPage.find("no regressions"), std::string::npos);
  const std::string longPage = readFile(dir_ + "/site/" + report::kindPageName("long-kind"));
  EXPECT_NE(longPage.find("<td>p &lt; 0.01</td>"), std::string::npos) << longPage.substr(0, 4000);
  EXPECT_NE(longPage.find("cannot tell a p below 1/(N+1)"), std::string::npos);
  const std::string index = readFile(dir_ + "/site/index.html");
  EXPECT_NE(index.find(">too few runs to test</td>"), std::string::npos) << index;
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

// A --db that names something else than a SQLite database is never opened, so never converted: by no command.
TEST(HistoryCli, ForeignFilesAreLeftAsTheyAre) {
  const std::string dir = scratchDir("history-foreign");
  std::mt19937_64 rng(11);
  const std::string run = dir + "/run.json";
  ASSERT_TRUE(report::writeRun(testing::syntheticRun(rng, 0, "node-a", "kind-x"), run).isOk());
  const std::string before = readFile(run);
  // A SQLite database that is not a peerlab history.
  const std::string other = dir + "/other.sqlite";
  {
    auto db = openDatabase(other);
    ASSERT_TRUE(db.isOk());
    ASSERT_TRUE((*db)->exec("PRAGMA journal_mode=DELETE").isOk());
    ASSERT_TRUE((*db)->exec("CREATE TABLE notes (text TEXT)").isOk());
  }
  const std::string otherBefore = readFile(other);
  std::ofstream(dir + "/empty.sqlite").close();
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"history", "ingest", "--db", run, run}, "run.json: not a SQLite database"},
      {{"history", "list", "--db", run}, "run.json: not a SQLite database"},
      {{"history", "html", "--db", run, "--out", dir + "/site"}, "run.json: not a SQLite database"},
      {{"history", "regressions", "--db", other}, "not a peerlab history"},
      {{"history", "ingest", "--db", other, run}, "a SQLite database of something else"},
      {{"history", "list", "--db", dir + "/empty.sqlite"}, "empty file"},
      {{"history", "list", "--db", dir}, "is a directory"},
  };
  for (const Case& c : cases) {
    CliRun r = runPeerlab(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args[1] << " " << c.args[3] << ": " << r.out << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_EQ(peerlab::testing::lineCount(r.err), 1) << r.err;
  }
  EXPECT_EQ(readFile(run), before);
  EXPECT_EQ(readFile(other), otherBefore);
  EXPECT_EQ(readFile(dir + "/empty.sqlite"), "");
  EXPECT_FALSE(std::filesystem::exists(dir + "/site"));
  std::filesystem::remove_all(dir);
}

TEST(HistoryCli, OptionValuesAreCheckedWithReadableMessages) {
  const std::string dir = scratchDir("history-options");
  const std::string db = dir + "/h.sqlite";
  std::mt19937_64 rng(12);
  ASSERT_TRUE(report::writeRun(testing::syntheticRun(rng, 0, "node-a", "kind-x"), dir + "/a.json").isOk());
  ASSERT_EQ(runPeerlab({"history", "ingest", "--db", db, dir + "/a.json"}).exit_code, 0);
  // "2.5%" is a threshold as report and qualify take it.
  CliRun pct = runPeerlab({"history", "regressions", "--db", db, "--threshold", "2.5%"});
  EXPECT_EQ(pct.exit_code, 0) << pct.err;
  EXPECT_NE(pct.out.find("worse by more than 2.5%"), std::string::npos) << pct.out;
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"regressions", "--threshold", "-1"}, "--threshold \"-1\": expected a percentage"},
      {{"regressions", "--min-change", "-3"}, "--min-change \"-3\": expected a percentage"},
      {{"html", "--out", dir + "/site", "--threshold", "abc"}, "--threshold \"abc\": expected a percentage"},
      {{"regressions", "--p-value", "2"}, "--p-value \"2\": expected a number from 1e-09 to 1"},
      {{"regressions", "--permutations", "1e400"},
       "--permutations \"1e400\": expected a whole number from 1 to 100000"},
      {{"regressions", "--permutations", "2.5"}, "--permutations \"2.5\": expected a whole number"},
      {{"fleet", "--z", "nan"}, "--z \"nan\": expected a number from 0.5 to 100"},
      {{"fleet", "--min-hosts", "2"}, "--min-hosts \"2\": expected a whole number from 3 to 100000"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"history", c.args[0], "--db", db};
    args.insert(args.end(), c.args.begin() + 1, c.args.end());
    CliRun r = runPeerlab(args);
    EXPECT_EQ(r.exit_code, 2) << c.says << ": " << r.out << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_EQ(peerlab::testing::lineCount(r.err), 1) << r.err;
    EXPECT_LT(r.err.size(), 200u) << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/site"));
  std::filesystem::remove_all(dir);
}

// Writes name the file and the reason, replace a symlink instead of following it, and never leave a temporary.
TEST(HistoryCli, OutputFilesAreWrittenSafely) {
  const std::string dir = scratchDir("history-writes");
  const std::string db = dir + "/h.sqlite";
  std::mt19937_64 rng(13);
  ASSERT_TRUE(report::writeRun(testing::syntheticRun(rng, 0, "node-a", "kind-x"), dir + "/a.json").isOk());
  ASSERT_EQ(runPeerlab({"history", "ingest", "--db", db, dir + "/a.json"}).exit_code, 0);
  // A directory that refuses new files (as root, 0555 does not: /sys refuses them to everyone).
  std::string denied = dir + "/ro";
  std::filesystem::create_directories(denied);
  std::filesystem::permissions(denied, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  int fd = ::open((denied + "/probe").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd >= 0) {
    ::close(fd);
    ::unlink((denied + "/probe").c_str());
    denied = "/sys";
    fd = ::open((denied + "/peerlab-probe").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  }
  if (fd < 0) {
    const std::string reason = std::strerror(errno);
    CliRun r = runPeerlab({"history", "regressions", "--db", db, "--json", denied + "/r.json"});
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_NE(r.err.find("cannot write " + denied + "/r.json: " + reason), std::string::npos) << r.err;
    EXPECT_EQ(peerlab::testing::lineCount(r.err), 1) << r.err;
  } else {
    ::close(fd);
    ADD_FAILURE() << "no directory refuses new files here: the permission case is not checked";
  }
  std::filesystem::permissions(dir + "/ro", std::filesystem::perms::owner_all);
  // A symlink at the target and at the old temporary's name: both point at a file that must stay as it is.
  const std::string outside = dir + "/outside.txt";
  std::ofstream(outside) << "keep";
  std::filesystem::create_symlink(outside, dir + "/r.json");
  const std::string site = dir + "/site";
  std::filesystem::create_directories(site);
  std::filesystem::create_symlink(outside, site + "/index.html.tmp");
  std::filesystem::create_symlink(outside, site + "/index.html");
  EXPECT_EQ(runPeerlab({"history", "regressions", "--db", db, "--json", dir + "/r.json"}).exit_code, 0);
  CliRun html = runPeerlab({"history", "html", "--db", db, "--out", site});
  EXPECT_EQ(html.exit_code, 0) << html.err;
  EXPECT_EQ(readFile(outside), "keep");
  EXPECT_FALSE(std::filesystem::is_symlink(dir + "/r.json"));
  EXPECT_TRUE(nlohmann::json::parse(readFile(dir + "/r.json"))["regressions"].is_array());
  EXPECT_FALSE(std::filesystem::is_symlink(site + "/index.html"));
  EXPECT_NE(readFile(site + "/index.html").find("peerlab history"), std::string::npos);
  for (const auto& e : std::filesystem::directory_iterator(site))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  // Missing parent directories are created (one rule for every output file).
  CliRun nested = runPeerlab({"history", "regressions", "--db", db, "--json", dir + "/a/b/c/r.json"});
  EXPECT_EQ(nested.exit_code, 0) << nested.err;
  EXPECT_TRUE(std::filesystem::is_regular_file(dir + "/a/b/c/r.json"));
  std::filesystem::remove_all(dir);
}

// One kind that cannot be written does not take the others or the index down; the failure is one line, exit 2.
TEST(HistoryCli, OneKindFailingLeavesTheOthersAndTheIndex) {
  const std::string dir = scratchDir("history-kind-fails");
  const std::string db = dir + "/h.sqlite";
  std::mt19937_64 rng(14);
  std::vector<std::string> args = {"history", "ingest", "--db", db};
  for (const char* kind : {"kind-x", "kind-y"})
    for (int i = 0; i < 2; ++i) {
      const std::string f = dir + "/" + kind + std::to_string(i) + ".json";
      ASSERT_TRUE(report::writeRun(testing::syntheticRun(rng, i, "node-a", kind), f).isOk());
      args.push_back(f);
    }
  ASSERT_EQ(runPeerlab(args).exit_code, 0);
  const std::string site = dir + "/site";
  // A directory where kind-y's page goes: that page cannot be written.
  std::filesystem::create_directories(site + "/" + report::kindPageName("kind-y"));
  CliRun r = runPeerlab({"history", "html", "--db", db, "--out", site});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_EQ(peerlab::testing::lineCount(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("1 of 2 kinds not rendered"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("kind \"kind-y\""), std::string::npos) << r.err;
  EXPECT_TRUE(std::filesystem::is_regular_file(site + "/" + report::kindPageName("kind-x")));
  const std::string index = readFile(site + "/index.html");
  EXPECT_NE(index.find("href=\"" + report::kindPageName("kind-x") + "\""), std::string::npos);
  EXPECT_NE(index.find("not rendered"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// Strings from run files reach the terminal escaped; passwords in database URLs never reach it.
TEST(HistoryCli, NothingRawReachesTheTerminal) {
  const std::string dir = scratchDir("history-terminal");
  const std::string db = dir + "/h.sqlite";
  std::mt19937_64 rng(15);
  report::Run run = testing::syntheticRun(rng, 0, "node-\x1b]0;owned\x07-a\x1b[2J", "kind-\x1b[31mred");
  auto store = HistoryStore::open(db);
  ASSERT_TRUE(store.isOk());
  ASSERT_TRUE((*store)->ingest(run).isOk());
  store->reset();
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"history", "list", "--db", db},
        std::vector<std::string>{"history", "regressions", "--db", db, "--kind", "x\x1b[31m"}}) {
    CliRun r = runPeerlab(args);
    EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << r.out;
    EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find('\x07'), std::string::npos) << r.out;
  }
  EXPECT_NE(runPeerlab({"history", "list", "--db", db}).out.find("node-\\x1b]0;owned\\x07-a"), std::string::npos);
  CliRun pg = runPeerlab({"history", "list", "--db", "postgresql://peerlab:s3cr3t-pw@127.0.0.1:1/none"});
  EXPECT_EQ(pg.exit_code, 2);
  EXPECT_EQ(pg.err.find("s3cr3t-pw"), std::string::npos) << pg.err;
  EXPECT_NE(pg.err.find("postgresql://peerlab:***@127.0.0.1:1/none"), std::string::npos) << pg.err;
  CliRun param = runPeerlab({"history", "list", "--db", "postgresql://127.0.0.1:1/none?user=a&password=s3cr3t-pw"});
  EXPECT_EQ(param.err.find("s3cr3t-pw"), std::string::npos) << param.err;
  std::filesystem::remove_all(dir);
}

// What --db names is decided before anything is opened: PostgreSQL in every spelling goes to libpq, a value that is
// neither an existing file nor a connection string is refused, no password reaches a file name or a message, and an
// in-memory database is refused where data is kept.
TEST(HistoryCli, ConnectionStringsNeverBecomeFilesOrLeakPasswords) {
  const std::string dir = scratchDir("history-connstr");
  std::mt19937_64 rng(24);
  const std::string run = dir + "/run.json";
  ASSERT_TRUE(report::writeRun(testing::syntheticRun(rng, 0, "node-a", "kind-x"), run).isOk());
  const std::string cwd = dir + "/cwd";
  std::filesystem::create_directories(cwd);
  struct Case {
    std::string db;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"host=127.0.0.1 port=1 user=peerlab password=s3cr3t-pw dbname=none", "cannot connect to PostgreSQL"},
      {"POSTGRESQL://peerlab:s3cr3t-pw@127.0.0.1:1/none", "cannot connect to PostgreSQL"},
      {"Postgres://peerlab:s3cr3t-pw@127.0.0.1:1/none", "cannot connect to PostgreSQL"},
      {"postgresql://peerlab:s3cr3t@pw-tail@127.0.0.1:1/none", "'@', '/', '?' or '#' unescaped"},
      {"postgresql://peerlab:s3cr3t/pw-tail@127.0.0.1:1/none", "'@', '/', '?' or '#' unescaped"},
      {"host=127.0.0.1 password='s3cr3t-pw", "not a valid PostgreSQL connection string"},
      {"host=127.0.0.1 password=s3cr3t-pw pw-tail more", "not a valid PostgreSQL connection string"},
      {"hots=127.0.0.1 password=s3cr3t-pw", "not a valid PostgreSQL connection string"},
      {"mysql://peerlab:s3cr3t-pw@127.0.0.1/none", "not a SQLite file nor a PostgreSQL URL"},
      {cwd + "/h.sqlite password=s3cr3t-pw", "holds a password but is no PostgreSQL connection string"},
      {":memory:", "an in-memory database keeps nothing"},
  };
  for (const Case& c : cases) {
    for (const char* command : {"ingest", "remove"}) {
      std::vector<std::string> args = {"env", "-C", cwd, PEERLAB_BINARY, "history", command, "--db", c.db};
      args.push_back(std::string(command) == "ingest" ? run : "1");
      CliRun r = peerlab::testing::runCommand(args);
      EXPECT_EQ(r.exit_code, 2) << c.db << ": " << r.out << r.err;
      EXPECT_NE(r.err.find(c.says), std::string::npos) << c.db << ": " << r.err;
      EXPECT_EQ(peerlab::testing::lineCount(r.err), 1) << r.err;
      for (const char* secret : {"s3cr3t", "pw-tail"}) {
        EXPECT_EQ(r.err.find(secret), std::string::npos) << c.db << ": " << r.err;
        EXPECT_EQ(r.out.find(secret), std::string::npos) << c.db << ": " << r.out;
      }
      EXPECT_EQ(r.out.find("stored as run"), std::string::npos) << r.out;
    }
  }
  // Nothing was made in the working directory or beside the run.
  EXPECT_TRUE(std::filesystem::is_empty(cwd));
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    names.push_back(e.path().filename().string());
  EXPECT_EQ(names.size(), 2u);
  // A read command given a value that is no file and no connection string says so and makes nothing.
  CliRun typo = runPeerlab({"history", "list", "--db", cwd + "/typo.sqlite"});
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_NE(typo.err.find("no such history database"), std::string::npos) << typo.err;
  EXPECT_TRUE(std::filesystem::is_empty(cwd));
  std::filesystem::remove_all(dir);
}

// Read commands open a SQLite history read-only: they change nothing in it and leave no -wal or -shm beside it, and
// they read one in a directory they cannot write (as another user when the test runs as root).
TEST(HistoryCli, ReadCommandsOpenTheDatabaseReadOnly) {
  const std::string dir = scratchDir("history-readonly");
  const std::string store = dir + "/db";
  std::filesystem::create_directories(store);
  const std::string db = store + "/h.sqlite";
  std::mt19937_64 rng(25);
  std::vector<std::string> ingest = {"history", "ingest", "--db", db};
  for (int i = 0; i < 3; ++i) {
    const std::string f = dir + "/r" + std::to_string(i) + ".json";
    ASSERT_TRUE(report::writeRun(testing::syntheticRun(rng, i, "node-a", "kind-x"), f).isOk());
    ingest.push_back(f);
  }
  ASSERT_EQ(runPeerlab(ingest).exit_code, 0);
  auto listing = [&] {
    std::set<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(store))
      names.insert(e.path().filename().string());
    return names;
  };
  ASSERT_EQ(listing(), std::set<std::string>({"h.sqlite"}));
  const std::string before = readFile(db);
  const std::vector<std::vector<std::string>> commands = {
      {"history", "list", "--db", db},
      {"history", "regressions", "--db", db, "--json", dir + "/r.json"},
      {"history", "fleet", "--db", db},
      {"history", "html", "--db", db, "--out", dir + "/site"},
  };
  for (const auto& cmd : commands) {
    CliRun r = runPeerlab(cmd);
    EXPECT_EQ(r.exit_code, 0) << cmd[1] << ": " << r.err;
    EXPECT_EQ(listing(), std::set<std::string>({"h.sqlite"})) << cmd[1];
  }
  EXPECT_EQ(readFile(db), before);
  // A directory the reader cannot write: 0555, and as root the commands run as nobody.
  std::filesystem::permissions(store, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec |
                                          std::filesystem::perms::group_read | std::filesystem::perms::group_exec |
                                          std::filesystem::perms::others_read | std::filesystem::perms::others_exec);
  std::filesystem::permissions(dir, std::filesystem::perms::all);
  std::vector<std::string> as;
  if (::geteuid() == 0) as = {"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"};
  const std::string out = dir + "/out";
  std::filesystem::create_directories(out);
  std::filesystem::permissions(out, std::filesystem::perms::all);
  const std::vector<std::vector<std::string>> readers = {
      {"history", "list", "--db", db, "--json"},
      {"history", "regressions", "--db", db, "--json", out + "/r.json"},
      {"history", "fleet", "--db", db},
      {"history", "html", "--db", db, "--out", out + "/site"},
  };
  for (const auto& cmd : readers) {
    std::vector<std::string> args = as;
    args.push_back(PEERLAB_BINARY);
    args.insert(args.end(), cmd.begin(), cmd.end());
    CliRun r = peerlab::testing::runCommand(args);
    EXPECT_EQ(r.exit_code, 0) << cmd[1] << ": " << r.out << r.err;
    if (cmd[1] == "list") {
      EXPECT_EQ(nlohmann::json::parse(r.out)["runs"].size(), 3u) << r.out;
    }
  }
  EXPECT_EQ(listing(), std::set<std::string>({"h.sqlite"}));
  EXPECT_TRUE(std::filesystem::is_regular_file(out + "/site/index.html"));
  std::filesystem::permissions(store, std::filesystem::perms::owner_all);
  std::filesystem::remove_all(dir);
}

// A PostgreSQL server named by a libpq keyword/value string or by a URL with its scheme in capitals is PostgreSQL.
TEST(HistoryCli, EveryConnectionStringFormReachesPostgres) {
  std::string why;
  const std::string server = testing::postgresServerUrl(&why);
  if (server.empty()) GTEST_SKIP() << why;
  const std::string url = testing::freshPostgresDatabase(server, "connstr");
  ASSERT_FALSE(url.empty());
  // postgresql://postgres@127.0.0.1:PORT/NAME
  const size_t at = url.find('@'), colon = url.rfind(':'), slash = url.rfind('/');
  ASSERT_TRUE(at != std::string::npos && colon > at && slash > colon) << url;
  const std::string user = url.substr(13, at - 13), host = url.substr(at + 1, colon - at - 1);
  const std::string port = url.substr(colon + 1, slash - colon - 1), name = url.substr(slash + 1);
  const std::string keywords = "host=" + host + " port=" + port + " user=" + user + " dbname=" + name;
  const std::string upper = "POSTGRESQL://" + url.substr(13);
  const std::string dir = scratchDir("history-connstr-pg");
  const std::string cwd = dir + "/cwd";
  std::filesystem::create_directories(cwd);
  std::mt19937_64 rng(23);
  const std::string run = dir + "/a.json";
  ASSERT_TRUE(report::writeRun(testing::syntheticRun(rng, 0, "node-a", "kind-x"), run).isOk());
  for (const std::string& db : {keywords, upper}) {
    CliRun r = peerlab::testing::runCommand({"env", "-C", cwd, PEERLAB_BINARY, "history", "ingest", "--db", db, run});
    EXPECT_EQ(r.exit_code, 0) << db << ": " << r.err;
    CliRun list = runPeerlab({"history", "list", "--db", db, "--json"});
    EXPECT_EQ(list.exit_code, 0) << db << ": " << list.err;
    EXPECT_EQ(nlohmann::json::parse(list.out)["runs"].size(), 1u) << db;
  }
  EXPECT_TRUE(std::filesystem::is_empty(cwd));
  std::filesystem::remove_all(dir);
}

// An ingest that cannot write (a file size limit stands in for a full disk) leaves no file behind that would later
// read as "not a peerlab history"; on an existing history it leaves the history as it was.
TEST(HistoryCli, AnIngestThatCannotWriteLeavesNothingThatLooksLikeAHistory) {
  const std::string dir = scratchDir("history-full-disk");
  std::mt19937_64 rng(26);
  const std::string a = dir + "/a.json", b = dir + "/b.json";
  ASSERT_TRUE(report::writeRun(testing::syntheticRun(rng, 0, "node-a", "kind-x"), a).isOk());
  ASSERT_TRUE(report::writeRun(testing::syntheticRun(rng, 1, "node-a", "kind-x"), b).isOk());
  auto full = [&](const std::string& db, const std::string& run) {
    // SIGXFSZ ignored: a write beyond the limit fails with EFBIG, as a full disk fails with ENOSPC. The limit holds
    // for files only, so the messages go out through a pipe.
    return peerlab::testing::runCommand(
        {"bash", "-c",
         "set -o pipefail; trap '' XFSZ; (ulimit -f 0; exec \"$0\" history ingest --db \"$1\" \"$2\") 2>&1 | cat >&2",
         PEERLAB_BINARY, db, run});
  };
  const std::string fresh = dir + "/fresh.sqlite";
  CliRun r = full(fresh, a);
  EXPECT_NE(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(peerlab::testing::lineCount(r.err), 1) << r.err;
  for (const char* suffix : {"", "-wal", "-shm", "-journal"})
    EXPECT_FALSE(std::filesystem::exists(fresh + suffix)) << suffix;
  // An existing history keeps what it held.
  const std::string kept = dir + "/kept.sqlite";
  ASSERT_EQ(runPeerlab({"history", "ingest", "--db", kept, a}).exit_code, 0);
  CliRun more = full(kept, b);
  EXPECT_NE(more.exit_code, 0) << more.out << more.err;
  CliRun list = runPeerlab({"history", "list", "--db", kept, "--json"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_EQ(nlohmann::json::parse(list.out)["runs"].size(), 1u);
  std::filesystem::remove_all(dir);
}

// Starts `argv` with stdout and stderr in files; returns its pid.
pid_t spawn(const std::vector<std::string>& argv, const std::string& out, const std::string& err) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(o, 1);
    ::dup2(e, 2);
    std::vector<char*> cargv;
    for (const std::string& a : argv)
      cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
    ::execv(cargv[0], cargv.data());
    ::_exit(127);
  }
  return pid;
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
    s.pop_back();
  return s;
}

// PostgreSQL stopped in the middle of an ingest: exit 4 with PostgreSQL's own message, the ingest stops there (no
// later file is tried or blamed), and what was stored is whole (each file all or nothing).
TEST(HistoryCli, APostgresLostMidIngestStopsItWithExitFour) {
  const std::string dir = scratchDir("history-pg-lost");
  const std::string state = dir + "/pg";
  const std::string script = peerlab::testing::sourcePath("harness/history/testing/pg_cluster.sh");
  CliRun started = peerlab::testing::runCommand({script, "start", state});
  ASSERT_EQ(started.exit_code, 0) << started.out << started.err;
  if (std::filesystem::exists(state + "/skip")) GTEST_SKIP() << readFile(state + "/skip");
  const std::string url = trimmed(readFile(state + "/url"));
  const std::string datadir = trimmed(readFile(state + "/datadir"));
  const std::string port = url.substr(url.rfind(':') + 1, url.rfind('/') - url.rfind(':') - 1);
  std::mt19937_64 rng(48);
  std::vector<std::string> argv = {PEERLAB_BINARY, "history", "ingest", "--db", url};
  for (int i = 0; i < 60; ++i) {
    const std::string f = dir + "/r" + std::to_string(i) + ".json";
    ASSERT_TRUE(report::writeRun(testing::syntheticRun(rng, i, "node-a", "kind-x", 1.0, 1.0, 0.01, 8), f).isOk());
    argv.push_back(f);
  }
  const int perRun =
      static_cast<int>(testing::syntheticRun(rng, 0, "node-a", "kind-x", 1.0, 1.0, 0.01, 8).results.size());
  const pid_t pid = spawn(argv, dir + "/out", dir + "/err");
  ASSERT_GT(pid, 0);
  // Once a few runs are stored, the ingest is held still, the server stopped under it, and the ingest let go.
  std::int64_t seen = 0;
  for (int tries = 0; tries < 3000 && seen < 3; ++tries) {
    ::usleep(10000);
    if (auto store = HistoryStore::open(url, OpenMode::kReadOnly); store.isOk()) {
      auto n = (*store)->count("runs");
      seen = n.isOk() ? *n : 0;
    }
  }
  ASSERT_GE(seen, 3) << readFile(dir + "/err");
  ::kill(pid, SIGSTOP);
  const std::string pgctl = "$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)/pg_ctl";
  ASSERT_EQ(
      std::system(
          ("runuser -u postgres -- " + pgctl + " -D " + datadir + "/data -m fast -w -t 60 stop >/dev/null").c_str()),
      0);
  ::kill(pid, SIGCONT);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  const std::string out = readFile(dir + "/out"), err = readFile(dir + "/err");
  std::printf("%s", err.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 4) << out << err;
  EXPECT_EQ(peerlab::testing::lineCount(err), 1) << err;
  EXPECT_NE(err.find("ingest: the database failed while storing "), std::string::npos) << err;
  EXPECT_NE(err.find("the files after it were not tried"), std::string::npos) << err;
  // PostgreSQL's own words, never an empty message.
  EXPECT_NE(err.find(": postgresql: "), std::string::npos) << err;
  EXPECT_EQ(err.find("postgresql:  ("), std::string::npos) << err;
  EXPECT_EQ(err.find("rejected"), std::string::npos) << err;
  EXPECT_NE(out.find(", 0 rejected; stopped at "), std::string::npos) << out;
  int storedLines = 0;
  for (size_t at = 0; (at = out.find(": stored as run ", at)) != std::string::npos; ++at)
    ++storedLines;
  // Back up: what was stored is whole, and it is what the ingest said it stored.
  ASSERT_EQ(std::system(("runuser -u postgres -- " + pgctl + " -D " + datadir + "/data -l " + datadir +
                         "/server.log -w -t 60 -o '-p " + port + " -k " + datadir +
                         " -c listen_addresses=127.0.0.1' start >/dev/null")
                            .c_str()),
            0);
  auto store = HistoryStore::open(url, OpenMode::kReadOnly);
  ASSERT_TRUE(store.isOk()) << store.status().toString();
  auto runs = (*store)->count("runs");
  auto results = (*store)->count("results");
  ASSERT_TRUE(runs.isOk() && results.isOk());
  EXPECT_EQ(*runs, storedLines) << out;
  EXPECT_EQ(*results, static_cast<std::int64_t>(storedLines) * perRun);
  store->reset();
  peerlab::testing::runCommand({script, "stop", state});
  std::filesystem::remove_all(dir);
}

// A full disk under a SQLite history: exit 4 with SQLite's own message, the ingest stops there, and the history keeps
// every run it stored whole. A small tmpfs is the full disk (root); elsewhere a file size limit stands in for it.
TEST(HistoryCli, AFullDiskStopsTheIngestWithExitFour) {
  const std::string dir = scratchDir("history-disk-full");
  const std::string disk = dir + "/disk";
  std::filesystem::create_directories(disk);
  const bool mounted = ::geteuid() == 0 && std::system(("mount -t tmpfs -o size=320k tmpfs " + disk).c_str()) == 0;
  std::mt19937_64 rng(49);
  std::vector<std::string> args = {"ingest", "--db", disk + "/h.sqlite"};
  for (int i = 0; i < 20; ++i) {
    const std::string f = dir + "/r" + std::to_string(i) + ".json";
    ASSERT_TRUE(report::writeRun(testing::syntheticRun(rng, i, "node-a", "kind-x", 1.0, 1.0, 0.01, 8), f).isOk());
    args.push_back(f);
  }
  CliRun r;
  if (mounted) {
    std::vector<std::string> all = {PEERLAB_BINARY, "history"};
    all.insert(all.end(), args.begin(), args.end());
    r = peerlab::testing::runCommand(all);
  } else {
    std::printf("not root or no tmpfs: a file size limit of 300 KiB stands in for the full disk\n");
    std::string cmd = "trap '' XFSZ; ulimit -f 300; exec \"$0\" history";
    for (size_t i = 0; i < args.size(); ++i)
      cmd += " \"${" + std::to_string(i + 1) + "}\"";
    std::vector<std::string> all = {"bash", "-c", cmd, PEERLAB_BINARY};
    all.insert(all.end(), args.begin(), args.end());
    r = peerlab::testing::runCommand(all);
  }
  std::printf("%s", r.err.c_str());
  EXPECT_EQ(r.exit_code, 4) << r.out << r.err;
  EXPECT_EQ(peerlab::testing::lineCount(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("the database failed while storing"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(mounted ? "sqlite: database or disk is full" : ": sqlite: "), std::string::npos) << r.err;
  EXPECT_NE(r.out.find(", 0 rejected; stopped at "), std::string::npos) << r.out;
  int storedLines = 0;
  for (size_t at = 0; (at = r.out.find(": stored as run ", at)) != std::string::npos; ++at)
    ++storedLines;
  EXPECT_GT(storedLines, 0) << r.out;
  EXPECT_LT(storedLines, 20) << r.out;
  CliRun list = runPeerlab({"history", "list", "--db", disk + "/h.sqlite", "--json"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_EQ(nlohmann::json::parse(list.out)["runs"].size(), static_cast<size_t>(storedLines));
  if (mounted) {
    EXPECT_EQ(std::system(("umount " + disk).c_str()), 0);
  }
  std::filesystem::remove_all(dir);
}

// The committed run files are the first history: every command runs on them.
// Every committed run file and bundle ingests under one kind per hardware (GPU model x count): the kinds the store
// lists are the canonical ones, whatever spelling a file carried; none of them was made with stand-ins, and the
// committed baselines are refused (references, not runs).
TEST(HistoryCli, CommittedFilesIngestIntoOneKindPerHardware) {
  const std::string dir = scratchDir("history-kinds");
  const std::string db = dir + "/history.sqlite";
  std::vector<std::string> args = {"history", "ingest", "--db", db};
  for (const char* sub : {"reports/runs", "reports/qualify", "reports/baselines"}) {
    for (const auto& e : std::filesystem::recursive_directory_iterator(peerlab::testing::sourcePath(sub))) {
      // Run files, and each bundle's results.json (reports/qualify holds other JSON beside them).
      const std::string name = e.path().filename().string();
      const bool runFile = std::string(sub) == "reports/qualify" ? name == "results.json" || name == "results.json.gz"
                                                                 : report::isRunFileName(name);
      if (runFile) args.push_back(e.path().string());
    }
  }
  ASSERT_GE(args.size(), 4u + 11u);
  CliRun ingest = runPeerlab(args);
  // The baselines are refused, each by name: a baseline is a reference, not a node's run. The rest are stored.
  size_t baselines = 0;
  for (const std::string& a : args)
    baselines += a.find("/reports/baselines/") != std::string::npos;
  ASSERT_GE(baselines, 5u);
  EXPECT_EQ(ingest.exit_code, 2) << ingest.out << ingest.err;
  EXPECT_EQ(peerlab::testing::lineCount(ingest.err), static_cast<int>(baselines)) << ingest.err;
  for (const std::string& line :
       {std::string("a baseline (made by peerlab baseline make from "), std::string("not a node's run")})
    EXPECT_NE(ingest.err.find(line), std::string::npos) << ingest.err;
  CliRun list = runPeerlab({"history", "list", "--db", db, "--json"});
  ASSERT_EQ(list.exit_code, 0);
  std::map<std::string, std::set<std::string>> kindsOf;  // "2x NVIDIA H200" -> kinds
  const nlohmann::json listed = nlohmann::json::parse(list.out);
  ASSERT_EQ(listed["runs"].size(), args.size() - 4 - baselines);
  for (const auto& r : listed["runs"])
    EXPECT_EQ(r["injected"], "") << "a committed run made with stand-ins: " << r.dump();
  for (const auto& r : listed["runs"]) {
    std::map<std::string, int> models;
    for (const auto& g : r["gpus"])
      ++models[g.get<std::string>()];
    std::string hw;
    for (const auto& [m, n] : models)
      hw += std::to_string(n) + "x " + m + " ";
    kindsOf[hw].insert(r["kind"].get<std::string>());
    EXPECT_EQ(r["node"].get<std::string>().rfind("gpus-", 0), 0u) << r.dump();
  }
  std::set<std::string> kinds;
  for (const auto& [hw, k] : kindsOf) {
    EXPECT_EQ(k.size(), 1u) << hw << ": " << nlohmann::json(k).dump();
    kinds.insert(k.begin(), k.end());
  }
  EXPECT_EQ(kinds, (std::set<std::string>{"h100-x1", "h100-x2-nvswitch", "h100-x4-nvswitch", "h200-x1",
                                          "h200-x2-nvswitch", "h200-x4-nvswitch"}));
  // An alias given at ingest is filed under the canonical kind; a kind that contradicts the runs' hardware is refused.
  const std::string x1 = peerlab::testing::sourcePath("reports/runs/2026-11-25-h100-x1-a99f8ae.json.gz");
  CliRun alias = runPeerlab({"history", "ingest", "--db", dir + "/b.sqlite", "--kind", "nvidia-h100-x1", x1});
  EXPECT_EQ(alias.exit_code, 0) << alias.err;
  CliRun kinds2 = runPeerlab({"history", "list", "--db", dir + "/b.sqlite", "--json"});
  EXPECT_EQ(nlohmann::json::parse(kinds2.out)["runs"][0]["kind"], "h100-x1");
  CliRun wrong = runPeerlab({"history", "ingest", "--db", dir + "/c.sqlite", "--kind", "h200-x1", x1});
  EXPECT_EQ(wrong.exit_code, 2) << wrong.err;
  EXPECT_NE(wrong.err.find("contradicts the hardware: the hardware is h100-x1"), std::string::npos) << wrong.err;
  std::filesystem::remove_all(dir);
}

TEST(HistoryCli, CommittedRunFilesAreTheFirstHistory) {
  const std::string dir = scratchDir("history-smoke");
  const std::string db = dir + "/history.sqlite";
  std::vector<std::string> args = {"history", "ingest", "--db", db};
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(peerlab::testing::sourcePath("reports/runs"))) {
    if (!report::isRunFileName(e.path().string())) continue;
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
  // Each kind's latest run with the checks engine's verdict and counts.
  EXPECT_NE(readFile(dir + "/site/index.html").find(">PASS: "), std::string::npos);
  const nlohmann::json model = nlohmann::json::parse(readFile(dir + "/model.json"));
  for (const auto& k : model["kinds"]) {
    EXPECT_TRUE(k.contains("latest_verdict")) << k["kind"];
    EXPECT_EQ(k["latest_verdict"]["checks"]["total"].get<int>(),
              k["latest_verdict"]["checks"]["passed"].get<int>() + k["latest_verdict"]["checks"]["failed"].get<int>() +
                  k["latest_verdict"]["checks"]["warnings"].get<int>() +
                  k["latest_verdict"]["checks"]["unsupported"].get<int>() +
                  k["latest_verdict"]["checks"]["skipped"].get<int>());
  }
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
