#include "harness/report/machine.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>

#include "harness/report/format.h"
#include "harness/report/report.h"
#include "reference/core/text.h"

namespace peerlab::report {

namespace {

std::vector<std::string> tokens(std::string_view model) {
  std::vector<std::string> out;
  std::string cur;
  auto flush = [&] {
    // Vendor and brand words say nothing about the chip.
    if (!cur.empty() && cur != "nvidia" && cur != "tesla" && cur != "geforce" && cur != "quadro") out.push_back(cur);
    cur.clear();
  };
  for (char c : model) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == ':') {
      cur += static_cast<char>(std::tolower(u));
    } else {
      flush();
    }
  }
  flush();
  return out;
}

bool startsWith(const std::string& s, std::string_view prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// Models known only by PCI device id (NCCL topology files, hwloc without a model name).
const std::map<int, std::pair<const char*, int>>& deviceIds() {
  static const std::map<int, std::pair<const char*, int>> ids = {
      {0x2335, {"h200", 90}}, {0x2330, {"h100", 90}},  {0x2331, {"h100", 90}},    {0x2339, {"h100", 90}},
      {0x233a, {"h100", 90}}, {0x2324, {"h800", 90}},  {0x2342, {"gh200", 90}},   {0x20b0, {"a100", 80}},
      {0x20b1, {"a100", 80}}, {0x20b2, {"a100", 80}},  {0x20b3, {"a100", 80}},    {0x20b5, {"a100", 80}},
      {0x20f1, {"a100", 80}}, {0x20f3, {"a800", 80}},  {0x2204, {"rtx3090", 86}}, {0x2230, {"rtxa6000", 86}},
      {0x1db1, {"v100", 70}}, {0x1db4, {"v100", 70}},  {0x1db5, {"v100", 70}},    {0x1db6, {"v100", 70}},
      {0x1db8, {"v100", 70}}, {0x1df6, {"v100", 70}},  {0x15f7, {"p100", 60}},    {0x15f8, {"p100", 60}},
      {0x15f9, {"p100", 60}}, {0x1eb8, {"t4", 75}},    {0x27b8, {"l4", 89}},      {0x26b9, {"l40s", 89}},
      {0x26b5, {"l40", 89}},  {0x2901, {"b200", 100}}, {0x1094, {"m2075", 20}},   {0x1023, {"k40m", 35}},
  };
  return ids;
}

// Compute capability from a short name; nullopt when the family is not known here.
std::optional<int> capabilityOf(const std::string& s) {
  struct Family {
    const char* prefix;
    int capability;
  };
  // Longer prefixes first where one is the start of another (a100 before a10, l40 before l4, gb300 before gb200...).
  static const Family kFamilies[] = {
      {"gh200", 90}, {"gb300", 103}, {"gb200", 100}, {"h100", 90},    {"h200", 90},     {"h800", 90},   {"h20", 90},
      {"b300", 103}, {"b200", 100},  {"a100", 80},   {"a800", 80},    {"a30", 80},      {"a10", 86},    {"a16", 86},
      {"a40", 86},   {"a2", 86},     {"l40", 89},    {"l20", 89},     {"l4", 89},       {"t4", 75},     {"v100", 70},
      {"p100", 60},  {"p40", 61},    {"p4", 61},     {"k80", 37},     {"k40", 35},      {"k20", 35},    {"k10", 30},
      {"m40", 52},   {"m60", 52},    {"m4", 52},     {"m20", 20},     {"c20", 20},      {"rtx20", 75},  {"rtx30", 86},
      {"rtx40", 89}, {"rtx50", 120}, {"rtxa", 86},   {"rtxpro", 120}, {"titanrtx", 75}, {"titanv", 70}, {"titanx", 61},
      {"gtx10", 61}, {"gtx9", 52},
  };
  for (const Family& f : kFamilies) {
    if (startsWith(s, f.prefix)) return f.capability;
  }
  return std::nullopt;
}

bool compatible(const KindParts& given, const KindParts& hw) {
  return given.model == hw.model && given.count == hw.count &&
         (given.interconnect.empty() || hw.interconnect.empty() || given.interconnect == hw.interconnect);
}

// The canonical kind of two compatible kinds: the hardware's interconnect where it knows it.
std::string merged(const KindParts& given, const KindParts& hw) {
  KindParts k = hw;
  if (k.interconnect.empty()) k.interconnect = given.interconnect;
  return k.canonical();
}

std::optional<KindParts> hardwareParts(const DerivedKind& hardware) {
  if (hardware.kind.empty()) return std::nullopt;
  auto p = parseKind(hardware.kind);
  if (!p || p->count == 0) return std::nullopt;
  return p;
}

// Characters a kind may hold: it becomes part of file names (reports/runs/<date>-<kind>-<sha7>.json) and page names.
bool kindCharactersOk(const std::string& k) {
  if (k.empty() || k.size() > 128) return false;
  return std::all_of(k.begin(), k.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == '+';
  });
}

std::uint64_t fnv1a(const std::string& text) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text)
    h = (h ^ c) * 0x100000001b3ull;
  return h;
}

}  // namespace

GpuModelInfo identifyGpu(std::string_view model) {
  GpuModelInfo info;
  std::vector<std::string> t = tokens(model);
  if (t.empty()) {
    info.short_name = "gpu";
    return info;
  }
  // "10de:2335": the PCI ids.
  if (t[0].size() == 9 && t[0][4] == ':') {
    const int device = static_cast<int>(std::strtol(t[0].c_str() + 5, nullptr, 16));
    if (auto it = deviceIds().find(device); it != deviceIds().end()) {
      info.short_name = it->second.first;
      info.capability = it->second.second;
    } else {
      info.short_name = t[0].substr(0, 4) + "-" + t[0].substr(5);
    }
    return info;
  }
  std::string s = t[0];
  if ((s == "rtx" || s == "gtx" || s == "titan") && t.size() > 1) {
    s += t[1];
    if (t.size() > 2 && (t[2] == "ada" || t[2] == "blackwell")) {
      // "RTX 6000 Ada Generation", "RTX PRO 6000 Blackwell".
      info.capability = t[2] == "ada" ? 89 : 120;
      s += "-" + t[2];
    } else if (s == "rtxpro" && t.size() > 2) {
      s += t[2];
    }
  }
  info.short_name = s;
  for (char& c : info.short_name) {
    if (c == ':') c = '-';
  }
  if (!info.capability) info.capability = capabilityOf(s);
  return info;
}

std::string KindParts::canonical() const {
  return model + "-x" + std::to_string(count) + (interconnect.empty() ? "" : "-" + interconnect);
}

std::optional<KindParts> parseKind(std::string_view text) {
  if (text.empty() || text.size() > 128) return std::nullopt;
  std::string s;
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (!std::isalnum(u) && c != '-' && c != '_' && c != '+') return std::nullopt;
    s += c == '_' ? '-' : static_cast<char>(std::tolower(u));
  }
  if (startsWith(s, "nvidia-")) s = s.substr(7);
  KindParts k;
  for (const char* link : {"nvswitch", "nvlink", "pcie"}) {
    const std::string suffix = std::string("-") + link;
    if (s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0) {
      k.interconnect = link;
      s.resize(s.size() - suffix.size());
      break;
    }
  }
  const size_t x = s.rfind("-x");
  if (x == std::string::npos || x == 0 || x + 2 >= s.size()) return std::nullopt;
  const std::string count = s.substr(x + 2);
  if (count.size() > 4 || count.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  k.count = std::atoi(count.c_str());
  k.model = s.substr(0, x);
  if (k.model.empty() || k.model.front() == '-' || k.model.back() == '-') return std::nullopt;
  // One GPU has no interconnect.
  if (k.count == 1 && !k.interconnect.empty()) return std::nullopt;
  return k;
}

DerivedKind deriveKind(const PlanTopology& topo) {
  DerivedKind out;
  const size_t n = topo.gpus.size();
  std::map<std::string, int> shorts;
  std::map<std::string, int> models;
  for (const PlanGpu& g : topo.gpus) {
    ++shorts[identifyGpu(g.model).short_name];
    ++models[g.model];
  }
  std::string model;
  for (const auto& [s, count] : shorts)
    model += (model.empty() ? "" : "+") + s;
  if (model.empty()) model = "gpu";
  out.kind = model + "-x" + std::to_string(n);
  std::string what;
  for (const auto& [m, count] : models)
    what += (what.empty() ? "" : " + ") + std::to_string(count) + "x " + m;
  if (what.empty()) what = "no GPU";

  bool unknown = false, nvlink = false, nvswitch = topo.nvswitches > 0;
  for (const PlanPair& p : topo.pairs) {
    if (!p.nvlinks) {
      unknown = true;
    } else if (*p.nvlinks > 0) {
      nvlink = true;
      nvswitch |= p.nvswitch;
    }
  }
  std::string link;
  if (n < 2) {
    link = "";
  } else if (nvlink && nvswitch) {
    out.kind += "-nvswitch";
    link = "NVLink through NVSwitch";
  } else if (nvlink) {
    out.kind += "-nvlink";
    link = "direct NVLink";
  } else if (!unknown) {
    out.kind += "-pcie";
    link = "PCIe only (no NVLink)";
  } else {
    link = "interconnect unknown (the topology does not say whether the GPUs share NVLinks)";
  }
  out.basis = what + (link.empty() ? "" : ", " + link) +
              (topo.nvlink_source.empty() || link.empty() ? "" : " (NVLink from " + topo.nvlink_source + ")");
  if (n == 0) out.kind.clear();
  return out;
}

DerivedKind deriveKind(const std::vector<GpuFingerprint>& gpus) {
  DerivedKind out;
  if (gpus.empty()) return out;
  std::map<std::string, int> shorts;
  std::map<std::string, int> models;
  for (const GpuFingerprint& g : gpus) {
    ++shorts[identifyGpu(g.name).short_name];
    ++models[g.name];
  }
  std::string model;
  for (const auto& [s, count] : shorts)
    model += (model.empty() ? "" : "+") + s;
  out.kind = model + "-x" + std::to_string(gpus.size());
  for (const auto& [m, count] : models)
    out.basis += (out.basis.empty() ? "" : " + ") + std::to_string(count) + "x " + m;
  if (gpus.size() > 1) out.basis += ", interconnect unknown (from the fingerprint's GPU list)";
  return out;
}

const char* kindSourceName(KindSource s) {
  switch (s) {
    case KindSource::kNone:
      return "none";
    case KindSource::kHardware:
      return "hardware";
    case KindSource::kOption:
      return "--kind";
    case KindSource::kEnvironment:
      return "PEERLAB_KIND";
    case KindSource::kIngest:
      return "ingest --kind";
    case KindSource::kRunFile:
      return "run file";
  }
  return "none";
}

std::string describeKind(const RunKind& k) {
  if (k.name.empty()) return "none (the hardware is unknown)";
  std::string s = k.name + " (" + kindSourceName(k.source);
  if (k.overridden) {
    s += k.given.empty() ? "" : " " + k.given;
    s += ", overridden: the hardware is " + (k.hardware.empty() ? std::string("unknown") : k.hardware);
  } else if (!k.given.empty()) {
    s += " " + k.given + ", an alias of the hardware's kind";
  } else if (k.source == KindSource::kHardware) {
    s += ": " + k.basis;
  }
  return s + ")";
}

KindRequest kindRequest(const std::string& option, bool override_hardware) {
  KindRequest r;
  r.option = option;
  if (const char* k = std::getenv("PEERLAB_KIND"); k && *k) r.environment = k;
  r.override_hardware = override_hardware;
  return r;
}

StatusOr<RunKind> chooseKind(const KindRequest& request, const DerivedKind& hardware) {
  RunKind out;
  out.hardware = hardware.kind;
  out.basis = hardware.basis;
  std::string given;
  const char* where = "";
  if (!request.option.empty()) {
    given = request.option;
    out.source = KindSource::kOption;
    where = "--kind";
  } else if (!request.environment.empty()) {
    given = request.environment;
    out.source = KindSource::kEnvironment;
    where = "$PEERLAB_KIND";
  }
  if (given.empty()) {
    out.name = hardware.kind;
    out.source = hardware.kind.empty() ? KindSource::kNone : KindSource::kHardware;
    return out;
  }
  if (!kindCharactersOk(given)) {
    return PEERLAB_INVALID_ARGUMENT(std::string(where) + " \"" + given.substr(0, 140) +
                                    "\": a kind is 1 to 128 letters, digits and - _ . + (e.g. h100-x2-nvswitch)");
  }
  const std::optional<KindParts> p = parseKind(given);
  const std::optional<KindParts> hw = hardwareParts(hardware);
  if (!hw) {
    // Nothing to hold it against: kept, in the canonical spelling where it is one.
    out.name = p ? p->canonical() : given;
  } else if (p && compatible(*p, *hw)) {
    out.name = merged(*p, *hw);
  } else if (request.override_hardware) {
    out.name = given;
    out.overridden = true;
  } else {
    const std::string what = p ? std::string(where) + " " + given + " contradicts the hardware"
                               : std::string(where) + " " + given +
                                     " names no hardware (a kind is <model>-x<count>[-<interconnect>], e.g. "
                                     "h100-x2-nvswitch)";
    return PEERLAB_INVALID_ARGUMENT(what + ": the hardware is " + hardware.kind + " (" + hardware.basis +
                                    "); pass --kind-override to file the run under " + given + " anyway");
  }
  if (out.name != given) out.given = given;
  return out;
}

RunKind kindOfRunFile(const std::string& stated, const std::string& stated_source, const std::string& given,
                      bool overridden, const DerivedKind& hardware) {
  RunKind out;
  out.hardware = hardware.kind;
  out.basis = hardware.basis;
  if (stated.empty()) {
    out.name = hardware.kind;
    out.source = hardware.kind.empty() ? KindSource::kNone : KindSource::kHardware;
    return out;
  }
  if (stated_source == "--kind") {
    out.source = KindSource::kOption;
  } else if (stated_source == "PEERLAB_KIND") {
    out.source = KindSource::kEnvironment;
  } else if (stated_source == "hardware" || stated_source.rfind("derived from", 0) == 0) {
    out.source = KindSource::kHardware;
  } else if (stated_source == "ingest --kind") {
    out.source = KindSource::kIngest;
  } else {
    out.source = KindSource::kRunFile;
  }
  const std::optional<KindParts> p = parseKind(stated);
  const std::optional<KindParts> hw = hardwareParts(hardware);
  if (!hw) {
    out.name = p ? p->canonical() : stated;
    out.overridden = overridden;
    out.override_recorded = overridden;
  } else if (p && compatible(*p, *hw)) {
    out.name = merged(*p, *hw);
    // A file that does not say where its kind came from: the canonical name is the hardware's.
    if (stated_source.empty()) out.source = KindSource::kHardware;
  } else {
    out.name = stated;
    out.overridden = true;
    out.override_recorded = overridden;
    // "Derived from the hardware" cannot be true of a kind the hardware contradicts.
    if (out.source == KindSource::kHardware) out.source = KindSource::kRunFile;
  }
  out.given = !given.empty() ? given : (out.name != stated ? stated : "");
  if (out.given == out.name) out.given.clear();
  return out;
}

bool sameHardware(const std::string& a, const std::string& b) {
  const auto pa = parseKind(a), pb = parseKind(b);
  if (!pa || !pb) return !a.empty() && a == b;
  return compatible(*pa, *pb);
}

NodeIdentity nodeIdentity(const Fingerprint& fp, const std::string& board_serial) {
  NodeIdentity n;
  n.hostname = fp.hostname;
  n.board_serial = board_serial;
  for (const GpuFingerprint& g : fp.gpus) {
    if (!g.uuid.empty()) n.gpu_uuids.push_back(g.uuid);
  }
  std::sort(n.gpu_uuids.begin(), n.gpu_uuids.end());
  // 48 bits of the hash in hex: "gpus-3f2a9c01b7de".
  const auto hex48 = [](const std::string& text) {
    return formatted("%012llx", static_cast<unsigned long long>(fnv1a(text) & 0xffffffffffffull));
  };
  if (!n.gpu_uuids.empty()) {
    std::string all;
    for (const std::string& u : n.gpu_uuids)
      all += u + "\n";
    n.id = "gpus-" + hex48(all);
    n.basis = "gpu_uuids";
  } else if (!board_serial.empty()) {
    n.id = "board-" + hex48(board_serial);
    n.basis = "board_serial";
  } else if (!fp.hostname.empty()) {
    n.id = "host-" + fp.hostname;
    n.basis = "hostname";
  }
  return n;
}

bool isSlurmNodeName(const std::string& name) {
  if (name.empty() || name.size() > 255) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
           c == '.';
  });
}

StatusOr<NodeIdentity> localNodeIdentity(const Fingerprint& fp, const std::string& node_option) {
  NodeIdentity n = nodeIdentity(fp, readBoardSerial());
  std::string name = node_option;
  const char* env = std::getenv("SLURMD_NODENAME");
  if (name.empty() && env != nullptr) name = env;
  if (!name.empty() && !isSlurmNodeName(name)) {
    return PEERLAB_INVALID_ARGUMENT(std::string(node_option.empty() ? "$SLURMD_NODENAME" : "--node") + " \"" +
                                    printable(name, 60) + "\": not a node name (letters, digits, '-', '_', '.')");
  }
  n.slurm_node = name;
  return n;
}

std::string readBoardSerial(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  if (!f || !std::getline(f, s)) return "";
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())))
    s.pop_back();
  if (s.size() > 128) s.resize(128);
  std::string lower;
  for (char c : s)
    lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* placeholder : {"", "none", "not specified", "to be filled by o.e.m.", "default string", "0",
                                  "not applicable", "n/a", "0123456789"}) {
    if (lower == placeholder) return "";
  }
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return "";
  }
  return s;
}

std::string gpuSummary(const Fingerprint& fp) {
  std::map<std::string, int> byName;
  for (const GpuFingerprint& g : fp.gpus)
    ++byName[g.name];
  std::string s;
  for (const auto& [name, n] : byName)
    s += (s.empty() ? "" : " + ") + std::to_string(n) + "x " + name;
  return s.empty() ? "no GPU" : s;
}

std::string hardwareMismatch(const Fingerprint& base, const std::string& base_kind, const Fingerprint& fresh,
                             const std::string& fresh_kind) {
  auto describe = [](const Fingerprint& fp, const std::string& kind) {
    return gpuSummary(fp) + (kind.empty() ? "" : " (" + kind + ")");
  };
  const auto pa = parseKind(base_kind), pb = parseKind(fresh_kind);
  // NVSwitch, direct NVLink and PCIe boxes of one GPU model are different machines.
  const bool links =
      pa && pb && !pa->interconnect.empty() && !pb->interconnect.empty() && pa->interconnect != pb->interconnect;
  if (!base.gpus.empty() && !fresh.gpus.empty()) {
    // Model x count, by the short model name (one model's boards differ in their full names only by memory size).
    const DerivedKind a = deriveKind(base.gpus), b = deriveKind(fresh.gpus);
    if (a.kind == b.kind && !links) return "";
    return describe(base, base_kind) + " against " + describe(fresh, fresh_kind);
  }
  // A side without a GPU list (an imported run): its kind is all there is to go by.
  if (pa && pb && (pa->model != pb->model || pa->count != pb->count || links))
    return describe(base, base_kind) + " against " + describe(fresh, fresh_kind);
  return "";
}

nlohmann::json toJson(const NodeIdentity& node) {
  nlohmann::json j = {{"id", node.id}, {"basis", node.basis}, {"gpu_uuids", node.gpu_uuids}};
  if (!node.board_serial.empty()) j["board_serial"] = node.board_serial;
  if (!node.hostname.empty()) j["hostname"] = node.hostname;
  if (!node.slurm_node.empty()) j["slurm_node"] = node.slurm_node;
  return j;
}

}  // namespace peerlab::report
