// The transport suite (bench/transport_bench.cu): NIXL and UCX between two processes, one process per library found
// (never both in one process) covering every ordered pair in rounds, and zcopy_bench's peerlab.get / peerlab.put /
// nccl.sendrecv rows at the same sizes, so the run file holds them side by side. Rows:
// BM_Transport/<impl>/{uni,wait/<mode>/uni}/a->b/bytes:N.
#include <algorithm>
#include <cmath>

#include "harness/qualify/cost_model.h"
#include "harness/qualify/plan.h"
#include "harness/qualify/schedule.h"
#include "harness/qualify/suites.h"
#include "reference/transport/transport.h"

namespace peerlab::qualify {
namespace {

using namespace cost;

// NIXL found, and UCX with its CUDA module found (transport.h says where each is looked for).
std::string unavailable() {
  const transport::Found nixl = transport::findLibrary(transport::Library::kNixl);
  const transport::Found ucx = transport::findLibrary(transport::Library::kUcx);
  if (nixl.found || (ucx.found && ucx.cuda_module)) return "";
  return "neither NIXL nor UCX with CUDA found (" + nixl.describe(transport::Library::kNixl) + "; " +
         ucx.describe(transport::Library::kUcx) + "; set PEERLAB_NIXL_DIR / PEERLAB_UCX_DIR)";
}

std::string sizes(Level level) {
  return level == Level::kFull ? "[0-9]+" : "(8|4096|65536|67108864|268435456|1073741824)";
}

// The single transfers the rules judge; the ways of waiting for them (wait/<mode>/uni) in the full sweep.
std::string filter(Level level) {
  if (level == Level::kFull) return "/bytes:" + sizes(level) + "/";
  return "^BM_Transport/[a-z]+[.][a-z]+/uni/.*/bytes:" + sizes(level) + "/";
}

std::vector<BenchJob> jobs(const SuiteSpec& spec, const SuiteRequest& req) {
  std::vector<BenchJob> out;
  if (req.pairs.empty()) return out;
  std::vector<std::string> libraries;
  if (transport::findLibrary(transport::Library::kNixl).found) libraries.push_back("nixl");
  const transport::Found ucx = transport::findLibrary(transport::Library::kUcx);
  if (ucx.found && ucx.cuda_module) libraries.push_back("ucx");
  const PairSchedule schedule = req.topology ? schedulePairs(*req.topology, req.pairs, req.concurrent)
                                             : PairSchedule{serialRounds(req.pairs), false, ""};
  const double per_round = spec.deadline_s[static_cast<int>(req.level)];
  for (const std::string& lib : libraries) {
    for (BenchJob& j :
         guardedPairRounds(spec, spec.binary, "transport " + lib, schedule.rounds, schedule.concurrent, schedule.basis,
                           filter(req.level), spec.guard_filter, per_round, {"PEERLAB_TRANSPORT_LIBRARY=" + lib}))
      out.push_back(std::move(j));
  }
  // zcopy_bench's rows at the transports' sizes, for the comparison (full only: they feed no check, and the zcopy
  // suite measures peerlab.get and peerlab.put on every pair at standard).
  if (req.level != Level::kFull) return out;
  BenchJob base = pairRoundsJob(
      spec, "zcopy_bench", "transport baseline", schedule.rounds,
      "^BM_Zcopy/(peerlab.get|peerlab.put|nccl.sendrecv)/uni/.*/bytes:" + sizes(req.level) + "/", per_round * 2 / 3);
  base.schedule_basis = schedule.basis;
  out.push_back(base);
  return out;
}

JobEstimate estimate(const BenchJob& job, const Plan& plan) {
  const bool full = plan.options.level == Level::kFull;
  // A sample: one pair's endpoints and its 256 MiB write.
  if (!job.guard_for.empty()) return pairSample(job, plan.topology, kNcclInitS + 0.4, 256 * kMiB, 6);
  // Endpoints (NIXL agent or UCX context, registration, the capability check) or a zcopy world, per pair and round.
  // Measured on 4x H200 (f062466): a round of single transfers takes ~0.55 s with its endpoints; a wait-mode row
  // ~70 ms.
  const double pair_setup = 0.4;
  const bool waits = jobFilter(job).rfind("^BM_Transport/", 0) != 0;
  return pairRounds(job, plan.topology, pair_setup, [&](int s, int d) {
    const double rate = pairRate(plan.topology, s, d);
    const double fixed = 0.025;
    Tally tally;
    std::vector<double> small =
        full ? std::vector<double>{8, 64, 512, 4096, 32768, 65536} : std::vector<double>{8, 4096, 65536};
    tally.add(2 * static_cast<double>(small.size()), fixed);
    std::vector<double> large =
        full ? std::vector<double>{kMiB, 4 * kMiB, 16 * kMiB, 64 * kMiB, 128 * kMiB, 256 * kMiB, 1024 * kMiB}
             : std::vector<double>{64 * kMiB, 256 * kMiB, 1024 * kMiB};
    for (double b : large) {
      const double units = std::clamp(std::floor(256 * kMiB / b), 2.0, 32.0);
      const double samples = b >= 256 * kMiB ? 5 : 10;
      tally.add(2, fixed, seconds(b, units * (samples + 1), rate));
    }
    // Wait modes (8 B, 4 KB, 64 KB, 4 MB, 64 MB) x spin, yield, progress, stream where the job runs them (the full
    // sweep; earlier code's standard level ran those of its sizes).
    if (waits) tally.add(full ? 20 : 16, 0.07);
    return tally;
  });
}

}  // namespace

SuiteSpec transportSuite() {
  SuiteSpec s;
  s.name = "transport";
  s.binary = "transport_bench";
  s.shape = JobShape::kPairRounds;
  s.min_gpus = 2;
  s.order = 50;
  s.result_suites = {"transport"};
  s.rules = {"transport_nixl_write", "transport_ucx_put", "transport_nixl_read", "transport_ucx_get",
             "transport_small"};
  s.deadline_s[0] = 45;
  s.deadline_s[1] = 45;
  s.deadline_s[2] = 180;
  s.guard_filter = "^BM_Transport/[a-z]+[.](write|put)/uni/[0-9]+->[0-9]+/bytes:268435456/";
  s.unavailable = unavailable;
  s.jobs = jobs;
  s.estimate = estimate;
  s.description =
      "NIXL write/read and UCX put/get of GPU memory between two processes, with the CPU cost of waiting, beside "
      "peerlab.get/put and NCCL send/recv";
  return s;
}

}  // namespace peerlab::qualify
