// The transports with GPUs: VRAM to VRAM between two processes on two GPUs through each library found, verified on
// the GPU that owns the destination, and the stream-ordered completion (also captured into a CUDA graph).
#include <gtest/gtest.h>

#include "reference/core/check.h"
#include "reference/core/devices.h"
#include "reference/core/memory.h"
#include "reference/core/pattern.h"
#include "reference/core/scoped.h"
#include "reference/core/wait.h"
#include "reference/testing/guards.h"
#include "reference/testing/rank_test.h"
#include "reference/testing/testing.h"
#include "reference/transport/completion.h"
#include "reference/transport/transport.h"

namespace peerlab::transport {
namespace {

constexpr size_t kBytes = size_t{64} << 20;

struct Side {
  int device = -1;
  DeviceBuffer src, dst;
  Stream stream;
};

StatusOr<Side> makeSide(int device) {
  Side s;
  s.device = device;
  PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(device));
  PEERLAB_ASSIGN_OR_RETURN(s.src, allocDevice(device, kBytes));
  PEERLAB_ASSIGN_OR_RETURN(s.dst, allocDevice(device, kBytes));
  PEERLAB_ASSIGN_OR_RETURN(s.stream, createStream(device));
  return s;
}

// Rank r on GPU r. Rank 0 writes (with a notification) into rank 1's dst, rank 1 reads rank 0's src into its own
// second half; rank 1 checks both on its GPU.
// Why `library` cannot move GPU memory on this machine ("" when it can): not found, or a UCX built without CUDA (no
// ucx/libuct_cuda.so beside libucp; the endpoint rightly refuses GPU memory there, which the CPU tests check).
std::string unusableForGpuMemory(Library library) {
  const Found found = findLibrary(library);
  if (!found.found) return found.describe(library);
  if (library == Library::kUcx && !found.cuda_module) {
    return found.describe(library) +
           ": a UCX without CUDA support (no ucx/libuct_cuda.so beside it); set "
           "PEERLAB_UCX_DIR to a UCX built with CUDA (ci/transport_deps.sh brings one)";
  }
  return "";
}

void vramRoundTrip(Bootstrap& boot, Library library, WaitMode mode) {
  if (const std::string why = unusableForGpuMemory(library); !why.empty()) GTEST_SKIP() << why;
  const int me = boot.rank();
  auto side = makeSide(me);
  ASSERT_TRUE(side.isOk()) << side.status().toString();
  const uint64_t seed_w = patternSeed(11, 0, 1, static_cast<uint64_t>(library) * 2 + 1);
  const uint64_t seed_r = patternSeed(11, 0, 1, static_cast<uint64_t>(library) * 2 + 2);
  cudaStream_t s = side->stream.get();
  if (me == 0) {
    ASSERT_TRUE(fillPattern(side->src->ptr, kBytes, seed_w, s).isOk());
    ASSERT_TRUE(fillPattern(side->dst->ptr, kBytes, seed_r, s).isOk());
  } else {
    ASSERT_TRUE(poisonPattern(side->dst->ptr, kBytes, seed_w, s).isOk());
    ASSERT_TRUE(poisonPattern(side->src->ptr, kBytes, seed_r, s).isOk());
  }
  ASSERT_TRUE(waitStream(s, Deadline::afterMs(10'000), "pattern").isOk());
  EndpointOptions o;
  o.library = library;
  o.peer = 1 - me;
  o.regions = {{side->src->ptr, kBytes, MemoryKind::kDevice, me}, {side->dst->ptr, kBytes, MemoryKind::kDevice, me}};
  o.deadline = Deadline::afterMs(60'000);
  o.progress_thread = true;
  o.progress_device = me;
  auto ep = Endpoint::connect(boot, o);
  ASSERT_TRUE(ep.isOk()) << ep.status().toString();
  const Deadline d = Deadline::afterMs(20'000);
  if (me == 0) {
    auto id = (*ep)->prepare({Op::kWrite, 0, 0, 1, 0, kBytes, true});
    ASSERT_TRUE(id.isOk()) << id.status().toString();
    auto t = (*ep)->post(*id);
    ASSERT_TRUE(t.isOk()) << t.status().toString();
    ASSERT_TRUE((*ep)->wait(*t, mode, d).isOk());
  } else {
    ASSERT_TRUE((*ep)->waitNotifications(1, mode, d).isOk());
    auto id = (*ep)->prepare({Op::kRead, 0, 0, 1, 0, kBytes, false});
    ASSERT_TRUE(id.isOk()) << id.status().toString();
    auto t = (*ep)->post(*id);
    ASSERT_TRUE(t.isOk());
    ASSERT_TRUE((*ep)->wait(*t, mode, d).isOk());
    auto w = checkPattern(side->dst->ptr, kBytes, seed_w, me, s, d, 8);
    ASSERT_TRUE(w.isOk());
    EXPECT_EQ(w->wrong, 0u) << "write: first bad byte " << w->first_bad;
    auto r = checkPattern(side->src->ptr, kBytes, seed_r, me, s, d, 8);
    ASSERT_TRUE(r.isOk());
    EXPECT_EQ(r->wrong, 0u) << "read: first bad byte " << r->first_bad;
  }
  ASSERT_TRUE(boot.barrier(Deadline::afterMs(20'000)).isOk());
}

TEST(TransportGpu, UcxVramBetweenTwoGpus) {
  PEERLAB_REQUIRE_GPUS(2);
  PEERLAB_TEST_RANKS(2, boot);
  vramRoundTrip(boot, Library::kUcx, WaitMode::kSpin);
}

TEST(TransportGpu, NixlVramBetweenTwoGpus) {
  PEERLAB_REQUIRE_GPUS(2);
  PEERLAB_TEST_RANKS(2, boot);
  vramRoundTrip(boot, Library::kNixl, WaitMode::kProgressThread);
}

// Rank 0 writes into rank 1's buffer; its stream waits for the transfer through StreamCompletion and then copies
// the source onto itself (a marker kernel would do): a graph captured around the wait replays it.
void streamCompletion(Bootstrap& boot, Library library, bool graph) {
  if (const std::string why = unusableForGpuMemory(library); !why.empty()) GTEST_SKIP() << why;
  const int me = boot.rank();
  auto side = makeSide(me);
  ASSERT_TRUE(side.isOk()) << side.status().toString();
  EndpointOptions o;
  o.library = library;
  o.peer = 1 - me;
  o.regions = {{side->src->ptr, kBytes, MemoryKind::kDevice, me}, {side->dst->ptr, kBytes, MemoryKind::kDevice, me}};
  o.deadline = Deadline::afterMs(60'000);
  o.progress_thread = true;
  o.progress_device = me;
  auto ep = Endpoint::connect(boot, o);
  ASSERT_TRUE(ep.isOk()) << ep.status().toString();
  if (me == 0) {
    auto sc = StreamCompletion::create(**ep, me);
    ASSERT_TRUE(sc.isOk()) << sc.status().toString();
    PinnedBuffer seen;
    auto pinned = allocPinned(sizeof(uint32_t), cudaHostAllocMapped);
    ASSERT_TRUE(pinned.isOk());
    seen = std::move(pinned).value();
    *seen->as<volatile uint32_t>() = 0;
    void* seen_dev = nullptr;
    ASSERT_EQ(cudaHostGetDevicePointer(&seen_dev, seen->ptr, 0), cudaSuccess);
    auto id = (*ep)->prepare({Op::kWrite, 0, 0, 1, 0, kBytes, false});
    ASSERT_TRUE(id.isOk());
    auto t = (*ep)->post(*id);
    ASSERT_TRUE(t.isOk());
    cudaStream_t s = side->stream.get();
    auto enqueue = [&]() -> Status {
      PEERLAB_RETURN_IF_ERROR(sc->enqueueWait(*t, s));
      return PEERLAB_CU(cuStreamWriteValue32, reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(seen_dev),
                        7u, CU_STREAM_WRITE_VALUE_DEFAULT);
    };
    if (graph) {
      cudaGraph_t g = nullptr;
      ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
      const Status st = enqueue();
      ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
      ASSERT_TRUE(st.isOk()) << st.toString();
      cudaGraphExec_t exec = nullptr;
      ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
      ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(g);
    } else {
      ASSERT_TRUE(enqueue().isOk());
    }
    ASSERT_TRUE(waitStream(s, Deadline::afterMs(20'000), "stream completion").isOk());
    EXPECT_EQ(*seen->as<volatile uint32_t>(), 7u);
    EXPECT_GE(sc->published(), static_cast<uint32_t>(*t));
  }
  ASSERT_TRUE(boot.barrier(Deadline::afterMs(20'000)).isOk());
}

TEST(TransportGpu, StreamCompletionOrdersGpuWorkAfterTheTransfer) {
  PEERLAB_REQUIRE_GPUS(2);
  PEERLAB_TEST_RANKS(2, boot);
  streamCompletion(boot, Library::kUcx, false);
}

TEST(TransportGpu, StreamCompletionAfterANixlWrite) {
  PEERLAB_REQUIRE_GPUS(2);
  PEERLAB_TEST_RANKS(2, boot);
  streamCompletion(boot, Library::kNixl, false);
}

TEST(TransportGpu, StreamCompletionCapturesIntoAGraph) {
  PEERLAB_REQUIRE_GPUS(2);
  PEERLAB_TEST_RANKS(2, boot);
  streamCompletion(boot, Library::kUcx, true);
}

}  // namespace
}  // namespace peerlab::transport
