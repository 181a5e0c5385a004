#pragma once
/// One-sided transfers between two processes through NIXL (its UCX backend) or UCX's UCP directly, both loaded at run
/// time (nixl_api.h, ucx_api.h). An Endpoint registers this process's regions, checks that the library really
/// handles GPU memory as GPU memory before anything moves (the capability check), trades its metadata with the peer
/// over peerlab's Bootstrap, and then prepares, posts and completes READ / WRITE transfers.
///
/// One library per process: NIXL carries a UCX of its own, and two copies of UCX in one process break each other.
///
/// Completion: a transfer is posted from the host and finishes asynchronously. wait() offers three ways to learn of
/// it - spin on the status (what NIXL's examples do), poll with sleeps in between (the caller's CPU is mostly free),
/// or block while the endpoint's progress thread polls - and StreamCompletion (completion.h) delivers the end of a
/// transfer into a CUDA stream instead of a host thread.

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "reference/core/bootstrap.h"
#include "reference/core/deadline.h"
#include "reference/core/status.h"

namespace peerlab::transport {

enum class Library : uint8_t { kNixl = 0, kUcx = 1 };
/// "nixl", "ucx".
std::string_view libraryName(Library library);
std::optional<Library> parseLibrary(std::string_view name);

/// The library's file as found on peerlab's search path (nixl_api.h / ucx_api.h), without loading it; `found` false
/// with the search described when it is not there.
struct Found {
  bool found = false;
  std::string path;
  std::string how;
  bool cuda_module = false;  ///< UCX: ucx/libuct_cuda.so beside libucp (NIXL: its bundled UCX's)
  /// "NIXL: /x/libnixl_capi.so (PEERLAB_NIXL_DIR=/x)" or "NIXL not found (PEERLAB_NIXL_DIR=/x)".
  std::string describe(Library library) const;
};
Found findLibrary(Library library);

enum class Op : uint8_t { kWrite = 0, kRead = 1 };
enum class MemoryKind : uint8_t { kHost = 0, kDevice = 1 };

/// A buffer this process offers to its peer (and uses as the local side of transfers).
struct Region {
  void* ptr = nullptr;
  size_t bytes = 0;
  MemoryKind kind = MemoryKind::kDevice;
  int device = -1;  ///< CUDA ordinal for device memory
};

/// What the peer offered, as this process sees it.
struct RemoteRegion {
  uint64_t addr = 0;
  uint64_t bytes = 0;
  MemoryKind kind = MemoryKind::kDevice;
  int device = -1;
};

/// The reason an endpoint over a UCX that treats GPU memory as host memory gives.
inline constexpr std::string_view kUcxNoCudaReason =
    "UCX without CUDA support: GPU memory would be treated as host memory";

/// What a library reported about itself and about the regions it registered; the capability check judges it.
struct CapabilityReport {
  Library library = Library::kUcx;
  std::string version;             ///< UCX's version ("1.22.0"; for NIXL: its bundled UCX's, when asked)
  bool context_known = false;      ///< ucp_context_query answered the memory types (NIXL: of its bundled UCX)
  uint64_t context_types = 0;      ///< bit per ucs_memory_type_t the UCP context supports
  std::vector<int> region_types;   ///< ucp_mem_query's memory type per device region (ucs_memory_type_t)
  bool backend_lists_vram = true;  ///< NIXL: the UCX plugin lists VRAM among its memory types
  int backend_status = 0;          ///< NIXL: creating the UCX backend (0 ok)
  int register_status = 0;         ///< NIXL: registering the regions (0 ok)
  int prepare_status = 0;          ///< NIXL: preparing the local descriptor list (0 ok)
  bool has_device_regions = false;
};
/// The capability check: ok when device memory will move as device memory; `unavailable` with the reason in words
/// otherwise ("UCX without CUDA support: GPU memory would be treated as host memory (context memory types: host;
/// the GPU buffer registered as host)").
Status judgeCapability(const CapabilityReport& report);
/// "host, cuda" from a memory-type bit mask.
std::string memoryTypesText(uint64_t mask);

/// How a host thread learns that a transfer finished.
enum class WaitMode : uint8_t {
  kSpin = 0,            ///< poll the status in a loop (NIXL's own examples): lowest latency, one core busy
  kYield = 1,           ///< poll, sleeping between polls after a short spin: the caller's core is mostly free
  kProgressThread = 2,  ///< block on a condition variable while the endpoint's progress thread polls
};
std::string_view waitModeName(WaitMode mode);
std::optional<WaitMode> parseWaitMode(std::string_view name);

/// The default EndpointOptions::nixl_descriptor_bytes.
inline constexpr size_t kNixlDefaultDescriptorBytes = 0;
/// Descriptors one NIXL transfer is split into at most (larger pieces beyond that).
inline constexpr size_t kNixlMaxDescriptors = 64;

struct EndpointOptions {
  Library library = Library::kUcx;
  int peer = -1;                ///< bootstrap rank of the other process
  std::vector<Region> regions;  ///< all of one MemoryKind
  Deadline deadline = Deadline::afterMs(60'000);
  bool progress_thread = false;  ///< start the progress thread (needed by kProgressThread waits and StreamCompletion)
  int progress_device = -1;      ///< the CUDA device the progress thread makes current (-1: none)
  /// NIXL: a transfer of more than this many bytes goes as several descriptors of at most this size in one request,
  /// which NIXL's UCX backend keeps in flight together; 0: one descriptor per transfer (docs/transport.md).
  size_t nixl_descriptor_bytes = kNixlDefaultDescriptorBytes;
  /// NIXL: start NIXL's own progress thread (what nixl_capi_create_agent does). Off, the calls that test a transfer
  /// progress UCX themselves and the endpoint's progress thread does it while idle (docs/transport.md has the
  /// measurements); it starts anyway without progress_thread, and with NIXL versions that lack
  /// nixl_capi_create_configured_agent.
  bool nixl_progress_thread = false;
  /// NIXL: UCX backend parameters set over the plugin's defaults, e.g. {"num_workers", "2"}.
  std::vector<std::pair<std::string, std::string>> nixl_backend_params;
};

/// One transfer between a local and a remote region.
struct Transfer {
  Op op = Op::kWrite;
  int local = 0;
  size_t local_offset = 0;
  int remote = 0;
  size_t remote_offset = 0;
  size_t bytes = 0;
  bool notify = false;  ///< the peer counts a notification once the data is in place (notifications())
};

using RequestId = uint32_t;
/// A posted transfer; tickets of one endpoint increase by one per post, starting at 1.
using Ticket = uint64_t;

/// Where the time of one post went (host clock).
struct PostTiming {
  double post_us = 0;  ///< the post call itself
};

class Endpoint {
 public:
  /// Loads the library, runs the capability check on this side, trades capabilities, metadata and the region lists
  /// with `options.peer` over `boot` (both sides call it), and connects. `unavailable` when either side cannot move
  /// device memory as device memory or the library is missing: the message says which side and why. Every bootstrap
  /// call is bounded by options.deadline.
  static StatusOr<std::unique_ptr<Endpoint>> connect(Bootstrap& boot, const EndpointOptions& options);
  virtual ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  Library library() const { return library_; }
  const CapabilityReport& capability() const { return report_; }
  const std::vector<RemoteRegion>& remote() const { return remote_; }
  /// "UCX 1.22.0 /path/libucp.so.0", "NIXL /path/libnixl_capi.so".
  const std::string& description() const { return description_; }

  /// Builds what posting `t` needs once (NIXL: descriptor lists and a transfer request; UCX: nothing), so that it
  /// can be posted many times. `invalid_argument` for a region or range outside what the two sides offered.
  StatusOr<RequestId> prepare(const Transfer& t);
  Status release(RequestId id);
  /// Posts a prepared transfer; one post per request may be outstanding.
  StatusOr<Ticket> post(RequestId id, PostTiming* timing = nullptr);
  /// Progresses the library and tells whether the transfer finished (a failed transfer is an error).
  StatusOr<bool> test(Ticket ticket);
  /// Waits for `ticket` in `mode` until `deadline` (`timeout` naming the transfer).
  Status wait(Ticket ticket, WaitMode mode, Deadline deadline);
  /// Notifications received from the peer so far (progresses the library).
  StatusOr<uint64_t> notifications();
  /// Waits until notifications() >= count.
  Status waitNotifications(uint64_t count, WaitMode mode, Deadline deadline);
  /// The highest ticket t such that every ticket <= t finished, as the progress thread last saw it (0 before).
  uint64_t completedPrefix() const;
  /// Watches `ticket` from the progress thread (it must be running): completedPrefix() moves past it once done.
  Status watch(Ticket ticket);
  /// Called by the progress thread whenever completedPrefix() grows.
  void onPrefix(std::function<void(uint64_t)> fn);

 protected:
  Endpoint(Library library, int peer) : library_(library), peer_(peer) {}
  // Library side, always called with mu_ held.
  virtual StatusOr<RequestId> prepareLocked(const Transfer& t) = 0;
  virtual Status releaseLocked(RequestId id) = 0;
  virtual Status postLocked(RequestId id) = 0;
  /// true: the transfer of request `id` finished; an error: it failed.
  virtual StatusOr<bool> testLocked(RequestId id) = 0;
  virtual StatusOr<uint64_t> notificationsLocked() = 0;
  /// Called by the progress thread while it has nothing to watch: progress the library for the peer's sake.
  virtual void idleLocked() {}
  /// Stops the progress thread; derived destructors call it before tearing the library down.
  void stopProgress();
  Status startProgress();
  Status checkTransfer(const Transfer& t) const;

  Library library_;
  int peer_;
  CapabilityReport report_;
  std::vector<Region> local_;
  std::vector<RemoteRegion> remote_;
  std::string description_;
  mutable std::mutex mu_;  // every library call

 private:
  struct Posted {
    RequestId id = 0;
    bool done = false;
    Status failure;
  };
  StatusOr<bool> testHeld(Ticket ticket);
  void progressLoop();

  std::map<Ticket, Posted> posted_;  // outstanding and finished-but-not-collected posts
  std::map<RequestId, Ticket> in_flight_;
  Ticket next_ticket_ = 1;
  uint64_t prefix_ = 0;       // every ticket <= prefix_ finished (progress thread's view)
  std::set<Ticket> watched_;  // watch(): collected by the progress thread once the prefix passed them
  std::set<Ticket> waiting_;  // a thread blocks in wait(kProgressThread) for these
  std::function<void(uint64_t)> on_prefix_;
  std::condition_variable cv_;
  std::thread progress_;
  bool stop_ = false;
  int device_ = -1;
};

/// Connects the UCX or NIXL endpoint (the implementations behind Endpoint::connect).
StatusOr<std::unique_ptr<Endpoint>> connectUcx(Bootstrap& boot, const EndpointOptions& options);
StatusOr<std::unique_ptr<Endpoint>> connectNixl(Bootstrap& boot, const EndpointOptions& options);

/// The descriptors a NIXL transfer of `bytes` goes as with EndpointOptions::nixl_descriptor_bytes = `limit`:
/// {offset, length} pieces of equal size, the last one shorter, at most kNixlMaxDescriptors (larger pieces beyond);
/// one piece (possibly empty) when limit is 0 or not exceeded.
std::vector<std::pair<size_t, size_t>> nixlDescriptorPieces(size_t bytes, size_t limit);

namespace detail {
/// Sends `bytes` to `peer` and receives the peer's blob (length first), both bounded by `deadline`.
StatusOr<std::vector<uint8_t>> tradeBlob(Bootstrap& boot, int peer, const std::vector<uint8_t>& bytes,
                                         Deadline deadline);
/// Both sides' capability verdicts: ok when both are; otherwise `unavailable` naming the side(s) and why.
Status agreeCapability(Bootstrap& boot, int peer, const Status& mine, Deadline deadline);
}  // namespace detail

}  // namespace peerlab::transport
