#pragma once
/// Slurm host lists ("gpu[01-04,07],login1", "rack[1-2]-n[1-3]"), expanded into node names without asking Slurm.

#include <string>
#include <vector>

#include "reference/core/status.h"

namespace peerlab::slurm {

/// Most names one host list may expand to.
inline constexpr size_t kMaxHostlistNames = 100000;

/// The names of a host list in its order, each name once (a repeated name keeps its first place). Brackets hold
/// numbers and ranges ("01-16", zero padding kept from the lower bound); several bracket groups in one name give
/// every combination. `invalid_argument` names the list and what is wrong: an unclosed bracket, a range that runs
/// backwards, a character Slurm does not allow in a node name, an empty name, more than kMaxHostlistNames names.
StatusOr<std::vector<std::string>> expandHostlist(const std::string& list);

/// Whether `name` is one node name as Slurm writes them: 1 to 255 bytes of letters, digits, '-', '_' and '.'.
bool isNodeName(const std::string& name);

/// The names joined with commas (what scontrol takes for nodes=).
std::string joinNames(const std::vector<std::string>& names);

}  // namespace peerlab::slurm
