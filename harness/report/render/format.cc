#include "harness/report/render/format.h"

#include <cmath>
#include <cstdio>

namespace peerlab::report {

std::string figure(double v) {
  char buf[48];
  const double a = std::fabs(v);
  std::snprintf(buf, sizeof(buf), a >= 100 ? "%.0f" : a >= 10 ? "%.1f" : a >= 1 ? "%.2f" : "%.3g", v);
  return buf;
}

std::string shortNumber(double v) {
  if (!std::isfinite(v)) return "-";
  char buf[48];
  const double a = std::fabs(v);
  if (a >= 1000) {
    std::snprintf(buf, sizeof(buf), "%.0f", v);
  } else if (a >= 100) {
    std::snprintf(buf, sizeof(buf), "%.1f", v);
  } else if (a >= 1) {
    std::snprintf(buf, sizeof(buf), "%.2f", v);
  } else if (a >= 0.01) {
    std::snprintf(buf, sizeof(buf), "%.3f", v);
  } else {
    std::snprintf(buf, sizeof(buf), "%.3g", v);
  }
  return buf;
}

std::string formatted(const char* spec, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), spec, v);
  return buf;
}

std::string bytesLabel(double bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (bytes >= 1024 && u < 3) {
    bytes /= 1024;
    ++u;
  }
  return formatted((std::string("%g ") + kUnits[u]).c_str(), bytes);
}

}  // namespace peerlab::report
