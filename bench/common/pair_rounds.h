#pragma once
/// Two-sided benchmarks (two processes, one per GPU of a pair) over many ordered pairs in one job: one rank per GPU,
/// the pairs in rounds (harness/launch/pair_rounds.h). The pairs of a round run each row at the same time; then rank 0
/// learns every pair's row through one exchange and reports them. A row is registered per (round, group, pair), every
/// rank in the same order; `group` numbers the rows of a round (a size and an implementation), the same for every pair.
///
/// Where the pairs come from: the plan's rounds (bench/common/plan.h: --plan, --pairs "0-1,2-3;1-0,3-2"; rank i drives
/// the i-th smallest GPU named, so the job has a rank per GPU named; one pair: rank 0 drives its source), else 0->1.

#include <functional>
#include <string>
#include <vector>

#include "bench/common/bench_util.h"
#include "harness/launch/pair_rounds.h"

namespace peerlab::bench {

struct PairJob {
  launch::PairRoundList rounds;
  std::vector<int> gpus;  ///< the GPU of each rank (sorted; one pair: source, destination)
  /// The rank that drives `gpu`, -1 when no rank does.
  int rankOf(int gpu) const;
  /// "0->1"
  static std::string pairName(const launch::OrderedPair& p);
};

/// The job's pairs, read once from the plan.
const PairJob& pairJob();

/// What one rank sees of its pair while a row runs.
struct PairContext {
  launch::OrderedPair pair;   ///< (source GPU, destination GPU)
  int rank = 0;               ///< 0 on the source GPU's rank, 1 on the destination's
  int gpu = -1;               ///< this rank's GPU
  Bootstrap* boot = nullptr;  ///< the pair as a job of two (valid until the round ends)
};

/// A pair's row: the record, or why it did not run (unavailable: skipped, otherwise failed). Only the pair's rank 0
/// (the source GPU's) reports; its partner's row is ignored.
struct PairRow {
  Status status = Status::ok();
  Record record;
};

struct PairRowKey {
  int round = 0;
  int group = 0;
  launch::OrderedPair pair;
};

struct PairRowOptions {
  int64_t exchange_ms = 300'000;  ///< the deadline of the exchange after each group (longer than any row)
  /// Called on every rank at the end of a round, before the pair's bootstrap goes: tear down what lives with the pair.
  std::function<void()> end_round;
};

/// Runs the row `key` inside a benchmark body (every rank calls it for every registered row, in order): the first row
/// of a group measures (`measure`, on the ranks of every pair of the round), later ones report what was measured.
/// Rank 0 publishes the pair's record, skips it or fails it; the other ranks report nothing. After an exchange fails
/// (a rank died or hung), every later row fails at once naming it.
void runPairRow(benchmark::State& state, const PairJob& job, const PairRowKey& key, const Record& identity,
                const std::function<PairRow(const PairContext&)>& measure, const PairRowOptions& options);

}  // namespace peerlab::bench
