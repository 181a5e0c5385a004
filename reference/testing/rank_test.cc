#include "reference/testing/rank_test.h"

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "reference/core/files.h"
#include "reference/core/local_bootstrap.h"
#include "reference/core/process.h"

namespace peerlab::testing {

namespace {

constexpr const char* kEnvResultDir = "PEERLAB_TEST_RESULT_DIR";
constexpr int kLogTailLines = 120;

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

// Ranks write to log files (fully buffered): flush after every assertion, so a rank that is killed at the job's
// deadline still shows where it was.
class FlushingListener : public ::testing::EmptyTestEventListener {
  void OnTestPartResult(const ::testing::TestPartResult&) override { std::fflush(nullptr); }
  void OnTestStart(const ::testing::TestInfo&) override { std::fflush(nullptr); }
};

// This rank's result file (rank side only; empty when the parent gave no result directory).
std::string g_result_path;
OutsideLauncher g_outside;

bool outsideLaunched() {
  return g_outside.launched != nullptr && g_outside.connect != nullptr && g_outside.launched();
}

// How one rank ended, as the parent saw it.
struct RankEnd {
  int rank = 0;
  process::ExitStatus exit;
  bool timed_out = false;
  bool stopped = false;  // stopped by the parent after another rank failed or the deadline passed
  bool failed() const { return timed_out || !exit.success(); }
  std::string describe() const {
    const std::string who = "rank " + std::to_string(rank);
    if (timed_out) return who + " timed out";
    return who + (stopped ? " stopped after another rank failed: " : " ") + exit.describe();
  }
};

// Starts the ranks (each rank's output into <dir>/rank<r>.log), waits for all of them until the deadline, and stops
// the others once one fails. Every child is reaped before this returns.
StatusOr<std::vector<RankEnd>> spawnRanks(int ranks, const std::vector<std::string>& argv,
                                          const std::vector<std::string>& extra_env, const std::string& dir,
                                          std::chrono::seconds timeout) {
  PEERLAB_ASSIGN_OR_RETURN(const std::string sockets, makePrivateDir("peerlab-ranks"));
  std::vector<process::Child> children;
  std::vector<RankEnd> ends(static_cast<size_t>(ranks));
  Status spawn_error = Status::ok();
  for (int r = 0; r < ranks && spawn_error.isOk(); ++r) {
    ends[static_cast<size_t>(r)].rank = r;
    process::SpawnOptions so;
    so.argv = argv;
    so.env = extra_env;
    for (std::string& e : localRankEnvironment(r, ranks, sockets))
      so.env.push_back(std::move(e));
    so.stdout_path = so.stderr_path = logPath(dir, r);
    so.own_process_group = false;
    auto child = process::Child::spawn(so);
    if (child.isOk()) {
      children.push_back(std::move(*child));
    } else {
      spawn_error = child.status().withContext("starting rank " + std::to_string(r));
    }
  }
  // Wait for every rank; on the first failure or at the deadline, stop the rest.
  const Deadline deadline = Deadline::after(timeout);
  bool stopping = !spawn_error.isOk();
  for (size_t alive = children.size(); alive > 0;) {
    alive = 0;
    for (size_t r = 0; r < children.size(); ++r) {
      if (children[r].isAlive()) {
        ++alive;
      } else if (!stopping && children[r].exitStatus() && !children[r].exitStatus()->success()) {
        stopping = true;
      }
    }
    if (alive > 0 && !stopping && deadline.expired()) {
      for (size_t r = 0; r < children.size(); ++r)
        ends[r].timed_out = children[r].isAlive();
      stopping = true;
    }
    if (alive > 0 && stopping) {
      for (size_t r = 0; r < children.size(); ++r) {
        if (children[r].isAlive() && !ends[r].timed_out) ends[r].stopped = true;
        children[r].kill(std::chrono::seconds(3));
      }
      break;
    }
    if (alive > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (size_t r = 0; r < children.size(); ++r) {
    if (children[r].exitStatus()) ends[r].exit = *children[r].exitStatus();
  }
  std::error_code ec;
  std::filesystem::remove_all(sockets, ec);
  if (!spawn_error.isOk()) return spawn_error;
  return ends;
}

TestRanks rankSide(int ranks, std::chrono::seconds timeout) {
  TestRanks t;
  t.is_parent = false;
  ::testing::UnitTest::GetInstance()->listeners().Append(new FlushingListener);
  std::fflush(nullptr);
  auto boot = outsideLaunched() ? g_outside.connect(Deadline::after(timeout))
                                : connectLocalFromEnvironment(Deadline::after(timeout));
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

bool setOutsideLauncher(OutsideLauncher launcher) {
  g_outside = launcher;
  return true;
}

TestRanks runTestAsRanks(int ranks, std::chrono::seconds timeout, std::vector<std::string> extra_env) {
  if (localBootstrapRequested() || outsideLaunched()) return rankSide(ranks, timeout);

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
  std::vector<std::string> argv = {selfExecutable(),
                                   "--gtest_filter=" + std::string(info->test_suite_name()) + "." + info->name(),
                                   "--gtest_color=no"};
  if (GTEST_FLAG_GET(also_run_disabled_tests)) argv.push_back("--gtest_also_run_disabled_tests");
  extra_env.push_back(std::string(kEnvResultDir) + "=" + *dir);
  // A rank re-runs exactly this test: a GoogleTest shard inherited from the parent's environment (gtest-parallel,
  // ci/sanitize.sh) could assign that one test to another shard and leave the rank with nothing to run.
  extra_env.push_back("GTEST_TOTAL_SHARDS=1");
  extra_env.push_back("GTEST_SHARD_INDEX=0");

  auto ends = spawnRanks(ranks, argv, extra_env, *dir, timeout);
  if (!ends.isOk()) {
    t.status = ends.status();
  } else {
    std::string failures;
    bool timed_out = false;
    for (const RankEnd& e : *ends) {
      if (!e.failed()) continue;
      failures += (failures.empty() ? "" : "; ") + e.describe();
      timed_out = timed_out || e.timed_out;
    }
    if (!failures.empty())
      t.status = PEERLAB_STATUS(timed_out ? StatusCode::kTimeout : StatusCode::kInternal, failures);
    const char* all = std::getenv("PEERLAB_RANK_OUTPUT");
    const bool print_all = all != nullptr && *all != '\0' && std::string(all) != "0";
    std::string logs;
    for (const RankEnd& e : *ends) {
      if (e.failed() || print_all) {
        logs += "\n----- " + e.describe() + ", last lines of output -----\n" +
                tailOfFile(logPath(*dir, e.rank), print_all ? 1'000'000 : kLogTailLines);
      }
      std::ifstream result(resultPath(*dir, e.rank));
      std::string first;
      const bool reported = static_cast<bool>(std::getline(result, first));
      if (!e.failed() && !reported && t.status.isOk()) {
        // Exit 0 without a result: the rank never ran this test (a filter or shard left it nothing to run).
        t.status = PEERLAB_INTERNAL("rank " + std::to_string(e.rank) + " exited 0 without running " +
                                    info->test_suite_name() + "." + info->name());
      }
      if (!e.failed() && reported && first == "skipped") {
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

}  // namespace peerlab::testing
