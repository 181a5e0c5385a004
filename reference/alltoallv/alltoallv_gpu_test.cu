// Multi-rank GPU tests of symmetric memory and the GPU-initiated alltoallv (rank r on device r).
#include <gtest/gtest.h>

#include <chrono>
#include <iterator>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "reference/alltoallv/alltoallv.h"
#include "reference/alltoallv/symmetric_memory.h"
#include "reference/alltoallv/traffic.h"
#include "reference/alltoallv/verify.h"
#include "reference/core/check.h"
#include "reference/core/device_time.cuh"
#include "reference/core/memory.h"
#include "reference/core/pattern.h"
#include "reference/core/programmatic.cuh"
#include "reference/core/wait.h"
#include "reference/ipc/ipc.h"
#include "reference/nccl/alltoall.h"
#include "reference/nccl/comm.h"
#include "reference/testing/rank_test.h"
#include "reference/testing/testing.h"

namespace peerlab::alltoallv {
namespace {

Deadline soon() {
  return Deadline::afterMs(60'000);
}

TrafficSpec fixture(const std::string& name) {
  auto spec = loadTrafficSpec(testing::sourcePath("fixtures/traffic/" + name + ".json"));
  EXPECT_TRUE(spec.isOk()) << spec.status().toString();
  return spec.isOk() ? *spec : TrafficSpec{};
}

// How a test configures the alltoallv: protocol, transfer, LL threshold and queue chunk.
struct Mode {
  const char* name;
  Protocol protocol;
  Transfer transfer;
  uint64_t ll_max_bytes;
  uint64_t chunk_bytes;
  bool small_kernel = true;
  uint64_t queue_min_bytes = kDefaultQueueMinBytes;
};
const Mode kFused{"fused", Protocol::kFused, Transfer::kPush, kDefaultLlMaxBytes, 0};
// The same calls through the kernel that also has the work queue (its path for calls without large segments).
const Mode kFusedGeneric{"fused_generic", Protocol::kFused, Transfer::kPush, kDefaultLlMaxBytes, 0, false};
// An LL threshold inside the range of the tests' segment sizes: calls mix LL and queued segments.
const Mode kFusedMixed{"fused_mixed", Protocol::kFused, Transfer::kPush, 2048, 4096};
// Nothing in LL slots: every segment goes through the work queue, in many small chunks.
const Mode kFusedQueue{"fused_queue", Protocol::kFused, Transfer::kPush, 0, 1024, true, 0};
// Nothing in LL slots and no work queue: every segment split statically over the CTAs.
const Mode kFusedSplit{"fused_split", Protocol::kFused, Transfer::kPush, 0, 0, true, ~0ull};
const Mode kTwoPhasePush{"two_phase_push", Protocol::kTwoPhase, Transfer::kPush, kDefaultLlMaxBytes, 0};
const Mode kTwoPhasePull{"two_phase_pull", Protocol::kTwoPhase, Transfer::kPull, kDefaultLlMaxBytes, 0};
const Mode* const kModes[] = {&kFused,      &kFusedGeneric, &kFusedMixed,  &kFusedQueue,
                              &kFusedSplit, &kTwoPhasePush, &kTwoPhasePull};

Options optionsFor(const Mode& mode, size_t elem_bytes, uint64_t send_capacity, uint64_t recv_capacity) {
  Options o;
  o.elem_bytes = elem_bytes;
  o.send_capacity = send_capacity;
  o.recv_capacity = recv_capacity;
  o.protocol = mode.protocol;
  o.transfer = mode.transfer;
  o.ll_max_bytes = mode.ll_max_bytes;
  o.chunk_bytes = mode.chunk_bytes;
  o.small_kernel = mode.small_kernel;
  o.queue_min_bytes = mode.queue_min_bytes;
  o.timeout_ms = 20'000;
  return o;
}

// Per-rank GPU context of a test: device, stream, counts buffers, the traffic driver.
struct Ctx {
  int rank = 0;
  int n = 1;
  Stream stream;
  DeviceBuffer counts;  // int64: send [n], recv counts [n], recv offsets [n], second recv counts/offsets [2n]
  TrafficDriver driver;
  int64_t* send() const { return counts->as<int64_t>(); }
  int64_t* recvCounts() const { return counts->as<int64_t>() + n; }
  int64_t* recvOffsets() const { return counts->as<int64_t>() + 2 * n; }
  int64_t* recvCounts2() const { return counts->as<int64_t>() + 3 * n; }
  int64_t* recvOffsets2() const { return counts->as<int64_t>() + 4 * n; }
};

StatusOr<Ctx> makeCtx(Bootstrap& boot) {
  const int dev = boot.rank();
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaSetDevice(dev)));
  PEERLAB_ASSIGN_OR_RETURN(auto stream, createStream(dev));
  PEERLAB_ASSIGN_OR_RETURN(auto counts, allocDevice(dev, 5 * kMaxRanks * sizeof(int64_t)));
  PEERLAB_ASSIGN_OR_RETURN(auto driver, TrafficDriver::create(dev));
  return Ctx{boot.rank(), boot.size(), std::move(stream), std::move(counts), std::move(driver)};
}

// `calls` calls of `spec` traffic, each checked on the receiving GPU; every `nccl_every`-th call the NCCL host-count
// alltoallv runs on the same send buffer and counts and the two receive buffers must be identical. `ctas` < 0: the
// most CTAs the object allows.
void randomCalls(Bootstrap& boot, Ctx& c, nccl::HostCountAlltoallv& hc, const Mode& mode, size_t elem_bytes,
                 const TrafficParams& p, int calls, int nccl_every, int ctas = 0) {
  const Options o = optionsFor(mode, elem_bytes, trafficSendBound(p), trafficRecvBound(p));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto a2a, AllToAllV::create(boot, c.rank, o, soon()));
  if (ctas < 0) ctas = a2a.maxCtas();
  // The small-call kernel runs exactly where the capacities guarantee LL-only calls and the mode allows it.
  EXPECT_EQ(a2a.smallKernel(), mode.protocol == Protocol::kFused && mode.small_kernel &&
                                   o.send_capacity * elem_bytes <= mode.ll_max_bytes);
  // One seed for the whole job (a receiver checks what every sender wrote), fresh for every run.
  const uint64_t mine = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  std::vector<uint64_t> seeds(boot.size());
  PEERLAB_ASSERT_OK(boot.allgather(&mine, seeds.data(), sizeof(mine), soon()));
  const uint64_t seed = patternSeed(seeds[0], 0, 0, elem_bytes);
  const size_t recv_bytes = o.recv_capacity * elem_bytes;
  cudaStream_t s = c.stream.get();
  PEERLAB_ASSERT_OK(c.driver.setCall(0, s));
  uint64_t compared = 0;
  calls = testing::iterations(calls);
  for (int call = 0; call < calls; ++call) {
    PEERLAB_ASSERT_OK(c.driver.writeCounts(p, c.rank, c.send(), s));
    PEERLAB_ASSERT_OK(c.driver.fillSend(p, c.rank, a2a.sendBuffer(), elem_bytes, seed, s));
    PEERLAB_ASSERT_OK(c.driver.poisonRecv(p, c.rank, a2a.recvBuffer(), recv_bytes, elem_bytes, seed, s));
    PEERLAB_ASSERT_OK(a2a.run(s, c.send(), c.recvCounts(), c.recvOffsets(), ctas));
    PEERLAB_ASSERT_OK(
        c.driver.checkRecv(p, c.rank, a2a.recvBuffer(), c.recvCounts(), c.recvOffsets(), elem_bytes, seed, s));
    if (nccl_every > 0 && call % nccl_every == 0) {
      PEERLAB_ASSERT_OK(hc.run(a2a.sendBuffer(), c.send(), elem_bytes, c.recvCounts2(), c.recvOffsets2(), s, soon()));
      uint64_t total = 0;
      for (int64_t v : hc.lastRecvCounts())
        total += static_cast<uint64_t>(v);
      PEERLAB_ASSERT_OK(c.driver.compareBytes(a2a.recvBuffer(), hc.recvBuffer(), total * elem_bytes, s));
      PEERLAB_ASSERT_OK(c.driver.compareBytes(c.recvCounts(), c.recvCounts2(), 2 * c.n * sizeof(int64_t), s));
      ++compared;
    }
    PEERLAB_ASSERT_OK(c.driver.advance(s));
    if (call % 100 == 99 || call == calls - 1) {
      PEERLAB_ASSERT_OK(a2a.checkStatus(s, soon()));
      PEERLAB_ASSERT_OK_AND_ASSIGN(VerifyResult r, c.driver.collect(s, soon()));
      ASSERT_TRUE(r.ok()) << "rank " << c.rank << " up to call " << call << ": " << r.wrong_elements
                          << " wrong elements (first bad byte " << r.first_bad << "), " << r.wrong_counts
                          << " wrong counts/offsets, " << mode.name << ", " << elem_bytes << "-byte elements";
      if (p.kind != TrafficKind::kEmpty && p.elements > 0) EXPECT_GT(r.checked_elements, 0u);
    }
  }
  if (nccl_every > 0) EXPECT_GT(compared, 0u);
  PEERLAB_ASSERT_OK(boot.barrier(soon()));
  PEERLAB_ASSERT_OK(a2a.close(boot, soon()));
  EXPECT_TRUE(ipc::counters().balanced()) << ipc::counters().toString();
}

// The NCCL host-count alltoallv every random test compares against.
struct NcclSide {
  nccl::Comm comm;
  nccl::HostCountAlltoallv hc;
};
StatusOr<NcclSide> makeNccl(Bootstrap& boot) {
  PEERLAB_ASSIGN_OR_RETURN(auto comm, nccl::createComm(boot, boot.rank(), soon()));
  PEERLAB_ASSIGN_OR_RETURN(auto hc, nccl::HostCountAlltoallv::create(comm.get(), boot.rank(), 1 << 20));
  return NcclSide{std::move(comm), std::move(hc)};
}

TEST(SymmetricMemory, EveryRankMapsEveryRegionAndTearsDownCleanly) {
  PEERLAB_REQUIRE_GPUS(4);
  PEERLAB_TEST_RANKS(4, boot);
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaSetDevice(boot.rank())));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto stream, createStream(boot.rank()));
  {
    const size_t bytes = (3 << 20) + 5;
    PEERLAB_ASSERT_OK_AND_ASSIGN(auto region, SymmetricRegion::create(boot, boot.rank(), bytes, soon()));
    const SymmetricView v = region.view();
    static_assert(std::is_trivially_copyable_v<SymmetricView>);
    ASSERT_EQ(v.size, 4);
    ASSERT_EQ(v.rank, boot.rank());
    ASSERT_EQ(v.ptrs[v.rank], region.local());
    // Zeroed at creation, before any peer could write.
    PEERLAB_ASSERT_OK_AND_ASSIGN(auto zeros, allocDevice(boot.rank(), bytes));
    PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaMemset(zeros->ptr, 0, bytes)));
    PEERLAB_ASSERT_OK_AND_ASSIGN(auto drv, TrafficDriver::create(boot.rank()));
    PEERLAB_ASSERT_OK(drv.compareBytes(region.local(), zeros->ptr, bytes, stream.get()));
    PEERLAB_ASSERT_OK_AND_ASSIGN(auto z, drv.collect(stream.get(), soon()));
    EXPECT_EQ(z.wrong_elements, 0u) << "region not zeroed";
    // Each rank writes its pattern; every rank then reads every region through its mapping.
    PEERLAB_ASSERT_OK(fillPattern(region.local(), bytes, patternSeed(1, boot.rank(), -1, 7), stream.get()));
    PEERLAB_ASSERT_OK(waitStream(stream.get(), soon(), "fill"));
    PEERLAB_ASSERT_OK(boot.barrier(soon()));
    for (int r = 0; r < 4; ++r) {
      PEERLAB_ASSERT_OK_AND_ASSIGN(
          auto check, checkPattern(v.ptrs[r], bytes, patternSeed(1, r, -1, 7), boot.rank(), stream.get(), soon()));
      EXPECT_TRUE(check.ok()) << "region of rank " << r << " seen from rank " << boot.rank() << ": " << check.wrong
                              << " wrong bytes, first at " << check.first_bad;
    }
    PEERLAB_ASSERT_OK(boot.barrier(soon()));
    PEERLAB_ASSERT_OK(region.close(boot, soon()));
  }
  const auto counters = ipc::counters();
  EXPECT_TRUE(counters.balanced()) << counters.toString();
  EXPECT_EQ(counters.vmm_imports, 3);
}

class AllToAllVRandom : public ::testing::TestWithParam<std::tuple<int, const Mode*>> {};

TEST_P(AllToAllVRandom, ThousandCallsWithFreshCountsMatchTheReferenceAndNccl) {
  const auto [ranks, mode] = GetParam();
  PEERLAB_REQUIRE_GPUS(ranks);
  PEERLAB_TEST_RANKS(ranks, boot);
  // 2-byte elements and jittered counts: segments start at every alignment, so both the vector and the realigning
  // body run, as do heads and tails; segment sizes straddle the mixed mode's LL threshold.
  TrafficParams p = makeTraffic(TrafficKind::kRandom, ranks, 6000, 20260 + ranks, 1.2, 9);
  PEERLAB_ASSERT_OK_AND_ASSIGN(Ctx c, makeCtx(boot));
  PEERLAB_ASSERT_OK_AND_ASSIGN(NcclSide nc, makeNccl(boot));
  randomCalls(boot, c, nc.hc, *mode, 2, p, 1000, 50);
}

INSTANTIATE_TEST_SUITE_P(Ranks, AllToAllVRandom,
                         ::testing::Combine(::testing::Values(2, 4), ::testing::ValuesIn(kModes)),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "ranks_" + std::get<1>(info.param)->name;
                         });

TEST(AllToAllV, EveryElementSizeAndTrafficPatternFourRanks) {
  PEERLAB_REQUIRE_GPUS(4);
  PEERLAB_TEST_RANKS(4, boot);
  PEERLAB_ASSERT_OK_AND_ASSIGN(Ctx c, makeCtx(boot));
  PEERLAB_ASSERT_OK_AND_ASSIGN(NcclSide nc, makeNccl(boot));
  int variant = 0;
  for (size_t elem : {1, 2, 3, 4, 6, 8, 16}) {
    for (const char* name : {"uniform", "random", "zipf", "zero_rows", "one_receiver", "empty"}) {
      const Mode& mode = *kModes[variant++ % std::size(kModes)];
      SCOPED_TRACE(std::string(name) + " elem " + std::to_string(elem) + " " + mode.name);
      TrafficParams p = fixture(name).params(4, 3000);
      randomCalls(boot, c, nc.hc, mode, elem, p, 12, 6);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(AllToAllV, WideGridAndSmallChunksStayCorrect) {
  PEERLAB_REQUIRE_GPUS(4);
  PEERLAB_TEST_RANKS(4, boot);
  PEERLAB_ASSERT_OK_AND_ASSIGN(Ctx c, makeCtx(boot));
  PEERLAB_ASSERT_OK_AND_ASSIGN(NcclSide nc, makeNccl(boot));
  // About 2 MB per pair with 6-byte elements: every CTA the object allows (two per SM where they fit) takes 16 KB
  // chunks from the queue, and the skew moves CTAs from job to job.
  TrafficParams p = makeTraffic(TrafficKind::kZipf, 4, 1'400'000, 31, 1.2, 7);
  Mode wide = kFused;
  wide.name = "fused_wide";
  wide.chunk_bytes = 16 * 1024;
  wide.queue_min_bytes = 0;
  randomCalls(boot, c, nc.hc, wide, 6, p, 20, 10, /*ctas=*/-1);
  // The same traffic split statically over the wide grid.
  wide.name = "fused_wide_split";
  wide.queue_min_bytes = ~0ull;
  randomCalls(boot, c, nc.hc, wide, 6, p, 20, 10, /*ctas=*/-1);
}

TEST(AllToAllV, InvalidOptionsAreRejectedBeforeAnyAllocation) {
  PEERLAB_REQUIRE_GPUS(2);
  PEERLAB_TEST_RANKS(2, boot);
  Options o = optionsFor(kFused, 4, 64, 64);
  o.transfer = Transfer::kPull;
  EXPECT_EQ(AllToAllV::create(boot, boot.rank(), o, soon()).status().code(), StatusCode::kInvalidArgument);
  o = optionsFor(kFused, 4, 64, 64);
  o.chunk_bytes = 1000;
  EXPECT_EQ(AllToAllV::create(boot, boot.rank(), o, soon()).status().code(), StatusCode::kInvalidArgument);
  // Ranks that disagree on the protocol are caught by the option exchange.
  o = optionsFor(boot.rank() == 0 ? kFused : kTwoPhasePush, 4, 64, 64);
  auto made = AllToAllV::create(boot, boot.rank(), o, soon());
  EXPECT_EQ(made.status().code(), StatusCode::kInvalidArgument) << made.status().toString();
}

class AllToAllVModes : public ::testing::TestWithParam<const Mode*> {};

TEST_P(AllToAllVModes, OverflowIsReportedNamingTheRankAndNothingIsWritten) {
  PEERLAB_REQUIRE_GPUS(2);
  PEERLAB_TEST_RANKS(2, boot);
  PEERLAB_ASSERT_OK_AND_ASSIGN(Ctx c, makeCtx(boot));
  cudaStream_t s = c.stream.get();
  const size_t elem = 4;
  // Both ranks send 1000 elements to rank 1, whose capacity is 1500.
  TrafficParams hot = makeTraffic(TrafficKind::kOneReceiver, 2, 1000, 3);
  hot.target = 1;
  const Options o = optionsFor(*GetParam(), elem, 4000, 1500);
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto a2a, AllToAllV::create(boot, c.rank, o, soon()));
  const size_t recv_bytes = o.recv_capacity * elem;
  const uint64_t poison_seed = patternSeed(99, c.rank, 0, 1);
  const uint64_t guard_seed = patternSeed(98, c.rank, 0, 2);
  PEERLAB_ASSERT_OK(fillPattern(a2a.recvBuffer(), recv_bytes, poison_seed, s));
  PEERLAB_ASSERT_OK(fillPattern(a2a.recvGuard(), a2a.recvGuardBytes(), guard_seed, s));
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaMemsetAsync(c.recvCounts(), 0x7F, 2 * c.n * sizeof(int64_t), s)));
  PEERLAB_ASSERT_OK(c.driver.setCall(0, s));
  PEERLAB_ASSERT_OK(c.driver.writeCounts(hot, c.rank, c.send(), s));
  PEERLAB_ASSERT_OK(c.driver.fillSend(hot, c.rank, a2a.sendBuffer(), elem, 5, s));
  PEERLAB_ASSERT_OK(a2a.run(s, c.send(), c.recvCounts(), c.recvOffsets()));
  Status st = a2a.checkStatus(s, soon());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
  EXPECT_NE(st.message().find("rank 1"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("2000 elements"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("1500"), std::string::npos) << st.message();
  // Not a byte written: the receive buffer still holds its pattern, the guard after it too, counts read zero.
  PEERLAB_ASSERT_OK(c.driver.checkBytes(a2a.recvBuffer(), recv_bytes, poison_seed, s));
  PEERLAB_ASSERT_OK(c.driver.checkBytes(a2a.recvGuard(), a2a.recvGuardBytes(), guard_seed, s));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto r, c.driver.collect(s, soon()));
  EXPECT_EQ(r.wrong_elements, 0u) << "a byte changed at offset " << r.first_bad;
  std::vector<int64_t> counts(2 * c.n);
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaMemcpy(counts.data(), c.recvCounts(), counts.size() * 8, cudaMemcpyDeviceToHost)));
  for (int64_t v : counts)
    EXPECT_EQ(v, 0);
  // The object stays usable: a call that fits succeeds and is correct.
  TrafficParams ok = makeTraffic(TrafficKind::kUniform, 2, 1400, 4, 1.2, 3);
  PEERLAB_ASSERT_OK(c.driver.setCall(1, s));
  PEERLAB_ASSERT_OK(c.driver.writeCounts(ok, c.rank, c.send(), s));
  PEERLAB_ASSERT_OK(c.driver.fillSend(ok, c.rank, a2a.sendBuffer(), elem, 6, s));
  PEERLAB_ASSERT_OK(a2a.run(s, c.send(), c.recvCounts(), c.recvOffsets()));
  PEERLAB_ASSERT_OK(c.driver.checkRecv(ok, c.rank, a2a.recvBuffer(), c.recvCounts(), c.recvOffsets(), elem, 6, s));
  PEERLAB_ASSERT_OK(c.driver.checkBytes(a2a.recvGuard(), a2a.recvGuardBytes(), guard_seed, s));
  PEERLAB_ASSERT_OK(a2a.checkStatus(s, soon()));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto r2, c.driver.collect(s, soon()));
  EXPECT_TRUE(r2.ok()) << r2.wrong_elements << " wrong after the overflow, first at " << r2.first_bad;
  PEERLAB_ASSERT_OK(a2a.close(boot, soon()));
}

TEST_P(AllToAllVModes, NegativeCountIsBadInputOnEveryRank) {
  PEERLAB_REQUIRE_GPUS(2);
  PEERLAB_TEST_RANKS(2, boot);
  PEERLAB_ASSERT_OK_AND_ASSIGN(Ctx c, makeCtx(boot));
  const Options o = optionsFor(*GetParam(), 8, 64, 64);
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto a2a, AllToAllV::create(boot, c.rank, o, soon()));
  const int64_t counts[2] = {c.rank == 0 ? -5 : 3, 4};
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaMemcpy(c.send(), counts, sizeof(counts), cudaMemcpyHostToDevice)));
  PEERLAB_ASSERT_OK(a2a.run(c.stream.get(), c.send(), c.recvCounts(), c.recvOffsets()));
  Status st = a2a.checkStatus(c.stream.get(), soon());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
  EXPECT_NE(st.message().find("rank 0"), std::string::npos) << st.message();
  PEERLAB_ASSERT_OK(a2a.close(boot, soon()));
}

class AllToAllVGraph : public ::testing::TestWithParam<std::tuple<int, const Mode*>> {};

TEST_P(AllToAllVGraph, ReplayedGraphAdvancesTheEpochAndStaysCorrect) {
  const auto [ranks, mode] = GetParam();
  PEERLAB_REQUIRE_GPUS(ranks);
  PEERLAB_TEST_RANKS(ranks, boot);
  PEERLAB_ASSERT_OK_AND_ASSIGN(Ctx c, makeCtx(boot));
  cudaStream_t s = c.stream.get();
  TrafficParams p = makeTraffic(TrafficKind::kZipf, ranks, 5000, 77, 1.2, 5);
  const size_t elem = 4;
  const Options o = optionsFor(*mode, elem, trafficSendBound(p), trafficRecvBound(p));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto a2a, AllToAllV::create(boot, c.rank, o, soon()));
  // One eager call first, so the graph starts from epoch 1, not 0.
  PEERLAB_ASSERT_OK(c.driver.setCall(1000, s));
  PEERLAB_ASSERT_OK(c.driver.writeCounts(p, c.rank, c.send(), s));
  PEERLAB_ASSERT_OK(a2a.run(s, c.send(), c.recvCounts(), c.recvOffsets()));
  PEERLAB_ASSERT_OK(c.driver.setCall(0, s));
  PEERLAB_ASSERT_OK(waitStream(s, soon(), "eager call"));
  // Capture counts, payload, the call, the check and the call number step: every replay is a fresh call.
  cudaGraph_t graph = nullptr;
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal)));
  auto capture = [&]() -> Status {
    PEERLAB_RETURN_IF_ERROR(c.driver.writeCounts(p, c.rank, c.send(), s));
    PEERLAB_RETURN_IF_ERROR(c.driver.fillSend(p, c.rank, a2a.sendBuffer(), elem, 11, s));
    PEERLAB_RETURN_IF_ERROR(c.driver.poisonRecv(p, c.rank, a2a.recvBuffer(), o.recv_capacity * elem, elem, 11, s));
    PEERLAB_RETURN_IF_ERROR(a2a.run(s, c.send(), c.recvCounts(), c.recvOffsets()));
    PEERLAB_RETURN_IF_ERROR(
        c.driver.checkRecv(p, c.rank, a2a.recvBuffer(), c.recvCounts(), c.recvOffsets(), elem, 11, s));
    return c.driver.advance(s);
  };
  const Status captured = capture();
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaStreamEndCapture(s, &graph)));
  PEERLAB_ASSERT_OK(captured);
  cudaGraphExec_t exec = nullptr;
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaGraphInstantiate(&exec, graph, 0)));
  for (int i = 0; i < 200; ++i)
    PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaGraphLaunch(exec, s)));
  PEERLAB_ASSERT_OK(a2a.checkStatus(s, soon()));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto r, c.driver.collect(s, soon()));
  EXPECT_TRUE(r.ok()) << r.wrong_elements << " wrong elements (first at " << r.first_bad << "), " << r.wrong_counts
                      << " wrong counts over 200 replays";
  EXPECT_GT(r.checked_elements, 200u * 1000u);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  PEERLAB_ASSERT_OK(a2a.close(boot, soon()));
}

INSTANTIATE_TEST_SUITE_P(Ranks, AllToAllVGraph,
                         ::testing::Values(std::make_tuple(2, &kFused), std::make_tuple(2, &kTwoPhasePull),
                                           std::make_tuple(4, &kFused), std::make_tuple(4, &kFusedMixed),
                                           std::make_tuple(4, &kFusedQueue), std::make_tuple(4, &kFusedSplit),
                                           std::make_tuple(4, &kTwoPhasePush)),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "ranks_" + std::get<1>(info.param)->name;
                         });

// Three calls are queued behind the missing rank: the first times out, the ones after it give up at once (the error
// is on record), so the verdict still comes within one deadline.
TEST_P(AllToAllVModes, MissingRankGivesTimeoutOnTheOthersWithinOneDeadlineForQueuedCalls) {
  PEERLAB_REQUIRE_GPUS(4);
  PEERLAB_TEST_RANKS(4, boot);
  PEERLAB_ASSERT_OK_AND_ASSIGN(Ctx c, makeCtx(boot));
  cudaStream_t s = c.stream.get();
  Options o = optionsFor(*GetParam(), 4, 4096, 4096);
  o.timeout_ms = 2000;
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto a2a, AllToAllV::create(boot, c.rank, o, soon()));
  TrafficParams p = makeTraffic(TrafficKind::kUniform, 4, 1024, 1);
  PEERLAB_ASSERT_OK(c.driver.writeCounts(p, c.rank, c.send(), s));
  PEERLAB_ASSERT_OK(waitStream(s, soon(), "counts"));
  PEERLAB_ASSERT_OK(boot.barrier(soon()));
  if (c.rank != 3) {
    const auto start = std::chrono::steady_clock::now();
    for (int call = 0; call < 3; ++call)
      PEERLAB_ASSERT_OK(a2a.run(s, c.send(), c.recvCounts(), c.recvOffsets()));
    Status st = a2a.checkStatus(s, Deadline::afterMs(o.timeout_ms + 1000));
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(st.code(), StatusCode::kTimeout) << st.toString();
    EXPECT_NE(st.message().find("rank 3"), std::string::npos) << st.message();
    EXPECT_LE(ms, o.timeout_ms + 1000);
    EXPECT_GE(ms, o.timeout_ms - 100);
  }
  // Everyone, the absent rank included, tears down cleanly.
  PEERLAB_ASSERT_OK(boot.barrier(soon()));
  PEERLAB_ASSERT_OK(a2a.close(boot, soon()));
  EXPECT_TRUE(ipc::counters().balanced()) << ipc::counters().toString();
}

// A producer that lets the kernel after it launch at once (as a producer written for programmatic launch does) and
// only after `delay_ns` writes the counts and the send data (copied from staging). Block 0 records when it finished.
__global__ void lateProducer(const int64_t* counts_from, int64_t* counts_to, int n, const uint8_t* data_from,
                             uint8_t* data_to, uint64_t bytes, uint64_t delay_ns, uint64_t* finished_at) {
  releaseDependents();
  const uint64_t t0 = globalTimerNs();
  while (globalTimerNs() - t0 < delay_ns) {
  }
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  const uint64_t first = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (uint64_t i = first; i < static_cast<uint64_t>(n); i += stride)
    counts_to[i] = counts_from[i];
  for (uint64_t i = first; i < bytes; i += stride)
    data_to[i] = data_from[i];
  __syncthreads();
  if (blockIdx.x == 0 && threadIdx.x == 0) *finished_at = globalTimerNs();
}

// With programmatic launch a call's kernel may be resident before the kernel ahead of it has finished: it must not
// read counts or data until then. The producer here releases it at once and writes 200 us later; the real counts
// hold -1 (bad input) and the send buffer the previous call's data until it does, so a call that read early would
// fail or deliver wrong data. The fused kernel's trace shows that its CTA 0 did become resident early (except under
// compute-sanitizer, which serializes kernels).
TEST_P(AllToAllVModes, ProgrammaticLaunchWaitsForAProducerThatReleasesItEarly) {
  PEERLAB_REQUIRE_GPUS(2);
  PEERLAB_TEST_RANKS(2, boot);
  PEERLAB_ASSERT_OK_AND_ASSIGN(Ctx c, makeCtx(boot));
  cudaStream_t s = c.stream.get();
  const size_t elem = 2;
  TrafficParams p = makeTraffic(TrafficKind::kRandom, 2, 6000, 4242, 1.2, 9);
  const Options o = optionsFor(*GetParam(), elem, trafficSendBound(p), trafficRecvBound(p));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto a2a, AllToAllV::create(boot, c.rank, o, soon()));
  int major = 0;
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, c.rank)));
  EXPECT_EQ(a2a.programmaticLaunch(), major >= 9);
  const bool fused = a2a.protocol() == Protocol::kFused;
  constexpr int kCalls = 20;
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto trace, allocDevice(c.rank, kTraceCalls * kTracePoints * sizeof(uint64_t)));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto finished, allocDevice(c.rank, (kCalls + 1) * sizeof(uint64_t)));
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaMemsetAsync(trace->ptr, 0, kTraceCalls * kTracePoints * sizeof(uint64_t), s)));
  if (fused) a2a.setTrace(trace->as<uint64_t>());
  const size_t send_bytes = o.send_capacity * elem;
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto stage_counts, allocDevice(c.rank, kMaxRanks * sizeof(int64_t)));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto stage_data, allocDevice(c.rank, send_bytes));
  const uint64_t mine = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  std::vector<uint64_t> seeds(boot.size());
  PEERLAB_ASSERT_OK(boot.allgather(&mine, seeds.data(), sizeof(mine), soon()));
  const uint64_t seed = patternSeed(seeds[0], 0, 0, elem);
  PEERLAB_ASSERT_OK(c.driver.setCall(1, s));
  for (int call = 1; call <= kCalls; ++call) {
    PEERLAB_ASSERT_OK(c.driver.writeCounts(p, c.rank, stage_counts->as<int64_t>(), s));
    PEERLAB_ASSERT_OK(c.driver.fillSend(p, c.rank, stage_data->ptr, elem, seed, s));
    PEERLAB_ASSERT_OK(c.driver.poisonRecv(p, c.rank, a2a.recvBuffer(), o.recv_capacity * elem, elem, seed, s));
    PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaMemsetAsync(c.send(), 0xFF, c.n * sizeof(int64_t), s)));
    lateProducer<<<1, 256, 0, s>>>(stage_counts->as<int64_t>(), c.send(), c.n, stage_data->as<uint8_t>(),
                                   static_cast<uint8_t*>(a2a.sendBuffer()), send_bytes, 200'000,
                                   finished->as<uint64_t>() + call);
    PEERLAB_ASSERT_OK(PEERLAB_CUDA_LAUNCH("lateProducer"));
    PEERLAB_ASSERT_OK(a2a.run(s, c.send(), c.recvCounts(), c.recvOffsets()));
    PEERLAB_ASSERT_OK(c.driver.checkRecv(p, c.rank, a2a.recvBuffer(), c.recvCounts(), c.recvOffsets(), elem, seed, s));
    PEERLAB_ASSERT_OK(c.driver.advance(s));
  }
  PEERLAB_ASSERT_OK(a2a.checkStatus(s, soon()));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto r, c.driver.collect(s, soon()));
  EXPECT_TRUE(r.ok()) << r.wrong_elements << " wrong elements (first at " << r.first_bad << "), " << r.wrong_counts
                      << " wrong counts over " << kCalls << " calls";
  EXPECT_GT(r.checked_elements, 0u);
  if (fused && a2a.programmaticLaunch()) {
    // Call e (epoch e) wrote its trace row e % kTraceCalls.
    std::vector<uint64_t> t(kTraceCalls * kTracePoints);
    std::vector<uint64_t> done(kCalls + 1);
    PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaMemcpy(t.data(), trace->ptr, t.size() * 8, cudaMemcpyDeviceToHost)));
    PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaMemcpy(done.data(), finished->ptr, done.size() * 8, cudaMemcpyDeviceToHost)));
    int early = 0;
    for (int call = 1; call <= kCalls; ++call) {
      const uint64_t* row = t.data() + (call % kTraceCalls) * kTracePoints;
      ASSERT_NE(row[kTraceEntry], 0u) << "call " << call << " left no trace";
      EXPECT_GE(row[kTraceEntry], done[call]) << "call " << call << " went on before its producer finished";
      if (row[kTraceResident] < done[call]) ++early;
    }
    // compute-sanitizer runs kernels one after another, so nothing launches early under it.
    if (testing::underSanitizer().empty()) {
      EXPECT_GT(early, 0) << "no call's kernel was resident before its producer finished: the test proved nothing";
    }
  }
  PEERLAB_ASSERT_OK(boot.barrier(soon()));
  PEERLAB_ASSERT_OK(a2a.close(boot, soon()));
}

INSTANTIATE_TEST_SUITE_P(Protocols, AllToAllVModes, ::testing::Values(&kFused, &kFusedQueue, &kTwoPhasePush),
                         [](const auto& info) { return std::string(info.param->name); });

}  // namespace
}  // namespace peerlab::alltoallv
