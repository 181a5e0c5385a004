#include "harness/report/plan_record.h"

#include "harness/report/json_in.h"

namespace peerlab::report {

using nlohmann::json;

namespace {

json optJson(const std::optional<int>& v) {
  return v ? json(*v) : json(nullptr);
}
json optJson(const std::optional<double>& v) {
  return v ? json(*v) : json(nullptr);
}

std::vector<std::string> strings(const In& a, size_t max_items, size_t max_bytes = kMaxTextBytes) {
  std::vector<std::string> out;
  const size_t n = a.size();
  if (n > max_items)
    a.fail("holds " + std::to_string(n) + " entries, more than the " + std::to_string(max_items) + " allowed");
  for (size_t i = 0; i < n; ++i)
    out.push_back(a.item(i).str(max_bytes));
  return out;
}

void limitItems(const In& a, size_t max_items) {
  if (a.size() > max_items) {
    a.fail("holds " + std::to_string(a.size()) + " entries, more than the " + std::to_string(max_items) + " allowed");
  }
}

std::string oneOf(const In& v, std::initializer_list<const char*> allowed) {
  const std::string s = v.str(kMaxNameBytes);
  std::string list;
  for (const char* a : allowed) {
    if (s == a) return s;
    list += (list.empty() ? "" : ", ") + std::string(a);
  }
  v.fail("\"" + s + "\" is not one of " + list);
}

PlanTopology readTopology(const In& t) {
  t.requireObject();
  PlanTopology out;
  out.source = t.str("source", "");
  out.format = t.str("format", "", kMaxNameBytes);
  out.nvswitches = t.integer("nvswitches", 0, 4096).value_or(0);
  out.nvlink_source = t.str("nvlink_source", "", kMaxNameBytes);
  out.no_gpu_message = t.str("no_gpu_message", "");
  out.numa_nodes = t.integer("numa_nodes", 0, 65536).value_or(0);
  const In gpus = t.at("gpus");
  limitItems(gpus, kMaxGpus);
  for (size_t i = 0; i < gpus.size(); ++i) {
    const In g = gpus.item(i);
    PlanGpu pg;
    pg.index = g.at("index").integer(0, kMaxGpus - 1);
    pg.bus_id = g.str("bus_id", "", kMaxNameBytes);
    pg.model = g.str("model", "", kMaxNameBytes);
    pg.uuid = g.str("uuid", "", kMaxNameBytes);
    pg.nvlinks = g.integer("nvlinks", 0, 1024);
    pg.nvlink_link_gbps = g.num("nvlink_link_gbps", 0, 1e4);
    if (auto m = g.num("memory_peak_gbps", 0, 1e6)) out.memory_peak_gbps[pg.index] = *m;
    if (auto l = g.opt("pcie")) {
      topology::PcieLink link;
      link.gbps = l->at("gbps").num(0, topology::kMaxPcieGbps);
      link.source = l->str("source", "", kMaxNameBytes);
      link.generation = l->integer("generation", 1, 16);
      link.width = l->integer("width", 1, 64);
      if (link.gbps > 0) pg.pcie = link;
    }
    out.gpus.push_back(pg);
  }
  const int n = static_cast<int>(out.gpus.size());
  const In pairs = t.at("pairs");
  limitItems(pairs, static_cast<size_t>(kMaxGpus) * kMaxGpus);
  for (size_t i = 0; i < pairs.size(); ++i) {
    const In p = pairs.item(i);
    PlanPair pp;
    pp.src = p.at("src").integer(0, std::max(0, n - 1));
    pp.dst = p.at("dst").integer(0, std::max(0, n - 1));
    pp.pci = p.str("pci", "", kMaxNameBytes);
    pp.nvswitch = p.boolean("nvswitch", false);
    pp.nvlinks = p.integer("nvlinks", 0, 1024);
    pp.nvlink_gbps = p.num("nvlink_gbps", 0, 1e5);
    out.pairs.push_back(pp);
  }
  if (auto w = t.opt("warnings")) out.warnings = strings(*w, 1000);
  return out;
}

Expectation readExpectation(const In& e, int gpus) {
  e.requireObject();
  Expectation x;
  x.rule = e.at("rule").str(kMaxNameBytes);
  x.suite = e.at("suite").str(kMaxNameBytes);
  x.impl = e.str("impl", "*", kMaxNameBytes);
  x.name = e.str("name", "*", kMaxNameBytes);
  if (auto m = e.opt("metric")) x.metric = oneOf(*m, {"algbw_gbps", "busbw_gbps"});
  x.src = e.integer("src", 0, gpus - 1);
  x.dst = e.integer("dst", 0, gpus - 1);
  x.min_bytes = e.num("min_bytes", 0, 1e15).value_or(0);
  x.gbps = e.num("gbps", 0, 1e6);
  x.basis = e.str("basis", "");
  x.link = e.str("link", "", kMaxNameBytes);
  if (auto s = e.opt("scope")) {
    x.scope = oneOf(*s, {"pair", "gpu", "host", "gpu_pcie", "device"});
  } else {
    // Plans written before scopes were stored: a pair, one GPU's own figure, or the whole machine.
    x.scope = x.src && x.dst ? (*x.src == *x.dst ? "device" : "pair") : x.src ? "host" : "gpu";
  }
  return x;
}

LatencyRule readLatency(const In& l) {
  l.requireObject();
  LatencyRule x;
  x.id = l.at("rule").str(kMaxNameBytes);
  x.suite = l.at("suite").str(kMaxNameBytes);
  x.impl = l.str("impl", "*", kMaxNameBytes);
  x.name = l.str("name", "*", kMaxNameBytes);
  x.max_bytes = l.at("max_bytes").num(0, 1e15);
  x.max_us = l.at("max_us").num(0, 1e12);
  x.note = l.str("note", "");
  return x;
}

PlanJob readJob(const In& j, int gpus) {
  j.requireObject();
  PlanJob x;
  x.suite = j.at("suite").str(kMaxNameBytes);
  x.binary = j.str("binary", "", kMaxNameBytes);
  x.ranks = j.integer("ranks", 1, 4096).value_or(1);
  x.budget_s = j.num("budget_s", 0, 1e7).value_or(0);
  x.estimate_basis = j.str("estimate_basis", "");
  x.deadline_s = j.num("deadline_base_s", 0, 1e7).value_or(x.budget_s);
  x.label = j.str("label", "", kMaxNameBytes);
  x.path = j.str("executable", "");
  x.resolved = j.has("found");
  x.schedule_basis = j.str("schedule_basis", "");
  x.guard_for = j.str("guard_for", "", kMaxNameBytes);
  // Recorded before plans were typed: the filter and environment it ran with (kept when such a plan is written again).
  if (auto a = j.opt("args")) x.legacy_args = strings(*a, 256);
  if (auto e = j.opt("env")) x.legacy_env = strings(*e, 64);
  if (auto w = j.opt("plan")) {
    auto work = benchPlanFromJson(w->json(), gpus, w->path());
    if (!work.isOk()) w->fail(work.status().message());
    x.work = std::move(*work);
    return x;
  }
  // Its rounds (or its one pair).
  x.work.suite = x.suite;
  auto pairOf = [&](const In& pr) {
    if (pr.size() != 2) pr.fail("must be [src, dst]");
    return std::make_pair(pr.item(0).integer(0, gpus - 1), pr.item(1).integer(0, gpus - 1));
  };
  if (auto rounds = j.opt("rounds")) {
    limitItems(*rounds, static_cast<size_t>(kMaxGpus) * kMaxGpus);
    for (size_t r = 0; r < rounds->size(); ++r) {
      const In round = rounds->item(r);
      limitItems(round, static_cast<size_t>(kMaxGpus));
      std::vector<std::pair<int, int>> pairs;
      for (size_t i = 0; i < round.size(); ++i)
        pairs.push_back(pairOf(round.item(i)));
      x.work.rounds.push_back(std::move(pairs));
    }
    if (Status st = launch::checkPairRounds(x.work.rounds, gpus); !st.isOk()) rounds->fail(st.message());
  } else {
    const std::optional<int> src = j.integer("src", 0, gpus - 1), dst = j.integer("dst", 0, gpus - 1);
    if (src && dst && *src != *dst) x.work.rounds = {{{*src, *dst}}};
  }
  if (auto pairs = j.opt("pairs")) limitItems(*pairs, static_cast<size_t>(kMaxGpus) * kMaxGpus);
  return x;
}

}  // namespace

std::vector<Expectation> expectationsFromJson(const json& doc) {
  std::vector<Expectation> out;
  if (!doc.is_array()) return out;
  for (size_t i = 0; i < doc.size() && i < 100000; ++i) {
    auto e = readJson([&] { return readExpectation(In(doc[i], "$[" + std::to_string(i) + "]"), kMaxGpus); });
    if (e.isOk()) out.push_back(std::move(*e));
  }
  return out;
}

const PlanPair* PlanTopology::pair(int src, int dst) const {
  // Pairs are usually every ordered pair, source-major: look there first (plans call this per pair and rule).
  const long n = static_cast<long>(gpus.size());
  if (src >= 0 && dst >= 0 && src != dst && src < n && dst < n) {
    const long at = src * (n - 1) + (dst < src ? dst : dst - 1);
    if (at < static_cast<long>(pairs.size()) && pairs[at].src == src && pairs[at].dst == dst) return &pairs[at];
  }
  for (const PlanPair& p : pairs) {
    if (p.src == src && p.dst == dst) return &p;
  }
  return nullptr;
}

json toJson(const PlanTopology& topo) {
  json gpus = json::array();
  for (const PlanGpu& g : topo.gpus) {
    json j = {{"index", g.index}, {"bus_id", g.bus_id}, {"model", g.model}, {"uuid", g.uuid}};
    j["nvlinks"] = optJson(g.nvlinks);
    j["nvlink_link_gbps"] = optJson(g.nvlink_link_gbps);
    if (auto m = topo.memory_peak_gbps.find(g.index); m != topo.memory_peak_gbps.end())
      j["memory_peak_gbps"] = m->second;
    j["pcie"] = nullptr;
    if (g.pcie) {
      j["pcie"] = {{"gbps", g.pcie->gbps}, {"source", g.pcie->source}};
      j["pcie"]["generation"] = optJson(g.pcie->generation);
      j["pcie"]["width"] = optJson(g.pcie->width);
    }
    gpus.push_back(j);
  }
  json pairs = json::array();
  for (const PlanPair& p : topo.pairs) {
    json j = {{"src", p.src}, {"dst", p.dst}, {"pci", p.pci}, {"nvswitch", p.nvswitch}};
    j["nvlinks"] = optJson(p.nvlinks);
    j["nvlink_gbps"] = optJson(p.nvlink_gbps);
    pairs.push_back(j);
  }
  json out = {{"source", topo.source},    {"format", topo.format},         {"gpus", gpus},
              {"pairs", pairs},           {"nvswitches", topo.nvswitches}, {"nvlink_source", topo.nvlink_source},
              {"warnings", topo.warnings}};
  if (!topo.no_gpu_message.empty()) out["no_gpu_message"] = topo.no_gpu_message;
  if (topo.numa_nodes > 0) out["numa_nodes"] = topo.numa_nodes;
  return out;
}

json toJson(const Expectation& e) {
  json x = {{"rule", e.rule},
            {"suite", e.suite},
            {"impl", e.impl},
            {"name", e.name},
            {"metric", e.metric},
            {"scope", e.scope},
            {"link", e.link.empty() ? json(nullptr) : json(e.link)},
            {"min_bytes", e.min_bytes},
            {"basis", e.basis}};
  x["gbps"] = optJson(e.gbps);
  x["src"] = optJson(e.src);
  x["dst"] = optJson(e.dst);
  return x;
}

json toJson(const LatencyRule& l) {
  json x = {{"rule", l.id},   {"suite", l.suite},         {"impl", l.impl},
            {"name", l.name}, {"max_bytes", l.max_bytes}, {"max_us", l.max_us}};
  if (!l.note.empty()) x["note"] = l.note;
  return x;
}

json toJson(const PlanJob& j) {
  json x = {{"suite", j.suite},
            {"binary", j.binary},
            {"ranks", j.ranks},
            {"plan", toJson(j.work)},
            {"budget_s", j.budget_s},
            {"estimate_basis", j.estimate_basis},
            {"deadline_base_s", j.deadline_s},
            {"label", j.label}};
  if (!j.legacy_args.empty()) x["args"] = j.legacy_args;
  if (!j.legacy_env.empty()) x["env"] = j.legacy_env;
  if (j.resolved) {
    x["executable"] = j.path.empty() ? json(nullptr) : json(j.path);
    x["found"] = !j.path.empty();
  }
  if (!j.schedule_basis.empty()) x["schedule_basis"] = j.schedule_basis;
  if (!j.guard_for.empty()) x["guard_for"] = j.guard_for;
  return x;
}

StatusOr<PlanTopology> planTopologyFromJson(const json& doc, const std::string& where) {
  return readJson([&] { return readTopology(In(doc, where)); });
}

StatusOr<RunPlan> runPlanFromJson(const json& doc, const std::string& where) {
  return readJson([&] {
    const In p(doc, where);
    p.requireObject();
    RunPlan plan;
    // One level: "level", or the "mode" of plans written before levels.
    const std::optional<In> l = p.opt("level");
    const std::optional<In> m = l ? std::nullopt : p.opt("mode");
    auto level = levelOfRecord(l ? std::optional<std::string>(l->str(kMaxNameBytes)) : std::nullopt,
                               m ? std::optional<std::string>(m->str(kMaxNameBytes)) : std::nullopt);
    if (!level.isOk()) (l ? *l : *m).fail(level.status().message());
    plan.level = *level;
    if (auto t = p.opt("topology")) plan.topology = readTopology(*t);
    // Indices are bounded by the topology's GPUs when the plan has one.
    const int gpus =
        plan.topology && !plan.topology->gpus.empty() ? static_cast<int>(plan.topology->gpus.size()) : kMaxGpus;
    if (auto pairs = p.opt("pairs")) {
      limitItems(*pairs, static_cast<size_t>(kMaxGpus) * kMaxGpus);
      for (size_t i = 0; i < pairs->size(); ++i) {
        const In pr = pairs->item(i);
        if (pr.size() != 2) pr.fail("must be [src, dst]");
        plan.pairs.emplace_back(pr.item(0).integer(0, gpus - 1), pr.item(1).integer(0, gpus - 1));
      }
    }
    plan.probe = p.boolean("probe", false);  // the plan ran the verified probe (not a suite)
    if (auto m = p.opt("probe_methods")) plan.probe_methods = strings(*m, 64, kMaxNameBytes);
    if (auto jobs = p.opt("jobs")) {
      limitItems(*jobs, 100000);
      for (size_t i = 0; i < jobs->size(); ++i)
        plan.jobs.push_back(readJob(jobs->item(i), gpus));
    }
    if (auto exp = p.opt("expectations")) {
      limitItems(*exp, 20000);
      for (size_t i = 0; i < exp->size(); ++i)
        plan.expectations.push_back(readExpectation(exp->item(i), gpus));
    }
    if (auto lat = p.opt("latency")) {
      limitItems(*lat, 1000);
      for (size_t i = 0; i < lat->size(); ++i)
        plan.latency.push_back(readLatency(lat->item(i)));
    }
    if (auto n = p.opt("notes")) plan.notes = strings(*n, 10000);
    if (auto d = p.opt("disabled_rules")) plan.disabled_rules = strings(*d, 10000, kMaxNameBytes);
    if (auto c = p.opt("checks")) {
      plan.require_link_info = c->boolean("require_link_info", true);
      plan.fail_unclaimed = c->boolean("fail_unclaimed", false);
    }
    plan.budget_s = p.num("budget_s", 0, 1e9).value_or(0);
    return plan;
  });
}

}  // namespace peerlab::report
