// An action for every failure: the table is whole and documented, the checks engine gives each failed check its
// action (an XID's from the watch), the drain reason takes the most drastic one, and every output carries it.
#include "harness/report/actions.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "harness/report/evaluate.h"
#include "harness/report/render/console.h"
#include "harness/report/render/junit.h"
#include "harness/report/render/summary.h"
#include "harness/testing/runs.h"
#include "reference/testing/testing.h"

namespace peerlab::report {
namespace {

using peerlab::testing::checkNamed;
using peerlab::testing::checkOf;

Run committed(const std::string& name) {
  return peerlab::testing::committedRun("reports/runs/" + name);
}

// A one-GPU run with its health rows turned to `status` where `names` says.
Run healthRun(const std::map<std::string, std::string>& names) {
  report::Run run = committed("2026-11-25-h100-x1-a99f8ae.json.gz");
  for (Result& r : run.results) {
    if (r.suite == "health" && names.count(r.name)) r.status = names.at(r.name);
  }
  return run;
}

TEST(ActionTable, EveryFailureMapsToAnActionOfTheTable) {
  std::set<std::string> ids;
  for (const Action& a : actionTable()) {
    EXPECT_TRUE(ids.insert(a.id).second) << "duplicate " << a.id;
    EXPECT_FALSE(a.short_text.empty()) << a.id;
    EXPECT_LE(a.short_text.size(), 30u) << a.id << ": a drain reason's short form";
    EXPECT_FALSE(a.text.empty()) << a.id;
    EXPECT_FALSE(a.sources.empty()) << a.id;
  }
  std::set<std::string> keys;
  for (const FailureAction& f : failureActions()) {
    EXPECT_TRUE(keys.insert(f.key).second) << "duplicate " << f.key;
    EXPECT_TRUE(ids.count(f.action)) << f.key << " -> " << f.action;
  }
  // A key the table lacks falls back to its category, then to a rerun.
  EXPECT_EQ(actionFor("health.xid.4242"), actionFor("health.xid"));
  EXPECT_EQ(actionFor("health.xid.79"), "reboot_node");
  EXPECT_EQ(actionFor("nothing.known"), "rerun");
  EXPECT_EQ(moreDrastic("reset_gpu", "replace_part"), "replace_part");
  EXPECT_EQ(moreDrastic("", "rerun"), "rerun");
}

// docs/slurm.md prints the table: every action with its short form, every failure key (XIDs grouped as ".N").
TEST(ActionTable, DocsListEveryActionAndFailure) {
  std::ifstream f(peerlab::testing::sourcePath("docs/slurm.md"));
  ASSERT_TRUE(f.good());
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string doc = ss.str();
  for (const Action& a : actionTable()) {
    EXPECT_NE(doc.find("| `" + a.id + "` | " + a.short_text + " |"), std::string::npos) << a.id;
  }
  for (const FailureAction& k : failureActions()) {
    const std::string xid = "health.xid.";
    if (k.key.rfind(xid, 0) == 0) {
      const std::string n = k.key.substr(xid.size());
      const bool listed =
          doc.find("`" + k.key + "`") != std::string::npos || doc.find("`." + n + "`") != std::string::npos ||
          (k.key >= "health.xid.144" && k.key <= "health.xid.150" && doc.find("`.144` to `.150`") != std::string::npos);
      EXPECT_TRUE(listed) << k.key;
    } else {
      EXPECT_NE(doc.find("`" + k.key + "`"), std::string::npos) << k.key;
    }
  }
}

TEST(Actions, FailedChecksCarryTheirAction) {
  report::Run run = committed("2026-11-21-h200-x4-nvswitch-db99ff9.json.gz");
  for (Result& r : run.results) {
    if (r.suite == "probe" && r.extra.value("claimed", false) && r.src == 1 && r.dst == 2 &&
        r.name.rfind("ce_write/", 0) == 0) {
      r.status = "corrupt";
      r.wrong = 12;
    }
    if (r.suite == "peer_copy" && r.impl == "peerlab.ce" && r.name == "uni" && r.src == 0 && r.dst == 1 && r.bytes &&
        *r.bytes >= 64 << 20) {
      r.algbw_gbps = *r.algbw_gbps * 0.5;
      r.busbw_gbps = *r.busbw_gbps * 0.5;
    }
  }
  const RunVerdict v = verdictOf(run);
  int failed = 0;
  for (const Check& c : v.checks) {
    if (c.failed()) {
      ++failed;
      EXPECT_TRUE(actionById(c.action).has_value()) << c.category << " " << c.name << ": \"" << c.action << "\"";
    } else {
      EXPECT_EQ(c.action, "") << c.category << " " << c.name;
    }
  }
  EXPECT_GE(failed, 2);
  const Check* probe = checkNamed(v.checks, "probe ce_write: claimed cells verify");
  ASSERT_NE(probe, nullptr);
  EXPECT_EQ(probe->action, "file_driver_bug");
  for (const Check& c : v.checks) {
    if (c.category == "bandwidth" && c.failed()) {
      EXPECT_EQ(c.action, "check_performance") << c.name;
    }
  }
  // The probe's driver bug outranks the low bandwidth.
  EXPECT_EQ(drainReason(v.checks).rfind("probe ce_write: claimed cells verify: driver bug: peerlab repro (+", 0), 0u)
      << drainReason(v.checks);
}

TEST(Actions, AnXidsActionComesFromTheWatch) {
  auto actionOf = [](const nlohmann::json& xids) {
    report::Run run = healthRun({{"xid", "fail"}});
    run.extra["health"]["xids"] = xids;
    const std::vector<Check> checks = evaluateChecks(run, nullptr);
    const Check* x = checkNamed(checks, "xid GPU 0");
    return x ? x->action : std::string("no xid check");
  };
  EXPECT_EQ(actionOf(nlohmann::json::array({{{"gpu", 0}, {"xid", 79}}})), "reboot_node");
  EXPECT_EQ(actionOf(nlohmann::json::array({{{"gpu", 0}, {"xid", 13}}})), "check_application");
  // Several XIDs: the most drastic of their actions; another GPU's XID is not this GPU's.
  EXPECT_EQ(actionOf(nlohmann::json::array({{{"gpu", 0}, {"xid", 13}}, {{"gpu", 0}, {"xid", 64}}})), "replace_part");
  EXPECT_EQ(actionOf(nlohmann::json::array({{{"gpu", 1}, {"xid", 79}}, {{"gpu", 0}, {"xid", 13}}})),
            "check_application");
  // What the run file says is untrusted: entries of the wrong type are passed over.
  EXPECT_EQ(actionOf(nlohmann::json::array({{{"gpu", "0"}, {"xid", 79}}, {{"gpu", 0}, {"xid", "79"}}, 5})),
            "reset_gpu");
  EXPECT_EQ(actionOf("not an array"), "reset_gpu");
}

TEST(Actions, DrainReasonNamesTheMostDrasticActionAndItsGpu) {
  report::Run run = healthRun({{"nvlink_state", "fail"}});
  EXPECT_EQ(drainReason(evaluateChecks(run, nullptr)), "nvlink_state GPU0: reset GPU, reseat NVLink");
  run = healthRun({{"nvlink_state", "fail"}, {"xid", "fail"}, {"pcie_link", "fail"}});
  run.extra["health"]["xids"] = nlohmann::json::array({{{"gpu", 0}, {"xid", 79}}});
  EXPECT_EQ(drainReason(evaluateChecks(run, nullptr)), "xid GPU0: reboot node (+2 more failed)");
  EXPECT_EQ(drainReason(evaluateChecks(healthRun({}), nullptr)), "");
  // One line of plain ASCII, bounded, whatever a check's name holds.
  Check c = checkOf("bandwidth", "peer\x1b[31m" + std::string(300, 'x'), CheckStatus::kFail);
  c.action = "check_performance";
  const std::string r = drainReason({c});
  EXPECT_LE(r.size(), 160u);
  EXPECT_EQ(r.find('\x1b'), std::string::npos) << r;
  EXPECT_EQ(r.rfind("peer?[31m", 0), 0u) << r;
}

TEST(Actions, EveryOutputCarriesTheAction) {
  const std::vector<Check> checks = evaluateChecks(healthRun({{"nvlink_state", "fail"}}), nullptr);
  const Check* nv = checkNamed(checks, "nvlink_state GPU 0");
  ASSERT_NE(nv, nullptr);
  ASSERT_EQ(nv->action, "reseat_nvlink");
  const std::string text = actionById("reseat_nvlink")->text;
  // results.json: the id, short form and text; only a known id is read back.
  const nlohmann::json j = toJson(checks);
  auto back = checksFromJson(j);
  ASSERT_TRUE(back.isOk()) << back.status().message();
  EXPECT_EQ(checkNamed(*back, "nvlink_state GPU 0")->action, "reseat_nvlink");
  bool found = false;
  for (const auto& c : j) {
    if (c["name"] == "nvlink_state GPU 0") {
      found = true;
      EXPECT_EQ(c["action"]["id"], "reseat_nvlink");
      EXPECT_EQ(c["action"]["short"], "reset GPU, reseat NVLink");
      EXPECT_EQ(c["action"]["text"], text);
    } else {
      EXPECT_FALSE(c.contains("action")) << c.dump();
    }
  }
  EXPECT_TRUE(found);
  nlohmann::json forged = j;
  for (auto& c : forged)
    if (c.contains("action")) c["action"]["id"] = "format_disk";
  back = checksFromJson(forged);
  ASSERT_TRUE(back.isOk());
  EXPECT_EQ(checkNamed(*back, "nvlink_state GPU 0")->action, "");
  // The console, summary.md and junit.xml.
  const std::string console = formatCheckLines(checks);
  EXPECT_NE(console.find("FAIL health: nvlink_state GPU 0: measured fail, expected ok"), std::string::npos) << console;
  EXPECT_NE(console.find("\n  action: reset GPU, reseat NVLink: " + text + "\n"), std::string::npos) << console;
  const std::string md = renderSummary(healthRun({{"nvlink_state", "fail"}}), checks);
  EXPECT_NE(md.find("| reason | action |"), std::string::npos) << md;
  EXPECT_NE(md.find("| reset GPU, reseat NVLink: " + text + " |"), std::string::npos) << md;
  const std::string xml = renderJunit(checks);
  EXPECT_NE(xml.find("(action: reset GPU, reseat NVLink: "), std::string::npos) << xml;
  EXPECT_NE(xml.find("\naction: reset GPU, reseat NVLink: "), std::string::npos) << xml;
}

TEST(Actions, AnUnknownIdIsKeptByTheRecordDroppedByTheEngineAndShownAsUnknown) {
  nlohmann::json stored = toJson(std::vector<Check>{checkOf("bandwidth", "peer_copy", CheckStatus::kFail)});
  stored[0]["action"] = {{"id", "format_disk"}};
  // The run file's record keeps the id as written (a bounded name); the engine keeps only ids of its table.
  auto record = checkRecordsFromJson(stored);
  ASSERT_TRUE(record.isOk()) << record.status().message();
  EXPECT_EQ(record->at(0).action, "format_disk");
  auto engine = checksFromJson(stored);
  ASSERT_TRUE(engine.isOk()) << engine.status().message();
  EXPECT_EQ(engine->at(0).action, "");
  stored[0]["action"]["id"] = std::string(300, 'x');
  EXPECT_FALSE(checkRecordsFromJson(stored).isOk());
  // A check that carries an id the table lacks shows it as unknown wherever its action is shown.
  Check c = checkOf("bandwidth", "peer_copy peerlab.ce uni 0->1", CheckStatus::kFail);
  c.action = "format_disk";
  const std::string line = "unknown action \"format_disk\" (not in this peerlab's table)";
  EXPECT_EQ(actionLine(c), line);
  EXPECT_NE(formatCheckLines({c}).find("  action: " + line), std::string::npos);
  EXPECT_NE(renderJunit({c}).find("format_disk"), std::string::npos);
  EXPECT_EQ(drainReason({c}), "peer_copy peerlab.ce uni 0->1: see the bundle");
}

}  // namespace
}  // namespace peerlab::report
