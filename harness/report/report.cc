#include "harness/report/report.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "reference/core/devices.h"
#include "reference/nccl/comm.h"

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

Status requireString(const json& obj, const char* key, const std::string& where, bool nonEmpty = false) {
  if (!obj.contains(key)) return bad(where, std::string("missing key \"") + key + "\"");
  if (!obj[key].is_string()) return bad(where + "." + key, "must be a string");
  if (nonEmpty && obj[key].get_ref<const std::string&>().empty()) return bad(where + "." + key, "must not be empty");
  return Status::ok();
}

Status requireNumberOrNull(const json& obj, const char* key, const std::string& where) {
  if (!obj.contains(key)) return bad(where, std::string("missing key \"") + key + "\"");
  if (!obj[key].is_null() && !obj[key].is_number()) return bad(where + "." + key, "must be a number or null");
  return Status::ok();
}

Status requireIntOrNull(const json& obj, const char* key, const std::string& where) {
  if (!obj.contains(key)) return bad(where, std::string("missing key \"") + key + "\"");
  if (!obj[key].is_null() && !obj[key].is_number_integer()) return bad(where + "." + key, "must be an integer or null");
  return Status::ok();
}

std::optional<double> getOptNum(const json& j) {
  if (j.is_null()) return std::nullopt;
  return j.get<double>();
}
std::optional<int> getOptInt(const json& j) {
  if (j.is_null()) return std::nullopt;
  return j.get<int>();
}

const char* kResultKeys[] = {"suite",   "name",       "impl",       "src",   "dst",    "ranks",  "bytes",
                             "time_us", "algbw_gbps", "busbw_gbps", "wrong", "status", "detail", "numa"};
const char* kRunKeys[] = {"schema_version", "tool", "git_sha", "timestamp", "fingerprint", "results"};
const char* kFingerprintKeys[] = {"hostname", "driver", "cuda_runtime", "nccl", "gpus"};

bool isKnown(const char* const* keys, size_t n, const std::string& k) {
  for (size_t i = 0; i < n; ++i)
    if (k == keys[i]) return true;
  return false;
}

}  // namespace

json toJson(const Fingerprint& fp) {
  json gpus = json::array();
  for (const auto& g : fp.gpus) {
    gpus.push_back({{"ordinal", g.ordinal}, {"uuid", g.uuid}, {"bus_id", g.bus_id}, {"name", g.name}});
  }
  return {{"hostname", fp.hostname},
          {"driver", fp.driver},
          {"cuda_runtime", fp.cuda_runtime},
          {"nccl", fp.nccl},
          {"gpus", gpus}};
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

Status validate(const json& doc) {
  if (!doc.is_object()) return bad("$", "a run file is a JSON object");
  if (!doc.contains("schema_version")) return bad("$", "missing key \"schema_version\"");
  if (!doc["schema_version"].is_number_integer()) return bad("$.schema_version", "must be an integer");
  const int version = doc["schema_version"].get<int>();
  if (version != kSchemaVersion) {
    return bad("$.schema_version", "unsupported schema version " + std::to_string(version) + " (this peerlab reads " +
                                       std::to_string(kSchemaVersion) + ")");
  }
  PEERLAB_RETURN_IF_ERROR(requireString(doc, "tool", "$", true));
  PEERLAB_RETURN_IF_ERROR(requireString(doc, "git_sha", "$"));
  PEERLAB_RETURN_IF_ERROR(requireString(doc, "timestamp", "$", true));
  if (!doc.contains("fingerprint")) return bad("$", "missing key \"fingerprint\"");
  const json& fp = doc["fingerprint"];
  if (!fp.is_object()) return bad("$.fingerprint", "must be an object");
  for (const char* k : {"hostname", "driver", "cuda_runtime", "nccl"}) {
    PEERLAB_RETURN_IF_ERROR(requireString(fp, k, "$.fingerprint"));
  }
  if (!fp.contains("gpus")) return bad("$.fingerprint", "missing key \"gpus\"");
  if (!fp["gpus"].is_array()) return bad("$.fingerprint.gpus", "must be an array");
  for (size_t i = 0; i < fp["gpus"].size(); ++i) {
    const json& g = fp["gpus"][i];
    const std::string where = "$.fingerprint.gpus[" + std::to_string(i) + "]";
    if (!g.is_object()) return bad(where, "must be an object");
    if (!g.contains("ordinal") || !g["ordinal"].is_number_integer())
      return bad(where + ".ordinal", "must be an integer");
    for (const char* k : {"uuid", "bus_id", "name"})
      PEERLAB_RETURN_IF_ERROR(requireString(g, k, where));
  }
  if (!doc.contains("results")) return bad("$", "missing key \"results\"");
  if (!doc["results"].is_array()) return bad("$.results", "must be an array");
  for (size_t i = 0; i < doc["results"].size(); ++i) {
    const json& r = doc["results"][i];
    const std::string where = "$.results[" + std::to_string(i) + "]";
    if (!r.is_object()) return bad(where, "must be an object");
    for (const char* k : {"suite", "name", "impl", "status"})
      PEERLAB_RETURN_IF_ERROR(requireString(r, k, where, true));
    PEERLAB_RETURN_IF_ERROR(requireIntOrNull(r, "src", where));
    PEERLAB_RETURN_IF_ERROR(requireIntOrNull(r, "dst", where));
    if (!r.contains("ranks") || !r["ranks"].is_number_integer() || r["ranks"].get<int>() < 1) {
      return bad(where + ".ranks", "must be an integer >= 1");
    }
    for (const char* k : {"bytes", "time_us", "algbw_gbps", "busbw_gbps", "wrong"}) {
      PEERLAB_RETURN_IF_ERROR(requireNumberOrNull(r, k, where));
    }
    if (r.contains("numa")) PEERLAB_RETURN_IF_ERROR(requireIntOrNull(r, "numa", where));
  }
  return Status::ok();
}

StatusOr<Run> fromJson(const json& doc) {
  PEERLAB_RETURN_IF_ERROR(validate(doc));
  Run run;
  run.schema_version = doc["schema_version"].get<int>();
  run.tool = doc["tool"].get<std::string>();
  run.git_sha = doc["git_sha"].get<std::string>();
  run.timestamp = doc["timestamp"].get<std::string>();
  const json& fp = doc["fingerprint"];
  run.fingerprint.hostname = fp["hostname"].get<std::string>();
  run.fingerprint.driver = fp["driver"].get<std::string>();
  run.fingerprint.cuda_runtime = fp["cuda_runtime"].get<std::string>();
  run.fingerprint.nccl = fp["nccl"].get<std::string>();
  for (const json& g : fp["gpus"]) {
    run.fingerprint.gpus.push_back({g["ordinal"].get<int>(), g["uuid"].get<std::string>(),
                                    g["bus_id"].get<std::string>(), g["name"].get<std::string>()});
  }
  for (const json& r : doc["results"]) {
    Result out;
    out.suite = r["suite"].get<std::string>();
    out.name = r["name"].get<std::string>();
    out.impl = r["impl"].get<std::string>();
    out.src = getOptInt(r["src"]);
    out.dst = getOptInt(r["dst"]);
    out.ranks = r["ranks"].get<int>();
    out.bytes = getOptNum(r["bytes"]);
    out.time_us = getOptNum(r["time_us"]);
    out.algbw_gbps = getOptNum(r["algbw_gbps"]);
    out.busbw_gbps = getOptNum(r["busbw_gbps"]);
    out.wrong = getOptNum(r["wrong"]);
    out.status = r["status"].get<std::string>();
    if (r.contains("numa")) out.numa = getOptInt(r["numa"]);
    if (r.contains("detail") && r["detail"].is_string()) out.detail = r["detail"].get<std::string>();
    for (auto it = r.begin(); it != r.end(); ++it) {
      if (!isKnown(kResultKeys, std::size(kResultKeys), it.key())) out.extra[it.key()] = it.value();
    }
    run.results.push_back(std::move(out));
  }
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (!isKnown(kRunKeys, std::size(kRunKeys), it.key())) run.extra[it.key()] = it.value();
  }
  (void)kFingerprintKeys;
  return run;
}

StatusOr<Run> readRun(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return bad(path, "no such file");
  if (std::filesystem::is_directory(path, ec)) return bad(path, "is a directory, not a run file");
  std::ifstream f(path, std::ios::binary);
  if (!f) return bad(path, std::string("cannot read: ") + std::strerror(errno));
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) return bad(path, "empty file");
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
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
      return bad(path, "malformed JSON (" + what + ")");
    }
    return bad(path, "malformed JSON");
  }
  auto run = fromJson(doc);
  if (!run.isOk()) return bad(path, run.status().message());
  return run;
}

Status writeRun(const Run& run, const std::string& path) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return bad(path, std::string("cannot write: ") + std::strerror(errno));
    f << toJson(run).dump(2) << "\n";
    if (!f) return bad(path, "write failed");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return bad(path, "cannot rename into place: " + ec.message());
  }
  return Status::ok();
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

Fingerprint collectFingerprint() {
  Fingerprint fp;
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) fp.hostname = host;
  DriverVersions v = driverVersions();
  fp.driver = !v.release.empty() ? v.release : (v.driver_api ? formatCudaVersion(v.driver_api) : "none");
  fp.cuda_runtime = v.runtime_api ? formatCudaVersion(v.runtime_api) : "unknown";
  fp.nccl = nccl::versionString();
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
