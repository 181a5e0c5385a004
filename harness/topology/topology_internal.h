#pragma once
/// Internals shared by the topology loaders (hwloc, NCCL XML, live CUDA/NVML): a draft that each source fills and
/// one finishing step that orders the GPUs and builds the pairs. Not part of the public API.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "harness/topology/hwloc_topology.h"
#include "harness/topology/topology.h"
#include "harness/topology/xml_document.h"

namespace peerlab::topology::detail {

/// Range limits of values a topology source gives; a value outside is bad input, named in a one-line error.
constexpr int kMaxNvlinks = 64;              ///< NVLinks of one GPU or one pair (Hopper and Blackwell have 18)
constexpr uint64_t kMaxNvlinkMBps = 100000;  ///< one NVLink per direction (NVLink 5: 50000)
constexpr int kMaxNumaId = 65535;            ///< Linux builds allow at most 1024 NUMA nodes (NODES_SHIFT 10)

/// NVLink between two GPUs as seen from the first one.
struct LinkView {
  std::optional<int> links;    ///< nullopt: unknown
  std::optional<double> gbps;  ///< per direction
  bool nvswitch = false;
};

/// A topology under construction; GPUs in discovery order, matrices indexed by that order.
struct Draft {
  std::string source;
  SourceFormat format = SourceFormat::kLive;
  std::vector<Gpu> gpus;
  std::vector<PciPath> pci;     ///< n*n, pci[i*n+j]
  std::vector<LinkView> links;  ///< n*n, links[i*n+j] seen from i
  std::string nvlink_source;
  int nvswitches = 0;
  std::vector<OtherGpu> other_gpus;
  MachineSummary machine;
  std::vector<std::string> warnings;
  std::shared_ptr<HwlocTopology> hwloc;

  size_t n() const { return gpus.size(); }
  PciPath& pciAt(size_t i, size_t j) { return pci[i * n() + j]; }
  LinkView& linkAt(size_t i, size_t j) { return links[i * n() + j]; }
  /// Appends a GPU with unknown relations to every other GPU.
  void addGpu(Gpu gpu);
  /// Keeps the GPUs `keep` says, with their relations; the draft is then closed to GPUs not listed yet (NVML's).
  void keepGpus(const std::function<bool(const Gpu&)>& keep);
  bool closed = false;
};

struct Data {
  std::string source;
  SourceFormat format = SourceFormat::kLive;
  std::vector<Gpu> gpus;
  std::vector<GpuPair> pairs;
  std::vector<std::optional<int>> links_from;  ///< n*n by final index
  std::vector<std::optional<P2pInfo>> p2p;     ///< n*n by final index
  std::string nvlink_source;
  int nvswitches = 0;
  std::vector<OtherGpu> other_gpus;
  MachineSummary machine;
  std::vector<std::string> warnings;
  std::shared_ptr<HwlocTopology> hwloc;
};

/// Orders the GPUs (CUDA ordinal first when known, then PCI bus order), numbers them and builds the pairs.
std::shared_ptr<Data> finish(Draft draft);

/// Checks what hwloc's XML importer takes for granted in a parsed hwloc XML document (root <topology>): a root
/// Machine <object>, a type first on every object, each set with its complete_ counterpart, numbers hwloc would
/// silently truncate (os_index beyond 32 bits, a NUMA node beyond kMaxNumaId, a pci_link_speed that is not a rate).
/// "line N: <reason>" otherwise.
Status checkHwlocXml(const XmlElement& root);
/// Reads the GPUs, NVSwitches, PCI paths, NUMA locality and hwloc's NVLinkBandwidth matrix from an hwloc topology.
Status fromHwloc(std::shared_ptr<HwlocTopology> topo, Draft& draft);
/// Reads an NCCL topology XML document (root <system>).
Status fromNcclXml(const XmlElement& root, Draft& draft);

/// Live: matches CUDA devices to the draft's GPUs by bus id (adding GPUs hwloc did not see), sets ordinals, UUIDs
/// and names. Returns false with a warning in the draft when CUDA is not usable here.
bool addCudaDevices(Draft& draft);
/// Live: CUDA P2P attributes for every ordered pair of GPUs CUDA sees.
void addCudaP2p(Data& data);
/// Live: each GPU's maximum PCIe link from sysfs (max_link_speed and max_link_width of the GPU and of its upstream
/// port, the smaller of each); GPUs sysfs does not describe keep what hwloc read.
void addSysfsPcieLinks(Draft& draft, const std::string& devices_dir = "/sys/bus/pci/devices");
/// Live: NVLink link counts, remote types (GPU or NVSwitch) and link rates from NVML (loaded at run time; without
/// it, a warning when the draft has GPUs whose NVLinks nothing else gave).
void addNvmlLinks(Draft& draft);

/// Formats a CPU set given as 32-bit words (least significant first) in list form: "0-31,64-95".
std::string cpuListFromWords(const std::vector<unsigned long>& words);
/// Sort key for a bus id: the normalized form sorts in PCI order.
std::string busOrderKey(const std::string& bus_id);
/// "NVIDIA 10de:2335"
std::string modelFromIds(int vendor, int device);
/// Whether an hwloc export of this version ("2.10.0", root info hwlocVersion) could record NVLink (the NVLinkBandwidth
/// matrix, hwloc >= 2.5); false for older, unparseable or missing versions.
bool hwlocRecordsNvlink(const std::string& version);
/// Per-link NVLink line rate per direction, GB/s, from an NVML NVLink version enum (1-based, NVML_NVLINK_VERSION_*).
std::optional<double> nvlinkRateForVersion(unsigned version_enum);
/// Snaps a rate reported in whole MB/s to the exact line rate it rounds (26562 MB/s -> 26.5625 GB/s).
double snapNvlinkRate(double gbps);

}  // namespace peerlab::topology::detail
