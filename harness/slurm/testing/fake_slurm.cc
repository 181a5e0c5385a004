#include "harness/slurm/testing/fake_slurm.h"

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "reference/core/files.h"

namespace peerlab::slurm::testing {

void FakeClock::sleep(double seconds) {
  const double until = t_ + seconds;
  // Steps of at most a second, so jobs start and end at their times.
  while (t_ < until && !interrupted()) {
    t_ = std::min(until, t_ + 1.0);
    if (slurm_) slurm_->advance(t_);
  }
}

FakeSlurm::FakeSlurm(FakeClock& clock) : clock_(clock) {
  clock_.attach(this);
  runner = [](const JobSpec&) { return FakeJob{}; };
}

void FakeSlurm::addNode(const std::string& name, const std::string& state, const std::string& reason) {
  Node n;
  n.info.name = name;
  n.info.hostname = name;
  n.info.state = state;
  n.info.reason = reason;
  nodes_[name] = n;
  partition.push_back(name);
}

void FakeSlurm::setNode(const std::string& name, const std::string& state, const std::string& reason) {
  nodes_.at(name).info.state = state;
  nodes_.at(name).info.reason = reason;
}

NodeInfo FakeSlurm::node(const std::string& name) const {
  return nodes_.at(name).info;
}

void FakeSlurm::occupy(const std::string& node, double until) {
  nodes_.at(node).busy_until = until;
  refresh(nodes_.at(node));
}

std::set<std::string> FakeSlurm::reservedNodes() const {
  std::set<std::string> out;
  for (const auto& [name, r] : reservations_)
    if (name.rfind("peerlab_", 0) == 0) out.insert(r.nodes.begin(), r.nodes.end());
  return out;
}

Status FakeSlurm::call(const std::string& what) {
  ++calls_;
  calls_log.push_back(what);
  if (clock_.now() < down_until_) return PEERLAB_UNAVAILABLE(what + ": Unable to contact slurm controller");
  return Status::ok();
}

// The base state from what runs on the node; DRAIN and DOWN kept.
void FakeSlurm::refresh(Node& n) {
  const double t = clock_.now();
  bool busy = n.busy_until > t;
  for (const auto& [id, j] : jobs_)
    busy = busy || (j.state == "RUNNING" && j.spec.node == n.info.name);
  std::string base = n.info.base();
  if (base != "DOWN" && base != "FAIL") base = busy ? "ALLOCATED" : "IDLE";
  std::string state = base;
  if (n.info.drained()) state += "+DRAIN";
  if (n.not_responding_until > t) state += "+NOT_RESPONDING";
  n.info.state = state;
  n.info.alloc_cpus = busy ? 1 : 0;
}

void FakeSlurm::finishJob(Job& j, double t) {
  j.end = t;
  j.state = !j.plan.end_state.empty() ? j.plan.end_state : (j.plan.rc == 0 ? "COMPLETED" : "FAILED");
  const std::string dir = std::filesystem::path(j.spec.output).parent_path().string();
  if (j.plan.leave_result) {
    // What `peerlab slurm job` leaves: its result beside the bundle.
    std::string sweep, node;
    for (size_t i = 0; i + 1 < j.spec.argv.size(); ++i) {
      if (j.spec.argv[i] == "--sweep") sweep = j.spec.argv[i + 1];
      if (j.spec.argv[i] == "--node") node = j.spec.argv[i + 1];
    }
    if (!j.plan.run_text.empty()) writeTextFile(dir + "/bundle/results.json", j.plan.run_text).ignore();
    const nlohmann::json job = {{"sweep", sweep},
                                {"node", node},
                                {"started", true},
                                {"rc", j.plan.rc},
                                {"signal", 0},
                                {"timed_out", j.plan.timed_out},
                                {"wall_s", j.plan.duration_s}};
    writeTextFile(dir + "/job.json", job.dump()).ignore();
  }
}

void FakeSlurm::advance(double t) {
  for (auto& [id, j] : jobs_) {
    if (j.state == "RUNNING" && j.start + j.plan.duration_s <= t) finishJob(j, j.start + j.plan.duration_s);
  }
  for (auto& [name, n] : nodes_)
    refresh(n);
  for (auto& [id, j] : jobs_) {
    if (j.state != "PENDING") continue;
    Node& n = nodes_.at(j.spec.node);
    refresh(n);
    if (n.info.drained() || n.info.down() || n.info.busy() || n.not_responding_until > t) continue;
    // A node in a maintenance reservation takes only that reservation's jobs.
    bool allowed = true;
    for (const auto& [rname, r] : reservations_) {
      const bool holds = std::find(r.nodes.begin(), r.nodes.end(), n.info.name) != r.nodes.end();
      if (holds && rname != j.spec.reservation) allowed = false;
      if (!holds && rname == j.spec.reservation) allowed = false;
    }
    if (!j.spec.reservation.empty() && !reservations_.count(j.spec.reservation)) allowed = false;
    if (!allowed) continue;
    j.state = "RUNNING";
    j.start = t;
    j.plan = runner(j.spec);
    refresh(n);
  }
  // Users' jobs while a node is out: none here; the sweep's own jobs need the node's reservation (checked above).
}

StatusOr<std::vector<NodeInfo>> FakeSlurm::nodes(const std::vector<std::string>& names) {
  PEERLAB_RETURN_IF_ERROR(call("scontrol show node"));
  std::vector<NodeInfo> out;
  if (names.empty()) {
    for (auto& [name, n] : nodes_) {
      refresh(n);
      out.push_back(n.info);
    }
    return out;
  }
  for (const std::string& name : names) {
    auto it = nodes_.find(name);
    if (it == nodes_.end()) return PEERLAB_UNAVAILABLE("scontrol show node: Node " + name + " not found");
    refresh(it->second);
    out.push_back(it->second.info);
  }
  return out;
}

StatusOr<std::vector<std::string>> FakeSlurm::partitionNodes(const std::string& p) {
  PEERLAB_RETURN_IF_ERROR(call("scontrol show partition"));
  if (p != "gpu") return PEERLAB_INVALID_ARGUMENT("no partition " + p);
  return partition;
}

Status FakeSlurm::drain(const std::string& node, const std::string& reason) {
  PEERLAB_RETURN_IF_ERROR(call("scontrol update state=drain"));
  Node& n = nodes_.at(node);
  if (!n.info.drained()) n.info.state += "+DRAIN";
  n.info.reason = cleanReason(reason);
  refresh(n);
  return Status::ok();
}

Status FakeSlurm::resume(const std::string& node) {
  PEERLAB_RETURN_IF_ERROR(call("scontrol update state=resume"));
  Node& n = nodes_.at(node);
  n.info.state = "IDLE";
  n.info.reason.clear();
  if (not_responding_after_resume_s > 0) n.not_responding_until = clock_.now() + not_responding_after_resume_s;
  refresh(n);
  return Status::ok();
}

StatusOr<std::vector<Reservation>> FakeSlurm::reservations() {
  PEERLAB_RETURN_IF_ERROR(call("scontrol show reservation"));
  std::vector<Reservation> out;
  for (const auto& [name, r] : reservations_)
    out.push_back(r);
  return out;
}

Status FakeSlurm::createReservation(const std::string& name, const std::vector<std::string>& nodes,
                                    const std::string& users) {
  PEERLAB_RETURN_IF_ERROR(call("scontrol create reservation"));
  if (reservations_.count(name))
    return PEERLAB_UNAVAILABLE("Error creating the reservation: Duplicate reservation name");
  for (const auto& [other, r] : reservations_) {
    for (const std::string& n : nodes) {
      if (std::find(r.nodes.begin(), r.nodes.end(), n) != r.nodes.end())
        return PEERLAB_UNAVAILABLE("Error creating the reservation: Requested nodes are busy");
    }
  }
  for (const std::string& n : nodes)
    if (!nodes_.count(n)) return PEERLAB_UNAVAILABLE("Error creating the reservation: Invalid node name specified");
  reservations_[name] = {name, nodes, "MAINT,IGNORE_JOBS", users};
  max_reserved_ = std::max(max_reserved_, static_cast<int>(reservedNodes().size()));
  return Status::ok();
}

Status FakeSlurm::deleteReservation(const std::string& name) {
  PEERLAB_RETURN_IF_ERROR(call("scontrol delete reservation"));
  reservations_.erase(name);
  return Status::ok();
}

StatusOr<std::string> FakeSlurm::submit(const JobSpec& spec) {
  PEERLAB_RETURN_IF_ERROR(call("sbatch"));
  if (!nodes_.count(spec.node)) return PEERLAB_UNAVAILABLE("sbatch: error: invalid node name " + spec.node);
  if (!spec.reservation.empty() && !reservations_.count(spec.reservation))
    return PEERLAB_UNAVAILABLE("sbatch: error: Requested reservation is invalid");
  Job j;
  j.id = std::to_string(next_job_++);
  j.spec = spec;
  jobs_[j.id] = j;
  return j.id;
}

StatusOr<std::vector<JobInfo>> FakeSlurm::jobsNamed(const std::string& name) {
  PEERLAB_RETURN_IF_ERROR(call("squeue"));
  std::vector<JobInfo> out;
  for (const auto& [id, j] : jobs_) {
    if (j.spec.name != name) continue;
    out.push_back({id, j.spec.name, j.state, j.state == "PENDING" ? "" : j.spec.node,
                   j.state == "PENDING" ? "Resources" : "None"});
  }
  return out;
}

Status FakeSlurm::cancel(const std::string& id) {
  PEERLAB_RETURN_IF_ERROR(call("scancel"));
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Status::ok();
  if (it->second.state == "PENDING" || it->second.state == "RUNNING") it->second.state = "CANCELLED";
  for (auto& [name, n] : nodes_)
    refresh(n);
  return Status::ok();
}

}  // namespace peerlab::slurm::testing
