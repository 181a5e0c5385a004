#include "harness/report/report.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

#include "harness/report/check_record.h"
#include "harness/report/compressed.h"
#include "harness/report/json_in.h"
#include "reference/core/devices.h"
#include "reference/core/files.h"
#include "reference/nccl/version.h"

namespace peerlab::report {

using nlohmann::json;

namespace {

json optNum(const std::optional<double>& v) {
  return v ? json(*v) : json(nullptr);
}
json optInt(const std::optional<int>& v) {
  return v ? json(*v) : json(nullptr);
}

Status bad(const std::string& path, const std::string& why) {
  return PEERLAB_INVALID_ARGUMENT(path + ": " + why);
}

// Top-level keys read into typed fields ("injected": where files of earlier versions kept a probe's stand-ins).
const char* kRunKeys[] = {
    "schema_version", "tool",       "git_sha",       "timestamp",  "fingerprint",     "results", "kind",
    "kind_source",    "kind_basis", "hardware_kind", "kind_given", "kind_overridden", "node",    "injected"};

bool isKnown(const char* const* keys, size_t n, const std::string& k) {
  for (size_t i = 0; i < n; ++i)
    if (k == keys[i]) return true;
  return false;
}

}  // namespace

std::string Injection::describe() const {
  std::string what;
  auto add = [&](const std::string& part) { what += (what.empty() ? "" : ", ") + part; };
  if (!fault.empty() || !interposer.empty()) {
    add("fault " + (fault.empty() ? std::string("(none named)") : fault) +
        (interposer.empty() ? "" : " (interposer " + interposer + ")"));
  }
  if (!probe_inject.empty()) add("PEERLAB_PROBE_INJECT=" + probe_inject);
  if (!probe_worker.empty()) add("stand-in probe worker " + probe_worker);
  if (!nvml.empty()) add("stand-in NVML " + nvml);
  if (!topology.empty()) add("stand-in machine (topology " + topology + ", no CUDA)");
  return what;
}

json toJson(const Injection& i) {
  json j = json::object();
  for (const auto& [key, value] : {std::pair<const char*, const std::string*>{"fault", &i.fault},
                                   {"interposer", &i.interposer},
                                   {"probe_inject", &i.probe_inject},
                                   {"probe_worker", &i.probe_worker},
                                   {"nvml", &i.nvml},
                                   {"topology", &i.topology}}) {
    if (!value->empty()) j[key] = *value;
  }
  return j;
}

json toJson(const Fingerprint& fp) {
  json gpus = json::array();
  for (const auto& g : fp.gpus) {
    gpus.push_back({{"ordinal", g.ordinal}, {"uuid", g.uuid}, {"bus_id", g.bus_id}, {"name", g.name}});
  }
  json j = {{"hostname", fp.hostname},
            {"driver", fp.driver},
            {"cuda_runtime", fp.cuda_runtime},
            {"nccl", fp.nccl},
            {"gpus", gpus}};
  if (fp.injected.any()) j["injected"] = toJson(fp.injected);
  return j;
}

json toJson(const Result& r) {
  json j = r.extra.is_object() ? r.extra : json::object();
  j["suite"] = r.suite;
  j["name"] = r.name;
  j["impl"] = r.impl;
  j["src"] = optInt(r.src);
  j["dst"] = optInt(r.dst);
  j["ranks"] = r.ranks;
  j["bytes"] = optNum(r.bytes);
  j["time_us"] = optNum(r.time_us);
  j["algbw_gbps"] = optNum(r.algbw_gbps);
  j["busbw_gbps"] = optNum(r.busbw_gbps);
  j["wrong"] = optNum(r.wrong);
  j["status"] = r.status;
  if (r.numa) j["numa"] = *r.numa;
  if (!r.detail.empty()) j["detail"] = r.detail;
  return j;
}

json toJson(const Run& run) {
  json j = run.extra.is_object() ? run.extra : json::object();
  // The machine's identity is written from the typed fields only.
  for (const char* key :
       {"kind", "kind_source", "kind_basis", "hardware_kind", "kind_given", "kind_overridden", "node"})
    j.erase(key);
  if (!run.kind.name.empty()) {
    j["kind"] = run.kind.name;
    j["kind_source"] = kindSourceName(run.kind.source);
    if (!run.kind.basis.empty()) j["kind_basis"] = run.kind.basis;
    if (!run.kind.hardware.empty()) j["hardware_kind"] = run.kind.hardware;
    if (!run.kind.given.empty()) j["kind_given"] = run.kind.given;
    if (run.kind.overridden) j["kind_overridden"] = true;
  }
  if (!run.node.empty()) j["node"] = toJson(run.node);
  j["schema_version"] = run.schema_version;
  j["tool"] = run.tool;
  j["git_sha"] = run.git_sha;
  j["timestamp"] = run.timestamp;
  j["fingerprint"] = toJson(run.fingerprint);
  json results = json::array();
  for (const auto& r : run.results)
    results.push_back(toJson(r));
  j["results"] = std::move(results);
  return j;
}

namespace {

// Depth of a parsed document, looking no deeper than one level past `limit`.
int jsonDepth(const json& j, int limit) {
  if (!j.is_array() && !j.is_object()) return 0;
  if (limit < 0) return 1;
  int most = 0;
  for (const json& v : j)
    most = std::max(most, jsonDepth(v, limit - 1));
  return most + 1;
}

// Every string of the document loses its control characters (the walk is bounded by kMaxJsonDepth).
void stripControlIn(json& j) {
  if (j.is_string()) {
    std::string& s = j.get_ref<std::string&>();
    bool any = false;
    for (unsigned char c : s)
      any |= c < 0x20 || c == 0x7f || c == 0xc2;
    if (any) s = stripControl(s);
  } else if (j.is_array() || j.is_object()) {
    for (json& v : j)
      stripControlIn(v);
  }
}

std::vector<std::string> readStrings(const In& a, size_t max_items, size_t max_bytes = kMaxTextBytes) {
  std::vector<std::string> out;
  if (a.size() > max_items) a.fail("holds more than the " + std::to_string(max_items) + " entries allowed");
  for (size_t i = 0; i < a.size(); ++i)
    out.push_back(a.item(i).str(max_bytes));
  return out;
}

// Largest sensible figures: 100 TB/s of bandwidth, a petabyte, eleven days in microseconds, 2^53 elements.
constexpr double kMaxGbps = 1e5;
constexpr double kMaxBytes = 1e15;
constexpr double kMaxTimeUs = 1e12;
constexpr double kMaxCount = 9007199254740992.0;

// Every key of a result peerlab reads, with how it is read. A result's members are read in one pass, each by its
// entry here; keys not listed are kept as they are (and read by nobody).
enum class ResultKey {
  kSuite,
  kName,
  kImpl,
  kStatus,
  kSrc,
  kDst,
  kRanks,
  kBytes,
  kTimeUs,
  kAlgbw,
  kBusbw,
  kWrong,
  kNuma,
  kDetail,
  kFlag,       // true or false
  kText,       // a string
  kFigure,     // a finite number, not negative
  kThrottled,  // clock event reasons
  kSamplesUs,  // per-sample times
  kOther,
};

ResultKey resultKeyOf(const std::string& key) {
  static const std::unordered_map<std::string, ResultKey> kKeys = {
      {"suite", ResultKey::kSuite},
      {"name", ResultKey::kName},
      {"impl", ResultKey::kImpl},
      {"status", ResultKey::kStatus},
      {"src", ResultKey::kSrc},
      {"dst", ResultKey::kDst},
      {"ranks", ResultKey::kRanks},
      {"bytes", ResultKey::kBytes},
      {"time_us", ResultKey::kTimeUs},
      {"algbw_gbps", ResultKey::kAlgbw},
      {"busbw_gbps", ResultKey::kBusbw},
      {"wrong", ResultKey::kWrong},
      {"numa", ResultKey::kNuma},
      {"detail", ResultKey::kDetail},
      {"claimed", ResultKey::kFlag},
      {"lie", ResultKey::kFlag},
      {"cached", ResultKey::kFlag},
      {"method", ResultKey::kText},
      {"path", ResultKey::kText},
      {"error", ResultKey::kText},
      {"log", ResultKey::kText},
      {"benchmark", ResultKey::kText},
      {"injected", ResultKey::kText},
      {"first_bad", ResultKey::kFigure},
      {"words", ResultKey::kFigure},
      {"samples", ResultKey::kFigure},
      {"p10_us", ResultKey::kFigure},
      {"p90_us", ResultKey::kFigure},
      {"nvlink_gbps", ResultKey::kFigure},
      {"cells", ResultKey::kFigure},
      {"workers", ResultKey::kFigure},
      {"failed_claims", ResultKey::kFigure},
      {"kernel_us", ResultKey::kFigure},
      {"numa_local", ResultKey::kFigure},
      {"throttled", ResultKey::kThrottled},
      {"samples_us", ResultKey::kSamplesUs},
  };
  auto it = kKeys.find(key);
  return it == kKeys.end() ? ResultKey::kOther : it->second;
}

// Top-level keys beyond the fixed ones that peerlab reads.
void readRunExtra(const In& doc, Run& run) {
  if (auto p = doc.opt("plan")) {
    auto plan = runPlanFromJson(p->json(), p->path());
    if (!plan.isOk()) throw BadJson{"", plan.status().message()};
    run.plan = std::move(*plan);
  }
  if (auto q = doc.opt("qualify")) {
    q->requireObject();
    if (auto v = q->opt("verdict")) {
      const std::string w = v->str(kMaxNameBytes);
      if (w != "PASS" && w != "FAIL" && w != "EMPTY") v->fail("\"" + w + "\" is not PASS, FAIL or EMPTY");
    }
    if (auto c = q->opt("checks")) {
      auto checks = checkRecordsFromJson(c->json(), c->path());
      if (!checks.isOk()) throw BadJson{"", checks.status().message()};
    }
    q->integer("failed", 0, 1LL << 40);
    q->str("command", "");
    q->str("baseline", "");
    q->num("wall_s", 0, 1e9);
    if (auto s = q->opt("summary")) s->requireObject();
  }
  if (auto b = doc.opt("bench")) {
    b->requireObject();
    b->str("mode", "", kMaxNameBytes);
    b->str("level", "", kMaxNameBytes);
    b->boolean("interrupted", false);
    if (auto f = b->opt("serial_fallbacks")) readStrings(*f, 10000);
    if (auto jobs = b->opt("jobs")) {
      if (jobs->size() > 100000) jobs->fail("holds more than the 100000 jobs allowed");
      for (size_t i = 0; i < jobs->size(); ++i) {
        const In j = jobs->item(i);
        j.requireObject();
        j.str("label", "", kMaxNameBytes);
        j.str("binary", "", kMaxNameBytes);
        j.str("exit", "");
        j.str("gbench_json", "");
        j.integer("results", 0, 1LL << 40);
        j.num("wall_s", 0, 1e9);
        if (auto a = j.opt("args")) readStrings(*a, 256);
        if (auto e = j.opt("env")) readStrings(*e, 64);
        j.integer("ranks", 1, 4096);
        if (auto w = j.opt("plan")) {
          auto work = benchPlanFromJson(w->json(), kMaxGpus, w->path());
          if (!work.isOk()) throw BadJson{"", work.status().message()};
        }
      }
    }
  }
  if (auto h = doc.opt("health")) h->requireObject();
  // Where earlier versions kept a probe's (and a stand-in qualify's) stand-ins: read into the fingerprint's.
  if (auto i = doc.opt("injected")) {
    i->requireObject();
    Injection& into = run.fingerprint.injected;
    if (std::string v = i->str("probe_inject", ""); !v.empty()) into.probe_inject = v;
    if (std::string v = i->str("worker", ""); !v.empty()) into.probe_worker = v;
    if (std::string v = i->str("topology", ""); !v.empty()) into.topology = v;
    i->str("note", "");
    i->num("faults", 0, 1e9);
  }
  if (auto p = doc.opt("probe")) p->requireObject();  // the probe's record (not a suite)
  if (auto b = doc.opt("baseline")) {
    b->requireObject();
    b->integer("runs", 0, 1 << 20);
  }
  if (auto s = doc.opt("sources")) readStrings(*s, 10000);
}

// The kind (read against the run's hardware: an alias of the hardware's kind reads as the canonical kind) and the
// node identity (from the fingerprint when the file has none).
void readMachine(const In& doc, Run& run) {
  const std::string stated = doc.str("kind", "", 128);
  const std::string source = doc.str("kind_source", "", kMaxTextBytes);
  const std::string given = doc.str("kind_given", "", 128);
  const bool overridden = doc.boolean("kind_overridden", false);
  doc.str("kind_basis", "", kMaxTextBytes);
  doc.str("hardware_kind", "", 128);
  run.kind = kindOfRunFile(stated, source, given, overridden, hardwareOf(run));
  if (auto n = doc.opt("node")) {
    n->requireObject();
    NodeIdentity node;
    node.id = n->str("id", "", kMaxNameBytes);
    node.basis = n->str("basis", "", kMaxNameBytes);
    node.board_serial = n->str("board_serial", "", kMaxNameBytes);
    node.hostname = n->str("hostname", "", kMaxNameBytes);
    node.slurm_node = n->str("slurm_node", "", 255);
    if (!node.slurm_node.empty() && !isSlurmNodeName(node.slurm_node))
      n->at("slurm_node").fail("\"" + node.slurm_node + "\" is not a node name (letters, digits, '-', '_', '.')");
    if (auto u = n->opt("gpu_uuids")) node.gpu_uuids = readStrings(*u, kMaxGpus, kMaxNameBytes);
    if (node.basis != "" && node.basis != "gpu_uuids" && node.basis != "board_serial" && node.basis != "hostname")
      n->at("basis").fail("\"" + node.basis + "\" is not gpu_uuids, board_serial or hostname");
    run.node = std::move(node);
  }
  if (run.node.empty()) {
    const std::string slurm = run.node.slurm_node;
    run.node = nodeIdentity(run.fingerprint, "");
    run.node.slurm_node = slurm;
  }
}

// `keep`: build the run (its extra keys copied); validate() only checks.
Run readRunDocument(const json& j, bool keep = true) {
  const In doc(j, "$");
  doc.requireObject();
  const int version = doc.at("schema_version").integer(0, 1 << 20);
  if (version != kSchemaVersion) {
    doc.at("schema_version")
        .fail("unsupported schema version " + std::to_string(version) + " (this peerlab reads " +
              std::to_string(kSchemaVersion) + ")");
  }
  Run run;
  run.schema_version = version;
  run.tool = doc.at("tool").str(kMaxNameBytes);
  if (run.tool.empty()) doc.at("tool").fail("must not be empty");
  run.git_sha = doc.at("git_sha").str(kMaxNameBytes);
  const In ts = doc.at("timestamp");
  run.timestamp = ts.str(kMaxNameBytes);
  const auto when = parseIsoTimestamp(run.timestamp);
  if (!when) ts.fail("\"" + run.timestamp + "\" is not an ISO 8601 time (2026-11-21T08:12:33Z)");
  if (*when > static_cast<long long>(std::time(nullptr)) + kTimestampSkewS) {
    ts.fail("\"" + run.timestamp + "\" lies in the future (more than " + std::to_string(kTimestampSkewS / 60) +
            " minutes ahead of this machine's clock)");
  }
  const In fp = doc.at("fingerprint");
  fp.requireObject();
  run.fingerprint.hostname = fp.at("hostname").str(kMaxNameBytes);
  run.fingerprint.driver = fp.at("driver").str(kMaxNameBytes);
  run.fingerprint.cuda_runtime = fp.at("cuda_runtime").str(kMaxNameBytes);
  run.fingerprint.nccl = fp.at("nccl").str(kMaxNameBytes);
  const In gpus = fp.at("gpus");
  if (gpus.size() > static_cast<size_t>(kMaxGpus)) {
    gpus.fail("lists " + std::to_string(gpus.size()) + " GPUs, more than the " + std::to_string(kMaxGpus) +
              " a run may hold");
  }
  for (size_t i = 0; i < gpus.size(); ++i) {
    const In g = gpus.item(i);
    g.requireObject();
    run.fingerprint.gpus.push_back({g.at("ordinal").integer(0, kMaxGpus - 1), g.at("uuid").str(kMaxNameBytes),
                                    g.at("bus_id").str(kMaxNameBytes), g.at("name").str(kMaxNameBytes)});
    // One GPU listed twice (its UUID, or its ordinal) is no machine: the node identity is made from the UUIDs.
    for (size_t k = 0; k < i; ++k) {
      const GpuFingerprint& a = run.fingerprint.gpus[k];
      const GpuFingerprint& b = run.fingerprint.gpus[i];
      if (!b.uuid.empty() && a.uuid == b.uuid) {
        g.at("uuid").fail("\"" + b.uuid + "\" is the UUID of GPU " + std::to_string(a.ordinal) +
                          " too ($.fingerprint.gpus[" + std::to_string(k) + "]): each GPU has its own");
      }
      if (a.ordinal == b.ordinal) {
        g.at("ordinal").fail(std::to_string(b.ordinal) + " is listed twice ($.fingerprint.gpus[" + std::to_string(k) +
                             "])");
      }
    }
  }
  if (auto inj = fp.opt("injected")) {
    inj->requireObject();
    Injection& i = run.fingerprint.injected;
    i.fault = inj->str("fault", "", kMaxTextBytes);
    i.interposer = inj->str("interposer", "", kMaxTextBytes);
    i.probe_inject = inj->str("probe_inject", "", kMaxTextBytes);
    i.probe_worker = inj->str("probe_worker", "", kMaxTextBytes);
    i.nvml = inj->str("nvml", "", kMaxTextBytes);
    i.topology = inj->str("topology", "", kMaxTextBytes);
  }
  readRunExtra(doc, run);
  readMachine(doc, run);
  // GPU indices name GPUs of this run: those its fingerprint lists, else those of its plan's topology.
  int gpuLimit = kMaxGpus;
  std::string limitWhy = "the most a run may hold";
  if (!run.fingerprint.gpus.empty()) {
    gpuLimit = 0;
    for (const GpuFingerprint& g : run.fingerprint.gpus)
      gpuLimit = std::max(gpuLimit, g.ordinal + 1);
    limitWhy = "the fingerprint lists " + std::to_string(run.fingerprint.gpus.size()) + " GPUs";
  } else if (run.plan && run.plan->topology && !run.plan->topology->gpus.empty()) {
    gpuLimit = static_cast<int>(run.plan->topology->gpus.size());
    limitWhy = "the plan's topology has " + std::to_string(gpuLimit) + " GPUs";
  }
  const In results = doc.at("results");
  if (results.size() > kMaxResults)
    results.fail("holds more than the " + std::to_string(kMaxResults) + " results allowed");
  if (keep) run.results.reserve(results.size());
  for (size_t i = 0; i < results.size(); ++i) {
    const In r = results.item(i);
    r.requireObject();
    Result out;
    unsigned seen = 0;  // bit per fixed key present
    auto gpuIndex = [&](const In& v) -> std::optional<int> {
      if (v.json().is_null()) return std::nullopt;
      if (!v.json().is_number_integer()) v.fail("must be an integer or null (got " + shortValue(v.json()) + ")");
      const long long g =
          v.json().is_number_unsigned()
              ? static_cast<long long>(std::min<unsigned long long>(v.json().get<unsigned long long>(), 1ULL << 40))
              : v.json().get<long long>();
      if (g < 0 || g >= gpuLimit) {
        v.fail(std::to_string(g) + " is not a GPU of this run (0.." + std::to_string(gpuLimit - 1) + ": " + limitWhy +
               ")");
      }
      return static_cast<int>(g);
    };
    auto number = [](const In& v, double lo, double hi) -> std::optional<double> {
      if (v.json().is_null()) return std::nullopt;
      return v.num(lo, hi);
    };
    auto nonEmpty = [](const In& v, size_t max) {
      std::string text = v.str(max);
      if (text.empty()) v.fail("must not be empty");
      return text;
    };
    for (auto it = r.json().begin(); it != r.json().end(); ++it) {
      const In v = r.member(it.key(), it.value());
      const ResultKey k = resultKeyOf(it.key());
      seen |= k < ResultKey::kFlag ? 1u << static_cast<unsigned>(k) : 0u;
      switch (k) {
        case ResultKey::kSuite:
          out.suite = nonEmpty(v, kMaxNameBytes);
          break;
        case ResultKey::kName:
          out.name = nonEmpty(v, kMaxNameBytes);
          break;
        case ResultKey::kImpl:
          out.impl = nonEmpty(v, kMaxNameBytes);
          break;
        case ResultKey::kStatus:
          out.status = nonEmpty(v, 4096);
          break;
        case ResultKey::kSrc:
          out.src = gpuIndex(v);
          break;
        case ResultKey::kDst:
          out.dst = gpuIndex(v);
          break;
        case ResultKey::kRanks:
          out.ranks = v.integer(1, 4096);
          break;
        case ResultKey::kBytes:
          out.bytes = number(v, 0, kMaxBytes);
          break;
        case ResultKey::kTimeUs:
          out.time_us = number(v, 0, kMaxTimeUs);
          break;
        case ResultKey::kAlgbw:
          out.algbw_gbps = number(v, 0, kMaxGbps);
          break;
        case ResultKey::kBusbw:
          out.busbw_gbps = number(v, 0, kMaxGbps);
          break;
        case ResultKey::kWrong:
          out.wrong = number(v, 0, kMaxCount);
          if (out.wrong && *out.wrong != std::floor(*out.wrong)) v.fail("must be a whole number of elements");
          break;
        case ResultKey::kNuma:
          if (!v.json().is_null()) out.numa = v.integer(0, 65535);
          break;
        case ResultKey::kDetail:
          if (!v.json().is_null()) out.detail = v.str(kMaxTextBytes);
          break;
        case ResultKey::kFlag:
          if (!v.json().is_null()) v.boolean();
          if (keep) out.extra[it.key()] = it.value();
          break;
        case ResultKey::kText:
          if (!v.json().is_null()) v.str(kMaxTextBytes);
          if (keep) out.extra[it.key()] = it.value();
          break;
        case ResultKey::kFigure:
          if (!v.json().is_null()) v.num(0, kMaxTimeUs * 1e3);
          if (keep) out.extra[it.key()] = it.value();
          break;
        case ResultKey::kThrottled:
          if (!v.json().is_null()) readStrings(v, 64, kMaxNameBytes);
          if (keep) out.extra[it.key()] = it.value();
          break;
        case ResultKey::kSamplesUs:
          if (!v.json().is_null()) {
            if (v.size() > 1000000) v.fail("holds more than the 1000000 samples allowed");
            for (size_t n = 0; n < v.size(); ++n)
              v.item(n).num(0, kMaxTimeUs);
          }
          if (keep) out.extra[it.key()] = it.value();
          break;
        case ResultKey::kOther:
          if (keep) out.extra[it.key()] = it.value();
          break;
      }
    }
    // The keys every result must have (src, dst and the figures may be null, not absent).
    for (const char* key : {"suite", "name", "impl", "src", "dst", "ranks", "bytes", "time_us", "algbw_gbps",
                            "busbw_gbps", "wrong", "status"}) {
      if (!(seen & (1u << static_cast<unsigned>(resultKeyOf(key))))) r.fail(std::string("missing key \"") + key + "\"");
    }
    if (out.time_us && *out.time_us == 0 && out.status == "ok") {
      r.at("time_us").fail("0 is not a time: a measured result's time is positive");
    }
    if (keep) run.results.push_back(std::move(out));
  }
  for (auto it = j.begin(); it != j.end() && keep; ++it) {
    if (!isKnown(kRunKeys, std::size(kRunKeys), it.key())) run.extra[it.key()] = it.value();
  }
  return run;
}

}  // namespace

std::string stripControl(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) continue;
    // C1 controls (U+0080..U+009F) are 0xC2 0x80..0x9F in UTF-8; CSI (U+009B) drives terminals like ESC [.
    if (c == 0xc2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
        static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
      ++i;
      continue;
    }
    out += static_cast<char>(c);
  }
  return out;
}

std::optional<long long> parseIsoTimestamp(const std::string& t) {
  // YYYY-MM-DDTHH:MM:SS[.fraction](Z|+hh:mm|-hh:mm)
  auto digits = [&](size_t pos, size_t n, int& out) {
    if (pos + n > t.size()) return false;
    out = 0;
    for (size_t i = pos; i < pos + n; ++i) {
      if (t[i] < '0' || t[i] > '9') return false;
      out = out * 10 + (t[i] - '0');
    }
    return true;
  };
  int y, mo, d, h, mi, s;
  if (t.size() < 20 || !digits(0, 4, y) || t[4] != '-' || !digits(5, 2, mo) || t[7] != '-' || !digits(8, 2, d) ||
      (t[10] != 'T' && t[10] != ' ') || !digits(11, 2, h) || t[13] != ':' || !digits(14, 2, mi) || t[16] != ':' ||
      !digits(17, 2, s)) {
    return std::nullopt;
  }
  size_t p = 19;
  if (p < t.size() && t[p] == '.') {
    ++p;
    const size_t begin = p;
    while (p < t.size() && t[p] >= '0' && t[p] <= '9')
      ++p;
    if (p == begin || p - begin > 9) return std::nullopt;
  }
  long long offset = 0;
  if (p < t.size() && t[p] == 'Z') {
    ++p;
  } else if (p < t.size() && (t[p] == '+' || t[p] == '-')) {
    int oh, om;
    if (!digits(p + 1, 2, oh) || p + 3 >= t.size() || t[p + 3] != ':' || !digits(p + 4, 2, om) || oh > 23 || om > 59)
      return std::nullopt;
    offset = (t[p] == '+' ? 1 : -1) * (oh * 3600LL + om * 60LL);
    p += 6;
  } else {
    return std::nullopt;
  }
  if (p != t.size()) return std::nullopt;
  static const int kDays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (y < 1970 || mo < 1 || mo > 12 || d < 1 || d > kDays[mo - 1] || h > 23 || mi > 59 || s > 60) return std::nullopt;
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  if (mo == 2 && d == 29 && !leap) return std::nullopt;
  // Days from civil (Howard Hinnant's algorithm).
  const int yy = y - (mo <= 2);
  const int era = yy / 400;
  const int yoe = yy - era * 400;
  const int doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  const long long days = era * 146097LL + doe - 719468;
  return days * 86400 + h * 3600LL + mi * 60LL + s - offset;
}

Status validate(const json& doc) {
  // fromJson's checks on the document as it is (no copy; control characters are removed only from what is kept).
  if (jsonDepth(doc, kMaxJsonDepth) > kMaxJsonDepth) {
    return PEERLAB_INVALID_ARGUMENT("$: nested deeper than the " + std::to_string(kMaxJsonDepth) + " levels allowed");
  }
  return readJson([&] { return readRunDocument(doc, /*keep=*/false); }).status();
}

StatusOr<Run> fromJson(json doc) {
  if (jsonDepth(doc, kMaxJsonDepth) > kMaxJsonDepth) {
    return PEERLAB_INVALID_ARGUMENT("$: nested deeper than the " + std::to_string(kMaxJsonDepth) + " levels allowed");
  }
  stripControlIn(doc);
  return readJson([&] { return readRunDocument(doc); });
}

StatusOr<Run> runFromText(const std::string& text) {
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) return PEERLAB_INVALID_ARGUMENT("empty file");
  JsonLimits limits;
  limits.max_bytes = kMaxRunFileBytes;
  limits.max_depth = kMaxJsonDepth;
  limits.max_elements = kMaxRunJsonValues;
  limits.max_memory = kMaxRunJsonMemory;
  if (Status st = checkJsonText(text, limits); !st.isOk()) {
    return PEERLAB_INVALID_ARGUMENT("JSON " + st.message() + " (a run file's limits)");
  }
  ParsedJson parsed = parseJson(text);
  json& doc = parsed.doc;
  if (!doc.is_discarded() && !parsed.duplicate.empty()) {
    // The parser would keep the last of the two silently: which one the writer meant is unknown.
    return PEERLAB_INVALID_ARGUMENT(parsed.duplicate);
  }
  if (doc.is_discarded()) {
    // Find where parsing stops, for a useful one-line reason.
    try {
      json ignored = json::parse(text);
      (void)ignored;
    } catch (const json::exception& e) {  // parse_error, or out_of_range for a number too large for a double
      std::string what = e.what();
      // Without the library's "[json.exception.<kind>.<id>] " prefix.
      if (what.rfind("[json.exception.", 0) == 0) {
        if (auto p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
      }
      return PEERLAB_INVALID_ARGUMENT("malformed JSON (" + stripControl(what) + ")");
    }
    return PEERLAB_INVALID_ARGUMENT("malformed JSON");
  }
  stripControlIn(doc);
  return readJson([&] { return readRunDocument(doc); });
}

bool isRunFileName(const std::string& path) {
  auto endsWith = [&](const char* tail) {
    const size_t n = std::strlen(tail);
    return path.size() > n && path.compare(path.size() - n, n, tail) == 0;
  };
  return endsWith(".json") || endsWith(".json.gz");
}

std::string bundleResults(const std::string& dir) {
  std::error_code ec;
  for (const char* name : {"/results.json", "/results.json.gz"}) {
    if (std::filesystem::is_regular_file(dir + name, ec)) return dir + name;
  }
  return "";
}

StatusOr<std::string> readRunText(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return bad(path, "is a directory, not a run file");
  PEERLAB_ASSIGN_OR_RETURN(std::string text, readTextFile(path, kMaxRunFileBytes));
  // A gzip-compressed run file (`.json.gz`, reports/README.md) reads as its content, bounded like a plain one.
  if (isGzip(text)) {
    auto inflated = gunzip(text, kMaxRunFileBytes);
    if (!inflated.isOk()) return bad(path, inflated.status().message());
    text = std::move(*inflated);
  }
  return text;
}

StatusOr<Run> readRun(const std::string& path) {
  PEERLAB_ASSIGN_OR_RETURN(std::string text, readRunText(path));
  auto run = runFromText(text);
  if (!run.isOk()) return bad(path, run.status().message());
  return run;
}

DerivedKind hardwareOf(const Run& run) {
  if (run.plan && run.plan->topology && !run.plan->topology->gpus.empty()) return deriveKind(*run.plan->topology);
  return deriveKind(run.fingerprint.gpus);
}

std::string machineTitle(const Run& run) {
  const std::string host = run.fingerprint.hostname.empty() ? std::string("unknown host") : run.fingerprint.hostname;
  if (run.kind.name.empty()) return host;
  std::string t = run.kind.name;
  if (!run.node.empty() && run.node.basis != "hostname") t += ", node " + run.node.id;
  return t + " (host " + host + ")";
}

Status attachPlan(Run& run) {
  run.plan.reset();
  if (!run.extra.is_object() || !run.extra.contains("plan") || run.extra["plan"].is_null()) return Status::ok();
  PEERLAB_ASSIGN_OR_RETURN(run.plan, runPlanFromJson(run.extra["plan"]));
  return Status::ok();
}

Status writeRun(const Run& run, const std::string& path) {
  // The one safe writer: a temporary made with O_EXCL|O_NOFOLLOW beside the target, renamed into place.
  // A path ending in .gz gets the run gzip-compressed (read back transparently by readRun).
  std::string text = toJson(run).dump(2) + "\n";
  if (path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0) {
    auto packed = gzip(text);
    if (!packed.isOk()) return PEERLAB_INVALID_ARGUMENT("cannot write " + path + ": " + packed.status().message());
    text = std::move(*packed);
  }
  return writeTextFile(path, text);
}

std::string utcTimestamp() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Run newRun() {
  Run run;
  run.tool = std::string("peerlab ") + PEERLAB_VERSION;
  const char* sha = std::getenv("PEERLAB_GIT_SHA");
  run.git_sha = sha && *sha ? sha : buildGitSha();
  run.timestamp = utcTimestamp();
  return run;
}

namespace {

std::string envText(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

// The entries of LD_PRELOAD (separated by ':' or spaces) that name the fault interposer.
std::string preloadedInterposer() {
  std::string entry, found;
  for (const char c : envText("LD_PRELOAD") + ":") {
    if (c != ':' && c != ' ') {
      entry += c;
      continue;
    }
    if (entry.find("peerlab_faults") != std::string::npos) found = entry;
    entry.clear();
  }
  return found;
}

// The interposer exports this marker; found in this process, it is loaded whatever its file is called.
std::string loadedInterposer() {
  void* marker = ::dlsym(RTLD_DEFAULT, "peerlab_faults_interposer");
  if (marker == nullptr) return "";
  Dl_info info{};
  if (::dladdr(marker, &info) != 0 && info.dli_fname != nullptr && *info.dli_fname != '\0') return info.dli_fname;
  return "libpeerlab_faults.so";
}

// $PEERLAB_NVML_LIBRARY when it names peerlab's stand-in (which exports a marker), "" for a real NVML.
std::string standinNvml() {
  const std::string path = envText("PEERLAB_NVML_LIBRARY");
  if (path.empty()) return "";
  void* lib = ::dlopen(path.c_str(), RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
  if (lib == nullptr) lib = ::dlopen(path.c_str(), RTLD_LAZY | RTLD_LOCAL);
  if (lib == nullptr) return "";  // not loadable: NVML is then unavailable, and health says so
  const bool standin = ::dlsym(lib, "peerlab_standin_nvml") != nullptr;
  ::dlclose(lib);
  return standin ? path : "";
}

}  // namespace

Injection detectInjection(const InjectionUses& uses) {
  Injection i;
  i.fault = envText("PEERLAB_FAULT");
  i.interposer = loadedInterposer();
  if (i.interposer.empty()) i.interposer = preloadedInterposer();
  if (uses.probe) {
    i.probe_inject = envText("PEERLAB_PROBE_INJECT");
    i.probe_worker = envText("PEERLAB_PROBE_WORKER");
  }
  if (uses.nvml) i.nvml = standinNvml();
  return i;
}

Fingerprint collectFingerprint(const InjectionUses& uses) {
  Fingerprint fp;
  fp.injected = detectInjection(uses);
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) fp.hostname = host;
  DriverVersions v = driverVersions();
  fp.driver = !v.release.empty() ? v.release : (v.driver_api ? formatCudaVersion(v.driver_api) : "none");
  fp.cuda_runtime = v.runtime_api ? formatCudaVersion(v.runtime_api) : "unknown";
  fp.nccl = nccl::loadedVersionString();
  if (auto devices = listDevices(); devices.isOk()) {
    for (const auto& d : *devices)
      fp.gpus.push_back({d.ordinal, d.uuid, d.bus_id, d.name});
  }
  return fp;
}

namespace {

// "suite=zcopy;impl=peerlab.get;name=uni;src=0;dst=1;ranks=2;bytes=1024"
std::map<std::string, std::string> parseLabel(const std::string& label) {
  std::map<std::string, std::string> kv;
  std::stringstream ss(label);
  std::string part;
  while (std::getline(ss, part, ';')) {
    auto eq = part.find('=');
    if (eq != std::string::npos) kv[part.substr(0, eq)] = part.substr(eq + 1);
  }
  return kv;
}

}  // namespace

StatusOr<std::vector<Result>> resultsFromGbench(const json& gbench) {
  if (!gbench.is_object() || !gbench.contains("benchmarks") || !gbench["benchmarks"].is_array()) {
    return PEERLAB_INVALID_ARGUMENT("Google Benchmark JSON: missing \"benchmarks\" array");
  }
  // With repetitions, each repetition's time is a sample of its median aggregate (report --compare tests them).
  std::map<std::string, std::vector<double>> repetitionTimes;
  for (const json& b : gbench["benchmarks"]) {
    if (!b.is_object() || b.value("run_type", "iteration") != "iteration" || b.value("repetitions", 1) <= 1) continue;
    if (b.value("error_occurred", false) || !b.contains("time_us") || !b["time_us"].is_number()) continue;
    repetitionTimes[b.value("run_name", b.value("name", ""))].push_back(b["time_us"].get<double>());
  }
  std::vector<Result> out;
  for (const json& b : gbench["benchmarks"]) {
    if (!b.is_object()) continue;
    // With repetitions, keep only the median aggregate; without, keep the iteration rows.
    const std::string runType = b.value("run_type", "iteration");
    if (runType == "aggregate" && b.value("aggregate_name", "") != "median") continue;
    if (runType == "iteration" && b.value("repetitions", 1) > 1) continue;
    std::string label = b.value("label", "");
    std::string message = b.value("error_message", "");
    if (label.empty()) {
      // Skipped runs carry their identity in the message: "... [suite=...;...]".
      auto lb = message.rfind('[');
      auto rb = message.rfind(']');
      if (lb != std::string::npos && rb != std::string::npos && rb > lb) label = message.substr(lb + 1, rb - lb - 1);
    }
    auto kv = parseLabel(label);
    if (!kv.count("suite") || !kv.count("impl") || !kv.count("name")) continue;  // not a peerlab record
    Result r;
    r.suite = kv["suite"];
    r.impl = kv["impl"];
    r.name = kv["name"];
    if (kv.count("src")) r.src = std::stoi(kv["src"]);
    if (kv.count("dst")) r.dst = std::stoi(kv["dst"]);
    r.ranks = kv.count("ranks") ? std::max(1, std::stoi(kv["ranks"])) : 1;
    auto num = [&](const char* key) -> std::optional<double> {
      if (b.contains(key) && b[key].is_number()) return b[key].get<double>();
      return std::nullopt;
    };
    r.bytes = num("bytes");
    if (!r.bytes && kv.count("bytes")) r.bytes = std::stod(kv["bytes"]);
    const bool errored = b.value("error_occurred", false) ||
                         (b.contains("skipped") && b["skipped"].is_boolean() && b["skipped"].get<bool>());
    if (errored) {
      std::string why = message;
      if (auto lb = why.rfind(" ["); lb != std::string::npos) why = why.substr(0, lb);
      r.status = why.rfind("skipped", 0) == 0 || why.rfind("failed", 0) == 0 ? why : "failed: " + why;
      r.wrong = num("wrong");
      if (r.status.rfind("failed", 0) == 0 && !r.wrong) r.wrong = std::nullopt;
    } else {
      r.time_us = num("time_us");
      r.algbw_gbps = num("algbw_gbps");
      r.busbw_gbps = num("busbw_gbps");
      r.wrong = num("wrong");
      r.status = "ok";
    }
    static const std::set<std::string> skipKeys = {"name",
                                                   "family_index",
                                                   "per_family_instance_index",
                                                   "run_name",
                                                   "run_type",
                                                   "repetitions",
                                                   "repetition_index",
                                                   "threads",
                                                   "iterations",
                                                   "real_time",
                                                   "cpu_time",
                                                   "time_unit",
                                                   "label",
                                                   "error_occurred",
                                                   "error_message",
                                                   "aggregate_name",
                                                   "aggregate_unit",
                                                   "bytes",
                                                   "time_us",
                                                   "algbw_gbps",
                                                   "busbw_gbps",
                                                   "wrong",
                                                   "ranks",
                                                   "numa",
                                                   "skipped"};
    for (auto it = b.begin(); it != b.end(); ++it) {
      if (!skipKeys.count(it.key()) && it.value().is_number()) r.extra[it.key()] = it.value();
    }
    if (b.contains("numa") && b["numa"].is_number() && b["numa"].get<double>() >= 0) {
      r.numa = static_cast<int>(b["numa"].get<double>());
    }
    r.extra["benchmark"] = b.value("name", "");
    if (runType == "aggregate" && r.status == "ok") {
      auto samples = repetitionTimes.find(b.value("run_name", ""));
      if (samples != repetitionTimes.end() && samples->second.size() > 1) r.extra["samples_us"] = samples->second;
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace peerlab::report
