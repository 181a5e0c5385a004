// The Slurm client's parsers, host lists, the settings file, the outcome table, the gate's reading of job data and the
// journal's rules.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "harness/health/health.h"
#include "harness/history/store.h"
#include "harness/report/report.h"
#include "harness/slurm/client.h"
#include "harness/slurm/hostlist.h"
#include "harness/slurm/journal.h"
#include "harness/slurm/node_side.h"
#include "harness/slurm/outcome.h"
#include "harness/slurm/settings.h"
#include "harness/testing/cli.h"
#include "reference/core/text.h"

namespace peerlab::slurm {
namespace {

TEST(Hostlist, ExpandsRangesPaddingAndGroups) {
  auto n = expandHostlist("gpu[01-03,07],login1,rack[1-2]-n[8-9]");
  ASSERT_TRUE(n.isOk()) << n.status().message();
  const std::vector<std::string> want = {"gpu01",    "gpu02",    "gpu03",    "gpu07",   "login1",
                                         "rack1-n8", "rack1-n9", "rack2-n8", "rack2-n9"};
  EXPECT_EQ(*n, want);
}

TEST(Hostlist, NamesEachNodeOnce) {
  auto n = expandHostlist("vm,vm,node[1-2],node2");
  ASSERT_TRUE(n.isOk());
  EXPECT_EQ(*n, (std::vector<std::string>{"vm", "node1", "node2"}));
}

TEST(Hostlist, RefusesWhatIsNoHostList) {
  for (const char* bad :
       {"gpu[1-", "gpu]1", "gpu[3-1]", "a,,b", "", "gpu[x]", "n'$(touch x)'", "a b", "gpu[1-200000]"}) {
    auto n = expandHostlist(bad);
    EXPECT_FALSE(n.isOk()) << bad;
    if (!n.isOk()) {
      EXPECT_NE(n.status().message().find("host list"), std::string::npos) << n.status().message();
    }
  }
}

TEST(Parse, NodesWithTheirReasonsAndStates) {
  const std::string text =
      "NodeName=node1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUTot=1 NodeAddr=10.0.0.11 NodeHostName=node1 "
      "OS=Linux 6.1 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=100 State=IDLE ThreadsPerCore=1 Partitions=gpu\n"
      "NodeName=gpu-b NodeHostName=host9 CPUAlloc=2 State=MIXED+DRAIN Weight=2 Reason=disk swap = by admin [x] "
      "[root@2026-12-01T23:26:13]\n"
      "NodeName=n3 CPUAlloc=0 State=IDLE+NOT_RESPONDING Reason=peerlab: a=b [slurm@2026-12-01T23:26:13] "
      "Comment=(null)\n";
  auto nodes = parseNodes(text);
  ASSERT_TRUE(nodes.isOk()) << nodes.status().message();
  ASSERT_EQ(nodes->size(), 3u);
  EXPECT_EQ((*nodes)[0].name, "node1");
  EXPECT_EQ((*nodes)[0].state, "IDLE");
  EXPECT_EQ((*nodes)[0].reason, "");
  EXPECT_FALSE((*nodes)[0].busy());
  EXPECT_EQ((*nodes)[1].name, "gpu-b");
  EXPECT_EQ((*nodes)[1].hostname, "host9");
  EXPECT_EQ((*nodes)[1].reason, "disk swap = by admin [x]");
  EXPECT_TRUE((*nodes)[1].drained());
  EXPECT_TRUE((*nodes)[1].busy());
  // Only NOT_RESPONDING (for a moment after a resume) is not down.
  EXPECT_EQ((*nodes)[2].reason, "peerlab: a=b");
  EXPECT_TRUE((*nodes)[2].notResponding());
  EXPECT_FALSE((*nodes)[2].down());
  NodeInfo down;
  down.state = "DOWN+DRAIN";
  EXPECT_TRUE(down.down());
  EXPECT_FALSE(parseNodes("slurm_load_node error: Unable to contact slurm controller\n").isOk());
}

TEST(Parse, ReservationsAndJobs) {
  auto r = parseReservations(
      "ReservationName=peerlab_s1_node3 StartTime=2026-12-01T23:26:13 EndTime=2027-12-01T23:26:13 "
      "Duration=365-00:00:00 Nodes=node[3-4] NodeCnt=2 Flags=MAINT,IGNORE_JOBS,SPEC_NODES Users=root Groups=(null)\n");
  ASSERT_TRUE(r.isOk()) << r.status().message();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].name, "peerlab_s1_node3");
  EXPECT_EQ((*r)[0].nodes, (std::vector<std::string>{"node3", "node4"}));
  EXPECT_TRUE(parseReservations("No reservations in the system\n")->empty());
  auto j = parseJobs("12|peerlab-s1|RUNNING|node1|None\n13|peerlab-s1|PENDING||(ReqNodeNotAvail)\n");
  ASSERT_TRUE(j.isOk());
  ASSERT_EQ(j->size(), 2u);
  EXPECT_TRUE((*j)[0].active());
  EXPECT_EQ((*j)[1].nodes, "");
  JobInfo done;
  done.state = "COMPLETED";
  EXPECT_FALSE(done.active());
  EXPECT_FALSE(parseJobs("squeue: error: Invalid user\n").isOk());
}

TEST(Reason, OneLineWithoutQuotesAndBounded) {
  EXPECT_EQ(cleanReason("a \"b\"\nc"), "a b c");
  EXPECT_EQ(cleanReason(std::string(500, 'x')).size(), kMaxReasonBytes);
}

process::ProcessResult exited(int code) {
  process::ProcessResult r;
  r.exit_code = code;
  return r;
}

TEST(Outcome, OneTableForEveryExit) {
  EXPECT_EQ(judge(RunKind::kQualify, true, "", exited(0), "", 60).outcome, Outcome::kPass);
  const Judgement fail = judge(RunKind::kQualify, true, "", exited(1), "/nonexistent", 60);
  EXPECT_EQ(fail.outcome, Outcome::kFail);
  EXPECT_EQ(fail.reason.rfind("peerlab: ", 0), 0u) << fail.reason;
  EXPECT_EQ(judge(RunKind::kQualify, true, "", exited(3), "", 60).reason, "peerlab: no GPU visible: reboot node");
  EXPECT_NE(judge(RunKind::kHealth, true, "", exited(3), "", 60).reason.find("NVML shows no GPU"), std::string::npos);
  // Exit 5: nothing checked is a setup error, named as such (not "peerlab exit 5").
  const Judgement nothing = judge(RunKind::kQualify, true, "", exited(5), "", 60);
  EXPECT_EQ(nothing.outcome, Outcome::kSetup);
  EXPECT_NE(nothing.reason.find("checked nothing"), std::string::npos) << nothing.reason;
  EXPECT_EQ(judge(RunKind::kQualify, true, "", exited(2), "", 60).outcome, Outcome::kSetup);
  EXPECT_EQ(judge(RunKind::kQualify, true, "", exited(4), "", 60).outcome, Outcome::kSetup);
  process::ProcessResult timeout;
  timeout.timed_out = true;
  EXPECT_EQ(judge(RunKind::kHealth, true, "", timeout, "", 40).reason, "peerlab: unknown (timeout after 40 s)");
  process::ProcessResult killed;
  killed.signal = 9;
  EXPECT_EQ(judge(RunKind::kQualify, true, "", killed, "", 40).outcome, Outcome::kUnknown);
  EXPECT_EQ(judge(RunKind::kQualify, false, "not found", exited(0), "", 40).outcome, Outcome::kSetup);
}

TEST(Gate, JobDataIsComparedNeverExpanded) {
  EXPECT_TRUE(gateWanted("[rack1|rack2]&peerlab_gate*2", "", "peerlab_gate", "peerlab-gate"));
  EXPECT_TRUE(gateWanted("", "please peerlab-gate now", "peerlab_gate", "peerlab-gate"));
  EXPECT_FALSE(gateWanted("peerlab_gatex", "peerlab-gatex", "peerlab_gate", "peerlab-gate"));
  // A comment that a shell would glob through /proc/*/root: a word like any other, compared and done with.
  EXPECT_FALSE(gateWanted("/proc/*", "/proc/*/root/proc/*/root/proc/*/root/proc/* $(touch /tmp/x) `id`", "peerlab_gate",
                          "peerlab-gate"));
  EXPECT_TRUE(gateWanted("", "/proc/*/root peerlab-gate", "peerlab_gate", "peerlab-gate"));
}

std::string writeSettings(const std::string& text) {
  const std::string dir = peerlab::testing::scratchDir("slurm-settings");
  const std::string path = dir + "/slurm.toml";
  std::ofstream(path) << text;
  ::chmod(path.c_str(), 0644);
  return path;
}

TEST(Settings, TypedAndChecked) {
  auto s = parseSettings(
      "[slurm]\non_setup_error = \"log\"\n[health]\nbudget_s = 30\nenabled = false\n[gate]\nlevel = \"standard\"\n"
      "[sweep]\nmax_out_pct = 5\n[qualify]\noptions = [\"--timeout\", \"60\"]\n[environment]\nPEERLAB_KIND = \"x\"\n",
      "s.toml");
  ASSERT_TRUE(s.isOk()) << s.status().message();
  EXPECT_EQ(s->on_setup_error, OnSetupError::kLog);
  EXPECT_EQ(s->health_budget_s, 30);
  EXPECT_FALSE(s->health_enabled);
  EXPECT_EQ(s->gate_level, qualify::Level::kStandard);
  EXPECT_EQ(s->sweep_max_out_pct, 5);
  EXPECT_EQ(s->qualify_options, (std::vector<std::string>{"--timeout", "60"}));
  EXPECT_EQ(s->environment.at("PEERLAB_KIND"), "x");
}

TEST(Settings, RefusedWithFileLineAndKey) {
  struct Case {
    const char* text;
    const char* want;
  };
  const Case cases[] = {
      {"[health]\nenabld = true\n", "s.toml:2: [health] enabld: unknown key"},
      {"[health]\nbudget_s = \"abc\"\n", "s.toml:2: [health] budget_s: expected a number of seconds"},
      {"[health]\nbudget_s = 120\n", "s.toml:2: [health] budget_s: = 120"},
      {"[health]\nenabled = off\n", "s.toml:2: not TOML"},
      {"PEERLAB_HEALTH = off\n", "s.toml:1: not TOML"},
      {"exit 0\n", "s.toml:1: not TOML"},
      {"[gate]\nlevel = \"fast\"\n", "s.toml:2: [gate] level: \"fast\": expected quick, standard, full"},
      {"[slurm]\non_setup_error = \"ignore\"\n", "[slurm] on_setup_error"},
      {"[nope]\nx = 1\n", "s.toml:1: unknown section [nope]"},
      {"[history]\ndb = \"postgresql://u:S3cret@db/p\"\n", "[history] db: holds a password"},
      {"[environment]\nLD_PRELOAD = \"/x.so\"\n", "[environment] LD_PRELOAD: may not be set here"},
      {"[qualify]\noptions = [\"--out\", \"/tmp\"]\n", "--out is set by the gate and the sweep"},
      {"[sweep]\nbatch = 0\n", "[sweep] batch"},
  };
  for (const Case& c : cases) {
    auto s = parseSettings(c.text, "s.toml");
    ASSERT_FALSE(s.isOk()) << c.text;
    EXPECT_NE(s.status().message().find(c.want), std::string::npos) << c.text << " -> " << s.status().message();
    EXPECT_EQ(s.status().message().find("S3cret"), std::string::npos) << s.status().message();
  }
}

TEST(Settings, AFileOthersCanWriteIsRefusedAsRoot) {
  if (::geteuid() != 0) GTEST_SKIP() << "the ownership rule holds for root only; this test runs as another user";
  const std::string path = writeSettings("[health]\nenabled = true\n");
  ASSERT_TRUE(loadSettings(path, true).isOk());
  ::chmod(path.c_str(), 0666);
  auto s = loadSettings(path, true);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.status().message().find("writable by a user other than root"), std::string::npos) << s.status().message();
}

TEST(Settings, MissingDefaultFileGivesDefaultsANamedOneIsAnError) {
  EXPECT_TRUE(loadSettings("/nonexistent/slurm.toml", false).isOk());
  EXPECT_FALSE(loadSettings("/nonexistent/slurm.toml", true).isOk());
}

TEST(Password, MaskedWhateverItsEscapes) {
  for (const char* text : {"host=h password=S3\\ cret dbname=p", "host=h password='S3 cret\\'x' dbname=p",
                           "postgresql://u@h/p?password=S3%20cret&sslmode=require"}) {
    const std::string masked = redactSecrets(text);
    EXPECT_EQ(masked.find("cret"), std::string::npos) << text << " -> " << masked;
    EXPECT_EQ(masked.find("x'"), std::string::npos) << text << " -> " << masked;
    EXPECT_NE(masked.find("***"), std::string::npos) << masked;
  }
  EXPECT_NE(redactSecrets("host=h password=S3\\ cret dbname=p").find("dbname=p"), std::string::npos);
}

TEST(Settings, PasswordComesFromAPrivateFileOnly) {
  const std::string dir = peerlab::testing::scratchDir("slurm-pw");
  const std::string pw = dir + "/pw";
  std::ofstream(pw) << "S3 cret'x\n";
  ::chmod(pw.c_str(), 0644);
  Settings s;
  s.db = "postgresql://peerlab@db/peerlab";
  s.password_file = pw;
  auto url = databaseUrl(s);
  ASSERT_FALSE(url.isOk());
  EXPECT_NE(url.status().message().find("readable by others"), std::string::npos);
  ::chmod(pw.c_str(), 0600);
  url = databaseUrl(s);
  ASSERT_TRUE(url.isOk()) << url.status().message();
  EXPECT_NE(url->find("password=S3%20cret%27x"), std::string::npos) << *url;
  // The one password rule masks it wherever it would be printed.
  EXPECT_EQ(redactSecrets(*url).find("cret"), std::string::npos) << redactSecrets(*url);
  s.db = "host=db dbname=peerlab";
  url = databaseUrl(s);
  ASSERT_TRUE(url.isOk());
  EXPECT_EQ(redactSecrets(*url).find("cret"), std::string::npos) << redactSecrets(*url);
}

TEST(Gate, TheJobsGpusByTheirMinorNumbers) {
#ifndef PEERLAB_FAKE_NVML_PATH
  GTEST_SKIP() << "built without the stand-in NVML";
#else
  const std::string dir = peerlab::testing::scratchDir("slurm-minors");
  std::ofstream(dir + "/four.json") << R"({"gpus": 4})";
  ::setenv("PEERLAB_NVML_LIBRARY", PEERLAB_FAKE_NVML_PATH, 1);
  ::setenv("PEERLAB_FAKE_NVML", (dir + "/four.json").c_str(), 1);
  size_t total = 0;
  auto two = health::uuidsOfMinors({3, 1}, &total);
  ASSERT_TRUE(two.isOk()) << two.status().message();
  EXPECT_EQ(total, 4u);
  // In PCI bus order, whatever the order asked.
  EXPECT_EQ(*two, (std::vector<std::string>{"GPU-00000000-0000-0000-0000-000000000001",
                                            "GPU-00000000-0000-0000-0000-000000000003"}));
  auto bad = health::uuidsOfMinors({7}, &total);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("minor number 7"), std::string::npos);
  ::unsetenv("PEERLAB_NVML_LIBRARY");
  ::unsetenv("PEERLAB_FAKE_NVML");
#endif
}

history::JournalEntry fact(const std::string& step, const std::string& reason) {
  history::JournalEntry e;
  e.node = "n1";
  e.step = step;
  e.reason = reason;
  return e;
}

TEST(Journal, OwnershipIsTheNewestDrainFactWithTheSameReason) {
  std::vector<history::JournalEntry> j;
  // An admin's reason that starts with "peerlab:" has no record: not peerlab's.
  EXPECT_FALSE(ownsDrain(j, "peerlab: do not touch - RMA pending"));
  j.push_back(fact("drained", "peerlab: nvlink_state GPU0: reset GPU, reseat NVLink"));
  EXPECT_TRUE(ownsDrain(j, "peerlab: nvlink_state GPU0: reset GPU, reseat NVLink"));
  EXPECT_FALSE(ownsDrain(j, "peerlab: do not touch - RMA pending"));
  j.push_back(fact("drain", "peerlab: other"));  // an intent is no fact
  EXPECT_TRUE(ownsDrain(j, "peerlab: nvlink_state GPU0: reset GPU, reseat NVLink"));
  j.push_back(fact("resumed", ""));
  EXPECT_FALSE(ownsDrain(j, "peerlab: nvlink_state GPU0: reset GPU, reseat NVLink"));
}

TEST(Journal, AHolderOnThisHostIsGoneWhenItsProcessIs) {
  history::Claim c;
  c.holder = holderId(30);
  c.heartbeat_at = "2000-01-01T00:00:00Z";
  EXPECT_FALSE(holderGone(c, report::utcTimestamp()));  // this process: alive, whatever its heartbeat
  c.holder = c.holder.substr(0, c.holder.find(' ')) + " 999999999 1 30";
  EXPECT_TRUE(holderGone(c, report::utcTimestamp()));
  // Another host: by its heartbeat (three polls and a minute).
  c.holder = "elsewhere 12 34 30";
  c.heartbeat_at = report::utcTimestamp();
  EXPECT_FALSE(holderGone(c, report::utcTimestamp()));
  c.heartbeat_at = "2000-01-01T00:00:00Z";
  EXPECT_TRUE(holderGone(c, report::utcTimestamp()));
}

TEST(Journal, SpooledRecordsReachTheHistoryLater) {
  const std::string dir = peerlab::testing::scratchDir("slurm-spool");
  Log log("test");
  log.setStderr(false);
  {
    Recorder rec(nullptr, dir + "/spool", "sweep", log);
    EXPECT_TRUE(rec.historyLost());
    history::JournalEntry e = fact("drained", "peerlab: x");
    ASSERT_TRUE(rec.record(e).isOk());
    ASSERT_TRUE(rec.recordState({"n1", "drained", "peerlab: x", "", "test"}).isOk());
    EXPECT_TRUE(ownsDrain(rec.nodeJournal("n1"), "peerlab: x"));
  }
  auto store = history::HistoryStore::open(dir + "/h.sqlite");
  ASSERT_TRUE(store.isOk()) << store.status().message();
  auto replayed = replaySpool(dir + "/spool", **store, log);
  ASSERT_TRUE(replayed.isOk()) << replayed.status().message();
  auto journal = (*store)->journal("n1");
  ASSERT_TRUE(journal.isOk());
  ASSERT_EQ(journal->size(), 1u);
  EXPECT_EQ((*journal)[0].reason, "peerlab: x");
  auto states = (*store)->nodeStates();
  ASSERT_TRUE(states.isOk());
  ASSERT_EQ(states->size(), 1u);
  EXPECT_EQ((*states)[0].state, "drained");
  // Replayed once: the spool is empty now.
  EXPECT_EQ(*replaySpool(dir + "/spool", **store, log), 0);
  EXPECT_EQ((*store)->journal("n1")->size(), 1u);
}

TEST(Journal, ClaimsKeepASecondSweepOff) {
  const std::string dir = peerlab::testing::scratchDir("slurm-claims");
  auto store = history::HistoryStore::open(dir + "/h.sqlite");
  ASSERT_TRUE(store.isOk());
  auto never = [](const history::Claim&) { return false; };
  auto first = (*store)->claimNodes("s1", "h 1 1 30", {"a", "b"}, never);
  ASSERT_TRUE(first.isOk());
  EXPECT_TRUE(first->granted);
  auto second = (*store)->claimNodes("s2", "h 2 2 30", {"b", "c"}, never);
  ASSERT_TRUE(second.isOk());
  EXPECT_FALSE(second->granted);
  ASSERT_EQ(second->conflicts.size(), 1u);
  EXPECT_EQ(second->conflicts[0].node, "b");
  EXPECT_EQ((*store)->claims()->size(), 2u);  // nothing of s2's
  auto takeover = (*store)->claimNodes("s3", "h 3 3 30", {"b"}, [](const history::Claim&) { return true; });
  ASSERT_TRUE(takeover.isOk());
  EXPECT_TRUE(takeover->granted);
  ASSERT_EQ(takeover->taken_over.size(), 1u);
  EXPECT_EQ(takeover->taken_over[0].sweep, "s1");
  ASSERT_TRUE((*store)->releaseClaims("s1").isOk());
  ASSERT_EQ((*store)->claims()->size(), 1u);
  EXPECT_EQ((*store)->claims()->front().sweep, "s3");
}

}  // namespace
}  // namespace peerlab::slurm
