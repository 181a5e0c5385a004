#include "reference/probe/probe.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "reference/core/pattern.h"
#include "reference/probe/text.h"

namespace peerlab::probe {

namespace {

struct MethodText {
  Method method;
  std::string_view name;
  std::string_view summary;
  std::string_view claim;
};

constexpr MethodText kMethodText[] = {
    {Method::kCeWrite, "ce_write", "copy issued on the source's stream pushes into the destination's memory",
     "cudaDeviceCanAccessPeer(src, dst)"},
    {Method::kCeRead, "ce_read", "copy issued on the destination's stream pulls from the source's memory",
     "cudaDeviceCanAccessPeer(dst, src)"},
    {Method::kSmStore, "sm_store", "kernel on the source stores through the peer pointer into the destination",
     "cudaDeviceCanAccessPeer(src, dst)"},
    {Method::kSmLoad, "sm_load", "kernel on the destination loads through the peer pointer from the source",
     "cudaDeviceCanAccessPeer(dst, src)"},
    {Method::kAtomic, "atomic", "kernel on the source does atomicAdd_system into the destination's memory",
     "cudaDeviceCanAccessPeer(src, dst) and cudaDevP2PAttrNativeAtomicSupported(src, dst)"},
    {Method::kIpcLegacy, "ipc_legacy",
     "cudaIpcMemHandle of the destination's owner, opened and written in another process on the source",
     "cudaDeviceCanAccessPeer(src, dst) and cudaDevAttrIpcEventSupport(dst)"},
    {Method::kIpcVmm, "ipc_vmm",
     "cuMemCreate POSIX fd sent over SCM_RIGHTS, imported, mapped and written in another process on the source",
     "cudaDeviceCanAccessPeer(src, dst), VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED(src, dst) and "
     "HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED(dst)"},
    {Method::kNixlWrite, "nixl_write",
     "NIXL WRITE (UCX backend) from the source GPU's process into VRAM the destination GPU's process registered",
     "NIXL: its UCX backend lists VRAM, registers the GPU buffers and prepares their descriptor list"},
    {Method::kNixlRead, "nixl_read",
     "NIXL READ (UCX backend) by the destination GPU's process from VRAM the source GPU's process registered",
     "NIXL: its UCX backend lists VRAM, registers the GPU buffers and prepares their descriptor list"},
    {Method::kUcxPut, "ucx_put",
     "UCP put of registered CUDA memory from the source GPU's process into the destination GPU's process, flushed",
     "UCX: the context's memory types include CUDA and the GPU buffers register as CUDA memory"},
    {Method::kUcxGet, "ucx_get",
     "UCP get by the destination GPU's process from CUDA memory the source GPU's process registered",
     "UCX: the context's memory types include CUDA and the GPU buffers register as CUDA memory"},
};

const MethodText& textFor(Method m) {
  for (const auto& t : kMethodText) {
    if (t.method == m) return t;
  }
  return kMethodText[0];
}

constexpr std::string_view kVerdictNames[] = {"ok", "corrupt", "hang", "error", "unsupported"};
constexpr std::string_view kPathNames[] = {"none", "p2p", "staged", "ipc"};

using text::split;
using text::trim;

std::optional<int> parseIndex(std::string_view s) {
  s = trim(s);
  int v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || s.empty() || v < 0) return std::nullopt;
  return v;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::string_view methodName(Method m) {
  return textFor(m).name;
}
std::string_view methodSummary(Method m) {
  return textFor(m).summary;
}
std::string_view claimBasis(Method m) {
  return textFor(m).claim;
}

std::optional<Method> parseMethod(std::string_view name) {
  name = trim(name);
  for (const auto& t : kMethodText) {
    if (t.name == name) return t.method;
  }
  return std::nullopt;
}

bool isIpcMethod(Method m) {
  return m == Method::kIpcLegacy || m == Method::kIpcVmm;
}
bool readsSourceBuffer(Method m) {
  return m == Method::kCeWrite || m == Method::kCeRead || m == Method::kSmStore || m == Method::kSmLoad ||
         isTransportMethod(m);
}
bool pushedBySource(Method m) {
  return m != Method::kCeRead && m != Method::kSmLoad && m != Method::kNixlRead && m != Method::kUcxGet;
}
bool isTransportMethod(Method m) {
  return m == Method::kNixlWrite || m == Method::kNixlRead || m == Method::kUcxPut || m == Method::kUcxGet;
}
std::string_view transportLibraryOf(Method m) {
  if (m == Method::kNixlWrite || m == Method::kNixlRead) return "nixl";
  if (m == Method::kUcxPut || m == Method::kUcxGet) return "ucx";
  return "";
}
bool usesCopyEngine(Method m) {
  return m == Method::kCeWrite || m == Method::kCeRead;
}

std::string_view verdictName(Verdict v) {
  const auto i = static_cast<size_t>(v);
  return i < std::size(kVerdictNames) ? kVerdictNames[i] : "error";
}

std::optional<Verdict> parseVerdict(std::string_view name) {
  for (size_t i = 0; i < std::size(kVerdictNames); ++i) {
    if (kVerdictNames[i] == name) return static_cast<Verdict>(i);
  }
  return std::nullopt;
}

std::string_view pathName(Path p) {
  const auto i = static_cast<size_t>(p);
  return i < std::size(kPathNames) ? kPathNames[i] : "none";
}

std::optional<Path> parsePath(std::string_view name) {
  for (size_t i = 0; i < std::size(kPathNames); ++i) {
    if (kPathNames[i] == name) return static_cast<Path>(i);
  }
  return std::nullopt;
}

uint64_t cellSeed(uint64_t run, Method method, uint64_t bytes, int src, int dst) {
  // The salt separates methods and sizes; patternSeed mixes in the run and the ordered pair.
  const uint64_t salt = mix64((static_cast<uint64_t>(method) + 1) * 0x9E3779B97F4A7C15ull ^ mix64(bytes));
  return patternSeed(run, src, dst, salt);
}

bool Inventory::canAccess(int src, int dst) const {
  const int n = count();
  if (src < 0 || dst < 0 || src >= n || dst >= n || src == dst) return false;
  const size_t i = static_cast<size_t>(src) * n + dst;
  return i < can_access.size() && can_access[i] != 0;
}

bool Inventory::nativeAtomic(int src, int dst) const {
  const int n = count();
  if (src < 0 || dst < 0 || src >= n || dst >= n || src == dst) return false;
  const size_t i = static_cast<size_t>(src) * n + dst;
  return i < native_atomic.size() && native_atomic[i] != 0;
}

std::string Inventory::driverString() const {
  if (!driver_release.empty()) return driver_release;
  if (driver_api > 0) return std::to_string(driver_api / 1000) + "." + std::to_string((driver_api % 1000) / 10);
  return "unknown";
}

bool claimFor(const Inventory& inv, Method m, int src, int dst) {
  const int n = inv.count();
  if (src < 0 || dst < 0 || src >= n || dst >= n || src == dst) return false;
  const GpuInfo& s = inv.gpus[src];
  const GpuInfo& d = inv.gpus[dst];
  switch (m) {
    case Method::kCeWrite:
    case Method::kSmStore:
      return inv.canAccess(src, dst);
    case Method::kCeRead:
    case Method::kSmLoad:
      return inv.canAccess(dst, src);
    case Method::kAtomic:
      return inv.canAccess(src, dst) && inv.nativeAtomic(src, dst);
    case Method::kIpcLegacy:
      return inv.canAccess(src, dst) && d.ipc_event;
    case Method::kIpcVmm:
      return inv.canAccess(src, dst) && s.vmm && d.vmm && d.posix_fd;
    case Method::kNixlWrite:
    case Method::kNixlRead:
    case Method::kUcxPut:
    case Method::kUcxGet:
      return false;
  }
  return false;
}

Judgement judge(bool claimed, const CellResult& r) {
  Judgement j;
  const bool ok = r.verdict == Verdict::kOk;
  j.lie = claimed && !ok;
  j.staged = ok && r.path == Path::kStaged;
  j.unclaimed_ok = !claimed && ok && (r.path == Path::kPeer || r.path == Path::kIpc);
  return j;
}

bool claimsHold(const std::vector<CellReport>& cells) {
  for (const auto& c : cells) {
    if (judge(c.claimed, c.result).lie) return false;
  }
  return true;
}

std::vector<Pair> allPairs(int n) {
  std::vector<Pair> out;
  for (int offset = 1; offset < n; ++offset) {
    for (int s = 0; s < n; ++s)
      out.emplace_back(s, (s + offset) % n);
  }
  return out;
}

std::vector<std::vector<Pair>> planRounds(const std::vector<Pair>& pairs) {
  std::vector<std::vector<Pair>> rounds;
  std::vector<Pair> left = pairs;
  while (!left.empty()) {
    std::vector<Pair> round, rest;
    std::vector<int> srcs, dsts;
    for (const Pair& p : left) {
      const bool srcBusy = std::find(srcs.begin(), srcs.end(), p.first) != srcs.end();
      const bool dstBusy = std::find(dsts.begin(), dsts.end(), p.second) != dsts.end();
      if (srcBusy || dstBusy) {
        rest.push_back(p);
        continue;
      }
      round.push_back(p);
      srcs.push_back(p.first);
      dsts.push_back(p.second);
    }
    rounds.push_back(std::move(round));
    left = std::move(rest);
  }
  return rounds;
}

StatusOr<uint64_t> parseBytes(std::string_view text) {
  const std::string_view t = trim(text);
  size_t digits = 0;
  while (digits < t.size() && std::isdigit(static_cast<unsigned char>(t[digits])))
    ++digits;
  if (digits == 0)
    return PEERLAB_INVALID_ARGUMENT("\"" + std::string(text) + "\" is not a byte count (e.g. 4096, 4K, 64M)");
  uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(t.data(), t.data() + digits, value);
  if (ec != std::errc()) return PEERLAB_INVALID_ARGUMENT("\"" + std::string(text) + "\" is too large");
  const std::string unit = lower(trim(t.substr(digits)));
  uint64_t scale = 1;
  if (unit.empty() || unit == "b") {
    scale = 1;
  } else if (unit == "k" || unit == "kb" || unit == "kib") {
    scale = 1ull << 10;
  } else if (unit == "m" || unit == "mb" || unit == "mib") {
    scale = 1ull << 20;
  } else if (unit == "g" || unit == "gb" || unit == "gib") {
    scale = 1ull << 30;
  } else {
    return PEERLAB_INVALID_ARGUMENT("\"" + std::string(text) + "\": unknown unit \"" + unit + "\" (use K, M or G)");
  }
  if (value > UINT64_MAX / scale) return PEERLAB_INVALID_ARGUMENT("\"" + std::string(text) + "\" is too large");
  if (value == 0) return PEERLAB_INVALID_ARGUMENT("\"" + std::string(text) + "\": size must be positive");
  return value * scale;
}

Status validateCellBytes(uint64_t bytes) {
  if (bytes < 16 || bytes % 16 != 0) {
    return PEERLAB_INVALID_ARGUMENT(std::to_string(bytes) + " bytes: a cell size must be a positive multiple of 16");
  }
  if (bytes > (4ull << 30)) return PEERLAB_INVALID_ARGUMENT(std::to_string(bytes) + " bytes: at most 4 GiB per cell");
  return Status::ok();
}

StatusOr<std::vector<Pair>> parsePairs(std::string_view text) {
  std::vector<Pair> out;
  for (std::string_view item : split(text, ',')) {
    const std::string_view t = trim(item);
    // SRC-DST, SRC:DST or SRC->DST.
    size_t sep = t.find("->");
    size_t width = 2;
    if (sep == std::string_view::npos) {
      sep = t.find_first_of("-:");
      width = 1;
    }
    if (sep == std::string_view::npos) {
      return PEERLAB_INVALID_ARGUMENT("pair \"" + std::string(t) + "\" is not SRC-DST (e.g. 0-1, 0:1 or 0->1)");
    }
    auto s = parseIndex(t.substr(0, sep));
    auto d = parseIndex(t.substr(sep + width));
    if (!s || !d) return PEERLAB_INVALID_ARGUMENT("pair \"" + std::string(t) + "\" is not SRC-DST (e.g. 0-1)");
    if (*s == *d) return PEERLAB_INVALID_ARGUMENT("pair \"" + std::string(t) + "\": source and destination are equal");
    if (std::find(out.begin(), out.end(), Pair{*s, *d}) == out.end()) out.emplace_back(*s, *d);
  }
  if (out.empty()) return PEERLAB_INVALID_ARGUMENT("no pairs in \"" + std::string(text) + "\"");
  return out;
}

StatusOr<std::vector<Method>> parseMethods(std::string_view text) {
  std::vector<Method> out;
  auto add = [&out](Method m) {
    if (std::find(out.begin(), out.end(), m) == out.end()) out.push_back(m);
  };
  for (std::string_view item : split(text, ',')) {
    const std::string_view name = trim(item);
    if (name == "all") {
      for (Method m : kAllMethods)
        add(m);
      continue;
    }
    if (name == "transport") {
      for (Method m : kTransportMethods)
        add(m);
      continue;
    }
    auto m = parseMethod(name);
    if (!m) {
      std::string known;
      for (const auto& t : kMethodText)
        known += (known.empty() ? "" : ", ") + std::string(t.name);
      return PEERLAB_INVALID_ARGUMENT("unknown method \"" + std::string(name) + "\" (known: " + known +
                                      ", all, transport)");
    }
    add(*m);
  }
  // Keep the canonical order, whatever order the user typed.
  std::sort(out.begin(), out.end());
  return out;
}

StatusOr<std::chrono::milliseconds> parseDuration(std::string_view text) {
  const std::string t = lower(trim(text));
  std::string number = t;
  double scale_ms = 1000.0;
  if (t.size() > 2 && t.substr(t.size() - 2) == "ms") {
    number = t.substr(0, t.size() - 2);
    scale_ms = 1.0;
  } else if (t.size() > 1 && t.back() == 's') {
    number = t.substr(0, t.size() - 1);
  }
  number = std::string(trim(number));
  double v = 0;
  auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), v);
  if (number.empty() || ec != std::errc() || ptr != number.data() + number.size() || !std::isfinite(v)) {
    return PEERLAB_INVALID_ARGUMENT("\"" + std::string(text) + "\" is not a duration (e.g. 5, 5s, 500ms)");
  }
  const double ms = v * scale_ms;
  if (ms < 1.0) return PEERLAB_INVALID_ARGUMENT("\"" + std::string(text) + "\": duration must be at least 1 ms");
  if (ms > 3600.0 * 1000) return PEERLAB_INVALID_ARGUMENT("\"" + std::string(text) + "\": at most one hour");
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(ms)));
}

std::string formatBytes(uint64_t bytes) {
  char buf[64];
  if (bytes >= (1ull << 30) && bytes % (1ull << 30) == 0) {
    std::snprintf(buf, sizeof(buf), "%llu GiB", static_cast<unsigned long long>(bytes >> 30));
  } else if (bytes >= (1ull << 20) && bytes % (1ull << 20) == 0) {
    std::snprintf(buf, sizeof(buf), "%llu MiB", static_cast<unsigned long long>(bytes >> 20));
  } else if (bytes >= (1ull << 10) && bytes % (1ull << 10) == 0) {
    std::snprintf(buf, sizeof(buf), "%llu KiB", static_cast<unsigned long long>(bytes >> 10));
  } else {
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  }
  return buf;
}

}  // namespace peerlab::probe
