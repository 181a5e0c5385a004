#include "harness/report/machine.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "harness/report/report.h"
#include "reference/testing/testing.h"

namespace peerlab::report {
namespace {

using nlohmann::json;

DerivedKind hardware(const std::string& kind) {
  return {kind, "the hardware of this test"};
}

TEST(MachineKind, ParsesTheCanonicalSpellingAndItsAliases) {
  auto k = parseKind("h100-x2-nvswitch");
  ASSERT_TRUE(k);
  EXPECT_EQ(k->model, "h100");
  EXPECT_EQ(k->count, 2);
  EXPECT_EQ(k->interconnect, "nvswitch");
  EXPECT_EQ(parseKind("nvidia-h100-x2")->canonical(), "h100-x2");
  EXPECT_EQ(parseKind("NVIDIA-H200-X4-NVSWITCH")->canonical(), "h200-x4-nvswitch");
  EXPECT_EQ(parseKind("l4_x2_pcie")->canonical(), "l4-x2-pcie");
  EXPECT_EQ(parseKind("rtx6000-ada-x4-pcie")->model, "rtx6000-ada");
  EXPECT_EQ(parseKind("l4+t4-x2-pcie")->model, "l4+t4");
  EXPECT_EQ(parseKind("h100-x1")->canonical(), "h100-x1");
  // Not hardware kinds.
  for (const char* label : {"lab-rack-3", "mine", "", "-x2", "h100-x", "h100-xx2", "h100-x1-nvswitch", "a/b"})
    EXPECT_FALSE(parseKind(label)) << label;
}

TEST(MachineKind, AnAliasOfTheHardwareIsFiledUnderTheCanonicalKind) {
  const DerivedKind hw = hardware("h100-x2-nvswitch");
  PEERLAB_ASSERT_OK_AND_ASSIGN(RunKind none, chooseKind({}, hw));
  EXPECT_EQ(none.name, "h100-x2-nvswitch");
  EXPECT_EQ(none.source, KindSource::kHardware);
  EXPECT_TRUE(none.given.empty());
  PEERLAB_ASSERT_OK_AND_ASSIGN(RunKind alias, chooseKind({"nvidia-h100-x2", "", false}, hw));
  EXPECT_EQ(alias.name, "h100-x2-nvswitch");
  EXPECT_EQ(alias.source, KindSource::kOption);
  EXPECT_EQ(alias.given, "nvidia-h100-x2");
  EXPECT_FALSE(alias.overridden);
  PEERLAB_ASSERT_OK_AND_ASSIGN(RunKind env, chooseKind({"", "h100-x2-nvswitch", false}, hw));
  EXPECT_EQ(env.name, "h100-x2-nvswitch");
  EXPECT_EQ(env.source, KindSource::kEnvironment);
  EXPECT_TRUE(env.given.empty());
  // The option wins over the environment.
  PEERLAB_ASSERT_OK_AND_ASSIGN(RunKind both, chooseKind({"h100-x2", "lab-a", false}, hw));
  EXPECT_EQ(both.source, KindSource::kOption);
  EXPECT_EQ(both.name, "h100-x2-nvswitch");
  // The hardware cannot tell the interconnect: the given one completes it.
  PEERLAB_ASSERT_OK_AND_ASSIGN(RunKind completed, chooseKind({"h200-x4-nvswitch", "", false}, hardware("h200-x4")));
  EXPECT_EQ(completed.name, "h200-x4-nvswitch");
}

TEST(MachineKind, AKindThatContradictsTheHardwareIsRefusedNamingBoth) {
  const DerivedKind hw = hardware("h100-x2-nvswitch");
  for (const char* given : {"nvidia-h200-x2", "h100-x4-nvswitch", "h100-x2-pcie", "lab-rack-3"}) {
    auto k = chooseKind({given, "", false}, hw);
    ASSERT_FALSE(k.isOk()) << given;
    EXPECT_EQ(k.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(k.status().message().find(given), std::string::npos) << k.status().message();
    EXPECT_NE(k.status().message().find("h100-x2-nvswitch"), std::string::npos) << k.status().message();
    EXPECT_NE(k.status().message().find("--kind-override"), std::string::npos) << k.status().message();
  }
  auto env = chooseKind({"", "nvidia-h200-x2", false}, hw);
  ASSERT_FALSE(env.isOk());
  EXPECT_NE(env.status().message().find("$PEERLAB_KIND"), std::string::npos) << env.status().message();
  // With the override the given kind is kept, and the run says it was overridden.
  PEERLAB_ASSERT_OK_AND_ASSIGN(RunKind over, chooseKind({"lab-rack-3", "", true}, hw));
  EXPECT_EQ(over.name, "lab-rack-3");
  EXPECT_TRUE(over.overridden);
  EXPECT_EQ(over.hardware, "h100-x2-nvswitch");
  // Characters a file name cannot carry are refused whatever the override.
  EXPECT_FALSE(chooseKind({"a/b", "", true}, hw).isOk());
  EXPECT_FALSE(chooseKind({std::string(200, 'k'), "", true}, hw).isOk());
  // Hardware unknown (an imported run): the kind is kept, in the canonical spelling where it is one.
  PEERLAB_ASSERT_OK_AND_ASSIGN(RunKind unknown, chooseKind({"NVIDIA-H100-X2", "", false}, {}));
  EXPECT_EQ(unknown.name, "h100-x2");
  EXPECT_FALSE(unknown.overridden);
}

TEST(MachineKind, RunFilesReadAgainstTheirHardware) {
  const DerivedKind hw = hardware("h100-x2-nvswitch");
  // A file that called a derived kind by an alias (the 6b15c97 run): the canonical kind, from the hardware.
  RunKind legacy =
      kindOfRunFile("nvidia-h100-x2", "derived from 2x NVIDIA H100 80GB HBM3, NVLink through NVSwitch", "", false, hw);
  EXPECT_EQ(legacy.name, "h100-x2-nvswitch");
  EXPECT_EQ(legacy.source, KindSource::kHardware);
  EXPECT_EQ(legacy.given, "nvidia-h100-x2");
  RunKind option = kindOfRunFile("nvidia-h100-x2", "--kind", "", false, hw);
  EXPECT_EQ(option.name, "h100-x2-nvswitch");
  EXPECT_EQ(option.source, KindSource::kOption);
  RunKind unsaid = kindOfRunFile("nvidia-h100-x2", "", "", false, hw);
  EXPECT_EQ(unsaid.source, KindSource::kHardware);
  EXPECT_EQ(kindOfRunFile("", "", "", false, hw).name, "h100-x2-nvswitch");
  // A stated kind the hardware contradicts is kept as stated and reads as overridden, never as derived.
  RunKind other = kindOfRunFile("h200-x2-nvswitch", "derived from 2x NVIDIA H200", "", false, hw);
  EXPECT_EQ(other.name, "h200-x2-nvswitch");
  EXPECT_TRUE(other.overridden);
  EXPECT_EQ(other.source, KindSource::kRunFile);
}

TEST(MachineKind, SameHardwareIgnoresSpellingAndAnUnsaidInterconnect) {
  EXPECT_TRUE(sameHardware("h200-x4-nvswitch", "nvidia-h200-x4"));
  EXPECT_TRUE(sameHardware("h200-x4", "h200-x4-nvswitch"));
  EXPECT_FALSE(sameHardware("h200-x4-nvswitch", "h200-x4-pcie"));
  EXPECT_FALSE(sameHardware("h200-x4-nvswitch", "h100-x4-nvswitch"));
  EXPECT_FALSE(sameHardware("h200-x4-nvswitch", "h200-x2-nvswitch"));
  EXPECT_TRUE(sameHardware("lab-a", "lab-a"));
  EXPECT_FALSE(sameHardware("lab-a", "lab-b"));
}

Fingerprint twoGpus(const std::string& host, const std::string& model, const std::string& a, const std::string& b) {
  Fingerprint fp;
  fp.hostname = host;
  fp.gpus = {{0, a, "0000:00:06.0", model}, {1, b, "0000:00:07.0", model}};
  return fp;
}

TEST(NodeIdentity, GpuUuidsBeforeTheBoardSerialBeforeTheHostName) {
  const Fingerprint one = twoGpus("vm", "NVIDIA H200", "GPU-aaaa", "GPU-bbbb");
  const Fingerprint swapped = twoGpus("vm", "NVIDIA H200", "GPU-bbbb", "GPU-aaaa");
  const Fingerprint other = twoGpus("vm", "NVIDIA H200", "GPU-cccc", "GPU-dddd");
  const NodeIdentity n = nodeIdentity(one, "SER123");
  EXPECT_EQ(n.basis, "gpu_uuids");
  EXPECT_EQ(n.id.rfind("gpus-", 0), 0u) << n.id;
  EXPECT_EQ(n.id.size(), 5u + 12u);
  EXPECT_EQ(n.board_serial, "SER123");
  // The same GPUs in another order are the same node; other GPUs on a host of the same name are not.
  EXPECT_EQ(nodeIdentity(swapped, "").id, n.id);
  EXPECT_NE(nodeIdentity(other, "").id, n.id);
  Fingerprint noGpus;
  noGpus.hostname = "vm";
  EXPECT_EQ(nodeIdentity(noGpus, "SER123").basis, "board_serial");
  EXPECT_NE(nodeIdentity(noGpus, "SER123").id, nodeIdentity(noGpus, "SER124").id);
  EXPECT_EQ(nodeIdentity(noGpus, "").id, "host-vm");
  EXPECT_EQ(nodeIdentity(noGpus, "").basis, "hostname");
  EXPECT_TRUE(nodeIdentity(Fingerprint{}, "").empty());
}

TEST(NodeIdentity, BoardSerialPlaceholdersReadAsUnknown) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("peerlab-board-serial-" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  auto serial = [&](const std::string& text) {
    std::ofstream(dir + "/serial") << text;
    return readBoardSerial(dir + "/serial");
  };
  EXPECT_EQ(serial("PXE1234567\n"), "PXE1234567");
  for (const char* placeholder : {"None\n", "Not Specified\n", "To be filled by O.E.M.\n", "Default string\n", "\n"})
    EXPECT_EQ(serial(placeholder), "") << placeholder;
  EXPECT_EQ(serial("ab\x1b[31m\n"), "");
  EXPECT_EQ(readBoardSerial(dir + "/missing"), "");
}

TEST(MachineKind, HardwareMismatchNamesBothFingerprints) {
  const Fingerprint h200 = twoGpus("vm", "NVIDIA H200", "GPU-a", "GPU-b");
  const Fingerprint h200b = twoGpus("vm", "NVIDIA H200", "GPU-c", "GPU-d");
  const Fingerprint h100 = twoGpus("vm", "NVIDIA H100 80GB HBM3", "GPU-e", "GPU-f");
  EXPECT_EQ(hardwareMismatch(h200, "h200-x2-nvswitch", h200b, "h200-x2-nvswitch"), "");
  const std::string why = hardwareMismatch(h200, "h200-x2-nvswitch", h100, "h100-x2-nvswitch");
  EXPECT_EQ(why, "2x NVIDIA H200 (h200-x2-nvswitch) against 2x NVIDIA H100 80GB HBM3 (h100-x2-nvswitch)");
  Fingerprint four = h200;
  four.gpus.push_back({2, "GPU-g", "", "NVIDIA H200"});
  four.gpus.push_back({3, "GPU-h", "", "NVIDIA H200"});
  EXPECT_NE(hardwareMismatch(h200, "", four, ""), "");
  // A run without a GPU list (imported) is held against the other by its kind.
  EXPECT_NE(hardwareMismatch(Fingerprint{}, "h100-x2-nvswitch", h200, "h200-x2-nvswitch"), "");
  EXPECT_EQ(hardwareMismatch(Fingerprint{}, "", h200, "h200-x2-nvswitch"), "");
}

// A run file of 2x H100 through NVSwitch that names its kind by an alias, as the committed 6b15c97 run did.
json legacyRun() {
  json gpus = json::array(), topo = json::array(), pairs = json::array();
  for (int g = 0; g < 2; ++g) {
    gpus.push_back(
        {{"ordinal", g}, {"uuid", "GPU-" + std::to_string(g)}, {"bus_id", ""}, {"name", "NVIDIA H100 80GB HBM3"}});
    topo.push_back({{"index", g}, {"bus_id", ""}, {"model", "NVIDIA H100 80GB HBM3"}, {"uuid", ""}});
    pairs.push_back({{"src", g}, {"dst", 1 - g}, {"pci", "SYS"}, {"nvlinks", 18}, {"nvswitch", true}});
  }
  return {{"schema_version", 1},
          {"tool", "peerlab 0.1.0"},
          {"git_sha", "6b15c97"},
          {"timestamp", "2026-11-26T19:15:49Z"},
          {"fingerprint",
           {{"hostname", "vm"}, {"driver", "580"}, {"cuda_runtime", "13.0"}, {"nccl", "2.28"}, {"gpus", gpus}}},
          {"kind", "nvidia-h100-x2"},
          {"kind_source", "derived from 2x NVIDIA H100 80GB HBM3, NVLink through NVSwitch (NVLink from nvml)"},
          {"plan",
           {{"mode", "quick"},
            {"topology",
             {{"source", "live"},
              {"format", "live"},
              {"gpus", topo},
              {"pairs", pairs},
              {"nvswitches", 1},
              {"nvlink_source", "nvml"}}}}},
          {"results", json::array()}};
}

TEST(MachineKind, TheReaderNormalizesAnAliasAndWritesTypedFields) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(report::Run run, fromJson(legacyRun()));
  EXPECT_EQ(run.kind.name, "h100-x2-nvswitch");
  EXPECT_EQ(run.kind.source, KindSource::kHardware);
  EXPECT_EQ(run.kind.given, "nvidia-h100-x2");
  EXPECT_EQ(run.kind.hardware, "h100-x2-nvswitch");
  EXPECT_EQ(run.node.basis, "gpu_uuids");
  EXPECT_FALSE(run.extra.contains("kind"));
  const json out = toJson(run);
  EXPECT_EQ(out["kind"], "h100-x2-nvswitch");
  EXPECT_EQ(out["kind_source"], "hardware");
  EXPECT_EQ(out["kind_given"], "nvidia-h100-x2");
  EXPECT_EQ(out["node"]["id"], run.node.id);
  EXPECT_FALSE(out.contains("kind_overridden"));
  // Read again: the same.
  PEERLAB_ASSERT_OK_AND_ASSIGN(report::Run again, fromJson(out));
  EXPECT_EQ(again.kind.name, run.kind.name);
  EXPECT_EQ(again.kind.source, run.kind.source);
  EXPECT_EQ(again.node.id, run.node.id);
  // Another model under a "derived" kind is not believed.
  json lie = legacyRun();
  lie["kind"] = "h200-x2-nvswitch";
  PEERLAB_ASSERT_OK_AND_ASSIGN(report::Run other, fromJson(lie));
  EXPECT_EQ(other.kind.name, "h200-x2-nvswitch");
  EXPECT_TRUE(other.kind.overridden);
  EXPECT_EQ(other.kind.source, KindSource::kRunFile);
  // Typed fields are checked: a node that is not an object, a basis peerlab does not know.
  json bad = legacyRun();
  bad["node"] = "vm";
  EXPECT_FALSE(fromJson(bad).isOk());
  bad["node"] = {{"id", "x"}, {"basis", "moon"}};
  EXPECT_FALSE(fromJson(bad).isOk());
}

// Every committed run file, qualify bundle, baseline and reliability file states its kind in the canonical spelling,
// the kind of its own hardware, and is named by it: reports/runs/<date>-<kind>-<sha7>[-tag].json,
// reports/qualify/<date>-<kind>-<sha7>[-level]/, reports/baselines/<kind>.json, reports/reliability/<date>-<kind>.json.
TEST(MachineKind, EveryCommittedFileCarriesItsCanonicalKindAndIsNamedByIt) {
  namespace fs = std::filesystem;
  const fs::path root = peerlab::testing::sourcePath("reports");
  int checked = 0;
  auto stated = [](const fs::path& file) -> json {
    auto text = readRunText(file.string());  // plain or gzip-compressed, as the run reader takes them
    EXPECT_TRUE(text.isOk()) << file << ": " << text.status().toString();
    return text.isOk() ? json::parse(*text, nullptr, false) : json();
  };
  // The kind the hardware gives (model x count; the interconnect, where stated, must agree).
  auto expectKind = [&](const fs::path& file, const json& doc, const std::vector<GpuFingerprint>& gpus) {
    SCOPED_TRACE(file.string());
    ASSERT_TRUE(doc.is_object() && doc.contains("kind") && doc["kind"].is_string());
    const std::string kind = doc["kind"].get<std::string>();
    auto parts = parseKind(kind);
    ASSERT_TRUE(parts.has_value()) << kind;
    EXPECT_EQ(parts->canonical(), kind) << "not the canonical spelling";
    if (!gpus.empty()) {  // a reliability file of a stand-in run names no GPUs
      const DerivedKind hw = deriveKind(gpus);
      EXPECT_TRUE(sameHardware(kind, hw.kind)) << kind << " against the hardware's " << hw.kind;
    }
    std::string name = file.filename() == "results.json" || file.filename() == "results.json.gz"
                           ? file.parent_path().filename().string()
                           : file.filename().string();
    for (const char* ext : {".json.gz", ".json"}) {
      const size_t n = std::strlen(ext);
      if (name.size() > n && name.compare(name.size() - n, n, ext) == 0) {
        name.resize(name.size() - n);
        break;
      }
    }
    const bool named =
        name == kind || name.find("-" + kind + "-") != std::string::npos ||
        (name.size() > kind.size() && name.compare(name.size() - kind.size() - 1, std::string::npos, "-" + kind) == 0);
    EXPECT_TRUE(named) << name << " is not named by " << kind;
    ++checked;
  };
  for (const char* dir : {"runs", "baselines"}) {
    for (const auto& e : fs::directory_iterator(root / dir)) {
      if (!isRunFileName(e.path().string())) continue;
      auto run = readRun(e.path().string());
      ASSERT_TRUE(run.isOk()) << run.status().toString();
      expectKind(e.path(), stated(e.path()), run->fingerprint.gpus);
      EXPECT_EQ(run->kind.name, stated(e.path())["kind"].get<std::string>()) << e.path();
    }
  }
  for (const auto& e : fs::directory_iterator(root / "qualify")) {
    if (!e.is_directory()) continue;
    const fs::path results = bundleResults(e.path().string());
    ASSERT_FALSE(results.empty()) << e.path() << " holds no results.json(.gz)";
    auto run = readRun(results.string());
    ASSERT_TRUE(run.isOk()) << run.status().toString();
    expectKind(results, stated(results), run->fingerprint.gpus);
  }
  for (const auto& e : fs::directory_iterator(root / "reliability")) {
    if (e.path().extension() != ".json") continue;
    const json doc = stated(e.path());
    std::vector<GpuFingerprint> gpus;
    if (doc.contains("fingerprint") && doc["fingerprint"].contains("gpus")) {
      for (const auto& g : doc["fingerprint"]["gpus"])
        gpus.push_back({g.value("ordinal", -1), g.value("uuid", ""), g.value("bus_id", ""), g.value("name", "")});
    }
    expectKind(e.path(), doc, gpus);
  }
  EXPECT_GE(checked, 20);
}

}  // namespace
}  // namespace peerlab::report
