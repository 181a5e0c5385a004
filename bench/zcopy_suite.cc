// The zcopy suite (bench/zcopy_bench.cu) as qualify and bench run it: one process of a rank per GPU covering every
// ordered pair in rounds (PEERLAB_PAIR_ROUNDS). Rows: BM_Zcopy/<impl>/{uni,graph/uni,kernel/uni}/a->b/bytes:N.
#include <algorithm>
#include <cmath>

#include "harness/qualify/cost_model.h"
#include "harness/qualify/plan.h"
#include "harness/qualify/suites.h"

namespace peerlab::qualify {
namespace {

using namespace cost;

std::string filter(Level level, const std::vector<std::pair<int, int>>&, bool) {
  // The pairs are the job's rounds; the filter only picks sizes.
  if (level == Level::kFull) return "";
  // peerlab's rows, which the rules judge; NCCL's send/recv rows stand beside them in the full sweep.
  return "^BM_Zcopy/peerlab[.][a-z_]+/.*/bytes:(8|65536|268435456)/";
}

JobEstimate estimate(const BenchJob& job, const Plan& plan) {
  const bool full = plan.options.level == Level::kFull;
  // A sample: one pair's setup and its 256 MiB put (the setup as earlier code paid it, with an NCCL communicator: the
  // sample's start dominates either way).
  if (!job.guard_for.empty()) return pairSample(job, plan.topology, kNcclInitS + 0.4, 256 * kMiB, 32 * 6);
  // The context and channels each pair sets up when its round starts; the NCCL communicator (where the job runs
  // NCCL's rows: the full sweep) with the first NCCL row.
  const bool nccl = jobFilter(job).rfind("^BM_Zcopy/peerlab", 0) != 0;
  const double pair_setup = nccl ? kNcclInitS + 0.4 : 0.4;
  // Rows per size: get, put, sm (eager and graph for each; sm also kernel-initiated at latency sizes), and NCCL's
  // eager and graph send/recv where the job runs them.
  const double latency_rows = nccl ? 9 : 7, bandwidth_rows = nccl ? 8 : 6;
  return pairRounds(job, plan.topology, pair_setup, [&](int s, int d) {
    const double rate = pairRate(plan.topology, s, d);
    const double fixed = 0.025;
    Tally tally;
    std::vector<double> sizes =
        full ? std::vector<double>{8, 64, 512, 4096, 32768, 65536} : std::vector<double>{8, 65536};
    tally.add(latency_rows * static_cast<double>(sizes.size()), fixed);
    sizes = full ? std::vector<double>{kMiB, 4 * kMiB, 16 * kMiB, 64 * kMiB, 128 * kMiB, 256 * kMiB, 1024 * kMiB}
                 : std::vector<double>{256 * kMiB};
    for (double b : sizes) {
      // bench/zcopy_bench.cu: unitsPerSample and sampleCount, plus a warm-up sample.
      const double units = std::clamp(std::floor(256 * kMiB / b), 2.0, 32.0);
      const double samples = b >= 256 * kMiB ? 5 : 10;
      tally.add(bandwidth_rows, fixed, seconds(b, units * (samples + 1), rate));
    }
    return tally;
  });
}

}  // namespace

SuiteSpec zcopySuite() {
  SuiteSpec s;
  s.name = "zcopy";
  s.binary = "zcopy_bench";
  s.shape = JobShape::kPairRounds;
  s.min_gpus = 2;
  s.order = 20;
  s.result_suites = {"zcopy"};
  s.rules = {"zcopy_get", "zcopy_put", "zcopy_sm_signal_kernel", "zcopy_graph", "zcopy_eager"};
  s.filter = filter;
  // Per round (a round takes what one pair takes alone).
  s.deadline_s[0] = 20;
  s.deadline_s[1] = 40;
  s.deadline_s[2] = 420;
  s.guard_filter = "^BM_Zcopy/peerlab.put/uni/[0-9]+->[0-9]+/bytes:268435456/";
  s.estimate = estimate;
  s.description = "semaphore zero-copy get/put/sm_signal between two processes over CUDA IPC, with NCCL send/recv";
  return s;
}

}  // namespace peerlab::qualify
