// peerlab history: a store of run files (SQLite or PostgreSQL), change points, regressions, fleet outliers, the site.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "harness/cli/command.h"
#include "harness/history/analysis.h"
#include "harness/history/site_model.h"
#include "harness/history/store.h"
#include "harness/report/report.h"

#if __has_include("harness/report/site.h")
#include "harness/report/site.h"
#define PEERLAB_HAVE_HISTORY_SITE 1
#endif

namespace peerlab::cli {
namespace {

constexpr const char* kCmd = "history";

struct HistoryArgs {
  std::string db;
  std::vector<std::string> files;
  std::string kind;
  bool json = false;
  std::string json_out;
  std::string out_dir;
  std::string model_out;
  bool by_host = false;
  double threshold_pct = 3.0;
  double min_change_pct = 3.0;
  double max_p_value = 0.01;
  int permutations = 99;
  double z_threshold = 3.5;
  int min_hosts = 4;
};

Status writeText(const std::string& path, const std::string& text) {
  if (path == "-") {
    std::fputs(text.c_str(), stdout);
    return Status::ok();
  }
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return PEERLAB_INVALID_ARGUMENT(path + ": cannot write");
  f << text;
  f.close();
  if (!f) return PEERLAB_INVALID_ARGUMENT(path + ": write failed");
  return Status::ok();
}

StatusOr<std::unique_ptr<history::HistoryStore>> openStore(const std::string& db) {
  if (db.empty()) return PEERLAB_INVALID_ARGUMENT("--db is required (a SQLite path or a postgresql:// URL)");
  return history::HistoryStore::open(db);
}

int runIngest(const HistoryArgs& a) {
  if (a.files.empty()) return fail(kCmd, kExitUsage, "ingest: no run file given");
  auto store = openStore(a.db);
  if (!store.isOk()) return fail(kCmd, kExitUsage, store.status().message());
  int bad = 0, added = 0, known = 0;
  for (const std::string& file : a.files) {
    // The whole file is read and validated before anything of it is written.
    auto run = report::readRun(file);
    if (!run.isOk()) {
      fail(kCmd, kExitUsage, "ingest: " + run.status().message() + " (nothing of it stored)");
      ++bad;
      continue;
    }
    history::IngestOptions opts;
    opts.kind = a.kind;
    opts.source = std::filesystem::path(file).filename().string();
    auto outcome = (*store)->ingest(*run, opts);
    if (!outcome.isOk()) return fail(kCmd, kExitRuntime, "ingest: " + file + ": " + outcome.status().message());
    if (outcome->inserted) {
      ++added;
      std::printf("%s: stored as run %lld (%zu results)\n", file.c_str(), static_cast<long long>(outcome->run_id),
                  run->results.size());
    } else {
      ++known;
      std::printf("%s: already stored as run %lld\n", file.c_str(), static_cast<long long>(outcome->run_id));
    }
  }
  std::printf("%d stored, %d already there, %d rejected\n", added, known, bad);
  return bad ? kExitUsage : kExitOk;
}

int runList(const HistoryArgs& a) {
  auto store = openStore(a.db);
  if (!store.isOk()) return fail(kCmd, kExitUsage, store.status().message());
  auto runs = (*store)->runs();
  if (!runs.isOk()) return fail(kCmd, kExitRuntime, runs.status().message());
  if (a.json) {
    nlohmann::json arr = nlohmann::json::array();
    for (const history::RunInfo& r : *runs) {
      arr.push_back({{"id", r.id},
                     {"host", r.host},
                     {"kind", r.kind},
                     {"git_sha", r.git_sha},
                     {"timestamp", r.timestamp},
                     {"results", r.results},
                     {"driver", r.driver},
                     {"cuda", r.cuda},
                     {"nccl", r.nccl},
                     {"gpus", r.gpus},
                     {"source", r.source}});
    }
    std::printf("%s\n", nlohmann::json({{"runs", arr}}).dump(2).c_str());
    return kExitOk;
  }
  std::printf("%-5s %-20s %-16s %-12s %-20s %8s  %s\n", "id", "timestamp", "kind", "git", "host", "results", "driver");
  for (const history::RunInfo& r : *runs) {
    std::printf("%-5lld %-20s %-16s %-12s %-20s %8d  %s\n", static_cast<long long>(r.id), r.timestamp.c_str(),
                r.kind.c_str(), r.git_sha.substr(0, 12).c_str(), r.host.c_str(), r.results, r.driver.c_str());
  }
  std::printf("%zu runs\n", runs->size());
  return kExitOk;
}

history::EDivisiveOptions detectOptions(const HistoryArgs& a) {
  history::EDivisiveOptions o;
  o.max_p_value = a.max_p_value;
  o.permutations = a.permutations;
  o.min_change_pct = a.min_change_pct;
  return o;
}

int runRegressions(const HistoryArgs& a) {
  auto store = openStore(a.db);
  if (!store.isOk()) return fail(kCmd, kExitUsage, store.status().message());
  auto h = history::loadHistory(**store, {a.kind, a.by_host});
  if (!h.isOk()) return fail(kCmd, kExitRuntime, h.status().message());
  history::detectChangePoints(*h, detectOptions(a));
  const std::vector<history::Regression> regs = history::findRegressions(*h, a.threshold_pct);
  std::printf("%zu runs, %zu series; %zu regressions (latest change point worse by more than %g%%)\n", h->runs.size(),
              h->series.size(), regs.size(), a.threshold_pct);
  for (const history::Regression& r : regs) {
    std::string fp;
    for (const std::string& c : r.fingerprint_changes)
      fp += (fp.empty() ? " [" : ", ") + c;
    if (!fp.empty()) fp += "]";
    std::printf("  %+.1f%%  %s  %s: %.4g -> %.4g %s (p %.2f) since %s %s on %s%s\n", r.change.change_pct,
                r.series->metric.field.c_str(), r.series->id.c_str(), r.change.before, r.change.after,
                r.series->metric.unit.c_str(), r.change.p_value, r.run->git_sha.substr(0, 12).c_str(),
                r.run->timestamp.c_str(), r.run->host.c_str(), fp.c_str());
  }
  if (!a.json_out.empty()) {
    nlohmann::json arr = nlohmann::json::array();
    for (const history::Regression& r : regs)
      arr.push_back(history::toJson(r));
    Status st = writeText(a.json_out, nlohmann::json({{"regressions", arr}}).dump(2) + "\n");
    if (!st.isOk()) return fail(kCmd, kExitUsage, "--json: " + st.message());
  }
  return regs.empty() ? kExitOk : kExitCheckFailed;
}

int runFleet(const HistoryArgs& a) {
  auto store = openStore(a.db);
  if (!store.isOk()) return fail(kCmd, kExitUsage, store.status().message());
  auto h = history::loadHistory(**store, {a.kind, false});
  if (!h.isOk()) return fail(kCmd, kExitRuntime, h.status().message());
  history::FleetOptions fo;
  fo.z_threshold = a.z_threshold;
  fo.min_change_pct = a.min_change_pct;
  fo.min_hosts = a.min_hosts;
  const std::vector<history::FleetOutlier> out = history::fleetOutliers(*h, fo);
  std::printf(
      "%zu series; %zu outliers (modified z beyond %g on the worse side, at least %g%% off the median, "
      "fleets of %d or more hosts)\n",
      h->series.size(), out.size(), fo.z_threshold, fo.min_change_pct, fo.min_hosts);
  for (const history::FleetOutlier& f : out) {
    std::printf("  %s  %s: %.4g %s, fleet median %.4g (MAD %.3g), z %+.1f\n", f.host.c_str(), f.series->id.c_str(),
                f.value, f.series->metric.unit.c_str(), f.median, f.mad, f.z);
  }
  if (!a.json_out.empty()) {
    nlohmann::json arr = nlohmann::json::array();
    for (const history::FleetOutlier& f : out)
      arr.push_back(history::toJson(f));
    Status st = writeText(a.json_out, nlohmann::json({{"outliers", arr}}).dump(2) + "\n");
    if (!st.isOk()) return fail(kCmd, kExitUsage, "--json: " + st.message());
  }
  return out.empty() ? kExitOk : kExitCheckFailed;
}

// Renders the pages into `dir` (and writes the model where asked); without the renderer built in, the model only.
Status writeSite(const nlohmann::json& model, const std::string& dir, std::string modelPath) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return PEERLAB_INVALID_ARGUMENT("--out " + dir + ": " + ec.message());
#ifdef PEERLAB_HAVE_HISTORY_SITE
  PEERLAB_RETURN_IF_ERROR(report::renderHistorySite(model, dir));
#else
  if (modelPath.empty()) modelPath = (std::filesystem::path(dir) / "history.json").string();
  std::printf("the site renderer (harness/report/site.h) is not built in: writing the model only\n");
#endif
  if (!modelPath.empty()) PEERLAB_RETURN_IF_ERROR(writeText(modelPath, model.dump() + "\n"));
  return Status::ok();
}

int runHtml(const HistoryArgs& a) {
  if (a.out_dir.empty()) return fail(kCmd, kExitUsage, "html: --out DIR is required");
  auto store = openStore(a.db);
  if (!store.isOk()) return fail(kCmd, kExitUsage, store.status().message());
  history::SiteOptions so;
  so.detect = detectOptions(a);
  so.threshold_pct = a.threshold_pct;
  so.fleet.z_threshold = a.z_threshold;
  so.fleet.min_hosts = a.min_hosts;
  auto model = history::buildSiteModel(**store, so);
  if (!model.isOk()) return fail(kCmd, kExitRuntime, model.status().message());
  Status st = writeSite(*model, a.out_dir, a.model_out);
  if (!st.isOk())
    return fail(kCmd, st.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitRuntime, st.message());
  std::printf("wrote %s\n", a.out_dir.c_str());
  return kExitOk;
}

void addDetectOptions(CLI::App* s, HistoryArgs& a) {
  s->add_option("--min-change", a.min_change_pct, "Smallest change point kept, percent of the median (default 3)")
      ->check(CLI::Range(0.0, 1000.0));
  s->add_option("--p-value", a.max_p_value, "Permutation test significance (default 0.01)")
      ->check(CLI::Range(0.0, 1.0));
  s->add_option("--permutations", a.permutations, "Permutations per test (default 99)")->check(CLI::Range(1, 100000));
}

std::function<int()> setup(CLI::App& sub) {
  auto a = std::make_shared<HistoryArgs>();
  sub.require_subcommand(1);
  CLI::App* ingest = sub.add_subcommand("ingest", "Store run files (idempotent; one transaction per file)");
  ingest->add_option("--db", a->db, "SQLite path or postgresql:// URL")->required();
  ingest->add_option("--kind", a->kind, "Machine kind of these runs (default: the run file's `kind`)");
  ingest->add_option("files", a->files, "Run files")->required();

  CLI::App* list = sub.add_subcommand("list", "List stored runs");
  list->add_option("--db", a->db, "SQLite path or postgresql:// URL")->required();
  list->add_flag("--json", a->json, "Print {\"runs\":[...]} as JSON");

  CLI::App* regs = sub.add_subcommand("regressions", "Series whose latest change point is a worsening; exit 1 if any");
  regs->add_option("--db", a->db, "SQLite path or postgresql:// URL")->required();
  regs->add_option("--json", a->json_out, "Write {\"regressions\":[...]} here (\"-\": stdout)");
  regs->add_option("--kind", a->kind, "Only runs of this kind (or host)");
  regs->add_flag("--by-host", a->by_host, "One series per host instead of per kind");
  regs->add_option("--threshold", a->threshold_pct, "Worsening that counts, percent (default 3)")
      ->check(CLI::Range(0.0, 1000.0));
  addDetectOptions(regs, *a);

  CLI::App* fleet =
      sub.add_subcommand("fleet", "Hosts whose latest figures sit outside their kind's fleet; exit 1 if any");
  fleet->add_option("--db", a->db, "SQLite path or postgresql:// URL")->required();
  fleet->add_option("--kind", a->kind, "Only this machine kind");
  fleet->add_option("--json", a->json_out, "Write {\"outliers\":[...]} here (\"-\": stdout)");
  fleet->add_option("--z", a->z_threshold, "Modified z-score threshold (default 3.5)")->check(CLI::Range(0.5, 100.0));
  fleet->add_option("--min-change", a->min_change_pct, "And at least this far from the median, percent (default 3)");
  fleet->add_option("--min-hosts", a->min_hosts, "Smallest fleet (default 4)")->check(CLI::Range(3, 100000));

  CLI::App* html = sub.add_subcommand("html", "Write the history site: one page per machine kind");
  html->add_option("--db", a->db, "SQLite path or postgresql:// URL")->required();
  html->add_option("--out", a->out_dir, "Output directory")->required();
  html->add_option("--threshold", a->threshold_pct, "Worsening listed as a regression, percent (default 3)");
  html->add_option("--model", a->model_out, "Also write the site's data model (JSON) here");
  addDetectOptions(html, *a);

  sub.footer(
      "Examples:\n"
      "  peerlab history ingest --db history.sqlite reports/runs/*.json\n"
      "  peerlab history list --db postgresql://peerlab@db/peerlab --json\n"
      "  peerlab history regressions --db history.sqlite --json regressions.json\n"
      "  peerlab history fleet --db history.sqlite --kind nvidia-h200-x4\n"
      "  peerlab history html --db history.sqlite --out site/");
  return [a, ingest, list, regs, fleet, html]() -> int {
    if (ingest->parsed()) return runIngest(*a);
    if (list->parsed()) return runList(*a);
    if (regs->parsed()) return runRegressions(*a);
    if (fleet->parsed()) return runFleet(*a);
    if (html->parsed()) return runHtml(*a);
    return fail(kCmd, kExitUsage, "no subcommand (ingest, list, regressions, fleet, html)");
  };
}

}  // namespace

PEERLAB_REGISTER_COMMAND(history, "history",
                         "Store run files and find regressions over their history (SQLite or PostgreSQL)", setup);

}  // namespace peerlab::cli
