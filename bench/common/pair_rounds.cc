#include "bench/common/pair_rounds.h"

#include "bench/common/plan.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>

namespace peerlab::bench {

int PairJob::rankOf(int gpu) const {
  auto it = std::find(gpus.begin(), gpus.end(), gpu);
  return it == gpus.end() ? -1 : static_cast<int>(it - gpus.begin());
}

std::string PairJob::pairName(const launch::OrderedPair& p) {
  return std::to_string(p.first) + "->" + std::to_string(p.second);
}

const PairJob& pairJob() {
  static const PairJob job = [] {
    PairJob j;
    j.rounds = plan().rounds;
    if (j.rounds.empty()) j.rounds = {{{0, 1}}};
    std::set<int> gpus;
    for (const auto& round : j.rounds) {
      for (const auto& [s, d] : round) {
        gpus.insert(s);
        gpus.insert(d);
      }
    }
    j.gpus.assign(gpus.begin(), gpus.end());
    // One pair keeps its order: rank 0 drives the source.
    if (j.rounds.size() == 1 && j.rounds[0].size() == 1) j.gpus = {j.rounds[0][0].first, j.rounds[0][0].second};
    return j;
  }();
  return job;
}

namespace {

constexpr int kMaxExtras = 40;
constexpr size_t kNameBytes = 32;

// A pair's row as it crosses the job (fixed size: every rank contributes one).
struct Wire {
  int32_t pair = -1;  // index in the round; -1: this rank reports nothing
  int32_t code = 0;   // StatusCode of the row
  int32_t ranks = 0;
  int32_t extras = 0;
  double bytes = 0, time_us = 0, algbw_gbps = 0, busbw_gbps = 0, wrong = 0;
  char extra_names[kMaxExtras][kNameBytes] = {};
  double extra_values[kMaxExtras] = {};
  char why[512] = {};
};

Wire encode(int index, const PairRow& row) {
  Wire w;
  w.pair = index;
  w.code = static_cast<int32_t>(row.status.code());
  if (!row.status.isOk()) {
    std::snprintf(w.why, sizeof(w.why), "%s", row.status.message().c_str());
    return w;
  }
  const Record& r = row.record;
  w.ranks = r.ranks;
  w.bytes = r.bytes;
  w.time_us = r.time_us;
  w.algbw_gbps = r.algbw_gbps;
  w.busbw_gbps = r.busbw_gbps;
  w.wrong = r.wrong;
  for (const auto& [k, v] : r.extra) {
    if (w.extras == kMaxExtras || k.size() >= kNameBytes) continue;
    std::memcpy(w.extra_names[w.extras], k.data(), k.size());
    w.extra_values[w.extras] = v;
    ++w.extras;
  }
  return w;
}

PairRow decode(const Wire& w, const Record& identity) {
  PairRow row;
  if (w.code != 0) {
    row.status = Status(static_cast<StatusCode>(w.code), std::string(w.why, strnlen(w.why, sizeof(w.why))));
    return row;
  }
  row.record = identity;
  row.record.ranks = w.ranks;
  row.record.bytes = w.bytes;
  row.record.time_us = w.time_us;
  row.record.algbw_gbps = w.algbw_gbps;
  row.record.busbw_gbps = w.busbw_gbps;
  row.record.wrong = w.wrong;
  for (int i = 0; i < std::min(w.extras, kMaxExtras); ++i)
    row.record.extra[std::string(w.extra_names[i], strnlen(w.extra_names[i], kNameBytes))] = w.extra_values[i];
  return row;
}

// What a rank keeps between rows.
struct State {
  int round = -1;  // the round whose pair bootstrap is up
  std::unique_ptr<launch::PairBootstrap> pair_boot;
  std::set<std::pair<int, int>> measured;                   // (round, group) done
  std::map<launch::OrderedPair, std::optional<Wire>> rows;  // rank 0: the current group's rows by pair
  std::string broken;                                       // an exchange failed: nothing more is measured
};

State& state() {
  static State s;
  return s;
}

void report(benchmark::State& bs, const Record& identity, const PairRow& row) {
  if (row.status.isOk()) {
    if (row.record.time_us > 0) bs.SetIterationTime(row.record.time_us * 1e-6);
    publish(bs, row.record);
  } else if (row.status.code() == StatusCode::kUnavailable) {
    skip(bs, identity, row.status.toString());
  } else {
    fail(bs, identity, row.status);
  }
}

}  // namespace

namespace {

// One pass of runPairRow's body (the benchmark runs one iteration).
void pairRowOnce(benchmark::State& bs, const PairJob& job, const PairRowKey& key, const Record& identity,
                 const std::function<PairRow(const PairContext&)>& measure, const PairRowOptions& options) {
  Bootstrap* boot = bootstrap();
  const int ranks = static_cast<int>(job.gpus.size());
  if (boot == nullptr || boot->size() != ranks) {
    skip(bs, identity,
         "needs " + std::to_string(ranks) + " ranks, one per GPU of its pairs: run with --ranks=" +
             std::to_string(ranks) + " (or under mpirun -np " + std::to_string(ranks) + ")");
    return;
  }
  State& st = state();
  if (!st.broken.empty()) {
    fail(bs, identity, PEERLAB_INTERNAL("not run: an earlier exchange between the ranks failed: " + st.broken));
    return;
  }
  const std::pair<int, int> group{key.round, key.group};
  if (!st.measured.count(group)) {
    st.measured.insert(group);
    // A new round: what lived with the last pair goes first, on every rank at once.
    if (st.round != key.round) {
      if (options.end_round) options.end_round();
      st.pair_boot.reset();
      st.round = key.round;
    }
    const std::vector<launch::OrderedPair>& round = job.rounds[static_cast<size_t>(key.round)];
    const int me = boot->rank();
    const int gpu = job.gpus[static_cast<size_t>(me)];
    Wire mine;
    for (size_t i = 0; i < round.size(); ++i) {
      const launch::OrderedPair& p = round[i];
      if (p.first != gpu && p.second != gpu) continue;
      PairRow row;
      if (!st.pair_boot) {
        auto made = launch::PairBootstrap::create(*boot, job.rankOf(p.first), job.rankOf(p.second));
        if (made.isOk()) {
          st.pair_boot = std::move(*made);
        } else {
          row.status = made.status();
        }
      }
      if (st.pair_boot) {
        PairContext ctx{p, p.first == gpu ? 0 : 1, gpu, st.pair_boot.get()};
        row = measure(ctx);
      }
      if (p.first == gpu) mine = encode(static_cast<int>(i), row);
    }
    std::vector<Wire> all(static_cast<size_t>(ranks));
    const Status ex = boot->allgather(&mine, all.data(), sizeof(Wire), Deadline::afterMs(options.exchange_ms));
    st.rows.clear();
    if (!ex.isOk()) {
      st.broken = ex.toString();
      fail(bs, identity, PEERLAB_INTERNAL("the exchange after this row failed: " + st.broken));
      return;
    }
    if (me == 0) {
      for (const Wire& w : all) {
        if (w.pair >= 0 && static_cast<size_t>(w.pair) < round.size()) st.rows[round[static_cast<size_t>(w.pair)]] = w;
      }
    }
  }
  auto it = st.rows.find(key.pair);
  if (boot->rank() != 0) {
    skip(bs, identity, "reported by rank 0");
  } else if (it == st.rows.end() || !it->second) {
    fail(bs, identity, PEERLAB_INTERNAL("no row came back from the ranks of " + PairJob::pairName(key.pair)));
  } else {
    report(bs, identity, decode(*it->second, identity));
  }
}

}  // namespace

void runPairRow(benchmark::State& bs, const PairJob& job, const PairRowKey& key, const Record& identity,
                const std::function<PairRow(const PairContext&)>& measure, const PairRowOptions& options) {
  // One iteration (Iterations(1)); a skip or failure ends it, a published row lets it end by itself.
  for (auto _ : bs) {
    (void)_;
    pairRowOnce(bs, job, key, identity, measure, options);
  }
}

}  // namespace peerlab::bench
