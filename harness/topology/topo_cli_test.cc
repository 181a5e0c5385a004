// `peerlab topo` as a user runs it: the built binary (PEERLAB_BINARY), its output, its one-line errors and exit codes.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/testing/cli.h"
#include "harness/topology/topology.h"
#include "reference/testing/temp_dir.h"
#include "reference/testing/testing.h"

namespace peerlab::topology {
namespace {

namespace fs = std::filesystem;
using testing::CliRun;
using testing::readFile;
using testing::runPeerlab;
using testing::TempDir;

constexpr int kExitUsage = 2;  // harness/cli/command.h
constexpr int kExitNoGpu = 3;

// Runs `peerlab topo <args>`.
CliRun runTopo(std::vector<std::string> args) {
  args.insert(args.begin(), "topo");
  return runPeerlab(args);
}

std::string fixture(const std::string& name) {
  return testing::sourcePath("fixtures/topologies/" + name);
}

void expectOneErrorLine(const CliRun& r, const std::string& path, const std::string& reason) {
  EXPECT_EQ(r.err.rfind("peerlab topo: " + path, 0), 0u) << r.err;
  EXPECT_NE(r.err.find(reason), std::string::npos) << r.err;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "exactly one line: " << r.err;
}

TEST(TopoCli, JsonShapeOnTheDgx2Fixture) {
  std::string path = fixture("hwloc/nvidiaDGX2.xml");
  CliRun r = runTopo({"--fixture", path, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["source"], path);
  EXPECT_EQ(j["pair_order"], "a<b");
  EXPECT_EQ(j["nvswitches"], 12);
  ASSERT_EQ(j["gpus"].size(), 16u);
  for (size_t i = 0; i < 16; ++i) {
    const auto& g = j["gpus"][i];
    EXPECT_EQ(g["index"], i);
    EXPECT_TRUE(g["bus_id"].is_string());
    EXPECT_EQ(g["model"], "Tesla V100-SXM3-32GB-H");
    ASSERT_TRUE(g["numa"].is_array());
    EXPECT_EQ(g["numa"][0], i < 8 ? 0 : 1);
    EXPECT_TRUE(g.contains("cpuset") && g.contains("cuda_ordinal") && g.contains("uuid"));
  }
  EXPECT_EQ(j["gpus"][0]["bus_id"], "0000:34:00.0");
  ASSERT_EQ(j["pairs"].size(), 120u);
  for (const auto& p : j["pairs"]) {
    EXPECT_LT(p["a"].get<int>(), p["b"].get<int>());
    EXPECT_TRUE(p["pci"].is_string());
    EXPECT_EQ(p["nvlink_gbps"], 150.0);
    EXPECT_EQ(p["nvlink_links"], 6);
    EXPECT_EQ(p["nvswitch"], true);
  }
  EXPECT_EQ(j["pairs"][0]["pci"], "PIX");
}

TEST(TopoCli, MatrixOnTheH200Fixture) {
  CliRun r = runTopo({"--fixture", fixture("hwloc/h200x4-vm.xml")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* part : {"GPU3", "PHB", "NVIDIA H200", "CPU Affinity", "NUMA Affinity", "0-63", "Legend:"}) {
    EXPECT_NE(r.out.find(part), std::string::npos) << "missing '" << part << "' in:\n" << r.out;
  }
  EXPECT_EQ(r.out.find("NV18"), std::string::npos) << "NVLink is not in that XML";
}

TEST(TopoCli, NcclFixtureJson) {
  CliRun r = runTopo({"--json", "--fixture", fixture("nccl/aws_p4d-24xl-topo.xml")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["format"], "nccl");
  EXPECT_EQ(j["gpus"].size(), 8u);
  EXPECT_EQ(j["pairs"].size(), 28u);
}

TEST(TopoCli, MissingFileIsAUsageError) {
  TempDir tmp;
  std::string path = tmp.path() + "/nope.xml";
  CliRun r = runTopo({"--fixture", path});
  EXPECT_EQ(r.exit_code, kExitUsage);
  expectOneErrorLine(r, path, "no such file");
  EXPECT_EQ(r.out, "");
}

TEST(TopoCli, TruncatedFileIsAUsageError) {
  TempDir tmp;
  std::string full = readFile(fixture("hwloc/g4dnmetal.xml"));
  ASSERT_GT(full.size(), 50000u);
  std::string path = tmp.path() + "/truncated.xml";
  std::ofstream(path, std::ios::binary) << full.substr(0, full.size() / 2);
  CliRun r = runTopo({"--fixture", path});
  EXPECT_EQ(r.exit_code, kExitUsage);
  expectOneErrorLine(r, path, "malformed XML: line ");
}

TEST(TopoCli, HwlocCrashInputIsAUsageError) {
  // A fuzz finding: hwloc 2.9 segfaults importing this file (a PU with cpuset but no complete_cpuset).
  std::string path = testing::sourcePath("fixtures/fuzz/topology/crash-a1a4f3c76a80c104a5f89dc732584b442dab5741");
  for (bool json : {false, true}) {
    CliRun r = runTopo(json ? std::vector<std::string>{"--fixture", path, "--json"}
                            : std::vector<std::string>{"--fixture", path});
    EXPECT_EQ(r.exit_code, kExitUsage) << r.err;
    expectOneErrorLine(r, path,
                       ": invalid hwloc topology: line 9: <object type=\"PU\"> has cpuset but no complete_cpuset");
    EXPECT_EQ(r.out, "");
  }
}

TEST(TopoCli, ControlCharactersInInputStayOnOneLine) {
  std::string path = testing::sourcePath("fixtures/fuzz/topology/crash-437d23008514f1178c8c92056596cad271c701e3");
  CliRun r = runTopo({"--fixture", path});
  EXPECT_EQ(r.exit_code, kExitUsage);
  expectOneErrorLine(r, path, "malformed XML: line 1: StartTag: invalid element name");

  TempDir tmp;
  std::string odd = tmp.path() + "/two\nlines.xml";
  std::ofstream(odd, std::ios::binary) << "<html/>";
  CliRun o = runTopo({"--fixture", odd});
  EXPECT_EQ(o.exit_code, kExitUsage);
  expectOneErrorLine(o, tmp.path() + "/two\\nlines.xml", "the root element is <html>");
}

// Values outside their range (fixtures/fuzz/topology/range-*.xml) are bad input: exit 2, one line naming the
// attribute and its value.
TEST(TopoCli, OutOfRangeValuesAreUsageErrors) {
  const std::pair<const char*, const char*> cases[] = {
      {"range-nvlink-count.xml", "<nvlink> attribute count = \"100000000000000000000\" is outside 0 .. 64"},
      {"range-nvlink-negative.xml", "<nvlink> attribute count = \"-2\" is outside 0 .. 64"},
      {"range-numaid.xml", "<cpu> attribute numaid = \"4294967296\" is outside -1 .. 65535"},
      {"range-hwloc-numa-os-index.xml",
       "<object type=\"NUMANode\"> attribute os_index = \"4294967296\" is outside 0 .. 65535"},
  };
  for (const auto& [name, reason] : cases) {
    const std::string path = testing::sourcePath(std::string("fixtures/fuzz/topology/") + name);
    for (bool json : {false, true}) {
      CliRun r = runTopo(json ? std::vector<std::string>{"--fixture", path, "--json"}
                              : std::vector<std::string>{"--fixture", path});
      EXPECT_EQ(r.exit_code, kExitUsage) << name << r.err;
      expectOneErrorLine(r, path, reason);
      EXPECT_EQ(r.out, "");
    }
  }
}

TEST(TopoCli, DirectoryIsAUsageError) {
  TempDir tmp;
  CliRun r = runTopo({"--fixture", tmp.path(), "--json"});
  EXPECT_EQ(r.exit_code, kExitUsage);
  expectOneErrorLine(r, tmp.path(), "is a directory");
}

TEST(TopoCli, EmptyFixtureOptionIsAUsageError) {
  CliRun r = runTopo({"--fixture", ""});
  EXPECT_EQ(r.exit_code, kExitUsage);
  EXPECT_EQ(r.err, "peerlab topo: --fixture needs a file path\n");
}

TEST(TopoCli, AmdOnlyTopologyExitsNoGpu) {
  std::string path = fixture("hwloc/eas-tioga.xml");
  CliRun r = runTopo({"--fixture", path});
  EXPECT_EQ(r.exit_code, kExitNoGpu);
  expectOneErrorLine(r, path, ": no NVIDIA GPU in this topology (found 8 other GPUs: 8x AMD INSTINCT MI200");
  EXPECT_NE(r.out.find("4 NUMA nodes"), std::string::npos) << r.out;

  CliRun j = runTopo({"--json", "--fixture", path});
  EXPECT_EQ(j.exit_code, kExitNoGpu);
  nlohmann::json doc = nlohmann::json::parse(j.out, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << j.out;
  EXPECT_TRUE(doc["gpus"].empty());
  EXPECT_EQ(doc["other_gpus"].size(), 8u);
}

TEST(TopoCli, LiveMachineAnswersWithoutCrashing) {
  auto live = loadLive();
  PEERLAB_ASSERT_OK(live.status());
  CliRun r = runTopo({});
  if (live->gpus().empty()) {
    EXPECT_EQ(r.exit_code, kExitNoGpu) << r.err;
    EXPECT_NE(r.err.find("peerlab topo: this machine: no NVIDIA GPU"), std::string::npos) << r.err;
    EXPECT_NE(r.out.find("Machine: "), std::string::npos) << r.out;
  } else {
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("GPU0"), std::string::npos) << r.out;
  }
  CliRun j = runTopo({"--json"});
  EXPECT_EQ(j.exit_code, r.exit_code);
  nlohmann::json doc = nlohmann::json::parse(j.out, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << j.out;
  EXPECT_EQ(doc["source"], "live");
  EXPECT_EQ(doc["gpus"].size(), live->gpus().size());
}

// One 100 KB internal entity referenced 4,000 times (400 MB once expanded), in an NCCL and in an hwloc XML: refused
// at once with exit 2, before peerlab copies the document or hwloc's loader (in its contained child) sees it.
TEST(TopoCli, EntityExpansionIsRefusedQuickly) {
  TempDir tmp;
  auto write = [&](const std::string& name, const std::string& text) {
    const std::string path = tmp.file(name);
    EXPECT_TRUE(testing::writeFile(path, text));
    return path;
  };
  const std::string entity = "<!DOCTYPE %ROOT% [<!ENTITY big \"" + std::string(100 * 1024, 'x') + "\">]>\n";
  std::string refs;
  for (int i = 0; i < 4000; ++i)
    refs += "&big;";
  const std::string nccl = write("nccl.xml", std::regex_replace(entity, std::regex("%ROOT%"), "system") +
                                                 "<system version=\"1\"><cpu numaid=\"0\" "
                                                 "affinity=\"" +
                                                 refs + "\" arch=\"x86_64\"/></system>\n");
  const std::string hwloc =
      write("hwloc.xml", std::regex_replace(entity, std::regex("%ROOT%"), "topology") +
                             "<topology version=\"2.0\"><object type=\"Machine\" os_index=\"0\" cpuset=\"0x1\" "
                             "complete_cpuset=\"0x1\" name=\"" +
                             refs + "\"/></topology>\n");
  for (const std::string& path : {nccl, hwloc}) {
    const auto start = std::chrono::steady_clock::now();
    CliRun r = runTopo({"--fixture", path});
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(r.exit_code, kExitUsage) << r.out << r.err;
    expectOneErrorLine(r, path, "declares the entity \"big\"");
    EXPECT_LT(seconds, 5.0);
  }
}

}  // namespace
}  // namespace peerlab::topology
