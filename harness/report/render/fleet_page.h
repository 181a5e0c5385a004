#pragma once
/// A kind's fleet page on the history site: a node x check matrix (one row per node, one column per check category
/// of its latest run), nodes out of service first with their scheduler's reason, then nodes whose latest run failed,
/// with each failure's recommended action and how many series sit below the fleet.

#include <string>

#include "harness/report/render/site_model.h"

namespace peerlab::report {

/// The page of one kind of the site model (its nodes). Every string from the model is escaped and cut at 300
/// characters; a field that is not known shows as "-".
std::string renderFleetPage(const KindModel& kind, const std::string& generated);

/// The runs of a kind counted nowhere (its injected_runs: stand-ins or injected faults) as a marked table, "" when
/// there are none; the fleet and the trend page both show it.
std::string injectedRunsSection(const KindModel& kind);

/// "fleet-" + the same stem and hash as kindPageName.
std::string fleetPageName(const std::string& kind);

}  // namespace peerlab::report
