// Multi-rank GPU tests of the NCCL alltoall(v) baselines (rank r on device r).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "reference/alltoallv/traffic.h"
#include "reference/alltoallv/verify.h"
#include "reference/core/check.h"
#include "reference/core/memory.h"
#include "reference/core/pattern.h"
#include "reference/core/wait.h"
#include "reference/nccl/alltoall.h"
#include "reference/nccl/alltoallv_device.h"
#include "reference/nccl/comm.h"
#include "reference/testing/rank_test.h"
#include "reference/testing/testing.h"

namespace peerlab::nccl {
namespace {

using alltoallv::TrafficDriver;
using alltoallv::TrafficKind;
using alltoallv::TrafficParams;

Deadline soon() {
  return Deadline::afterMs(60'000);
}

class Baseline : public ::testing::TestWithParam<int> {};

TEST_P(Baseline, AlltoAllEagerAndGraphReplayedMoveEverySegment) {
  const int n = GetParam();
  PEERLAB_REQUIRE_GPUS(n);
  PEERLAB_TEST_RANKS(n, boot);
  const int me = boot.rank();
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaSetDevice(me)));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto stream, createStream(me));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto comm, createComm(boot, me, soon()));
  const size_t per_peer = 12345 * 4;  // bytes per peer (float elements)
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto send, allocDevice(me, per_peer * n));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto recv, allocDevice(me, per_peer * n));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto checker, PatternChecker::create(me));
  cudaStream_t s = stream.get();
  for (int graph = 0; graph < 2; ++graph) {
    for (int d = 0; d < n; ++d)
      PEERLAB_ASSERT_OK(fillPattern(send->as<char>() + d * per_peer, per_peer, patternSeed(graph, me, d, 3), s));
    for (int r = 0; r < n; ++r)
      PEERLAB_ASSERT_OK(poisonPattern(recv->as<char>() + r * per_peer, per_peer, patternSeed(graph, r, me, 3), s));
    if (graph == 0) {
      PEERLAB_ASSERT_OK(alltoall(comm.get(), send->ptr, recv->ptr, per_peer / 4, ncclFloat32, s));
    } else {
      cudaGraph_t g = nullptr;
      cudaGraphExec_t exec = nullptr;
      PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal)));
      const Status captured = alltoall(comm.get(), send->ptr, recv->ptr, per_peer / 4, ncclFloat32, s);
      PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaStreamEndCapture(s, &g)));
      PEERLAB_ASSERT_OK(captured);
      PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaGraphInstantiate(&exec, g, 0)));
      for (int i = 0; i < 5; ++i)
        PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaGraphLaunch(exec, s)));
      PEERLAB_ASSERT_OK(waitStream(s, soon(), "graph"));
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(g);
    }
    for (int r = 0; r < n; ++r)
      PEERLAB_ASSERT_OK(checker.enqueue(recv->as<char>() + r * per_peer, per_peer, patternSeed(graph, r, me, 3), s, 4));
    PEERLAB_ASSERT_OK_AND_ASSIGN(auto res, checker.collect(s, soon()));
    EXPECT_TRUE(res.ok()) << (graph ? "graph" : "eager") << ": " << res.wrong << " wrong, first at " << res.first_bad;
  }
}

TEST_P(Baseline, HostCountAlltoallvMatchesTheTrafficReference) {
  const int n = GetParam();
  PEERLAB_REQUIRE_GPUS(n);
  PEERLAB_TEST_RANKS(n, boot);
  const int me = boot.rank();
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaSetDevice(me)));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto stream, createStream(me));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto comm, createComm(boot, me, soon()));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto drv, TrafficDriver::create(me));
  TrafficParams p = alltoallv::makeTraffic(TrafficKind::kZipf, n, 7000, 5, 1.2, 7);
  const size_t elem = 3;
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto send, allocDevice(me, alltoallv::trafficSendBound(p) * elem));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto counts, allocDevice(me, 3 * n * sizeof(int64_t)));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto hc, HostCountAlltoallv::create(comm.get(), me, 16));
  cudaStream_t s = stream.get();
  auto* sc = counts->as<int64_t>();
  PEERLAB_ASSERT_OK(drv.setCall(0, s));
  for (int call = 0; call < 60; ++call) {
    PEERLAB_ASSERT_OK(drv.writeCounts(p, me, sc, s));
    PEERLAB_ASSERT_OK(drv.fillSend(p, me, send->ptr, elem, 17, s));
    PEERLAB_ASSERT_OK(hc.run(send->ptr, sc, elem, sc + n, sc + 2 * n, s, soon()));
    PEERLAB_ASSERT_OK(drv.checkRecv(p, me, hc.recvBuffer(), sc + n, sc + 2 * n, elem, 17, s));
    PEERLAB_ASSERT_OK(drv.advance(s));
  }
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto r, drv.collect(s, soon()));
  EXPECT_TRUE(r.ok()) << r.wrong_elements << " wrong elements (first at " << r.first_bad << "), " << r.wrong_counts
                      << " wrong counts";
  EXPECT_GT(r.checked_elements, 0u);
}

TEST_P(Baseline, DeviceApiAlltoallvMatchesTheTrafficReferenceOrSaysWhyNot) {
  const int n = GetParam();
  PEERLAB_REQUIRE_GPUS(n);
  PEERLAB_TEST_RANKS(n, boot);
  const int me = boot.rank();
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaSetDevice(me)));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto stream, createStream(me));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto comm, createComm(boot, me, soon()));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto drv, TrafficDriver::create(me));
  TrafficParams p = alltoallv::makeTraffic(TrafficKind::kRandom, n, 9000, 8, 1.2, 5);
  const size_t elem = 2;
  auto made =
      DeviceAlltoallv::create(comm.get(), me, elem, alltoallv::trafficSendBound(p), alltoallv::trafficRecvBound(p));
  // Every rank runs the same NCCL, so every rank reaches the same verdict.
  PEERLAB_SKIP_IF_UNAVAILABLE(made.status());
  DeviceAlltoallv dev = std::move(made).value();
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto counts, allocDevice(me, 3 * n * sizeof(int64_t)));
  cudaStream_t s = stream.get();
  auto* sc = counts->as<int64_t>();
  PEERLAB_ASSERT_OK(drv.setCall(0, s));
  for (int call = 0; call < 200; ++call) {
    PEERLAB_ASSERT_OK(drv.writeCounts(p, me, sc, s));
    PEERLAB_ASSERT_OK(drv.fillSend(p, me, dev.sendBuffer(), elem, 23, s));
    PEERLAB_ASSERT_OK(dev.run(sc, sc + n, sc + 2 * n, s));
    PEERLAB_ASSERT_OK(drv.checkRecv(p, me, dev.recvBuffer(), sc + n, sc + 2 * n, elem, 23, s));
    PEERLAB_ASSERT_OK(drv.advance(s));
  }
  PEERLAB_ASSERT_OK(dev.checkStatus(s, soon()));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto r, drv.collect(s, soon()));
  EXPECT_TRUE(r.ok()) << r.wrong_elements << " wrong elements (first at " << r.first_bad << "), " << r.wrong_counts
                      << " wrong counts";
  // Overflow: everyone sends its whole send capacity to rank 0, n times its receive capacity.
  TrafficParams hot = alltoallv::makeTraffic(TrafficKind::kOneReceiver, n, alltoallv::trafficSendBound(p), 1);
  hot.target = 0;
  PEERLAB_ASSERT_OK(drv.writeCounts(hot, me, sc, s));
  PEERLAB_ASSERT_OK(dev.run(sc, sc + n, sc + 2 * n, s));
  const Status st = dev.checkStatus(s, soon());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
  EXPECT_NE(st.message().find("rank 0"), std::string::npos) << st.message();
  PEERLAB_ASSERT_OK(waitStream(s, soon(), "drain"));
  PEERLAB_ASSERT_OK(dev.close());
}

INSTANTIATE_TEST_SUITE_P(Ranks, Baseline, ::testing::Values(2, 4));

}  // namespace
}  // namespace peerlab::nccl
