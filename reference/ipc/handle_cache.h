#pragma once
/// A cache of imported IPC mappings, keyed by what identifies an exported range: the exporting rank and process,
/// the exporter's allocation (CU_POINTER_ATTRIBUTE_BUFFER_ID, never reused within a process) and the offset.
/// Never keyed by address: an address freed and reused by the exporter belongs to a new buffer id, so it misses.

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <tuple>
#include <utility>

#include "reference/core/fd.h"
#include "reference/core/status.h"
#include "reference/ipc/ipc.h"

namespace peerlab::ipc {

/// Identity of an exported range.
struct CacheKey {
  int peer = -1;
  int32_t owner_pid = 0;
  HandleKind kind = HandleKind::kLegacy;
  uint64_t buffer_id = 0;
  uint64_t offset = 0;

  auto tie() const { return std::tie(peer, owner_pid, kind, buffer_id, offset); }
  bool operator==(const CacheKey& o) const { return tie() == o.tie(); }
  bool operator<(const CacheKey& o) const { return tie() < o.tie(); }
};

/// The key of the range a descriptor names (its exporter_address is deliberately not part of it).
inline CacheKey cacheKeyFor(const Descriptor& d) {
  return CacheKey{d.owner_rank, d.owner_pid, d.kind, d.buffer_id, d.offset};
}

/// The cache logic over any mapping type, so it can be tested without a GPU. `Mapping` is a move-only owner whose
/// destructor closes the mapping (ImportedBuffer in production).
template <class Mapping>
class BasicHandleCache {
 public:
  /// Opens a mapping for a descriptor; `fd` is the exporter's fd for kVmmFd (-1 otherwise), not taken.
  using Opener = std::function<StatusOr<Mapping>(const Descriptor& d, int fd)>;

  explicit BasicHandleCache(Opener open) : open_(std::move(open)) {}
  BasicHandleCache(BasicHandleCache&&) noexcept = default;
  BasicHandleCache& operator=(BasicHandleCache&&) noexcept = default;

  /// The mapping of `d`'s range, opened on a miss. Takes ownership of `fd` (kVmmFd; -1 for none): it is closed
  /// before this returns, on a hit and on a miss. An entry of the same key that covers fewer bytes is replaced.
  StatusOr<const Mapping*> get(const Descriptor& d, int fd = -1) {
    Fd closer(fd);
    PEERLAB_RETURN_IF_ERROR(validateDescriptor(d));
    const CacheKey key = cacheKeyFor(d);
    auto it = entries_.find(key);
    if (it != entries_.end() && it->second.bytes >= d.bytes) {
      ++hits_;
      return &it->second.mapping;
    }
    ++misses_;
    if (d.kind == HandleKind::kVmmFd && fd < 0) {
      return PEERLAB_INVALID_ARGUMENT("handle cache miss for " + describeDescriptor(d) + " needs the exporter's fd");
    }
    auto opened = open_(d, fd);
    if (!opened.isOk()) return std::move(opened).status();
    if (it != entries_.end()) entries_.erase(it);
    auto [pos, inserted] = entries_.emplace(key, Entry{std::move(opened).value(), d.bytes});
    return &pos->second.mapping;
  }

  /// The cached mapping of `d`'s range, or nullptr (no lookup statistics, no open).
  const Mapping* find(const Descriptor& d) const {
    auto it = entries_.find(cacheKeyFor(d));
    return it != entries_.end() && it->second.bytes >= d.bytes ? &it->second.mapping : nullptr;
  }
  /// Closes the mapping of `d`'s range; false when none was cached.
  bool erase(const Descriptor& d) { return entries_.erase(cacheKeyFor(d)) > 0; }
  /// Closes every mapping of `peer`'s buffers (before that peer frees them, or after it died); returns how many.
  size_t erasePeer(int peer) {
    size_t n = 0;
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->first.peer == peer) {
        it = entries_.erase(it);
        ++n;
      } else {
        ++it;
      }
    }
    return n;
  }
  /// Closes every mapping.
  void clear() { entries_.clear(); }

  size_t size() const { return entries_.size(); }
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }

 private:
  struct Entry {
    Mapping mapping;
    uint64_t bytes = 0;
  };
  Opener open_;
  std::map<CacheKey, Entry> entries_;
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
};

/// The production cache: imports with importBuffer(d, fd, options).
using HandleCache = BasicHandleCache<ImportedBuffer>;

/// A cache that maps into `options.device` (and `options.access_devices`).
HandleCache makeHandleCache(const ImportOptions& options);

}  // namespace peerlab::ipc
