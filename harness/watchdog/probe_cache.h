#pragma once
/// The probe's verdict cache: one JSON file holding the last probe's cells, keyed by hostname, GPU UUIDs and bus ids,
/// driver version, CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER. The file carries a format name, a version and an
/// FNV-1a 64 checksum of its canonical content, so a truncated, hand-edited or foreign file is detected; such a file
/// is reported, ignored and rewritten, never trusted.
///
///   {"format": "peerlab.probe.cache", "version": 1, "key": {...}, "created": "...", "wall_us": N, "run_seed": N,
///    "cells": [{"method", "src", "dst", "bytes", "seed", "claimed", "verdict", "path", "wrong", "words",
///               "first_bad", "time_us", "error"}, ...],
///    "checksum": "fnv1a64:<16 hex digits of the dump of every other key>"}

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "reference/core/status.h"
#include "reference/probe/probe.h"

namespace peerlab::probe {

inline constexpr int kCacheVersion = 1;
inline constexpr const char* kCacheFormat = "peerlab.probe.cache";

struct CacheKey {
  struct Gpu {
    std::string uuid;
    std::string bus_id;
  };
  std::string hostname;
  std::string driver;
  std::string cuda_visible_devices;  ///< "<unset>" when the variable is not set
  std::string cuda_device_order;     ///< "<unset>" when the variable is not set
  std::vector<Gpu> gpus;             ///< by CUDA ordinal
};

/// This machine's key: GPUs and driver from the worker's inventory, hostname and environment from this process.
CacheKey cacheKeyFor(const Inventory& inv);
/// One line naming the first field that differs ("CUDA_VISIBLE_DEVICES \"0,1\" != \"<unset>\""); empty when equal.
std::string keyDifference(const CacheKey& want, const CacheKey& have);

struct CacheEntry {
  CacheKey key;
  std::string created;  ///< ISO 8601 UTC
  uint64_t wall_us = 0;
  uint64_t run_seed = 0;
  std::vector<CellReport> cells;
};

std::string encodeCache(const CacheEntry& entry);
/// Parses and verifies format, version, checksum and structure; `invalid_argument` with one line otherwise.
StatusOr<CacheEntry> decodeCache(std::string_view text);

enum class CacheState {
  kHit,         ///< valid, same key, every wanted cell present
  kMissing,     ///< no file
  kInvalid,     ///< unreadable, truncated, malformed, wrong format or version, bad checksum
  kMismatch,    ///< valid but written for another machine or configuration
  kIncomplete,  ///< valid and same key, but some wanted cell (method, pair, size) is not in it
};

struct CacheLookup {
  CacheState state = CacheState::kMissing;
  std::string why;  ///< one line for every state but kHit and kMissing
  CacheEntry entry;
  std::vector<CellReport> cells;  ///< kHit: the cached report for each wanted cell, in the order asked
};

/// Looks up `wanted` cells (matched by method, source, destination and size; ids and seeds come from `wanted`'s
/// order and the cached run) in the cache file at `path`. A file checkCacheOwner() does not trust is kInvalid (and
/// never read), whatever it holds.
CacheLookup lookupCache(const std::string& path, const CacheKey& key, const std::vector<CellSpec>& wanted);

/// Writes the cache atomically (temporary file + rename), creating its directory when missing.
Status writeCache(const std::string& path, const CacheEntry& entry);

/// Largest cache file read (a 16-GPU machine's full matrix is a few hundred KiB).
inline constexpr size_t kMaxCacheBytes = size_t{16} << 20;

/// The directory of this user's probe cache: $XDG_CACHE_HOME/peerlab, else $HOME/.cache/peerlab, else (no HOME, as
/// under slurmd) /var/cache/peerlab for root and the account's home directory's .cache/peerlab for others; "" when
/// none is known. Never a directory other users share.
std::string defaultCacheDir();
/// defaultCacheDir()/probe.json, "" when there is no such directory.
std::string defaultCachePath();
/// Creates `dir` with mode 0700 (its parents as needed) and holds it to being this user's: a directory owned by
/// another user is refused, one of this user's that others may enter is made 0700.
Status makePrivateCacheDir(const std::string& dir);
/// A cache file is trusted only when it is a plain file (not a symlink) owned by the effective user and not writable
/// by group or others; `invalid_argument` says why not ("owned by uid 65534, not by this user (uid 0)").
Status checkCacheOwner(const std::string& path);
/// Checks that the cache can live at `path`: not a directory, readable and writable when it exists, and its directory
/// exists (or can be created when `create_dir`) and is writable; the default directory is made private
/// (makePrivateCacheDir).
Status checkCachePath(const std::string& path, bool create_dir);

/// 64-bit FNV-1a.
uint64_t fnv1a64(std::string_view bytes);

}  // namespace peerlab::probe
