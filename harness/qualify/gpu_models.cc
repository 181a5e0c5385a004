#include "harness/qualify/gpu_models.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <set>
#include <vector>

namespace peerlab::qualify {

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
  out.source = "derived from " + what + (link.empty() ? "" : ", " + link) +
               (topo.nvlink_source.empty() || link.empty() ? "" : " (NVLink from " + topo.nvlink_source + ")");
  return out;
}

DerivedKind chooseKind(const std::string& option, const PlanTopology& topo) {
  if (!option.empty()) return {option, "--kind"};
  if (const char* k = std::getenv("PEERLAB_KIND"); k && *k) return {k, "PEERLAB_KIND"};
  return deriveKind(topo);
}

std::optional<bool> buildRunsOn(std::string_view architectures, int capability) {
  bool any = false;
  size_t start = 0;
  while (start <= architectures.size()) {
    size_t end = architectures.find_first_of(",;", start);
    if (end == std::string_view::npos) end = architectures.size();
    std::string_view entry = architectures.substr(start, end - start);
    start = end + 1;
    if (entry.empty()) continue;
    size_t digits = 0;
    while (digits < entry.size() && std::isdigit(static_cast<unsigned char>(entry[digits])))
      ++digits;
    if (digits == 0) return std::nullopt;  // native, all, all-major: not known here
    const int arch = std::atoi(std::string(entry.substr(0, digits)).c_str());
    std::string_view rest = entry.substr(digits);
    // "90a": arch-specific machine code, that GPU only; "100f": the family (same major version).
    const bool specific = !rest.empty() && rest[0] == 'a';
    if (!rest.empty() && (rest[0] == 'a' || rest[0] == 'f')) rest.remove_prefix(1);
    const bool sass = rest != "-virtual";
    const bool ptx = rest.empty() || rest == "-virtual";
    if (rest != "" && rest != "-real" && rest != "-virtual") return std::nullopt;
    if (sass && (specific ? arch == capability : arch / 10 == capability / 10 && arch % 10 <= capability % 10)) {
      any = true;
    }
    if (ptx && !specific && arch <= capability) any = true;
  }
  return any;
}

std::string missingKernelCode(const PlanTopology& topo, std::string_view architectures) {
  std::map<int, std::map<std::string, int>> lacking;  // capability -> model -> count
  for (const PlanGpu& g : topo.gpus) {
    const GpuModelInfo info = identifyGpu(g.model);
    if (!info.capability) continue;
    if (buildRunsOn(architectures, *info.capability) == std::optional<bool>(false))
      ++lacking[*info.capability][g.model];
  }
  if (lacking.empty()) return "";
  std::string sms, models;
  for (auto it = lacking.rbegin(); it != lacking.rend(); ++it) {
    sms += (sms.empty() ? "sm_" : ", sm_") + std::to_string(it->first);
    for (const auto& [m, count] : it->second)
      models += (models.empty() ? "" : ", ") + std::to_string(count) + "x " + m;
  }
  return "this build holds no code for " + sms + " (" + models + "; built for CUDA architectures " +
         std::string(architectures) + ")";
}

}  // namespace peerlab::qualify
