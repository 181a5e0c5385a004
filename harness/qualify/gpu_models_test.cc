#include "harness/qualify/gpu_models.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "reference/testing/testing.h"

namespace peerlab::qualify {
namespace {

TEST(GpuModels, ShortNamesAndCapabilities) {
  struct Case {
    const char* model;
    const char* name;
    std::optional<int> capability;
  };
  const Case cases[] = {
      {"NVIDIA H200", "h200", 90},
      {"NVIDIA H100 80GB HBM3", "h100", 90},
      {"NVIDIA A100-SXM4-80GB", "a100", 80},
      {"NVIDIA A10G", "a10g", 86},
      {"NVIDIA L4", "l4", 89},
      {"NVIDIA L40S", "l40s", 89},
      {"Tesla V100-SXM3-32GB-H", "v100", 70},
      {"Tesla P100-SXM2-16GB", "p100", 60},
      {"Tesla K40m", "k40m", 35},
      {"Tesla M2075 Dual-Slot Computing Processor Module", "m2075", 20},
      {"Tesla T4", "t4", 75},
      {"NVIDIA GeForce RTX 3090", "rtx3090", 86},
      {"NVIDIA RTX 6000 Ada Generation", "rtx6000-ada", 89},
      {"NVIDIA B200", "b200", 100},
      {"NVIDIA 10de:2335", "h200", 90},
      {"NVIDIA 10de:20b0", "a100", 80},
      {"NVIDIA 10de:ffff", "10de-ffff", std::nullopt},
      {"NVIDIA GPU", "gpu", std::nullopt},
  };
  for (const Case& c : cases) {
    const GpuModelInfo info = identifyGpu(c.model);
    EXPECT_EQ(info.short_name, c.name) << c.model;
    EXPECT_EQ(info.capability, c.capability) << c.model;
  }
}

PlanTopology box(const std::string& model, int n, std::optional<int> links, bool nvswitch) {
  PlanTopology t;
  t.source = "hand-made";
  t.nvswitches = nvswitch ? 4 : 0;
  t.nvlink_source = links ? "nvml" : "";
  for (int g = 0; g < n; ++g)
    t.gpus.push_back({g, "", model, "", links, {}});
  for (int s = 0; s < n; ++s) {
    for (int d = 0; d < n; ++d) {
      if (s != d) t.pairs.push_back({s, d, "PIX", links, {}, nvswitch && links && *links > 0});
    }
  }
  return t;
}

TEST(GpuModels, KindFromTheHardware) {
  EXPECT_EQ(deriveKind(box("NVIDIA H200", 2, 18, true)).kind, "h200-x2-nvswitch");
  EXPECT_EQ(deriveKind(box("NVIDIA H100 80GB HBM3", 1, std::nullopt, false)).kind, "h100-x1");
  EXPECT_EQ(deriveKind(box("NVIDIA A100-SXM4-80GB", 8, 12, false)).kind, "a100-x8-nvlink");
  EXPECT_EQ(deriveKind(box("NVIDIA L4", 2, 0, false)).kind, "l4-x2-pcie");
  // NVLink unknown: no interconnect in the name, and the source says why.
  const DerivedKind unknown = deriveKind(box("NVIDIA H200", 4, std::nullopt, false));
  EXPECT_EQ(unknown.kind, "h200-x4");
  EXPECT_NE(unknown.basis.find("interconnect unknown"), std::string::npos) << unknown.basis;
  const DerivedKind h200 = deriveKind(box("NVIDIA H200", 2, 18, true));
  EXPECT_EQ(h200.basis, "2x NVIDIA H200, NVLink through NVSwitch (NVLink from nvml)");
  // Mixed models.
  PlanTopology mixed = box("NVIDIA L4", 2, 0, false);
  mixed.gpus[1].model = "Tesla T4";
  EXPECT_EQ(deriveKind(mixed).kind, "l4+t4-x2-pcie");
}

TEST(GpuModels, KindFromFixtures) {
  struct Case {
    const char* fixture;
    const char* kind;
  };
  for (const Case& c : {Case{"fixtures/topologies/hwloc/nvidiaDGX2.xml", "v100-x16-nvswitch"},
                        Case{"fixtures/topologies/hwloc/power8gpudistances.xml", "p100-x4-nvlink"},
                        Case{"fixtures/topologies/hwloc/g4dnmetal.xml", "t4-x8-pcie"},
                        Case{"fixtures/topologies/nccl/panlichen_8xrtx3090_topo.xml", "rtx3090-x8-pcie"},
                        Case{"fixtures/topologies/hwloc/h200x4-vm.xml", "h200-x4"}}) {
    PEERLAB_ASSERT_OK_AND_ASSIGN(topology::Topology topo, topology::loadFile(testing::sourcePath(c.fixture)));
    EXPECT_EQ(deriveKind(fromTopology(topo)).kind, c.kind) << c.fixture;
  }
}

TEST(GpuModels, KindOptionThenEnvironmentThenDerived) {
  const DerivedKind hw = deriveKind(box("NVIDIA H200", 2, 18, true));
  unsetenv("PEERLAB_KIND");
  PEERLAB_ASSERT_OK_AND_ASSIGN(report::RunKind derived, report::chooseKind(report::kindRequest("", false), hw));
  EXPECT_EQ(derived.name, "h200-x2-nvswitch");
  EXPECT_EQ(derived.source, report::KindSource::kHardware);
  setenv("PEERLAB_KIND", "nvidia-h200-x2", 1);
  PEERLAB_ASSERT_OK_AND_ASSIGN(report::RunKind env, report::chooseKind(report::kindRequest("", false), hw));
  EXPECT_EQ(env.name, "h200-x2-nvswitch");
  EXPECT_EQ(env.source, report::KindSource::kEnvironment);
  EXPECT_EQ(env.given, "nvidia-h200-x2");
  PEERLAB_ASSERT_OK_AND_ASSIGN(report::RunKind option, report::chooseKind(report::kindRequest("h200-x2", false), hw));
  EXPECT_EQ(option.source, report::KindSource::kOption);
  setenv("PEERLAB_KIND", "lab-a", 1);
  EXPECT_FALSE(report::chooseKind(report::kindRequest("", false), hw).isOk());
  unsetenv("PEERLAB_KIND");
}

TEST(GpuModels, WhichGpusABuildRuns) {
  // The ci preset: Turing machine code, Hopper machine code and PTX.
  EXPECT_EQ(buildRunsOn("75-real;90", 75), true);
  EXPECT_EQ(buildRunsOn("75-real;90", 86), false);  // no sm_8x code, and PTX 90 is newer than 8.6
  EXPECT_EQ(buildRunsOn("75-real;90", 100), true);  // PTX 90 is JIT-compiled
  EXPECT_EQ(buildRunsOn("75-real,90", 70), false);
  // The default list: machine code for 75, 80, 90, 100, 120 and PTX of 120.
  const char* defaults = "75-real,80-real,90-real,100-real,120";
  EXPECT_EQ(buildRunsOn(defaults, 86), true);  // sm_80 code runs on 8.6
  EXPECT_EQ(buildRunsOn(defaults, 89), true);
  EXPECT_EQ(buildRunsOn(defaults, 103), true);  // sm_100 code runs on 10.3
  EXPECT_EQ(buildRunsOn(defaults, 70), false);
  EXPECT_EQ(buildRunsOn(defaults, 60), false);
  EXPECT_EQ(buildRunsOn("90a-real", 90), true);
  EXPECT_EQ(buildRunsOn("90a-real", 100), false);  // arch-specific code runs on that GPU only
  EXPECT_EQ(buildRunsOn("80-virtual", 86), true);
  EXPECT_EQ(buildRunsOn("native", 90), std::nullopt);
  EXPECT_EQ(buildRunsOn("all-major", 90), std::nullopt);
}

TEST(GpuModels, MissingKernelCodeNamesTheArchitecture) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(topology::Topology dgx2,
                               topology::loadFile(testing::sourcePath("fixtures/topologies/hwloc/nvidiaDGX2.xml")));
  const std::string why = missingKernelCode(fromTopology(dgx2), "75-real,90");
  EXPECT_EQ(why,
            "this build holds no code for sm_70 (16x Tesla V100-SXM3-32GB-H; built for CUDA architectures 75-real,90)");
  PEERLAB_ASSERT_OK_AND_ASSIGN(
      topology::Topology fermi,
      topology::loadFile(testing::sourcePath("fixtures/topologies/hwloc/32em64t-2n8c2t-pci-wholeio.xml")));
  EXPECT_NE(missingKernelCode(fromTopology(fermi), "75-real,90").find("sm_35, sm_20"), std::string::npos);
  EXPECT_EQ(missingKernelCode(box("NVIDIA H200", 2, 18, true), "75-real,90"), "");
  EXPECT_EQ(missingKernelCode(fromTopology(dgx2), "native"), "");  // cannot tell: says nothing
}

// fixtures/expectations marks the machines CUDA 13 cannot run ("cuda13_runs": false, with why): exactly those whose
// GPUs get no code from a CUDA 13 build of every architecture it supports. Plans and estimates for them are planning
// exercises; no target counts them (docs/qualify.md).
TEST(GpuModels, FixturesMarkWhatCuda13CannotRun) {
  namespace fs = std::filesystem;
  const std::string cuda13 = "75-real;80-real;90-real;100-real;120";  // CMakeLists.txt's default list for CUDA 13
  int marked = 0;
  for (const auto& entry : fs::directory_iterator(testing::sourcePath("fixtures/expectations"))) {
    std::ifstream in(entry.path());
    const nlohmann::json e = nlohmann::json::parse(in, nullptr, false);
    ASSERT_FALSE(e.is_discarded()) << entry.path();
    if (e.value("no_nvidia_gpu", false)) continue;
    PEERLAB_ASSERT_OK_AND_ASSIGN(
        topology::Topology topo,
        topology::loadFile(testing::sourcePath("fixtures/" + e["fixture"].get<std::string>())));
    const std::string no_code = missingKernelCode(fromTopology(topo), cuda13);
    const bool runs = e.value("cuda13_runs", true);
    EXPECT_EQ(runs, no_code.empty()) << entry.path() << ": " << (runs ? no_code : "marked as not running on CUDA 13");
    if (!runs) {
      ++marked;
      EXPECT_FALSE(e.value("cuda13_why", std::string()).empty()) << entry.path() << " says not why";
    }
  }
  EXPECT_EQ(marked, 3);  // the DGX-2 (V100), the POWER8 Minsky (P100) and the Kepler/Fermi box
}

}  // namespace
}  // namespace peerlab::qualify
