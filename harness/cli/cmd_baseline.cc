// peerlab baseline: make the run file new runs of one kind are held against (qualify --baseline, report --compare).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "harness/cli/command.h"
#include "harness/report/baseline.h"
#include "harness/report/report.h"
#include "reference/core/text.h"

namespace peerlab::cli {
namespace {

constexpr const char* kCmd = "baseline";

struct BaselineArgs {
  std::vector<std::string> from;
  std::vector<std::string> fleet;
  std::string out;
};

// The run files under `path`: the file itself, or in a directory each bundle's results.json(.gz) (a directory holding
// one is a bundle: its other JSON files are not runs) and the run files elsewhere, recursively, in name order.
Status collectRunFiles(const std::string& path, std::vector<std::string>& out) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    out.push_back(path);
    return Status::ok();
  }
  for (const char* name : {"results.json", "results.json.gz"}) {
    if (fs::is_regular_file(fs::path(path) / name, ec)) {
      out.push_back((fs::path(path) / name).string());
      return Status::ok();
    }
  }
  std::vector<fs::path> entries;
  for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec))
    entries.push_back(it->path());
  if (ec) return PEERLAB_INVALID_ARGUMENT("--fleet " + path + ": " + ec.message());
  std::sort(entries.begin(), entries.end());
  for (const fs::path& e : entries) {
    if (fs::is_directory(e, ec)) {
      PEERLAB_RETURN_IF_ERROR(collectRunFiles(e.string(), out));
    } else if (report::isRunFileName(e.filename().string())) {
      out.push_back(e.string());
    }
  }
  return Status::ok();
}

int runMake(const BaselineArgs& a) {
  if (a.from.empty()) return fail(kCmd, kExitUsage, "make: --from names no run file");
  if (a.out.empty()) return fail(kCmd, kExitUsage, "make: --out names no file");
  std::vector<report::NamedRun> runs;
  for (const std::string& file : a.from) {
    auto run = report::readRun(file);
    if (!run.isOk()) return fail(kCmd, kExitUsage, "make: " + run.status().message());
    runs.push_back({file, std::move(*run)});
  }
  std::vector<report::NamedRun> fleet;
  std::vector<std::string> fleetFiles;
  for (const std::string& path : a.fleet) {
    if (Status st = collectRunFiles(path, fleetFiles); !st.isOk())
      return fail(kCmd, kExitUsage, "make: " + st.message());
  }
  int baselinesSkipped = 0;
  for (const std::string& file : fleetFiles) {
    auto run = report::readRun(file);
    if (!run.isOk()) return fail(kCmd, kExitUsage, "make: --fleet: " + run.status().message());
    // A baseline is made of runs; it is not one of the fleet's runs.
    if (run->extra.is_object() && run->extra.contains("baseline")) {
      ++baselinesSkipped;
      continue;
    }
    fleet.push_back({file, std::move(*run)});
  }
  report::BaselineSummary sum;
  auto baseline = report::makeBaseline(runs, &sum, fleet);
  if (!baseline.isOk()) return fail(kCmd, kExitUsage, "make: " + baseline.status().message());
  // What is written must read back through the one reader.
  if (auto back = report::fromJson(report::toJson(*baseline)); !back.isOk()) {
    return fail(kCmd, kExitRuntime, "make: the baseline does not read back: " + back.status().message());
  }
  // A file is written as every run file is (gzip-compressed where its name ends in .gz); "-" is stdout.
  if (Status st = a.out == "-" ? writeOutput(a.out, report::toJson(*baseline).dump(2) + "\n")
                               : report::writeRun(*baseline, a.out);
      !st.isOk()) {
    return fail(kCmd, kExitUsage, st.message());
  }
  std::fprintf(a.out == "-" ? stderr : stdout,
               "peerlab baseline: %s: kind %s from %d run%s: %d results (%d left out: not measured by every run; %d "
               "not ok in some run, kept as the newest run gave them)\n",
               printable(a.out).c_str(), printable(baseline->kind.name, 128).c_str(), sum.runs,
               sum.runs == 1 ? "" : "s", sum.results, sum.left_out, sum.not_ok);
  std::fprintf(a.out == "-" ? stderr : stdout,
               "peerlab baseline: level %s; fleet: %d board%s from %d run%s, board-to-board times on %d results%s\n",
               printable(sum.level.empty() ? "unknown" : sum.level).c_str(), sum.fleet_boards,
               sum.fleet_boards == 1 ? "" : "s", sum.fleet_runs, sum.fleet_runs == 1 ? "" : "s", sum.fleet_rows,
               sum.fleet_boards < 2 ? " (one board: new runs are held to its own noise)" : "");
  // Runs of other kinds are what a directory of every kind's runs holds: counted on one line; every other reason a
  // run was left out (its checks failed, stand-ins) is named with its file.
  int otherKinds = 0;
  for (const std::string& why : sum.fleet_skipped) {
    if (why.find(": another kind (") != std::string::npos) {
      ++otherKinds;
      continue;
    }
    std::fprintf(stderr, "peerlab baseline: --fleet: left out %s\n", printable(why).c_str());
  }
  if (otherKinds > 0) {
    std::fprintf(stderr, "peerlab baseline: --fleet: left out %d run%s of other kinds\n", otherKinds,
                 otherKinds == 1 ? "" : "s");
  }
  if (baselinesSkipped > 0)
    std::fprintf(stderr, "peerlab baseline: --fleet: left out %d baseline file%s (made of runs, not runs)\n",
                 baselinesSkipped, baselinesSkipped == 1 ? "" : "s");
  return kExitOk;
}

std::function<int()> setup(CLI::App& sub) {
  auto a = std::make_shared<BaselineArgs>();
  sub.require_subcommand(1);
  CLI::App* make = sub.add_subcommand(
      "make", "Make a baseline from runs of one kind that pass their own checks (median of the runs per result)");
  make->add_option("--from", a->from, "Run files (peerlab qualify's results.json, peerlab bench runs)")->required();
  make->add_option("--out", a->out, "The baseline run file to write (\"-\": stdout)")->required();
  make->add_option("--fleet", a->fleet,
                   "Runs of the kind from every board (files, or directories of run files and bundles, e.g. "
                   "reports/runs reports/qualify): each row records each board's time, and new runs are held to "
                   "that board-to-board range; runs of other kinds are left out");
  sub.footer(
      "Examples:\n"
      "  peerlab baseline make --from good1/results.json good2/results.json good3/results.json \\\n"
      "      --fleet reports/runs reports/qualify --out reports/baselines/h200-x4-nvswitch.json.gz\n"
      "  peerlab qualify --baseline reports/baselines/h200-x4-nvswitch.json.gz --out today/");
  return [a, make]() -> int {
    if (make->parsed()) return runMake(*a);
    return fail(kCmd, kExitUsage, "no subcommand (make)");
  };
}

}  // namespace

PEERLAB_REGISTER_COMMAND(baseline, "baseline",
                         "Make the baseline a kind's new runs are held against, from runs that pass", setup);

}  // namespace peerlab::cli
