// Every topology fixture against its expectation file (fixtures/expectations/<fixture file name>.json), found at
// run time: a new fixture is the XML plus its expectation, nothing else.

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/topology/topology.h"
#include "reference/testing/testing.h"

namespace peerlab::topology {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<std::string> expectationFiles() {
  std::vector<std::string> files;
  fs::path dir = testing::sourcePath("fixtures/expectations");
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.is_regular_file() && entry.path().extension() == ".json") files.push_back(entry.path().filename());
  }
  std::sort(files.begin(), files.end());
  return files;
}

json readJson(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in, nullptr, /*allow_exceptions=*/false);
}

std::string paramName(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param.substr(0, info.param.size() - 5);  // drop ".json"
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

class FixtureExpectation : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureExpectation, LoadsAsExpected) {
  const std::string expectation_path = testing::sourcePath("fixtures/expectations/" + GetParam());
  json e = readJson(expectation_path);
  ASSERT_TRUE(e.is_object()) << expectation_path << " is not valid JSON";
  ASSERT_TRUE(e.contains("fixture") && e.contains("notes")) << expectation_path << " needs fixture and notes";
  const std::string fixture = testing::sourcePath("fixtures/" + e["fixture"].get<std::string>());
  EXPECT_EQ(fs::path(fixture).filename().string() + ".json", GetParam()) << "expectation named after its fixture";

  PEERLAB_ASSERT_OK_AND_ASSIGN(Topology topo, loadFile(fixture));
  EXPECT_EQ(topo.source(), fixture);
  EXPECT_EQ(sourceFormatName(topo.format()), e["format"].get<std::string>());
  ASSERT_EQ(topo.gpus().size(), e["gpu_count"].get<size_t>());

  if (e.contains("other_gpus")) {
    std::set<std::pair<std::string, std::string>> want, got;
    for (const auto& o : e["other_gpus"])
      want.insert({o["bus_id"].get<std::string>(), o["model"].get<std::string>()});
    for (const OtherGpu& o : topo.otherGpus())
      got.insert({o.bus_id, o.model});
    EXPECT_EQ(got, want);
  }
  if (e["no_nvidia_gpu"].get<bool>()) {
    EXPECT_TRUE(topo.pairs().empty());
    std::string msg = topo.noGpuMessage();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_NE(msg.find(fixture), std::string::npos) << msg;
    for (const auto& part : e["message_contains"]) {
      EXPECT_NE(msg.find(part.get<std::string>()), std::string::npos) << "missing '" << part << "' in: " << msg;
    }
    return;
  }

  EXPECT_EQ(topo.nvswitchCount(), e["nvswitches"].get<int>());
  EXPECT_EQ(topo.gpuNumaNodes(), e["numa_nodes"].get<std::vector<int>>());
  if (e["nvlink_source"].is_null()) {
    EXPECT_EQ(topo.nvlinkSource(), "");
  } else {
    EXPECT_EQ(topo.nvlinkSource(), e["nvlink_source"].get<std::string>());
  }

  for (const auto& g : e["gpus"]) {
    const int i = g["index"];
    ASSERT_LT(i, static_cast<int>(topo.gpus().size()));
    const Gpu& gpu = topo.gpus()[i];
    SCOPED_TRACE("GPU" + std::to_string(i));
    EXPECT_EQ(gpu.index, i);
    EXPECT_EQ(gpu.bus_id, g["bus_id"].get<std::string>());
    EXPECT_EQ(gpu.model, g["model"].get<std::string>());
    EXPECT_EQ(gpu.numa, g["numa"].get<std::vector<int>>());
    EXPECT_EQ(gpu.cpuset, g["cpuset"].get<std::string>());
    EXPECT_EQ(gpu.cuda_ordinal, -1);
    // NVLinks to other GPUs only (direct or through NVSwitches), null when the source cannot tell.
    if (g.contains("nvlink_links")) {
      if (g["nvlink_links"].is_null()) {
        EXPECT_FALSE(gpu.nvlink_links.has_value());
      } else {
        ASSERT_TRUE(gpu.nvlink_links.has_value());
        EXPECT_EQ(*gpu.nvlink_links, g["nvlink_links"].get<int>());
      }
    }
    // The GPU's PCIe rate per direction (GB/s after encoding), null when unknown.
    if (g.contains("pcie_gbps")) {
      if (g["pcie_gbps"].is_null()) {
        EXPECT_FALSE(gpu.pcie.has_value());
      } else {
        ASSERT_TRUE(gpu.pcie.has_value());
        EXPECT_NEAR(gpu.pcie->gbps, g["pcie_gbps"].get<double>(), 1e-6);
        EXPECT_FALSE(gpu.pcie->source.empty());
      }
    }
  }

  const size_t n = topo.gpus().size();
  ASSERT_EQ(e["pairs"].size(), n * (n - 1) / 2) << "the expectation lists every pair once";
  ASSERT_EQ(topo.pairs().size(), n * (n - 1) / 2);
  for (const auto& p : e["pairs"]) {
    const int a = p["a"];
    const int b = p["b"];
    SCOPED_TRACE("pair " + std::to_string(a) + "-" + std::to_string(b));
    const GpuPair* got = topo.pair(a, b);
    ASSERT_NE(got, nullptr);
    EXPECT_EQ(got, topo.pair(b, a));
    EXPECT_EQ(got->a, a);
    EXPECT_EQ(got->b, b);
    EXPECT_EQ(pciPathName(got->pci), p["pci"].get<std::string>());
    if (p["nvlink_links"].is_null()) {
      EXPECT_FALSE(got->nvlink_links.has_value());
    } else {
      ASSERT_TRUE(got->nvlink_links.has_value());
      EXPECT_EQ(*got->nvlink_links, p["nvlink_links"].get<int>());
      EXPECT_EQ(topo.nvlinkLinksSeenFrom(a, b), topo.nvlinkLinksSeenFrom(b, a));
    }
    if (p["nvlink_gbps"].is_null()) {
      EXPECT_FALSE(got->nvlink_gbps.has_value());
    } else {
      ASSERT_TRUE(got->nvlink_gbps.has_value());
      EXPECT_DOUBLE_EQ(*got->nvlink_gbps, p["nvlink_gbps"].get<double>());
    }
    EXPECT_EQ(got->nvswitch, p["nvswitch"].get<bool>());
    EXPECT_FALSE(got->p2p.has_value());
  }

  // The JSON carries the same answer.
  json j = topo.toJson();
  EXPECT_EQ(j["source"], fixture);
  EXPECT_EQ(j["pair_order"], "a<b");
  EXPECT_EQ(j["gpus"].size(), n);
  EXPECT_EQ(j["pairs"].size(), n * (n - 1) / 2);
  EXPECT_EQ(j["nvswitches"], e["nvswitches"]);
  for (size_t k = 0; k < e["pairs"].size(); ++k) {
    EXPECT_EQ(j["pairs"][k]["a"], e["pairs"][k]["a"]);
    EXPECT_EQ(j["pairs"][k]["b"], e["pairs"][k]["b"]);
    EXPECT_EQ(j["pairs"][k]["pci"], e["pairs"][k]["pci"]);
    EXPECT_EQ(j["pairs"][k]["nvlink_links"], e["pairs"][k]["nvlink_links"]);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureExpectation, ::testing::ValuesIn(expectationFiles()), paramName);

// Every fixture has an expectation and every expectation names an existing fixture.
TEST(FixtureCoverage, EveryFixtureHasAnExpectation) {
  std::set<std::string> expectations;
  for (const std::string& f : expectationFiles())
    expectations.insert(f);
  size_t fixtures = 0;
  for (const char* kind : {"hwloc", "nccl"}) {
    fs::path dir = testing::sourcePath(std::string("fixtures/topologies/") + kind);
    for (const auto& entry : fs::directory_iterator(dir)) {
      if (entry.path().extension() != ".xml") continue;
      ++fixtures;
      EXPECT_TRUE(expectations.count(entry.path().filename().string() + ".json"))
          << "no fixtures/expectations/" << entry.path().filename().string() << ".json";
    }
  }
  EXPECT_GE(fixtures, 9u);
  EXPECT_EQ(expectations.size(), fixtures);
}

}  // namespace
}  // namespace peerlab::topology
