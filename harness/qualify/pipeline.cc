#include "harness/qualify/pipeline.h"

#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <sstream>

#include "harness/topology/topology.h"
#include "reference/core/devices.h"
#include "reference/core/files.h"
#include "reference/core/process.h"
#include "reference/host/host_copy.h"

namespace peerlab::qualify {

StatusOr<PlanTopology> loadPlanTopology(const std::string& fixture) {
  PEERLAB_ASSIGN_OR_RETURN(topology::Topology topo, topology::load(fixture));
  if (topo.gpus().size() > static_cast<size_t>(kMaxPlanGpus)) {
    return PEERLAB_INVALID_ARGUMENT((fixture.empty() ? std::string("this machine") : fixture) + ": " +
                                    std::to_string(topo.gpus().size()) + " GPUs; peerlab plans for at most " +
                                    std::to_string(kMaxPlanGpus) + " GPUs in one machine");
  }
  PlanTopology plan = fromTopology(topo);
  if (fixture.empty()) {
    // The DRAM peak, for the device-local copy expectation; a GPU CUDA cannot see keeps none.
    for (const PlanGpu& g : plan.gpus) {
      auto peak = host::memoryPeakGbps(g.index);
      if (peak.isOk()) plan.memory_peak_gbps[g.index] = *peak;
    }
  }
  return plan;
}

Status cudaGpusVisible() {
  auto n = deviceCount();
  if (!n.isOk()) return n.status();
  if (*n < 1) return PEERLAB_UNAVAILABLE("CUDA sees no GPU");
  return Status::ok();
}

std::string defaultOutputName(const std::string& prefix) {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || !host[0]) std::snprintf(host, sizeof(host), "host");
  std::string h = host;
  for (char& c : h) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) c = '_';
  }
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char date[32];
  std::strftime(date, sizeof(date), "%Y%m%d-%H%M%S", &tm);
  return prefix + "-" + h + "-" + date;
}

std::vector<std::string> splitList(const std::vector<std::string>& items) {
  std::vector<std::string> out;
  for (const std::string& item : items) {
    std::stringstream ss(item);
    std::string part;
    while (std::getline(ss, part, ',')) {
      if (!part.empty()) out.push_back(part);
    }
  }
  return out;
}

std::vector<report::Result> runProbeChild(const std::vector<std::string>& extra_args, const std::string& json_path,
                                          const std::string& log_path, double timeout_s, const std::string& peerlab) {
  std::vector<report::Result> rows;
  process::ProcessOptions po;
  po.argv = {peerlab.empty() ? selfExecutable() : peerlab, "probe", "--json", json_path, "--no-cache"};
  po.argv.insert(po.argv.end(), extra_args.begin(), extra_args.end());
  po.stdout_path = log_path;
  po.stderr_path = log_path;
  po.timeout = std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000));
  std::error_code ec;
  std::filesystem::remove(json_path, ec);
  std::string error;
  auto proc = process::runProcess(po);
  if (!proc.isOk()) {
    error = proc.status().message();
  } else {
    if (std::filesystem::exists(json_path)) {
      auto run = report::readRun(json_path);
      if (run.isOk()) {
        rows = run->results;
      } else {
        error = run.status().message();
      }
    }
    if (error.empty() && !(proc->exit_code == 0 || proc->exit_code == 1)) {
      std::string last = tailOfFile(log_path, 1);
      if (!last.empty() && last.back() == '\n') last.pop_back();
      error = "peerlab probe: " + process::describeExit(*proc, po.timeout) + (last.empty() ? "" : " (" + last + ")");
    }
    if (error.empty() && rows.empty()) error = "peerlab probe wrote no cells (see " + log_path + ")";
  }
  if (!error.empty()) {
    report::Result r;
    r.suite = "probe";
    r.name = "process";
    r.impl = "peerlab.probe";
    r.status = "failed: " + error;
    rows.push_back(r);
  }
  return rows;
}

std::string shellQuote(const std::string& arg) {
  if (!arg.empty() &&
      arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.,/:=+@%") ==
          std::string::npos) {
    return arg;
  }
  std::string q = "'";
  for (char c : arg) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q += c;
    }
  }
  return q + "'";
}

}  // namespace peerlab::qualify
