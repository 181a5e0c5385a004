#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "reference/core/check.h"
#include "reference/core/devices.h"
#include "reference/core/memory.h"
#include "reference/core/pattern.h"
#include "reference/core/scoped.h"
#include "reference/core/wait.h"
#include "reference/testing/testing.h"

extern char** environ;

namespace peerlab {
namespace {

// A guard test must start from a state other than the one the guard sets, or restoring proves nothing: with two GPUs
// device 0 is current and the guard switches to the last one; with one GPU no context is current and the guard binds
// device 0's primary context.
struct GuardStart {
  int target = 0;
  CUcontext before = nullptr;
};

StatusOr<GuardStart> startAwayFromTarget() {
  PEERLAB_ASSIGN_OR_RETURN(int count, deviceCount());
  GuardStart g;
  if (count >= 2) {
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaSetDevice(0)));
    g.target = count - 1;
  } else {
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CU(cuCtxSetCurrent, nullptr));
    g.target = 0;
  }
  PEERLAB_ASSIGN_OR_RETURN(g.before, currentContext());
  return g;
}

TEST(ScopedDevice, RestoresDeviceAndContextOnSuccess) {
  PEERLAB_REQUIRE_GPUS(1);
  PEERLAB_ASSERT_OK_AND_ASSIGN(GuardStart start, startAwayFromTarget());
  {
    PEERLAB_ASSERT_OK_AND_ASSIGN(auto guard, ScopedDevice::make(start.target));
    EXPECT_EQ(*currentDevice(), start.target);
    EXPECT_NE(*currentContext(), start.before) << "the guard did not switch: this test would prove nothing";
  }
  EXPECT_EQ(*currentContext(), start.before);
  if (start.before != nullptr) EXPECT_EQ(*currentDevice(), 0);
}

TEST(ScopedDevice, RestoresOnAFailedSwitch) {
  PEERLAB_REQUIRE_GPUS(1);
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaSetDevice(0)));
  CUcontext before = *currentContext();
  auto bad = ScopedDevice::make(9999);
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.status().code(), StatusCode::kCudaError) << bad.status().toString();
  EXPECT_EQ(*currentDevice(), 0);
  EXPECT_EQ(*currentContext(), before);
  // The checking macro cleared the runtime's last error.
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
}

Status failInsideScope(int device, CUcontext not_expected) {
  PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(device));
  PEERLAB_ASSIGN_OR_RETURN(CUcontext inside, currentContext());
  if (inside == not_expected) return PEERLAB_INTERNAL("the guard did not switch");
  return PEERLAB_CUDA(cudaMemcpy(nullptr, reinterpret_cast<void*>(1), 16, cudaMemcpyDeviceToDevice));
}

TEST(ScopedDevice, RestoresWhenTheScopedWorkFails) {
  PEERLAB_REQUIRE_GPUS(1);
  PEERLAB_ASSERT_OK_AND_ASSIGN(GuardStart start, startAwayFromTarget());
  Status st = failInsideScope(start.target, start.before);
  EXPECT_EQ(st.code(), StatusCode::kCudaError) << st.toString();
  EXPECT_EQ(*currentContext(), start.before);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaSetDevice(0)));
}

TEST(ScopedContext, RestoresNoContextAtAll) {
  PEERLAB_REQUIRE_GPUS(1);
  PEERLAB_ASSERT_OK(PEERLAB_CU(cuCtxSetCurrent, nullptr));
  ASSERT_EQ(*currentContext(), nullptr);
  {
    PEERLAB_ASSERT_OK_AND_ASSIGN(auto guard, ScopedDevice::make(0));
    EXPECT_NE(*currentContext(), nullptr);
  }
  EXPECT_EQ(*currentContext(), nullptr);
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaSetDevice(0)));
}

TEST(ScopedContext, RestoresAfterAnExplicitContext) {
  PEERLAB_REQUIRE_GPUS(1);
  PEERLAB_ASSERT_OK_AND_ASSIGN(GuardStart start, startAwayFromTarget());
  CUdevice dev;
  PEERLAB_ASSERT_OK(PEERLAB_CU(cuDeviceGet, &dev, start.target));
  CUcontext primary = nullptr;
  PEERLAB_ASSERT_OK(PEERLAB_CU(cuDevicePrimaryCtxRetain, &primary, dev));
  ASSERT_NE(primary, start.before) << "the guard would not switch: this test would prove nothing";
  {
    PEERLAB_ASSERT_OK_AND_ASSIGN(auto guard, ScopedContext::make(primary));
    EXPECT_EQ(*currentContext(), primary);
  }
  EXPECT_EQ(*currentContext(), start.before);
  PEERLAB_EXPECT_OK(PEERLAB_CU(cuDevicePrimaryCtxRelease, dev));
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaSetDevice(0)));
}

// Teardown behind a held-up stream: the caller does not wait, and the owner (its stream and memory) is destroyed only
// after the stream drained, on another thread, with the caller's context untouched.
TEST(ReleaseWhenIdle, DestroysAfterTheStreamDrainedWithoutBlockingTheCaller) {
  PEERLAB_REQUIRE_GPUS(1);
  const int device = *deviceCount() - 1;
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaSetDevice(0)));
  const CUcontext before = *currentContext();
  struct Flags {
    std::atomic<bool> drained{false};
    std::atomic<bool> destroyed{false};
    std::atomic<bool> drained_first{false};
    std::thread::id by;
  };
  struct Held {
    Stream stream;
    DeviceBuffer memory;
    std::shared_ptr<Flags> flags;
    ~Held() {
      flags->drained_first.store(flags->drained.load());
      flags->by = std::this_thread::get_id();
      flags->destroyed.store(true);
    }
  };
  auto flags = std::make_shared<Flags>();
  auto held = std::make_shared<Held>();
  held->flags = flags;
  {
    PEERLAB_ASSERT_OK_AND_ASSIGN(auto guard, ScopedDevice::make(device));
    PEERLAB_ASSERT_OK_AND_ASSIGN(held->stream, createStream(device));
    PEERLAB_ASSERT_OK_AND_ASSIGN(held->memory, allocDevice(device, 64 << 20));
  }
  static constexpr int kHoldMs = 400;
  auto hold = [](void* p) {
    std::this_thread::sleep_for(std::chrono::milliseconds(kHoldMs));
    static_cast<Flags*>(p)->drained.store(true);
  };
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaLaunchHostFunc(held->stream.get(), hold, flags.get())));
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaMemsetAsync(held->memory->ptr, 0x5a, held->memory->bytes, held->stream.get())));
  cudaStream_t stream = held->stream.get();

  const auto start = std::chrono::steady_clock::now();
  releaseWhenIdle(std::move(held), {stream}, device);
  const auto returned = std::chrono::steady_clock::now() - start;
  EXPECT_LT(returned, std::chrono::milliseconds(kHoldMs / 2));
  EXPECT_EQ(heldForRelease(), 1u);
  EXPECT_FALSE(flags->destroyed.load());
  EXPECT_EQ(*currentContext(), before);

  const auto end = start + std::chrono::seconds(10);
  while (!flags->destroyed.load() && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(flags->destroyed.load()) << "not released 10 s after its stream was held for " << kHoldMs << " ms";
  EXPECT_TRUE(flags->drained_first.load());
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(kHoldMs));
  EXPECT_NE(flags->by, std::this_thread::get_id());
  // The owner counts as held until the releasing thread has finished with it, a moment after its destructor ran.
  const auto settle = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (heldForRelease() != 0 && std::chrono::steady_clock::now() < settle)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(heldForRelease(), 0u);
  EXPECT_EQ(*currentContext(), before);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
}

TEST(CheckMacros, ClearTheStickyLastError) {
  PEERLAB_REQUIRE_GPUS(1);
  Status st = PEERLAB_CUDA(cudaSetDevice(123456));
  EXPECT_EQ(st.code(), StatusCode::kCudaError);
  EXPECT_NE(st.message().find("cudaErrorInvalidDevice"), std::string::npos) << st.toString();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(DeviceInventory, ListsEveryVisibleDevice) {
  PEERLAB_REQUIRE_GPUS(1);
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto devices, listDevices());
  std::set<std::string> uuids, buses;
  for (size_t i = 0; i < devices.size(); ++i) {
    const auto& d = devices[i];
    EXPECT_EQ(d.ordinal, static_cast<int>(i));
    EXPECT_EQ(d.uuid.rfind("GPU-", 0), 0u) << d.uuid;
    EXPECT_EQ(d.uuid.size(), 40u) << d.uuid;
    EXPECT_EQ(normalizeBusId(d.bus_id), d.bus_id);
    EXPECT_FALSE(d.name.empty());
    EXPECT_GE(d.cc_major, 7);
    EXPECT_GT(d.sm_count, 0);
    EXPECT_GT(d.total_memory, size_t{1} << 30);
    uuids.insert(d.uuid);
    buses.insert(d.bus_id);
  }
  EXPECT_EQ(uuids.size(), devices.size());
  EXPECT_EQ(buses.size(), devices.size());
  for (const auto& d : devices)
    EXPECT_EQ(*ordinalForUuid(d.uuid), d.ordinal);
  EXPECT_EQ(ordinalForUuid("GPU-00000000-0000-0000-0000-000000000000").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(deviceInfo(static_cast<int>(devices.size())).status().code(), StatusCode::kInvalidArgument);
}

// Runs this test binary again with CUDA_VISIBLE_DEVICES=`visible`; the child writes "ordinal uuid bus" lines.
std::vector<DeviceInfo> inventoryUnder(const std::string& visible) {
  char path[] = "/tmp/peerlab-inventory-XXXXXX";
  int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  close(fd);
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string s(*e);
    // A GoogleTest shard of the parent's would leave the child (one test, by filter) nothing to run.
    if (s.rfind("CUDA_VISIBLE_DEVICES=", 0) == 0 || s.rfind("PEERLAB_INVENTORY_OUT=", 0) == 0 ||
        s.rfind("GTEST_TOTAL_SHARDS=", 0) == 0 || s.rfind("GTEST_SHARD_INDEX=", 0) == 0)
      continue;
    env.push_back(s);
  }
  env.push_back("CUDA_VISIBLE_DEVICES=" + visible);
  env.push_back(std::string("PEERLAB_INVENTORY_OUT=") + path);
  std::vector<char*> envp;
  for (auto& s : env)
    envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string self = "/proc/self/exe", filter = "--gtest_filter=DeviceInventory.SurvivesVisibleDevicesPermutations";
  char* argv[] = {self.data(), filter.data(), nullptr};
  pid_t pid = -1;
  EXPECT_EQ(posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()), 0);
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::vector<DeviceInfo> out;
  std::ifstream f(path);
  DeviceInfo d;
  while (f >> d.ordinal >> d.uuid >> d.bus_id)
    out.push_back(d);
  unlink(path);
  return out;
}

TEST(DeviceInventory, SurvivesVisibleDevicesPermutations) {
  if (const char* out = std::getenv("PEERLAB_INVENTORY_OUT")) {
    // Child: report what this process sees.
    auto devices = listDevices();
    ASSERT_TRUE(devices.isOk()) << devices.status().toString();
    std::ofstream f(out);
    for (const auto& d : *devices)
      f << d.ordinal << " " << d.uuid << " " << d.bus_id << "\n";
    return;
  }
  PEERLAB_REQUIRE_GPUS(2);
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto base, listDevices());
  std::map<std::string, std::string> busOf;
  for (const auto& d : base)
    busOf[d.uuid] = d.bus_id;

  std::vector<int> perm(base.size());
  for (size_t i = 0; i < perm.size(); ++i)
    perm[i] = static_cast<int>(i);
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 3; ++trial) {
    if (trial == 0)
      std::reverse(perm.begin(), perm.end());
    else
      std::shuffle(perm.begin(), perm.end(), rng);
    // By index, then by UUID: each child ordinal i must be the device base[perm[i]].
    std::string byIndex, byUuid;
    for (size_t i = 0; i < perm.size(); ++i) {
      byIndex += (i ? "," : "") + std::to_string(perm[i]);
      byUuid += (i ? "," : "") + base[perm[i]].uuid;
    }
    for (const std::string& visible : {byIndex, byUuid}) {
      auto seen = inventoryUnder(visible);
      ASSERT_EQ(seen.size(), base.size()) << "CUDA_VISIBLE_DEVICES=" << visible;
      for (size_t i = 0; i < seen.size(); ++i) {
        EXPECT_EQ(seen[i].ordinal, static_cast<int>(i));
        EXPECT_EQ(seen[i].uuid, base[perm[i]].uuid) << "CUDA_VISIBLE_DEVICES=" << visible;
        EXPECT_EQ(seen[i].bus_id, busOf[seen[i].uuid]) << "bus id must follow the UUID";
      }
    }
  }
  // A subset: only the last device, which becomes ordinal 0.
  auto one = inventoryUnder(std::to_string(base.size() - 1));
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].uuid, base.back().uuid);
}

TEST(PatternKernels, MatchTheHostReferenceAtOddSizesAndOffsets) {
  PEERLAB_REQUIRE_GPUS(1);
  PEERLAB_ASSERT_OK_AND_ASSIGN(Stream stream, createStream(0));
  PEERLAB_ASSERT_OK_AND_ASSIGN(DeviceBuffer buf, allocDevice(0, 1 << 20));
  PEERLAB_ASSERT_OK_AND_ASSIGN(PatternChecker checker, PatternChecker::create(0));
  std::mt19937_64 rng(std::random_device{}());
  for (size_t bytes : {size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{4097}, size_t{(1 << 20) - 40}}) {
    for (size_t misalign : {size_t{0}, size_t{3}, size_t{8}, size_t{13}}) {
      if (bytes + misalign > (1u << 20)) continue;
      uint64_t seed = rng();
      uint64_t offset = rng() % 1000;
      auto* p = buf->as<uint8_t>() + misalign;
      PEERLAB_ASSERT_OK(fillPattern(p, bytes, seed, stream.get(), offset));
      std::vector<uint8_t> host(bytes), want(bytes);
      PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaMemcpyAsync(host.data(), p, bytes, cudaMemcpyDeviceToHost, stream.get())));
      PEERLAB_ASSERT_OK(waitStream(stream.get(), Deadline::afterMs(10000), "copy"));
      fillPatternHost(want.data(), bytes, seed, offset);
      ASSERT_EQ(host, want) << "bytes=" << bytes << " misalign=" << misalign;
      PEERLAB_ASSERT_OK(checker.enqueue(p, bytes, seed, stream.get(), 1, offset));
      PEERLAB_ASSERT_OK_AND_ASSIGN(auto clean, checker.collect(stream.get(), Deadline::afterMs(10000)));
      EXPECT_EQ(clean.wrong, 0u);
      EXPECT_EQ(clean.elements, bytes);
      // Poison, then every byte is wrong and the first is at 0.
      PEERLAB_ASSERT_OK(poisonPattern(p, bytes, seed, stream.get(), offset));
      PEERLAB_ASSERT_OK(checker.enqueue(p, bytes, seed, stream.get(), 1, offset));
      PEERLAB_ASSERT_OK_AND_ASSIGN(auto poisoned, checker.collect(stream.get(), Deadline::afterMs(10000)));
      EXPECT_EQ(poisoned.wrong, bytes);
      EXPECT_EQ(poisoned.first_bad, 0u);
    }
  }
}

TEST(PatternKernels, CountOneCorruptWordAndItsOffset) {
  PEERLAB_REQUIRE_GPUS(1);
  const size_t bytes = 64 << 20;
  PEERLAB_ASSERT_OK_AND_ASSIGN(Stream stream, createStream(0));
  PEERLAB_ASSERT_OK_AND_ASSIGN(DeviceBuffer buf, allocDevice(0, bytes));
  uint64_t seed = std::random_device{}();
  PEERLAB_ASSERT_OK(fillPattern(buf->ptr, bytes, seed, stream.get()));
  const size_t bad = 12345679;
  uint8_t flip = 0x5a;
  uint8_t orig = 0;
  PEERLAB_ASSERT_OK(
      PEERLAB_CUDA(cudaMemcpyAsync(&orig, buf->as<uint8_t>() + bad, 1, cudaMemcpyDeviceToHost, stream.get())));
  PEERLAB_ASSERT_OK(waitStream(stream.get(), Deadline::afterMs(10000), "read"));
  orig ^= flip;
  PEERLAB_ASSERT_OK(
      PEERLAB_CUDA(cudaMemcpyAsync(buf->as<uint8_t>() + bad, &orig, 1, cudaMemcpyHostToDevice, stream.get())));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto words,
                               checkPattern(buf->ptr, bytes, seed, 0, stream.get(), Deadline::afterMs(10000), 4));
  EXPECT_EQ(words.elements, bytes / 4);
  EXPECT_EQ(words.wrong, 1u);
  EXPECT_EQ(words.first_bad, bad);
}

}  // namespace
}  // namespace peerlab
