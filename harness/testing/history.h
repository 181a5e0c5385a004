#pragma once
/// Test support for the history store: synthetic runs and a fresh database on each backend (header-only: a test that
/// uses it links peerlab::history, as it does anyway).

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "harness/history/database.h"
#include "harness/report/report.h"

namespace peerlab::testing {

/// A run of `kind` on `host`: peer copies (256 MiB, bandwidth) and flag latency (time) for every ordered pair of
/// `gpus` GPUs, an alltoallv row without a pair, a ctest row and a probe row (neither is a performance series).
/// `bw` and `lat` scale the figures; `noise` is the relative spread.
inline report::Run syntheticRun(std::mt19937_64& rng, int index, const std::string& host, const std::string& kind,
                                double bw = 1.0, double lat = 1.0, double noise = 0.01, int gpus = 4,
                                const std::string& driver = "580.159.04") {
  std::normal_distribution<double> n(0.0, noise);
  report::Run run;
  run.tool = "peerlab 0.1.0";
  char sha[41];
  std::snprintf(sha, sizeof sha, "%040x", 0xabc000 + index);
  run.git_sha = sha;
  char ts[32];
  std::snprintf(ts, sizeof ts, "2026-10-%02dT%02d:%02d:00Z", 1 + index / 96, (index / 4) % 24, (index % 4) * 15);
  run.timestamp = ts;
  run.fingerprint.hostname = host;
  run.fingerprint.driver = driver;
  run.fingerprint.cuda_runtime = "13.0";
  run.fingerprint.nccl = "2.28.3";
  for (int g = 0; g < gpus; ++g)
    run.fingerprint.gpus.push_back(
        {g, "GPU-" + host + "-" + std::to_string(g), "0000:00:0" + std::to_string(g) + ".0", "NVIDIA H200"});
  if (!kind.empty()) {
    run.kind.name = kind;
    run.kind.source = report::KindSource::kOption;
    // A test kind that names no hardware ("kind-x") is filed as qualify --kind-override files it.
    run.kind.overridden = !report::sameHardware(kind, report::deriveKind(run.fingerprint.gpus).kind);
  }
  run.node = report::nodeIdentity(run.fingerprint, "");
  for (int s = 0; s < gpus; ++s) {
    for (int d = 0; d < gpus; ++d) {
      if (s == d) continue;
      report::Result copy;
      copy.suite = "peer_copy";
      copy.name = "uni";
      copy.impl = "peerlab.ce";
      copy.src = s;
      copy.dst = d;
      copy.bytes = 268435456.0;
      copy.algbw_gbps = 380.0 * bw * (1 + n(rng));
      copy.busbw_gbps = copy.algbw_gbps;
      copy.time_us = *copy.bytes / *copy.algbw_gbps / 1e3;
      copy.wrong = 0;
      copy.extra = {{"p10_us", *copy.time_us * 0.99}, {"p90_us", *copy.time_us * 1.01}, {"samples", 5.0}};
      run.results.push_back(copy);
      report::Result flag;
      flag.suite = "peer_latency";
      flag.name = "one_way";
      flag.impl = "peerlab.flag";
      flag.src = s;
      flag.dst = d;
      flag.bytes = 0.0;
      flag.time_us = 0.8 * lat * (1 + n(rng));
      flag.algbw_gbps = 0.0;
      flag.extra = {{"p10_us", *flag.time_us * 0.98}, {"p90_us", *flag.time_us * 1.02}, {"samples", 15.0}};
      run.results.push_back(flag);
    }
  }
  report::Result a2a;
  a2a.suite = "alltoallv";
  a2a.name = "uniform";
  a2a.impl = "peerlab.alltoallv";
  a2a.ranks = gpus;
  a2a.bytes = 4096.0;
  a2a.time_us = 10.0 * lat * (1 + n(rng));
  a2a.algbw_gbps = *a2a.bytes / *a2a.time_us / 1e3;
  a2a.extra = {{"samples_us", nlohmann::json::array({*a2a.time_us, *a2a.time_us * 1.01, *a2a.time_us * 0.99})}};
  run.results.push_back(a2a);
  report::Result test;
  test.suite = "test";
  test.name = "core_gpu_test";
  test.impl = "ctest";
  test.time_us = 2.5e6 * (1 + 5 * n(rng));
  run.results.push_back(test);
  report::Result probe;
  probe.suite = "probe";
  probe.name = "ce_write/4096";
  probe.impl = "peerlab.probe";
  probe.src = 0;
  probe.dst = 1;
  probe.bytes = 4096.0;
  probe.time_us = 500 * (1 + 10 * n(rng));
  run.results.push_back(probe);
  return run;
}

/// Results per synthetic run of `gpus` GPUs.
inline int syntheticResults(int gpus = 4) {
  return 2 * gpus * (gpus - 1) + 3;
}

/// The PostgreSQL server the ctest fixture started (pg_cluster.sh), or "" with the reason in `why`.
inline std::string postgresServerUrl(std::string* why) {
#ifndef PEERLAB_HAVE_LIBPQ
  *why = "built without PostgreSQL's client library (libpq)";
  return "";
#endif
  const char* state = std::getenv("PEERLAB_HISTORY_PG_STATE");
#ifdef PEERLAB_HISTORY_PG_STATE_DIR
  if (!state) state = PEERLAB_HISTORY_PG_STATE_DIR;
#endif
  if (!state) {
    *why = "PEERLAB_HISTORY_PG_STATE is not set (run through ctest, whose fixture starts the server)";
    return "";
  }
  std::ifstream url(std::string(state) + "/url");
  std::string u;
  if (url >> u) return u;
  std::ifstream skip(std::string(state) + "/skip");
  std::string reason((std::istreambuf_iterator<char>(skip)), std::istreambuf_iterator<char>());
  *why = "no PostgreSQL server: " + (reason.empty() ? std::string("the fixture did not start one") : reason);
  return "";
}

/// A new empty database on that server, named after `tag`; its URL.
inline std::string freshPostgresDatabase(const std::string& server, const std::string& tag) {
  static std::atomic<int> counter{0};
  std::string name = "peerlab_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++);
  for (char& c : name)
    c = std::isalnum(static_cast<unsigned char>(c)) ? static_cast<char>(std::tolower(c)) : '_';
  auto db = history::openDatabase(server);
  EXPECT_TRUE(db.isOk()) << db.status().toString();
  if (!db.isOk()) return "";
  EXPECT_TRUE((*db)->exec("DROP DATABASE IF EXISTS " + name).isOk());
  Status st = (*db)->exec("CREATE DATABASE " + name);
  EXPECT_TRUE(st.isOk()) << st.toString();
  return server.substr(0, server.rfind('/') + 1) + name;
}

}  // namespace peerlab::testing
