#pragma once
/// NUMA placement of host memory for host <-> device copies, without libnuma: the GPU's node from sysfs, the online
/// nodes, and page placement with mbind(2) / get_mempolicy(2) called through syscall(2).

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "reference/core/status.h"

namespace peerlab::host {

/// Parses a kernel node list ("0", "0-3", "0,2-3"); `invalid_argument` names the bad item.
StatusOr<std::vector<int>> parseNodeList(std::string_view text);

/// Nodes listed in <sysfs>/devices/system/node/online; {} when the file is absent (a kernel without NUMA).
StatusOr<std::vector<int>> onlineNodes(const std::string& sysfs = "/sys");

/// The NUMA node of the PCI device `bus_id` ("0000:17:00.0") from <sysfs>/bus/pci/devices/<bus_id>/numa_node;
/// nullopt when the kernel does not know it (-1, a one-node machine or a missing file).
StatusOr<std::optional<int>> pciNumaNode(std::string_view bus_id, const std::string& sysfs = "/sys");

/// The host nodes one GPU's copies use: its own node and, for the misplaced-memory case, another online node.
struct NodeChoice {
  std::optional<int> local;   ///< the GPU's node (nullopt: unknown, memory goes where the kernel puts it)
  std::optional<int> remote;  ///< the first online node other than `local` (nullopt: none)
};
/// The local node is the GPU's when it is online, else the first online node when there is exactly one.
NodeChoice chooseNodes(std::optional<int> gpu_node, const std::vector<int>& online);

/// The mbind(2) node mask selecting `node`: ceil((node + 1) / bits-per-long) words.
std::vector<unsigned long> nodeMask(int node);

/// Binds [p, p + bytes) (page-aligned, not yet touched) to `node` (MPOL_BIND). `unavailable` when the kernel has no
/// NUMA policy support (ENOSYS) or forbids it (EPERM, a container's seccomp profile); `invalid_argument` for a node
/// the kernel rejects.
Status bindToNode(void* p, size_t bytes, int node);

/// The node holding the page at `p` (get_mempolicy MPOL_F_NODE | MPOL_F_ADDR); `unavailable` as for bindToNode.
StatusOr<int> nodeOfPage(const void* p);

}  // namespace peerlab::host
