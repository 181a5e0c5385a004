#pragma once
/// Hand-built history site models for tests (tests only).

#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>

namespace peerlab::report::testing {

/// One kind ("h200-x4-nvswitch") with `runs` runs on one host: `groups` plot groups of `per_group` bandwidth series
/// each, a 5% step down at run runs/2 in the first series (a change point and a regression), a driver change at the
/// last run, a fleet outlier, a 4-GPU bandwidth heatmap with one weak link (1->2 at 50% of expected) and a latency
/// heatmap. A second kind ("h200-x2-nvswitch") has one series and nothing else.
inline nlohmann::json historyModel(int runs = 12, int groups = 2, int per_group = 10) {
  using nlohmann::json;
  auto runTs = [](int r) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "2026-11-%02dT02:00:00Z", 1 + r);
    return std::string(buf);
  };
  auto sha = [](int r) { return std::to_string(1000000 + r) + "abcdef0123456789"; };
  json series = json::array();
  for (int g = 0; g < groups; ++g) {
    for (int i = 0; i < per_group; ++i) {
      const int src = i % 4;
      const int dst = (i / 4 + src + 1) % 4;
      json s = {{"id", "s" + std::to_string(g) + "_" + std::to_string(i)},
                {"group", "peer_copy uni " + std::string(g == 0 ? "peerlab.ce" : "peerlab.sm_push") + " (GB/s)"},
                {"suite", "peer_copy"},
                {"impl", g == 0 ? "peerlab.ce" : "peerlab.sm_push"},
                {"name", "uni"},
                {"src", src},
                {"dst", dst},
                {"ranks", 1},
                {"bytes", 268435456.0 * (1 + i / 12)},
                {"metric", "algbw_gbps"},
                {"unit", "GB/s"},
                {"host", "node-a"},
                {"points", json::array()},
                {"change_points", json::array()}};
      for (int r = 0; r < runs; ++r) {
        double v = 380.0 + ((r * 7 + i * 3) % 5) * 0.8;
        if (g == 0 && i == 0 && r >= runs / 2) v *= 0.95;
        s["points"].push_back({{"run_id", r + 1},
                               {"timestamp", runTs(r)},
                               {"git_sha", sha(r)},
                               {"driver", r == runs - 1 ? "590.10.01" : "580.159.04"},
                               {"value", v},
                               {"p10", v * 0.99},
                               {"p90", v * 1.01}});
      }
      if (g == 0 && i == 0) {
        s["change_points"].push_back(
            {{"index", runs / 2}, {"before", 381.6}, {"after", 362.5}, {"change_pct", -5.0}, {"p_value", 0.001}});
      }
      series.push_back(std::move(s));
    }
  }
  json latency = {{"id", "lat0"},
                  {"group", "peer_latency one_way (us)"},
                  {"suite", "peer_latency"},
                  {"impl", "peerlab.flag"},
                  {"name", "one_way"},
                  {"src", 0},
                  {"dst", 1},
                  {"ranks", 1},
                  {"bytes", 0},
                  {"metric", "time_us"},
                  {"unit", "us"},
                  {"host", "node-a"},
                  {"points", json::array()},
                  {"change_points", json::array()}};
  for (int r = 0; r < runs; ++r) {
    latency["points"].push_back({{"run_id", r + 1},
                                 {"timestamp", runTs(r)},
                                 {"git_sha", sha(r)},
                                 {"driver", "580.159.04"},
                                 {"value", 0.70 + 0.01 * (r % 3)},
                                 {"p10", nullptr},
                                 {"p90", nullptr}});
  }
  series.push_back(latency);
  json bw = {{"title", "peer_copy uni peerlab.ce 256 MiB"}, {"unit", "GB/s"}, {"gpus", 4}, {"cells", json::array()}};
  json lat = {{"title", "peer_latency one_way peerlab.flag"}, {"unit", "us"}, {"gpus", 4}, {"cells", json::array()}};
  for (int s = 0; s < 4; ++s) {
    for (int d = 0; d < 4; ++d) {
      if (s == d) continue;
      const bool weak = s == 1 && d == 2;
      bw["cells"].push_back({{"src", s}, {"dst", d}, {"value", weak ? 191.25 : 380.0}, {"expected", 382.5}});
      lat["cells"].push_back({{"src", s}, {"dst", d}, {"value", weak ? 2.1 : 0.7}, {"expected", nullptr}});
    }
  }
  json kind = {
      {"kind", "h200-x4-nvswitch"},
      {"series", series},
      {"regressions", json::array({{{"suite", "peer_copy"},
                                    {"impl", "peerlab.ce"},
                                    {"name", "uni"},
                                    {"src", 0},
                                    {"dst", 1},
                                    {"ranks", 1},
                                    {"bytes", 268435456.0},
                                    {"metric", "algbw_gbps"},
                                    {"host", "node-a"},
                                    {"git_sha", sha(runs / 2)},
                                    {"timestamp", runTs(runs / 2)},
                                    {"before", 381.6},
                                    {"after", 362.5},
                                    {"change_pct", -5.0},
                                    {"p_value", 0.001},
                                    {"fingerprint_changes", json::array({"driver 580.159.04 -> 590.10.01"})}}})},
      {"fleet", json::array({{{"host", "node-q"},
                              {"series_id", "s0_1"},
                              {"value", 301.0},
                              {"median", 381.0},
                              {"mad", 1.2},
                              {"z", -44.9}}})},
      {"heatmaps", json::array({bw, lat})}};
  json small = {{"kind", "h200-x2-nvswitch"},
                {"series", json::array({latency})},
                {"regressions", json::array()},
                {"fleet", json::array()},
                {"heatmaps", json::array()}};
  return {{"generated", "2026-11-25T10:00:00Z"}, {"kinds", json::array({kind, small})}};
}

}  // namespace peerlab::report::testing
