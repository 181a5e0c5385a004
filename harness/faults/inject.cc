#include "harness/faults/inject.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <set>

#include "harness/faults/cache_fault.h"
#include "harness/layout/layout.h"
#include "harness/watchdog/probe_cache.h"
#include "reference/core/files.h"

namespace peerlab::faults {

namespace fs = std::filesystem;

StatusOr<std::string> interposerPath(const std::string& self_exe) {
  std::vector<std::string> tried;
  auto usable = [&](const fs::path& p) {
    tried.push_back(p.string());
    std::error_code ec;
    return fs::is_regular_file(p, ec);
  };
  if (const char* env = std::getenv(kEnvLibrary); env != nullptr && *env != '\0') {
    fs::path p = fs::absolute(env);
    if (usable(p)) return p.lexically_normal().string();
    return PEERLAB_INVALID_ARGUMENT(std::string(kEnvLibrary) + "=" + env + ": no such file");
  }
  const std::string name = "libpeerlab_faults.so";
  // lib/ of the tree the binary is in (build or installed), then beside it.
  if (!self_exe.empty()) {
    for (const std::string& dir : layout::libraryDirs(self_exe)) {
      const fs::path p = fs::path(dir) / name;
      if (usable(p)) return fs::weakly_canonical(p).string();
    }
  }
  std::string where;
  for (const auto& t : tried)
    where += (where.empty() ? "" : ", ") + t;
  return PEERLAB_INVALID_ARGUMENT("cannot find " + name + " (looked at " + where + "; set " + kEnvLibrary + ")");
}

std::string appendPreload(const std::string& existing, const std::string& lib) {
  std::vector<std::string> parts;
  std::string cur;
  // LD_PRELOAD separates entries with ':' or spaces.
  for (char c : existing) {
    if (c == ':' || c == ' ') {
      if (!cur.empty()) parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) parts.push_back(cur);
  std::string out;
  bool present = false;
  for (const auto& p : parts) {
    if (p == lib) present = true;
    out += (out.empty() ? "" : ":") + p;
  }
  if (!present) out += (out.empty() ? "" : ":") + lib;
  return out;
}

std::vector<std::pair<std::string, std::string>> injectEnvironment(const InjectOptions& options,
                                                                   const std::string& current_preload) {
  std::vector<std::pair<std::string, std::string>> env;
  env.emplace_back(kEnvFault, options.spec.canonical());
  if (!options.interposer.empty()) env.emplace_back("LD_PRELOAD", appendPreload(current_preload, options.interposer));
  if (options.verbose) env.emplace_back(kEnvVerbose, "1");
  if (!options.stats.empty()) env.emplace_back(kEnvStats, options.stats);
  return env;
}

std::string cachePathFor(const FaultSpec& spec, const std::string& default_path) {
  return spec.path.empty() ? default_path : spec.path;
}

namespace {

// The file a cache fault may damage: a probe cache of this user's (a plain file it owns that reads as one), never
// any other file a path= names.
StatusOr<std::string> readProbeCache(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    return PEERLAB_INVALID_ARGUMENT(path + ": no probe cache there (run peerlab probe once first, or give path=)");
  }
  const std::string refused = "; cache_corrupt and cache_stale touch only probe caches, so it is left as it is";
  if (Status owned = probe::checkCacheOwner(path); !owned.isOk())
    return PEERLAB_INVALID_ARGUMENT(owned.message() + refused);
  PEERLAB_ASSIGN_OR_RETURN(std::string bytes, readTextFile(path, probe::kMaxCacheBytes));
  if (auto cache = probe::decodeCache(bytes); !cache.isOk()) {
    return PEERLAB_INVALID_ARGUMENT(path + ": not a probe cache (" + cache.status().message() + ")" + refused);
  }
  return bytes;
}

}  // namespace

StatusOr<std::string> applyCacheFault(const FaultSpec& spec, const std::string& path) {
  PEERLAB_ASSIGN_OR_RETURN(std::string bytes, readProbeCache(path));
  uint64_t state = mix64(spec.seed ^ 0xcac4eULL);
  auto draw = [&] { return state = mix64(state); };
  std::string what;
  if (spec.kind == FaultKind::kCacheStale) {
    PEERLAB_ASSIGN_OR_RETURN(what, makeCacheStale(path, bytes, spec.seed));
    return what;
  }
  if (spec.kind != FaultKind::kCacheCorrupt)
    return PEERLAB_INVALID_ARGUMENT("fault '" + spec.name + "' is no file fault");
  switch (spec.damage) {
    case CacheDamage::kFlip: {
      if (bytes.empty()) {
        bytes.assign(1, static_cast<char>(draw() % 255 + 1));
        what = "wrote one seeded byte into the empty file";
        break;
      }
      const size_t flips = std::max<size_t>(1, std::min<size_t>(8, bytes.size() / 64));
      std::set<size_t> used;
      while (used.size() < flips)
        used.insert(draw() % bytes.size());
      for (size_t off : used)
        bytes[off] = static_cast<char>(bytes[off] ^ static_cast<char>(draw() % 255 + 1));
      what = "flipped " + std::to_string(flips) + " byte(s) starting at offset " + std::to_string(*used.begin());
      break;
    }
    case CacheDamage::kTruncate: {
      const size_t keep = bytes.empty() ? 0 : draw() % bytes.size();
      what = "truncated from " + std::to_string(bytes.size()) + " to " + std::to_string(keep) + " bytes";
      bytes.resize(keep);
      break;
    }
    case CacheDamage::kEmpty:
      what = "emptied (" + std::to_string(bytes.size()) + " bytes removed)";
      bytes.clear();
      break;
    case CacheDamage::kGarbage: {
      const size_t n = std::max<size_t>(bytes.size(), 16);
      bytes.resize(n);
      for (auto& c : bytes)
        c = static_cast<char>(draw() & 0xff);
      what = "replaced by " + std::to_string(n) + " seeded bytes";
      break;
    }
  }
  PEERLAB_RETURN_IF_ERROR(writeTextFile(path, bytes));
  return path + ": " + what;
}

}  // namespace peerlab::faults
