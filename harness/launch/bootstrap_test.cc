// Bootstrap conformance: every test body runs as 4 ranks. Run plainly, each test starts 4 local ranks (Unix
// sockets); run under `mpirun -np 4`, every process is already a rank and uses the MPI bootstrap.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "harness/launch/launch.h"
#include "reference/core/pattern.h"
#include "reference/testing/rank_test.h"
#include "reference/testing/testing.h"

namespace peerlab::launch {
namespace {

constexpr int kRanks = 4;

// Under mpirun every process is already a rank and takes the MPI bootstrap.
[[maybe_unused]] const bool kMpiRanks = testing::setOutsideLauncher({launchedByMpi, bootstrapFromEnvironment});

Deadline soon() {
  return Deadline::afterMs(60'000);
}

// Sizes every rank agrees on: the edge cases, then seeded random ones.
std::vector<size_t> messageSizes(uint64_t seed) {
  std::vector<size_t> sizes{0, 1, 7, 4096, 1 << 20};
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 6; ++i)
    sizes.push_back(rng() % (300 * 1024));
  return sizes;
}

bool isMpi(const Bootstrap& boot) {
  return boot.kind() == "mpi";
}

TEST(Bootstrap, RanksAreDistinctAndComplete) {
  PEERLAB_TEST_RANKS(kRanks, boot);
  ASSERT_EQ(boot.size(), kRanks);
  int32_t me = boot.rank();
  std::vector<int32_t> all(kRanks, -1);
  PEERLAB_ASSERT_OK(boot.allgather(&me, all.data(), sizeof(me), soon()));
  for (int r = 0; r < kRanks; ++r)
    EXPECT_EQ(all[static_cast<size_t>(r)], r);
}

// The parent runs under a GoogleTest shard that would not hold this test if the ranks inherited it: they must run
// it all the same (and a rank that ran nothing would fail the parent, not pass it).
TEST(Bootstrap, RanksRunTheirTestUnderAnInheritedShard) {
  if (!launchedAsRank()) {
    setenv("GTEST_TOTAL_SHARDS", "7", 1);
    setenv("GTEST_SHARD_INDEX", "6", 1);
  }
  auto ranks = testing::runTestAsRanks(kRanks);
  if (ranks.is_parent) {
    unsetenv("GTEST_TOTAL_SHARDS");
    unsetenv("GTEST_SHARD_INDEX");
    ASSERT_TRUE(ranks.status.isOk()) << ranks.status.toString();
    EXPECT_FALSE(ranks.skipped);
    return;
  }
  ASSERT_NE(ranks.bootstrap, nullptr) << ranks.status.toString();
  EXPECT_EQ(ranks.bootstrap->size(), kRanks);
  if (!isMpi(*ranks.bootstrap)) {
    EXPECT_STREQ(std::getenv("GTEST_TOTAL_SHARDS"), "1");
  }
}

TEST(Bootstrap, AllgatherCarriesEveryRanksBytes) {
  PEERLAB_TEST_RANKS(kRanks, boot);
  const int me = boot.rank();
  for (size_t bytes : messageSizes(11)) {
    std::vector<unsigned char> mine(bytes);
    fillPatternHost(mine.data(), bytes, patternSeed(1, me, -1, bytes));
    std::vector<unsigned char> all(bytes * kRanks + 1, 0xEE);
    PEERLAB_ASSERT_OK(boot.allgather(mine.data(), all.data(), bytes, soon()));
    for (int r = 0; r < kRanks; ++r) {
      PatternCheck c = checkPatternHost(all.data() + r * bytes, bytes, patternSeed(1, r, -1, bytes));
      EXPECT_TRUE(c.ok()) << bytes << " bytes from rank " << r << ": " << c.wrong << " wrong, first at " << c.first_bad;
    }
    EXPECT_EQ(all.back(), 0xEE) << "allgather wrote past size() * bytes";
  }
}

TEST(Bootstrap, BarrierWaitsForTheLastRank) {
  PEERLAB_TEST_RANKS(kRanks, boot);
  const int me = boot.rank();
  // Ranks arrive staggered; nobody may leave before the last one arrived (CLOCK_MONOTONIC is host-wide).
  std::this_thread::sleep_for(std::chrono::milliseconds(60 * me));
  int64_t arrived = std::chrono::steady_clock::now().time_since_epoch().count();
  PEERLAB_ASSERT_OK(boot.barrier(soon()));
  int64_t left = std::chrono::steady_clock::now().time_since_epoch().count();
  std::vector<int64_t> arrivals(kRanks);
  PEERLAB_ASSERT_OK(boot.allgather(&arrived, arrivals.data(), sizeof(arrived), soon()));
  for (int r = 0; r < kRanks; ++r)
    EXPECT_GE(left, arrivals[static_cast<size_t>(r)]) << "left before rank " << r;
}

TEST(Bootstrap, SendRecvRingAndAllPairs) {
  PEERLAB_TEST_RANKS(kRanks, boot);
  const int me = boot.rank();
  const int next = (me + 1) % kRanks;
  const int prev = (me + kRanks - 1) % kRanks;
  for (size_t bytes : messageSizes(23)) {
    std::vector<unsigned char> out(bytes), in(bytes);
    fillPatternHost(out.data(), bytes, patternSeed(2, me, next, bytes));
    poisonPatternHost(in.data(), bytes, patternSeed(2, prev, me, bytes));
    PEERLAB_ASSERT_OK(boot.send(next, out.data(), bytes, soon()));
    PEERLAB_ASSERT_OK(boot.recv(prev, in.data(), bytes, soon()));
    PatternCheck c = checkPatternHost(in.data(), bytes, patternSeed(2, prev, me, bytes));
    EXPECT_TRUE(c.ok()) << bytes << " bytes from rank " << prev << ": " << c.wrong << " wrong";
  }
  // Every rank sends to every other before receiving anything: sends must not wait for the receiver.
  const size_t bytes = 2 << 20;
  std::vector<std::vector<unsigned char>> outs(kRanks), ins(kRanks);
  for (int p = 0; p < kRanks; ++p) {
    if (p == me) continue;
    outs[p].resize(bytes);
    fillPatternHost(outs[p].data(), bytes, patternSeed(3, me, p, 0));
    PEERLAB_ASSERT_OK(boot.send(p, outs[p].data(), bytes, soon()));
  }
  for (int k = 1; k < kRanks; ++k) {
    const int p = (me + kRanks - k) % kRanks;
    ins[p].assign(bytes, 0);
    PEERLAB_ASSERT_OK(boot.recv(p, ins[p].data(), bytes, soon()));
    PatternCheck c = checkPatternHost(ins[p].data(), bytes, patternSeed(3, p, me, 0));
    EXPECT_TRUE(c.ok()) << "from rank " << p << ": " << c.wrong << " wrong, first at " << c.first_bad;
  }
}

TEST(Bootstrap, MessagesToOneselfAreQueued) {
  PEERLAB_TEST_RANKS(kRanks, boot);
  const int me = boot.rank();
  uint64_t a = 0x1111 * (me + 1), b = 0x2222 * (me + 1), x = 0, y = 0;
  PEERLAB_ASSERT_OK(boot.send(me, &a, sizeof(a), soon()));
  PEERLAB_ASSERT_OK(boot.send(me, &b, sizeof(b), soon()));
  PEERLAB_ASSERT_OK(boot.recv(me, &x, sizeof(x), soon()));
  PEERLAB_ASSERT_OK(boot.recv(me, &y, sizeof(y), soon()));
  EXPECT_EQ(x, a);
  EXPECT_EQ(y, b);
}

TEST(Bootstrap, SizeMismatchIsAnError) {
  PEERLAB_TEST_RANKS(kRanks, boot);
  const int me = boot.rank();
  if (me == 0) {
    uint64_t v = 42;
    PEERLAB_ASSERT_OK(boot.send(1, &v, sizeof(v), soon()));
  } else if (me == 1) {
    uint32_t small = 0;
    Status st = boot.recv(0, &small, sizeof(small), soon());
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
  }
  PEERLAB_ASSERT_OK(boot.barrier(soon()));
}

TEST(Bootstrap, BadArgumentsAreRejected) {
  PEERLAB_TEST_RANKS(kRanks, boot);
  char c = 0;
  EXPECT_EQ(boot.send(kRanks, &c, 1, soon()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(boot.recv(-1, &c, 1, soon()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(boot.send(0, nullptr, 8, soon()).code(), StatusCode::kInvalidArgument);
  PEERLAB_ASSERT_OK(boot.barrier(soon()));
}

// The received descriptor must be the very object the sender opened: same inode, same contents, and a pipe end
// that writes into the sender's pipe.
TEST(Bootstrap, FdPassingSharesTheObject) {
  PEERLAB_TEST_RANKS(kRanks, boot);
  const int me = boot.rank();
  const int next = (me + 1) % kRanks;
  const int prev = (me + kRanks - 1) % kRanks;

  const std::string secret = "memfd of rank " + std::to_string(me);
  int mfd = memfd_create("peerlab-test", MFD_CLOEXEC);
  ASSERT_GE(mfd, 0);
  ASSERT_EQ(write(mfd, secret.data(), secret.size()), static_cast<ssize_t>(secret.size()));
  int pipes[2];
  ASSERT_EQ(pipe2(pipes, O_CLOEXEC), 0);
  struct stat st {};
  ASSERT_EQ(fstat(mfd, &st), 0);
  uint64_t identity[2] = {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};

  int send_fds[2] = {mfd, pipes[1]};
  PEERLAB_ASSERT_OK(boot.sendFds(next, send_fds, 2, soon()));
  PEERLAB_ASSERT_OK(boot.send(next, identity, sizeof(identity), soon()));
  int got[2] = {-1, -1};
  PEERLAB_ASSERT_OK(boot.recvFds(prev, got, 2, soon()));
  uint64_t expect[2] = {};
  PEERLAB_ASSERT_OK(boot.recv(prev, expect, sizeof(expect), soon()));
  // The senders may close their copies now; ours stay valid.
  close(mfd);
  close(pipes[1]);

  struct stat rst {};
  ASSERT_EQ(fstat(got[0], &rst), 0);
  EXPECT_EQ(static_cast<uint64_t>(rst.st_dev), expect[0]);
  EXPECT_EQ(static_cast<uint64_t>(rst.st_ino), expect[1]);
  char buf[64] = {};
  const std::string want = "memfd of rank " + std::to_string(prev);
  ASSERT_EQ(pread(got[0], buf, sizeof(buf), 0), static_cast<ssize_t>(want.size()));
  EXPECT_EQ(std::string(buf, want.size()), want);
  EXPECT_NE(fcntl(got[0], F_GETFD) & FD_CLOEXEC, 0) << "received descriptors should be close-on-exec";

  // Write into the previous rank's pipe; the next rank wrote into ours.
  const uint32_t token = 0xC0DE0000u | static_cast<uint32_t>(me);
  ASSERT_EQ(write(got[1], &token, sizeof(token)), static_cast<ssize_t>(sizeof(token)));
  close(got[0]);
  close(got[1]);
  uint32_t in = 0;
  ASSERT_EQ(read(pipes[0], &in, sizeof(in)), static_cast<ssize_t>(sizeof(in)));
  EXPECT_EQ(in, 0xC0DE0000u | static_cast<uint32_t>(next));
  close(pipes[0]);
  PEERLAB_ASSERT_OK(boot.barrier(soon()));
}

TEST(Bootstrap, ManyFdsInOneCall) {
  PEERLAB_TEST_RANKS(kRanks, boot);
  const int me = boot.rank();
  constexpr int kCount = 150;  // more than one frame holds
  if (me == 0) {
    std::vector<int> fds;
    for (int i = 0; i < kCount; ++i) {
      int fd = memfd_create("peerlab-many", MFD_CLOEXEC);
      ASSERT_GE(fd, 0);
      ASSERT_EQ(ftruncate(fd, i + 1), 0);
      fds.push_back(fd);
    }
    PEERLAB_ASSERT_OK(boot.sendFds(1, fds.data(), fds.size(), soon()));
    for (int fd : fds)
      close(fd);
  } else if (me == 1) {
    std::vector<int> fds(kCount, -1);
    PEERLAB_ASSERT_OK(boot.recvFds(0, fds.data(), fds.size(), soon()));
    for (int i = 0; i < kCount; ++i) {
      struct stat st {};
      ASSERT_EQ(fstat(fds[static_cast<size_t>(i)], &st), 0);
      EXPECT_EQ(st.st_size, i + 1) << "descriptor " << i << " arrived out of order";
      close(fds[static_cast<size_t>(i)]);
    }
  }
  PEERLAB_ASSERT_OK(boot.barrier(soon()));
}

// One thread per peer, each sending and receiving its own stream of messages of random sizes at the same time.
TEST(Bootstrap, ConcurrentStreamsToDifferentPeers) {
  PEERLAB_TEST_RANKS(kRanks, boot);
  const int me = boot.rank();
  constexpr int kMessages = 24;
  std::atomic<int> wrong{0};
  std::vector<std::string> errors(kRanks);
  std::vector<std::thread> threads;
  for (int p = 0; p < kRanks; ++p) {
    if (p == me) continue;
    threads.emplace_back([&, p] {
      for (int i = 0; i < kMessages; ++i) {
        // Sizes agreed per (sender, receiver, i) without communication.
        auto sizeOf = [](int src, int dst, int k) {
          std::mt19937_64 rng(static_cast<uint64_t>(src * 1000 + dst * 100 + k));
          return k % 5 == 0 ? size_t{0} : static_cast<size_t>(rng() % (200 * 1024));
        };
        const size_t out_bytes = sizeOf(me, p, i);
        const size_t in_bytes = sizeOf(p, me, i);
        std::vector<unsigned char> out(out_bytes), in(in_bytes);
        fillPatternHost(out.data(), out_bytes, patternSeed(4, me, p, static_cast<uint64_t>(i)));
        Status st = boot.send(p, out.data(), out_bytes, soon());
        if (st.isOk()) st = boot.recv(p, in.data(), in_bytes, soon());
        if (!st.isOk()) {
          errors[static_cast<size_t>(p)] = st.toString();
          return;
        }
        if (!checkPatternHost(in.data(), in_bytes, patternSeed(4, p, me, static_cast<uint64_t>(i))).ok()) ++wrong;
      }
    });
  }
  for (auto& t : threads)
    t.join();
  for (int p = 0; p < kRanks; ++p)
    EXPECT_TRUE(errors[static_cast<size_t>(p)].empty()) << errors[static_cast<size_t>(p)];
  EXPECT_EQ(wrong.load(), 0);
  PEERLAB_ASSERT_OK(boot.barrier(soon()));
}

TEST(Bootstrap, AbortReachesEveryPeerWithItsReason) {
  PEERLAB_TEST_RANKS(kRanks, boot);
  const int me = boot.rank();
  // Rank 1 aborts only once every other rank has finished connecting.
  uint8_t ready = 1;
  if (me != 1) PEERLAB_ASSERT_OK(boot.send(1, &ready, 1, soon()));
  if (me == 1) {
    for (int p : {0, 2, 3})
      PEERLAB_ASSERT_OK(boot.recv(p, &ready, 1, soon()));
    boot.abort("injected failure 42");
    uint64_t v = 0;
    Status st = boot.recv(0, &v, sizeof(v), Deadline::afterMs(2000));
    EXPECT_FALSE(st.isOk());
    EXPECT_NE(st.message().find("rank 1 aborted: injected failure 42"), std::string::npos) << st.toString();
    return;
  }
  // Waiting on the aborted rank ends with its reason, long before the deadline.
  const auto start = std::chrono::steady_clock::now();
  uint64_t v = 0;
  Status st = boot.recv(1, &v, sizeof(v), Deadline::afterMs(20'000));
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("rank 1 aborted: injected failure 42"), std::string::npos) << st.toString();
  EXPECT_LT(waited, std::chrono::seconds(10));
  // Later calls fail too, even those that do not involve rank 1.
  Status later = boot.send(me == 0 ? 2 : 0, &v, sizeof(v), soon());
  EXPECT_FALSE(later.isOk());
  EXPECT_NE(later.message().find("rank 1"), std::string::npos) << later.toString();
}

TEST(Bootstrap, AbortFailsAPendingBarrier) {
  PEERLAB_TEST_RANKS(kRanks, boot);
  // NOTE: an MPI collective that a rank never joins cannot be withdrawn; the MPI variant is covered by the recv test.
  if (isMpi(boot)) GTEST_SKIP() << "a barrier abandoned after an abort would leave MPI_Finalize a pending request";
  if (boot.rank() == 2) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    boot.abort("rank two gives up");
    return;
  }
  Status st = boot.barrier(Deadline::afterMs(20'000));
  EXPECT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("rank 2 aborted: rank two gives up"), std::string::npos) << st.toString();
}

TEST(Bootstrap, RankThatExitsEarlyIsNamed) {
  PEERLAB_TEST_RANKS(kRanks, boot);
  if (isMpi(boot)) GTEST_SKIP() << "mpirun ends the whole job when a rank exits without MPI_Finalize";
  if (boot.rank() == 3) testing::exitRankAbruptly();  // gone without a goodbye, as if it crashed
  const auto start = std::chrono::steady_clock::now();
  Status st = boot.barrier(Deadline::afterMs(20'000));
  EXPECT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("rank 3"), std::string::npos) << st.toString();
  EXPECT_NE(st.message().find("died"), std::string::npos) << st.toString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  // Every later call fails as well.
  uint64_t v = 0;
  const int other = boot.rank() == 0 ? 1 : 0;
  EXPECT_FALSE(boot.send(other, &v, sizeof(v), soon()).isOk());
}

TEST(Bootstrap, SilentPeerTimesOutWithinTheDeadline) {
  PEERLAB_TEST_RANKS(kRanks, boot);
  const int me = boot.rank();
  constexpr int kDeadlineMs = 400;
  if (me != 3) {
    // Rank 3 never sends: the receive ends at its deadline, plus little.
    const auto start = std::chrono::steady_clock::now();
    uint64_t v = 0;
    Status st = boot.recv(3, &v, sizeof(v), Deadline::afterMs(kDeadlineMs));
    const auto waited = std::chrono::steady_clock::now() - start;
    EXPECT_EQ(st.code(), StatusCode::kTimeout) << st.toString();
    EXPECT_GE(waited, std::chrono::milliseconds(kDeadlineMs - 5));
    EXPECT_LT(waited, std::chrono::milliseconds(kDeadlineMs + 3000));
  }
  // A timed-out receive leaves the bootstrap usable.
  PEERLAB_ASSERT_OK(boot.barrier(soon()));
}

TEST(Bootstrap, MissingRankMakesTheBarrierTimeOut) {
  PEERLAB_TEST_RANKS(kRanks, boot);
  if (isMpi(boot)) GTEST_SKIP() << "an MPI barrier that times out cannot be withdrawn";
  constexpr int kDeadlineMs = 400;
  if (boot.rank() == 0) {
    // Never arrives at this barrier; stays alive (and connected) past everyone's deadline.
    std::this_thread::sleep_for(std::chrono::milliseconds(kDeadlineMs + 3500));
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  Status st = boot.barrier(Deadline::afterMs(kDeadlineMs));
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(st.code(), StatusCode::kTimeout) << st.toString();
  EXPECT_LT(waited, std::chrono::milliseconds(kDeadlineMs + 3000));
}

}  // namespace
}  // namespace peerlab::launch
