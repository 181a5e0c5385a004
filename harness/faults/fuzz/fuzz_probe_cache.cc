// Fuzz target: the probe cache reader (reference/probe decodeCache and lookupCache on a file).
// Any input: a status or a lookup state, never a crash. A cache decodeCache accepts must encode and decode again
// to the same cells.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "harness/faults/fuzz/fuzz_util.h"
#include "harness/watchdog/probe_cache.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace peerlab;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto entry = probe::decodeCache(text);
  if (entry.isOk()) {
    auto again = probe::decodeCache(probe::encodeCache(*entry));
    if (!again.isOk()) fuzz::invariantFailed("an accepted cache does not decode after encodeCache");
    if (again->cells.size() != entry->cells.size() || again->key.gpus.size() != entry->key.gpus.size()) {
      fuzz::invariantFailed("encodeCache -> decodeCache changed the cache");
    }
  }
  // The lookup the probe does, against a fixed two-GPU key and a few wanted cells.
  const std::string& path = fuzz::writeInputFile(data, size, ".json");
  probe::CacheKey key;
  key.hostname = "fuzz";
  key.driver = "580.159.04";
  key.cuda_visible_devices = "<unset>";
  key.cuda_device_order = "<unset>";
  key.gpus = {{"GPU-00000000-0000-0000-0000-000000000000", "0000:03:00.0"},
              {"GPU-11111111-1111-1111-1111-111111111111", "0000:04:00.0"}};
  std::vector<probe::CellSpec> wanted;
  uint32_t id = 0;
  for (probe::Method m : {probe::Method::kCeWrite, probe::Method::kSmLoad, probe::Method::kIpcVmm}) {
    for (int src = 0; src < 2; ++src) {
      probe::CellSpec c;
      c.id = id++;
      c.method = m;
      c.src = src;
      c.dst = 1 - src;
      c.bytes = 4096;
      wanted.push_back(c);
    }
  }
  probe::CacheLookup hit = probe::lookupCache(path, key, wanted);
  if (hit.state == probe::CacheState::kHit && hit.cells.size() != wanted.size()) {
    fuzz::invariantFailed("a cache hit without a report for every wanted cell");
  }
  if (hit.state != probe::CacheState::kHit && hit.state != probe::CacheState::kMissing && hit.why.empty()) {
    fuzz::invariantFailed("a cache that is not used without a reason");
  }
  return 0;
}
