// The transport suite (bench/transport_bench.cu): NIXL and UCX between two processes, one process per library found
// (never both in one process) covering every ordered pair in rounds, and, in the full sweep, zcopy_bench's
// peerlab.get / peerlab.put / nccl.sendrecv rows at the same sizes, so the run file holds them side by side. Rows:
// bench/transport_suite.h.
#include "bench/transport_suite.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "harness/qualify/cost_model.h"
#include "harness/qualify/schedule.h"
#include "harness/qualify/suites.h"
#include "reference/transport/transport.h"

namespace peerlab::qualify {
namespace {

using namespace cost;
namespace ts = transport_suite;

// Endpoints (NIXL agent or UCX context, registration, the capability check) per pair and round. Measured on 4x H200
// (f062466): a round of single transfers takes ~0.55 s with its endpoints; a wait-mode row ~70 ms.
constexpr double kPairSetupS = 0.4;
constexpr double kRowFixedS = 0.025;
constexpr double kWaitRowS = 0.07;

// The single transfers the rules judge, below full.
const std::vector<int64_t> kJudgedSizes = {8, 4096, 65536, int64_t{64} << 20, int64_t{256} << 20, int64_t{1} << 30};

SuiteInfo describe() {
  SuiteInfo s;
  s.name = "transport";
  s.binary = "transport_bench";
  s.min_gpus = 2;
  s.order = 50;
  s.result_suites = {"transport"};
  s.result_facts = {{.suite = "transport", .bytes_convention = "the bytes written or read through the transport"}};
  s.rules = {"transport_nixl_write", "transport_ucx_put", "transport_nixl_read", "transport_ucx_get",
             "transport_small"};
  s.deadline_s[0] = 45;
  s.deadline_s[1] = 45;
  s.deadline_s[2] = 180;
  s.description =
      "NIXL write/read and UCX put/get of GPU memory between two processes, with the CPU cost of waiting, beside "
      "peerlab.get/put and NCCL send/recv";
  return s;
}

transport::Library libraryOf(const report::BenchPlan& work) {
  return transport::parseLibrary(work.knob(ts::kLibraryKnob, "nixl")).value_or(transport::Library::kNixl);
}

class TransportSuite final : public Suite {
 public:
  TransportSuite() : Suite(describe()) {}

  // NIXL found, and UCX with its CUDA module found (transport.h says where each is looked for).
  std::string unavailable() const override {
    const transport::Found nixl = transport::findLibrary(transport::Library::kNixl);
    const transport::Found ucx = transport::findLibrary(transport::Library::kUcx);
    if (nixl.found || (ucx.found && ucx.cuda_module)) return "";
    return "neither NIXL nor UCX with CUDA found (" + nixl.describe(transport::Library::kNixl) + "; " +
           ucx.describe(transport::Library::kUcx) + "; set PEERLAB_NIXL_DIR / PEERLAB_UCX_DIR)";
  }

  std::vector<BenchJob> plan(const SuiteRequest& req) const override {
    std::vector<BenchJob> out;
    if (req.pairs.empty()) return out;
    std::vector<std::string> libraries;
    if (transport::findLibrary(transport::Library::kNixl).found) libraries.push_back("nixl");
    const transport::Found ucx = transport::findLibrary(transport::Library::kUcx);
    if (ucx.found && ucx.cuda_module) libraries.push_back("ucx");
    const PairSchedule schedule = schedulePairs(*req.topology, req.pairs, req.concurrent);
    const double per_round = info().deadline_s[static_cast<int>(req.level)];
    const bool full = req.level == Level::kFull;
    // The single transfers the rules judge; the ways of waiting for them (wait/<mode>/uni) in the full sweep.
    std::vector<report::RowSelection> rows;
    if (!full) rows = {{{"*/uni"}, kJudgedSizes, {}, {}}};
    const std::vector<report::RowSelection> guard = {{{"nixl.write/uni", "ucx.put/uni"}, {ts::kSpotBytes}, {}, {}}};
    for (const std::string& lib : libraries) {
      for (BenchJob& j : guardedPairRounds(*this, info().binary, name() + " " + lib, schedule, rows, guard, per_round,
                                           {{ts::kLibraryKnob, lib}}))
        out.push_back(std::move(j));
    }
    // zcopy_bench's rows at the transports' sizes, for the comparison (full only: they feed no check, and the zcopy
    // suite measures peerlab.get and peerlab.put on every pair at standard).
    if (!full) return out;
    const Suite* zcopy = findSuite("zcopy");
    if (zcopy == nullptr) return out;
    BenchJob base =
        pairRoundsJob(*this, zcopy->info().binary, name() + " baseline", schedule.rounds,
                      {{{"peerlab.get/uni", "peerlab.put/uni", "nccl.sendrecv/uni"}, {}, {}, {}}}, per_round * 2 / 3);
    base.schedule_basis = schedule.basis;
    out.push_back(base);
    return out;
  }

  std::vector<SuiteRow> rows(const BenchJob& job, const report::PlanTopology& t) const override {
    // The baseline process runs zcopy_bench: its rows are that suite's.
    if (const Suite* zcopy = findSuite("zcopy"); zcopy != nullptr && job.binary == zcopy->info().binary)
      return zcopy->rows(job, t);
    const transport::Library library = libraryOf(job.work);
    const std::vector<ts::Spec> specs = ts::specs();
    std::vector<SuiteRow> out;
    const auto& rounds = job.work.rounds;
    for (size_t r = 0; r < rounds.size(); ++r) {
      for (size_t g = 0; g < specs.size(); ++g) {
        for (const auto& [src, dst] : rounds[r]) {
          SuiteRow row;
          row.key.impl = ts::implName(specs[g].op, library);
          row.key.name = ts::recordName(specs[g]);
          row.key.bytes = specs[g].bytes;
          row.key.src = src;
          row.key.dst = dst;
          row.gbench_name = ts::rowName(specs[g], library, src, dst);
          row.group = static_cast<int>(r * specs.size() + g);
          row.round = static_cast<int>(r);
          out.push_back(std::move(row));
        }
      }
    }
    return out;
  }

  JobEstimate estimate(const BenchJob& job, const report::PlanTopology& t) const override {
    const std::vector<SuiteRow> all = rows(job, t);
    Tally tally = tallyRows(all, job.work, [&](const SuiteRow& row) {
      Tally x;
      if (row.key.name.rfind("wait/", 0) == 0) {
        x.add(1, kWaitRowS);
        return x;
      }
      ts::Spec spec;
      spec.bytes = row.key.bytes;
      const double data = row.key.bytes <= ts::kLatencyMax
                              ? 0
                              : seconds(static_cast<double>(row.key.bytes),
                                        ts::unitsPerSample(spec) *
                                            ((job.work.samples > 0 ? job.work.samples : ts::sampleCount(spec)) + 1.0),
                                        pairRate(t, row.key.src, row.key.dst));
      x.add(1, kRowFixedS, data);
      return x;
    });
    // Each round that runs a row connects its pairs' endpoints (or, for the baseline, sets up a zcopy world).
    std::set<int> run;
    for (const SuiteRow& row : all)
      if (job.work.runs(row.key)) run.insert(row.round);
    tally.fixed_s += static_cast<double>(run.size()) * kPairSetupS;
    const size_t rounds = job.work.rounds.size();
    const double extra_ranks = std::max(0, job.ranks - 2);
    JobEstimate e = fromTally(kProcessStartS + kContextS + kExtraRankS * extra_ranks, tally);
    e.basis += ", " + std::to_string(rounds) + (rounds == 1 ? " round" : " rounds");
    return e;
  }

  // Earlier versions chose the library by environment (PEERLAB_TRANSPORT_LIBRARY): it names the rows.
  report::BenchPlan legacyPlan(const BenchJob& job, const report::PlanTopology& t) const override {
    BenchJob named = job;
    if (const std::string lib = legacyEnv(job, "PEERLAB_TRANSPORT_LIBRARY"); !lib.empty())
      named.work.knobs[ts::kLibraryKnob] = lib;
    report::BenchPlan work = Suite::legacyPlan(named, t);
    work.knobs = named.work.knobs;
    return work;
  }
};

}  // namespace

std::unique_ptr<Suite> transportSuite() {
  return std::make_unique<TransportSuite>();
}

}  // namespace peerlab::qualify
