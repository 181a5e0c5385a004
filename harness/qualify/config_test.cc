#include "harness/qualify/config.h"

#include <gtest/gtest.h>

#include "reference/core/files.h"
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
  EXPECT_DOUBLE_EQ(builtIn.baseline_threshold_pct, 5.0);
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
fail_unclaimed = true
[links]
nvlink_gbps = 25
[expect.x]
suite = "peer_copy"
name = "uni#1"
efficiency = 0.5
min_bytes = 1_048_576
[latency.y]
suite = "zcopy"
max_us = 3
)",
                                                            "t.toml"));
  EXPECT_DOUBLE_EQ(c.baseline_threshold_pct, 7.5);
  EXPECT_TRUE(c.fail_unclaimed);
  EXPECT_TRUE(c.require_link_info);  // default kept
  EXPECT_DOUBLE_EQ(c.nvlink_gbps, 25);
  ASSERT_EQ(c.bandwidth.size(), 1u);
  EXPECT_EQ(c.bandwidth[0].id, "x");
  EXPECT_EQ(c.bandwidth[0].name, "uni#1");  // '#' inside a string is not a comment
  EXPECT_EQ(c.bandwidth[0].impl, "*");
  EXPECT_DOUBLE_EQ(c.bandwidth[0].min_bytes, 1048576);
  EXPECT_DOUBLE_EQ(c.bandwidth[0].pcie_efficiency, 0.5);  // follows efficiency unless given
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
  EXPECT_FALSE(parseConfig("[expect.a]\nefficiency = 0.5\n", "my.toml").isOk());    // no suite
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
  PEERLAB_ASSERT_OK_AND_ASSIGN(QualifyConfig host,
                               parseConfig("[expect.h]\nsuite = \"host_copy\"\nscope = \"host\"\n"
                                           "[expect.all]\nsuite = \"host_copy\"\nscope = \"gpu_pcie\"\n",
                                           "my.toml"));
  ASSERT_EQ(host.bandwidth.size(), 2u);
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
