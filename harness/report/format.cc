#include "harness/report/format.h"

#include <cmath>
#include <cstdarg>
#include <cstdio>

namespace peerlab::report {

std::string figure(double v) {
  const double a = std::fabs(v);
  return a >= 100  ? formatted("%.0f", v)
         : a >= 10 ? formatted("%.1f", v)
         : a >= 1  ? formatted("%.2f", v)
                   : formatted("%.3g", v);
}

std::string shortNumber(double v) {
  if (!std::isfinite(v)) return "-";
  const double a = std::fabs(v);
  if (a >= 1000) return formatted("%.0f", v);
  if (a >= 100) return formatted("%.1f", v);
  if (a >= 1) return formatted("%.2f", v);
  if (a >= 0.01) return formatted("%.3f", v);
  return formatted("%.3g", v);
}

std::string tableFigure(std::optional<double> v) {
  if (!v) return "-";
  const double a = std::fabs(*v);
  if (a >= 100) return formatted("%.1f", *v);
  if (a >= 1) return formatted("%.2f", *v);
  return formatted("%.4g", *v);
}

std::string exactNumber(double v) {
  return formatted("%.17g", v);
}

std::string formatBytes(double bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = bytes;
  while (std::fabs(v) >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return v == std::floor(v) ? formatted("%.0f %s", v, kUnits[u]) : formatted("%.3g %s", v, kUnits[u]);
}

std::string bytesLabel(double bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (bytes >= 1024 && u < 3) {
    bytes /= 1024;
    ++u;
  }
  return formatted("%g %s", bytes, kUnits[u]);
}

std::string formatted(const char* spec, ...) {
  va_list args;
  va_start(args, spec);
  va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, spec, args);
  va_end(args);
  std::string out(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  // The terminating NUL lands on out[n], which std::string keeps.
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, spec, again);
  va_end(again);
  return out;
}

}  // namespace peerlab::report
