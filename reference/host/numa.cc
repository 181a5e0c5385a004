#include "reference/host/numa.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>

namespace peerlab::host {
namespace {

// From <linux/mempolicy.h> (not every libc ships <numaif.h>).
constexpr int kMpolBind = 2;
constexpr unsigned kMpolMfStrict = 1u << 0;
constexpr unsigned kMpolMfMove = 1u << 1;
constexpr unsigned kMpolFNode = 1u << 0;
constexpr unsigned kMpolFAddr = 1u << 1;
// Node indexes above this are bad input, not a machine.
constexpr int kMaxNode = 4095;

StatusOr<int> parseNode(std::string_view item, std::string_view whole) {
  int v = -1;
  auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
  if (ec != std::errc() || end != item.data() + item.size() || v < 0 || v > kMaxNode) {
    return PEERLAB_INVALID_ARGUMENT("node list \"" + std::string(whole) + "\": bad node \"" + std::string(item) + "\"");
  }
  return v;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  return s;
}

std::optional<std::string> readSmallFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Status mempolicyStatus(const char* call, int err) {
  const std::string why = std::string(call) + ": " + std::strerror(err);
  if (err == ENOSYS || err == EPERM) return PEERLAB_UNAVAILABLE(why + " (no NUMA policy support here)");
  return PEERLAB_INVALID_ARGUMENT(why);
}

}  // namespace

StatusOr<std::vector<int>> parseNodeList(std::string_view text) {
  const std::string_view whole = trim(text);
  std::vector<int> out;
  std::string_view rest = whole;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    const size_t dash = item.find('-');
    if (dash == std::string_view::npos) {
      PEERLAB_ASSIGN_OR_RETURN(int v, parseNode(item, whole));
      out.push_back(v);
      continue;
    }
    PEERLAB_ASSIGN_OR_RETURN(int lo, parseNode(item.substr(0, dash), whole));
    PEERLAB_ASSIGN_OR_RETURN(int hi, parseNode(item.substr(dash + 1), whole));
    if (hi < lo) {
      return PEERLAB_INVALID_ARGUMENT("node list \"" + std::string(whole) + "\": range \"" + std::string(item) +
                                      "\" runs backwards");
    }
    for (int v = lo; v <= hi; ++v)
      out.push_back(v);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

StatusOr<std::vector<int>> onlineNodes(const std::string& sysfs) {
  const std::string path = sysfs + "/devices/system/node/online";
  auto text = readSmallFile(path);
  if (!text) return std::vector<int>{};
  auto nodes = parseNodeList(*text);
  if (!nodes.isOk()) return nodes.status().withContext(path);
  return nodes;
}

StatusOr<std::optional<int>> pciNumaNode(std::string_view bus_id, const std::string& sysfs) {
  if (bus_id.empty() || bus_id.find('/') != std::string_view::npos) {
    return PEERLAB_INVALID_ARGUMENT("PCI bus id \"" + std::string(bus_id) + "\" is not a bus id");
  }
  const std::string path = sysfs + "/bus/pci/devices/" + std::string(bus_id) + "/numa_node";
  auto text = readSmallFile(path);
  if (!text) return std::optional<int>{};
  const std::string_view v = trim(*text);
  int node = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), node);
  if (ec != std::errc() || end != v.data() + v.size() || node < -1 || node > kMaxNode) {
    return PEERLAB_INVALID_ARGUMENT(path + ": \"" + std::string(v) + "\" is not a NUMA node");
  }
  if (node < 0) return std::optional<int>{};
  return std::optional<int>{node};
}

NodeChoice chooseNodes(std::optional<int> gpu_node, const std::vector<int>& online) {
  NodeChoice c;
  const bool known = gpu_node && std::find(online.begin(), online.end(), *gpu_node) != online.end();
  if (known) {
    c.local = gpu_node;
  } else if (online.size() == 1) {
    c.local = online.front();
  }
  if (!c.local) return c;
  for (int n : online) {
    if (n != *c.local) {
      c.remote = n;
      break;
    }
  }
  return c;
}

std::vector<unsigned long> nodeMask(int node) {
  constexpr int kBits = static_cast<int>(sizeof(unsigned long) * CHAR_BIT);
  if (node < 0) return {};
  std::vector<unsigned long> mask(static_cast<size_t>(node / kBits + 1), 0ul);
  mask[static_cast<size_t>(node / kBits)] = 1ul << (node % kBits);
  return mask;
}

Status bindToNode(void* p, size_t bytes, int node) {
  if (node < 0 || node > kMaxNode) return PEERLAB_INVALID_ARGUMENT("mbind: node " + std::to_string(node));
  const long page = sysconf(_SC_PAGESIZE);
  if (page <= 0 || reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(page) != 0) {
    return PEERLAB_INVALID_ARGUMENT("mbind: address is not page-aligned");
  }
  std::vector<unsigned long> mask = nodeMask(node);
  // maxnode counts bits; the kernel reads maxnode - 1 of them, so pass one more than the mask holds.
  const unsigned long maxnode = mask.size() * sizeof(unsigned long) * CHAR_BIT + 1;
  if (syscall(SYS_mbind, p, bytes, kMpolBind, mask.data(), maxnode, kMpolMfStrict | kMpolMfMove) != 0) {
    return mempolicyStatus("mbind", errno);
  }
  return Status::ok();
}

StatusOr<int> nodeOfPage(const void* p) {
  int node = -1;
  if (syscall(SYS_get_mempolicy, &node, nullptr, 0ul, const_cast<void*>(p), kMpolFNode | kMpolFAddr) != 0) {
    return mempolicyStatus("get_mempolicy", errno);
  }
  return node;
}

}  // namespace peerlab::host
