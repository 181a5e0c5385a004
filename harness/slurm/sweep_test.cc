// The rolling sweep and its recovery against the stand-in Slurm, with a SQLite history: batches, drains by verdict,
// ownership, crashes at every step, two sweeps at once, a controller that stops answering, an interrupt.
#include <gtest/gtest.h>

#include <algorithm>

#include <filesystem>
#include <set>

#include "harness/history/store.h"
#include "harness/report/report.h"
#include "harness/slurm/sweep.h"
#include "harness/slurm/testing/fake_slurm.h"
#include "harness/testing/cli.h"

namespace peerlab::slurm {
namespace {

using testing::FakeClock;
using testing::FakeJob;
using testing::FakeSlurm;

// A stopped sweep: what `kill -9` leaves behind (nothing runs after the step).
struct Killed {
  std::string step;
};

struct Fleet {
  explicit Fleet(int nodes, const std::string& name = "sweep") : slurm(clock), log("sweep") {
    log.setStderr(false);
    dir = peerlab::testing::scratchDir("slurm-" + name);
    auto s = history::HistoryStore::open(dir + "/history.sqlite");
    EXPECT_TRUE(s.isOk()) << s.status().message();
    store = std::move(*s);
    for (int i = 1; i <= nodes; ++i)
      slurm.addNode("node" + std::to_string(i));
  }

  SweepOptions options(int batch) {
    SweepOptions o;
    o.nodes = slurm.partition;
    o.what = "partition gpu";
    o.batch = batch;
    o.timeout_s = 120;
    o.wait_s = 600;
    o.poll_s = 5;
    o.bundle_root = dir + "/sweeps";
    std::filesystem::create_directories(o.bundle_root);
    return o;
  }

  SweepResult run(SweepOptions o) {
    JobLauncher launcher = [](const std::string& sweep, const std::string& node, const std::string& d) {
      JobSpec spec;
      spec.name = sweepJobName(sweep);
      spec.node = node;
      spec.reservation = sweepReservation(sweep, node);
      spec.output = d + "/job.log";
      spec.argv = {"peerlab", "slurm", "job", "--sweep", sweep, "--node", node, "--dir", d};
      return spec;
    };
    Sweep sweep(slurm, *store, clock, log, settings, o, launcher);
    return sweep.run();
  }

  // What recover does after a kill: the dead sweep's claims (this process is its "holder": forced).
  RecoverResult recover() {
    Recorder rec(store.get(), "", "recover", log);
    RecoverOptions ro;
    ro.force = true;
    return recoverLeftovers(slurm, rec, *store, log, ro);
  }

  std::string stateOf(const std::string& node) {
    auto states = store->nodeStates();
    for (const history::NodeState& s : *states)
      if (s.node == node) return s.state + (s.reason.empty() ? "" : ": " + s.reason);
    return "";
  }

  // A node drained by peerlab earlier (its journal says so), as a health check leaves it.
  void drainedByPeerlab(const std::string& node, const std::string& reason) {
    slurm.setNode(node, "IDLE+DRAIN", reason);
    history::JournalEntry e;
    e.node = node;
    e.step = "drained";
    e.reason = reason;
    e.source = "healthcheck";
    ASSERT_TRUE(store->appendJournal(e).isOk());
  }

  FakeClock clock;
  FakeSlurm slurm;
  Log log;
  Settings settings;
  std::string dir;
  std::unique_ptr<history::HistoryStore> store;
};

TEST(Sweep, RollingBatchKeepsTheRestInService) {
  Fleet f(10);
  const SweepResult r = f.run(f.options(2));
  EXPECT_EQ(r.exit_code, 0) << r.summary;
  EXPECT_EQ(r.counts.passed, 10) << r.summary;
  // Never more than the batch out of service, and the batch was used.
  EXPECT_EQ(f.slurm.maxReserved(), 2);
  EXPECT_EQ(r.counts.max_out, 2);
  EXPECT_TRUE(f.slurm.reservedNodes().empty());
  EXPECT_TRUE(f.store->claims()->empty());
  for (int i = 1; i <= 10; ++i) {
    EXPECT_EQ(f.slurm.node("node" + std::to_string(i)).state, "IDLE");
    EXPECT_EQ(f.stateOf("node" + std::to_string(i)), "in_service");
  }
  // One look at the jobs per poll, not one call per job: about wall / poll squeue calls.
  const auto squeues = std::count(f.slurm.calls_log.begin(), f.slurm.calls_log.end(), "squeue");
  EXPECT_LE(squeues, static_cast<long>(r.wall_s / 5) + 2) << r.wall_s;
  // ceil(10 / 2) rounds of a 5 s job and one poll each.
  EXPECT_LE(r.wall_s, 5 * (5 + 5) + 10);
}

TEST(Sweep, FailDrainsWithItsReasonAndExitsOne) {
  Fleet f(4);
  f.slurm.runner = [](const JobSpec& spec) {
    FakeJob j;
    if (spec.node == "node3") j.rc = 1;
    return j;
  };
  const SweepResult r = f.run(f.options(2));
  EXPECT_EQ(r.exit_code, 1) << r.summary;
  EXPECT_EQ(r.counts.failed, 1);
  const NodeInfo n3 = f.slurm.node("node3");
  EXPECT_TRUE(n3.drained());
  EXPECT_EQ(n3.reason.rfind("peerlab: ", 0), 0u) << n3.reason;
  EXPECT_EQ(f.stateOf("node3"), "drained: " + n3.reason);
  // The drain is peerlab's own by its journal.
  EXPECT_TRUE(ownsDrain(*f.store->journal("node3"), n3.reason));
}

TEST(Sweep, AnAdminsDrainIsLeftAloneWhateverItsText) {
  Fleet f(3);
  f.slurm.setNode("node2", "IDLE+DRAIN", "peerlab: do not touch - RMA pending");
  const SweepResult r = f.run(f.options(1));
  EXPECT_EQ(r.counts.left_alone, 1) << r.summary;
  EXPECT_EQ(f.slurm.node("node2").reason, "peerlab: do not touch - RMA pending");
  EXPECT_TRUE(f.slurm.node("node2").drained());
  for (const auto& [id, j] : f.slurm.jobs())
    EXPECT_NE(j.spec.node, "node2");
  EXPECT_EQ(f.stateOf("node2"), "drained: peerlab: do not touch - RMA pending");
}

TEST(Sweep, PeerlabsOwnDrainIsQualifiedAndResumedOnPass) {
  Fleet f(2);
  f.drainedByPeerlab("node1", "peerlab: unknown (timeout after 40 s)");
  const SweepResult r = f.run(f.options(1));
  EXPECT_EQ(r.exit_code, 0) << r.summary;
  EXPECT_EQ(f.slurm.node("node1").state, "IDLE");
  EXPECT_EQ(f.stateOf("node1"), "in_service");
}

TEST(Sweep, ADrainThatCameWhileTheJobRanStays) {
  Fleet f(1);
  f.drainedByPeerlab("node1", "peerlab: old");
  f.slurm.runner = [&](const JobSpec&) {
    // The health check drains the node while its qualification runs.
    f.drainedByPeerlab("node1", "peerlab: nvlink_state GPU0: reset GPU, reseat NVLink");
    FakeJob j;
    return j;
  };
  const SweepResult r = f.run(f.options(1));
  EXPECT_EQ(r.counts.passed, 1) << r.summary;
  EXPECT_EQ(f.slurm.node("node1").reason, "peerlab: nvlink_state GPU0: reset GPU, reseat NVLink");
  EXPECT_TRUE(f.slurm.node("node1").drained());
  // Recorded as Slurm has it now, not as in service.
  EXPECT_EQ(f.stateOf("node1"), "drained: peerlab: nvlink_state GPU0: reset GPU, reseat NVLink");
}

TEST(Sweep, NoTransientStateIsRecorded) {
  Fleet f(2);
  f.drainedByPeerlab("node1", "peerlab: old");
  f.slurm.not_responding_after_resume_s = 3;
  const SweepResult r = f.run(f.options(2));
  EXPECT_EQ(r.exit_code, 0) << r.summary;
  EXPECT_EQ(f.stateOf("node1"), "in_service");
  auto states = f.store->nodeStates();
  ASSERT_TRUE(states.isOk());
  for (const history::NodeState& s : *states)
    EXPECT_NE(s.state, "down") << s.node;
}

TEST(Sweep, AControllerThatStopsAnsweringDecidesNothing) {
  Fleet f(2);
  f.slurm.runner = [&](const JobSpec&) {
    // slurmctld stopped for 25 s while the jobs run.
    f.slurm.unavailableUntil(f.clock.now() + 25);
    FakeJob j;
    j.duration_s = 10;
    return j;
  };
  const SweepResult r = f.run(f.options(2));
  EXPECT_EQ(r.exit_code, 0) << r.summary;
  EXPECT_EQ(r.counts.passed, 2);
  EXPECT_EQ(r.counts.unknown, 0);
  EXPECT_TRUE(f.slurm.reservedNodes().empty());
  EXPECT_FALSE(f.slurm.node("node1").drained());
}

TEST(Sweep, ABusyNodeIsPutBackAfterTheWait) {
  Fleet f(2);
  f.slurm.occupy("node2", 1e9);
  SweepOptions o = f.options(2);
  o.wait_s = 30;
  const SweepResult r = f.run(o);
  EXPECT_EQ(r.counts.busy, 1) << r.summary;
  EXPECT_EQ(r.counts.passed, 1);
  EXPECT_TRUE(f.slurm.reservedNodes().empty());
  EXPECT_FALSE(f.slurm.node("node2").drained());
}

TEST(Sweep, AJobWithoutAResultIsASetupErrorAndTwoInARowStopTheSweep) {
  Fleet f(5);
  f.drainedByPeerlab("node1", "peerlab: old");
  f.slurm.runner = [](const JobSpec&) {
    FakeJob j;
    j.leave_result = false;
    return j;
  };
  const SweepResult r = f.run(f.options(1));
  EXPECT_EQ(r.exit_code, 4) << r.summary;
  EXPECT_EQ(r.counts.setup, 2);
  EXPECT_EQ(r.counts.not_started, 3);
  // Put back as it was: node1 drained again with its own reason, node2 in service.
  EXPECT_EQ(f.slurm.node("node1").reason, "peerlab: old");
  EXPECT_TRUE(f.slurm.node("node1").drained());
  EXPECT_FALSE(f.slurm.node("node2").drained());
  EXPECT_TRUE(f.slurm.reservedNodes().empty());
}

TEST(Sweep, AnInterruptPutsEveryNodeBack) {
  Fleet f(4);
  f.drainedByPeerlab("node1", "peerlab: old");
  f.slurm.runner = [](const JobSpec&) {
    FakeJob j;
    j.duration_s = 100;
    return j;
  };
  f.clock.interruptAt(20);
  const SweepResult r = f.run(f.options(2));
  EXPECT_EQ(r.exit_code, 4) << r.summary;
  EXPECT_TRUE(f.slurm.reservedNodes().empty());
  EXPECT_TRUE(f.slurm.node("node1").drained());
  EXPECT_EQ(f.slurm.node("node1").reason, "peerlab: old");
  for (const auto& [id, j] : f.slurm.jobs())
    EXPECT_NE(j.state, "RUNNING") << id;
  EXPECT_TRUE(f.store->claims()->empty());
}

TEST(Sweep, ASecondSweepOverTheSameNodesIsRefused) {
  Fleet f(3);
  SweepResult second;
  bool ran = false;
  SweepOptions o = f.options(1);
  o.on_step = [&](const std::string& step) {
    if (step != "submitted" || ran) return;
    ran = true;
    SweepOptions o2 = f.options(1);
    o2.nodes = {"node3", "node2"};
    second = f.run(o2);
  };
  const SweepResult first = f.run(o);
  ASSERT_TRUE(ran);
  EXPECT_EQ(second.exit_code, 4);
  EXPECT_NE(second.summary.find("refused: another sweep"), std::string::npos) << second.summary;
  EXPECT_EQ(first.exit_code, 0) << first.summary;
  EXPECT_EQ(first.counts.passed, 3);
  // Each node qualified once.
  std::map<std::string, int> jobs;
  for (const auto& [id, j] : f.slurm.jobs())
    ++jobs[j.spec.node];
  for (const auto& [node, n] : jobs)
    EXPECT_EQ(n, 1) << node;
}

// A job that starts and ends between two looks at the queue (shorter than the poll) still takes the sweep through
// "running", before "ended": the steps a crash can follow are the same however fast the job was.
TEST(Sweep, AJobShorterThanThePollStillPassesThroughRunning) {
  Fleet f(1);
  f.slurm.runner = [](const JobSpec&) {
    FakeJob j;
    j.duration_s = 0.5;
    j.rc = 1;
    return j;
  };
  SweepOptions o = f.options(1);
  std::vector<std::string> steps;
  o.on_step = [&](const std::string& s) { steps.push_back(s); };
  const SweepResult r = f.run(o);
  EXPECT_EQ(r.counts.failed, 1) << r.summary;
  const auto running = std::find(steps.begin(), steps.end(), "running");
  const auto ended = std::find(steps.begin(), steps.end(), "ended");
  ASSERT_NE(running, steps.end()) << ::testing::PrintToString(steps);
  EXPECT_LT(running, ended) << ::testing::PrintToString(steps);
  for (const auto& [id, j] : f.slurm.jobs())
    EXPECT_LT(j.end - j.start, o.poll_s) << "the job must fit between two looks";
}

// Killed after each step, on a node peerlab had drained (resumed for its job) and a node that fails; then recovered:
// no node that was resumed for its job is left in service without a verdict, a failing verdict is acted on, no
// reservation is left, no claim.
class Crash : public ::testing::TestWithParam<std::string> {};

TEST_P(Crash, RecoveryLeavesNoFailingNodeInServiceAndNoReservation) {
  const std::string step = GetParam();
  Fleet f(2, "crash-" + step);
  f.drainedByPeerlab("node1", "peerlab: old");
  f.slurm.runner = [](const JobSpec&) {
    FakeJob j;
    j.rc = 1;  // the node fails its qualification
    return j;
  };
  SweepOptions o = f.options(2);
  o.on_step = [&](const std::string& s) {
    if (s == step) throw Killed{s};
  };
  bool killed = false;
  try {
    f.run(o);
  } catch (const Killed&) {
    killed = true;
  }
  ASSERT_TRUE(killed) << "the sweep never reached " << step;
  // Between the kill and the recovery the node peerlab had drained takes no user job: drained, or reserved.
  const NodeInfo mid = f.slurm.node("node1");
  EXPECT_TRUE(mid.drained() || f.slurm.reservedNodes().count("node1")) << mid.state;
  // The jobs end meanwhile.
  f.clock.sleep(30);
  const RecoverResult rr = f.recover();
  EXPECT_TRUE(rr.ok);
  EXPECT_TRUE(f.slurm.reservedNodes().empty()) << step;
  EXPECT_TRUE(f.store->claims()->empty()) << step;
  const NodeInfo n1 = f.slurm.node("node1");
  EXPECT_TRUE(n1.drained()) << step << ": " << n1.state << " " << n1.reason;
  for (const auto& [id, j] : f.slurm.jobs())
    EXPECT_NE(j.state, "RUNNING") << step;
  // Whatever node1 shows is peerlab's own drain by the journal (the old reason restored, or the verdict's).
  EXPECT_TRUE(ownsDrain(*f.store->journal("node1"), n1.reason)) << step << ": " << n1.reason;
  // A recorded verdict was acted on: a failing node is never in service.
  auto journal2 = f.store->journal("node2");
  ASSERT_TRUE(journal2.isOk());
  for (const history::JournalEntry& e : *journal2) {
    if (e.step == "verdict") {
      EXPECT_TRUE(f.slurm.node("node2").drained()) << step;
    }
  }
  // The next sweep starts clean.
  f.slurm.runner = [](const JobSpec&) { return FakeJob{}; };
  const SweepResult again = f.run(f.options(2));
  EXPECT_EQ(again.exit_code, 0) << again.summary;
  EXPECT_FALSE(f.slurm.node("node1").drained());
}

INSTANTIATE_TEST_SUITE_P(EveryStep, Crash, ::testing::ValuesIn(kCrashSteps),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// A run of `node` with one copy figure, as qualify would store it.
report::Run runOf(const std::string& node, double gbps) {
  report::Run run;
  run.tool = "peerlab 0.1.0";
  run.git_sha = "0123456789abcdef0123456789abcdef01234567";
  run.timestamp = "2026-11-20T10:00:00Z";
  run.fingerprint.hostname = "vm";  // cloud VMs: one host name for all
  run.fingerprint.gpus = {{0, "GPU-" + node + "-0", "", "NVIDIA H200"}, {1, "GPU-" + node + "-1", "", "NVIDIA H200"}};
  run.node = report::nodeIdentity(run.fingerprint, "");
  run.node.slurm_node = node;
  run.kind.name = "h200-x2-nvswitch";
  report::Result r;
  r.suite = "peer_copy";
  r.impl = "peerlab.ce";
  r.name = "uni";
  r.src = 0;
  r.dst = 1;
  r.bytes = 268435456;
  r.algbw_gbps = gbps;
  r.time_us = *r.bytes / gbps / 1e3;
  run.results.push_back(r);
  return run;
}

TEST(Sweep, DrainOutliersFindsTheNodeByItsNodeName) {
  Fleet f(5);
  for (int i = 1; i <= 5; ++i) {
    const std::string node = "node" + std::to_string(i);
    ASSERT_TRUE(f.store->ingest(runOf(node, node == "node3" ? 300 : 700 + i)).isOk());
  }
  SweepOptions o = f.options(5);
  o.drain_outliers = true;
  const SweepResult r = f.run(o);
  EXPECT_EQ(r.counts.outliers_drained, 1) << r.summary;
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(f.slurm.node("node3").drained());
  EXPECT_EQ(f.slurm.node("node3").reason, "peerlab: below its fleet on 1 series: check links/settings");
  for (const char* n : {"node1", "node2", "node4", "node5"})
    EXPECT_FALSE(f.slurm.node(n).drained()) << n;
}

TEST(Sweep, TheNextSweepRecoversWhatAGoneOneLeft) {
  Fleet f(2);
  f.drainedByPeerlab("node1", "peerlab: old");
  SweepOptions o = f.options(2);
  o.on_step = [](const std::string& s) {
    if (s == "resumed") throw Killed{s};
  };
  EXPECT_THROW(f.run(o), Killed);
  // The dead sweep's process is this one: its claim looks alive. As another host's, with a stale heartbeat, it is
  // gone.
  // Make its claims look like another host's, long silent.
  auto db = history::openDatabase(f.dir + "/history.sqlite");
  ASSERT_TRUE(db.isOk());
  ASSERT_TRUE(
      (*db)->exec("UPDATE slurm_claims SET holder = 'elsewhere 1 1 30', heartbeat_at = '2000-01-01T00:00:00Z'").isOk());
  const SweepResult r = f.run(f.options(2));
  EXPECT_EQ(r.exit_code, 0) << r.summary;
  EXPECT_EQ(r.counts.passed, 2);
  EXPECT_TRUE(f.slurm.reservedNodes().empty());
}

}  // namespace
}  // namespace peerlab::slurm
