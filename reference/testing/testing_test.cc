// What the tests share: guards, temporary directories and files, and multi-rank tests on the local bootstrap.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>

#include "reference/testing/guards.h"
#include "reference/testing/rank_test.h"
#include "reference/testing/temp_dir.h"
#include "reference/testing/testing.h"

namespace peerlab::testing {
namespace {

using ::testing::HasSubstr;

TEST(Finally, RunsOnEveryExitPath) {
  int runs = 0;
  auto body = [&](bool early) {
    Finally count([&] { ++runs; });
    if (early) return;
  };
  body(true);
  body(false);
  EXPECT_EQ(runs, 2);
}

TEST(ScopedEnv, RestoresThePreviousValueOrAbsence) {
  ::setenv("PEERLAB_TESTING_TEST_VAR", "before", 1);
  {
    ScopedEnv set("PEERLAB_TESTING_TEST_VAR", "inside");
    EXPECT_STREQ(std::getenv("PEERLAB_TESTING_TEST_VAR"), "inside");
    ScopedEnv unset("PEERLAB_TESTING_TEST_VAR", nullptr);
    EXPECT_EQ(std::getenv("PEERLAB_TESTING_TEST_VAR"), nullptr);
  }
  EXPECT_STREQ(std::getenv("PEERLAB_TESTING_TEST_VAR"), "before");
  ::unsetenv("PEERLAB_TESTING_TEST_VAR");
  { ScopedEnv set("PEERLAB_TESTING_TEST_VAR", "inside"); }
  EXPECT_EQ(std::getenv("PEERLAB_TESTING_TEST_VAR"), nullptr);
}

TEST(TempDir, IsPrivateAndRemovedWithItsFiles) {
  std::string path;
  {
    TempDir dir("peerlab-testing-test");
    path = dir.path();
    ASSERT_FALSE(path.empty());
    EXPECT_EQ(std::filesystem::status(path).permissions() & std::filesystem::perms::all,
              std::filesystem::perms::owner_all);
    ASSERT_TRUE(writeFile(dir.file("a.txt"), "line 1\nline 2\n"));
    std::filesystem::create_directories(dir.file("sub/deeper"));
    ASSERT_TRUE(writeFile(dir.file("sub/deeper/b"), "b"));
    EXPECT_EQ(readFile(dir.file("a.txt")), "line 1\nline 2\n");
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(TempDir, TwoDirectoriesDiffer) {
  TempDir a, b;
  EXPECT_NE(a.path(), b.path());
}

TEST(Files, ReadOfAMissingFileIsEmpty) {
  TempDir dir;
  EXPECT_EQ(readFile(dir.file("missing")), "");
}

// What the parent of runTestAsRanks sees: rank skips are reported as a skip, failures carry the rank's output.
TEST(RankTest, SkipInsideTheRanksReachesTheParent) {
  auto t = runTestAsRanks(2, std::chrono::seconds(60));
  if (t.is_parent) {
    PEERLAB_EXPECT_OK(t.status);
    EXPECT_TRUE(t.skipped);
    EXPECT_NE(t.skip_reason.find("no widget on this rank"), std::string::npos) << t.skip_reason;
    return;
  }
  ASSERT_NE(t.bootstrap, nullptr) << t.status.toString();
  GTEST_SKIP() << "no widget on this rank";
}

TEST(RankTest, FailedRankOutputIsInTheStatus) {
  auto t = runTestAsRanks(2, std::chrono::seconds(60));
  if (t.is_parent) {
    EXPECT_FALSE(t.status.isOk());
    EXPECT_NE(t.status.message().find("rank 1 exited with code 1"), std::string::npos) << t.status.message();
    EXPECT_NE(t.status.message().find("marker printed by rank 1"), std::string::npos) << t.status.message();
    EXPECT_EQ(t.status.message().find("marker printed by rank 0"), std::string::npos) << "passing rank's output";
    return;
  }
  ASSERT_NE(t.bootstrap, nullptr) << t.status.toString();
  std::cout << "marker printed by rank " << t.bootstrap->rank() << std::endl;
  if (t.bootstrap->rank() == 1) ADD_FAILURE() << "intentional failure of rank 1";
}

TEST(RankTest, RanksShareOneBootstrap) {
  PEERLAB_TEST_RANKS(3, boot);
  EXPECT_EQ(boot.size(), 3);
  int32_t me = boot.rank(), sum = 0;
  std::vector<int32_t> all(3);
  PEERLAB_ASSERT_OK(boot.allgather(&me, all.data(), sizeof(me), Deadline::afterMs(30'000)));
  for (int32_t v : all)
    sum += v;
  EXPECT_EQ(sum, 0 + 1 + 2);
}

// A rank that leaves on purpose (exitRankAbruptly) passes; one that exits 0 without a result never ran the test.
TEST(RankTest, RankThatLeavesOnPurposePasses) {
  auto ranks = runTestAsRanks(2, std::chrono::seconds(60));
  if (ranks.is_parent) {
    PEERLAB_EXPECT_OK(ranks.status);
    EXPECT_FALSE(ranks.skipped);
    return;
  }
  ASSERT_TRUE(ranks.bootstrap != nullptr) << ranks.status.toString();
  if (ranks.bootstrap->rank() == 1) exitRankAbruptly();
}

TEST(RankTest, RankThatExitsWithoutAResultFails) {
  auto ranks = runTestAsRanks(2, std::chrono::seconds(60));
  if (ranks.is_parent) {
    ASSERT_FALSE(ranks.status.isOk());
    EXPECT_THAT(ranks.status.message(), HasSubstr("rank 1 exited 0 without running"));
    return;
  }
  ASSERT_TRUE(ranks.bootstrap != nullptr) << ranks.status.toString();
  if (ranks.bootstrap->rank() == 1) {
    std::fflush(nullptr);
    std::_Exit(0);
  }
}

}  // namespace
}  // namespace peerlab::testing
