#include "reference/zcopy/zcopy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "reference/core/check.h"
#include "reference/core/memory.h"
#include "reference/core/pattern.h"
#include "reference/core/wait.h"
#include "reference/testing/rank_test.h"
#include "reference/testing/testing.h"
#include "reference/zcopy/semaphore_device.cuh"

namespace peerlab::zcopy {
namespace {

// Every test runs as 2 ranks: rank r on device r, rank 0 the sender of every message, rank 1 the receiver.
constexpr int64_t kSetupMs = 30'000;
constexpr int64_t kRunMs = 30'000;
constexpr uint64_t kTestDeviceTimeoutNs = 5'000'000'000ull;

Deadline setup() {
  return Deadline::afterMs(kSetupMs);
}

// A run id both ranks share, so patterns differ per run.
StatusOr<uint64_t> sharedRun(Bootstrap& boot) {
  uint64_t mine = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  std::vector<uint64_t> all(static_cast<size_t>(boot.size()));
  PEERLAB_RETURN_IF_ERROR(boot.allgather(&mine, all.data(), sizeof(mine), setup()));
  return all[0];
}

// Rank 0's `a` holds every message's source (exported for get), rank 1's `b` every destination (exported for put
// and sm_signal). Each rank allocates both so the layout is the same everywhere.
struct Buffers {
  ipc::ExportableBuffer a;
  ipc::ExportableBuffer b;
};

StatusOr<Buffers> allocBuffers(int device, size_t bytes, ipc::HandleKind kind) {
  Buffers out;
  PEERLAB_ASSIGN_OR_RETURN(out.a, ipc::allocExportable(device, bytes, kind));
  PEERLAB_ASSIGN_OR_RETURN(out.b, ipc::allocExportable(device, bytes, kind));
  return out;
}

StatusOr<Channel> connect(Context& ctx, Protocol p, int channel, const Buffers& bufs) {
  ChannelOptions o;
  o.peer = 1 - ctx.rank();
  o.channel = channel;
  o.protocol = p;
  o.role = ctx.rank() == 0 ? Role::kSender : Role::kReceiver;
  o.window = p == Protocol::kGet ? &bufs.a.get() : &bufs.b.get();  // ignored on the side that does not export
  return Channel::create(ctx, o, setup());
}

// Enqueues one message a[src_off, +n) (rank 0) -> b[dst_off, +n) (rank 1): the sender writes a fresh pattern
// first, the receiver poisons its destination before and checks it after (on its own GPU).
Status enqueueMessage(int me, Channel& ch, const Buffers& bufs, size_t src_off, size_t dst_off, size_t n, uint64_t seed,
                      cudaStream_t s, PatternChecker* checker) {
  if (me == 0) {
    uint8_t* src = bufs.a->as<uint8_t>() + src_off;
    PEERLAB_RETURN_IF_ERROR(fillPattern(src, n, seed, s));
    if (ch.protocol() == Protocol::kGet) {
      PEERLAB_RETURN_IF_ERROR(ch.sendPost(s));
    } else {
      PEERLAB_RETURN_IF_ERROR(ch.sendPost(s, src, dst_off, n));
    }
    return ch.sendWait(s);
  }
  uint8_t* dst = bufs.b->as<uint8_t>() + dst_off;
  PEERLAB_RETURN_IF_ERROR(poisonPattern(dst, n, seed, s));
  if (ch.protocol() == Protocol::kGet) {
    PEERLAB_RETURN_IF_ERROR(ch.recvPost(s, dst, src_off, n));
  } else {
    PEERLAB_RETURN_IF_ERROR(ch.recvPost(s));
  }
  PEERLAB_RETURN_IF_ERROR(ch.recvWait(s));
  return checker->enqueue(dst, n, seed, s);
}

// After a failed assertion a stream may wait on a signal that will never come, and freeing memory would then wait
// for it forever: release the waits before the context and the buffers go.
struct ReleaseOnFailure {
  Context* ctx = nullptr;
  ~ReleaseOnFailure() {
    if (ctx != nullptr && ::testing::Test::HasFailure()) ctx->abandon(Deadline::afterMs(5000)).ignore();
  }
};

ContextOptions optionsFor(int device, uint32_t initial_epoch = 0) {
  ContextOptions o;
  o.device = device;
  o.channels = 4;
  o.initial_epoch = initial_epoch;
  o.device_timeout_ns = kTestDeviceTimeoutNs;
  return o;
}

constexpr Protocol kProtocols[] = {Protocol::kGet, Protocol::kPut, Protocol::kSmSignal};

class ZcopyKinds : public ::testing::TestWithParam<ipc::HandleKind> {};

TEST_P(ZcopyKinds, MovesDataAtEdgeSizes) {
  PEERLAB_REQUIRE_GPUS(2);
  PEERLAB_TEST_RANKS(2, boot);
  const int me = boot.rank();
  // Plain runtime calls below (cudaMemset, cudaMemcpy) act on the current device: this rank's.
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaSetDevice(me)));
  constexpr size_t kBig = size_t{64} << 20;
  auto bufs_or = allocBuffers(me, kBig + 4096, GetParam());
  PEERLAB_SKIP_IF_UNAVAILABLE(bufs_or.status());
  Buffers bufs = std::move(bufs_or).value();
  PEERLAB_ASSERT_OK_AND_ASSIGN(uint64_t run, sharedRun(boot));
  ContextOptions opts = optionsFor(me);
  opts.semaphore_kind = GetParam();  // the semaphore pages travel the same way as the data windows
  PEERLAB_ASSERT_OK_AND_ASSIGN(Context ctx, Context::create(boot, opts, setup()));
  ReleaseOnFailure release{&ctx};
  PEERLAB_ASSERT_OK_AND_ASSIGN(Stream stream, createStream(me));
  PEERLAB_ASSERT_OK_AND_ASSIGN(PatternChecker checker, PatternChecker::create(me));

  uint64_t expected_elements = 0;
  for (Protocol p : kProtocols) {
    PEERLAB_ASSERT_OK_AND_ASSIGN(Channel ch, connect(ctx, p, static_cast<int>(p), bufs));
    struct Case {
      size_t n, src_off, dst_off;
    };
    // sm_signal: up to kSmLlMaxBytes in LL lines, one byte more pushed in bulk (both from and to odd offsets).
    for (const Case& c : {Case{1, 0, 0}, Case{4096 + 3, 0, 0}, Case{4096 + 3, 5, 1027}, Case{kSmLlMaxBytes, 3, 5},
                          Case{kSmLlMaxBytes + 1, 0, 7}, Case{kBig, 0, 0}}) {
      const uint64_t seed = patternSeed(run, 0, 1, static_cast<uint64_t>(p) * 1000 + c.n + c.src_off);
      PEERLAB_ASSERT_OK(enqueueMessage(me, ch, bufs, c.src_off, c.dst_off, c.n, seed, stream.get(), &checker));
      expected_elements += c.n;
    }
    // Each channel reports its SM footprint: 0 for the copy-engine protocols.
    EXPECT_EQ(ch.smsOccupied(4096, false), p == Protocol::kSmSignal ? 1 : 0);
  }
  PEERLAB_ASSERT_OK(ctx.wait(stream.get(), Deadline::afterMs(kRunMs), "edge-size messages"));
  if (me == 1) {
    PEERLAB_ASSERT_OK_AND_ASSIGN(PatternCheck r, checker.collect(stream.get(), Deadline::afterMs(kRunMs)));
    EXPECT_EQ(r.wrong, 0u) << "first bad byte at " << r.first_bad;
    EXPECT_EQ(r.elements, expected_elements);
  }
  PEERLAB_ASSERT_OK(ctx.deviceErrors());
  PEERLAB_ASSERT_OK(ctx.close(setup()));
}

INSTANTIATE_TEST_SUITE_P(Handles, ZcopyKinds, ::testing::Values(ipc::HandleKind::kLegacy, ipc::HandleKind::kVmmFd),
                         [](const auto& info) { return std::string(ipc::handleKindName(info.param)); });

TEST(Zcopy, TenThousandRandomMessagesReuseOneSemaphoreSet) {
  PEERLAB_REQUIRE_GPUS(2);
  PEERLAB_TEST_RANKS(2, boot);
  const int me = boot.rank();
  // Plain runtime calls below (cudaMemset, cudaMemcpy) act on the current device: this rank's.
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaSetDevice(me)));
  constexpr size_t kMaxBytes = size_t{1} << 20;
  constexpr size_t kSpan = kMaxBytes + 4096;  // every source offset plus the largest message
  PEERLAB_ASSERT_OK_AND_ASSIGN(Buffers bufs, allocBuffers(me, kSpan + 4096, ipc::HandleKind::kLegacy));
  PEERLAB_ASSERT_OK_AND_ASSIGN(uint64_t run, sharedRun(boot));
  // 1024 epochs below the wrap: every protocol's words wrap around 2^32 during the run.
  PEERLAB_ASSERT_OK_AND_ASSIGN(Context ctx, Context::create(boot, optionsFor(me, 0xFFFFFC00u), setup()));
  ReleaseOnFailure release{&ctx};
  PEERLAB_ASSERT_OK_AND_ASSIGN(Stream stream, createStream(me));
  cudaStream_t s = stream.get();
  PEERLAB_ASSERT_OK_AND_ASSIGN(PatternChecker checker, PatternChecker::create(me));
  std::vector<Channel> channels;
  for (Protocol p : kProtocols) {
    PEERLAB_ASSERT_OK_AND_ASSIGN(Channel ch, connect(ctx, p, static_cast<int>(p), bufs));
    channels.push_back(std::move(ch));
  }
  // Same seed on both ranks: the same bursts, sizes, offsets and protocols in the same order. A burst is 1 to 8
  // messages that read one source pattern the sender wrote before it (message j carries pattern bytes
  // [src_off, src_off + n)), so the sender enqueues a whole burst without a kernel in between; every other burst
  // goes through a MemOpBatch (semaphore operations batched, sm_signal calls fused into one kernel).
  std::mt19937_64 rng(run);
  std::uniform_real_distribution<double> log_size(0.0, 20.0);
  uint64_t expected_elements = 0;
  int per_protocol[3] = {0, 0, 0};
  int batched_messages = 0;
  const int messages = testing::iterations(10'000);
  for (int i = 0, burst = 0; i < messages; ++burst) {
    const int len = std::min(1 + static_cast<int>(rng() % 8), messages - i);
    const bool batched = burst % 2 == 1;
    const uint64_t seed = patternSeed(run, 0, 1, static_cast<uint64_t>(burst));
    if (me == 0) PEERLAB_ASSERT_OK(fillPattern(bufs.a->ptr, kSpan, seed, s));
    MemOpBatch batch(s);
    for (int j = 0; j < len; ++j, ++i) {
      const size_t n = std::max<size_t>(1, static_cast<size_t>(std::exp2(log_size(rng))));
      const size_t src_off = rng() % 4096;
      const size_t dst_off = rng() % 4096;
      const int which = static_cast<int>(rng() % 3);
      ++per_protocol[which];
      batched_messages += batched ? 1 : 0;
      Channel& ch = channels[static_cast<size_t>(which)];
      const StreamRef ref = batched ? StreamRef(batch) : StreamRef(s);
      auto message = [&]() -> Status {
        if (me == 0) {
          uint8_t* src = bufs.a->as<uint8_t>() + src_off;
          PEERLAB_RETURN_IF_ERROR(ch.protocol() == Protocol::kGet ? ch.sendPost(ref)
                                                                  : ch.sendPost(ref, src, dst_off, n));
          return ch.sendWait(ref);
        }
        uint8_t* dst = bufs.b->as<uint8_t>() + dst_off;
        // Kernels go straight to the stream: what the batch holds must reach it first.
        PEERLAB_RETURN_IF_ERROR(batch.flush());
        PEERLAB_RETURN_IF_ERROR(poisonPattern(dst, n, seed, s, src_off));
        PEERLAB_RETURN_IF_ERROR(ch.protocol() == Protocol::kGet ? ch.recvPost(ref, dst, src_off, n) : ch.recvPost(ref));
        PEERLAB_RETURN_IF_ERROR(ch.recvWait(ref));
        PEERLAB_RETURN_IF_ERROR(batch.flush());
        return checker.enqueue(dst, n, seed, s, 1, src_off);
      };
      const Status st = message();
      ASSERT_TRUE(st.isOk()) << "message " << i << " (burst " << burst << "): " << st.toString();
      expected_elements += n;
    }
    PEERLAB_ASSERT_OK(batch.flush());
  }
  PEERLAB_ASSERT_OK(ctx.wait(s, Deadline::afterMs(4 * kRunMs), "10000 random messages"));
  if (me == 1) {
    PEERLAB_ASSERT_OK_AND_ASSIGN(PatternCheck r, checker.collect(s, Deadline::afterMs(kRunMs)));
    EXPECT_EQ(r.wrong, 0u) << "first bad byte at " << r.first_bad;
    EXPECT_EQ(r.elements, expected_elements);
  }
  // The mix itself, at the full count (a capped run, as under the sanitizer, cannot reach the wrap).
  if (messages == 10'000) {
    for (int k = 0; k < 3; ++k)
      EXPECT_GT(per_protocol[k], 1024) << "protocol " << k << " did not cross the wrap";
    EXPECT_GT(batched_messages, 2000);
  }
  PEERLAB_ASSERT_OK(ctx.deviceErrors());
  PEERLAB_ASSERT_OK(ctx.close(setup()));
}

// Writes the pattern of seeds[*index] (device memory) and nothing else: captured once, a new seed every replay.
__global__ void fillFromDeviceSeed(uint8_t* dst, uint64_t bytes, const uint64_t* seeds, const uint32_t* index) {
  const uint64_t seed = seeds[*index];
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < bytes;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    dst[i] = patternByte(seed, i);
  }
}
__global__ void advanceIndex(uint32_t* index) {
  *index += 1;
}

TEST(Zcopy, GraphCapturedOnceReplaysFreshDataEveryTime) {
  PEERLAB_REQUIRE_GPUS(2);
  PEERLAB_TEST_RANKS(2, boot);
  const int me = boot.rank();
  // Plain runtime calls below (cudaMemset, cudaMemcpy) act on the current device: this rank's.
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaSetDevice(me)));
  constexpr int kReplays = 100;
  constexpr int kEager = 3;
  constexpr size_t kBytes = 64 * 1024 + 5;
  PEERLAB_ASSERT_OK_AND_ASSIGN(Buffers bufs, allocBuffers(me, kBytes + 4096, ipc::HandleKind::kVmmFd));
  PEERLAB_ASSERT_OK_AND_ASSIGN(uint64_t run, sharedRun(boot));
  // 64 epochs below the wrap: the first pass's replays of every channel cross it.
  PEERLAB_ASSERT_OK_AND_ASSIGN(Context ctx, Context::create(boot, optionsFor(me, 0xFFFFFFC0u), setup()));
  ReleaseOnFailure release{&ctx};
  PEERLAB_ASSERT_OK_AND_ASSIGN(Stream stream, createStream(me));
  PEERLAB_ASSERT_OK_AND_ASSIGN(PatternChecker checker, PatternChecker::create(me));
  PEERLAB_ASSERT_OK_AND_ASSIGN(DeviceBuffer seeds, allocDevice(me, kReplays * sizeof(uint64_t)));
  PEERLAB_ASSERT_OK_AND_ASSIGN(DeviceBuffer index, allocDevice(me, sizeof(uint32_t)));

  for (Protocol p : kProtocols) {
    PEERLAB_ASSERT_OK_AND_ASSIGN(Channel ch, connect(ctx, p, static_cast<int>(p), bufs));
    // Two passes: stream memory operation nodes rewritten before each replay with the body's calls through a
    // MemOpBatch (sm_signal: one fused kernel per side), and one-thread sync kernels with device counters with the
    // calls one by one. put runs the kernels first, so that both kinds cross the wrap in some channel.
    for (int pass = 0; pass < 2; ++pass) {
      const bool memops_first = p != Protocol::kPut;
      const GraphSync sync = (pass == 0) == memops_first ? GraphSync::kMemOps : GraphSync::kKernels;
      const bool batched = sync == GraphSync::kMemOps;
      SCOPED_TRACE(std::string(protocolName(p)) + " " + std::string(graphSyncName(sync)));
      auto seedOf = [&](int k) {
        return patternSeed(run, 0, 1, static_cast<uint64_t>(p) * 1000000 + static_cast<uint64_t>(pass) * 100000 + k);
      };
      std::vector<uint64_t> host_seeds(kReplays);
      for (int r = 0; r < kReplays; ++r)
        host_seeds[static_cast<size_t>(r)] = seedOf(1000 + r);
      PEERLAB_ASSERT_OK(
          PEERLAB_CUDA(cudaMemcpy(seeds->ptr, host_seeds.data(), kReplays * sizeof(uint64_t), cudaMemcpyHostToDevice)));
      PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaMemset(index->ptr, 0, sizeof(uint32_t))));
      uint64_t expected = 0;

      // Eager messages first: the graph must pick up the epochs where they left off.
      for (int k = 0; k < kEager; ++k, expected += kBytes) {
        PEERLAB_ASSERT_OK(enqueueMessage(me, ch, bufs, 0, 0, kBytes, seedOf(k), stream.get(), &checker));
      }
      uint8_t* src = bufs.a->as<uint8_t>();
      uint8_t* dst = bufs.b->as<uint8_t>();
      cudaStream_t s = stream.get();
      GraphOptions go;
      go.sync = sync;
      PEERLAB_ASSERT_OK_AND_ASSIGN(
          Graph graph,
          Graph::capture(
              s, {&ch},
              [&]() -> Status {
                MemOpBatch batch(s);
                const StreamRef ref = batched ? StreamRef(batch) : StreamRef(s);
                if (me == 0) {
                  fillFromDeviceSeed<<<64, 256, 0, s>>>(src, kBytes, seeds->as<uint64_t>(), index->as<uint32_t>());
                  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA_LAUNCH("fillFromDeviceSeed"));
                  advanceIndex<<<1, 1, 0, s>>>(index->as<uint32_t>());
                  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA_LAUNCH("advanceIndex"));
                  PEERLAB_RETURN_IF_ERROR(p == Protocol::kGet ? ch.sendPost(ref) : ch.sendPost(ref, src, 0, kBytes));
                  PEERLAB_RETURN_IF_ERROR(ch.sendWait(ref));
                  return batch.flush();
                }
                PEERLAB_RETURN_IF_ERROR(p == Protocol::kGet ? ch.recvPost(ref, dst, 0, kBytes) : ch.recvPost(ref));
                PEERLAB_RETURN_IF_ERROR(ch.recvWait(ref));
                return batch.flush();
              },
              go));
      // get / put under kMemOps: the two semaphore operations of each side are memory-operation nodes.
      EXPECT_EQ(graph.memOps(), p != Protocol::kSmSignal && sync == GraphSync::kMemOps ? 2u : 0u);
      for (int r = 0; r < kReplays; ++r, expected += kBytes) {
        // The receiver poisons with exactly this replay's seed: a replay that did not write is caught.
        if (me == 1) PEERLAB_ASSERT_OK(poisonPattern(dst, kBytes, host_seeds[static_cast<size_t>(r)], s));
        PEERLAB_ASSERT_OK(graph.launch(s));
        if (me == 1) PEERLAB_ASSERT_OK(checker.enqueue(dst, kBytes, host_seeds[static_cast<size_t>(r)], s));
      }
      EXPECT_EQ(graph.launches(), static_cast<uint64_t>(kReplays));
      // Eager again after the replays: the host's epochs followed them.
      for (int k = 0; k < kEager; ++k, expected += kBytes) {
        PEERLAB_ASSERT_OK(enqueueMessage(me, ch, bufs, 0, 0, kBytes, seedOf(500 + k), s, &checker));
      }
      PEERLAB_ASSERT_OK(ctx.wait(s, Deadline::afterMs(kRunMs), "graph replays"));
      if (me == 1) {
        PEERLAB_ASSERT_OK_AND_ASSIGN(PatternCheck r, checker.collect(s, Deadline::afterMs(kRunMs)));
        EXPECT_EQ(r.wrong, 0u) << "first bad byte at " << r.first_bad;
        EXPECT_EQ(r.elements, expected);
      }
      if (me == 0) {
        uint32_t replays_seen = 0;
        PEERLAB_ASSERT_OK(
            PEERLAB_CUDA(cudaMemcpy(&replays_seen, index->ptr, sizeof(uint32_t), cudaMemcpyDeviceToHost)));
        EXPECT_EQ(replays_seen, static_cast<uint32_t>(kReplays));
      }
      const bool kernels = sync == GraphSync::kKernels;
      EXPECT_EQ(ch.smsOccupied(kBytes, kernels), p == Protocol::kSmSignal ? smSendBlocks(kBytes) : kernels ? 1 : 0);
    }
  }
  PEERLAB_ASSERT_OK(ctx.deviceErrors());
  PEERLAB_ASSERT_OK(ctx.close(setup()));
}

// A device-initiated sm_signal send (through smView) that names a range outside the receiver's window: the host
// never saw it, so the receiver's kernel checks the LL header, writes nothing and reports invalid_argument.
__global__ void __launch_bounds__(512)
    deviceSendKernel(SmEndpointView v, const uint8_t* src, uint64_t dst_offset, uint64_t bytes) {
  (void)smBlockSend(v, src, dst_offset, bytes);
}

TEST(Zcopy, DeviceInitiatedSendOutsideTheWindowIsRefusedByTheReceiver) {
  PEERLAB_REQUIRE_GPUS(2);
  PEERLAB_TEST_RANKS(2, boot);
  const int me = boot.rank();
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaSetDevice(me)));
  constexpr size_t kWindow = 1 << 20;
  PEERLAB_ASSERT_OK_AND_ASSIGN(Buffers bufs, allocBuffers(me, kWindow, ipc::HandleKind::kLegacy));
  PEERLAB_ASSERT_OK_AND_ASSIGN(Context ctx, Context::create(boot, optionsFor(me), setup()));
  ReleaseOnFailure release{&ctx};
  PEERLAB_ASSERT_OK_AND_ASSIGN(Channel ch, connect(ctx, Protocol::kSmSignal, 2, bufs));
  PEERLAB_ASSERT_OK_AND_ASSIGN(Stream stream, createStream(me));
  // Guard bytes right after the window's end: untouched when the message is refused.
  const uint8_t guard = 0xA5;
  const size_t window = bufs.b->bytes;
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaMemset(bufs.b->ptr, guard, window)));
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaDeviceSynchronize()));
  if (me == 0) {
    cudaFuncAttributes attr{};
    PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(&deviceSendKernel))));
    PEERLAB_ASSERT_OK_AND_ASSIGN(SmEndpointView v, ch.smView());
    // 64 bytes at 16 bytes before the end: the last 48 would land past the window.
    deviceSendKernel<<<1, 512, 0, stream.get()>>>(v, bufs.a->as<uint8_t>(), window - 16, 64);
    PEERLAB_ASSERT_OK(PEERLAB_CUDA_LAUNCH("deviceSendKernel"));
    PEERLAB_ASSERT_OK(ch.accountDeviceCalls(Call::kSendPost, 1));
    PEERLAB_ASSERT_OK(waitStream(stream.get(), Deadline::afterMs(kRunMs), "device-initiated send"));
    PEERLAB_EXPECT_OK(ch.deviceError());
  } else {
    PEERLAB_ASSERT_OK(ch.recvPost(stream.get()));
    PEERLAB_ASSERT_OK(ch.recvWait(stream.get()));
    PEERLAB_ASSERT_OK(waitStream(stream.get(), Deadline::afterMs(kRunMs), "receiving the bad message"));
    const Status err = ch.deviceError();
    EXPECT_EQ(err.code(), StatusCode::kInvalidArgument) << err.toString();
    EXPECT_NE(err.message().find("outside"), std::string::npos) << err.toString();
    std::vector<uint8_t> tail(64);
    PEERLAB_ASSERT_OK(PEERLAB_CUDA(
        cudaMemcpy(tail.data(), bufs.b->as<uint8_t>() + window - 64, tail.size(), cudaMemcpyDeviceToHost)));
    EXPECT_EQ(std::count(tail.begin(), tail.end(), guard), 64) << "the refused message wrote into the window";
  }
  PEERLAB_ASSERT_OK(boot.barrier(setup()));
  PEERLAB_EXPECT_OK(ctx.close(setup()));
}

TEST(Zcopy, RejectsMisuse) {
  PEERLAB_REQUIRE_GPUS(2);
  PEERLAB_TEST_RANKS(2, boot);
  const int me = boot.rank();
  // Plain runtime calls below (cudaMemset, cudaMemcpy) act on the current device: this rank's.
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaSetDevice(me)));
  PEERLAB_ASSERT_OK_AND_ASSIGN(Buffers bufs, allocBuffers(me, 1 << 16, ipc::HandleKind::kLegacy));
  PEERLAB_ASSERT_OK_AND_ASSIGN(Context ctx, Context::create(boot, optionsFor(me), setup()));
  ReleaseOnFailure release{&ctx};
  PEERLAB_ASSERT_OK_AND_ASSIGN(Stream stream, createStream(me));
  cudaStream_t s = stream.get();

  // Both sides claim to be the sender: both learn it, neither hangs.
  ChannelOptions o;
  o.peer = 1 - me;
  o.channel = 0;
  o.protocol = Protocol::kGet;
  o.role = Role::kSender;
  o.window = &bufs.a.get();
  auto both_senders = Channel::create(ctx, o, setup());
  ASSERT_FALSE(both_senders.isOk());
  EXPECT_EQ(both_senders.status().code(), StatusCode::kInvalidArgument) << both_senders.status().toString();
  // Local errors: no such peer, no such channel.
  o.peer = me;
  EXPECT_EQ(Channel::create(ctx, o, setup()).status().code(), StatusCode::kInvalidArgument);
  o.peer = 1 - me;
  o.channel = 99;
  EXPECT_EQ(Channel::create(ctx, o, setup()).status().code(), StatusCode::kInvalidArgument);

  PEERLAB_ASSERT_OK_AND_ASSIGN(Channel get, connect(ctx, Protocol::kGet, 1, bufs));
  PEERLAB_ASSERT_OK_AND_ASSIGN(Channel put, connect(ctx, Protocol::kPut, 2, bufs));
  if (me == 0) {
    EXPECT_EQ(get.recvPost(s).code(), StatusCode::kInvalidArgument);                     // the receiver's call
    EXPECT_EQ(get.sendWait(s).code(), StatusCode::kInvalidArgument);                     // nothing posted yet
    EXPECT_EQ(get.sendPost(s, bufs.a->ptr, 0, 8).code(), StatusCode::kInvalidArgument);  // get: no message here
    EXPECT_EQ(put.sendPost(s).code(), StatusCode::kInvalidArgument);  // put: the sender names the message
    EXPECT_EQ(put.sendPost(s, bufs.a->ptr, (1 << 16) - 4, 8).code(), StatusCode::kInvalidArgument);  // past window
    EXPECT_EQ(put.sendPost(s, nullptr, 0, 8).code(), StatusCode::kInvalidArgument);
    EXPECT_FALSE(put.smView().isOk());
    // A raw capture of a channel call is refused (its epochs could not advance at replay).
    PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal)));
    Status raw = get.sendPost(s);
    cudaGraph_t g = nullptr;
    PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaStreamEndCapture(s, &g)));
    if (g != nullptr) PEERLAB_EXPECT_OK(PEERLAB_CUDA(cudaGraphDestroy(g)));
    EXPECT_EQ(raw.code(), StatusCode::kInvalidArgument) << raw.toString();
    EXPECT_NE(raw.message().find("Graph::capture"), std::string::npos) << raw.message();
  } else {
    EXPECT_EQ(get.sendPost(s).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(get.recvPost(s, bufs.b->ptr, 1 << 16, 1).code(), StatusCode::kInvalidArgument);  // past window
    EXPECT_EQ(put.recvWait(s).code(), StatusCode::kInvalidArgument);                           // nothing posted yet
  }
  // Nothing was enqueued by the rejected calls: one good message still goes through on both channels.
  PEERLAB_ASSERT_OK_AND_ASSIGN(PatternChecker checker, PatternChecker::create(me));
  PEERLAB_ASSERT_OK(enqueueMessage(me, get, bufs, 0, 0, 4096, 11, s, &checker));
  PEERLAB_ASSERT_OK(enqueueMessage(me, put, bufs, 0, 0, 4096, 12, s, &checker));
  PEERLAB_ASSERT_OK(ctx.wait(s, Deadline::afterMs(kRunMs), "messages after rejected calls"));
  if (me == 1) {
    PEERLAB_ASSERT_OK_AND_ASSIGN(PatternCheck r, checker.collect(s, Deadline::afterMs(kRunMs)));
    EXPECT_EQ(r.wrong, 0u);
    EXPECT_EQ(r.elements, 8192u);
  }
  PEERLAB_ASSERT_OK(ctx.close(setup()));
}

// Progress of a rank on stderr (unbuffered: it survives a kill), plus a watchdog: a rank still at one stage after
// `budget` says where it is stuck and leaves with _Exit(6) at once, instead of hanging until the launcher's deadline
// (a CUDA call that blocks inside the driver, a destructor at scope exit, the runtime's teardown at exit).
class StageWatch {
 public:
  StageWatch(int rank, std::chrono::milliseconds budget)
      : rank_(rank), start_(Clock::now()), thread_([this, budget] { watch(budget); }) {}
  StageWatch(const StageWatch&) = delete;
  StageWatch& operator=(const StageWatch&) = delete;
  ~StageWatch() {
    stop_.store(true);
    thread_.join();
  }
  void stage(const char* what) {
    stage_.store(what);
    std::fprintf(stderr, "rank %d +%lld ms: %s\n", rank_, static_cast<long long>(elapsedMs()), what);
  }
  int64_t elapsedMs() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start_).count();
  }
  // Bounds what runs after the test body (GoogleTest's end, static destructors, the CUDA runtime's teardown): a
  // process still alive after `budget` says so and leaves with _Exit(7).
  void watchExit(std::chrono::milliseconds budget) {
    const int rank = rank_;
    std::thread([rank, budget] {
      std::this_thread::sleep_for(budget);
      std::fprintf(stderr, "rank %d: still not exited %lld ms after the test body: leaving with _Exit(7)\n", rank,
                   static_cast<long long>(budget.count()));
      std::fflush(nullptr);
      std::_Exit(7);
    }).detach();
  }

 private:
  using Clock = std::chrono::steady_clock;
  void watch(std::chrono::milliseconds budget) {
    while (!stop_.load()) {
      if (Clock::now() - start_ > budget) {
        std::fprintf(stderr, "rank %d +%lld ms: STUCK at \"%s\" (budget %lld ms): leaving with _Exit(6)\n", rank_,
                     static_cast<long long>(elapsedMs()), stage_.load(), static_cast<long long>(budget.count()));
        std::fflush(nullptr);
        std::_Exit(6);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  int rank_;
  Clock::time_point start_;
  std::atomic<const char*> stage_{"start"};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// What "the survivor exits cleanly" means here, and what this test asserts:
//   1. every wait that depends on the dead peer returns `timeout` within its deadline + 1 s (the host wait notices
//      the peer's exit; the sm_signal kernel gives up at its device deadline and says so in its error words);
//   2. abandon() releases the stream wait that can never be satisfied (a host-side rescue write into this rank's own
//      semaphore word), after which both streams drain within 5 s;
//   3. teardown (channels, context: unmapping the dead peer's page and window, freeing this rank's memory) finishes
//      within 5 s, and the process exits 0 (checked by the parent; the watchdog bounds every stage).
// A stream that cannot drain (a wait no rescue write can release, a kernel without a deadline) can never be cleaned
// up: freeing memory, destroying the context and the runtime's teardown at exit would all wait for it forever. Such
// a process reports and leaves with _Exit (no destructors) at once; here that is a failure (exit code 3).
TEST(Zcopy, PeerDeathTimesOutWithinTheDeadlineAndTheSurvivorExitsCleanly) {
  PEERLAB_REQUIRE_GPUS(2);
  PEERLAB_TEST_RANKS(2, boot);
  const int me = boot.rank();
  StageWatch watch(me, std::chrono::seconds(60));
  watch.stage("setting up");
  // Plain runtime calls below (cudaMemset, cudaMemcpy) act on the current device: this rank's.
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaSetDevice(me)));
  // kVmmFd pages and windows: an imported allocation stays valid after its exporter died.
  auto bufs_or = allocBuffers(me, 1 << 20, ipc::HandleKind::kVmmFd);
  PEERLAB_SKIP_IF_UNAVAILABLE(bufs_or.status());
  Buffers bufs = std::move(bufs_or).value();
  ContextOptions opts = optionsFor(me);
  opts.device_timeout_ns = 1'000'000'000ull;
  PEERLAB_ASSERT_OK_AND_ASSIGN(Context ctx, Context::create(boot, opts, setup()));
  ReleaseOnFailure release{&ctx};
  PEERLAB_ASSERT_OK_AND_ASSIGN(Channel get, connect(ctx, Protocol::kGet, 0, bufs));
  PEERLAB_ASSERT_OK_AND_ASSIGN(Channel sm, connect(ctx, Protocol::kSmSignal, 1, bufs));
  if (me == 1) {
    // Rank 1 exported its page and windows and dies without a word: no destructors, no goodbye.
    watch.stage("connected both channels; exiting now without teardown");
    testing::exitRankAbruptly();
  }
  watch.stage("connected; the peer exits now");
  PEERLAB_ASSERT_OK_AND_ASSIGN(Stream copy_stream, createStream(me));
  PEERLAB_ASSERT_OK_AND_ASSIGN(Stream sm_stream, createStream(me));
  // get: rank 0 sends; its stream waits for a "done" that never comes (the source can never be reused).
  watch.stage("enqueueing get sendPost + sendWait (the stream now waits for the dead peer)");
  PEERLAB_ASSERT_OK(get.sendPost(copy_stream.get()));
  PEERLAB_ASSERT_OK(get.sendWait(copy_stream.get()));
  // sm_signal: rank 0 sends, and its kernel waits for a "free" that never comes (bounded on the device). An LL
  // message only needs the "free" of the message before it, so the first goes out and the second waits. These
  // launches happen while another stream is blocked for good: they must not wait for it (zcopy.h, lazy loading).
  watch.stage("launching the sm_signal send kernels while the get stream is blocked");
  PEERLAB_ASSERT_OK(sm.sendPost(sm_stream.get(), bufs.a->ptr, 0, 4096));
  PEERLAB_ASSERT_OK(sm.sendWait(sm_stream.get()));
  PEERLAB_ASSERT_OK(sm.sendPost(sm_stream.get(), bufs.a->ptr, 0, 4096));

  using Clock = std::chrono::steady_clock;
  auto msSince = [](Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
  };
  constexpr int64_t kDeadlineMs = 3000;
  watch.stage("waiting for the sm_signal stream (deadline 3000 ms)");
  auto t0 = Clock::now();
  Status sm_wait = ctx.wait(sm_stream.get(), Deadline::afterMs(kDeadlineMs), "sm_signal send to a dead peer");
  const auto sm_ms = msSince(t0);
  std::fprintf(stderr, "survivor: sm_signal wait returned after %lld ms: %s\n", static_cast<long long>(sm_ms),
               sm_wait.toString().c_str());
  EXPECT_EQ(sm_wait.code(), StatusCode::kTimeout) << sm_wait.toString();
  EXPECT_LT(sm_ms, kDeadlineMs + 1000);
  // The kernel itself gives up after the device timeout (1 s) and says so in the channel's error words.
  watch.stage("waiting for the sm_signal kernel to reach its device deadline");
  PEERLAB_EXPECT_OK(waitStream(sm_stream.get(), Deadline::afterMs(kDeadlineMs), "the bounded sm_signal kernel"));
  EXPECT_EQ(sm.deviceError().code(), StatusCode::kTimeout) << sm.deviceError().toString();
  EXPECT_FALSE(ctx.deviceErrors().isOk());

  watch.stage("waiting for the get stream (deadline 3000 ms)");
  t0 = Clock::now();
  Status get_wait = ctx.wait(copy_stream.get(), Deadline::afterMs(kDeadlineMs), "get from a dead peer");
  const auto get_ms = msSince(t0);
  std::fprintf(stderr, "survivor: get wait returned after %lld ms: %s\n", static_cast<long long>(get_ms),
               get_wait.toString().c_str());
  EXPECT_EQ(get_wait.code(), StatusCode::kTimeout) << get_wait.toString();
  EXPECT_LT(get_ms, kDeadlineMs + 1000);

  // Recovery: release the blocked stream wait from the host, drain, tear down without the bootstrap.
  watch.stage("abandon: releasing the stream wait from the host");
  Status abandoned = ctx.abandon(Deadline::afterMs(5000));
  watch.stage("draining both streams (5000 ms each)");
  Status drained =
      abandoned.isOk() ? waitStream(copy_stream.get(), Deadline::afterMs(5000), "draining after abandon") : abandoned;
  Status sm_drained = waitStream(sm_stream.get(), Deadline::afterMs(5000), "draining the sm stream");
  if (!drained.isOk() || !sm_drained.isOk()) {
    std::fprintf(stderr,
                 "survivor: a stream cannot drain (%s; %s): leaving without teardown, which would wait for it "
                 "forever\n",
                 drained.toString().c_str(), sm_drained.toString().c_str());
    ADD_FAILURE() << "a stream stayed blocked on the dead peer: " << drained.toString() << "; "
                  << sm_drained.toString();
    std::fflush(nullptr);
    std::_Exit(3);
  }
  EXPECT_EQ(get.sendPost(copy_stream.get()).code(), StatusCode::kInvalidArgument);  // the channel is unusable now

  // Teardown without the bootstrap, timed: channels, context (unmaps the dead peer's page and window, frees this
  // rank's page and counters), streams, buffers.
  watch.stage("tearing down: channels, context, streams, buffers");
  release.ctx = nullptr;
  t0 = Clock::now();
  {
    Channel g = std::move(get);
    Channel m = std::move(sm);
  }
  { Context gone = std::move(ctx); }
  {
    Stream a = std::move(copy_stream);
    Stream b = std::move(sm_stream);
  }
  { Buffers gone = std::move(bufs); }
  const auto teardown_ms = msSince(t0);
  std::fprintf(stderr, "survivor: teardown took %lld ms\n", static_cast<long long>(teardown_ms));
  EXPECT_LT(teardown_ms, 5000);
  watch.stage("done; returning (the parent checks that this rank exits 0)");
  watch.watchExit(std::chrono::seconds(20));
}

}  // namespace
}  // namespace peerlab::zcopy
