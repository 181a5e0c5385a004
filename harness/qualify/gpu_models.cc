#include "harness/qualify/gpu_models.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <set>
#include <vector>

namespace peerlab::qualify {

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
