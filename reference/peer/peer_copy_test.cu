#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <optional>
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
#include "reference/peer/copy.h"
#include "reference/peer/peer.h"
#include "reference/testing/guards.h"
#include "reference/testing/testing.h"

namespace peerlab::peer {
namespace {

constexpr int64_t kWaitMs = 30000;
constexpr size_t kGuard = 64;  // bytes kept around every region, to catch writes outside it
constexpr size_t kBig = (size_t{64} << 20) + 5;
constexpr CopyPath kAllPaths[] = {CopyPath::kAuto, CopyPath::kCopyEngine, CopyPath::kSmPull, CopyPath::kSmPush,
                                  CopyPath::kStaged};

// Waits for `stream` with its device current (the event that waitStream records must belong to that device).
Status syncStream(cudaStream_t stream, const char* what) {
  int device = -1;
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaStreamGetDevice(stream, &device)));
  PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(device));
  return waitStream(stream, Deadline::afterMs(kWaitMs), what);
}

uint64_t runSeed() {
  static const uint64_t seed = std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32);
  return seed;
}

using testing::Finally;

// Releases streams, events and memory with their own device current (a stream belongs to its device's context).
template <class... T>
void releaseOn(int device, T&... owned) {
  auto guard = ScopedDevice::make(device);
  (owned.reset(), ...);
}

// Per device: a stream, a pattern checker, and one source and one destination allocation, released with the device
// current.
struct DeviceKit {
  int device = -1;
  Stream stream;
  std::optional<PatternChecker> checker;
  DeviceBuffer src;
  DeviceBuffer dst;

  DeviceKit() = default;
  DeviceKit(DeviceKit&&) = default;
  DeviceKit& operator=(DeviceKit&&) = delete;
  ~DeviceKit() {
    if (device < 0 || !(stream || checker || src || dst)) return;
    releaseOn(device, stream, checker, src, dst);
  }
};

// Kits for devices [0, count), each with buffers for regions of up to `max_bytes` at any offset below 16.
StatusOr<std::vector<DeviceKit>> makeKits(int count, size_t max_bytes) {
  std::vector<DeviceKit> kits(count);
  const size_t capacity = max_bytes + 2 * kGuard + 32;
  for (int d = 0; d < count; ++d) {
    kits[d].device = d;
    PEERLAB_ASSIGN_OR_RETURN(kits[d].stream, createStream(d));
    PEERLAB_ASSIGN_OR_RETURN(PatternChecker checker, PatternChecker::create(d));
    kits[d].checker.emplace(std::move(checker));
    PEERLAB_ASSIGN_OR_RETURN(kits[d].src, allocDevice(d, capacity));
    PEERLAB_ASSIGN_OR_RETURN(kits[d].dst, allocDevice(d, capacity));
  }
  return kits;
}

struct CopyCase {
  CopyPath path;
  int src;
  int dst;
  size_t bytes;
  size_t src_off;
  size_t dst_off;
};

std::string describe(const CopyCase& c) {
  return std::string(copyPathName(c.path)) + " " + std::to_string(c.src) + "->" + std::to_string(c.dst) + " " +
         std::to_string(c.bytes) + " bytes, src+" + std::to_string(c.src_off) + " dst+" + std::to_string(c.dst_off);
}

uint64_t saltFor(const CopyCase& c, uint64_t extra) {
  return mix64(static_cast<uint64_t>(c.path) ^ (c.bytes << 8) ^ (c.src_off << 48) ^ (c.dst_off << 56) ^ extra);
}

// Source region: the seeded pattern, surrounded by another pattern. Destination: a guard pattern everywhere and the
// region poisoned with the complement of the expected bytes. Waits until both are written.
struct Prepared {
  uint8_t* src_region;
  uint8_t* dst_region;
  uint64_t seed;
  uint64_t guard_seed;
};

StatusOr<Prepared> prepareCase(DeviceKit& s, DeviceKit& d, const CopyCase& c, uint64_t salt) {
  Prepared p;
  p.src_region = s.src->as<uint8_t>() + kGuard + c.src_off;
  p.dst_region = d.dst->as<uint8_t>() + kGuard + c.dst_off;
  p.seed = patternSeed(runSeed(), c.src, c.dst, salt);
  p.guard_seed = mix64(p.seed ^ 0x6a7264ull);
  PEERLAB_RETURN_IF_ERROR(fillPattern(s.src->ptr, s.src->bytes, mix64(p.seed ^ 0x73726full), s.stream.get()));
  PEERLAB_RETURN_IF_ERROR(fillPattern(p.src_region, c.bytes, p.seed, s.stream.get()));
  PEERLAB_RETURN_IF_ERROR(fillPattern(d.dst->ptr, d.dst->bytes, p.guard_seed, d.stream.get()));
  PEERLAB_RETURN_IF_ERROR(poisonPattern(p.dst_region, c.bytes, p.seed, d.stream.get()));
  PEERLAB_RETURN_IF_ERROR(syncStream(s.stream.get(), "source setup"));
  return p;
}

// Checks on the destination's owner: the region holds the pattern, the guards around it are untouched.
void expectCopied(DeviceKit& d, const CopyCase& c, const Prepared& p, cudaStream_t stream) {
  PatternChecker& checker = *d.checker;
  PEERLAB_ASSERT_OK(checker.enqueue(p.dst_region, c.bytes, p.seed, stream));
  PEERLAB_ASSERT_OK_AND_ASSIGN(PatternCheck region, checker.collect(stream, Deadline::afterMs(kWaitMs)));
  EXPECT_EQ(region.elements, c.bytes) << describe(c);
  EXPECT_EQ(region.wrong, 0u) << describe(c) << ": first bad byte at " << region.first_bad;
  const size_t before = kGuard + c.dst_off;
  const size_t after_at = before + c.bytes;
  PEERLAB_ASSERT_OK(checker.enqueue(d.dst->ptr, before, p.guard_seed, stream));
  PEERLAB_ASSERT_OK(
      checker.enqueue(d.dst->as<uint8_t>() + after_at, d.dst->bytes - after_at, p.guard_seed, stream, 1, after_at));
  PEERLAB_ASSERT_OK_AND_ASSIGN(PatternCheck guards, checker.collect(stream, Deadline::afterMs(kWaitMs)));
  EXPECT_EQ(guards.wrong, 0u) << describe(c) << ": wrote outside the destination, first bad guard byte "
                              << guards.first_bad;
}

// Copies on a stream of the destination device and verifies; returns the path that ran.
CopyPath runCase(PeerCopier& copier, std::vector<DeviceKit>& kits, const CopyCase& c, uint64_t extra_salt = 0) {
  DeviceKit& s = kits[c.src];
  DeviceKit& d = kits[c.dst];
  auto prepared = prepareCase(s, d, c, saltFor(c, extra_salt));
  EXPECT_TRUE(prepared.isOk()) << prepared.status().toString();
  if (!prepared.isOk()) return CopyPath::kAuto;
  auto ran = copier.copy(prepared->dst_region, c.dst, prepared->src_region, c.src, c.bytes, d.stream.get(), c.path);
  EXPECT_TRUE(ran.isOk()) << describe(c) << ": " << ran.status().toString();
  if (!ran.isOk()) return CopyPath::kAuto;
  expectCopied(d, c, *prepared, d.stream.get());
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess) << describe(c);
  return *ran;
}

bool peerPossible(int a, int b) {
  int ab = 0, ba = 0;
  if (cudaDeviceCanAccessPeer(&ab, a, b) != cudaSuccess || cudaDeviceCanAccessPeer(&ba, b, a) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return ab && ba;
}

constexpr std::pair<size_t, size_t> kOffsets[] = {{0, 0}, {0, 5}, {3, 0}, {7, 7}, {1, 14}, {13, 2}, {8, 4}, {15, 15}};

TEST(PeerCopy, EveryPathAtEverySizeAndMisalignment) {
  PEERLAB_REQUIRE_GPUS(2);
  if (!peerPossible(0, 1)) GTEST_SKIP() << "devices 0 and 1 cannot access each other";
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto kits, makeKits(2, kBig));
  PEERLAB_ASSERT_OK_AND_ASSIGN(PeerCopier copier, PeerCopier::create());
  for (CopyPath path : kAllPaths) {
    for (size_t bytes : {size_t{1}, size_t{4097}, kBig}) {
      for (auto [so, dof] : kOffsets) {
        const CopyCase c{path, 0, 1, bytes, so, dof};
        const CopyPath ran = runCase(copier, kits, c);
        EXPECT_EQ(ran, path == CopyPath::kAuto ? CopyPath::kCopyEngine : path) << describe(c);
      }
    }
  }
}

TEST(PeerCopy, EveryOrderedPair) {
  PEERLAB_REQUIRE_GPUS(2);
  const int count = *deviceCount();
  const size_t max_bytes = (size_t{1} << 20) + 3;
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto kits, makeKits(count, max_bytes));
  PEERLAB_ASSERT_OK_AND_ASSIGN(PeerCopier copier, PeerCopier::create());
  for (int s = 0; s < count; ++s) {
    for (int d = 0; d < count; ++d) {
      if (s == d) continue;
      const bool peer = peerPossible(s, d);
      for (CopyPath path : kAllPaths) {
        if (!peer && path != CopyPath::kAuto && path != CopyPath::kStaged) continue;
        for (size_t bytes : {size_t{4097}, max_bytes}) {
          const CopyCase c{path, s, d, bytes, 3, 11};
          const CopyPath ran = runCase(copier, kits, c);
          const CopyPath want = path == CopyPath::kAuto ? (peer ? CopyPath::kCopyEngine : CopyPath::kStaged) : path;
          EXPECT_EQ(ran, want) << describe(c);
        }
      }
    }
  }
}

bool bulkCapable(int device) {
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return major >= 9;
}

TEST(PeerCopy, SmKernelsAtEveryConfigurationAndSourceShift) {
  PEERLAB_REQUIRE_GPUS(2);
  if (!peerPossible(0, 1)) GTEST_SKIP() << "devices 0 and 1 cannot access each other";
  const size_t bytes = (size_t{1} << 20) + 37;
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto kits, makeKits(2, bytes));
  PEERLAB_ASSERT_OK_AND_ASSIGN(PeerCopier copier, PeerCopier::create());
  for (int unroll : kSmCopyUnrolls) {
    for (int hints : {0, 1, 2}) {
      for (int threads : {64, 1024}) {
        SmCopyConfig config;
        config.kernel = SmKernel::kVector;
        config.unroll = unroll;
        config.hints = hints;
        config.threads_per_block = threads;
        config.blocks_per_sm = threads == 64 ? 1 : 2;
        config.sms = threads == 64 ? 7 : 0;
        PEERLAB_ASSERT_OK(copier.setSmConfig(config));
        SCOPED_TRACE(formatSmCopyConfig(config));
        for (CopyPath path : {CopyPath::kSmPull, CopyPath::kSmPush}) {
          // Every source shift against an aligned and a misaligned destination.
          for (size_t so = 0; so < 16; ++so) {
            for (size_t dof : {size_t{0}, size_t{5}}) {
              runCase(copier, kits, CopyCase{path, 0, 1, bytes, so, dof},
                      static_cast<uint64_t>(unroll * 8 + threads + 4096 * hints));
            }
          }
        }
      }
    }
  }
}

// The bulk kernel: chunks smaller and larger than the stage ring, shares from zero chunks per block (more blocks
// than chunks) to many (the ring wraps many times), a partial last chunk, head and tail bytes; equally aligned source
// and destination run it, the other alignments fall back to the vector kernel and must be just as right.
TEST(PeerCopy, BulkKernelAtEveryChunkStageAndSize) {
  PEERLAB_REQUIRE_GPUS(2);
  if (!peerPossible(0, 1)) GTEST_SKIP() << "devices 0 and 1 cannot access each other";
  const bool capable = bulkCapable(0) && bulkCapable(1);
  const size_t max_bytes = (size_t{4} << 20) + 77;
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto kits, makeKits(2, max_bytes));
  PEERLAB_ASSERT_OK_AND_ASSIGN(PeerCopier copier, PeerCopier::create());
  struct Shape {
    int kib, stages, blocks_per_sm, sms;
  };
  const Shape shapes[] = {{1, 2, 1, 0}, {4, 3, 2, 5}, {16, 4, 1, 0}, {16, 8, 2, 0}, {32, 6, 1, 3}, {64, 3, 1, 0}};
  const size_t sizes[] = {16, 33, 4097, (size_t{1} << 20) + 37, max_bytes};
  const std::pair<size_t, size_t> offsets[] = {{0, 0}, {5, 5}, {15, 15}, {3, 9}};
  for (const Shape& sh : shapes) {
    SmCopyConfig config;
    config.kernel = SmKernel::kBulk;
    config.bulk_kib = sh.kib;
    config.bulk_stages = sh.stages;
    config.bulk_blocks_per_sm = sh.blocks_per_sm;
    config.sms = sh.sms;
    PEERLAB_ASSERT_OK(copier.setSmConfig(config));
    SCOPED_TRACE(formatSmCopyConfig(config));
    for (CopyPath path : {CopyPath::kSmPull, CopyPath::kSmPush}) {
      for (size_t bytes : sizes) {
        for (auto [so, dof] : offsets) {
          const CopyCase c{path, 0, 1, bytes, so, dof};
          uint8_t* dst = kits[1].dst->as<uint8_t>() + kGuard + dof;
          const uint8_t* src = kits[0].src->as<uint8_t>() + kGuard + so;
          const SmKernel which = copier.smKernelFor(path, 0, 1, dst, src, bytes);
          // Bulk needs one whole 16-byte vector after the destination's head bytes.
          const size_t head = (16 - dof % 16) % 16;
          const bool qualifies = capable && so % 16 == dof % 16 && bytes >= head + 16;
          EXPECT_EQ(smKernelName(which), smKernelName(qualifies ? SmKernel::kBulk : SmKernel::kVector)) << describe(c);
          runCase(copier, kits, c, static_cast<uint64_t>(sh.kib * 131 + sh.stages * 7 + sh.sms));
        }
      }
    }
  }
}

// The default configuration sends large equally aligned copies to the bulk kernel (on devices that have it) and
// everything else to the vector kernel.
TEST(PeerCopy, DefaultConfigurationPicksTheKernelBySizeAndAlignment) {
  PEERLAB_REQUIRE_GPUS(2);
  if (!peerPossible(0, 1)) GTEST_SKIP() << "devices 0 and 1 cannot access each other";
  const bool capable = bulkCapable(0) && bulkCapable(1);
  const size_t big = (size_t{8} << 20) + 3;
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto kits, makeKits(2, big));
  PEERLAB_ASSERT_OK_AND_ASSIGN(PeerCopier copier, PeerCopier::create());
  EXPECT_EQ(formatSmCopyConfig(copier.smConfig()), formatSmCopyConfig(SmCopyConfig{}));
  for (CopyPath path : {CopyPath::kSmPull, CopyPath::kSmPush}) {
    for (size_t bytes : {size_t{4096}, kBulkMinBytes + 64, big}) {
      for (auto [so, dof] : {std::pair<size_t, size_t>{0, 0}, {6, 6}, {1, 0}}) {
        const CopyCase c{path, 0, 1, bytes, so, dof};
        const SmKernel which = copier.smKernelFor(path, 0, 1, kits[1].dst->as<uint8_t>() + kGuard + dof,
                                                  kits[0].src->as<uint8_t>() + kGuard + so, bytes);
        const bool bulk = capable && so == dof && bytes >= kBulkMinBytes + 32;
        EXPECT_EQ(smKernelName(which), smKernelName(bulk ? SmKernel::kBulk : SmKernel::kVector)) << describe(c);
        runCase(copier, kits, c, 0xdefa);
      }
    }
  }
  EXPECT_EQ(copier.smKernelFor(CopyPath::kCopyEngine, 0, 1, kits[1].dst->ptr, kits[0].src->ptr, big), SmKernel::kAuto);
}

// Counts calls; says "no" for the pair 0,1 in both directions.
cudaError_t denyPair01(void* user, int* can, int device, int peer) {
  ++*static_cast<int*>(user);
  if ((device == 0 && peer == 1) || (device == 1 && peer == 0)) {
    *can = 0;
    return cudaSuccess;
  }
  return cudaPeerOps().can_access(nullptr, can, device, peer);
}

TEST(PeerCopy, AutoFallsBackToStagedWhenPeerAccessIsRefused) {
  PEERLAB_REQUIRE_GPUS(2);
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto kits, makeKits(2, kBig));
  int calls = 0;
  PeerOps ops;
  ops.user = &calls;
  ops.can_access = denyPair01;
  ScopedPeerOps seam(ops);
  PEERLAB_ASSERT_OK_AND_ASSIGN(PeerCopier copier, PeerCopier::create());
  for (size_t bytes : {size_t{1}, size_t{4097}, kBig}) {
    const CopyCase c{CopyPath::kAuto, 0, 1, bytes, 5, 9};
    EXPECT_EQ(runCase(copier, kits, c), CopyPath::kStaged) << describe(c);
  }
  EXPECT_GT(calls, 0) << "auto must have asked whether peer access is possible";
  // Explicit peer paths report the refusal instead of falling back.
  for (CopyPath path : {CopyPath::kCopyEngine, CopyPath::kSmPull, CopyPath::kSmPush}) {
    auto ran = copier.copy(kits[1].dst->ptr, 1, kits[0].src->ptr, 0, 4096, kits[1].stream.get(), path);
    EXPECT_EQ(ran.status().code(), StatusCode::kUnavailable) << copyPathName(path) << ": " << ran.status().toString();
    EXPECT_NE(ran.status().message().find("cannot access"), std::string::npos) << ran.status().message();
  }
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
}

// Work enqueued on the caller's stream right before the copy must be seen by it, and work enqueued right after
// must see its result; `stream_device` picks whose stream the caller uses.
void expectStreamOrdering(int stream_device, CopyPath path) {
  const int src = 0, dst = 1;
  const size_t bytes = kBig;
  const CopyCase c{path, src, dst, bytes, 4, 12};
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto kits, makeKits(2, bytes));
  PEERLAB_ASSERT_OK_AND_ASSIGN(PeerCopier copier, PeerCopier::create());
  Stream user;
  Event after;
  Finally release([&] { releaseOn(stream_device, after, user); });
  PEERLAB_ASSERT_OK_AND_ASSIGN(user, createStream(stream_device));
  PEERLAB_ASSERT_OK(copier.prepare(src, dst, path));
  // The fill below runs on the caller's stream's device and writes the source through peer access.
  PEERLAB_ASSERT_OK(enablePeerAccess(stream_device, src));
  auto prepared = prepareCase(kits[src], kits[dst], c, saltFor(c, 0x5eed + stream_device));
  PEERLAB_ASSERT_OK(prepared.status());
  PEERLAB_ASSERT_OK(syncStream(kits[dst].stream.get(), "destination setup"));
  // The source now holds the complement of the pattern; the real pattern is written on the caller's stream just
  // before the copy (a kernel on the stream's device, through peer access when that is not the source device).
  PEERLAB_ASSERT_OK(poisonPattern(prepared->src_region, bytes, prepared->seed, kits[src].stream.get()));
  PEERLAB_ASSERT_OK(syncStream(kits[src].stream.get(), "source poison"));
  PEERLAB_ASSERT_OK(fillPattern(prepared->src_region, bytes, prepared->seed, user.get()));
  PEERLAB_ASSERT_OK_AND_ASSIGN(
      CopyPath ran, copier.copy(prepared->dst_region, dst, prepared->src_region, src, bytes, user.get(), path));
  EXPECT_EQ(ran, path);
  // Work after the copy on the caller's stream; the check runs on the destination's owner after it.
  PEERLAB_ASSERT_OK_AND_ASSIGN(after, createEvent(stream_device));
  {
    PEERLAB_ASSERT_OK_AND_ASSIGN(auto guard, ScopedDevice::make(stream_device));
    PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaEventRecord(after.get(), user.get())));
  }
  {
    PEERLAB_ASSERT_OK_AND_ASSIGN(auto guard, ScopedDevice::make(dst));
    PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaStreamWaitEvent(kits[dst].stream.get(), after.get(), 0)));
  }
  expectCopied(kits[dst], c, *prepared, kits[dst].stream.get());
}

TEST(PeerCopyStreams, CopyIsOrderedOnAStreamOfEitherDevice) {
  PEERLAB_REQUIRE_GPUS(2);
  if (!peerPossible(0, 1)) GTEST_SKIP() << "devices 0 and 1 cannot access each other";
  for (int stream_device : {0, 1}) {
    for (CopyPath path : {CopyPath::kCopyEngine, CopyPath::kSmPull, CopyPath::kSmPush, CopyPath::kStaged}) {
      SCOPED_TRACE("stream of device " + std::to_string(stream_device) + ", " + std::string(copyPathName(path)));
      expectStreamOrdering(stream_device, path);
    }
  }
}

TEST(PeerCopyStreams, CopyIsOrderedOnAStreamOfAThirdDevice) {
  PEERLAB_REQUIRE_GPUS(3);
  for (int a = 0; a < 3; ++a) {
    for (int b = 0; b < 3; ++b) {
      if (a != b && !peerPossible(a, b)) GTEST_SKIP() << "devices 0-2 are not all peers";
    }
  }
  for (CopyPath path : {CopyPath::kCopyEngine, CopyPath::kSmPull, CopyPath::kSmPush, CopyPath::kStaged}) {
    SCOPED_TRACE(std::string(copyPathName(path)));
    expectStreamOrdering(2, path);
  }
}

TEST(PeerCopyStreams, NullStreamMeansTheCurrentDevicesDefaultStream) {
  PEERLAB_REQUIRE_GPUS(2);
  if (!peerPossible(0, 1)) GTEST_SKIP() << "devices 0 and 1 cannot access each other";
  const CopyCase c{CopyPath::kSmPull, 0, 1, kBig, 2, 6};
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto kits, makeKits(2, kBig));
  PEERLAB_ASSERT_OK_AND_ASSIGN(PeerCopier copier, PeerCopier::create());
  for (CopyPath path : {CopyPath::kSmPull, CopyPath::kSmPush, CopyPath::kStaged, CopyPath::kCopyEngine}) {
    CopyCase cc = c;
    cc.path = path;
    auto prepared = prepareCase(kits[0], kits[1], cc, saltFor(cc, 0x0));
    PEERLAB_ASSERT_OK(prepared.status());
    PEERLAB_ASSERT_OK(syncStream(kits[1].stream.get(), "destination setup"));
    PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaSetDevice(1)));
    PEERLAB_ASSERT_OK_AND_ASSIGN(
        CopyPath ran, copier.copy(prepared->dst_region, 1, prepared->src_region, 0, cc.bytes, nullptr, path));
    EXPECT_EQ(ran, path);
    EXPECT_EQ(*currentDevice(), 1);
    // The copy is complete when the legacy default stream of device 1 is.
    PEERLAB_ASSERT_OK(syncStream(nullptr, "default stream"));
    expectCopied(kits[1], cc, *prepared, kits[1].stream.get());
  }
}

TEST(PeerCopy, ConcurrentAndBackToBackStagedCopiesReuseBuffersSafely) {
  PEERLAB_REQUIRE_GPUS(2);
  const size_t bytes = kBig;
  const size_t half = bytes + 64;
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto kits, makeKits(2, 2 * half));
  PEERLAB_ASSERT_OK_AND_ASSIGN(PeerCopier copier, PeerCopier::create());
  // Per direction two copies into disjoint halves: the first on a stream of the destination, the second on another
  // stream (of the source), so only the copier's own events keep the second from refilling a bounce buffer the
  // first is still draining. Both directions run at once; nothing is waited for in between.
  struct Job {
    int src, dst;
    const uint8_t* from;
    uint8_t* to;
    uint64_t seed;
    cudaStream_t stream;
  };
  std::vector<Stream> extra(2);
  Finally release([&] {
    for (int d = 0; d < 2; ++d)
      releaseOn(d, extra[d]);
  });
  for (int d = 0; d < 2; ++d) {
    PEERLAB_ASSERT_OK_AND_ASSIGN(extra[d], createStream(d));
  }
  std::vector<Job> jobs;
  for (auto [s, d] : {std::pair{0, 1}, std::pair{1, 0}}) {
    for (size_t h = 0; h < 2; ++h) {
      Job j{s,
            d,
            kits[s].src->as<uint8_t>() + h * half + 1,
            kits[d].dst->as<uint8_t>() + h * half + 7,
            patternSeed(runSeed(), s, d, 0xb0b0 + h),
            h == 0 ? kits[d].stream.get() : extra[s].get()};
      PEERLAB_ASSERT_OK(fillPattern(const_cast<uint8_t*>(j.from), bytes, j.seed, kits[s].stream.get()));
      PEERLAB_ASSERT_OK(poisonPattern(j.to, bytes, j.seed, kits[d].stream.get()));
      jobs.push_back(j);
    }
  }
  for (int d = 0; d < 2; ++d) {
    PEERLAB_ASSERT_OK(syncStream(kits[d].stream.get(), "setup"));
  }
  for (const Job& j : jobs) {
    PEERLAB_ASSERT_OK_AND_ASSIGN(CopyPath ran,
                                 copier.copy(j.to, j.dst, j.from, j.src, bytes, j.stream, CopyPath::kStaged));
    EXPECT_EQ(ran, CopyPath::kStaged);
  }
  for (int d = 0; d < 2; ++d) {
    PEERLAB_ASSERT_OK(syncStream(extra[d].get(), "second copies"));
  }
  for (const Job& j : jobs) {
    PatternChecker& checker = *kits[j.dst].checker;
    PEERLAB_ASSERT_OK(checker.enqueue(j.to, bytes, j.seed, kits[j.dst].stream.get()));
    PEERLAB_ASSERT_OK_AND_ASSIGN(PatternCheck check,
                                 checker.collect(kits[j.dst].stream.get(), Deadline::afterMs(kWaitMs)));
    EXPECT_EQ(check.wrong, 0u) << j.src << "->" << j.dst << ": first bad byte " << check.first_bad;
  }
  PEERLAB_EXPECT_OK(copier.synchronize(Deadline::afterMs(kWaitMs)));
}

TEST(PeerCopy, SameDeviceUsesTheCopyEngine) {
  PEERLAB_REQUIRE_GPUS(1);
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto kits, makeKits(1, kBig));
  PEERLAB_ASSERT_OK_AND_ASSIGN(PeerCopier copier, PeerCopier::create());
  for (CopyPath path : {CopyPath::kAuto, CopyPath::kCopyEngine}) {
    EXPECT_EQ(runCase(copier, kits, CopyCase{path, 0, 0, kBig, 3, 8}), CopyPath::kCopyEngine);
  }
  auto sm = copier.copy(kits[0].dst->ptr, 0, kits[0].src->ptr, 0, 4096, kits[0].stream.get(), CopyPath::kSmPull);
  EXPECT_EQ(sm.status().code(), StatusCode::kInvalidArgument) << sm.status().toString();
}

TEST(PeerCopy, BadArgumentsAreInvalidArgumentWithOneLine) {
  PEERLAB_REQUIRE_GPUS(2);
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto kits, makeKits(2, 4096));
  PEERLAB_ASSERT_OK_AND_ASSIGN(PeerCopier copier, PeerCopier::create());
  PEERLAB_ASSERT_OK_AND_ASSIGN(PinnedBuffer host, allocPinned(4096));
  std::vector<uint8_t> pageable(4096);
  PEERLAB_ASSERT_OK_AND_ASSIGN(DeviceBuffer small, allocDevice(1, 1000));
  const int count = *deviceCount();
  void* d1 = kits[1].dst->ptr;
  const void* s0 = kits[0].src->ptr;
  cudaStream_t st = kits[1].stream.get();
  struct Bad {
    const char* what;
    StatusOr<CopyPath> result;
    const char* mentions;
  };
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaSetDevice(0)));
  const CUcontext before = *currentContext();
  const std::vector<Bad> cases = {
      {"null dst", copier.copy(nullptr, 1, s0, 0, 16, st), "dst is null"},
      {"null src", copier.copy(d1, 1, nullptr, 0, 16, st), "src is null"},
      {"zero bytes", copier.copy(d1, 1, s0, 0, 0, st), "bytes is 0"},
      {"device out of range", copier.copy(d1, count, s0, 0, 16, st), "not a visible device"},
      {"negative device", copier.copy(d1, 1, s0, -1, 16, st), "not a visible device"},
      {"sm_pull on one device", copier.copy(kits[0].dst->ptr, 0, s0, 0, 16, st, CopyPath::kSmPull), "sm_pull"},
      {"dst of another device", copier.copy(kits[0].dst->ptr, 1, s0, 0, 16, st), "is memory of device 0"},
      {"src of another device", copier.copy(d1, 1, kits[1].src->ptr, 0, 16, st), "is memory of device 1"},
      {"pinned host dst", copier.copy(host->ptr, 1, s0, 0, 16, st), "host memory"},
      {"pageable host src", copier.copy(d1, 1, pageable.data(), 0, 16, st), "host memory"},
      {"past the allocation", copier.copy(small->as<uint8_t>() + 950, 1, s0, 0, 100, st, CopyPath::kSmPull),
       "past its allocation"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(c.result.status().code(), StatusCode::kInvalidArgument) << c.what << ": " << c.result.status().toString();
    EXPECT_EQ(c.result.status().message().find('\n'), std::string::npos) << c.what;
    EXPECT_NE(c.result.status().message().find(c.mentions), std::string::npos)
        << c.what << ": " << c.result.status().message();
  }
  EXPECT_EQ(*currentContext(), before);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
}

}  // namespace
}  // namespace peerlab::peer
