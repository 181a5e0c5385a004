#include "harness/qualify/config.h"

#include <gtest/gtest.h>

#include "harness/qualify/plan.h"
#include "reference/core/files.h"
#include "reference/testing/temp_dir.h"
#include "reference/testing/testing.h"

namespace peerlab::qualify {
namespace {

TEST(Config, BuiltInDefaultIsTheRepositoryFile) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(std::string text, readTextFile(testing::sourcePath("reports/qualify.toml")));
  EXPECT_EQ(text, defaultConfigText());
  PEERLAB_ASSERT_OK_AND_ASSIGN(QualifyConfig fromFile, loadConfig(testing::sourcePath("reports/qualify.toml")));
  PEERLAB_ASSERT_OK_AND_ASSIGN(QualifyConfig builtIn, defaultConfig());
  EXPECT_EQ(fromFile.bandwidth.size(), builtIn.bandwidth.size());
  EXPECT_DOUBLE_EQ(builtIn.nvlink_gbps, 26.5625);
  // The file's noise rule is the built-in one (report::kDefault*), as calibrated.
  EXPECT_DOUBLE_EQ(builtIn.baseline_rule.threshold_pct, report::kDefaultThresholdPct);
  EXPECT_DOUBLE_EQ(builtIn.baseline_rule.jitter_us, report::kDefaultJitterUs);
  EXPECT_DOUBLE_EQ(builtIn.baseline_rule.spread_factor, report::kDefaultSpreadFactor);
  EXPECT_DOUBLE_EQ(fromFile.baseline_rule.jitter_us, builtIn.baseline_rule.jitter_us);
  EXPECT_DOUBLE_EQ(builtIn.baseline_rule.threshold_pct, 10.0);
  // The default rule: copy-engine one-way copies at 0.80 of the NVLink line rate.
  bool ceUni = false;
  for (const BandwidthRule& r : builtIn.bandwidth) {
    if (r.id == "peer_copy_ce_uni") {
      ceUni = true;
      EXPECT_DOUBLE_EQ(r.efficiency, 0.80);
      EXPECT_EQ(r.suite, "peer_copy");
      EXPECT_DOUBLE_EQ(r.directions, 1);
    }
    EXPECT_GT(r.efficiency, 0) << r.id;
    EXPECT_FALSE(r.note.empty()) << r.id;
  }
  EXPECT_TRUE(ceUni);
  EXPECT_FALSE(builtIn.latency.empty());
}

TEST(Config, ParsesValuesAndDefaults) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(QualifyConfig c, parseConfig(R"(
# comment
[qualify]
baseline_threshold_pct = 7.5   # trailing comment
baseline_spread_factor = 2
fail_unclaimed = true
[links]
nvlink_gbps = 25
[expect.x]
suite = "peer_copy"
name = "uni#1"
efficiency = 0.5
pcie_efficiency = 0.45
min_bytes = 1_048_576
[latency.y]
suite = "zcopy"
max_us = 3
)",
                                                            "t.toml"));
  EXPECT_DOUBLE_EQ(c.baseline_rule.threshold_pct, 7.5);
  EXPECT_DOUBLE_EQ(c.baseline_rule.spread_factor, 2);
  EXPECT_DOUBLE_EQ(c.baseline_rule.jitter_us, report::kDefaultJitterUs);  // default kept
  EXPECT_TRUE(c.fail_unclaimed);
  EXPECT_TRUE(c.require_link_info);  // default kept
  EXPECT_DOUBLE_EQ(c.nvlink_gbps, 25);
  ASSERT_EQ(c.bandwidth.size(), 1u);
  EXPECT_EQ(c.bandwidth[0].id, "x");
  EXPECT_EQ(c.bandwidth[0].name, "uni#1");  // '#' inside a string is not a comment
  EXPECT_EQ(c.bandwidth[0].impl, "*");
  EXPECT_DOUBLE_EQ(c.bandwidth[0].min_bytes, 1048576);
  EXPECT_DOUBLE_EQ(c.bandwidth[0].pcie_efficiency, 0.45);
  ASSERT_EQ(c.latency.size(), 1u);
  EXPECT_DOUBLE_EQ(c.latency[0].max_us, 3);
  EXPECT_DOUBLE_EQ(c.latency[0].max_bytes, 8);
}

TEST(Config, ErrorsNameFileAndLine) {
  auto unknownKey = parseConfig("[qualify]\nbaseline_threshold = 5\n", "my.toml");
  ASSERT_FALSE(unknownKey.isOk());
  EXPECT_NE(unknownKey.status().message().find("my.toml:2: unknown key baseline_threshold"), std::string::npos)
      << unknownKey.status().message();
  auto badNumber = parseConfig("[links]\nnvlink_gbps = fast\n", "my.toml");
  ASSERT_FALSE(badNumber.isOk());
  EXPECT_NE(badNumber.status().message().find("my.toml:2:"), std::string::npos);
  auto wrongType = parseConfig("[links]\nnvlink_gbps = \"25\"\n", "my.toml");
  ASSERT_FALSE(wrongType.isOk());
  EXPECT_NE(wrongType.status().message().find("must be a number"), std::string::npos);
  auto range = parseConfig("[expect.a]\nsuite = \"zcopy\"\nefficiency = 3\n", "my.toml");
  ASSERT_FALSE(range.isOk());
  EXPECT_NE(range.status().message().find("my.toml:3:"), std::string::npos) << range.status().message();
  EXPECT_FALSE(parseConfig("[nonsense]\na = 1\n", "my.toml").isOk());
  EXPECT_FALSE(parseConfig("[expect.a]\nefficiency = 0.5\n", "my.toml").isOk());  // no suite
  // A new rule that can give PCIe figures names pcie_efficiency: it is never taken from efficiency.
  auto noPcie = parseConfig("[expect.a]\nsuite = \"zcopy\"\nefficiency = 0.5\n", "my.toml");
  ASSERT_FALSE(noPcie.isOk());
  EXPECT_NE(noPcie.status().message().find("[expect.a] gives PCIe figures"), std::string::npos)
      << noPcie.status().message();
  EXPECT_NE(noPcie.status().message().find("names no pcie_efficiency"), std::string::npos);
  PEERLAB_EXPECT_OK(
      parseConfig("[expect.a]\nsuite = \"zcopy\"\nefficiency = 0.5\nnvlink_only = true\n", "my.toml").status());
  PEERLAB_EXPECT_OK(
      parseConfig("[expect.a]\nsuite = \"host_copy\"\nscope = \"device\"\nefficiency = 0.5\n", "my.toml").status());
  EXPECT_FALSE(parseConfig("[expect.a]\nsuite = \"host_copy\"\nscope = \"host\"\n", "my.toml").isOk());
  EXPECT_FALSE(parseConfig("[latency.a]\nsuite = \"zcopy\"\n", "my.toml").isOk());  // no max_us
  EXPECT_FALSE(parseConfig("[qualify\n", "my.toml").isOk());
  EXPECT_FALSE(parseConfig("[expect.a]\nsuite = \"zcopy\nx=1\n", "my.toml").isOk());
  EXPECT_FALSE(parseConfig("[qualify]\nfail_unclaimed = true\nfail_unclaimed = false\n", "my.toml").isOk());
  auto missing = loadConfig("/nonexistent/qualify.toml");
  ASSERT_FALSE(missing.isOk());
  EXPECT_NE(missing.status().message().find("/nonexistent/qualify.toml"), std::string::npos);
}

TEST(Config, TomlErrorsAndOwnedTables) {
  // The health checks own [health]: any key there is theirs.
  PEERLAB_ASSERT_OK_AND_ASSIGN(QualifyConfig c, parseConfig("[health]\npcie_replays_fail = 80\nanything = \"x\"\n"
                                                            "[health.xid]\nfail = true\n[links]\nsys_factor = 0.4\n",
                                                            "h.toml"));
  EXPECT_DOUBLE_EQ(c.sys_factor, 0.4);
  struct Case {
    std::string text;
    std::string needle;
  };
  const Case cases[] = {
      {"[links]\n\npcie_gbps = 25\n",
       "my.toml:3: [links] pcie_gbps is no longer read: PCIe figures come from each GPU's"},
      {"[expect.a]\nsuite = \"x\"\n\nscope = \"rack\"\n",
       "my.toml:4: [expect.a] scope must be one of \"pair\", "
       "\"gpu\", \"host\", \"gpu_pcie\""},
      {"[expect.a]\nsuite = \"x\"\nefficency = 0.8\n", "my.toml:3: unknown key efficency in [expect.a]"},
      {"[latency.b]\nsuite = \"x\"\nmax_us = 1\nmax_ms = 2\n", "my.toml:4: unknown key max_ms in [latency.b]"},
      {"top = 1\n[qualify]\n", "my.toml:1: key top must be inside a [table]"},
      {"[qualify]\nx = [1,\n", "my.toml:"},
      {"[links]\nsys_factor = 1.5\n", "my.toml:2: [links] sys_factor = 1.5 is outside 0 .. 1"},
      {"[links]\nnvlink_gbps = 25\n[links]\nsys_factor = 0.5\n", "my.toml:3:"},
      {"[expect]\nsuite = \"x\"\n", "my.toml:2: expect.suite must be a table [expect.suite]"},
      {"[bogus]\na = 1\n", "my.toml:1: unknown table [bogus]"},
  };
  for (const Case& k : cases) {
    auto r = parseConfig(k.text, "my.toml");
    ASSERT_FALSE(r.isOk()) << k.text;
    EXPECT_NE(r.status().message().find(k.needle), std::string::npos) << r.status().message();
    EXPECT_EQ(r.status().message().find('\n'), std::string::npos) << r.status().message();
  }
  PEERLAB_ASSERT_OK_AND_ASSIGN(
      QualifyConfig host, parseConfig("[expect.h]\nsuite = \"host_copy\"\nscope = \"host\"\npcie_efficiency = 0.8\n"
                                      "[expect.all]\nsuite = \"host_copy\"\nscope = \"gpu_pcie\"\n"
                                      "pcie_efficiency = 0.8\n",
                                      "my.toml"));
  ASSERT_EQ(host.bandwidth.size(), 2u);
}

// A --config file applies over the built-in one, table by table and key by key: what it does not name keeps its
// default, so a plan made with it has every expected figure and latency bound the default has.
class ConfigOverride : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = dir_.path() + "/" + name;
    EXPECT_TRUE(writeTextFile(path, text).isOk());
    return path;
  }
  // Expected figures and latency bounds of a plan for two NVLinked GPUs.
  std::pair<size_t, size_t> planned(const QualifyConfig& c) {
    PlanTopology t;
    t.source = t.format = "live";
    for (int g = 0; g < 2; ++g)
      t.gpus.push_back({g, "", "NVIDIA H200", "", 18, 26.5625});
    t.pairs.push_back({0, 1, "SYS", 18, 478.125, true});
    t.pairs.push_back({1, 0, "SYS", 18, 478.125, true});
    t.gpus[0].pcie = t.gpus[1].pcie = topology::pcieLinkFromGenWidth(5, 16, "test").value();
    auto plan = makePlan(t, c, {});
    EXPECT_TRUE(plan.isOk()) << plan.status().toString();
    return plan.isOk() ? std::make_pair(plan->expectations.size(), plan->latency.size()) : std::make_pair(0ul, 0ul);
  }
  testing::TempDir dir_{"config-override"};
};

TEST_F(ConfigOverride, PartialFileKeepsEveryDefaultRule) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(QualifyConfig builtIn, defaultConfig());
  const auto before = planned(builtIn);
  ASSERT_GE(before.first, 10u);
  ASSERT_GE(before.second, 5u);
  PEERLAB_ASSERT_OK_AND_ASSIGN(QualifyConfig c,
                               loadConfig(write("partial.toml", "[qualify]\nbaseline_threshold_pct = 3\n")));
  EXPECT_DOUBLE_EQ(c.baseline_rule.threshold_pct, 3);
  EXPECT_EQ(c.bandwidth.size(), builtIn.bandwidth.size());
  EXPECT_EQ(planned(c), before);
  EXPECT_NE(c.source.find("built-in reports/qualify.toml + "), std::string::npos) << c.source;
}

TEST_F(ConfigOverride, EmptyFileIsTheDefault) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(QualifyConfig builtIn, defaultConfig());
  PEERLAB_ASSERT_OK_AND_ASSIGN(QualifyConfig c, loadConfig(write("empty.toml", "")));
  EXPECT_EQ(planned(c), planned(builtIn));
  EXPECT_TRUE(c.disabled_rules.empty());
}

TEST_F(ConfigOverride, RuleKeysChangeOneByOneAndRulesAreAdded) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(QualifyConfig builtIn, defaultConfig());
  PEERLAB_ASSERT_OK_AND_ASSIGN(QualifyConfig c, loadConfig(write("rules.toml", R"(
[expect.peer_copy_ce_uni]
efficiency = 0.9
[expect.peer_copy_ce_small]
suite = "peer_copy"
impl = "peerlab.ce"
name = "uni"
efficiency = 0.1
pcie_efficiency = 0.1
min_bytes = 1048576
[latency.zcopy_graph]
max_us = 12
)")));
  ASSERT_EQ(c.bandwidth.size(), builtIn.bandwidth.size() + 1);
  for (const BandwidthRule& r : c.bandwidth) {
    if (r.id != "peer_copy_ce_uni") continue;
    EXPECT_DOUBLE_EQ(r.efficiency, 0.9);
    EXPECT_EQ(r.suite, "peer_copy");            // kept
    EXPECT_DOUBLE_EQ(r.min_bytes, 67108864.0);  // kept
    EXPECT_DOUBLE_EQ(r.pcie_efficiency, 0.80);  // kept, not copied from the new efficiency
  }
  for (const LatencyRule& l : c.latency) {
    if (l.id == "zcopy_graph") {
      EXPECT_DOUBLE_EQ(l.max_us, 12);
      EXPECT_DOUBLE_EQ(l.max_bytes, 64);
    }
  }
  const auto before = planned(builtIn);
  EXPECT_EQ(planned(c), std::make_pair(before.first + 2, before.second));  // one more figure per ordered pair
}

TEST_F(ConfigOverride, DisablingARuleIsExplicitAndListed) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(QualifyConfig builtIn, defaultConfig());
  PEERLAB_ASSERT_OK_AND_ASSIGN(QualifyConfig c, loadConfig(write("off.toml", R"(
[expect.peer_copy_ce_uni]
enabled = false
[latency.zcopy_graph]
enabled = false
)")));
  EXPECT_EQ(c.bandwidth.size(), builtIn.bandwidth.size() - 1);
  EXPECT_EQ(c.latency.size(), builtIn.latency.size() - 1);
  EXPECT_EQ(c.disabled_rules, (std::vector<std::string>{"expect.peer_copy_ce_uni", "latency.zcopy_graph"}));
  const auto before = planned(builtIn);
  EXPECT_EQ(planned(c), std::make_pair(before.first - 2, before.second - 1));
  PlanTopology t;
  auto plan = makePlan(t, c, {});
  ASSERT_TRUE(plan.isOk());
  EXPECT_EQ(toJson(*plan)["disabled_rules"].size(), 2u);
  // Disabling a rule that does not exist is a typo, not a no-op.
  auto typo = loadConfig(write("typo-off.toml", "[expect.peer_copy_ce_unii]\nenabled = false\n"));
  ASSERT_FALSE(typo.isOk());
  EXPECT_NE(typo.status().message().find("typo-off.toml:1: [expect.peer_copy_ce_unii] enabled = false names no rule"),
            std::string::npos)
      << typo.status().message();
}

TEST_F(ConfigOverride, UnknownKeysDirectoriesAndNonTomlAreRefusedNamingTheFile) {
  auto unknown = loadConfig(write("unknown.toml", "[qualify]\nbaseline_treshold_pct = 3\n"));
  ASSERT_FALSE(unknown.isOk());
  EXPECT_NE(unknown.status().message().find("unknown.toml:2: unknown key baseline_treshold_pct in [qualify]"),
            std::string::npos)
      << unknown.status().message();
  auto table = loadConfig(write("table.toml", "[qualfy]\nx = 1\n"));
  ASSERT_FALSE(table.isOk());
  EXPECT_NE(table.status().message().find("table.toml:1: unknown table [qualfy]"), std::string::npos)
      << table.status().message();
  auto ruleKey = loadConfig(write("rulekey.toml", "[expect.peer_copy_ce_uni]\nefficency = 0.5\n"));
  ASSERT_FALSE(ruleKey.isOk());
  EXPECT_NE(ruleKey.status().message().find("rulekey.toml:2: unknown key efficency in [expect.peer_copy_ce_uni]"),
            std::string::npos)
      << ruleKey.status().message();
  auto directory = loadConfig(dir_.path());
  ASSERT_FALSE(directory.isOk());
  EXPECT_NE(directory.status().message().find("is a directory, not a TOML file"), std::string::npos);
  auto notToml = loadConfig(write("run.json", "{\"schema_version\": 1}\n"));
  ASSERT_FALSE(notToml.isOk());
  EXPECT_NE(notToml.status().message().find("run.json:1:"), std::string::npos) << notToml.status().message();
  EXPECT_NE(notToml.status().message().find("not a TOML file?"), std::string::npos) << notToml.status().message();
  // The [health] thresholds merge the same way.
  PEERLAB_ASSERT_OK_AND_ASSIGN(health::Thresholds base, loadHealthThresholds(""));
  PEERLAB_ASSERT_OK_AND_ASSIGN(health::Thresholds h,
                               loadHealthThresholds(write("health.toml", "[health]\npcie_max_replays = 7\n")));
  EXPECT_DOUBLE_EQ(h.pcie_max_replays, 7);
  EXPECT_DOUBLE_EQ(h.nvlink_max_crc_per_s, base.nvlink_max_crc_per_s);
  EXPECT_FALSE(loadHealthThresholds(write("health-typo.toml", "[health]\npcie_max_replay = 7\n")).isOk());
}

TEST(Config, Glob) {
  EXPECT_TRUE(globMatch("peerlab.sm_[pq]*", "peerlab.sm_pull"));
  EXPECT_FALSE(globMatch("peerlab.sm_[pq]*", "peerlab.sm_store"));
  EXPECT_TRUE(globMatch("*", ""));
  EXPECT_TRUE(globMatch("peerlab.ce*", "peerlab.ce"));
  EXPECT_TRUE(globMatch("peerlab.ce*", "peerlab.ce_read"));
  EXPECT_FALSE(globMatch("peerlab.ce*", "nccl.ce"));
  EXPECT_TRUE(globMatch("uni*", "uni"));
  EXPECT_FALSE(globMatch("uni*", "bidir"));
  EXPECT_TRUE(globMatch("a?c", "abc"));
  EXPECT_TRUE(globMatch("*sm*", "peerlab.sm_pull"));
  EXPECT_FALSE(globMatch("abc", "abcd"));
}

}  // namespace
}  // namespace peerlab::qualify
