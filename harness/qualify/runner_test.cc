#include "harness/qualify/runner.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "harness/qualify/pipeline.h"
#include "harness/testing/cli.h"
#include "reference/testing/testing.h"

namespace peerlab::qualify {
namespace {

// Shell lines a stand-in bench starts with: $out is its --benchmark_out, $plan its --plan file, and $rounds the plan's
// pair rounds as text ("0-3,2-1;3-0,1-2"; the plan file is one line of JSON, its rounds digits, commas and brackets).
const char* kReadArgs = R"(out=''; plan=''
for a in "$@"; do case "$a" in --benchmark_out=*) out="${a#--benchmark_out=}";; --plan=*) plan="${a#--plan=}";; esac; done
rounds=$(sed -n 's/.*"rounds":\(\[[][0-9,]*\]\).*/\1/p' "$plan" | sed 's/\]\],\[\[/;/g; s/\],\[/|/g; s/[][]//g; s/,/-/g; s/|/,/g')
)";

// A stand-in bench: records its arguments and plan, writes Google Benchmark JSON the way peerlab benches label their
// rows (bench/common/bench_util.h), then behaves as `mode` says.
void writeFakeBench(const std::string& dir, const std::string& name, const std::string& mode) {
  const std::string path = dir + "/" + name;
  std::ofstream f(path);
  f << "#!/bin/sh\n"
    << kReadArgs << "echo \"$@\" > " << dir << "/" << name << ".args\n"
    << "cp \"$plan\" " << dir << "/" << name << ".plan\n"
    << "pair=${rounds:-0-1}; pair=${pair%%[,;]*}; src=${pair%-*}; dst=${pair#*-}\n"
    << "entry() { printf '    {\\n      \"name\": \"BM_%s\",\\n      \"run_type\": \"iteration\",\\n      "
       "\"repetitions\": 1,\\n      \"iterations\": 1,\\n      \"label\": "
       "\"suite=%s;impl=peerlab.x;name=uni;src=%s;dst=%s;"
       "ranks=%s\",\\n      \"bytes\": 268435456,\\n      \"time_us\": 700,\\n      \"algbw_gbps\": 383.5,\\n      "
       "\"busbw_gbps\": 383.5,\\n      \"wrong\": 0\\n    }' \"$1\" \"$2\" \"$src\" \"$dst\" \"$3\"; }\n";
  if (mode == "ok") {
    f << "{ printf '{\\n  \"context\": {},\\n  \"benchmarks\": [\\n'; entry a " << name.substr(0, name.find('_'))
      << " 1; printf ',\\n'; entry b " << name.substr(0, name.find('_')) << " 1; printf '\\n  ]\\n}\\n'; } > \"$out\"\n"
      << "echo done\nexit 0\n";
  } else if (mode == "hang") {
    // One complete entry, then it hangs before closing the array: the entry is kept, the hang reported.
    f << "{ printf '{\\n  \"context\": {},\\n  \"benchmarks\": [\\n'; entry a alltoallv 4; printf ',\\n    {\\n'; } "
         "> \"$out\"\n"
      << "sleep 60\n";
  } else if (mode == "crash") {
    f << "echo 'rank 1: cudaErrorIllegalAddress' >&2\nkill -SEGV $$\n";
  }
  f.close();
  ::chmod(path.c_str(), 0755);
}

TEST(Runner, RunsJobsAndReportsEveryFailure) {
  const std::string dir = testing::scratchDir("runner");
  const std::string bin = dir + "/bin";
  std::filesystem::create_directories(bin);
  writeFakeBench(bin, "peer_copy_bench", "ok");
  writeFakeBench(bin, "zcopy_bench", "ok");
  writeFakeBench(bin, "alltoallv_bench", "hang");
  writeFakeBench(bin, "moe_bench", "crash");

  std::vector<BenchJob> jobs;
  // Two GPUs over an unknown path: every pair alone.
  report::PlanTopology t;
  for (int g = 0; g < 4; ++g)
    t.gpus.push_back({g, "", "", "", {}, {}, {}});
  auto request = [&](int gpus, std::vector<std::pair<int, int>> pairs, bool all) {
    SuiteRequest r;
    r.gpus = gpus;
    r.pairs = std::move(pairs);
    r.all_pairs = all;
    r.topology = &t;
    return r;
  };
  for (const BenchJob& j : findSuite("peer_copy")->plan(request(2, {{0, 1}, {1, 0}}, true)))
    jobs.push_back(j);
  for (const BenchJob& j : findSuite("zcopy")->plan(request(2, {{1, 0}}, false)))
    jobs.push_back(j);
  for (const BenchJob& j : findSuite("alltoallv")->plan(request(4, {}, true)))
    jobs.push_back(j);
  BenchJob crash;
  crash.suite = "moe";
  crash.binary = "moe_bench";
  crash.label = "moe";
  jobs.push_back(crash);
  for (const BenchJob& j : findSuite("probe")->plan(request(2, {{0, 1}}, true)))
    jobs.push_back(j);

  RunnerOptions o;
  o.bench_dir = bin;
  o.gbench_dir = dir + "/gbench";
  o.timeout_s = 2.0;
  const std::string progressPath = dir + "/progress.txt";
  std::FILE* pf = std::fopen(progressPath.c_str(), "w");
  ASSERT_NE(pf, nullptr);
  Progress progress(pf, false);
  BenchOutcome out = runJobs(jobs, o, progress);
  std::fclose(pf);

  ASSERT_EQ(out.jobs.size(), 6u);  // alltoallv runs at 2 and 4 ranks
  EXPECT_EQ(out.failed_jobs, 4);   // the two hangs, the crash, the missing probe_bench
  EXPECT_FALSE(out.interrupted);
  int peer = 0, zcopy = 0, a2a = 0;
  std::vector<std::string> failures;
  for (const report::Result& r : out.results) {
    if (r.status.rfind("failed", 0) == 0) {
      failures.push_back(r.suite + ": " + r.status);
      EXPECT_EQ(r.name, "process");
      continue;
    }
    peer += r.suite == "peer";
    zcopy += r.suite == "zcopy";
    a2a += r.suite == "alltoallv";
    if (r.suite == "zcopy") {
      EXPECT_EQ(r.src, 1);  // the pair came through the plan's rounds
      EXPECT_EQ(r.dst, 0);
    }
  }
  EXPECT_EQ(peer, 2);
  EXPECT_EQ(zcopy, 2);
  EXPECT_EQ(a2a, 2);  // salvaged from the JSON each hung process left
  ASSERT_EQ(failures.size(), 4u);
  EXPECT_NE(failures[0].find("alltoallv: failed: alltoallv_bench --ranks=2 --plan=3-alltoallv.plan.json"),
            std::string::npos)
      << failures[0];
  EXPECT_NE(failures[1].find("alltoallv: failed: alltoallv_bench --ranks=4 --plan=4-alltoallv.plan.json"),
            std::string::npos)
      << failures[1];
  EXPECT_NE(failures[1].find("exceeded its deadline of 2 s and was killed"), std::string::npos) << failures[1];
  EXPECT_NE(failures[2].find("killed by signal 11"), std::string::npos) << failures[2];
  EXPECT_NE(failures[2].find("cudaErrorIllegalAddress"), std::string::npos) << failures[2];
  EXPECT_NE(failures[3].find("probe_bench not found in " + bin), std::string::npos) << failures[3];

  // What each process was given: its plan file, and its ranks.
  const std::string zArgs = testing::readFile(bin + "/zcopy_bench.args");
  EXPECT_NE(zArgs.find("--plan=" + dir + "/gbench/2-zcopy-1-0.plan.json"), std::string::npos) << zArgs;
  EXPECT_NE(zArgs.find("--ranks=2"), std::string::npos) << zArgs;
  EXPECT_NE(zArgs.find("--ranks_timeout=10"), std::string::npos) << zArgs;
  EXPECT_EQ(zArgs.find("--benchmark_filter"), std::string::npos) << zArgs;
  PEERLAB_ASSERT_OK_AND_ASSIGN(report::BenchPlan zPlan, report::readBenchPlan(bin + "/zcopy_bench.plan"));
  EXPECT_EQ(zPlan.suite, "zcopy");
  EXPECT_EQ(zPlan.rounds, (report::PairRoundList{{{1, 0}}}));
  ASSERT_EQ(zPlan.rows.size(), 1u);
  EXPECT_EQ(zPlan.rows[0].cases, (std::vector<std::string>{"peerlab.*"}));
  EXPECT_EQ(zPlan.rows[0].sizes, (std::vector<int64_t>{8, 65536, 268435456}));
  PEERLAB_ASSERT_OK_AND_ASSIGN(report::BenchPlan pPlan, report::readBenchPlan(bin + "/peer_copy_bench.plan"));
  EXPECT_EQ(pPlan.knob("chase_sm_loads"), "512");
  EXPECT_TRUE(pPlan.runs({"peerlab.sm_push", "bidir", 268435456, 1, 0, true, -1}));
  EXPECT_FALSE(pPlan.runs({"peerlab.staged", "uni", 268435456, 0, 1, false, -1}));
  // Raw JSON and logs stay in --gbench-dir.
  EXPECT_TRUE(std::filesystem::exists(dir + "/gbench/1-peer_copy.json"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/gbench/2-zcopy-1-0.json"));
  EXPECT_NE(testing::readFile(dir + "/gbench/1-peer_copy.log").find("done"), std::string::npos);

  const std::string progressText = testing::readFile(progressPath);
  EXPECT_NE(progressText.find("peerlab bench: 6 processes"), std::string::npos) << progressText;
  EXPECT_NE(progressText.find("[1/6] peer_copy (2 pairs) (about"), std::string::npos) << progressText;
  EXPECT_NE(progressText.find("[3/6] alltoallv x2: FAILED"), std::string::npos) << progressText;
  EXPECT_NE(progressText.find("[4/6] alltoallv x4: FAILED"), std::string::npos) << progressText;
  EXPECT_EQ(progressText.find("\x1b["), std::string::npos);  // no terminal codes when not a terminal
}

TEST(Runner, ProgressEstimatesFromBudgets) {
  const std::string path = testing::scratchDir("progress") + "/p.txt";
  std::FILE* f = std::fopen(path.c_str(), "w");
  Progress p(f, true);
  p.start("x", 3, 300);
  p.begin(0, "first", 100);
  EXPECT_NEAR(p.secondsLeft(), 300, 2);
  p.end(0, "first", "ok");  // took ~0 s of its 100 s budget: the rest is scaled down (bounded at 1/4)
  p.begin(1, "second", 100);
  EXPECT_NEAR(p.secondsLeft(), 50, 2);
  p.tick();
  std::fclose(f);
  const std::string text = testing::readFile(path);
  EXPECT_NE(text.find("\r\x1b[2K["), std::string::npos);  // a bar on a terminal
  EXPECT_NE(text.find("2/3 second"), std::string::npos);
}

TEST(Runner, SalvagesTruncatedGbenchJson) {
  const std::string dir = testing::scratchDir("salvage");
  std::ofstream(dir + "/cut.json")
      << "{\n  \"context\": {},\n  \"benchmarks\": [\n    {\n      \"name\": \"a\",\n"
         "      \"label\": \"suite=zcopy;impl=peerlab.get;name=uni;src=0;dst=1;ranks=2\",\n"
         "      \"time_us\": 5\n    },\n    {\n      \"name\": \"b\",\n";
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto results, readGbenchFile(dir + "/cut.json"));
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].impl, "peerlab.get");
  std::ofstream(dir + "/junk.json") << "not json at all";
  EXPECT_FALSE(readGbenchFile(dir + "/junk.json").isOk());
}

}  // namespace
}  // namespace peerlab::qualify

namespace peerlab::qualify {
namespace {

// `peerlab probe` as qualify and bench --probe run it, with the probe's stand-in worker (3 fake GPUs).
TEST(ProbeChild, RowsOrOneFailedRow) {
#ifndef PEERLAB_STANDIN_PATH
  GTEST_SKIP() << "the probe's stand-in worker (watchdog_standin) is not built";
#else
  const std::string dir = testing::scratchDir("probe-child");
  ::setenv("PEERLAB_PROBE_WORKER", PEERLAB_STANDIN_PATH, 1);
  ::setenv("PEERLAB_PROBE_INJECT", "corrupt:ce_write:0:1", 1);
  auto rows =
      runProbeChild({"--methods", "ce_write", "--sizes", "4K"}, dir + "/p.json", dir + "/p.log", 60, PEERLAB_BINARY);
  int cells = 0, corrupt = 0;
  for (const report::Result& r : rows) {
    EXPECT_NE(r.name, "process") << r.status;
    if (r.suite == "probe" && r.src) {
      ++cells;
      corrupt += r.status == "corrupt";
    }
  }
  EXPECT_EQ(cells, 6);
  EXPECT_EQ(corrupt, 1);
  auto bad = runProbeChild({"--methods", "nonsense"}, dir + "/q.json", dir + "/q.log", 60, PEERLAB_BINARY);
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_EQ(bad[0].name, "process");
  EXPECT_NE(bad[0].status.find("failed: peerlab probe: exit code 2 (peerlab probe: --methods"), std::string::npos)
      << bad[0].status;
  ::unsetenv("PEERLAB_PROBE_WORKER");
  ::unsetenv("PEERLAB_PROBE_INJECT");
#endif
}

// A stand-in pair suite: one row per pair of its plan's rounds (peerlab.put uni at 256 MiB), at 380 GB/s alone
// and $FAKE_CONCURRENT_GBPS in a round of several pairs. With FAKE_STUCK=1 it writes the first round's rows, then
// names a row of the second round's first pair as stuck and dies (only while pairs run at once).
void writePairBench(const std::string& dir, const std::string& name) {
  const std::string path = dir + "/" + name;
  std::ofstream f(path);
  f << "#!/bin/sh\n"
    << kReadArgs << "echo \"$rounds\" >> " << dir << "/" << name << ".rounds\n"
    << "entry() { printf '    {\\n      \"name\": \"BM_Zcopy/peerlab.put/uni/%s->%s/bytes:268435456\",\\n      "
       "\"run_type\": \"iteration\",\\n      \"repetitions\": 1,\\n      \"iterations\": 1,\\n      \"label\": "
       "\"suite=zcopy;impl=peerlab.put;name=uni;src=%s;dst=%s;ranks=2;bytes=268435456\",\\n      \"bytes\": "
       "268435456,\\n      \"time_us\": %s,\\n      \"algbw_gbps\": %s,\\n      \"busbw_gbps\": %s,\\n      "
       "\"p10_us\": %s,\\n      \"p90_us\": %s,\\n      \"wrong\": 0\\n    }' \"$1\" \"$2\" \"$1\" \"$2\" \"$3\" "
       "\"$4\" "
       "\"$4\" \"$3\" \"$3\"; }\n"
    << "first=1; round_no=0\n"
    << "printf '{\\n  \"context\": {},\\n  \"benchmarks\": [\\n' > \"$out\"\n"
    << "for round in $(echo \"$rounds\" | tr ';' ' '); do\n"
    << "  round_no=$((round_no + 1))\n"
    << "  n=$(echo \"$round\" | tr ',' '\\n' | wc -l)\n"
    << "  if [ -n \"$FAKE_STUCK\" ] && [ $n -gt 1 ] && [ $round_no -eq 2 ]; then\n"
    << "    p1=${round%%,*}\n"
    << "    echo \"zcopy_bench: rank 1: BM_Zcopy/peerlab.put/uni/${p1%-*}->${p1#*-}/bytes:8: no progress for 60 s\" "
       ">&2\n"
    << "    kill -KILL $$\n"
    << "  fi\n"
    << "  for p in $(echo \"$round\" | tr ',' ' '); do\n"
    << "    gbps=380; [ $n -gt 1 ] && gbps=${FAKE_CONCURRENT_GBPS:-380}\n"
    << "    us=$(awk \"BEGIN{printf \\\"%.1f\\\", 268435.456/$gbps}\")\n"
    << "    [ $first = 1 ] || printf ',\\n' >> \"$out\"; first=0\n"
    << "    entry \"${p%-*}\" \"${p#*-}\" \"$us\" \"$gbps\" >> \"$out\"\n"
    << "  done\n"
    << "done\n"
    << "printf '\\n  ]\\n}\\n' >> \"$out\"\n";
  f.close();
  ::chmod(path.c_str(), 0755);
}

std::vector<BenchJob> zcopyOnNvswitch(int gpus) {
  report::PlanTopology t;
  for (int a = 0; a < gpus; ++a) {
    for (int b = 0; b < gpus; ++b) {
      if (a == b) continue;
      report::PlanPair p;
      p.src = a;
      p.dst = b;
      p.nvlinks = 18;
      p.nvswitch = true;
      t.pairs.push_back(p);
    }
  }
  SuiteRequest r;
  r.gpus = gpus;
  r.topology = &t;
  for (const report::PlanPair& p : t.pairs)
    r.pairs.emplace_back(p.src, p.dst);
  return findSuite("zcopy")->plan(r);
}

struct PairRun {
  BenchOutcome out;
  std::string rounds;  // the rounds of every plan the bench was started with, one per line
};

PairRun runPairSuite(const std::string& scratch, std::vector<std::string> env) {
  const std::string dir = testing::scratchDir(scratch);
  const std::string bin = dir + "/bin";
  std::filesystem::create_directories(bin);
  writePairBench(bin, "zcopy_bench");
  RunnerOptions o;
  o.bench_dir = bin;
  o.gbench_dir = dir + "/gbench";
  o.timeout_s = 20.0;
  o.env = std::move(env);
  std::FILE* pf = std::fopen((dir + "/progress.txt").c_str(), "w");
  Progress progress(pf, false);
  PairRun r;
  r.out = runJobs(zcopyOnNvswitch(4), o, progress);
  std::fclose(pf);
  r.rounds = testing::readFile(bin + "/zcopy_bench.rounds");
  return r;
}

std::set<std::pair<int, int>> pairsWithRows(const BenchOutcome& out) {
  std::set<std::pair<int, int>> pairs;
  for (const report::Result& r : out.results)
    if (r.name != "process" && r.status == "ok" && r.src && r.dst) pairs.insert({*r.src, *r.dst});
  return pairs;
}

// Concurrent rounds that agree with the serial sample stand: 12 pairs, one process, the sample's row kept apart.
TEST(Runner, ConcurrentRoundsThatAgreeWithTheSerialSampleStand) {
  PairRun r = runPairSuite("runner-guard-ok", {"FAKE_CONCURRENT_GBPS=375"});
  ASSERT_EQ(r.out.jobs.size(), 2u) << r.rounds;  // serial sample, the process
  EXPECT_EQ(r.out.failed_jobs, 0);
  EXPECT_TRUE(r.out.fallbacks.empty());
  ASSERT_GE(r.out.concurrency.size(), 1u);
  for (const ConcurrencyCheck& k : r.out.concurrency) {
    EXPECT_TRUE(k.agree) << k.row;
    EXPECT_DOUBLE_EQ(k.serial_gbps, 380);
    EXPECT_DOUBLE_EQ(k.concurrent_gbps, 375);
  }
  EXPECT_EQ(r.out.results.size(), 12u);  // the sample's rows are not results
  EXPECT_EQ(pairsWithRows(r.out).size(), 12u);
  EXPECT_EQ(std::count(r.rounds.begin(), r.rounds.end(), '\n'), 2);
}

// Concurrent rounds slower than the serial sample beyond the noise: the process's pairs run again one at a time, and
// their rows replace the concurrent ones; the run says why.
TEST(Runner, ConcurrentRoundsThatDisagreeFallBackToSerial) {
  PairRun r = runPairSuite("runner-guard-slow", {"FAKE_CONCURRENT_GBPS=300"});
  ASSERT_EQ(r.out.jobs.size(), 3u) << r.rounds;
  ASSERT_GE(r.out.concurrency.size(), 1u);
  EXPECT_FALSE(r.out.concurrency[0].agree);
  ASSERT_EQ(r.out.fallbacks.size(), 1u);
  EXPECT_NE(r.out.fallbacks[0].find("300.0 GB/s at once against 380.0 alone"), std::string::npos) << r.out.fallbacks[0];
  EXPECT_NE(r.out.jobs[2].job.label.find("(one at a time)"), std::string::npos);
  EXPECT_EQ(r.out.results.size(), 12u);
  for (const report::Result& x : r.out.results)
    EXPECT_DOUBLE_EQ(x.algbw_gbps.value_or(0), 380) << x.impl << " " << *x.src << "->" << *x.dst;
  // The third start ran every pair alone: 12 rounds of one.
  const std::string last = r.rounds.substr(r.rounds.rfind('\n', r.rounds.size() - 2) + 1);
  EXPECT_EQ(std::count(last.begin(), last.end(), ';'), 11) << last;
}

// A process over many pairs that dies: its rows stay, the pairs it left run again one at a time, and the pair its log
// names as stuck is not run again but reported with the process's failure.
TEST(Runner, APairSuiteThatDiesLeavesTheOtherPairsResults) {
  PairRun r = runPairSuite("runner-stuck", {"FAKE_STUCK=1"});
  ASSERT_EQ(r.out.jobs.size(), 3u) << r.rounds;
  const std::pair<int, int> stuck = zcopyOnNvswitch(4)[1].work.rounds[1][0];
  const std::string stuckText = std::to_string(stuck.first) + "->" + std::to_string(stuck.second);
  EXPECT_FALSE(r.out.jobs[1].error.empty());
  EXPECT_NE(r.out.jobs[2].job.label.find("(the pairs left, one at a time)"), std::string::npos);
  const std::set<std::pair<int, int>> done = pairsWithRows(r.out);
  EXPECT_EQ(done.size(), 11u);
  EXPECT_FALSE(done.count(stuck)) << stuckText;
  bool named = false;
  for (const report::Result& x : r.out.results)
    named |= x.name == "process" && x.status.find(stuckText) != std::string::npos;
  EXPECT_TRUE(named) << "the failure row names the stuck pair's cell";
}

}  // namespace
}  // namespace peerlab::qualify
