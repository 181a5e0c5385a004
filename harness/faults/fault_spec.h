#pragma once
/// Fault specifications: `NAME[:key=value,...]` as given to `peerlab inject --fault` and passed to the interposer
/// (libpeerlab_faults.so) in PEERLAB_FAULT. Parsing is strict: an unknown fault, an unknown key, a repeated key or a
/// malformed value is an error with a one-line message naming it.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "reference/core/status.h"

namespace peerlab::faults {

/// Environment the interposer reads.
inline constexpr const char* kEnvFault = "PEERLAB_FAULT";             ///< the spec (canonical form)
inline constexpr const char* kEnvVerbose = "PEERLAB_FAULTS_VERBOSE";  ///< "1": one stderr line per action
inline constexpr const char* kEnvStats = "PEERLAB_FAULTS_STATS";      ///< file: one JSON line per action
inline constexpr const char* kEnvLibrary = "PEERLAB_FAULTS_LIB";      ///< override of the interposer path

enum class FaultKind {
  kNone,
  kLie,
  kDropWrites,
  kBitflip,
  kEnableError,
  kIpcOpenFail,
  kCopyHang,
  kCopySlow,
  kSignalWithhold,
  kSignalLate,
  kKillAfterExport,
  kCacheCorrupt,
  kCacheStale,
};

/// Which copies a copy fault applies to, by the device whose stream issues the copy.
enum class Side {
  kAny,    ///< every peer copy
  kWrite,  ///< issued on the source device's stream: the copy pushes into peer memory (ce_write)
  kRead,   ///< issued on the destination device's stream: the copy pulls from peer memory (ce_read)
};

/// Which enable of a pair fails (enable_error).
enum class Direction {
  kBoth,
  kFirst,   ///< a->b for pair=a-b, else lower ordinal enabling access to a higher one
  kSecond,  ///< b->a for pair=a-b, else higher ordinal enabling access to a lower one
};

/// Which IPC flavour an IPC fault applies to.
enum class IpcKind {
  kBoth,
  kLegacy,  ///< cudaIpc*/cuIpc* memory handles
  kVmm,     ///< cuMemExportToShareableHandle / cuMemImportFromShareableHandle (+ cuMemMap)
};

/// When a copy_hang stall is let go.
enum class Release {
  kTeardown,  ///< when the program frees memory, destroys a stream or context, or exits
  kExit,      ///< only when the process exits
  kTimer,     ///< release_ms after the stall was enqueued
};

/// What drop_writes redirects.
enum class DropTarget {
  kAll,
  kIpc,   ///< legacy IPC mappings and imported VMM mappings become local scratch
  kCopy,  ///< copies into peer memory land in local scratch
};

/// How cache_corrupt damages the probe cache file.
enum class CacheDamage {
  kFlip,      ///< flips seeded bytes (the checksum no longer matches)
  kTruncate,  ///< cuts the file at a seeded length
  kEmpty,     ///< leaves an empty file
  kGarbage,   ///< replaces the content with seeded bytes
};

/// A parsed fault. Fields a fault does not use keep their defaults.
struct FaultSpec {
  FaultKind kind = FaultKind::kNone;
  std::string name = "none";

  // Limits common to every fault.
  uint64_t seed = 0;
  int64_t count = -1;  ///< at most this many injections (-1: no limit)
  int64_t after = 0;   ///< the first `after` eligible calls pass untouched
  int pair_a = -1;     ///< pair=a-b: only calls from device a to device b (-1: any pair)
  int pair_b = -1;
  int rank = -1;  ///< only in the process whose rank (PEERLAB_RANK) is this (-1: every process)

  // Per fault.
  Side side = Side::kAny;
  bool side_given = false;
  std::optional<uint64_t> offset;  ///< bitflip: byte offset (default: seeded)
  int bit = -1;                    ///< bitflip: bit 0-7 (default: seeded)
  int flips = 4;                   ///< lie: bytes corrupted per copy
  int percent = 12;                ///< copy_slow: bytes copied again, in percent of each copy
  int code = 0;                    ///< enable_error / ipc_open_fail: the error code returned
  Direction direction = Direction::kBoth;
  IpcKind ipc = IpcKind::kBoth;
  Release release = Release::kTeardown;
  int64_t ms = 0;      ///< signal_late: delay; copy_hang: release_ms; kill_after_export: delay_ms
  int64_t value = -1;  ///< signal_withhold / signal_late: only writes of this value (-1: any)
  DropTarget drop = DropTarget::kAll;
  CacheDamage damage = CacheDamage::kFlip;
  std::string path;  ///< cache_*: the cache file (default: the probe's default cache path)

  /// The key=value pairs as given, in order (for the canonical form).
  std::vector<std::pair<std::string, std::string>> given;

  /// `name:key=value,...` with the keys in the order given; parses back to the same spec.
  std::string canonical() const;
  /// True for faults the interposer acts on (everything but none and the cache faults).
  bool needsInterposer() const;
  /// True for faults `peerlab inject` applies to a file before starting the command.
  bool isCacheFault() const { return kind == FaultKind::kCacheCorrupt || kind == FaultKind::kCacheStale; }
};

/// One parameter of a fault, for `peerlab inject --list` and error messages.
struct ParamInfo {
  std::string key;
  std::string value;  ///< "N", "a-b", "205|217|704|711", ...
  std::string help;
};

struct FaultInfo {
  FaultKind kind;
  std::string name;
  std::string summary;
  std::string path;  ///< which calls the fault acts on (runtime hook, driver entry point, file)
  std::vector<ParamInfo> params;
};

/// Every fault, in the order `peerlab inject --list` prints them.
const std::vector<FaultInfo>& catalog();
/// The catalog entry for a name, or nullptr.
const FaultInfo* findFault(std::string_view name);

/// Parses `NAME[:key=value,...]`. Errors are `invalid_argument` with one line naming the fault and the key.
StatusOr<FaultSpec> parseFaultSpec(std::string_view text);

/// The text `peerlab inject --list` prints: one block per fault with its parameters.
std::string listText();

/// splitmix64: the seeded generator every fault draws offsets and bits from.
uint64_t mix64(uint64_t x);

}  // namespace peerlab::faults
