// peerlab baseline: make the run file new runs of one kind are held against (qualify --baseline, report --compare).
#include <cstdio>
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
  std::string out;
};

int runMake(const BaselineArgs& a) {
  if (a.from.empty()) return fail(kCmd, kExitUsage, "make: --from names no run file");
  if (a.out.empty()) return fail(kCmd, kExitUsage, "make: --out names no file");
  std::vector<report::NamedRun> runs;
  for (const std::string& file : a.from) {
    auto run = report::readRun(file);
    if (!run.isOk()) return fail(kCmd, kExitUsage, "make: " + run.status().message());
    runs.push_back({file, std::move(*run)});
  }
  report::BaselineSummary sum;
  auto baseline = report::makeBaseline(runs, &sum);
  if (!baseline.isOk()) return fail(kCmd, kExitUsage, "make: " + baseline.status().message());
  // What is written must read back through the one reader.
  if (auto back = report::fromJson(report::toJson(*baseline)); !back.isOk()) {
    return fail(kCmd, kExitRuntime, "make: the baseline does not read back: " + back.status().message());
  }
  if (Status st = writeOutput(a.out, report::toJson(*baseline).dump(2) + "\n"); !st.isOk()) {
    return fail(kCmd, kExitUsage, st.message());
  }
  std::fprintf(a.out == "-" ? stderr : stdout,
               "peerlab baseline: %s: kind %s from %d run%s: %d results (%d left out: not measured by every run; %d "
               "not ok in some run, kept as the newest run gave them)\n",
               printable(a.out).c_str(), printable(baseline->kind.name, 128).c_str(), sum.runs,
               sum.runs == 1 ? "" : "s", sum.results, sum.left_out, sum.not_ok);
  return kExitOk;
}

std::function<int()> setup(CLI::App& sub) {
  auto a = std::make_shared<BaselineArgs>();
  sub.require_subcommand(1);
  CLI::App* make = sub.add_subcommand(
      "make", "Make a baseline from runs of one kind that pass their own checks (median of the runs per result)");
  make->add_option("--from", a->from, "Run files (peerlab qualify's results.json, peerlab bench runs)")->required();
  make->add_option("--out", a->out, "The baseline run file to write (\"-\": stdout)")->required();
  sub.footer(
      "Examples:\n"
      "  peerlab baseline make --from good1/results.json good2/results.json good3/results.json \\\n"
      "      --out reports/baselines/h200-x4-nvswitch.json.gz\n"
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
