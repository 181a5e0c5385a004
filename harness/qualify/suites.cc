#include "harness/qualify/suites.h"

#include <algorithm>
#include <set>

#include "reference/transport/transport.h"

namespace peerlab::qualify {

// Benchmark names as the benches register them (Google Benchmark appends "/iterations:1/manual_time", so a size is
// anchored with a trailing "/", never "$"):
//   peer_copy_bench  BM_PeerEnable/{first,repeat}/0<->1, BM_PeerCopy/cuda_memcpy_peer_noP2P/uni/0->1/bytes:N,
//                    BM_PeerCopy/{ce,sm_pull,sm_push,staged}/{uni,bidir}/{a->b,a<->b}/bytes:N (4 KiB .. 1 GiB by 4),
//                    BM_PeerLatency/flag/a<->b, BM_PeerLatency/pointer_chase/a->b
//   zcopy_bench      BM_Zcopy/<impl>/{uni,graph/uni,kernel/uni}/a->b/bytes:N, the pair from PEERLAB_ZCOPY_DEVICES
//   alltoallv_bench  alltoallv/<impl>/[graph/]{uniform,skewed}/bytes:N, moe/<impl>/[graph/]T=N (suites alltoallv and
//                    moe; the alltoallv process runs both, moe alone runs only the moe rows)
//   probe_bench      BM_ProbeMatrix
//   transport_bench  BM_Transport/<impl>/{uni,wait/<mode>/uni}/a->b/bytes:N, the pair from PEERLAB_ZCOPY_DEVICES and
//   the
//                    library from PEERLAB_TRANSPORT_LIBRARY (suite transport, with zcopy_bench's baseline rows)
//   host_copy_bench  BM_HostCopy/<impl>/{h2d,d2h,bidir}/gpu:G/numa:{local,remote}/bytes:N,
//                    BM_HostCopy/<impl>/{all_h2d,all_d2h}/bytes:N, BM_HostLatency/peerlab.sm/latency/gpu:G/numa:local,
//                    BM_DeviceLocal/peerlab.ce/device_local/gpu:G/bytes:N
namespace {

std::string peerCopyFilter(const std::string& mode, const std::vector<std::pair<int, int>>& pairs, bool all) {
  if (mode == "full" && all) return "";
  const std::string pair = pairRegex(pairs, all);
  const std::string anchors = "BM_PeerEnable/|BM_PeerCopy/cuda_memcpy_peer_noP2P/|BM_PeerLatency/[a-z_]+/" + pair + "/";
  if (mode == "full") return anchors + "|BM_PeerCopy/[a-z_]+/(uni|bidir)/" + pair + "/";
  // Quick: a small, a middle and three large sizes per SM/CE path (the link rate from 256 MiB; 1 GiB is where
  // nvbandwidth's figures are comparable), the host-staged path at 256 MiB only.
  return anchors + "|BM_PeerCopy/(ce|sm_pull|sm_push)/(uni|bidir)/" + pair +
         "/bytes:(4096|1048576|16777216|268435456|1073741824)/|BM_PeerCopy/staged/uni/" + pair + "/bytes:268435456/";
}

std::string zcopyFilter(const std::string& mode, const std::vector<std::pair<int, int>>&, bool) {
  // One process per pair: the pair is set by the environment, the filter only picks sizes.
  if (mode == "full") return "";
  return "/bytes:(8|65536|268435456)/";
}

std::string alltoallvFilter(const std::string& mode, const std::vector<std::pair<int, int>>&, bool) {
  if (mode == "full") return "";
  // 128 MiB per rank is where the bandwidth targets are set.
  return "/bytes:(4096|65536|1048576|67108864|134217728)/|/T=(1|128|4096)/";
}

std::string moeFilter(const std::string& mode, const std::vector<std::pair<int, int>>&, bool) {
  return mode == "full" ? "^moe/" : "^moe/.*T=(1|128|4096)/";
}

std::string hostCopyFilter(const std::string& mode, const std::vector<std::pair<int, int>>&, bool) {
  if (mode == "full") return "";
  // Quick: 256 MiB (nvbandwidth's size class, where the PCIe anchors are set), the latency and the local copy.
  return "^BM_HostCopy/.*/bytes:268435456/|^BM_HostLatency/|^BM_DeviceLocal/";
}

std::string noFilter(const std::string&, const std::vector<std::pair<int, int>>&, bool) {
  return "";
}

// transport: NIXL found, and UCX with its CUDA module found (transport.h says where each is looked for).
std::string transportUnavailable() {
  const transport::Found nixl = transport::findLibrary(transport::Library::kNixl);
  const transport::Found ucx = transport::findLibrary(transport::Library::kUcx);
  if (nixl.found || (ucx.found && ucx.cuda_module)) return "";
  return "neither NIXL nor UCX with CUDA found (" + nixl.describe(transport::Library::kNixl) + "; " +
         ucx.describe(transport::Library::kUcx) + "; set PEERLAB_NIXL_DIR / PEERLAB_UCX_DIR)";
}

// Per ordered pair: one transport_bench process per library found (never both in one process), and zcopy_bench's
// peerlab.get / peerlab.put / nccl.sendrecv rows at the same sizes, so the run file holds them side by side.
std::vector<BenchJob> transportJobs(const std::string& mode, int, const std::vector<std::pair<int, int>>& pairs, bool) {
  const std::string sizes = mode == "full" ? "[0-9]+" : "(8|4096|65536|67108864|268435456|1073741824)";
  std::vector<std::string> libraries;
  if (transport::findLibrary(transport::Library::kNixl).found) libraries.push_back("nixl");
  const transport::Found ucx = transport::findLibrary(transport::Library::kUcx);
  if (ucx.found && ucx.cuda_module) libraries.push_back("ucx");
  std::vector<BenchJob> jobs;
  for (const auto& [s, d] : pairs) {
    const std::string pair = std::to_string(s) + "," + std::to_string(d);
    auto job = [&](const std::string& binary, const std::string& filter, const std::string& what, double budget) {
      BenchJob j;
      j.suite = "transport";
      j.binary = binary;
      j.args = {"--ranks=2", "--benchmark_filter=" + filter};
      j.env = {"PEERLAB_ZCOPY_DEVICES=" + pair};
      j.src = s;
      j.dst = d;
      j.ranks = 2;
      j.deadline_s = mode == "full" ? 4 * budget : budget;
      j.budget_s = j.deadline_s;  // estimate.cc replaces it with its model
      j.label = "transport " + what + " " + std::to_string(s) + "->" + std::to_string(d);
      return j;
    };
    for (const std::string& lib : libraries) {
      BenchJob j = job("transport_bench", "/bytes:" + sizes + "/", lib, 45);
      j.env.push_back("PEERLAB_TRANSPORT_LIBRARY=" + lib);
      jobs.push_back(j);
    }
    jobs.push_back(job("zcopy_bench", "^BM_Zcopy/(peerlab.get|peerlab.put|nccl.sendrecv)/uni/.*/bytes:" + sizes + "/",
                       "baseline", 30));
  }
  return jobs;
}

}  // namespace

std::string pairRegex(const std::vector<std::pair<int, int>>& pairs, bool all_pairs) {
  if (all_pairs) return "[0-9]+<?->[0-9]+";
  std::set<std::string> alts;
  for (const auto& [a, b] : pairs) {
    alts.insert(std::to_string(a) + "->" + std::to_string(b));
    alts.insert(std::to_string(std::min(a, b)) + "<->" + std::to_string(std::max(a, b)));
  }
  std::string re = "(";
  for (const std::string& x : alts)
    re += (re.size() > 1 ? "|" : "") + x;
  return re + ")";
}

const std::vector<SuiteSpec>& suiteSpecs() {
  static const std::vector<SuiteSpec> specs = [] {
    std::vector<SuiteSpec> s;
    s.push_back({"peer_copy", "peer_copy_bench", JobShape::kWholeMachine, 2, 240, 1800, peerCopyFilter,
                 "peer enable cost, peer copies (copy engine, SM pull/push, host-staged; one way and both ways) and "
                 "peer latency, every ordered pair"});
    s.push_back({"zcopy", "zcopy_bench", JobShape::kPerPair, 2, 40, 420, zcopyFilter,
                 "semaphore zero-copy get/put/sm_signal between two processes over CUDA IPC, with NCCL send/recv"});
    s.push_back({"alltoallv", "alltoallv_bench", JobShape::kCollective, 2, 150, 1200, alltoallvFilter,
                 "GPU-initiated alltoallv with device-side counts and MoE dispatch/combine, with the NCCL baselines"});
    s.push_back({"probe", "probe_bench", JobShape::kWholeMachine, 2, 60, 60, noFilter,
                 "wall time of the verified probe's whole matrix through its worker processes"});
    // Host <-> device paths of every GPU, the suite a one-GPU machine qualifies with.
    s.push_back({"host_copy", "host_copy_bench", JobShape::kWholeMachine, 1, 45, 240, hostCopyFilter,
                 "host <-> device copies of every GPU (copy engine, SM, pageable; own and remote NUMA node; all GPUs "
                 "at once), host latency and device-local copy bandwidth"});
    // MoE dispatch/combine rows come from alltoallv_bench: named alone, only they run.
    s.push_back({"moe", "alltoallv_bench", JobShape::kCollective, 2, 60, 300, moeFilter,
                 "MoE dispatch/combine over the alltoallv (part of the alltoallv suite's process)", false});
    // NIXL and UCX between two processes, where either is found (PEERLAB_NIXL_DIR, PEERLAB_UCX_DIR, the loader).
    SuiteSpec transport{"transport",
                        "transport_bench",
                        JobShape::kPerPair,
                        2,
                        75,
                        300,
                        noFilter,
                        "NIXL write/read and UCX put/get of GPU memory between two processes, with the CPU cost of "
                        "waiting, beside peerlab.get/put and NCCL send/recv"};
    transport.unavailable = transportUnavailable;
    transport.jobs = transportJobs;
    s.push_back(transport);
    return s;
  }();
  return specs;
}

const SuiteSpec* findSuite(const std::string& name) {
  for (const SuiteSpec& s : suiteSpecs()) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::vector<std::string> qualifyDefaultSuites() {
  // The probe's speed (probe_bench) is a benchmark, not a health figure: qualify runs the verified probe itself.
  // transport runs where NIXL or CUDA-enabled UCX is found; elsewhere the plan lists it as not available.
  return {"peer_copy", "zcopy", "alltoallv", "host_copy", "transport"};
}

std::string qualifyDefaultSuitesText() {
  std::string out;
  for (const std::string& s : qualifyDefaultSuites())
    out += (out.empty() ? "" : ",") + s;
  return out;
}

std::vector<std::string> plannedExecutables() {
  std::vector<std::string> out = {"peerlab"};
  for (const SuiteSpec& s : suiteSpecs()) {
    if (std::find(out.begin(), out.end(), s.binary) == out.end()) out.push_back(s.binary);
  }
  return out;
}

std::string suiteNames() {
  std::string out;
  for (const SuiteSpec& s : suiteSpecs())
    out += (out.empty() ? "" : ", ") + s.name;
  return out;
}

std::vector<BenchJob> jobsFor(const SuiteSpec& spec, const std::string& mode, int gpus,
                              const std::vector<std::pair<int, int>>& pairs, bool all_pairs) {
  if (spec.jobs) return spec.jobs(mode, gpus, pairs, all_pairs);
  std::vector<std::string> common;
  const std::string filter = spec.filter ? spec.filter(mode, pairs, all_pairs) : "";
  if (!filter.empty()) common.push_back("--benchmark_filter=" + filter);
  const double budget = mode == "full" ? spec.full_deadline_s : spec.quick_deadline_s;
  std::vector<BenchJob> jobs;
  switch (spec.shape) {
    case JobShape::kWholeMachine: {
      BenchJob j;
      j.suite = spec.name;
      j.binary = spec.binary;
      j.args = common;
      // Deadline bases are for every pair of a 4-GPU machine; scale with the pairs covered. A suite that runs on one
      // GPU scales per GPU.
      if (spec.min_gpus == 1) {
        j.deadline_s = budget * std::max(1, gpus);
        j.label = spec.name + " (" + std::to_string(gpus) + (gpus == 1 ? " GPU)" : " GPUs)");
      } else {
        j.deadline_s = spec.name == "probe" ? budget : budget * std::max(1.0, static_cast<double>(pairs.size()) / 12.0);
        j.label = spec.name + " (" + std::to_string(pairs.size()) + " pairs)";
      }
      jobs.push_back(j);
      break;
    }
    case JobShape::kPerPair:
      for (const auto& [s, d] : pairs) {
        BenchJob j;
        j.suite = spec.name;
        j.binary = spec.binary;
        j.args = {"--ranks=2"};
        j.args.insert(j.args.end(), common.begin(), common.end());
        j.env = {"PEERLAB_ZCOPY_DEVICES=" + std::to_string(s) + "," + std::to_string(d)};
        j.src = s;
        j.dst = d;
        j.ranks = 2;
        j.deadline_s = budget;
        j.label = spec.name + " " + std::to_string(s) + "->" + std::to_string(d);
        jobs.push_back(j);
      }
      break;
    case JobShape::kCollective: {
      // Scaling: 2 ranks and every GPU (4 on a 4-GPU machine; 2, 4 and 8 on an 8-GPU one), ranks on GPUs 0..n-1.
      std::vector<int> counts;
      for (int n = 2; n < gpus; n *= 2)
        counts.push_back(n);
      counts.push_back(gpus);
      for (int n : counts) {
        BenchJob j;
        j.suite = spec.name;
        j.binary = spec.binary;
        j.args = {"--ranks=" + std::to_string(n)};
        j.args.insert(j.args.end(), common.begin(), common.end());
        j.ranks = n;
        j.deadline_s = n == gpus ? budget : budget / 2;
        j.label = spec.name + " x" + std::to_string(n);
        jobs.push_back(j);
      }
      break;
    }
  }
  // Until estimatePlan (estimate.h) sets it, the estimate is the deadline base.
  for (BenchJob& j : jobs)
    j.budget_s = j.deadline_s;
  return jobs;
}

}  // namespace peerlab::qualify
