#include "harness/faults/fault_spec.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <set>
#include <string_view>
#include <type_traits>
#include <utility>

namespace peerlab::faults {

namespace {

ParamInfo seedParam() {
  return {"seed", "N", "seed for every offset, bit and byte the fault draws (default 0)"};
}
ParamInfo countParam() {
  return {"count", "N", "inject at most N times per process (default: no limit)"};
}
ParamInfo afterParam() {
  return {"after", "N", "let the first N eligible calls through untouched (default 0)"};
}
ParamInfo pairParam() {
  return {"pair", "a-b", "only calls from device a to device b (ordinals in the process)"};
}
ParamInfo ipcPairParam() {
  return {"pair", "a-b", "only handles opened on device a for memory of device b (ordinals in the process)"};
}
ParamInfo rankParam() {
  return {"rank", "r", "only in the process whose PEERLAB_RANK is r"};
}
ParamInfo sideParam() {
  return {"side", "write|read|any",
          "write: copies issued on the source device's stream (ce_write); read: on the destination's (ce_read)"};
}

std::vector<FaultInfo> buildCatalog() {
  std::vector<FaultInfo> all;
  all.push_back(
      {FaultKind::kNone, "none", "no fault: the interposer is loaded and forwards every call", "all hooks", {}});
  all.push_back(
      {FaultKind::kLie,
       "lie",
       "capability lie: peer access, P2P attributes and enables report supported while every peer copy is "
       "corrupted (seeded bytes XORed after the copy lands)",
       "runtime: cudaDeviceCanAccessPeer, cudaDeviceGetP2PAttribute, cudaDeviceEnablePeerAccess, cudaMemcpy*; "
       "driver: cuDeviceCanAccessPeer, cuDeviceGetP2PAttribute, cuCtxEnablePeerAccess, cuMemcpy*",
       {seedParam(),
        {"flips", "N", "bytes corrupted per copy, 1-64 (default 4)"},
        countParam(),
        afterParam(),
        pairParam(),
        sideParam(),
        rankParam()}});
  all.push_back(
      {FaultKind::kDropWrites,
       "drop_writes",
       "dropped peer writes: IPC and imported VMM mappings become local scratch and copies into peer memory "
       "land in scratch, so the writer reads back its own data and the owner never sees it",
       "runtime: cudaIpcOpenMemHandle/cudaIpcCloseMemHandle, cudaMemcpy*; driver: cuIpcOpenMemHandle, "
       "cuIpcCloseMemHandle, cuMemImportFromShareableHandle + cuMemMap, cuMemcpy*",
       {{"target", "all|ipc|copy", "what is redirected (default all)"},
        seedParam(),
        countParam(),
        afterParam(),
        {"pair", "a-b", "only copies from device a to device b, and IPC mappings on device a of device b's memory"},
        {"side", "write|read|any", "copies affected (default write: the copy pushes into peer memory)"},
        rankParam()}});
  all.push_back({FaultKind::kBitflip,
                 "bitflip",
                 "one bit flipped at a seeded offset of the destination after a peer copy",
                 "runtime: cudaMemcpy, cudaMemcpyAsync, cudaMemcpyPeer, cudaMemcpyPeerAsync; driver: cuMemcpy, "
                 "cuMemcpyAsync, cuMemcpyPeer, cuMemcpyPeerAsync, cuMemcpyDtoD, cuMemcpyDtoDAsync",
                 {seedParam(),
                  {"offset", "N", "byte offset in the copy (default: seeded; taken modulo the copy size)"},
                  {"bit", "0-7", "bit to flip (default: seeded)"},
                  countParam(),
                  afterParam(),
                  pairParam(),
                  sideParam(),
                  rankParam()}});
  all.push_back({FaultKind::kEnableError,
                 "enable_error",
                 "peer enable fails with the given error code",
                 "runtime: cudaDeviceEnablePeerAccess; driver: cuCtxEnablePeerAccess",
                 {{"code", "205|217|704|711",
                   "205 map failed, 217 peer access unsupported, 704 already enabled (access is enabled), 711 too many "
                   "peers (default 217)"},
                  {"direction", "first|second|both",
                   "first: a->b of pair=a-b (else lower to higher ordinal), second: b->a (else higher to lower)"},
                  seedParam(),
                  countParam(),
                  afterParam(),
                  pairParam(),
                  rankParam()}});
  all.push_back({FaultKind::kIpcOpenFail,
                 "ipc_open_fail",
                 "opening or importing an IPC handle fails",
                 "runtime: cudaIpcOpenMemHandle; driver: cuIpcOpenMemHandle, cuMemImportFromShareableHandle",
                 {{"code", "N", "error code returned, 1-999 (default 400: invalid handle)"},
                  {"ipc", "legacy|vmm|both", "which handles (default both)"},
                  seedParam(),
                  countParam(),
                  afterParam(),
                  ipcPairParam(),
                  rankParam()}});
  all.push_back(
      {FaultKind::kCopyHang,
       "copy_hang",
       "a peer copy that never completes: the copy's stream first waits on a word nobody writes",
       "runtime: cudaMemcpy*; driver: cuMemcpy* (the wait is cuStreamWaitValue32 on mapped host memory); "
       "teardown calls (cudaFree, cuMemFree, stream and context destruction) let it go",
       {{"release", "teardown|exit", "when the stall is let go (default teardown; exit: only at process exit)"},
        {"release_ms", "N", "let it go N ms after it was enqueued instead"},
        seedParam(),
        countParam(),
        afterParam(),
        pairParam(),
        sideParam(),
        rankParam()}});
  all.push_back(
      {FaultKind::kCopySlow,
       "copy_slow",
       "a slow link: each peer copy is followed on its stream by a copy of percent% of its bytes again "
       "(same source and destination, so the data stays right), as a degraded link would take longer",
       "runtime: cudaMemcpy*; driver: cuMemcpy*",
       {{"percent", "N", "bytes copied again, in percent of each copy, 1-1000 (default 12: about 10% slower)"},
        seedParam(),
        countParam(),
        afterParam(),
        pairParam(),
        sideParam(),
        rankParam()}});
  all.push_back(
      {FaultKind::kSignalWithhold,
       "signal_withhold",
       "a semaphore signal is never written",
       "driver: cuStreamWriteValue32, cuStreamWriteValue64, cuStreamBatchMemOp (write operations are dropped)",
       {{"value", "N", "only writes of this value (default any)"},
        seedParam(),
        countParam(),
        afterParam(),
        rankParam()}});
  all.push_back({FaultKind::kSignalLate,
                 "signal_late",
                 "a semaphore signal is written late",
                 "driver: cuStreamWriteValue32, cuStreamWriteValue64, cuStreamBatchMemOp (a host function that sleeps "
                 "is enqueued before the write)",
                 {{"ms", "N", "delay in milliseconds, 1-3600000 (required)"},
                  {"value", "N", "only writes of this value (default any)"},
                  seedParam(),
                  countParam(),
                  afterParam(),
                  rankParam()}});
  all.push_back({FaultKind::kKillAfterExport,
                 "kill_after_export",
                 "the process SIGKILLs itself right after exporting an IPC handle, only in the named rank",
                 "runtime: cudaIpcGetMemHandle; driver: cuIpcGetMemHandle, cuMemExportToShareableHandle",
                 {{"rank", "r", "the rank that dies (required; PEERLAB_RANK)"},
                  {"delay_ms", "N", "die N ms after the export instead of at once (default 0)"},
                  {"ipc", "legacy|vmm|both", "which exports (default both)"},
                  seedParam(),
                  afterParam()}});
  all.push_back({FaultKind::kCacheCorrupt,
                 "cache_corrupt",
                 "the probe cache file is damaged before the command starts (its checksum no longer matches)",
                 "file: applied by peerlab inject before the command starts",
                 {{"path", "FILE", "the cache file (default: the probe's default cache path)"},
                  {"mode", "flip|truncate|empty|garbage", "how it is damaged (default flip)"},
                  seedParam()}});
  all.push_back({FaultKind::kCacheStale,
                 "cache_stale",
                 "the probe cache file is made stale before the command starts: valid, but recorded on another driver "
                 "and other GPUs",
                 "file: applied by peerlab inject before the command starts",
                 {{"path", "FILE", "the cache file (default: the probe's default cache path)"}, seedParam()}});
  return all;
}

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b])))
    ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1])))
    --e;
  return std::string(s.substr(b, e - b));
}

// Text from the spec as it may appear in a message: control characters escaped, long text cut, so that every error
// stays one line.
std::string shown(std::string_view text) {
  std::string out;
  for (char c : text.substr(0, 64)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  if (text.size() > 64) out += "...";
  return out;
}

Status bad(const std::string& fault, const std::string& why) {
  return PEERLAB_INVALID_ARGUMENT("fault '" + shown(fault) + "': " + why);
}

// Decimal or 0x-prefixed hexadecimal, no sign, within [lo, hi].
bool parseUnsigned(const std::string& text, uint64_t lo, uint64_t hi, uint64_t* out) {
  if (text.empty()) return false;
  int base = 10;
  std::string_view digits = text;
  if (digits.size() > 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) {
    base = 16;
    digits.remove_prefix(2);
  }
  uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v, base);
  if (ec != std::errc() || ptr != digits.data() + digits.size()) return false;
  if (v < lo || v > hi) return false;
  *out = v;
  return true;
}

std::string knownKeys(const FaultInfo& info) {
  std::string keys;
  for (const auto& p : info.params) {
    if (!keys.empty()) keys += ", ";
    keys += p.key;
  }
  return keys.empty() ? "none" : keys;
}

}  // namespace

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

const std::vector<FaultInfo>& catalog() {
  static const std::vector<FaultInfo> all = buildCatalog();
  return all;
}

const FaultInfo* findFault(std::string_view name) {
  for (const auto& f : catalog()) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

std::string FaultSpec::canonical() const {
  std::string out = name;
  char sep = ':';
  for (const auto& [k, v] : given) {
    out += sep;
    out += k + "=" + v;
    sep = ',';
  }
  return out;
}

bool FaultSpec::needsInterposer() const {
  return kind != FaultKind::kNone && !isCacheFault();
}

StatusOr<FaultSpec> parseFaultSpec(std::string_view text) {
  const std::string whole = trim(text);
  if (whole.empty()) return PEERLAB_INVALID_ARGUMENT("empty fault spec (peerlab inject --list shows the faults)");
  const size_t colon = whole.find(':');
  const std::string name = trim(std::string_view(whole).substr(0, colon));
  const FaultInfo* info = findFault(name);
  if (info == nullptr) {
    return PEERLAB_INVALID_ARGUMENT("unknown fault '" + shown(name) + "' (peerlab inject --list shows the faults)");
  }
  FaultSpec spec;
  spec.kind = info->kind;
  spec.name = info->name;
  if (colon != std::string::npos) {
    const std::string rest = whole.substr(colon + 1);
    if (trim(rest).empty()) return bad(name, "empty parameter list after ':'");
    std::set<std::string> seen;
    size_t start = 0;
    while (start <= rest.size()) {
      size_t comma = rest.find(',', start);
      if (comma == std::string::npos) comma = rest.size();
      const std::string item = trim(std::string_view(rest).substr(start, comma - start));
      start = comma + 1;
      if (item.empty()) return bad(name, "empty parameter (stray ',')");
      const size_t eq = item.find('=');
      if (eq == std::string::npos) return bad(name, "parameter '" + shown(item) + "' is not key=value");
      const std::string key = trim(std::string_view(item).substr(0, eq));
      const std::string value = trim(std::string_view(item).substr(eq + 1));
      if (key.empty()) return bad(name, "parameter '" + shown(item) + "' has no key");
      const bool known =
          std::any_of(info->params.begin(), info->params.end(), [&](const ParamInfo& p) { return p.key == key; });
      if (!known) return bad(name, "unknown parameter '" + shown(key) + "' (parameters: " + knownKeys(*info) + ")");
      if (!seen.insert(key).second) return bad(name, "parameter '" + key + "' given twice");
      if (value.empty()) return bad(name, "parameter '" + key + "' has no value");
      spec.given.emplace_back(key, value);
    }
  }

  auto number = [&](const std::string& key, const std::string& value, uint64_t lo, uint64_t hi,
                    uint64_t* out) -> Status {
    if (!parseUnsigned(value, lo, hi, out)) {
      return bad(name, key + "=" + shown(value) + " is not an integer in [" + std::to_string(lo) + ", " +
                           std::to_string(hi) + "]");
    }
    return Status::ok();
  };
  // key=value naming one of `options`; otherwise the error lists them ("a, b or c").
  auto choose = [&]<class E>(const std::string& key, const std::string& value,
                             std::initializer_list<std::pair<std::string_view, std::type_identity_t<E>>> options,
                             E* out) -> Status {
    std::string names;
    size_t i = 0;
    for (const auto& [n, e] : options) {
      if (value == n) {
        *out = e;
        return Status::ok();
      }
      names += (i == 0 ? "" : i + 1 == options.size() ? " or " : ", ") + std::string(n);
      ++i;
    }
    return bad(name, key + "=" + shown(value) + " is not " + names);
  };
  constexpr uint64_t kMaxCount = uint64_t{1} << 62;
  constexpr uint64_t kMaxMs = 3'600'000;
  bool have_code = false, have_ms = false, have_rank = false;
  for (const auto& [key, value] : spec.given) {
    uint64_t v = 0;
    if (key == "seed") {
      PEERLAB_RETURN_IF_ERROR(number(key, value, 0, std::numeric_limits<uint64_t>::max(), &v));
      spec.seed = v;
    } else if (key == "count") {
      PEERLAB_RETURN_IF_ERROR(number(key, value, 0, kMaxCount, &v));
      spec.count = static_cast<int64_t>(v);
    } else if (key == "after") {
      PEERLAB_RETURN_IF_ERROR(number(key, value, 0, kMaxCount, &v));
      spec.after = static_cast<int64_t>(v);
    } else if (key == "rank") {
      PEERLAB_RETURN_IF_ERROR(number(key, value, 0, 65535, &v));
      spec.rank = static_cast<int>(v);
      have_rank = true;
    } else if (key == "pair") {
      const size_t dash = value.find('-');
      uint64_t a = 0, b = 0;
      if (dash == std::string::npos || !parseUnsigned(value.substr(0, dash), 0, 1023, &a) ||
          !parseUnsigned(value.substr(dash + 1), 0, 1023, &b)) {
        return bad(name, "pair=" + shown(value) + " is not a-b with device ordinals a and b");
      }
      if (a == b) return bad(name, "pair=" + shown(value) + " names the same device twice");
      spec.pair_a = static_cast<int>(a);
      spec.pair_b = static_cast<int>(b);
    } else if (key == "side") {
      PEERLAB_RETURN_IF_ERROR(
          choose(key, value, {{"write", Side::kWrite}, {"read", Side::kRead}, {"any", Side::kAny}}, &spec.side));
      spec.side_given = true;
    } else if (key == "offset") {
      PEERLAB_RETURN_IF_ERROR(number(key, value, 0, std::numeric_limits<uint64_t>::max(), &v));
      spec.offset = v;
    } else if (key == "bit") {
      PEERLAB_RETURN_IF_ERROR(number(key, value, 0, 7, &v));
      spec.bit = static_cast<int>(v);
    } else if (key == "percent") {
      PEERLAB_RETURN_IF_ERROR(number(key, value, 1, 1000, &v));
      spec.percent = static_cast<int>(v);
    } else if (key == "flips") {
      PEERLAB_RETURN_IF_ERROR(number(key, value, 1, 64, &v));
      spec.flips = static_cast<int>(v);
    } else if (key == "code") {
      PEERLAB_RETURN_IF_ERROR(number(key, value, 1, 999, &v));
      if (spec.kind == FaultKind::kEnableError && v != 205 && v != 217 && v != 704 && v != 711) {
        return bad(name, "code=" + shown(value) + " is not one of 205, 217, 704, 711");
      }
      spec.code = static_cast<int>(v);
      have_code = true;
    } else if (key == "direction") {
      PEERLAB_RETURN_IF_ERROR(
          choose(key, value, {{"first", Direction::kFirst}, {"second", Direction::kSecond}, {"both", Direction::kBoth}},
                 &spec.direction));
    } else if (key == "ipc") {
      PEERLAB_RETURN_IF_ERROR(choose(
          key, value, {{"legacy", IpcKind::kLegacy}, {"vmm", IpcKind::kVmm}, {"both", IpcKind::kBoth}}, &spec.ipc));
    } else if (key == "release") {
      PEERLAB_RETURN_IF_ERROR(
          choose(key, value, {{"teardown", Release::kTeardown}, {"exit", Release::kExit}}, &spec.release));
    } else if (key == "release_ms" || key == "ms" || key == "delay_ms") {
      PEERLAB_RETURN_IF_ERROR(number(key, value, key == "delay_ms" ? 0 : 1, kMaxMs, &v));
      spec.ms = static_cast<int64_t>(v);
      have_ms = true;
    } else if (key == "value") {
      PEERLAB_RETURN_IF_ERROR(number(key, value, 0, 0xffffffffULL, &v));
      spec.value = static_cast<int64_t>(v);
    } else if (key == "target") {
      PEERLAB_RETURN_IF_ERROR(choose(
          key, value, {{"all", DropTarget::kAll}, {"ipc", DropTarget::kIpc}, {"copy", DropTarget::kCopy}}, &spec.drop));
    } else if (key == "mode") {
      PEERLAB_RETURN_IF_ERROR(choose(key, value,
                                     {{"flip", CacheDamage::kFlip},
                                      {"truncate", CacheDamage::kTruncate},
                                      {"empty", CacheDamage::kEmpty},
                                      {"garbage", CacheDamage::kGarbage}},
                                     &spec.damage));
    } else if (key == "path") {
      spec.path = value;
    }
  }

  // Defaults and required parameters per fault.
  switch (spec.kind) {
    case FaultKind::kEnableError:
      if (!have_code) spec.code = 217;
      break;
    case FaultKind::kIpcOpenFail:
      if (!have_code) spec.code = 400;
      break;
    case FaultKind::kDropWrites:
      if (!spec.side_given) spec.side = Side::kWrite;
      break;
    case FaultKind::kCopyHang:
      if (have_ms) spec.release = Release::kTimer;
      break;
    case FaultKind::kSignalLate:
      if (!have_ms) return bad(name, "needs ms=N (the delay in milliseconds)");
      break;
    case FaultKind::kKillAfterExport:
      if (!have_rank) return bad(name, "needs rank=r (the rank that dies)");
      break;
    default:
      break;
  }
  return spec;
}

std::string listText() {
  std::string out;
  for (const auto& f : catalog()) {
    out += f.name + "\n    " + f.summary + "\n    acts on: " + f.path + "\n";
    for (const auto& p : f.params) {
      std::string head = "    " + p.key + "=" + p.value;
      if (head.size() < 30) head.resize(30, ' ');
      out += head + "  " + p.help + "\n";
    }
  }
  out +=
      "\nspec: NAME[:key=value,...], e.g. bitflip:seed=7,offset=4096,pair=0-1,side=write  "
      "enable_error:code=217,direction=second\n";
  return out;
}

}  // namespace peerlab::faults
