#pragma once
/// The verified P2P probe: methods, cells, the driver's claims and the verdict logic, independent of where the cells
/// run. The probe never trusts cudaDeviceCanAccessPeer: every cell writes a seeded pattern into poisoned memory and
/// checks it on the GPU that owns the destination.

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "reference/core/status.h"

namespace peerlab::probe {

/// How the data moves from the source GPU to the destination GPU.
enum class Method : uint8_t {
  kCeWrite = 0,    ///< copy engine: copy issued on the source's stream pushes into the destination's memory
  kCeRead = 1,     ///< copy engine: copy issued on the destination's stream pulls from the source's memory
  kSmStore = 2,    ///< kernel on the source stores through the peer pointer into the destination's memory
  kSmLoad = 3,     ///< kernel on the destination loads through the peer pointer from the source's memory
  kAtomic = 4,     ///< kernel on the source does atomicAdd_system into the destination's memory
  kIpcLegacy = 5,  ///< cudaIpcMemHandle of the destination's owner, opened in another process on the source device
  kIpcVmm = 6,     ///< cuMemCreate + POSIX fd (SCM_RIGHTS) imported and mapped in another process for the source
  kNixlWrite = 7,  ///< NIXL (UCX backend) WRITE from the source GPU's process into the destination GPU's process
  kNixlRead = 8,   ///< NIXL READ issued by the destination GPU's process from the source GPU's process
  kUcxPut = 9,     ///< UCP put (RMA) of registered CUDA memory from the source's process into the destination's
  kUcxGet = 10,    ///< UCP get (RMA) issued by the destination's process from the source's registered CUDA memory
};
/// Every method, the bound the wire protocol checks.
/// The run-file suite of the verified probe's rows (one per cell, and the matrix's wall time).
inline constexpr const char* kResultSuite = "probe";

inline constexpr int kMethodCount = 11;
/// The CUDA mechanisms: what `--methods all` selects.
inline constexpr std::array<Method, 7> kAllMethods = {Method::kCeWrite, Method::kCeRead, Method::kSmStore,
                                                      Method::kSmLoad,  Method::kAtomic, Method::kIpcLegacy,
                                                      Method::kIpcVmm};
/// The transports loaded at run time (NIXL, UCX): what `--methods transport` selects. Each library runs in its own
/// pair of worker processes.
inline constexpr std::array<Method, 4> kTransportMethods = {Method::kNixlWrite, Method::kNixlRead, Method::kUcxPut,
                                                            Method::kUcxGet};

/// "ce_write", "ce_read", "sm_store", "sm_load", "atomic", "ipc_legacy", "ipc_vmm", "nixl_write", "nixl_read",
/// "ucx_put", "ucx_get".
std::string_view methodName(Method m);
/// One line saying what the method does.
std::string_view methodSummary(Method m);
/// What the driver's claim for the method is based on.
std::string_view claimBasis(Method m);
std::optional<Method> parseMethod(std::string_view name);
/// The method needs a second process (the destination's owner exports, another process writes).
bool isIpcMethod(Method m);
/// The method reads a pattern from a source buffer (every method but atomic and the IPC ones, which write the
/// pattern directly).
bool readsSourceBuffer(Method m);
/// The method's data movement is issued by the source GPU (true) or the destination GPU (false).
bool pushedBySource(Method m);
/// The method copies with a copy engine, which the driver stages through the host when there is no peer mapping.
bool usesCopyEngine(Method m);
/// The method goes through NIXL or UCX (a pair of transport workers per library).
bool isTransportMethod(Method m);
/// "nixl" or "ucx" for a transport method, "" otherwise.
std::string_view transportLibraryOf(Method m);

/// Outcome of one cell.
enum class Verdict : uint8_t {
  kOk = 0,           ///< the pattern arrived intact, checked on the destination's owner
  kCorrupt = 1,      ///< the data arrived wrong: wrong-word count and first bad offset
  kHang = 2,         ///< the deadline passed; the worker was killed
  kError = 3,        ///< a CUDA error, or the worker crashed or answered garbage
  kUnsupported = 4,  ///< the driver refused (no peer mapping, handle type not supported)
};
std::string_view verdictName(Verdict v);
std::optional<Verdict> parseVerdict(std::string_view name);

/// How the data moved, as far as the probe can tell.
enum class Path : uint8_t {
  kNone = 0,    ///< nothing moved (the cell failed before)
  kPeer = 1,    ///< direct peer-to-peer (peer mapping enabled)
  kStaged = 2,  ///< the driver staged the copy through host memory: the data arrived, but not over P2P
  kIpc = 3,     ///< through a mapping imported in another process
};
std::string_view pathName(Path p);
std::optional<Path> parsePath(std::string_view name);

/// One cell of the matrix: a method, an ordered pair of GPUs and a size.
struct CellSpec {
  uint32_t id = 0;  ///< index in the probe's cell list
  Method method = Method::kCeWrite;
  int src = -1;
  int dst = -1;
  uint64_t bytes = 0;
  uint64_t seed = 0;  ///< pattern seed (cellSeed)
};

/// Pattern seed for one cell: differs per run, ordered pair, method and size.
uint64_t cellSeed(uint64_t run, Method method, uint64_t bytes, int src, int dst);

/// Verification counts elements of this many bytes ("words").
inline constexpr size_t kWordBytes = 8;

/// What the workers measured for one cell.
struct CellResult {
  uint32_t id = 0;
  uint64_t seed = 0;  ///< echo of the cell's seed (a worker answering with another seed answered garbage)
  Verdict verdict = Verdict::kError;
  Path path = Path::kNone;
  uint64_t wrong = 0;               ///< wrong 8-byte words
  uint64_t words = 0;               ///< 8-byte words checked
  uint64_t first_bad = UINT64_MAX;  ///< byte offset of the first wrong byte
  uint64_t time_us = 0;             ///< time the cell took in the worker(s)
  std::string error;                ///< why, for everything but ok and corrupt
};

/// One GPU as the worker saw it, plus the driver's per-device capability claims.
struct GpuInfo {
  int ordinal = -1;
  std::string uuid;
  std::string bus_id;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
  uint64_t total_memory = 0;
  bool vmm = false;        ///< CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
  bool posix_fd = false;   ///< CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
  bool ipc_event = false;  ///< cudaDevAttrIpcEventSupport
};

/// What a worker reports before any context exists: versions, GPUs and the driver's peer claims.
struct Inventory {
  std::string error;  ///< non-empty: no usable CUDA device, and why
  int driver_api = 0;
  int runtime_api = 0;
  std::string driver_release;  ///< "580.159.04" from /proc/driver/nvidia/version, or empty
  std::vector<GpuInfo> gpus;
  std::vector<uint8_t> can_access;     ///< [src * n + dst]: cudaDeviceCanAccessPeer(src, dst)
  std::vector<uint8_t> native_atomic;  ///< [src * n + dst]: cudaDevP2PAttrNativeAtomicSupported(src, dst)

  int count() const { return static_cast<int>(gpus.size()); }
  bool canAccess(int src, int dst) const;
  bool nativeAtomic(int src, int dst) const;
  /// "580.159.04", or the driver API version ("13.0") when the release is unknown.
  std::string driverString() const;
};

/// The driver's claim for a cell: does the driver say this method works from `src` into `dst`? For a transport
/// method the claim is the library's, known only once its capability check ran: false here (the runner sets it).
bool claimFor(const Inventory& inv, Method m, int src, int dst);

/// A cell with the driver's claim and the measured result.
struct CellReport {
  CellSpec spec;
  bool claimed = false;
  CellResult result;
};

/// The verdict logic: what a claim and a measured result mean together.
struct Judgement {
  bool lie = false;           ///< the driver claims yes and the data did not verify
  bool unclaimed_ok = false;  ///< the driver says no, yet the data moved over a peer or IPC path
  bool staged = false;        ///< verified, but the driver staged the copy through the host (not P2P)
};
Judgement judge(bool claimed, const CellResult& result);
/// True when every claimed-yes cell verified (the probe's exit code 0).
bool claimsHold(const std::vector<CellReport>& cells);

using Pair = std::pair<int, int>;
/// Every ordered pair of `n` GPUs, ordered by (dst - src) mod n so that a full matrix packs into n - 1 rounds.
std::vector<Pair> allPairs(int n);
/// Groups pairs into rounds in which no GPU is a source twice or a destination twice, so that the cells of a round
/// use disjoint buffers and streams and run concurrently.
std::vector<std::vector<Pair>> planRounds(const std::vector<Pair>& pairs);

/// "4096", "4K", "4KiB", "64M", "1G" (binary units).
StatusOr<uint64_t> parseBytes(std::string_view text);
/// Sizes a cell can use: at least 16 bytes, a multiple of 16, at most 4 GiB.
Status validateCellBytes(uint64_t bytes);
/// "0-1,2-3", "0:1", "0->1" (source and destination, the one syntax of every --pairs); duplicates dropped.
StatusOr<std::vector<Pair>> parsePairs(std::string_view text);
/// "ce_write,sm_load", "all" (the CUDA mechanisms), "transport" (NIXL and UCX), or groups and names mixed.
StatusOr<std::vector<Method>> parseMethods(std::string_view text);
/// "5" or "5s" (seconds), "500ms", "0.5s"; positive, at most one hour.
StatusOr<std::chrono::milliseconds> parseDuration(std::string_view text);
/// "4 KiB", "64 MiB", "100 B".
std::string formatBytes(uint64_t bytes);

}  // namespace peerlab::probe
