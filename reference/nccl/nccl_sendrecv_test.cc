#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "reference/core/check.h"
#include "reference/core/memory.h"
#include "reference/core/pattern.h"
#include "reference/core/wait.h"
#include "reference/nccl/comm.h"
#include "reference/nccl/sendrecv.h"
#include "reference/testing/rank_test.h"
#include "reference/testing/testing.h"

namespace peerlab::nccl {
namespace {

constexpr int64_t kDeadlineMs = 60'000;

StatusOr<uint64_t> sharedRun(Bootstrap& boot) {
  uint64_t mine = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  std::vector<uint64_t> all(static_cast<size_t>(boot.size()));
  PEERLAB_RETURN_IF_ERROR(boot.allgather(&mine, all.data(), sizeof(mine), Deadline::afterMs(kDeadlineMs)));
  return all[0];
}

// Rank r on device r; rank 0 sends, rank 1 receives, checked on rank 1's GPU (which owns the destination).
TEST(NcclSendRecv, EagerAndGraphDeliverEveryByte) {
  PEERLAB_REQUIRE_GPUS(2);
  PEERLAB_TEST_RANKS(2, boot);
  const int me = boot.rank();
  const int peer = 1 - me;
  constexpr size_t kBig = size_t{64} << 20;
  PEERLAB_ASSERT_OK_AND_ASSIGN(uint64_t run, sharedRun(boot));
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaSetDevice(me)));
  PEERLAB_ASSERT_OK_AND_ASSIGN(Comm comm, createComm(boot, me, Deadline::afterMs(kDeadlineMs)));
  PEERLAB_ASSERT_OK_AND_ASSIGN(Stream stream, createStream(me));
  PEERLAB_ASSERT_OK_AND_ASSIGN(DeviceBuffer src, allocDevice(me, kBig));
  PEERLAB_ASSERT_OK_AND_ASSIGN(DeviceBuffer dst, allocDevice(me, kBig));
  PEERLAB_ASSERT_OK_AND_ASSIGN(PatternChecker checker, PatternChecker::create(me));
  cudaStream_t s = stream.get();

  uint64_t expected = 0;
  for (size_t n : {size_t{1}, size_t{4096 + 3}, kBig}) {
    const uint64_t seed = patternSeed(run, 0, 1, n);
    if (me == 0) {
      PEERLAB_ASSERT_OK(fillPattern(src->ptr, n, seed, s));
      PEERLAB_ASSERT_OK(send(comm.get(), src->ptr, n, peer, s));
    } else {
      PEERLAB_ASSERT_OK(poisonPattern(dst->ptr, n, seed, s));
      PEERLAB_ASSERT_OK(recv(comm.get(), dst->ptr, n, peer, s));
      PEERLAB_ASSERT_OK(checker.enqueue(dst->ptr, n, seed, s));
      expected += n;
    }
  }

  // Graph: captured once, replayed; the receiver poisons before every replay, so each replay must write.
  constexpr size_t kGraphBytes = 32 * 1024 + 7;
  constexpr int kReplays = 20;
  const uint64_t gseed = patternSeed(run, 0, 1, 0x6a);
  if (me == 0) PEERLAB_ASSERT_OK(fillPattern(src->ptr, kGraphBytes, gseed, s));
  PEERLAB_ASSERT_OK_AND_ASSIGN(CapturedGraph graph, CapturedGraph::capture(s, [&]() -> Status {
                                 return me == 0 ? send(comm.get(), src->ptr, kGraphBytes, peer, s)
                                                : recv(comm.get(), dst->ptr, kGraphBytes, peer, s);
                               }));
  for (int r = 0; r < kReplays; ++r) {
    if (me == 1) PEERLAB_ASSERT_OK(poisonPattern(dst->ptr, kGraphBytes, gseed, s));
    PEERLAB_ASSERT_OK(graph.launch(s));
    if (me == 1) {
      PEERLAB_ASSERT_OK(checker.enqueue(dst->ptr, kGraphBytes, gseed, s));
      expected += kGraphBytes;
    }
  }

  // Ping-pong both ways: each side checks what it received.
  const uint64_t ping = patternSeed(run, 0, 1, 0x70), pong = patternSeed(run, 1, 0, 0x70);
  constexpr size_t kPing = 8192 + 1;
  PEERLAB_ASSERT_OK(fillPattern(src->ptr, kPing, me == 0 ? ping : pong, s));
  PEERLAB_ASSERT_OK(poisonPattern(dst->ptr, kPing, me == 0 ? pong : ping, s));
  PEERLAB_ASSERT_OK(enqueuePingPong(comm.get(), peer, me == 0, src->ptr, dst->ptr, kPing, 5, s));
  PEERLAB_ASSERT_OK(checker.enqueue(dst->ptr, kPing, me == 0 ? pong : ping, s));
  expected += kPing;

  PEERLAB_ASSERT_OK(waitStream(s, Deadline::afterMs(kDeadlineMs), "nccl send/recv"));
  PEERLAB_ASSERT_OK_AND_ASSIGN(PatternCheck r, checker.collect(s, Deadline::afterMs(kDeadlineMs)));
  EXPECT_EQ(r.wrong, 0u) << "first bad byte at " << r.first_bad;
  EXPECT_EQ(r.elements, expected);
  EXPECT_EQ(graph.launches(), static_cast<uint64_t>(kReplays));
}

}  // namespace
}  // namespace peerlab::nccl
