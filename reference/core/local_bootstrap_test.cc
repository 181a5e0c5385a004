// The local bootstrap in one process (ranks in threads): a rank that never arrives, a peer that closes cleanly, big
// sends both ways; and the environment a launcher hands its ranks.

#include "reference/core/local_bootstrap.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "reference/testing/guards.h"
#include "reference/testing/temp_dir.h"
#include "reference/testing/testing.h"

namespace peerlab {
namespace {

using Clock = std::chrono::steady_clock;
using testing::ScopedEnv;
using testing::TempDir;

TEST(LocalMesh, RankThatNeverArrivesTimesOutTheOthers) {
  TempDir dir;
  constexpr int kDeadlineMs = 500;
  std::vector<Status> results(3);
  std::vector<Clock::duration> took(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {  // rank 3 of 4 never connects
    threads.emplace_back([&, r] {
      const auto start = Clock::now();
      auto b = connectLocal(r, 4, dir.path(), Deadline::afterMs(kDeadlineMs));
      took[static_cast<size_t>(r)] = Clock::now() - start;
      results[static_cast<size_t>(r)] = b.status();
    });
  }
  for (auto& t : threads)
    t.join();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(results[static_cast<size_t>(r)].code(), StatusCode::kTimeout)
        << results[static_cast<size_t>(r)].toString();
    EXPECT_NE(results[static_cast<size_t>(r)].message().find("3"), std::string::npos);
    EXPECT_LT(took[static_cast<size_t>(r)], std::chrono::milliseconds(kDeadlineMs + 3000));
  }
}

// Three ranks in threads of one process; returns the bootstraps by rank.
std::vector<std::unique_ptr<Bootstrap>> connectThreads(const std::string& dir, int n) {
  std::vector<std::unique_ptr<Bootstrap>> boots(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto b = connectLocal(r, n, dir, Deadline::afterMs(10'000));
      EXPECT_TRUE(b.isOk()) << b.status().toString();
      if (b.isOk()) boots[static_cast<size_t>(r)] = std::move(b).value();
    });
  }
  for (auto& t : threads)
    t.join();
  return boots;
}

TEST(LocalMesh, ClosedPeerIsNotADeath) {
  TempDir dir;
  auto boots = connectThreads(dir.path(), 3);
  ASSERT_TRUE(boots[0] && boots[1] && boots[2]);
  uint64_t v = 7;
  PEERLAB_ASSERT_OK(boots[2]->send(0, &v, sizeof(v), Deadline::afterMs(5000)));
  boots[2].reset();  // finishes cleanly: says goodbye
  // What rank 2 sent before leaving still arrives; waiting for more fails at once instead of hanging.
  uint64_t got = 0;
  PEERLAB_ASSERT_OK(boots[0]->recv(2, &got, sizeof(got), Deadline::afterMs(5000)));
  EXPECT_EQ(got, 7u);
  const auto start = Clock::now();
  Status st = boots[0]->recv(2, &got, sizeof(got), Deadline::afterMs(5000));
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.toString();
  EXPECT_NE(st.message().find("rank 2 has closed"), std::string::npos) << st.toString();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
  // Ranks 0 and 1 carry on.
  std::thread t([&] { PEERLAB_EXPECT_OK(boots[1]->send(0, &v, sizeof(v), Deadline::afterMs(5000))); });
  PEERLAB_EXPECT_OK(boots[0]->recv(1, &got, sizeof(got), Deadline::afterMs(5000)));
  t.join();
}

TEST(LocalMesh, BigSendsBothWaysDoNotDeadlock) {
  TempDir dir;
  auto boots = connectThreads(dir.path(), 2);
  ASSERT_TRUE(boots[0] && boots[1]);
  const size_t bytes = 16 << 20;  // far beyond the socket buffers
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      std::vector<unsigned char> out(bytes, static_cast<unsigned char>(r + 1)), in(bytes);
      PEERLAB_EXPECT_OK(boots[static_cast<size_t>(r)]->send(1 - r, out.data(), bytes, Deadline::afterMs(30'000)));
      PEERLAB_EXPECT_OK(boots[static_cast<size_t>(r)]->recv(1 - r, in.data(), bytes, Deadline::afterMs(30'000)));
      EXPECT_EQ(in.front(), 2 - r);
      EXPECT_EQ(in.back(), 2 - r);
    });
  }
  for (auto& t : threads)
    t.join();
}

TEST(LocalRankEnvironment, NamesTheRankTheSizeAndTheSockets) {
  const std::vector<std::string> env = localRankEnvironment(2, 5, "/tmp/x");
  EXPECT_EQ(env[0], "PEERLAB_RANK=2");
  EXPECT_EQ(env[1], "PEERLAB_SIZE=5");
  EXPECT_EQ(env[2], "PEERLAB_BOOTSTRAP=local:/tmp/x");
  EXPECT_EQ(env[3].rfind("PEERLAB_LAUNCHER_PID=", 0), 0u);
}

TEST(ConnectLocalFromEnvironment, RejectsBadVariablesNamingThem) {
  {
    ScopedEnv a(kEnvBootstrap, "mpi");
    auto b = connectLocalFromEnvironment(Deadline::afterMs(100));
    EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(b.status().message().find("PEERLAB_BOOTSTRAP='mpi'"), std::string::npos) << b.status().toString();
  }
  {
    ScopedEnv a(kEnvBootstrap, "local:/tmp");
    ScopedEnv r(kEnvRank, "two");
    ScopedEnv s(kEnvSize, "4");
    auto b = connectLocalFromEnvironment(Deadline::afterMs(100));
    EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(b.status().message().find("PEERLAB_RANK='two'"), std::string::npos) << b.status().toString();
  }
  {
    ScopedEnv a(kEnvBootstrap, "local:/tmp");
    ScopedEnv r(kEnvRank, "1");
    ScopedEnv s(kEnvSize, nullptr);
    auto b = connectLocalFromEnvironment(Deadline::afterMs(100));
    EXPECT_NE(b.status().message().find("PEERLAB_SIZE is not set"), std::string::npos) << b.status().toString();
  }
}

}  // namespace
}  // namespace peerlab
