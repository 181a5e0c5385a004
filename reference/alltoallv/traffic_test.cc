#include "reference/alltoallv/traffic.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>

#include "reference/testing/testing.h"

namespace peerlab::alltoallv {
namespace {

TrafficSpec load(const std::string& name) {
  auto spec = loadTrafficSpec(testing::sourcePath("fixtures/traffic/" + name + ".json"));
  EXPECT_TRUE(spec.isOk()) << spec.status().toString();
  return spec.isOk() ? *spec : TrafficSpec{};
}

uint64_t rowSum(const std::vector<uint64_t>& m, int n, int s) {
  uint64_t t = 0;
  for (int d = 0; d < n; ++d)
    t += m[s * n + d];
  return t;
}
uint64_t colSum(const std::vector<uint64_t>& m, int n, int d) {
  uint64_t t = 0;
  for (int s = 0; s < n; ++s)
    t += m[s * n + d];
  return t;
}

// Bounds hold for every call: buffers sized from them never overflow.
void expectWithinBounds(const TrafficParams& p, int calls) {
  const int n = p.ranks;
  for (int c = 0; c < calls; ++c) {
    auto m = trafficMatrix(p, c);
    for (int r = 0; r < n; ++r) {
      ASSERT_LE(rowSum(m, n, r), trafficSendBound(p)) << trafficKindName(p.kind) << " call " << c << " rank " << r;
      ASSERT_LE(colSum(m, n, r), trafficRecvBound(p)) << trafficKindName(p.kind) << " call " << c << " rank " << r;
    }
  }
}

TEST(Traffic, EveryFixtureLoadsAndStaysWithinItsBounds) {
  for (const char* name : {"uniform", "random", "zipf", "zero_rows", "one_receiver", "empty"}) {
    TrafficSpec s = load(name);
    EXPECT_EQ(s.name, name);
    for (int n : {1, 2, 3, 4, 8})
      expectWithinBounds(s.params(n), 50);
  }
}

TEST(Traffic, UniformSendsTheSameToEveryone) {
  TrafficParams p = load("uniform").params(4, 4096);
  auto m = trafficMatrix(p, 3);
  for (uint64_t v : m)
    EXPECT_EQ(v, 1024u);
}

TEST(Traffic, RandomVariesPerCallAndPerCellAndIsReproducible) {
  TrafficParams p = load("random").params(4);
  auto a = trafficMatrix(p, 0), b = trafficMatrix(p, 1);
  EXPECT_NE(a, b);
  EXPECT_EQ(a, trafficMatrix(p, 0));
  std::set<uint64_t> distinct(a.begin(), a.end());
  EXPECT_GT(distinct.size(), 8u);
  for (uint64_t v : a)
    EXPECT_LE(v, 2 * (p.elements / 4) + p.jitter);
  // Another seed, another matrix.
  TrafficParams q = p;
  q.seed += 1;
  EXPECT_NE(trafficMatrix(q, 0), a);
}

TEST(Traffic, ZipfConcentratesOnOneDestinationPerSource) {
  TrafficParams p = load("zipf").params(4, 100000);
  std::set<int> hot_destinations;
  for (int c = 0; c < 20; ++c) {
    auto m = trafficMatrix(p, c);
    for (int s = 0; s < 4; ++s) {
      const auto* row = &m[s * 4];
      const auto top = std::max_element(row, row + 4);
      hot_destinations.insert(static_cast<int>(top - row));
      // alpha 1.2 over 4 destinations: the hot one takes about 53%.
      EXPECT_GT(*top, 45000u);
      EXPECT_LT(*top, 60000u);
      EXPECT_LE(rowSum(m, 4, s), p.elements + 4 * p.jitter);
      EXPECT_GE(rowSum(m, 4, s), p.elements - 4);
    }
  }
  EXPECT_GT(hot_destinations.size(), 1u) << "the hot destination never rotates";
}

TEST(Traffic, ZeroRowsSilenceTheListedSources) {
  TrafficParams p = load("zero_rows").params(4);
  for (int c = 0; c < 10; ++c) {
    auto m = trafficMatrix(p, c);
    EXPECT_EQ(rowSum(m, 4, 1), 0u);
    EXPECT_EQ(rowSum(m, 4, 3), 0u);
    EXPECT_GT(rowSum(m, 4, 0) + rowSum(m, 4, 2), 0u);
  }
  // Without a list, a seeded third of the rows go silent, differently per call.
  TrafficParams q = makeTraffic(TrafficKind::kZeroRows, 8, 8000, 9);
  int zero_rows = 0;
  for (int c = 0; c < 30; ++c) {
    auto m = trafficMatrix(q, c);
    for (int s = 0; s < 8; ++s)
      zero_rows += rowSum(m, 8, s) == 0 ? 1 : 0;
  }
  EXPECT_GT(zero_rows, 30);
  EXPECT_LT(zero_rows, 130);
}

TEST(Traffic, OneReceiverGetsEverything) {
  TrafficParams p = load("one_receiver").params(4);
  auto m = trafficMatrix(p, 0);
  EXPECT_EQ(colSum(m, 4, 0), 4 * p.elements);
  for (int d = 1; d < 4; ++d)
    EXPECT_EQ(colSum(m, 4, d), 0u);
  EXPECT_EQ(trafficRecvBound(p), 4 * p.elements);
}

TEST(Traffic, EmptySendsNothing) {
  TrafficParams p = load("empty").params(4, 1000);
  for (int c = 0; c < 5; ++c)
    for (uint64_t v : trafficMatrix(p, c))
      EXPECT_EQ(v, 0u);
}

TEST(Traffic, JitterMakesMisalignedCounts) {
  TrafficParams p = makeTraffic(TrafficKind::kUniform, 4, 4096, 3, 1.2, 5);
  int odd = 0;
  for (int c = 0; c < 10; ++c)
    for (uint64_t v : trafficMatrix(p, c))
      odd += v % 2;
  EXPECT_GT(odd, 5);
}

TEST(Traffic, MatchesThePortInTheTorchBenchmark) {
  // bench/external/torch_symm_alltoallv.py re-implements the generator; these are the values it prints for the
  // benchmark's "skewed" pattern (seed 2, alpha 1.2, no jitter) at 4 ranks and 100000 elements, call 0.
  TrafficParams p = makeTraffic(TrafficKind::kZipf, 4, 100000, 2, 1.2, 0);
  const std::vector<uint64_t> python = {52845, 23002, 14140, 10012, 52845, 23002, 14140, 10012,
                                        23002, 14140, 10012, 52845, 14140, 10012, 52845, 23002};
  EXPECT_EQ(trafficMatrix(p, 0), python);
}

TEST(Traffic, BadFixturesNameTheFileAndTheField) {
  auto missing = loadTrafficSpec("/nonexistent/traffic.json");
  ASSERT_FALSE(missing.isOk());
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("/nonexistent/traffic.json"), std::string::npos);

  const std::string path = ::testing::TempDir() + "/bad_traffic.json";
  auto write = [&](const std::string& text) {
    std::ofstream(path) << text;
    return loadTrafficSpec(path);
  };
  auto bad_kind = write(R"({"name": "x", "kind": "gaussian", "seed": 1, "elements_per_rank": 4})");
  ASSERT_FALSE(bad_kind.isOk());
  EXPECT_NE(bad_kind.status().message().find("gaussian"), std::string::npos);
  auto bad_seed = write(R"({"name": "x", "kind": "random", "seed": -3, "elements_per_rank": 4})");
  ASSERT_FALSE(bad_seed.isOk());
  EXPECT_NE(bad_seed.status().message().find("seed"), std::string::npos);
  auto truncated = write(R"({"name": "x", "kind": )");
  ASSERT_FALSE(truncated.isOk());
  EXPECT_NE(truncated.status().message().find("not a JSON object"), std::string::npos);
  auto bad_rows = write(R"({"name": "x", "kind": "zero_rows", "seed": 1, "elements_per_rank": 4, "zero_rows": [9]})");
  ASSERT_FALSE(bad_rows.isOk());
  EXPECT_NE(bad_rows.status().message().find("zero_rows"), std::string::npos);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace peerlab::alltoallv
