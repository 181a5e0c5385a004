// Host <-> device paths on a real GPU: every copy moves a fresh seeded pattern into a poisoned destination and the
// owner counts wrong bytes (the device for h2d, the host for d2h). Skips without a GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <random>
#include <string>

#include "reference/core/check.h"
#include "reference/core/memory.h"
#include "reference/core/pattern.h"
#include "reference/core/scoped.h"
#include "reference/core/wait.h"
#include "reference/host/host_copy.h"
#include "reference/host/host_memory.h"
#include "reference/host/numa.h"
#include "reference/testing/testing.h"

namespace peerlab::host {
namespace {

constexpr int64_t kWaitMs = 60000;

uint64_t freshRun() {
  return (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
}

enum class Engine { kCe, kSm };

// Copies `bytes` one way, from/to byte `host_offset` of the host buffer and `dev_offset` of the device buffer, and
// expects no wrong byte where the owner checks.
void roundTrip(Direction dir, Engine engine, const HostPlacement& where, size_t bytes, size_t host_offset,
               size_t dev_offset) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(Stream stream, createStream(0));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto guard, ScopedDevice::make(0));
  PEERLAB_ASSERT_OK_AND_ASSIGN(DeviceBuffer dev, allocDevice(0, bytes + dev_offset));
  PEERLAB_ASSERT_OK_AND_ASSIGN(HostBuffer host, allocHost(bytes + host_offset, where));
  const uint64_t seed = patternSeed(freshRun(), 0, 0, static_cast<uint64_t>(dir) * 7 + static_cast<int>(engine));
  uint8_t* h = host->as<uint8_t>() + host_offset;
  uint8_t* d = dev->as<uint8_t>() + dev_offset;
  if (dir == Direction::kHostToDevice) {
    fillPatternHost(h, bytes, seed);
    PEERLAB_ASSERT_OK(poisonPattern(d, bytes, seed, stream.get()));
  } else {
    PEERLAB_ASSERT_OK(fillPattern(d, bytes, seed, stream.get()));
    poisonPatternHost(h, bytes, seed);
  }
  if (engine == Engine::kCe) {
    PEERLAB_ASSERT_OK(copyEngine(d, h, bytes, dir, stream.get()));
  } else {
    PEERLAB_ASSERT_OK(smCopy(d, h, bytes, dir, stream.get()));
  }
  PEERLAB_ASSERT_OK(waitStream(stream.get(), Deadline::afterMs(kWaitMs), "copy"));
  PatternCheck c;
  if (dir == Direction::kHostToDevice) {
    PEERLAB_ASSERT_OK_AND_ASSIGN(c, checkPattern(d, bytes, seed, 0, stream.get(), Deadline::afterMs(kWaitMs)));
  } else {
    c = checkPatternHost(h, bytes, seed);
  }
  EXPECT_EQ(c.wrong, 0u) << directionName(dir) << " first bad byte " << c.first_bad;
  EXPECT_EQ(c.elements, bytes);
}

class HostCopy : public ::testing::Test {
 protected:
  void SetUp() override {
    PEERLAB_REQUIRE_GPUS(1);
    PEERLAB_SKIP_IF_UNAVAILABLE(checkKernelImage(0));
  }
};

TEST_F(HostCopy, CopyEngineMovesPinnedDataBothWays) {
  for (Direction dir : {Direction::kHostToDevice, Direction::kDeviceToHost})
    roundTrip(dir, Engine::kCe, HostPlacement{}, (size_t{32} << 20) + 3, 0, 0);
}

TEST_F(HostCopy, CopyEngineMovesPageableData) {
  HostPlacement pageable;
  pageable.pinned = false;
  for (Direction dir : {Direction::kHostToDevice, Direction::kDeviceToHost})
    roundTrip(dir, Engine::kCe, pageable, size_t{8} << 20, 0, 0);
}

TEST_F(HostCopy, SmKernelsLoadAndStoreHostMemoryAtAnyAlignment) {
  for (Direction dir : {Direction::kHostToDevice, Direction::kDeviceToHost}) {
    roundTrip(dir, Engine::kSm, HostPlacement{}, (size_t{16} << 20) + 5, 0, 0);
    roundTrip(dir, Engine::kSm, HostPlacement{}, (size_t{1} << 20) + 9, 3, 3);  // head, vectors and tail
    roundTrip(dir, Engine::kSm, HostPlacement{}, (size_t{1} << 20) + 9, 5, 3);  // unequal alignment: bytes
    roundTrip(dir, Engine::kSm, HostPlacement{}, 1, 0, 0);
  }
}

TEST_F(HostCopy, SmCopyRejectsPageableHostMemory) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(Stream stream, createStream(0));
  PEERLAB_ASSERT_OK_AND_ASSIGN(DeviceBuffer dev, allocDevice(0, 4096));
  HostPlacement pageable;
  pageable.pinned = false;
  PEERLAB_ASSERT_OK_AND_ASSIGN(HostBuffer host, allocHost(4096, pageable));
  Status st = smCopy(dev->ptr, host->ptr, 4096, Direction::kHostToDevice, stream.get());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
}

TEST_F(HostCopy, LocalAndRemoteNodesCarryData) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(std::optional<int> gpu_node, gpuHostNode(0));
  PEERLAB_ASSERT_OK_AND_ASSIGN(std::vector<int> online, onlineNodes());
  const NodeChoice nodes = chooseNodes(gpu_node, online);
  if (!nodes.local) GTEST_SKIP() << "the GPU's host node is unknown (" << online.size() << " nodes online)";
  HostPlacement local;
  local.node = nodes.local;
  auto probe = allocHost(4096, local);
  if (probe.status().code() == StatusCode::kUnavailable) GTEST_SKIP() << probe.status().toString();
  roundTrip(Direction::kHostToDevice, Engine::kCe, local, size_t{8} << 20, 0, 0);
  if (!nodes.remote) GTEST_SKIP() << "one NUMA node: no misplaced-memory case on this machine";
  HostPlacement remote;
  remote.node = nodes.remote;
  roundTrip(Direction::kHostToDevice, Engine::kCe, remote, size_t{8} << 20, 0, 0);
  roundTrip(Direction::kDeviceToHost, Engine::kSm, remote, size_t{8} << 20, 0, 0);
}

TEST_F(HostCopy, HostLatencyIsAPcieRoundTrip) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(Stream stream, createStream(0));
  PEERLAB_ASSERT_OK_AND_ASSIGN(HostBuffer chain, allocHost(1 << 20));
  PEERLAB_ASSERT_OK(buildChase(chain->ptr, 1 << 20, 128));
  PEERLAB_ASSERT_OK_AND_ASSIGN(
      double ns, chaseLatency(chain->ptr, 1 << 20, 128, 4096, 0, stream.get(), Deadline::afterMs(kWaitMs)));
  // A load across PCIe takes on the order of a microsecond; device memory would be a few hundred ns.
  EXPECT_GT(ns, 300.0);
  EXPECT_LT(ns, 20000.0);
}

TEST_F(HostCopy, MemoryPeakIsReported) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(double peak, memoryPeakGbps(0));
  EXPECT_GT(peak, 100.0);
  EXPECT_LT(peak, 20000.0);
}

TEST(HostCopyImage, KernelImageCheckPassesOnTheBuiltGpu) {
  PEERLAB_REQUIRE_GPUS(1);
  Status st = checkKernelImage(0);
  // Either the build covers this GPU or the message names the fix.
  if (!st.isOk()) {
    EXPECT_NE(st.message().find("CMAKE_CUDA_ARCHITECTURES"), std::string::npos) << st.toString();
    GTEST_SKIP() << st.toString();
  }
  EXPECT_FALSE(builtArchitectures().empty());
}

}  // namespace
}  // namespace peerlab::host
