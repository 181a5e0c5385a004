// edivisive_tool: runs peerlab's E-Divisive on series read from stdin (one series a line, numbers separated by
// spaces) and prints one JSON object a line: {"statistics":[...],"change_points":[...]} (no magnitude filter).
// Used by edivisive_crosscheck.py to compare with signal-processing-algorithms.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/history/edivisive.h"

int main(int argc, char** argv) {
  peerlab::history::EDivisiveOptions o;
  o.min_segment = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const double v = std::atof(argv[i + 1]);
    if (k == "--pvalue")
      o.max_p_value = v;
    else if (k == "--permutations")
      o.permutations = static_cast<int>(v);
    else if (k == "--min-segment")
      o.min_segment = static_cast<int>(v);
    else if (k == "--seed")
      o.seed = static_cast<std::uint64_t>(v);
    else {
      std::fprintf(stderr, "edivisive_tool: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::vector<double> x;
    for (double v; in >> v;)
      x.push_back(v);
    nlohmann::json out = {{"statistics", peerlab::history::energyStatistics(x)},
                          {"change_points", peerlab::history::eDivisive(x, o)}};
    std::printf("%s\n", out.dump().c_str());
  }
  return 0;
}
