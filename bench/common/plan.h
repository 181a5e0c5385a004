#pragma once
/// What a benchmark process runs: the plan `peerlab qualify` and `peerlab bench` hand it (harness/report/bench_plan.h)
/// and the knobs a benchmark declares. bench_main reads the command line before any benchmark registers:
///   --plan=FILE           the plan file (rows, pair rounds, GPU sets, knobs)
///   --pairs=ROUNDS        pair rounds over the plan's ("0-1" one pair; "0-1,2-3;1-0,3-2" rounds of pairs at once)
///   --knob=NAME=VALUE     a knob over the plan's (repeatable); --knobs lists the knobs this binary declares
/// Without them, every row of the benchmark runs on its default pairs (0->1).

#include <cstdint>
#include <string>
#include <vector>

#include "harness/report/bench_plan.h"
#include "reference/core/status.h"

namespace peerlab::bench {

/// What a knob's value is: any text, a whole number >= 0, or 0/1.
enum class KnobType { kText, kCount, kSwitch };

/// A setting of one benchmark (not of the measurement's verdict): its name, its type and what it does, declared once
/// at static-initialization time with PEERLAB_BENCH_KNOB. A knob no declaration has, or a value that is not of its
/// type, stops the process (exit 2) before anything runs.
struct KnobInfo {
  const char* name;
  KnobType type;
  const char* help;
};
struct KnobRegistrar {
  explicit KnobRegistrar(KnobInfo info);
};
/// Every knob this binary declares, in declaration order.
const std::vector<KnobInfo>& declaredKnobs();

/// The plan of this process (bench_main reads it; every rank reads the same one).
const report::BenchPlan& plan();
/// Whether the plan runs `row`.
bool planned(const report::RowKey& row);

/// A knob's text ("" when neither the plan nor the command line sets it). `name` must be declared.
std::string knobText(const char* name);
/// A whole number within [lo, hi]; `fallback` when unset. `invalid_argument`: "knob kernel_threads=\"7\": expected a
/// whole number from 32 to 512".
StatusOr<int64_t> knobInt(const char* name, int64_t fallback, int64_t lo, int64_t hi);
/// 0 or 1; `fallback` when unset.
StatusOr<bool> knobBool(const char* name, bool fallback);
/// A kCount knob's value, `fallback` when unset (its type was checked when the process started).
uint64_t knobCount(const char* name, uint64_t fallback);

/// bench_main: takes --plan, --pairs, --knob and --knobs out of argv and reads them. Returns the exit code to stop
/// with (2: bad input, with the reason on stderr; 0 after --knobs listed them), or -1 to go on.
int takePlanArgs(int& argc, char** argv);

}  // namespace peerlab::bench

#define PEERLAB_BENCH_KNOB(ident, name, type, help)                  \
  static ::peerlab::bench::KnobRegistrar peerlab_bench_knob_##ident( \
      ::peerlab::bench::KnobInfo{name, ::peerlab::bench::KnobType::type, help})
