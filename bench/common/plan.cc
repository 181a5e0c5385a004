#include "bench/common/plan.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace peerlab::bench {

namespace {

std::vector<KnobInfo>& knobRegistry() {
  static std::vector<KnobInfo> all;
  return all;
}

report::BenchPlan& planSlot() {
  static report::BenchPlan p;
  return p;
}

const KnobInfo* declared(const std::string& name) {
  for (const KnobInfo& k : knobRegistry())
    if (name == k.name) return &k;
  return nullptr;
}

bool allDigits(const std::string& v) {
  return !v.empty() && v.size() <= 19 && v.find_first_not_of("0123456789") == std::string::npos;
}

std::string declaredList() {
  std::string out;
  for (const KnobInfo& k : knobRegistry())
    out += (out.empty() ? "" : ", ") + std::string(k.name);
  return out.empty() ? "none" : out;
}

}  // namespace

KnobRegistrar::KnobRegistrar(KnobInfo info) {
  knobRegistry().push_back(info);
}

const std::vector<KnobInfo>& declaredKnobs() {
  return knobRegistry();
}

const report::BenchPlan& plan() {
  return planSlot();
}

bool planned(const report::RowKey& row) {
  return planSlot().runs(row);
}

std::string knobText(const char* name) {
  return planSlot().knob(name);
}

StatusOr<int64_t> knobInt(const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const std::string v = knobText(name);
  if (v.empty()) return fallback;
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (errno != 0 || end == v.c_str() || *end != '\0' || n < lo || n > hi) {
    return PEERLAB_INVALID_ARGUMENT("knob " + std::string(name) + "=\"" + v + "\": expected a whole number from " +
                                    std::to_string(lo) + " to " + std::to_string(hi));
  }
  return static_cast<int64_t>(n);
}

uint64_t knobCount(const char* name, uint64_t fallback) {
  const std::string v = knobText(name);
  return allDigits(v) ? std::strtoull(v.c_str(), nullptr, 10) : fallback;
}

StatusOr<bool> knobBool(const char* name, bool fallback) {
  const std::string v = knobText(name);
  if (v.empty()) return fallback;
  if (v != "0" && v != "1")
    return PEERLAB_INVALID_ARGUMENT("knob " + std::string(name) + "=\"" + v + "\": expected 0 or 1");
  return v == "1";
}

int takePlanArgs(int& argc, char** argv) {
  std::string file, pairs;
  std::vector<std::string> knobs;
  bool list = false;
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    // "--name=value" or "--name value".
    auto value = [&](std::string_view name, std::string& dst) {
      if (arg.rfind(name, 0) != 0) return false;
      const std::string_view rest = arg.substr(name.size());
      if (rest.empty() && i + 1 < argc) {
        dst = argv[++i];
        return true;
      }
      if (rest.empty() || rest[0] != '=') return false;
      dst = std::string(rest.substr(1));
      return true;
    };
    std::string knob;
    if (value("--plan", file) || value("--pairs", pairs)) continue;
    if (value("--knob", knob)) {
      knobs.push_back(knob);
      continue;
    }
    if (arg == "--knobs") {
      list = true;
      continue;
    }
    argv[out++] = argv[i];
  }
  argc = out;
  argv[argc] = nullptr;
  if (list) {
    std::printf("knobs of %s (--knob NAME=VALUE):\n", argv[0]);
    for (const KnobInfo& k : knobRegistry())
      std::printf("  %-28s %-6s %s\n", k.name,
                  k.type == KnobType::kCount    ? "N"
                  : k.type == KnobType::kSwitch ? "0|1"
                                                : "TEXT",
                  k.help);
    if (knobRegistry().empty()) std::printf("  none\n");
    return 0;
  }
  auto bad = [&](const std::string& why) {
    std::fprintf(stderr, "%s: %s\n", argv[0], why.c_str());
    return 2;
  };
  report::BenchPlan& p = planSlot();
  if (!file.empty()) {
    auto read = report::readBenchPlan(file);
    if (!read.isOk()) return bad("--plan " + read.status().message());
    p = std::move(*read);
  }
  if (!pairs.empty()) {
    auto rounds = launch::parsePairRounds(pairs);
    if (!rounds.isOk()) return bad("--pairs " + pairs + ": " + rounds.status().message());
    p.rounds = std::move(*rounds);
  }
  for (const std::string& k : knobs) {
    const size_t eq = k.find('=');
    if (eq == std::string::npos || eq == 0) return bad("--knob " + k + ": expected NAME=VALUE");
    p.knobs[k.substr(0, eq)] = k.substr(eq + 1);
  }
  for (const auto& [name, v] : p.knobs) {
    const KnobInfo* k = declared(name);
    if (k == nullptr) return bad("knob " + name + ": not a knob of this benchmark (knobs: " + declaredList() + ")");
    if (k->type == KnobType::kCount && !allDigits(v))
      return bad("knob " + name + "=\"" + v + "\": expected a whole number");
    if (k->type == KnobType::kSwitch && v != "0" && v != "1")
      return bad("knob " + name + "=\"" + v + "\": expected 0 or 1");
  }
  return -1;
}

}  // namespace peerlab::bench
