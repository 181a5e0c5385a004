#pragma once
/// A stand-in Slurm for the tests and the fleet simulation: nodes, drains, reservations and batch jobs kept in memory,
/// on a clock of its own (FakeClock), behind the same Client interface the commands serve. Jobs run for the time and
/// with the result a runner gives, and leave what `peerlab slurm job` leaves (job.json, a bundle) in their directory.

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "harness/slurm/client.h"
#include "harness/slurm/sweep.h"

namespace peerlab::slurm::testing {

class FakeSlurm;

/// Simulated time: sleep() advances it and lets the stand-in's jobs run.
class FakeClock final : public Clock {
 public:
  double now() override { return t_; }
  void sleep(double seconds) override;
  bool interrupted() override { return interrupt_at_ >= 0 && t_ >= interrupt_at_; }
  /// interrupted() turns true from this time on.
  void interruptAt(double t) { interrupt_at_ = t; }
  void attach(FakeSlurm* slurm) { slurm_ = slurm; }

 private:
  double t_ = 0;
  double interrupt_at_ = -1;
  FakeSlurm* slurm_ = nullptr;
};

/// What a job does on its node.
struct FakeJob {
  double duration_s = 5;       ///< from start to end
  int rc = 0;                  ///< qualify's exit code, written to job.json
  bool timed_out = false;      ///< qualify ran past its budget
  bool leave_result = true;    ///< write job.json (false: the job dies without a result)
  std::string run_text;        ///< written as bundle/results.json when not empty
  std::string end_state = "";  ///< Slurm's final state ("" : COMPLETED, or FAILED for rc != 0); "NODE_FAIL" ...
};

class FakeSlurm final : public Client {
 public:
  explicit FakeSlurm(FakeClock& clock);

  void addNode(const std::string& name, const std::string& state = "IDLE", const std::string& reason = "");
  /// Sets a node's state and reason as an admin (or a failure) would.
  void setNode(const std::string& name, const std::string& state, const std::string& reason = "");
  NodeInfo node(const std::string& name) const;
  std::vector<std::string> partition;
  /// Decides what each job does (default: passes after 5 s).
  std::function<FakeJob(const JobSpec& spec)> runner;
  /// Every call fails while the clock is before this time (slurmctld stopped).
  void unavailableUntil(double t) { down_until_ = t; }
  /// A resumed node shows NOT_RESPONDING for this many seconds (slurmd registering again).
  double not_responding_after_resume_s = 0;
  /// A user's job waits on these nodes: busy (ALLOCATED) until the given time.
  void occupy(const std::string& node, double until);

  /// The most nodes in reservations named peerlab_* at once, and the nodes there now.
  int maxReserved() const { return max_reserved_; }
  std::set<std::string> reservedNodes() const;
  const std::map<std::string, Reservation>& reservationMap() const { return reservations_; }
  /// Jobs by id: spec and state.
  struct Job {
    std::string id;
    JobSpec spec;
    std::string state = "PENDING";
    double start = -1, end = -1;
    FakeJob plan;
    /// The node was out of service (drained) or outside a reservation when the job ran: must never happen.
    bool ran_on_reserved_node = false;
  };
  const std::map<std::string, Job>& jobs() const { return jobs_; }
  /// User jobs that started on a node with no reservation while peerlab's verdict for it was pending.
  std::vector<std::string> calls_log;

  /// Lets time pass to `t`: jobs start and end.
  void advance(double t);

  // Client
  StatusOr<std::vector<NodeInfo>> nodes(const std::vector<std::string>& names) override;
  StatusOr<std::vector<std::string>> partitionNodes(const std::string& partition) override;
  Status drain(const std::string& node, const std::string& reason) override;
  Status resume(const std::string& node) override;
  StatusOr<std::vector<Reservation>> reservations() override;
  Status createReservation(const std::string& name, const std::vector<std::string>& nodes,
                           const std::string& users) override;
  Status deleteReservation(const std::string& name) override;
  StatusOr<std::string> submit(const JobSpec& job) override;
  StatusOr<std::vector<JobInfo>> jobsNamed(const std::string& name) override;
  Status cancel(const std::string& id) override;
  std::int64_t calls() const override { return calls_; }

 private:
  struct Node {
    NodeInfo info;
    double busy_until = -1;  // a user's job
    double not_responding_until = -1;
  };
  Status call(const std::string& what);
  void refresh(Node& n);
  void finishJob(Job& j, double t);

  FakeClock& clock_;
  std::map<std::string, Node> nodes_;
  std::map<std::string, Reservation> reservations_;
  std::map<std::string, Job> jobs_;
  std::int64_t calls_ = 0;
  int next_job_ = 100;
  double down_until_ = -1;
  int max_reserved_ = 0;
};

}  // namespace peerlab::slurm::testing
