#pragma once
/// System state a driver bug report needs, read from procfs/sysfs without extra tools: IOMMU groups, PCIe ACS
/// (decoded from config space), the kernel command line. Whatever cannot be read is recorded as "unreadable: why".

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace peerlab::qualify {

/// The PCIe Access Control Services capability (extended capability 0x000D) of one function.
struct AcsState {
  uint16_t capability = 0;  ///< ACS Capability Register
  uint16_t control = 0;     ///< ACS Control Register
};

/// Finds ACS in a function's config space (as read from /sys/bus/pci/devices/X/config). nullopt when the extended
/// space is absent (fewer than 4096 bytes readable: not root, or conventional PCI) or has no ACS capability.
std::optional<AcsState> findAcs(const std::vector<uint8_t>& config);
/// "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-" for the bits of a register.
std::string formatAcsBits(uint16_t bits);

/// One line per PCI function that has ACS, and for every GPU the chain of bridges above it with their ACS control;
/// "unreadable: ..." lines where config space could not be read. `root` is the sysfs root ("/sys" normally).
std::string describeAcs(const std::vector<std::string>& gpu_bus_ids, const std::string& root = "/sys");

/// IOMMU groups: "group N: <bus id> <class> <vendor>:<device>" per device, the GPUs' groups called out.
std::string describeIommu(const std::vector<std::string>& gpu_bus_ids, const std::string& root = "/sys");

/// The kernel command line (/proc/cmdline), or "unreadable: why".
std::string kernelCommandLine(const std::string& proc_root = "/proc");

/// The lines of a kernel log (dmesg, journalctl -k) a driver engineer asks for first: NVIDIA's (NVRM:) and every
/// XID, the last `max_lines` of them, control characters escaped, each at most 1000 bytes.
std::string nvidiaKernelLines(const std::string& log, size_t max_lines = 500);

/// The chain of PCI bus ids from the root port down to `bus_id` (sysfs device path), empty when unknown.
std::vector<std::string> pciPath(const std::string& bus_id, const std::string& root = "/sys");

}  // namespace peerlab::qualify
