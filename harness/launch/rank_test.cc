#include "harness/launch/rank_test.h"

#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "harness/launch/launch.h"

namespace peerlab::launch {

namespace {

constexpr const char* kEnvResultDir = "PEERLAB_TEST_RESULT_DIR";
constexpr size_t kLogTailLines = 120;

std::string resultPath(const std::string& dir, int rank) {
  return dir + "/rank" + std::to_string(rank) + ".result";
}
std::string logPath(const std::string& dir, int rank) {
  return dir + "/rank" + std::to_string(rank) + ".log";
}

// Inside a rank: records how the test ended, so the parent can tell "skipped" from "passed".
class ResultWriter : public ::testing::EmptyTestEventListener {
 public:
  explicit ResultWriter(std::string path) : path_(std::move(path)) {}
  void OnTestEnd(const ::testing::TestInfo& info) override {
    const ::testing::TestResult* r = info.result();
    std::ofstream out(path_, std::ios::trunc);
    if (r->Failed()) {
      out << "failed\n";
    } else if (r->Skipped()) {
      out << "skipped\n";
      for (int i = 0; i < r->total_part_count(); ++i) {
        const auto& part = r->GetTestPartResult(i);
        if (part.skipped() && part.message() != nullptr) out << part.message();
      }
    } else {
      out << "passed\n";
    }
  }

 private:
  std::string path_;
};

std::string readTail(const std::string& path, size_t lines) {
  std::ifstream in(path);
  if (!in) return "(no output captured)\n";
  std::deque<std::string> tail;
  std::string line;
  size_t total = 0;
  while (std::getline(in, line)) {
    tail.push_back(line);
    ++total;
    if (tail.size() > lines) tail.pop_front();
  }
  std::string out;
  if (total > tail.size()) out += "... (" + std::to_string(total - tail.size()) + " earlier lines)\n";
  for (const auto& l : tail)
    out += l + "\n";
  return out;
}

// Ranks write to log files (fully buffered): flush after every assertion, so a rank that is killed at the job's
// deadline still shows where it was.
class FlushingListener : public ::testing::EmptyTestEventListener {
  void OnTestPartResult(const ::testing::TestPartResult&) override { std::fflush(nullptr); }
  void OnTestStart(const ::testing::TestInfo&) override { std::fflush(nullptr); }
};

// This rank's result file (rank side only; empty when the parent gave no result directory).
std::string g_result_path;

TestRanks rankSide(int ranks, std::chrono::seconds timeout) {
  TestRanks t;
  t.is_parent = false;
  ::testing::UnitTest::GetInstance()->listeners().Append(new FlushingListener);
  std::fflush(nullptr);
  auto boot = bootstrapFromEnvironment(Deadline::after(timeout));
  if (!boot.isOk()) {
    t.status = boot.status().withContext("connecting the rank bootstrap");
    return t;
  }
  if ((*boot)->size() != ranks) {
    t.status =
        PEERLAB_INVALID_ARGUMENT("this test needs " + std::to_string(ranks) + " ranks, the " +
                                 std::string((*boot)->kind()) + " bootstrap has " + std::to_string((*boot)->size()));
    return t;
  }
  if (const char* dir = std::getenv(kEnvResultDir); dir != nullptr && *dir != '\0') {
    g_result_path = resultPath(dir, (*boot)->rank());
    ::testing::UnitTest::GetInstance()->listeners().Append(new ResultWriter(g_result_path));
  }
  t.bootstrap = std::move(boot).value();
  return t;
}

}  // namespace

void exitRankAbruptly() {
  if (!g_result_path.empty()) std::ofstream(g_result_path, std::ios::trunc) << "exited\n";
  std::fflush(nullptr);
  std::_Exit(0);
}

TestRanks runTestAsRanks(int ranks, std::chrono::seconds timeout, std::vector<std::string> extra_env) {
  if (launchedAsRank()) return rankSide(ranks, timeout);

  TestRanks t;
  t.is_parent = true;
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  if (info == nullptr) {
    t.status = PEERLAB_INVALID_ARGUMENT("runTestAsRanks must be called from inside a GoogleTest test");
    return t;
  }
  auto dir = makePrivateDir("peerlab-test");
  if (!dir.isOk()) {
    t.status = dir.status();
    return t;
  }
  LocalOptions o;
  o.ranks = ranks;
  o.argv = {"/proc/self/exe", "--gtest_filter=" + std::string(info->test_suite_name()) + "." + info->name(),
            "--gtest_color=no"};
  if (GTEST_FLAG_GET(also_run_disabled_tests)) o.argv.push_back("--gtest_also_run_disabled_tests");
  o.extra_env = std::move(extra_env);
  o.extra_env.push_back(std::string(kEnvResultDir) + "=" + *dir);
  // A rank re-runs exactly this test: a GoogleTest shard inherited from the parent's environment (gtest-parallel,
  // ci/sanitize.sh) could assign that one test to another shard and leave the rank with nothing to run.
  o.extra_env.push_back("GTEST_TOTAL_SHARDS=1");
  o.extra_env.push_back("GTEST_SHARD_INDEX=0");
  o.timeout = timeout;
  o.log_dir = *dir;

  auto exits = runLocal(o);
  if (!exits.isOk()) {
    t.status = exits.status();
  } else {
    t.status = summarize(*exits);
    const char* all = std::getenv("PEERLAB_RANK_OUTPUT");
    const bool print_all = all != nullptr && *all != '\0' && std::string(all) != "0";
    std::string logs;
    for (const RankExit& e : *exits) {
      const bool bad = e.timed_out || e.signal != 0 || e.exit_code != 0;
      if (bad || print_all) {
        logs += "\n----- rank " + std::to_string(e.rank) + " (" + describeExit(e) + "), last lines of output -----\n" +
                readTail(logPath(*dir, e.rank), print_all ? SIZE_MAX : kLogTailLines);
      }
      std::ifstream result(resultPath(*dir, e.rank));
      std::string first;
      const bool reported = static_cast<bool>(std::getline(result, first));
      if (!bad && !reported && t.status.isOk()) {
        // Exit 0 without a result: the rank never ran this test (a filter or shard left it nothing to run).
        t.status = PEERLAB_INTERNAL("rank " + std::to_string(e.rank) + " exited 0 without running " +
                                    info->test_suite_name() + "." + info->name());
      }
      if (!bad && reported && first == "skipped") {
        std::stringstream rest;
        rest << result.rdbuf();
        t.skipped = true;
        if (t.skip_reason.empty()) t.skip_reason = "rank " + std::to_string(e.rank) + " skipped: " + rest.str();
      }
    }
    if (!t.status.isOk()) {
      t.status = Status(t.status.code(), t.status.message() + logs, t.status.file(), t.status.line());
    } else if (print_all) {
      std::cout << logs << std::flush;
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(*dir, ec);
  return t;
}

}  // namespace peerlab::launch
