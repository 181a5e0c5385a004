#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "reference/core/check.h"
#include "reference/core/devices.h"
#include "reference/core/memory.h"
#include "reference/core/pattern.h"
#include "reference/core/scoped.h"
#include "reference/core/wait.h"
#include "reference/peer/peer.h"
#include "reference/testing/guards.h"
#include "reference/testing/testing.h"

namespace peerlab::peer {
namespace {

constexpr int64_t kWaitMs = 20000;

using testing::Finally;

// Releases streams, events and memory with their own device current: a stream belongs to the context that created
// it, and destroying it while another context is current is an error the driver reports ("CUDA Stream does not
// belong to the expected context").
template <class... T>
void releaseOn(int device, T&... owned) {
  auto guard = ScopedDevice::make(device);
  (owned.reset(), ...);
}

__global__ void readPeerKernel(uint8_t* dst, const uint8_t* src, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    dst[i] = src[i];
  }
}

// A real peer access: a kernel on `reader` loads `owner`'s memory; the bytes are checked on `reader`. Every object
// is created, used and destroyed with its own device current, whatever context the caller has current.
void expectReaderSeesOwner(int reader, int owner) {
  const size_t bytes = (1 << 20) + 13;
  const uint64_t seed = patternSeed(std::random_device{}(), owner, reader, 0xacce55);
  DeviceBuffer remote, local;
  Stream owner_stream, reader_stream;
  Finally release([&] {
    releaseOn(owner, owner_stream, remote);
    releaseOn(reader, reader_stream, local);
  });
  {
    PEERLAB_ASSERT_OK_AND_ASSIGN(auto guard, ScopedDevice::make(owner));
    PEERLAB_ASSERT_OK_AND_ASSIGN(remote, allocDevice(owner, bytes));
    PEERLAB_ASSERT_OK_AND_ASSIGN(owner_stream, createStream(owner));
    PEERLAB_ASSERT_OK(fillPattern(remote->ptr, bytes, seed, owner_stream.get()));
    PEERLAB_ASSERT_OK(waitStream(owner_stream.get(), Deadline::afterMs(kWaitMs), "fill"));
  }
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto guard, ScopedDevice::make(reader));
  PEERLAB_ASSERT_OK_AND_ASSIGN(local, allocDevice(reader, bytes));
  PEERLAB_ASSERT_OK_AND_ASSIGN(reader_stream, createStream(reader));
  PEERLAB_ASSERT_OK(poisonPattern(local->ptr, bytes, seed, reader_stream.get()));
  readPeerKernel<<<64, 256, 0, reader_stream.get()>>>(local->as<uint8_t>(), remote->as<uint8_t>(), bytes);
  PEERLAB_ASSERT_OK(PEERLAB_CUDA_LAUNCH("readPeerKernel"));
  PEERLAB_ASSERT_OK_AND_ASSIGN(PatternCheck check, checkPattern(local->ptr, bytes, seed, reader, reader_stream.get(),
                                                                Deadline::afterMs(kWaitMs)));
  EXPECT_EQ(check.wrong, 0u) << reader << " reading " << owner << ": first bad byte " << check.first_bad;
}

// The raw outcome of enabling from->to, which tells whether it was enabled; restores the found state and device.
cudaError_t rawEnableProbe(int from, int to) {
  auto guard = ScopedDevice::make(from);
  EXPECT_TRUE(guard.isOk());
  const cudaError_t err = cudaDeviceEnablePeerAccess(to, 0);
  (void)cudaGetLastError();
  if (err == cudaSuccess) {
    EXPECT_EQ(cudaDeviceDisablePeerAccess(to), cudaSuccess);
    (void)cudaGetLastError();
  }
  return err;
}

void rawDisable(int from, int to) {
  auto guard = ScopedDevice::make(from);
  ASSERT_TRUE(guard.isOk());
  (void)cudaDeviceDisablePeerAccess(to);
  (void)cudaGetLastError();
}

void rawEnable(int from, int to) {
  auto guard = ScopedDevice::make(from);
  ASSERT_TRUE(guard.isOk());
  const cudaError_t err = cudaDeviceEnablePeerAccess(to, 0);
  (void)cudaGetLastError();
  ASSERT_TRUE(err == cudaSuccess || err == cudaErrorPeerAccessAlreadyEnabled) << describeCudaError(err);
}

// Where the caller stands before a call, to check it stands there again afterwards.
enum class Caller { kDevice0, kUninvolvedDevice, kNoContext };

struct CallerState {
  CUcontext ctx = nullptr;
  int device = -1;
};

std::string callerName(Caller c) {
  switch (c) {
    case Caller::kDevice0:
      return "device 0 current";
    case Caller::kUninvolvedDevice:
      return "last device current";
    case Caller::kNoContext:
      return "no context current";
  }
  return "?";
}

CallerState setCaller(Caller c) {
  const int count = *deviceCount();
  switch (c) {
    case Caller::kDevice0:
      EXPECT_EQ(cudaSetDevice(0), cudaSuccess);
      break;
    case Caller::kUninvolvedDevice:
      EXPECT_EQ(cudaSetDevice(count - 1), cudaSuccess);
      break;
    case Caller::kNoContext:
      EXPECT_TRUE(PEERLAB_CU(cuCtxSetCurrent, nullptr).isOk());
      break;
  }
  CallerState s;
  s.ctx = *currentContext();
  if (c != Caller::kNoContext) s.device = *currentDevice();
  return s;
}

void expectCallerRestored(Caller c, const CallerState& before) {
  EXPECT_EQ(*currentContext(), before.ctx) << callerName(c);
  if (c != Caller::kNoContext) {
    EXPECT_EQ(*currentDevice(), before.device) << callerName(c);
  }
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess) << callerName(c);
  // Leave the thread with a usable context for the next step.
  EXPECT_EQ(cudaSetDevice(0), cudaSuccess);
}

constexpr Caller kCallers[] = {Caller::kDevice0, Caller::kUninvolvedDevice, Caller::kNoContext};

// Test double for the seam: chosen calls fail with chosen errors, the rest are the real calls. A failing call also
// leaves a runtime error behind, as a real failing call does, so the tests see that peerlab clears it.
struct Faults {
  int deny_from = -1, deny_to = -1;  // cudaDeviceCanAccessPeer says no
  cudaError_t can_access_error = cudaSuccess;
  int enable_from = -1, enable_to = -1;
  cudaError_t enable_error = cudaSuccess;
  int disable_from = -1, disable_to = -1;
  cudaError_t disable_error = cudaSuccess;
  CUcontext cu_enable_ctx = nullptr;
  CUresult cu_enable_error = CUDA_SUCCESS;
  CUcontext cu_disable_ctx = nullptr;
  CUresult cu_disable_error = CUDA_SUCCESS;
  bool cu_deny = false;
  int calls = 0;
};

void leaveRuntimeError() {
  (void)cudaSetDevice(-1);
}

cudaError_t faultCanAccess(void* user, int* can, int device, int peer) {
  auto* f = static_cast<Faults*>(user);
  ++f->calls;
  if (f->can_access_error != cudaSuccess) {
    leaveRuntimeError();
    return f->can_access_error;
  }
  if (device == f->deny_from && peer == f->deny_to) {
    *can = 0;
    return cudaSuccess;
  }
  return cudaPeerOps().can_access(nullptr, can, device, peer);
}

cudaError_t faultEnable(void* user, int device, int peer) {
  auto* f = static_cast<Faults*>(user);
  ++f->calls;
  if (device == f->enable_from && peer == f->enable_to) {
    leaveRuntimeError();
    return f->enable_error;
  }
  return cudaPeerOps().enable(nullptr, device, peer);
}

cudaError_t faultDisable(void* user, int device, int peer) {
  auto* f = static_cast<Faults*>(user);
  ++f->calls;
  if (device == f->disable_from && peer == f->disable_to) {
    leaveRuntimeError();
    return f->disable_error;
  }
  return cudaPeerOps().disable(nullptr, device, peer);
}

CUresult faultCuCanAccess(void* user, int* can, CUdevice device, CUdevice peer) {
  auto* f = static_cast<Faults*>(user);
  ++f->calls;
  if (f->cu_deny) {
    *can = 0;
    return CUDA_SUCCESS;
  }
  return cudaPeerOps().cu_can_access(nullptr, can, device, peer);
}

CUresult faultCuEnable(void* user, CUcontext ctx, CUcontext peer) {
  auto* f = static_cast<Faults*>(user);
  ++f->calls;
  if (ctx == f->cu_enable_ctx) return f->cu_enable_error;
  return cudaPeerOps().cu_enable(nullptr, ctx, peer);
}

CUresult faultCuDisable(void* user, CUcontext ctx, CUcontext peer) {
  auto* f = static_cast<Faults*>(user);
  ++f->calls;
  if (ctx == f->cu_disable_ctx) return f->cu_disable_error;
  return cudaPeerOps().cu_disable(nullptr, ctx, peer);
}

PeerOps faultOps(Faults* f) {
  PeerOps ops;
  ops.user = f;
  ops.can_access = faultCanAccess;
  ops.enable = faultEnable;
  ops.disable = faultDisable;
  ops.cu_can_access = faultCuCanAccess;
  ops.cu_enable = faultCuEnable;
  ops.cu_disable = faultCuDisable;
  return ops;
}

void expectState(int a, int b, PeerAccess forward, PeerAccess reverse, const std::string& why) {
  auto st = peerState(a, b);
  ASSERT_TRUE(st.isOk()) << st.status().toString();
  EXPECT_EQ(peerAccessName(st->forward), peerAccessName(forward)) << why;
  EXPECT_EQ(peerAccessName(st->reverse), peerAccessName(reverse)) << why;
}

class PeerAccessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PEERLAB_REQUIRE_GPUS(2);
    PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaSetDevice(0)));
    int can01 = 0, can10 = 0;
    PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaDeviceCanAccessPeer(&can01, 0, 1)));
    PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaDeviceCanAccessPeer(&can10, 1, 0)));
    if (!can01 || !can10) GTEST_SKIP() << "devices 0 and 1 cannot access each other";
    // Every test starts from "disabled both ways", known to peerlab.
    PEERLAB_ASSERT_OK(disablePeerAccess(0, 1));
    ready_ = true;
  }
  void TearDown() override {
    if (ready_) PEERLAB_EXPECT_OK(disablePeerAccess(0, 1));
  }
  bool ready_ = false;
};

TEST_F(PeerAccessTest, EnableMakesBothDirectionsUsable) {
  expectState(0, 1, PeerAccess::kNotEnabled, PeerAccess::kNotEnabled, "after disable");
  for (Caller c : kCallers) {
    PEERLAB_ASSERT_OK(disablePeerAccess(0, 1));
    CallerState before = setCaller(c);
    PEERLAB_ASSERT_OK(enablePeerAccess(0, 1));
    expectCallerRestored(c, before);
  }
  expectState(0, 1, PeerAccess::kEnabled, PeerAccess::kEnabled, "after enable");
  expectState(1, 0, PeerAccess::kEnabled, PeerAccess::kEnabled, "after enable, reversed query");
  expectReaderSeesOwner(0, 1);
  expectReaderSeesOwner(1, 0);
  EXPECT_EQ(rawEnableProbe(0, 1), cudaErrorPeerAccessAlreadyEnabled);
  EXPECT_EQ(rawEnableProbe(1, 0), cudaErrorPeerAccessAlreadyEnabled);
}

TEST_F(PeerAccessTest, EnableIsIdempotentAndLeavesNoStickyError) {
  PEERLAB_ASSERT_OK(enablePeerAccess(0, 1));
  for (int i = 0; i < 3; ++i) {
    PEERLAB_ASSERT_OK(enablePeerAccess(0, 1));
    PEERLAB_ASSERT_OK(enablePeerAccess(1, 0));
    EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
  }
  expectState(0, 1, PeerAccess::kEnabled, PeerAccess::kEnabled, "after repeated enables");
  expectReaderSeesOwner(1, 0);
}

TEST_F(PeerAccessTest, AlreadyEnabledByOtherCodeIsSuccess) {
  rawEnable(0, 1);
  // peerlab did not see that enable: its record still says what it last did.
  expectState(0, 1, PeerAccess::kNotEnabled, PeerAccess::kNotEnabled, "stale record before peerlab touches the pair");
  PEERLAB_ASSERT_OK(enablePeerAccess(0, 1));
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
  // The 704 it met taught it the truth.
  expectState(0, 1, PeerAccess::kEnabled, PeerAccess::kEnabled, "after enable met 704");
}

TEST_F(PeerAccessTest, SameDeviceIsANoOp) {
  Faults f;
  ScopedPeerOps seam(faultOps(&f));
  for (Caller c : kCallers) {
    CallerState before = setCaller(c);
    PEERLAB_ASSERT_OK(enablePeerAccess(1, 1));
    PEERLAB_ASSERT_OK(disablePeerAccess(1, 1));
    expectCallerRestored(c, before);
  }
  EXPECT_EQ(f.calls, 0) << "a device to itself needs no driver call";
  expectState(1, 1, PeerAccess::kEnabled, PeerAccess::kEnabled, "self");
}

TEST_F(PeerAccessTest, InvalidOrdinalsAreInvalidArgument) {
  const int count = *deviceCount();
  for (Status st : {enablePeerAccess(0, count), enablePeerAccess(count + 5, 1), disablePeerAccess(0, count)}) {
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
    EXPECT_EQ(st.message().find('\n'), std::string::npos);
    EXPECT_NE(st.message().find("not a visible device"), std::string::npos) << st.message();
  }
  EXPECT_EQ(peerState(0, count).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
}

TEST_F(PeerAccessTest, DisableIsIdempotent) {
  PEERLAB_ASSERT_OK(enablePeerAccess(0, 1));
  for (Caller c : kCallers) {
    CallerState before = setCaller(c);
    PEERLAB_ASSERT_OK(disablePeerAccess(0, 1));
    PEERLAB_ASSERT_OK(disablePeerAccess(1, 0));
    expectCallerRestored(c, before);
  }
  expectState(0, 1, PeerAccess::kNotEnabled, PeerAccess::kNotEnabled, "after disable");
  EXPECT_EQ(rawEnableProbe(0, 1), cudaSuccess) << "0->1 must really be disabled";
  EXPECT_EQ(rawEnableProbe(1, 0), cudaSuccess) << "1->0 must really be disabled";
}

TEST_F(PeerAccessTest, RefusedByCanAccessPeerInEitherDirection) {
  for (auto [from, to] : {std::pair{0, 1}, std::pair{1, 0}}) {
    for (Caller c : kCallers) {
      Faults f;
      f.deny_from = from;
      f.deny_to = to;
      ScopedPeerOps seam(faultOps(&f));
      CallerState before = setCaller(c);
      Status st = enablePeerAccess(0, 1);
      EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.toString();
      EXPECT_NE(st.message().find("cannot access device " + std::to_string(to)), std::string::npos) << st.message();
      expectCallerRestored(c, before);
      auto state = peerState(0, 1);
      ASSERT_TRUE(state.isOk());
      EXPECT_EQ(from == 0 ? state->forward : state->reverse, PeerAccess::kUnsupported);
      EXPECT_EQ(from == 0 ? state->reverse : state->forward, PeerAccess::kNotEnabled);
    }
  }
  EXPECT_EQ(rawEnableProbe(0, 1), cudaSuccess) << "nothing may have been enabled";
}

TEST_F(PeerAccessTest, CanAccessPeerErrorIsACudaError) {
  Faults f;
  f.can_access_error = cudaErrorUnknown;
  ScopedPeerOps seam(faultOps(&f));
  for (Caller c : kCallers) {
    CallerState before = setCaller(c);
    Status st = enablePeerAccess(0, 1);
    EXPECT_EQ(st.code(), StatusCode::kCudaError) << st.toString();
    EXPECT_NE(st.message().find("cudaErrorUnknown"), std::string::npos) << st.message();
    expectCallerRestored(c, before);
  }
}

// Refusals are `unavailable` with the driver's reason; other failures are `cuda_error`.
struct InjectedError {
  cudaError_t error;
  StatusCode code;
  const char* name;
};
constexpr InjectedError kEnableErrors[] = {
    {cudaErrorPeerAccessUnsupported, StatusCode::kUnavailable, "cudaErrorPeerAccessUnsupported"},
    {cudaErrorMapBufferObjectFailed, StatusCode::kUnavailable, "cudaErrorMapBufferObjectFailed"},
    {cudaErrorTooManyPeers, StatusCode::kUnavailable, "cudaErrorTooManyPeers"},
    {cudaErrorUnknown, StatusCode::kCudaError, "cudaErrorUnknown"},
};

TEST_F(PeerAccessTest, FirstDirectionFailureChangesNothing) {
  for (const auto& e : kEnableErrors) {
    for (Caller c : kCallers) {
      Faults f;
      f.enable_from = 0;
      f.enable_to = 1;
      f.enable_error = e.error;
      ScopedPeerOps seam(faultOps(&f));
      CallerState before = setCaller(c);
      Status st = enablePeerAccess(0, 1);
      EXPECT_EQ(st.code(), e.code) << st.toString();
      EXPECT_NE(st.message().find(e.name), std::string::npos) << st.message();
      EXPECT_NE(st.message().find("nothing changed"), std::string::npos) << st.message();
      expectCallerRestored(c, before);
      expectState(0, 1, PeerAccess::kNotEnabled, PeerAccess::kNotEnabled, e.name);
    }
  }
  EXPECT_EQ(rawEnableProbe(0, 1), cudaSuccess);
  EXPECT_EQ(rawEnableProbe(1, 0), cudaSuccess);
}

TEST_F(PeerAccessTest, SecondDirectionFailureRollsBackTheFirst) {
  for (const auto& e : kEnableErrors) {
    for (Caller c : kCallers) {
      Faults f;
      f.enable_from = 1;
      f.enable_to = 0;
      f.enable_error = e.error;
      ScopedPeerOps seam(faultOps(&f));
      CallerState before = setCaller(c);
      Status st = enablePeerAccess(0, 1);
      EXPECT_EQ(st.code(), e.code) << st.toString();
      EXPECT_NE(st.message().find(e.name), std::string::npos) << st.message();
      EXPECT_NE(st.message().find("0->1 rolled back"), std::string::npos) << st.message();
      expectCallerRestored(c, before);
      expectState(0, 1, PeerAccess::kNotEnabled, PeerAccess::kNotEnabled, e.name);
    }
  }
  // The driver agrees that the rollback really disabled 0->1.
  EXPECT_EQ(rawEnableProbe(0, 1), cudaSuccess);
  EXPECT_EQ(rawEnableProbe(1, 0), cudaSuccess);
}

TEST_F(PeerAccessTest, SecondDirectionFailureKeepsAnAlreadyEnabledFirst) {
  // 0->1 on (enabled by other code), 1->0 off.
  rawEnable(0, 1);
  Faults f;
  f.enable_from = 1;
  f.enable_to = 0;
  f.enable_error = cudaErrorTooManyPeers;
  ScopedPeerOps seam(faultOps(&f));
  for (Caller c : kCallers) {
    CallerState before = setCaller(c);
    Status st = enablePeerAccess(0, 1);
    EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.toString();
    EXPECT_NE(st.message().find("0->1 was already enabled and stays enabled"), std::string::npos) << st.message();
    expectCallerRestored(c, before);
  }
  expectState(0, 1, PeerAccess::kEnabled, PeerAccess::kNotEnabled, "first kept, second refused");
  EXPECT_EQ(rawEnableProbe(0, 1), cudaErrorPeerAccessAlreadyEnabled);
  EXPECT_EQ(rawEnableProbe(1, 0), cudaSuccess);
}

TEST_F(PeerAccessTest, FailedRollbackIsReportedAndStateBecomesUnknown) {
  Faults f;
  f.enable_from = 1;
  f.enable_to = 0;
  f.enable_error = cudaErrorTooManyPeers;
  f.disable_from = 0;
  f.disable_to = 1;
  f.disable_error = cudaErrorUnknown;
  const uint64_t generation = peerAccessGeneration();
  {
    ScopedPeerOps seam(faultOps(&f));
    for (Caller c : kCallers) {
      // The previous round left 0->1 really enabled; start each round from "off" so 0->1 is newly enabled.
      rawDisable(0, 1);
      CallerState before = setCaller(c);
      Status st = enablePeerAccess(0, 1);
      EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.toString();
      EXPECT_NE(st.message().find("rolling back 0->1 failed"), std::string::npos) << st.message();
      EXPECT_NE(st.message().find("cudaErrorUnknown"), std::string::npos) << st.message();
      expectCallerRestored(c, before);
      expectState(0, 1, PeerAccess::kUnknown, PeerAccess::kNotEnabled, "rollback failed");
    }
  }
  EXPECT_GT(peerAccessGeneration(), generation);
  // The injected disable failure left 0->1 really enabled; the real disable cleans up.
  EXPECT_EQ(rawEnableProbe(0, 1), cudaErrorPeerAccessAlreadyEnabled);
  PEERLAB_ASSERT_OK(disablePeerAccess(0, 1));
  expectState(0, 1, PeerAccess::kNotEnabled, PeerAccess::kNotEnabled, "after cleanup");
}

TEST_F(PeerAccessTest, DisableFailureIsReportedForBothDirectionsAttempted) {
  PEERLAB_ASSERT_OK(enablePeerAccess(0, 1));
  Faults f;
  f.disable_from = 0;
  f.disable_to = 1;
  f.disable_error = cudaErrorUnknown;
  {
    ScopedPeerOps seam(faultOps(&f));
    CallerState before = setCaller(Caller::kUninvolvedDevice);
    Status st = disablePeerAccess(0, 1);
    EXPECT_EQ(st.code(), StatusCode::kCudaError) << st.toString();
    expectCallerRestored(Caller::kUninvolvedDevice, before);
  }
  expectState(0, 1, PeerAccess::kUnknown, PeerAccess::kNotEnabled, "0->1 failed, 1->0 still attempted");
}

// Driver-API variant on the primary contexts, retained by the test.
class ContextPeerAccessTest : public PeerAccessTest {
 protected:
  void SetUp() override {
    PeerAccessTest::SetUp();
    if (!ready_) return;
    for (int d = 0; d < 2; ++d) {
      PEERLAB_ASSERT_OK(PEERLAB_CU(cuDeviceGet, &dev_[d], d));
      PEERLAB_ASSERT_OK(PEERLAB_CU(cuDevicePrimaryCtxRetain, &ctx_[d], dev_[d]));
    }
  }
  void TearDown() override {
    PeerAccessTest::TearDown();
    for (int d = 0; d < 2; ++d) {
      if (!ctx_[d]) continue;
      PEERLAB_EXPECT_OK(PEERLAB_CU(cuDevicePrimaryCtxRelease, dev_[d]));
      // The runtime holds its own reference (it initialized these contexts in SetUp): releasing the test's must not
      // destroy the context in which the runtime keeps its streams, events and memory.
      unsigned flags = 0;
      int active = 0;
      PEERLAB_EXPECT_OK(PEERLAB_CU(cuDevicePrimaryCtxGetState, dev_[d], &flags, &active));
      EXPECT_EQ(active, 1) << "primary context of device " << d << " was destroyed by the test's release";
    }
  }
  // Current context set to `ctx` (nullptr: none); returns it.
  CUcontext setContext(CUcontext ctx) {
    EXPECT_TRUE(PEERLAB_CU(cuCtxSetCurrent, ctx).isOk());
    return ctx;
  }
  CUdevice dev_[2] = {0, 0};
  CUcontext ctx_[2] = {nullptr, nullptr};
};

TEST_F(ContextPeerAccessTest, EnableRestoresTheExactContextAndWorks) {
  for (CUcontext current : {static_cast<CUcontext>(nullptr), ctx_[0], ctx_[1]}) {
    PEERLAB_ASSERT_OK(disableContextPeerAccess(ctx_[0], ctx_[1]));
    setContext(current);
    PEERLAB_ASSERT_OK(enableContextPeerAccess(ctx_[0], ctx_[1]));
    EXPECT_EQ(*currentContext(), current);
    PEERLAB_ASSERT_OK(enableContextPeerAccess(ctx_[1], ctx_[0]));  // already enabled: success
    EXPECT_EQ(*currentContext(), current);
    EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
  }
  setContext(ctx_[0]);
  auto st = contextPeerState(ctx_[0], ctx_[1]);
  ASSERT_TRUE(st.isOk()) << st.status().toString();
  EXPECT_EQ(st->forward, PeerAccess::kEnabled);
  EXPECT_EQ(st->reverse, PeerAccess::kEnabled);
  // Primary contexts are what the runtime uses: the device view agrees and the access is real.
  expectState(0, 1, PeerAccess::kEnabled, PeerAccess::kEnabled, "runtime view of the primary contexts");
  expectReaderSeesOwner(0, 1);
  expectReaderSeesOwner(1, 0);
}

// Peer reads through the primary contexts, again and again, with the runtime's device and the driver's current
// context disagreeing in every way the tests above leave them: every stream, event and allocation must live and die
// in its own context.
TEST_F(ContextPeerAccessTest, PeerReadsRepeatFromEveryCurrentContext) {
  PEERLAB_ASSERT_OK(enableContextPeerAccess(ctx_[0], ctx_[1]));
  for (int round = 0; round < 4; ++round) {
    for (CUcontext current : {ctx_[0], ctx_[1], static_cast<CUcontext>(nullptr)}) {
      setContext(current);
      expectReaderSeesOwner(0, 1);
      expectReaderSeesOwner(1, 0);
      EXPECT_EQ(*currentContext(), current);
      EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
    }
  }
  setContext(ctx_[0]);
}

TEST_F(ContextPeerAccessTest, NullAndSameContexts) {
  EXPECT_EQ(enableContextPeerAccess(ctx_[0], nullptr).code(), StatusCode::kInvalidArgument);
  Faults f;
  ScopedPeerOps seam(faultOps(&f));
  setContext(ctx_[1]);
  PEERLAB_EXPECT_OK(enableContextPeerAccess(ctx_[0], ctx_[0]));
  EXPECT_EQ(f.calls, 0);
  EXPECT_EQ(*currentContext(), ctx_[1]);
}

TEST_F(ContextPeerAccessTest, RefusedByCanAccessPeer) {
  Faults f;
  f.cu_deny = true;
  ScopedPeerOps seam(faultOps(&f));
  setContext(nullptr);
  Status st = enableContextPeerAccess(ctx_[0], ctx_[1]);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.toString();
  EXPECT_NE(st.message().find("cuDeviceCanAccessPeer"), std::string::npos) << st.message();
  EXPECT_EQ(*currentContext(), nullptr);
  setContext(ctx_[0]);
  EXPECT_EQ(rawEnableProbe(0, 1), cudaSuccess);
}

TEST_F(ContextPeerAccessTest, SecondDirectionFailureRollsBackTheFirst) {
  for (CUresult err : {CUDA_ERROR_TOO_MANY_PEERS, CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, CUDA_ERROR_UNKNOWN}) {
    Faults f;
    f.cu_enable_ctx = ctx_[1];  // b->a fails
    f.cu_enable_error = err;
    ScopedPeerOps seam(faultOps(&f));
    for (CUcontext current : {static_cast<CUcontext>(nullptr), ctx_[1]}) {
      setContext(current);
      Status st = enableContextPeerAccess(ctx_[0], ctx_[1]);
      EXPECT_EQ(st.code(), err == CUDA_ERROR_UNKNOWN ? StatusCode::kCudaError : StatusCode::kUnavailable)
          << st.toString();
      EXPECT_NE(st.message().find("rolled back"), std::string::npos) << st.message();
      EXPECT_EQ(*currentContext(), current);
      auto state = contextPeerState(ctx_[0], ctx_[1]);
      ASSERT_TRUE(state.isOk());
      EXPECT_EQ(state->forward, PeerAccess::kNotEnabled);
      EXPECT_EQ(state->reverse, PeerAccess::kNotEnabled);
    }
  }
  // The driver agrees: a->b is off.
  setContext(ctx_[0]);
  const CUresult probe = PEERLAB_DRIVER_CALL(cuCtxEnablePeerAccess, ctx_[1], 0);
  EXPECT_EQ(probe, CUDA_SUCCESS) << describeCuResult(probe);
  PEERLAB_EXPECT_OK(PEERLAB_CU(cuCtxDisablePeerAccess, ctx_[1]));
}

TEST_F(ContextPeerAccessTest, FailedRollbackIsReported) {
  Faults f;
  f.cu_enable_ctx = ctx_[1];
  f.cu_enable_error = CUDA_ERROR_TOO_MANY_PEERS;
  f.cu_disable_ctx = ctx_[0];
  f.cu_disable_error = CUDA_ERROR_UNKNOWN;
  {
    ScopedPeerOps seam(faultOps(&f));
    setContext(ctx_[1]);
    Status st = enableContextPeerAccess(ctx_[0], ctx_[1]);
    EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.toString();
    EXPECT_NE(st.message().find("rolling back"), std::string::npos) << st.message();
    EXPECT_EQ(*currentContext(), ctx_[1]);
    auto state = contextPeerState(ctx_[0], ctx_[1]);
    ASSERT_TRUE(state.isOk());
    EXPECT_EQ(state->forward, PeerAccess::kUnknown);
  }
  PEERLAB_ASSERT_OK(disableContextPeerAccess(ctx_[0], ctx_[1]));
}

TEST(PeerState, ReportsUnsupportedExactlyWhereCanAccessPeerSaysNo) {
  PEERLAB_REQUIRE_GPUS(2);
  const int count = *deviceCount();
  for (int a = 0; a < count; ++a) {
    for (int b = 0; b < count; ++b) {
      auto st = peerState(a, b);
      ASSERT_TRUE(st.isOk()) << st.status().toString();
      if (a == b) {
        EXPECT_EQ(st->forward, PeerAccess::kEnabled);
        continue;
      }
      int can = 0;
      PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaDeviceCanAccessPeer(&can, a, b)));
      if (!can) {
        EXPECT_EQ(st->forward, PeerAccess::kUnsupported);
      } else {
        EXPECT_NE(st->forward, PeerAccess::kUnsupported);
      }
    }
  }
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
}

TEST(PeerAccessAllPairs, EveryPairEnablesAndIsReallyUsable) {
  PEERLAB_REQUIRE_GPUS(2);
  const int count = *deviceCount();
  int checked = 0;
  for (int a = 0; a < count; ++a) {
    for (int b = a + 1; b < count; ++b) {
      Status st = enablePeerAccess(a, b);
      if (st.code() == StatusCode::kUnavailable) continue;
      PEERLAB_ASSERT_OK(st);
      expectReaderSeesOwner(a, b);
      expectReaderSeesOwner(b, a);
      ++checked;
    }
  }
  if (checked == 0) GTEST_SKIP() << "no pair of visible devices supports peer access";
}

}  // namespace
}  // namespace peerlab::peer
