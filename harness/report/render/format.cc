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

}  // namespace peerlab::report
