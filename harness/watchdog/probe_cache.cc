#include "harness/watchdog/probe_cache.h"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "reference/core/files.h"

namespace peerlab::probe {

using nlohmann::json;

namespace {

std::string envOrUnset(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string("<unset>");
}

json keyToJson(const CacheKey& k) {
  json gpus = json::array();
  for (const auto& g : k.gpus)
    gpus.push_back({{"uuid", g.uuid}, {"bus_id", g.bus_id}});
  return {{"hostname", k.hostname},
          {"driver", k.driver},
          {"cuda_visible_devices", k.cuda_visible_devices},
          {"cuda_device_order", k.cuda_device_order},
          {"gpus", gpus}};
}

std::string checksumOf(const json& withoutChecksum) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "fnv1a64:%016llx", static_cast<unsigned long long>(fnv1a64(withoutChecksum.dump())));
  return buf;
}

// Typed field access that reports the offending path.
struct Fields {
  Fields(const json& o, std::string w) : obj(o), where(std::move(w)) {}
  const json& obj;
  std::string where;
  std::string error;

  const json* get(const char* key, json::value_t type) {
    if (!obj.is_object() || !obj.contains(key)) {
      if (error.empty()) error = where + ": missing \"" + key + "\"";
      return nullptr;
    }
    const json& v = obj[key];
    const bool ok = type == json::value_t::number_unsigned  ? v.is_number_unsigned()
                    : type == json::value_t::number_integer ? v.is_number_integer()
                                                            : v.type() == type;
    if (!ok) {
      if (error.empty()) error = where + "." + key + ": wrong type";
      return nullptr;
    }
    return &v;
  }
  std::string str(const char* key) {
    const json* v = get(key, json::value_t::string);
    return v ? v->get<std::string>() : std::string();
  }
  uint64_t u64(const char* key) {
    const json* v = get(key, json::value_t::number_unsigned);
    return v ? v->get<uint64_t>() : 0;
  }
  int64_t i64(const char* key) {
    const json* v = get(key, json::value_t::number_integer);
    return v ? v->get<int64_t>() : 0;
  }
  bool boolean(const char* key) {
    const json* v = get(key, json::value_t::boolean);
    return v ? v->get<bool>() : false;
  }
};

}  // namespace

uint64_t fnv1a64(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char b : bytes) {
    h ^= b;
    h *= 0x100000001b3ull;
  }
  return h;
}

CacheKey cacheKeyFor(const Inventory& inv) {
  CacheKey k;
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) k.hostname = host;
  k.driver = inv.driverString();
  k.cuda_visible_devices = envOrUnset("CUDA_VISIBLE_DEVICES");
  k.cuda_device_order = envOrUnset("CUDA_DEVICE_ORDER");
  for (const auto& g : inv.gpus)
    k.gpus.push_back({g.uuid, g.bus_id});
  return k;
}

std::string keyDifference(const CacheKey& want, const CacheKey& have) {
  auto q = [](const std::string& s) { return "\"" + s + "\""; };
  if (want.hostname != have.hostname) return "hostname " + q(have.hostname) + " != " + q(want.hostname);
  if (want.driver != have.driver) return "driver " + q(have.driver) + " != " + q(want.driver);
  if (want.cuda_visible_devices != have.cuda_visible_devices) {
    return "CUDA_VISIBLE_DEVICES " + q(have.cuda_visible_devices) + " != " + q(want.cuda_visible_devices);
  }
  if (want.cuda_device_order != have.cuda_device_order) {
    return "CUDA_DEVICE_ORDER " + q(have.cuda_device_order) + " != " + q(want.cuda_device_order);
  }
  if (want.gpus.size() != have.gpus.size()) {
    return std::to_string(have.gpus.size()) + " GPUs != " + std::to_string(want.gpus.size());
  }
  for (size_t i = 0; i < want.gpus.size(); ++i) {
    if (want.gpus[i].uuid != have.gpus[i].uuid) {
      return "GPU " + std::to_string(i) + " UUID " + q(have.gpus[i].uuid) + " != " + q(want.gpus[i].uuid);
    }
    if (want.gpus[i].bus_id != have.gpus[i].bus_id) {
      return "GPU " + std::to_string(i) + " bus id " + q(have.gpus[i].bus_id) + " != " + q(want.gpus[i].bus_id);
    }
  }
  return "";
}

std::string encodeCache(const CacheEntry& entry) {
  json cells = json::array();
  for (const CellReport& c : entry.cells) {
    cells.push_back({{"method", std::string(methodName(c.spec.method))},
                     {"src", c.spec.src},
                     {"dst", c.spec.dst},
                     {"bytes", c.spec.bytes},
                     {"seed", c.result.seed},
                     {"claimed", c.claimed},
                     {"verdict", std::string(verdictName(c.result.verdict))},
                     {"path", std::string(pathName(c.result.path))},
                     {"wrong", c.result.wrong},
                     {"words", c.result.words},
                     {"first_bad", c.result.first_bad},
                     {"time_us", c.result.time_us},
                     {"error", c.result.error}});
  }
  json doc = {{"format", kCacheFormat},
              {"version", kCacheVersion},
              {"key", keyToJson(entry.key)},
              {"created", entry.created},
              {"wall_us", entry.wall_us},
              {"run_seed", entry.run_seed},
              {"cells", cells}};
  doc["checksum"] = checksumOf(doc);
  return doc.dump(1) + "\n";
}

StatusOr<CacheEntry> decodeCache(std::string_view text) {
  auto bad = [](const std::string& why) { return PEERLAB_INVALID_ARGUMENT(why); };
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) return bad("empty file");
  json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return bad("not valid JSON (truncated or damaged)");
  if (!doc.is_object()) return bad("not a JSON object");
  if (!doc.contains("format") || doc["format"] != kCacheFormat) return bad("not a peerlab probe cache (format)");
  if (!doc.contains("version") || !doc["version"].is_number_integer()) return bad("no version");
  const int version = doc["version"].get<int>();
  if (version != kCacheVersion) {
    return bad("cache version " + std::to_string(version) + ", this peerlab writes " + std::to_string(kCacheVersion));
  }
  if (!doc.contains("checksum") || !doc["checksum"].is_string()) return bad("no checksum");
  const std::string stored = doc["checksum"].get<std::string>();
  json body = doc;
  body.erase("checksum");
  if (checksumOf(body) != stored) return bad("checksum mismatch (edited or damaged)");

  CacheEntry e;
  Fields top{doc, "$"};
  e.created = top.str("created");
  e.wall_us = top.u64("wall_us");
  e.run_seed = top.u64("run_seed");
  const json* key = top.get("key", json::value_t::object);
  const json* cells = top.get("cells", json::value_t::array);
  if (!top.error.empty()) return bad(top.error);
  Fields k{*key, "$.key"};
  e.key.hostname = k.str("hostname");
  e.key.driver = k.str("driver");
  e.key.cuda_visible_devices = k.str("cuda_visible_devices");
  e.key.cuda_device_order = k.str("cuda_device_order");
  const json* gpus = k.get("gpus", json::value_t::array);
  if (!k.error.empty()) return bad(k.error);
  for (size_t i = 0; i < gpus->size(); ++i) {
    Fields g{(*gpus)[i], "$.key.gpus[" + std::to_string(i) + "]"};
    CacheKey::Gpu gpu{g.str("uuid"), g.str("bus_id")};
    if (!g.error.empty()) return bad(g.error);
    e.key.gpus.push_back(std::move(gpu));
  }
  for (size_t i = 0; i < cells->size(); ++i) {
    Fields c{(*cells)[i], "$.cells[" + std::to_string(i) + "]"};
    CellReport r;
    const std::string method = c.str("method");
    const int64_t src = c.i64("src");
    const int64_t dst = c.i64("dst");
    r.spec.bytes = c.u64("bytes");
    r.result.seed = c.u64("seed");
    r.claimed = c.boolean("claimed");
    const std::string verdict = c.str("verdict");
    const std::string path = c.str("path");
    r.result.wrong = c.u64("wrong");
    r.result.words = c.u64("words");
    r.result.first_bad = c.u64("first_bad");
    r.result.time_us = c.u64("time_us");
    r.result.error = c.str("error");
    if (!c.error.empty()) return bad(c.error);
    auto m = parseMethod(method);
    auto v = parseVerdict(verdict);
    auto p = parsePath(path);
    if (!m || !v || !p) return bad(c.where + ": unknown method, verdict or path");
    if (src < 0 || dst < 0 || src >= 1024 || dst >= 1024) return bad(c.where + ": GPU ordinal out of range");
    r.spec.method = *m;
    r.spec.src = static_cast<int>(src);
    r.spec.dst = static_cast<int>(dst);
    r.spec.seed = r.result.seed;
    r.spec.id = static_cast<uint32_t>(i);
    r.result.id = r.spec.id;
    r.result.verdict = *v;
    r.result.path = *p;
    e.cells.push_back(std::move(r));
  }
  return e;
}

CacheLookup lookupCache(const std::string& path, const CacheKey& key, const std::vector<CellSpec>& wanted) {
  CacheLookup out;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 && errno == ENOENT) {
    out.state = CacheState::kMissing;
    return out;
  }
  // Another user's file (or one others may write) could hold any verdict, forged or hiding a real corruption.
  if (Status trusted = checkCacheOwner(path); !trusted.isOk()) {
    out.state = CacheState::kInvalid;
    out.why = trusted.message() + "; ignored";
    return out;
  }
  auto text = readTextFile(path, kMaxCacheBytes);
  if (!text.isOk()) {
    out.state = CacheState::kInvalid;
    out.why = text.status().message();
    return out;
  }
  auto entry = decodeCache(*text);
  if (!entry.isOk()) {
    out.state = CacheState::kInvalid;
    out.why = entry.status().message();
    return out;
  }
  out.entry = std::move(entry).value();
  if (std::string diff = keyDifference(key, out.entry.key); !diff.empty()) {
    out.state = CacheState::kMismatch;
    out.why = "written for another machine or configuration (" + diff + ")";
    return out;
  }
  for (const CellSpec& w : wanted) {
    const CellReport* found = nullptr;
    for (const CellReport& c : out.entry.cells) {
      if (c.spec.method == w.method && c.spec.src == w.src && c.spec.dst == w.dst && c.spec.bytes == w.bytes) {
        found = &c;
        break;
      }
    }
    if (found == nullptr) {
      out.state = CacheState::kIncomplete;
      out.why = "no cached result for " + std::string(methodName(w.method)) + " " + std::to_string(w.src) + "->" +
                std::to_string(w.dst) + " at " + std::to_string(w.bytes) + " bytes";
      out.cells.clear();
      return out;
    }
    CellReport r = *found;
    r.spec.id = w.id;
    r.result.id = w.id;
    out.cells.push_back(std::move(r));
  }
  out.state = CacheState::kHit;
  return out;
}

Status writeCache(const std::string& path, const CacheEntry& entry) {
  // The one way output files are written: a temporary beside the cache, renamed into place, no symlink followed.
  return writeTextFile(path, encodeCache(entry));
}

std::string defaultCacheDir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg == '/') return std::string(xdg) + "/peerlab";
  const char* home = std::getenv("HOME");
  if (home && *home == '/') return std::string(home) + "/.cache/peerlab";
  // Without HOME (slurmd's health checks and prologs run so): root's system cache, else the account's home.
  if (::geteuid() == 0) return "/var/cache/peerlab";
  struct passwd pw {};
  struct passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (::getpwuid_r(::geteuid(), &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr && found->pw_dir &&
      found->pw_dir[0] == '/') {
    return std::string(found->pw_dir) + "/.cache/peerlab";
  }
  return "";
}

std::string defaultCachePath() {
  const std::string dir = defaultCacheDir();
  return dir.empty() ? std::string() : dir + "/probe.json";
}

Status checkCacheOwner(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return PEERLAB_INVALID_ARGUMENT(path + ": " + std::strerror(errno));
  if (S_ISLNK(st.st_mode)) return PEERLAB_INVALID_ARGUMENT(path + ": a symlink, not a cache file of this user");
  if (st.st_uid != ::geteuid()) {
    return PEERLAB_INVALID_ARGUMENT(path + ": owned by uid " + std::to_string(st.st_uid) + ", not by this user (uid " +
                                    std::to_string(::geteuid()) + ")");
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return PEERLAB_INVALID_ARGUMENT(path + ": writable by other users (mode " + mode + ")");
  }
  return Status::ok();
}

Status makePrivateCacheDir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path parent = fs::path(dir).parent_path();
  if (!parent.empty() && !fs::exists(parent, ec)) {
    fs::create_directories(parent, ec);
    if (ec) return PEERLAB_INVALID_ARGUMENT("cannot create directory " + parent.string() + ": " + ec.message());
  }
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return PEERLAB_INVALID_ARGUMENT("cannot create directory " + dir + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return PEERLAB_INVALID_ARGUMENT(dir + ": " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) return PEERLAB_INVALID_ARGUMENT(dir + ": not a directory (a cache directory is one)");
  if (st.st_uid != ::geteuid()) {
    return PEERLAB_INVALID_ARGUMENT(dir + ": owned by uid " + std::to_string(st.st_uid) + ", not by this user (uid " +
                                    std::to_string(::geteuid()) + "): the probe cache lives in a directory of its own");
  }
  // Ours: nobody else may see or put files in it.
  if ((st.st_mode & 0777) != 0700 && ::chmod(dir.c_str(), 0700) != 0) {
    return PEERLAB_INVALID_ARGUMENT(dir + ": cannot make it private (chmod 0700): " + std::strerror(errno));
  }
  return Status::ok();
}

Status checkCachePath(const std::string& path, bool create_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty()) {
    return PEERLAB_INVALID_ARGUMENT(
        "no cache directory ($XDG_CACHE_HOME and $HOME are not set and the account has no home directory)");
  }
  // The default place is a private directory of this user's; a --cache file elsewhere is held to its owner alone.
  if (fs::path(path).parent_path() == fs::path(defaultCacheDir()) && create_dir) {
    PEERLAB_RETURN_IF_ERROR(makePrivateCacheDir(defaultCacheDir()));
  }
  if (fs::is_directory(path, ec)) return PEERLAB_INVALID_ARGUMENT(path + ": is a directory, not a cache file");
  if (fs::exists(path, ec) && ::access(path.c_str(), R_OK | W_OK) != 0) {
    return PEERLAB_INVALID_ARGUMENT(path + ": cannot read and write: " + std::strerror(errno));
  }
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::exists(dir, ec)) {
    if (!create_dir) return PEERLAB_INVALID_ARGUMENT(path + ": directory " + dir.string() + " does not exist");
    fs::create_directories(dir, ec);
    if (ec) return PEERLAB_INVALID_ARGUMENT(path + ": cannot create directory " + dir.string() + ": " + ec.message());
  }
  if (!fs::is_directory(dir, ec)) return PEERLAB_INVALID_ARGUMENT(path + ": " + dir.string() + " is not a directory");
  if (::access(dir.c_str(), W_OK) != 0) {
    return PEERLAB_INVALID_ARGUMENT(path + ": directory " + dir.string() + " is not writable");
  }
  return Status::ok();
}

}  // namespace peerlab::probe
