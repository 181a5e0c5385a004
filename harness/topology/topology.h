#pragma once
/// Machine topology as peerlab plans from it: the NVIDIA GPUs, how every pair is connected (the PCIe path named as
/// `nvidia-smi topo -m` names it, NVLink links and bandwidth, CUDA's P2P attributes on a live machine) and where each
/// GPU sits (NUMA nodes, local CPUs). Loaded from the live machine (hwloc + CUDA + NVML) or from a topology XML file
/// in hwloc format (`<topology>`, lstopo / hwloc_topology_export_xml) or NCCL format (`<system>`, NCCL_TOPO_FILE).

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "harness/topology/pcie_link.h"
#include "reference/core/status.h"

namespace peerlab::topology {

/// PCIe path between two GPUs, weakest link first in the order nvidia-smi lists them.
enum class PciPath {
  kSelf,     ///< "X": the same GPU
  kPix,      ///< "PIX": at most a single PCIe switch (bridge) between them
  kPxb,      ///< "PXB": several PCIe switches, no host bridge
  kPhb,      ///< "PHB": through a PCIe host bridge (typically the CPU)
  kNode,     ///< "NODE": between host bridges within one NUMA node
  kSys,      ///< "SYS": across the SMP interconnect between NUMA nodes (QPI/UPI/Infinity Fabric)
  kUnknown,  ///< "N/A": the topology does not place one of the GPUs on the PCIe tree
};

/// "X", "PIX", "PXB", "PHB", "NODE", "SYS" or "N/A".
std::string_view pciPathName(PciPath path);
/// Inverse of pciPathName; nullopt for anything else.
std::optional<PciPath> parsePciPath(std::string_view name);

/// Where a topology came from.
enum class SourceFormat { kLive, kHwlocXml, kNcclXml };
/// "live", "hwloc" or "nccl".
std::string_view sourceFormatName(SourceFormat format);

/// CUDA's view of peer access from one GPU to another (cudaDeviceGetP2PAttribute, cudaDeviceCanAccessPeer).
struct P2pInfo {
  bool access_supported = false;  ///< cudaDevP2PAttrAccessSupported
  int performance_rank = 0;       ///< cudaDevP2PAttrPerformanceRank (lower is faster)
  bool native_atomics = false;    ///< cudaDevP2PAttrNativeAtomicSupported
  bool can_access_peer = false;   ///< cudaDeviceCanAccessPeer
};

struct Gpu {
  int index = -1;            ///< rank in PCI bus order; on a live machine the CUDA ordinal
  std::string bus_id;        ///< "0000:03:00.0"
  std::string model;         ///< "NVIDIA H200", "Tesla V100-SXM3-32GB-H", or "NVIDIA 10de:2335" when only ids are known
  std::string model_source;  ///< cuda, nvml, opencl, osdev, osdev-unplaced, pci-name, pci-id
  int vendor_id = 0x10de;    ///< PCI ids; 0 when the source does not give them
  int device_id = 0;
  std::vector<int> numa;            ///< OS indexes of the NUMA nodes local to the GPU (empty when unknown)
  std::string cpuset;               ///< CPUs local to the GPU in list form ("0-31,64-95"); empty when unknown
  int cuda_ordinal = -1;            ///< live: the CUDA ordinal in this process, -1 when CUDA does not see the GPU
  std::string uuid;                 ///< live: "GPU-..." when CUDA or NVML report it
  std::optional<int> nvlink_links;  ///< active NVLinks to other GPUs (direct or through NVSwitches), when known;
                                    ///< links to a CPU (POWER NVLink, an NVSwitch port towards a CPU) do not count
  int nvswitch_links = 0;           ///< of those, the links that end at an NVSwitch
  std::optional<double> nvlink_link_gbps;  ///< rate of one link per direction, GB/s, when known
  /// The GPU's own PCIe link (to its upstream port): hwloc's pci_link_speed in a file, link_speed x link_width in
  /// NCCL XML, the maximum link (GPU and upstream port) from sysfs on a live machine; nullopt when unknown.
  std::optional<PcieLink> pcie;
};

/// Two GPUs by index, a < b.
struct GpuPair {
  int a = -1;
  int b = -1;
  PciPath pci = PciPath::kUnknown;
  std::optional<int> nvlink_links;     ///< NVLinks usable between a and b (direct plus through NVSwitches); 0 when the
                                       ///< source knows NVLink and there is none; nullopt when the source cannot tell
  std::optional<double> nvlink_gbps;   ///< NVLink bandwidth per direction, GB/s; nullopt when no NVLink or unknown
  bool nvswitch = false;               ///< the NVLink path goes through NVSwitches
  std::optional<P2pInfo> p2p;          ///< live: a -> b
  std::optional<P2pInfo> p2p_reverse;  ///< live: b -> a
};

/// A GPU or display/accelerator device from another vendor (reported when there is no NVIDIA GPU).
struct OtherGpu {
  std::string bus_id;
  std::string model;
};

/// What hwloc sees of the machine (all zero for an NCCL XML file).
struct MachineSummary {
  int packages = 0;
  int numa_nodes = 0;
  int cores = 0;
  int pus = 0;
  int pci_devices = 0;
  int pci_bridges = 0;
  std::string description;  ///< "DMIProductName" or similar when the topology names the machine
};

/// Options for the live machine.
struct LiveOptions {
  bool cuda = true;  ///< query CUDA (ordinals, UUIDs, names, P2P attributes) when a driver is present
  bool nvml = true;  ///< query NVML for NVLink (when libnvidia-ml loads)
};

class Topology;
namespace detail {
struct Data;
Topology makeTopology(std::shared_ptr<const Data> data);
}  // namespace detail

/// An immutable topology; copies share the same data.
class Topology {
 public:
  /// "live" or the file path it was loaded from.
  const std::string& source() const;
  SourceFormat format() const;
  /// NVIDIA GPUs by index.
  const std::vector<Gpu>& gpus() const;
  /// Every unordered pair once, a < b, ordered by (a, b).
  const std::vector<GpuPair>& pairs() const;
  /// The pair of GPUs a and b in either order; nullptr when a == b or an index is out of range.
  const GpuPair* pair(int a, int b) const;
  /// NVSwitches: NVSwitch PCI devices in the topology; on a live machine whose switches are not visible as PCI
  /// devices (a VM), the distinct switches NVML reports at the far end of the GPUs' links.
  int nvswitchCount() const;
  /// Where NVLink information came from: "nvml", "hwloc" (NVLinkBandwidth distances or NVML OS devices without
  /// links), "nccl" (<nvlink> elements), or "" when the source cannot tell.
  const std::string& nvlinkSource() const;
  /// NVLinks from `from` to `to` as counted on `from`'s side; nullopt when unknown or out of range.
  std::optional<int> nvlinkLinksSeenFrom(int from, int to) const;
  /// CUDA P2P attributes from `from` to `to` (live only).
  std::optional<P2pInfo> p2p(int from, int to) const;
  /// Distinct NUMA nodes local to the GPUs, ascending.
  std::vector<int> gpuNumaNodes() const;
  /// Non-NVIDIA GPUs and display devices in the topology.
  const std::vector<OtherGpu>& otherGpus() const;
  const MachineSummary& machine() const;
  /// Things the loader could not do (NVML unavailable, CUDA without driver, a GPU hwloc does not place...).
  const std::vector<std::string>& warnings() const;

  /// "<source>: no NVIDIA GPU in this topology (found 8 other GPUs: 8x AMD ...)"; meaningful when gpus() is empty.
  std::string noGpuMessage() const;

  /// {"source", "format", "pair_order": "a<b", "gpus": [...], "pairs": [...], "nvswitches", ...}
  nlohmann::json toJson() const;
  /// The `nvidia-smi topo -m` style matrix with CPU and NUMA affinity, a GPU list and a legend.
  std::string formatMatrix() const;
  /// Writes the hwloc topology as XML (hwloc_topology_export_xml); `unavailable` for an NCCL XML source.
  [[nodiscard]] Status exportXml(const std::string& path) const;

 private:
  friend Topology detail::makeTopology(std::shared_ptr<const detail::Data> data);
  explicit Topology(std::shared_ptr<const detail::Data> data) : data_(std::move(data)) {}
  std::shared_ptr<const detail::Data> data_;
};

/// The live machine: hwloc (PCI tree, NUMA), CUDA (ordinals, names, UUIDs, P2P attributes) and NVML (NVLink). A
/// machine without GPU or without CUDA driver still loads (with no GPUs); only a failing hwloc is an error.
StatusOr<Topology> loadLive(const LiveOptions& options = {});
/// A topology XML file, hwloc or NCCL format (told apart by the root element). A missing, unreadable or malformed
/// file (libxml2's reason and line), one hwloc cannot import (even one that crashes it), or a value outside its range
/// (an NVLink count, a NUMA id, a PCIe rate or width: fixtures/README.md lists them) gives `invalid_argument` with one
/// line that names the file, the attribute and the reason; control characters it quotes are escaped (\n, \t, \xNN).
StatusOr<Topology> loadFile(const std::string& path);
/// loadLive() when `fixture` is empty, else loadFile(fixture).
StatusOr<Topology> load(const std::string& fixture = "");

}  // namespace peerlab::topology
