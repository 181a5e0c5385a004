#pragma once
/// What to do about a failed check: one table of recommended actions (reset the GPU, reboot the node, reseat or
/// replace a part, update the driver, file a driver bug with a `peerlab repro` bundle, ...) and one table of what
/// each kind of failure calls for. docs/slurm.md prints both with their sources (NVIDIA's Xid catalog and GPU debug
/// guidelines, DCGM's diagnostics); every output of a failed check carries its action, and a Slurm drain reason its
/// short form.

#include <optional>
#include <string>
#include <vector>

#include "harness/report/checks.h"

namespace peerlab::report {

struct Action {
  std::string id;          ///< stable: "reset_gpu"; stored in results.json and the history
  std::string short_text;  ///< a few words for a Slurm drain reason: "reset GPU"
  std::string text;        ///< what an operator does, one or two sentences
  std::string sources;     ///< where the recommendation comes from (docs/slurm.md has the links)
};

/// Every action, the most drastic first: when several failed checks call for different actions, the first one in this
/// order is the node's action (replacing a part outranks a reboot, which outranks a GPU reset, ...).
const std::vector<Action>& actionTable();
/// The action with this id; nullopt for an id the table does not hold (a run file from elsewhere).
std::optional<Action> actionById(const std::string& id);

/// One kind of failure and the action it calls for: "health.nvlink_state" -> reseat_nvlink, "health.xid.79" ->
/// reboot_node, "probe.corrupt" -> file_driver_bug. Keys are "<category>.<what failed>".
struct FailureAction {
  std::string key;
  std::string action;  ///< an id of actionTable()
  std::string what;    ///< the failure in words, for the documented table
};
const std::vector<FailureAction>& failureActions();
/// The action id for a failure key; a key the table lacks falls back to its category's entry ("health.xid.4242" ->
/// "health.xid"), then to "rerun".
std::string actionFor(const std::string& key);
/// The most drastic of two action ids (actionTable() order); an empty id loses.
std::string moreDrastic(const std::string& a, const std::string& b);

/// "<short>: <text>" of a failed check's recommended action, "" when it has none; an id the table lacks is shown as
/// an unknown action with the id.
std::string actionLine(const Check& c);
/// The action that outranks the others among the failed checks, and the check it came from; nullopt when none failed.
const Check* checkToActOn(const std::vector<Check>& checks);
/// The text of a Slurm drain reason for the checks (without the "peerlab: " prefix the wrappers add): the check that
/// calls for the most drastic action, its GPU, and the action's short form, "nvlink_state GPU0: reset GPU, reseat
/// NVLink", with "(+N more failed)" when others failed too; at most 160 bytes of printable ASCII; "" when none failed.
std::string drainReason(const std::vector<Check>& checks);

}  // namespace peerlab::report
