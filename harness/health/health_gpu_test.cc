// Health on a real GPU through the real NVML: every check answers, the PCIe link is read under copy traffic, the
// watch runs, and the copies leave no primary context behind.

#include <cuda.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "harness/health/copy_traffic.h"
#include "harness/health/health.h"
#include "reference/core/driver.h"
#include "reference/testing/testing.h"

namespace peerlab::health {
namespace {

TEST(HealthGpu, EveryCheckAnswersAndTheLinkIsReadUnderTraffic) {
  PEERLAB_REQUIRE_GPUS(1);
  auto monitor = Monitor::open();
  if (!monitor.isOk()) GTEST_SKIP() << monitor.status().message();
  ASSERT_FALSE((*monitor)->gpus().empty()) << "NVML shows no GPU where CUDA shows one";

  std::string wake_error;
  auto before = (*monitor)->sample(copyTraffic(&wake_error), 50);
  EXPECT_TRUE(wake_error.empty()) << wake_error;
  Thresholds t;
  ASSERT_TRUE((*monitor)->startWatch(t, 60).isOk());
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  WatchLog watch = (*monitor)->stopWatch();
  auto after = (*monitor)->sample(copyTraffic(&wake_error), 50);
  for (const GpuSample& s : before) {
    SCOPED_TRACE("GPU " + std::to_string(s.gpu) + " " + s.bus_id);
    EXPECT_TRUE(s.under_traffic);
    ASSERT_TRUE(s.pcie_gen.has()) << s.pcie_gen.why;
    ASSERT_TRUE(s.pcie_width.has()) << s.pcie_width.why;
    EXPECT_GE(*s.pcie_gen, 1u);
    EXPECT_GE(*s.pcie_width, 1u);
  }
  EXPECT_TRUE(watch.ran);
  EXPECT_GE(watch.end_s - watch.start_s, 0.4);
  auto checks = evaluate(before, after, watch, t);
  ASSERT_EQ(checks.size(), before.size() * std::size(kCheckNames));
  for (const CheckResult& c : checks) {
    EXPECT_FALSE(c.detail.empty()) << c.name;
    std::printf("%-11s GPU %d %-14s %s\n", verdictName(c.verdict), c.gpu, c.name.c_str(), c.detail.c_str());
  }
}

TEST(HealthGpu, WakeCopiesReleaseThePrimaryContextTheyCreate) {
  PEERLAB_REQUIRE_GPUS(1);
  CUdevice dev = 0;
  ASSERT_EQ(PEERLAB_DRIVER_CALL(cuDeviceGet, &dev, 0), CUDA_SUCCESS);
  unsigned flags = 0;
  int active = 0;
  ASSERT_EQ(PEERLAB_DRIVER_CALL(cuDevicePrimaryCtxGetState, dev, &flags, &active), CUDA_SUCCESS);
  if (active) GTEST_SKIP() << "GPU 0's primary context is already active in this process";
  bool read = false;
  std::string error;
  copyTraffic (&error)(0, [&] { read = true; });
  EXPECT_TRUE(read) << error;
  EXPECT_TRUE(error.empty()) << error;
  ASSERT_EQ(PEERLAB_DRIVER_CALL(cuDevicePrimaryCtxGetState, dev, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 0);
}

}  // namespace
}  // namespace peerlab::health
