#include "harness/report/bench_plan.h"

#include <fnmatch.h>

#include <algorithm>
#include <set>

#include "harness/report/json_in.h"
#include "reference/core/files.h"

namespace peerlab::report {

using json = nlohmann::json;

bool globMatch(const std::string& pattern, const std::string& text) {
  return ::fnmatch(pattern.c_str(), text.c_str(), 0) == 0;
}

bool RowSelection::holds(const RowKey& row) const {
  if (!cases.empty()) {
    const std::string key = row.impl + "/" + row.name;
    if (std::none_of(cases.begin(), cases.end(), [&](const std::string& c) { return globMatch(c, key); })) return false;
  }
  if (!sizes.empty() && row.bytes >= 0 && std::find(sizes.begin(), sizes.end(), row.bytes) == sizes.end()) return false;
  if (!pairs.empty() && row.src >= 0 && row.dst >= 0) {
    const bool held = std::any_of(pairs.begin(), pairs.end(), [&](const OrderedPair& p) {
      return (p.first == row.src && p.second == row.dst) ||
             (row.both_ways && p.first == row.dst && p.second == row.src);
    });
    if (!held) return false;
  }
  if (!gpus.empty() && row.gpu >= 0 && std::find(gpus.begin(), gpus.end(), row.gpu) == gpus.end()) return false;
  return true;
}

bool BenchPlan::runs(const RowKey& row) const {
  return rows.empty() || std::any_of(rows.begin(), rows.end(), [&](const RowSelection& s) { return s.holds(row); });
}

std::vector<OrderedPair> BenchPlan::pairs() const {
  std::vector<OrderedPair> out;
  for (const auto& round : rounds)
    out.insert(out.end(), round.begin(), round.end());
  return out;
}

std::string BenchPlan::knob(const std::string& name, const std::string& fallback) const {
  auto it = knobs.find(name);
  return it == knobs.end() ? fallback : it->second;
}

namespace {

json pairJson(const OrderedPair& p) {
  return json::array({p.first, p.second});
}

OrderedPair readPair(const In& v, int gpus) {
  if (v.size() != 2) v.fail("must be [src, dst]");
  return {v.item(0).integer(0, gpus - 1), v.item(1).integer(0, gpus - 1)};
}

void limit(const In& a, size_t n) {
  if (a.size() > n)
    a.fail("holds " + std::to_string(a.size()) + " entries, more than the " + std::to_string(n) + " allowed");
}

constexpr size_t kMaxSelections = 4096;
constexpr int64_t kMaxBytes = int64_t{1} << 44;

BenchPlan readPlan(const In& p, int gpus) {
  p.requireObject();
  BenchPlan plan;
  plan.suite = p.at("suite").str(kMaxNameBytes);
  if (auto rows = p.opt("rows")) {
    limit(*rows, kMaxSelections);
    for (size_t i = 0; i < rows->size(); ++i) {
      const In r = rows->item(i);
      r.requireObject();
      RowSelection s;
      if (auto c = r.opt("cases")) {
        limit(*c, 1024);
        for (size_t k = 0; k < c->size(); ++k)
          s.cases.push_back(c->item(k).str(kMaxNameBytes));
      }
      if (auto z = r.opt("sizes")) {
        limit(*z, 1024);
        for (size_t k = 0; k < z->size(); ++k)
          s.sizes.push_back(static_cast<int64_t>(z->item(k).num(0, static_cast<double>(kMaxBytes))));
      }
      if (auto q = r.opt("pairs")) {
        limit(*q, static_cast<size_t>(gpus) * gpus);
        for (size_t k = 0; k < q->size(); ++k)
          s.pairs.push_back(readPair(q->item(k), gpus));
      }
      if (auto g = r.opt("gpus")) {
        limit(*g, static_cast<size_t>(gpus));
        for (size_t k = 0; k < g->size(); ++k)
          s.gpus.push_back(g->item(k).integer(0, gpus - 1));
      }
      plan.rows.push_back(std::move(s));
    }
  }
  if (auto rounds = p.opt("rounds")) {
    limit(*rounds, static_cast<size_t>(gpus) * gpus);
    for (size_t r = 0; r < rounds->size(); ++r) {
      const In round = rounds->item(r);
      limit(round, static_cast<size_t>(gpus));
      std::vector<OrderedPair> pairs;
      for (size_t k = 0; k < round.size(); ++k)
        pairs.push_back(readPair(round.item(k), gpus));
      plan.rounds.push_back(std::move(pairs));
    }
    if (Status st = launch::checkPairRounds(plan.rounds, gpus); !st.isOk()) rounds->fail(st.message());
  }
  if (auto sets = p.opt("gpu_sets")) {
    limit(*sets, static_cast<size_t>(gpus));
    std::set<int> seen;
    for (size_t i = 0; i < sets->size(); ++i) {
      const In set = sets->item(i);
      limit(set, static_cast<size_t>(gpus));
      std::vector<int> members;
      for (size_t k = 0; k < set.size(); ++k) {
        const int g = set.item(k).integer(0, gpus - 1);
        if (!seen.insert(g).second) set.item(k).fail("GPU " + std::to_string(g) + " is in two sets");
        members.push_back(g);
      }
      plan.gpu_sets.push_back(std::move(members));
    }
  }
  if (auto knobs = p.opt("knobs")) {
    knobs->requireObject();
    if (knobs->json().size() > 256) knobs->fail("holds more than the 256 knobs allowed");
    for (const auto& [k, v] : knobs->json().items()) {
      if (k.empty() || k.size() > kMaxNameBytes) knobs->fail("a knob name must have 1 to 256 characters");
      plan.knobs[k] = knobs->member(k, v).str(kMaxTextBytes);
    }
  }
  plan.samples = p.integer("samples", 0, 100000).value_or(0);
  plan.deadline_s = p.num("deadline_s", 0, 1e7).value_or(0);
  if (auto rules = p.opt("rules")) {
    limit(*rules, 1024);
    for (size_t i = 0; i < rules->size(); ++i)
      plan.rules.push_back(rules->item(i).str(kMaxNameBytes));
  }
  return plan;
}

}  // namespace

json toJson(const BenchPlan& plan) {
  json rows = json::array();
  for (const RowSelection& s : plan.rows) {
    json r = json::object();
    if (!s.cases.empty()) r["cases"] = s.cases;
    if (!s.sizes.empty()) r["sizes"] = s.sizes;
    if (!s.pairs.empty()) {
      r["pairs"] = json::array();
      for (const OrderedPair& p : s.pairs)
        r["pairs"].push_back(pairJson(p));
    }
    if (!s.gpus.empty()) r["gpus"] = s.gpus;
    rows.push_back(r);
  }
  json out = {{"suite", plan.suite}, {"rows", rows}};
  if (!plan.rounds.empty()) {
    json rounds = json::array();
    for (const auto& round : plan.rounds) {
      json r = json::array();
      for (const OrderedPair& p : round)
        r.push_back(pairJson(p));
      rounds.push_back(r);
    }
    out["rounds"] = rounds;
  }
  if (!plan.gpu_sets.empty()) out["gpu_sets"] = plan.gpu_sets;
  if (!plan.knobs.empty()) out["knobs"] = plan.knobs;
  if (plan.samples > 0) out["samples"] = plan.samples;
  if (plan.deadline_s > 0) out["deadline_s"] = plan.deadline_s;
  if (!plan.rules.empty()) out["rules"] = plan.rules;
  return out;
}

StatusOr<BenchPlan> benchPlanFromJson(const json& doc, int gpus, const std::string& where) {
  return readJson([&] { return readPlan(In(doc, where), std::max(1, gpus)); });
}

Status writeBenchPlan(const std::string& path, const BenchPlan& plan) {
  // One line: what a process is handed is read by programs, not people (the run file carries the same plan).
  return writeTextFile(path, toJson(plan).dump() + "\n");
}

StatusOr<BenchPlan> readBenchPlan(const std::string& path) {
  PEERLAB_ASSIGN_OR_RETURN(std::string text, readTextFile(path));
  PEERLAB_ASSIGN_OR_RETURN(json doc, parseJsonText(text, size_t{64} << 20, 16));
  auto plan = benchPlanFromJson(doc, launch::kMaxRoundGpus);
  if (!plan.isOk()) return PEERLAB_INVALID_ARGUMENT(path + ": " + plan.status().message());
  return plan;
}

}  // namespace peerlab::report
