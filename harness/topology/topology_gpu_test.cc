// The live topology on a GPU machine, checked against what CUDA and NVML report directly.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/health/nvml.h"
#include "harness/testing/cli.h"
#include "harness/topology/topology.h"
#include "reference/core/devices.h"
#include "reference/testing/testing.h"

namespace peerlab::topology {
namespace {

// Runs `peerlab topo <args>` and returns its exit code and stdout.
std::pair<int, std::string> runTopo(std::vector<std::string> args) {
  args.insert(args.begin(), "topo");
  testing::CliRun r = testing::runPeerlab(args);
  return {r.exit_code, r.out};
}

TEST(TopologyGpu, EveryCudaDeviceIsOneTopologyGpuByBusId) {
  PEERLAB_REQUIRE_GPUS(1);
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto devices, listDevices());
  PEERLAB_ASSERT_OK_AND_ASSIGN(Topology t, loadLive());
  ASSERT_GE(t.gpus().size(), devices.size());
  for (const DeviceInfo& d : devices) {
    SCOPED_TRACE("CUDA device " + std::to_string(d.ordinal) + " " + d.bus_id);
    int matches = 0;
    for (const Gpu& g : t.gpus()) {
      if (g.bus_id != d.bus_id) continue;
      ++matches;
      EXPECT_EQ(g.index, d.ordinal);
      EXPECT_EQ(g.cuda_ordinal, d.ordinal);
      EXPECT_EQ(g.uuid, d.uuid);
      EXPECT_EQ(g.model, d.name);
      EXPECT_FALSE(g.numa.empty()) << "hwloc places every GPU on a NUMA node";
      EXPECT_FALSE(g.cpuset.empty());
    }
    EXPECT_EQ(matches, 1);
  }
  for (const GpuPair& p : t.pairs())
    EXPECT_NE(p.pci, PciPath::kUnknown) << p.a << "-" << p.b;
}

TEST(TopologyGpu, P2pAttributesAreReadForEveryOrderedPair) {
  PEERLAB_REQUIRE_GPUS(2);
  PEERLAB_ASSERT_OK_AND_ASSIGN(int count, deviceCount());
  PEERLAB_ASSERT_OK_AND_ASSIGN(Topology t, loadLive());
  for (int a = 0; a < count; ++a) {
    for (int b = 0; b < count; ++b) {
      if (a == b) continue;
      SCOPED_TRACE(std::to_string(a) + "->" + std::to_string(b));
      auto p = t.p2p(a, b);
      ASSERT_TRUE(p.has_value());
      int access = -1, rank = -1, atomics = -1, can = -1;
      ASSERT_EQ(cudaDeviceGetP2PAttribute(&access, cudaDevP2PAttrAccessSupported, a, b), cudaSuccess);
      ASSERT_EQ(cudaDeviceGetP2PAttribute(&rank, cudaDevP2PAttrPerformanceRank, a, b), cudaSuccess);
      ASSERT_EQ(cudaDeviceGetP2PAttribute(&atomics, cudaDevP2PAttrNativeAtomicSupported, a, b), cudaSuccess);
      ASSERT_EQ(cudaDeviceCanAccessPeer(&can, a, b), cudaSuccess);
      EXPECT_EQ(p->access_supported, access != 0);
      EXPECT_EQ(p->performance_rank, rank);
      EXPECT_EQ(p->native_atomics, atomics != 0);
      EXPECT_EQ(p->can_access_peer, can != 0);
      const GpuPair* pair = t.pair(a, b);
      ASSERT_NE(pair, nullptr);
      const auto& stored = a < b ? pair->p2p : pair->p2p_reverse;
      ASSERT_TRUE(stored.has_value());
      EXPECT_EQ(stored->access_supported, p->access_supported);
      EXPECT_EQ(stored->performance_rank, p->performance_rank);
    }
  }
}

// Active NVLinks of the GPU at `bus_id`, counted here straight from NVML.
int activeLinks(const health::nvml::Library& L, const std::string& bus_id) {
  namespace nv = health::nvml;
  nv::Device dev{};
  if (!L.nvmlDeviceGetHandleByPciBusId_v2 || L.nvmlDeviceGetHandleByPciBusId_v2(bus_id.c_str(), &dev) != nv::kSuccess)
    return -1;
  int active = 0;
  for (unsigned l = 0; l < nv::kNvlinkMaxLinks; ++l) {
    int s = nv::kFeatureDisabled;
    if (L.nvmlDeviceGetNvLinkState(dev, l, &s) != nv::kSuccess || s != nv::kFeatureEnabled) continue;
    // Links to a CPU (IBM NPU) are not GPU links.
    int type = nv::kNvlinkDeviceUnknown;
    if (L.nvmlDeviceGetNvLinkRemoteDeviceType) (void)L.nvmlDeviceGetNvLinkRemoteDeviceType(dev, l, &type);
    if (type != nv::kNvlinkDeviceIbmNpu) ++active;
  }
  return active;
}

TEST(TopologyGpu, NvlinkCountsAgreeBothWaysAndWithNvml) {
  PEERLAB_REQUIRE_GPUS(2);
  auto nvml = health::nvml::Library::open();
  if (!nvml.isOk()) GTEST_SKIP() << nvml.status().message() << ": NVLink link counts cannot be checked";
  PEERLAB_ASSERT_OK_AND_ASSIGN(Topology t, loadLive());
  ASSERT_EQ(t.nvlinkSource(), "nvml") << "NVML did not answer; warnings: "
                                      << (t.warnings().empty() ? "" : t.warnings().front());
  for (const Gpu& g : t.gpus()) {
    SCOPED_TRACE(g.bus_id);
    ASSERT_TRUE(g.nvlink_links.has_value());
    EXPECT_EQ(*g.nvlink_links, activeLinks(**nvml, g.bus_id));
    EXPECT_LE(g.nvswitch_links, *g.nvlink_links);
    if (*g.nvlink_links > 0) {
      ASSERT_TRUE(g.nvlink_link_gbps.has_value());
      EXPECT_GT(*g.nvlink_link_gbps, 0.0);
    }
  }
  for (const GpuPair& p : t.pairs()) {
    SCOPED_TRACE(std::to_string(p.a) + "-" + std::to_string(p.b));
    auto ab = t.nvlinkLinksSeenFrom(p.a, p.b);
    auto ba = t.nvlinkLinksSeenFrom(p.b, p.a);
    ASSERT_TRUE(ab.has_value() && ba.has_value());
    EXPECT_EQ(*ab, *ba);
    const Gpu& ga = t.gpus()[p.a];
    const Gpu& gb = t.gpus()[p.b];
    ASSERT_TRUE(p.nvlink_links.has_value());
    EXPECT_LE(*p.nvlink_links, std::min(*ga.nvlink_links, *gb.nvlink_links));
    if (ga.nvswitch_links > 0 && gb.nvswitch_links > 0) {
      EXPECT_TRUE(p.nvswitch);
      EXPECT_GE(*p.nvlink_links, std::min(ga.nvswitch_links, gb.nvswitch_links));
    }
    if (*p.nvlink_links > 0) {
      ASSERT_TRUE(p.nvlink_gbps.has_value());
      EXPECT_DOUBLE_EQ(*p.nvlink_gbps, *p.nvlink_links * std::min(*ga.nvlink_link_gbps, *gb.nvlink_link_gbps));
    }
  }
}

TEST(TopologyGpu, TopoJsonParsesAndMatchesCuda) {
  PEERLAB_REQUIRE_GPUS(1);
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto devices, listDevices());
  auto [code, out] = runTopo({"--json"});
  ASSERT_EQ(code, 0) << out;
  nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  EXPECT_EQ(j["source"], "live");
  ASSERT_GE(j["gpus"].size(), devices.size());
  for (const DeviceInfo& d : devices) {
    const auto& g = j["gpus"][d.ordinal];
    EXPECT_EQ(g["index"], d.ordinal);
    EXPECT_EQ(g["cuda_ordinal"], d.ordinal);
    EXPECT_EQ(g["bus_id"], d.bus_id);
    EXPECT_EQ(g["uuid"], d.uuid);
  }
  for (const auto& p : j["pairs"]) {
    if (p["b"].get<size_t>() >= devices.size()) continue;
    EXPECT_TRUE(p["p2p"].is_object()) << p.dump();
    EXPECT_TRUE(p["p2p_reverse"].is_object()) << p.dump();
  }
  // For the record (the log shows what `peerlab topo` prints on this machine).
  auto [matrix_code, matrix] = runTopo({});
  EXPECT_EQ(matrix_code, 0);
  std::cout << matrix;
}

}  // namespace
}  // namespace peerlab::topology
