#include "harness/faults/cache_fault.h"

#include <cstdio>

#include "harness/faults/fault_spec.h"
#include "harness/watchdog/probe_cache.h"

namespace peerlab::faults {

std::string defaultCachePath() {
  return probe::defaultCachePath();
}

StatusOr<std::string> makeCacheStale(const std::string& path, const std::string& bytes, uint64_t seed) {
  auto decoded = probe::decodeCache(bytes);
  if (!decoded.isOk()) {
    return PEERLAB_INVALID_ARGUMENT(path + ": not a valid probe cache, so it cannot be made stale (" +
                                    decoded.status().message() + ")");
  }
  probe::CacheEntry entry = *decoded;
  uint64_t state = mix64(seed ^ 0x57a1eULL);
  auto draw = [&] { return state = mix64(state); };
  // Another driver and other GPUs: written by the same tool, checksum valid, but not for this machine.
  const std::string old_driver = entry.key.driver;
  entry.key.driver = "1." + std::to_string(draw() % 1000) + ".stale";
  for (auto& gpu : entry.key.gpus) {
    char uuid[64];
    const uint64_t a = draw(), b = draw();
    std::snprintf(uuid, sizeof(uuid), "GPU-%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(a >> 32),
                  static_cast<unsigned>(a >> 16) & 0xffff, static_cast<unsigned>(a) & 0xffff,
                  static_cast<unsigned>(b >> 48), static_cast<unsigned long long>(b & 0xffffffffffffULL));
    gpu.uuid = uuid;
  }
  entry.created = "2000-01-01T00:00:00Z";
  PEERLAB_RETURN_IF_ERROR(probe::writeCache(path, entry));
  return path + ": rewritten as stale (driver \"" + old_driver + "\" -> \"" + entry.key.driver + "\", " +
         std::to_string(entry.key.gpus.size()) + " GPU UUIDs replaced, created " + entry.created + ")";
}

}  // namespace peerlab::faults
