#pragma once
/// CUDA IPC handles: export device buffers to the other processes of this host and map theirs, either as legacy
/// runtime IPC handles (cudaIpcGetMemHandle / cudaIpcOpenMemHandle) or as cuMem (VMM) allocations shared through
/// POSIX file descriptors (cuMemExportToShareableHandle -> Bootstrap::sendFds -> cuMemImportFromShareableHandle).
///
/// Typical use (symmetric memory: every rank maps every rank's region):
///
///   PEERLAB_ASSIGN_OR_RETURN(auto sym, ipc::SymmetricMemory::create(boot, device, bytes, ipc::HandleKind::kVmmFd,
///                                                                   deadline));
///   float* peer = static_cast<float*>(sym.ptr(peer_rank));   // valid on `device` in this process
///   ...
///   PEERLAB_RETURN_IF_ERROR(sym.close(boot, deadline));     // collective: unmap imports, barrier, free mine
///
/// Teardown order: every importer closes its mappings, then a barrier, then every exporter frees its allocation.
/// SymmetricMemory::close and PeerBuffers::close do this; a destructor alone is not collective.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "reference/core/bootstrap.h"
#include "reference/core/deadline.h"
#include "reference/core/owned.h"
#include "reference/core/status.h"

namespace peerlab::ipc {

/// How a buffer is shared.
enum class HandleKind : uint32_t {
  kLegacy = 1,  ///< cudaIpcMemHandle_t of a cudaMalloc allocation (64 bytes inside the descriptor)
  kVmmFd = 2,   ///< cuMem allocation exported as a POSIX file descriptor, passed with SCM_RIGHTS
};

/// "legacy" or "vmm_fd".
std::string_view handleKindName(HandleKind kind);
/// Parses "legacy" / "vmm_fd" (also "vmm"); `invalid_argument` naming the text otherwise.
StatusOr<HandleKind> parseHandleKind(std::string_view text);

inline constexpr uint32_t kDescriptorMagic = 0x43504950u;  // "PIPC" little endian
inline constexpr uint32_t kDescriptorVersion = 1;

/// Everything an importer needs to map an exported range, except the file descriptor of a kVmmFd export (which
/// travels separately with Bootstrap::sendFds). Trivially copyable: it is sent through Bootstrap as bytes.
struct Descriptor {
  uint32_t magic = kDescriptorMagic;
  uint32_t version = kDescriptorVersion;
  HandleKind kind = HandleKind::kLegacy;
  int32_t owner_rank = -1;    ///< bootstrap rank of the exporter
  int32_t owner_device = -1;  ///< CUDA ordinal of the memory in the exporter's process
  int32_t owner_pid = 0;      ///< exporter's process id (part of the buffer identity)
  uint64_t host_id = 0;       ///< equal for processes of the same host (thisHostId())
  uint64_t buffer_id = 0;     ///< CU_POINTER_ATTRIBUTE_BUFFER_ID of the exporter's allocation
  uint64_t offset = 0;        ///< start of the exported range from the start of the allocation
  uint64_t bytes = 0;         ///< length of the exported range
  uint64_t alloc_bytes = 0;   ///< length of the whole allocation (kVmmFd: a multiple of the granularity)
  /// The exporter's pointer to the range: never an identity (diagnostics; the mapping itself when importer and
  /// exporter are one process).
  uint64_t exporter_address = 0;
  unsigned char device_uuid[16] = {};  ///< UUID of the owning GPU
  cudaIpcMemHandle_t legacy{};         ///< kLegacy: handle of the whole allocation
};
static_assert(std::is_trivially_copyable_v<Descriptor>);

/// Size of a descriptor on the wire.
inline constexpr size_t kDescriptorWireBytes = sizeof(Descriptor);

/// Writes the wire image of `d` (kDescriptorWireBytes) to `out`.
void encodeDescriptor(const Descriptor& d, std::span<std::byte, kDescriptorWireBytes> out);
/// Reads a descriptor from its wire image and validates it; `invalid_argument` saying what is wrong.
StatusOr<Descriptor> decodeDescriptor(std::span<const std::byte> wire);
/// Checks magic, version, kind, range (offset + bytes <= alloc_bytes) and owner fields.
Status validateDescriptor(const Descriptor& d);
/// One line for logs: "vmm_fd rank 1 dev 1 buffer 42 [0, 1048576) of 2097152".
std::string describeDescriptor(const Descriptor& d);

/// Identity of this host: a hash of the host name and the kernel boot id (same for every process of the host).
uint64_t thisHostId();

/// A device allocation that can be exported. Use through ExportableBuffer (`buf.get().ptr`).
struct ExportAllocation {
  void* ptr = nullptr;     ///< start of the allocation in this process
  size_t bytes = 0;        ///< bytes requested
  size_t alloc_bytes = 0;  ///< bytes allocated (kVmmFd: rounded up to the granularity)
  int device = -1;         ///< owning device ordinal
  HandleKind kind = HandleKind::kLegacy;
  uint64_t buffer_id = 0;             ///< CU_POINTER_ATTRIBUTE_BUFFER_ID
  unsigned long long vmm_handle = 0;  ///< CUmemGenericAllocationHandle (kVmmFd)
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
};
struct ExportTraits {
  using Handle = ExportAllocation;
  static Handle null() noexcept { return {}; }
  static bool isNull(const Handle& h) noexcept { return h.ptr == nullptr; }
  /// kVmmFd: unmap, release the allocation handle, free the address range; kLegacy: cudaFree.
  static void destroy(const Handle& h) noexcept;
};
/// Move-only owner of an exportable allocation.
using ExportableBuffer = Owned<ExportTraits>;

/// Options of allocExportable.
struct AllocOptions {
  /// Devices of THIS process that access the buffer besides its owner (single-process multi-GPU use); kVmmFd sets
  /// cuMemSetAccess for them, kLegacy enables nothing (use peer access). Other processes set their own access.
  std::vector<int> access_devices;
  /// kVmmFd: preferred start address of the reservation (cuMemAddressReserve hint; may be ignored by the driver).
  void* address_hint = nullptr;
};

/// `bytes` (> 0) of device memory on `device` that can be exported as `kind`. The caller's current device is kept.
/// `unavailable` when the device cannot export this kind (no VMM or no POSIX fd handle support).
StatusOr<ExportableBuffer> allocExportable(int device, size_t bytes, HandleKind kind, const AllocOptions& options = {});

/// Descriptor of the whole allocation, for bootstrap rank `rank`. kLegacy calls cudaIpcGetMemHandle.
StatusOr<Descriptor> describe(const ExportAllocation& buffer, int rank);
/// Descriptor of a sub-range [offset, offset + bytes) of the allocation.
StatusOr<Descriptor> describeRange(const ExportAllocation& buffer, size_t offset, size_t bytes, int rank);
/// kLegacy descriptor of any cudaMalloc memory [ptr, ptr + bytes) (e.g. a DeviceBuffer), found by its allocation.
StatusOr<Descriptor> describeDevicePointer(const void* ptr, size_t bytes, int rank);
/// kVmmFd: a new POSIX file descriptor for the allocation (cuMemExportToShareableHandle); the caller closes it.
StatusOr<int> exportFd(const ExportAllocation& buffer);

/// A peer's exported range mapped into this process. Use through ImportedBuffer (`imp.get().ptr`).
struct ImportMapping {
  void* ptr = nullptr;  ///< the exported range (base + descriptor offset), valid on the access devices
  size_t bytes = 0;     ///< length of the exported range
  HandleKind kind = HandleKind::kLegacy;
  int peer = -1;                      ///< exporter's rank
  uint64_t buffer_id = 0;             ///< exporter's buffer id
  int device = -1;                    ///< device whose context opened the mapping (kLegacy) / first access device
  void* base = nullptr;               ///< start of the mapping (the whole allocation)
  size_t mapped_bytes = 0;            ///< length of the mapping
  unsigned long long vmm_handle = 0;  ///< imported CUmemGenericAllocationHandle (kVmmFd)
  bool same_process = false;  ///< kLegacy from this very process: ptr is the exporter's pointer, nothing was opened
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
};
struct ImportTraits {
  using Handle = ImportMapping;
  static Handle null() noexcept { return {}; }
  static bool isNull(const Handle& h) noexcept { return h.base == nullptr; }
  /// kVmmFd: unmap, release the imported handle, free the address range; kLegacy: cudaIpcCloseMemHandle.
  static void destroy(const Handle& h) noexcept;
};
/// Move-only owner of an imported mapping.
using ImportedBuffer = Owned<ImportTraits>;

/// Where imported memory is mapped.
struct ImportOptions {
  int device = 0;                   ///< device of this process that opens the mapping and accesses it
  std::vector<int> access_devices;  ///< more devices of this process given access (kVmmFd; kLegacy: peer access)
};

/// Maps the range `d` describes. kVmmFd needs the exporter's `fd` (not taken: the caller still closes it); kLegacy
/// ignores it (-1). `unavailable` for a descriptor of another host; `invalid_argument` for a bad descriptor.
/// A kLegacy descriptor exported by this same process (single-process multi-GPU use) maps to the exporter's own
/// pointer (CUDA cannot open its own IPC handles); access from another device then needs peer access enabled.
StatusOr<ImportedBuffer> importBuffer(const Descriptor& d, int fd, const ImportOptions& options);

namespace detail {
struct PeerBuffersBuilder;
}  // namespace detail

/// Every rank's buffer after an exchange, indexed by rank; this rank's own buffer is at its own index (not owned).
class PeerBuffers {
 public:
  PeerBuffers() = default;
  PeerBuffers(PeerBuffers&&) noexcept = default;
  PeerBuffers& operator=(PeerBuffers&&) noexcept = default;
  ~PeerBuffers() = default;  ///< unmaps the imports (not collective: prefer close())

  int size() const { return static_cast<int>(descriptors_.size()); }
  int rank() const { return rank_; }
  /// Rank r's range, mapped in this process (r == rank(): the local buffer); nullptr once closed.
  void* ptr(int r) const { return ptrs_.at(static_cast<size_t>(r)); }
  size_t bytes(int r) const { return descriptors_.at(static_cast<size_t>(r)).bytes; }
  const Descriptor& descriptor(int r) const { return descriptors_.at(static_cast<size_t>(r)); }
  /// All ranks' pointers by rank (e.g. to copy into a device-side table).
  const std::vector<void*>& ptrs() const { return ptrs_; }
  /// Collective: unmaps every import, then a barrier, so that after it returns every exporter may free its buffer.
  /// Imports are unmapped even when the barrier fails (its error is returned).
  Status close(Bootstrap& boot, Deadline deadline);
  /// Unmaps the imports without the barrier (after a peer failed).
  void closeLocal() noexcept;

 private:
  friend struct detail::PeerBuffersBuilder;
  int rank_ = -1;
  std::vector<Descriptor> descriptors_;
  std::vector<ImportedBuffer> imports_;  // empty owner at this rank's index
  std::vector<void*> ptrs_;
};

/// Collective over `boot`: exports `mine` (kind from the allocation) and imports every other rank's buffer.
/// Ranks may pass buffers of different sizes, but all the same kind. Order: one allgather of the descriptors, then
/// (kVmmFd) file descriptors pair by pair in one global order (fdExchangeSchedule), so it cannot deadlock.
/// `unavailable` when a peer is on another host.
StatusOr<PeerBuffers> exchange(Bootstrap& boot, const ExportAllocation& mine, const ImportOptions& options,
                               Deadline deadline);

/// One step of the file-descriptor exchange: send this rank's fd to `peer`, or receive `peer`'s.
struct FdStep {
  int peer = -1;
  bool send = false;
};
/// The steps of rank `me` of `size`: for every pair (i < j) in lexicographic order, i sends then j sends. Every
/// rank walks the same global order, so the earliest unfinished pair always has both ranks at it: no deadlock.
std::vector<FdStep> fdExchangeSchedule(int me, int size);

/// Symmetric memory: every rank allocates `bytes` on its device, exports it, and maps every peer's region.
class SymmetricMemory {
 public:
  /// Collective. `options.access_devices` adds local devices given access to every region.
  static StatusOr<SymmetricMemory> create(Bootstrap& boot, int device, size_t bytes, HandleKind kind, Deadline deadline,
                                          const AllocOptions& options = {});

  SymmetricMemory(SymmetricMemory&&) noexcept = default;
  SymmetricMemory& operator=(SymmetricMemory&&) noexcept = default;
  /// Not collective: unmaps imports, frees the local region. Call close() for the ordered collective teardown.
  ~SymmetricMemory();

  int rank() const { return peers_.rank(); }
  int size() const { return peers_.size(); }
  size_t bytes() const { return bytes_; }
  int device() const { return local_.get().device; }
  /// Rank r's region as seen from this process (r == rank(): the local region).
  void* ptr(int r) const { return peers_.ptr(r); }
  void* localPtr() const { return local_.get().ptr; }
  const std::vector<void*>& ptrs() const { return peers_.ptrs(); }
  const PeerBuffers& peers() const { return peers_; }
  const ExportAllocation& local() const { return local_.get(); }
  /// Collective teardown: unmap every import, barrier, free the local region.
  Status close(Bootstrap& boot, Deadline deadline);

 private:
  SymmetricMemory(ExportableBuffer local, PeerBuffers peers, size_t bytes)
      : local_(std::move(local)), peers_(std::move(peers)), bytes_(bytes) {}
  // Declaration order matters: peers_ (imports) are destroyed before local_ (the export).
  ExportableBuffer local_;
  PeerBuffers peers_;
  size_t bytes_ = 0;
};

/// Process-wide counts of handle operations, so tests can check that every open was closed.
struct Counters {
  int64_t exports_allocated = 0;  ///< allocExportable successes
  int64_t exports_freed = 0;      ///< ExportTraits::destroy
  int64_t legacy_opens = 0;       ///< cudaIpcOpenMemHandle successes
  int64_t legacy_closes = 0;      ///< cudaIpcCloseMemHandle calls
  int64_t vmm_imports = 0;        ///< cuMemImportFromShareableHandle successes
  int64_t vmm_releases = 0;       ///< imported handles released
  int64_t fds_exported = 0;       ///< cuMemExportToShareableHandle successes (fds handed to callers)

  int64_t opens() const { return legacy_opens + vmm_imports; }
  int64_t closes() const { return legacy_closes + vmm_releases; }
  /// Every import closed and every export freed.
  bool balanced() const { return opens() == closes() && exports_allocated == exports_freed; }
  std::string toString() const;
};
/// A snapshot of the process-wide counters.
Counters counters();

}  // namespace peerlab::ipc
