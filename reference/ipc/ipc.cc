#include "reference/ipc/ipc.h"

#include <cuda.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "reference/core/check.h"
#include "reference/core/fd.h"
#include "reference/core/scoped.h"

namespace peerlab::ipc {

namespace {

struct AtomicCounters {
  std::atomic<int64_t> exports_allocated{0};
  std::atomic<int64_t> exports_freed{0};
  std::atomic<int64_t> legacy_opens{0};
  std::atomic<int64_t> legacy_closes{0};
  std::atomic<int64_t> vmm_imports{0};
  std::atomic<int64_t> vmm_releases{0};
  std::atomic<int64_t> fds_exported{0};
};

AtomicCounters& globalCounters() {
  static AtomicCounters c;
  return c;
}

// Buffer ids for allocations the driver gives no CU_POINTER_ATTRIBUTE_BUFFER_ID for: process-unique, never reused,
// and kept apart from driver ids by the top bit.
uint64_t syntheticBufferId() {
  static std::atomic<uint64_t> next{1};
  return (uint64_t{1} << 63) | next.fetch_add(1);
}

uint64_t fnv1a(uint64_t h, std::string_view s) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

StatusOr<uint64_t> bufferIdOf(CUdeviceptr p) {
  unsigned long long id = 0;
  CUresult r = PEERLAB_DRIVER_CALL(cuPointerGetAttribute, &id, CU_POINTER_ATTRIBUTE_BUFFER_ID, p);
  if (r != CUDA_SUCCESS) {
    return PEERLAB_STATUS(codeForCuResult(r), "cuPointerGetAttribute(BUFFER_ID): " + describeCuResult(r));
  }
  return static_cast<uint64_t>(id);
}

Status deviceUuid(int device, unsigned char (&out)[16]) {
  CUdevice dev = 0;
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CU(cuDeviceGet, &dev, device));
  CUuuid uuid{};
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CU(cuDeviceGetUuid, &uuid, dev));
  std::memcpy(out, uuid.bytes, sizeof(out));
  return Status::ok();
}

Status checkDevice(int device) {
  int count = 0;
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaGetDeviceCount(&count)));
  if (device < 0 || device >= count) {
    return PEERLAB_INVALID_ARGUMENT("device " + std::to_string(device) + " is not visible (" + std::to_string(count) +
                                    " devices)");
  }
  return Status::ok();
}

Status checkVmmSupport(int device) {
  CUdevice dev = 0;
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CU(cuDeviceGet, &dev, device));
  int vmm = 0;
  PEERLAB_RETURN_IF_ERROR(
      PEERLAB_CU(cuDeviceGetAttribute, &vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev));
  if (!vmm) return PEERLAB_UNAVAILABLE("device " + std::to_string(device) + " has no virtual memory management");
  int fd = 0;
  PEERLAB_RETURN_IF_ERROR(
      PEERLAB_CU(cuDeviceGetAttribute, &fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev));
  if (!fd) return PEERLAB_UNAVAILABLE("device " + std::to_string(device) + " cannot export POSIX fd handles");
  return Status::ok();
}

// Access descriptors for `device` plus `more`, without duplicates.
std::vector<CUmemAccessDesc> accessFor(int device, const std::vector<int>& more) {
  std::vector<int> devs{device};
  for (int d : more) {
    if (std::find(devs.begin(), devs.end(), d) == devs.end()) devs.push_back(d);
  }
  std::vector<CUmemAccessDesc> out;
  for (int d : devs) {
    CUmemAccessDesc a{};
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = d;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    out.push_back(a);
  }
  return out;
}

// Waits for the device's work before memory it may still use is unmapped (cudaFree does the same implicitly).
void syncDeviceQuietly(int device) noexcept {
  if (device < 0) return;
  auto scoped = ScopedDevice::make(device);
  if (!scoped.isOk()) return;
  (void)cudaDeviceSynchronize();
  (void)cudaGetLastError();
}

// Unmaps [va, va + bytes), releases `handle`, frees the address range; each step runs only if the earlier ones made
// it meaningful, and errors are ignored (destroy paths).
void unmapReleaseFree(CUdeviceptr va, size_t bytes, CUmemGenericAllocationHandle handle, bool mapped) noexcept {
  if (mapped) (void)PEERLAB_DRIVER_CALL(cuMemUnmap, va, bytes);
  if (handle) (void)PEERLAB_DRIVER_CALL(cuMemRelease, handle);
  if (va) (void)PEERLAB_DRIVER_CALL(cuMemAddressFree, va, bytes);
}

}  // namespace

std::string_view handleKindName(HandleKind kind) {
  switch (kind) {
    case HandleKind::kLegacy:
      return "legacy";
    case HandleKind::kVmmFd:
      return "vmm_fd";
  }
  return "unknown";
}

StatusOr<HandleKind> parseHandleKind(std::string_view text) {
  if (text == "legacy") return HandleKind::kLegacy;
  if (text == "vmm_fd" || text == "vmm") return HandleKind::kVmmFd;
  return PEERLAB_INVALID_ARGUMENT("unknown IPC handle kind '" + std::string(text) + "' (legacy, vmm_fd)");
}

void encodeDescriptor(const Descriptor& d, std::span<std::byte, kDescriptorWireBytes> out) {
  std::memcpy(out.data(), &d, kDescriptorWireBytes);
}

StatusOr<Descriptor> decodeDescriptor(std::span<const std::byte> wire) {
  if (wire.size() != kDescriptorWireBytes) {
    return PEERLAB_INVALID_ARGUMENT("IPC descriptor of " + std::to_string(wire.size()) + " bytes, expected " +
                                    std::to_string(kDescriptorWireBytes));
  }
  Descriptor d;
  std::memcpy(&d, wire.data(), kDescriptorWireBytes);
  PEERLAB_RETURN_IF_ERROR(validateDescriptor(d));
  return d;
}

Status validateDescriptor(const Descriptor& d) {
  if (d.magic != kDescriptorMagic) return PEERLAB_INVALID_ARGUMENT("IPC descriptor has a bad magic number");
  if (d.version != kDescriptorVersion) {
    return PEERLAB_INVALID_ARGUMENT("IPC descriptor version " + std::to_string(d.version) + ", expected " +
                                    std::to_string(kDescriptorVersion));
  }
  if (d.kind != HandleKind::kLegacy && d.kind != HandleKind::kVmmFd) {
    return PEERLAB_INVALID_ARGUMENT("IPC descriptor has unknown handle kind " +
                                    std::to_string(static_cast<uint32_t>(d.kind)));
  }
  if (d.owner_rank < 0 || d.owner_device < 0 || d.owner_pid <= 0) {
    return PEERLAB_INVALID_ARGUMENT("IPC descriptor has no owner (rank " + std::to_string(d.owner_rank) + ", device " +
                                    std::to_string(d.owner_device) + ", pid " + std::to_string(d.owner_pid) + ")");
  }
  if (d.bytes == 0 || d.offset > d.alloc_bytes || d.bytes > d.alloc_bytes - d.offset) {
    return PEERLAB_INVALID_ARGUMENT("IPC descriptor range [" + std::to_string(d.offset) + ", +" +
                                    std::to_string(d.bytes) + ") does not fit its allocation of " +
                                    std::to_string(d.alloc_bytes) + " bytes");
  }
  return Status::ok();
}

std::string describeDescriptor(const Descriptor& d) {
  return std::string(handleKindName(d.kind)) + " rank " + std::to_string(d.owner_rank) + " dev " +
         std::to_string(d.owner_device) + " pid " + std::to_string(d.owner_pid) + " buffer " +
         std::to_string(d.buffer_id) + " [" + std::to_string(d.offset) + ", " + std::to_string(d.offset + d.bytes) +
         ") of " + std::to_string(d.alloc_bytes);
}

uint64_t thisHostId() {
  static const uint64_t id = [] {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    std::string boot;
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::getline(in, boot);
    uint64_t h = fnv1a(0xcbf29ce484222325ull, host);
    h = fnv1a(h, "|");
    return fnv1a(h, boot);
  }();
  return id;
}

void ExportTraits::destroy(const ExportAllocation& h) noexcept {
  syncDeviceQuietly(h.device);
  if (h.kind == HandleKind::kVmmFd) {
    unmapReleaseFree(reinterpret_cast<CUdeviceptr>(h.ptr), h.alloc_bytes, h.vmm_handle, true);
  } else {
    auto scoped = ScopedDevice::make(h.device);
    (void)cudaFree(h.ptr);
    (void)cudaGetLastError();
  }
  globalCounters().exports_freed.fetch_add(1);
}

StatusOr<ExportableBuffer> allocExportable(int device, size_t bytes, HandleKind kind, const AllocOptions& options) {
  if (bytes == 0) return PEERLAB_INVALID_ARGUMENT("an exportable buffer needs bytes > 0");
  PEERLAB_RETURN_IF_ERROR(checkDevice(device));
  for (int d : options.access_devices)
    PEERLAB_RETURN_IF_ERROR(checkDevice(d));
  PEERLAB_ASSIGN_OR_RETURN(auto scoped, ScopedDevice::make(device));

  ExportAllocation a;
  a.bytes = bytes;
  a.device = device;
  a.kind = kind;
  if (kind == HandleKind::kLegacy) {
    void* p = nullptr;
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaMalloc(&p, bytes)));
    a.ptr = p;
    a.alloc_bytes = bytes;
    auto id = bufferIdOf(reinterpret_cast<CUdeviceptr>(p));
    a.buffer_id = id.isOk() ? *id : syntheticBufferId();
    globalCounters().exports_allocated.fetch_add(1);
    return ExportableBuffer(a);
  }
  if (kind != HandleKind::kVmmFd) return PEERLAB_INVALID_ARGUMENT("unknown IPC handle kind");

  PEERLAB_RETURN_IF_ERROR(checkVmmSupport(device));
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t granularity = 0;
  PEERLAB_RETURN_IF_ERROR(
      PEERLAB_CU(cuMemGetAllocationGranularity, &granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  if (granularity == 0) return PEERLAB_INTERNAL("cuMemGetAllocationGranularity returned 0");
  const size_t alloc = (bytes + granularity - 1) / granularity * granularity;

  CUmemGenericAllocationHandle handle = 0;
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CU(cuMemCreate, &handle, alloc, &prop, 0ull));
  CUdeviceptr va = 0;
  Status st = PEERLAB_CU(cuMemAddressReserve, &va, alloc, granularity,
                         reinterpret_cast<CUdeviceptr>(options.address_hint), 0ull);
  if (!st.isOk()) {
    unmapReleaseFree(0, alloc, handle, false);
    return st;
  }
  st = PEERLAB_CU(cuMemMap, va, alloc, size_t{0}, handle, 0ull);
  if (!st.isOk()) {
    unmapReleaseFree(va, alloc, handle, false);
    return st;
  }
  auto access = accessFor(device, options.access_devices);
  st = PEERLAB_CU(cuMemSetAccess, va, alloc, access.data(), access.size());
  if (!st.isOk()) {
    unmapReleaseFree(va, alloc, handle, true);
    return st.withContext("giving devices access to a " + std::to_string(alloc) + "-byte VMM allocation");
  }
  a.ptr = reinterpret_cast<void*>(va);
  a.alloc_bytes = alloc;
  a.vmm_handle = handle;
  auto id = bufferIdOf(va);
  a.buffer_id = id.isOk() ? *id : syntheticBufferId();
  globalCounters().exports_allocated.fetch_add(1);
  return ExportableBuffer(a);
}

StatusOr<Descriptor> describeRange(const ExportAllocation& buffer, size_t offset, size_t bytes, int rank) {
  if (buffer.ptr == nullptr) return PEERLAB_INVALID_ARGUMENT("describe: empty buffer");
  if (rank < 0) return PEERLAB_INVALID_ARGUMENT("describe: rank " + std::to_string(rank));
  if (bytes == 0 || offset > buffer.bytes || bytes > buffer.bytes - offset) {
    return PEERLAB_INVALID_ARGUMENT("describe: range [" + std::to_string(offset) + ", +" + std::to_string(bytes) +
                                    ") outside a buffer of " + std::to_string(buffer.bytes) + " bytes");
  }
  Descriptor d;
  d.kind = buffer.kind;
  d.owner_rank = rank;
  d.owner_device = buffer.device;
  d.owner_pid = static_cast<int32_t>(getpid());
  d.host_id = thisHostId();
  d.buffer_id = buffer.buffer_id;
  d.offset = offset;
  d.bytes = bytes;
  d.alloc_bytes = buffer.alloc_bytes;
  d.exporter_address = reinterpret_cast<uint64_t>(buffer.ptr) + offset;
  PEERLAB_RETURN_IF_ERROR(deviceUuid(buffer.device, d.device_uuid));
  if (buffer.kind == HandleKind::kLegacy) {
    PEERLAB_ASSIGN_OR_RETURN(auto scoped, ScopedDevice::make(buffer.device));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaIpcGetMemHandle(&d.legacy, buffer.ptr)));
  }
  return d;
}

StatusOr<Descriptor> describe(const ExportAllocation& buffer, int rank) {
  return describeRange(buffer, 0, buffer.bytes, rank);
}

StatusOr<Descriptor> describeDevicePointer(const void* ptr, size_t bytes, int rank) {
  if (ptr == nullptr || bytes == 0) return PEERLAB_INVALID_ARGUMENT("describeDevicePointer: empty range");
  cudaPointerAttributes attr{};
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaPointerGetAttributes(&attr, ptr)));
  if (attr.type != cudaMemoryTypeDevice) {
    return PEERLAB_INVALID_ARGUMENT("describeDevicePointer: the pointer is not device memory");
  }
  PEERLAB_ASSIGN_OR_RETURN(auto scoped, ScopedDevice::make(attr.device));
  CUdeviceptr base = 0;
  size_t size = 0;
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CU(cuMemGetAddressRange, &base, &size, reinterpret_cast<CUdeviceptr>(ptr)));
  ExportAllocation a;
  a.ptr = reinterpret_cast<void*>(base);
  a.bytes = size;
  a.alloc_bytes = size;
  a.device = attr.device;
  a.kind = HandleKind::kLegacy;
  PEERLAB_ASSIGN_OR_RETURN(a.buffer_id, bufferIdOf(base));
  return describeRange(a, reinterpret_cast<uintptr_t>(ptr) - base, bytes, rank);
}

StatusOr<int> exportFd(const ExportAllocation& buffer) {
  if (buffer.kind != HandleKind::kVmmFd || buffer.vmm_handle == 0) {
    return PEERLAB_INVALID_ARGUMENT("exportFd needs a vmm_fd allocation");
  }
  int fd = -1;
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CU(cuMemExportToShareableHandle, &fd,
                                     static_cast<CUmemGenericAllocationHandle>(buffer.vmm_handle),
                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0ull));
  if (fd < 0) return PEERLAB_INTERNAL("cuMemExportToShareableHandle returned no fd");
  globalCounters().fds_exported.fetch_add(1);
  return fd;
}

void ImportTraits::destroy(const ImportMapping& h) noexcept {
  if (h.same_process) return;  // nothing was opened
  syncDeviceQuietly(h.device);
  if (h.kind == HandleKind::kVmmFd) {
    unmapReleaseFree(reinterpret_cast<CUdeviceptr>(h.base), h.mapped_bytes, h.vmm_handle, true);
    globalCounters().vmm_releases.fetch_add(1);
  } else {
    auto scoped = ScopedDevice::make(h.device);
    (void)cudaIpcCloseMemHandle(h.base);
    (void)cudaGetLastError();
    globalCounters().legacy_closes.fetch_add(1);
  }
}

StatusOr<ImportedBuffer> importBuffer(const Descriptor& d, int fd, const ImportOptions& options) {
  PEERLAB_RETURN_IF_ERROR(validateDescriptor(d));
  if (d.host_id != thisHostId()) {
    return PEERLAB_UNAVAILABLE("cannot map " + describeDescriptor(d) + ": rank " + std::to_string(d.owner_rank) +
                               " is on another host");
  }
  PEERLAB_RETURN_IF_ERROR(checkDevice(options.device));
  for (int dev : options.access_devices)
    PEERLAB_RETURN_IF_ERROR(checkDevice(dev));
  PEERLAB_ASSIGN_OR_RETURN(auto scoped, ScopedDevice::make(options.device));

  ImportMapping m;
  m.bytes = d.bytes;
  m.kind = d.kind;
  m.peer = d.owner_rank;
  m.buffer_id = d.buffer_id;
  m.device = options.device;
  if (d.kind == HandleKind::kLegacy) {
    if (d.owner_pid == static_cast<int32_t>(getpid())) {
      // CUDA cannot open a handle in the process that exported it; the exporter's pointer is valid here already.
      m.same_process = true;
      m.base = reinterpret_cast<void*>(d.exporter_address - d.offset);
      m.mapped_bytes = d.alloc_bytes;
      m.ptr = reinterpret_cast<void*>(d.exporter_address);
      return ImportedBuffer(m);
    }
    void* base = nullptr;
    cudaIpcMemHandle_t handle = d.legacy;
    Status st = PEERLAB_CUDA(cudaIpcOpenMemHandle(&base, handle, cudaIpcMemLazyEnablePeerAccess));
    if (!st.isOk()) return st.withContext("opening " + describeDescriptor(d));
    globalCounters().legacy_opens.fetch_add(1);
    m.base = base;
    m.mapped_bytes = d.alloc_bytes;
    m.ptr = static_cast<char*>(base) + d.offset;
    return ImportedBuffer(m);
  }

  if (fd < 0) return PEERLAB_INVALID_ARGUMENT("importing " + describeDescriptor(d) + " needs the exporter's fd");
  CUmemGenericAllocationHandle handle = 0;
  Status st = PEERLAB_CU(cuMemImportFromShareableHandle, &handle, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  if (!st.isOk()) return st.withContext("importing " + describeDescriptor(d));
  globalCounters().vmm_imports.fetch_add(1);
  // From here a failure must still release the imported handle (and count it).
  auto fail = [&](CUdeviceptr va, bool mapped, const Status& why) {
    unmapReleaseFree(va, d.alloc_bytes, handle, mapped);
    globalCounters().vmm_releases.fetch_add(1);
    return why.withContext("mapping " + describeDescriptor(d));
  };
  CUmemAllocationProp prop{};
  st = PEERLAB_CU(cuMemGetAllocationPropertiesFromHandle, &prop, handle);
  if (!st.isOk()) return fail(0, false, st);
  size_t granularity = 0;
  st = PEERLAB_CU(cuMemGetAllocationGranularity, &granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (!st.isOk()) return fail(0, false, st);
  if (granularity == 0 || d.alloc_bytes % granularity != 0) {
    return fail(0, false,
                PEERLAB_INVALID_ARGUMENT("allocation size " + std::to_string(d.alloc_bytes) +
                                         " is not a multiple of the granularity " + std::to_string(granularity)));
  }
  CUdeviceptr va = 0;
  st = PEERLAB_CU(cuMemAddressReserve, &va, static_cast<size_t>(d.alloc_bytes), granularity, CUdeviceptr{0}, 0ull);
  if (!st.isOk()) return fail(0, false, st);
  st = PEERLAB_CU(cuMemMap, va, static_cast<size_t>(d.alloc_bytes), size_t{0}, handle, 0ull);
  if (!st.isOk()) return fail(va, false, st);
  auto access = accessFor(options.device, options.access_devices);
  st = PEERLAB_CU(cuMemSetAccess, va, static_cast<size_t>(d.alloc_bytes), access.data(), access.size());
  if (!st.isOk()) return fail(va, true, st);
  m.base = reinterpret_cast<void*>(va);
  m.mapped_bytes = d.alloc_bytes;
  m.ptr = reinterpret_cast<void*>(va + d.offset);
  m.vmm_handle = handle;
  return ImportedBuffer(m);
}

std::vector<FdStep> fdExchangeSchedule(int me, int size) {
  std::vector<FdStep> steps;
  for (int i = 0; i < size; ++i) {
    for (int j = i + 1; j < size; ++j) {
      if (me == i) {
        steps.push_back({j, true});
        steps.push_back({j, false});
      } else if (me == j) {
        steps.push_back({i, false});
        steps.push_back({i, true});
      }
    }
  }
  return steps;
}

namespace {

// Every rank contributes whether it succeeded; returns the ranks that did not ("" when none), the same on every
// rank, or the bootstrap's error.
StatusOr<std::string> failedRanks(Bootstrap& boot, bool ok, Deadline deadline) {
  const int32_t flag = ok ? 0 : 1;
  std::vector<int32_t> all(static_cast<size_t>(boot.size()));
  PEERLAB_RETURN_IF_ERROR(boot.allgather(&flag, all.data(), sizeof(flag), deadline));
  std::string failed;
  for (int r = 0; r < boot.size(); ++r) {
    if (all[static_cast<size_t>(r)] != 0) failed += (failed.empty() ? "" : ", ") + std::to_string(r);
  }
  return failed;
}

}  // namespace

namespace detail {
struct PeerBuffersBuilder {
  static StatusOr<PeerBuffers> exchange(Bootstrap& boot, const ExportAllocation& mine, const ImportOptions& options,
                                        Deadline deadline, bool symmetric);
};
}  // namespace detail

Status PeerBuffers::close(Bootstrap& boot, Deadline deadline) {
  closeLocal();
  return boot.barrier(deadline).withContext("IPC teardown barrier");
}

void PeerBuffers::closeLocal() noexcept {
  for (size_t r = 0; r < imports_.size(); ++r) {
    imports_[r].reset();
    if (static_cast<int>(r) != rank_) ptrs_[r] = nullptr;
  }
}

StatusOr<PeerBuffers> exchange(Bootstrap& boot, const ExportAllocation& mine, const ImportOptions& options,
                               Deadline deadline) {
  return detail::PeerBuffersBuilder::exchange(boot, mine, options, deadline, false);
}

StatusOr<PeerBuffers> detail::PeerBuffersBuilder::exchange(Bootstrap& boot, const ExportAllocation& mine,
                                                           const ImportOptions& options, Deadline deadline,
                                                           bool symmetric) {
  const int n = boot.size();
  const int me = boot.rank();

  // Export first; a rank that cannot export contributes an invalid descriptor so every rank stops after the
  // allgather (instead of waiting for file descriptors that will never come).
  Fd my_fd;
  Descriptor my_desc;
  Status export_status = Status::ok();
  {
    auto d = describe(mine, me);
    if (d.isOk()) {
      my_desc = *d;
      if (mine.kind == HandleKind::kVmmFd && n > 1) {
        auto fd = exportFd(mine);
        if (fd.isOk()) {
          my_fd.reset(*fd);
        } else {
          export_status = fd.status();
        }
      }
    } else {
      export_status = d.status();
    }
  }
  if (!export_status.isOk()) my_desc.magic = 0;

  std::vector<Descriptor> all(static_cast<size_t>(n));
  PEERLAB_RETURN_IF_ERROR(
      boot.allgather(&my_desc, all.data(), sizeof(Descriptor), deadline).withContext("exchanging IPC descriptors"));
  if (!export_status.isOk()) return export_status.withContext("exporting this rank's buffer");
  std::string problem;
  StatusCode problem_code = StatusCode::kInvalidArgument;
  for (int r = 0; r < n && problem.empty(); ++r) {
    const Descriptor& d = all[static_cast<size_t>(r)];
    Status v = validateDescriptor(d);
    if (!v.isOk()) {
      problem = "rank " + std::to_string(r) + " could not export its buffer (" + v.message() + ")";
      problem_code = StatusCode::kUnavailable;
    } else if (d.owner_rank != r) {
      problem = "the descriptor at rank " + std::to_string(r) + " names rank " + std::to_string(d.owner_rank);
    } else if (d.kind != mine.kind) {
      problem = "rank " + std::to_string(r) + " exports " + std::string(handleKindName(d.kind)) + ", this rank " +
                std::string(handleKindName(mine.kind));
    } else if (d.host_id != my_desc.host_id) {
      problem = "rank " + std::to_string(r) + " is on another host";
      problem_code = StatusCode::kUnavailable;
    } else if (symmetric && d.bytes != my_desc.bytes) {
      problem = "symmetric memory of different sizes: rank " + std::to_string(r) + " has " + std::to_string(d.bytes) +
                " bytes, rank " + std::to_string(me) + " " + std::to_string(my_desc.bytes);
    }
  }
  // Every rank sees the same descriptors, so every rank reaches the same verdict here.
  if (!problem.empty()) return PEERLAB_STATUS(problem_code, "IPC exchange: " + problem);

  // File descriptors, pair by pair in one global order (see fdExchangeSchedule).
  std::vector<Fd> peer_fds(static_cast<size_t>(n));
  if (mine.kind == HandleKind::kVmmFd) {
    for (const FdStep& step : fdExchangeSchedule(me, n)) {
      if (step.send) {
        PEERLAB_RETURN_IF_ERROR(boot.sendFds(step.peer, &my_fd.get(), 1, deadline)
                                    .withContext("sending the IPC fd to rank " + std::to_string(step.peer)));
      } else {
        int fd = -1;
        PEERLAB_RETURN_IF_ERROR(boot.recvFds(step.peer, &fd, 1, deadline)
                                    .withContext("receiving the IPC fd of rank " + std::to_string(step.peer)));
        peer_fds[static_cast<size_t>(step.peer)].reset(fd);
      }
    }
  }

  PeerBuffers out;
  out.rank_ = me;
  out.descriptors_ = all;
  out.imports_.resize(static_cast<size_t>(n));
  out.ptrs_.assign(static_cast<size_t>(n), nullptr);
  out.ptrs_[static_cast<size_t>(me)] = static_cast<char*>(mine.ptr) + my_desc.offset;
  Status import_status = Status::ok();
  for (int r = 0; r < n && import_status.isOk(); ++r) {
    if (r == me) continue;
    auto imp = importBuffer(all[static_cast<size_t>(r)], peer_fds[static_cast<size_t>(r)].get(), options);
    if (!imp.isOk()) {
      import_status = imp.status().withContext("importing rank " + std::to_string(r) + "'s buffer");
      break;
    }
    out.ptrs_[static_cast<size_t>(r)] = imp->get().ptr;
    out.imports_[static_cast<size_t>(r)] = std::move(imp).value();
  }
  // All ranks learn whether every import worked, so none keeps using a half-built exchange.
  auto failed = failedRanks(boot, import_status.isOk(), deadline);
  if (!failed.isOk()) {
    out.closeLocal();
    return failed.status().withContext("agreeing on the IPC imports");
  }
  if (!failed->empty()) {
    // Every rank got the same verdict: all close what they imported, and only after a barrier may exporters free.
    out.closeLocal();
    boot.barrier(deadline).ignore();
    if (!import_status.isOk()) return import_status;
    return PEERLAB_UNAVAILABLE("IPC exchange: importing failed on rank(s) " + *failed);
  }
  return out;
}

StatusOr<SymmetricMemory> SymmetricMemory::create(Bootstrap& boot, int device, size_t bytes, HandleKind kind,
                                                  Deadline deadline, const AllocOptions& options) {
  // A rank that fails to allocate still joins the exchange (with an invalid descriptor) so peers fail fast.
  auto local = allocExportable(device, bytes, kind, options);
  if (!local.isOk()) {
    Descriptor bad;
    bad.magic = 0;
    std::vector<Descriptor> all(static_cast<size_t>(boot.size()));
    boot.allgather(&bad, all.data(), sizeof(Descriptor), deadline).ignore();
    return local.status().withContext("allocating " + std::to_string(bytes) + " bytes of symmetric memory");
  }
  ImportOptions import;
  import.device = device;
  import.access_devices = options.access_devices;
  PEERLAB_ASSIGN_OR_RETURN(auto peers,
                           detail::PeerBuffersBuilder::exchange(boot, local->get(), import, deadline, true));
  return SymmetricMemory(std::move(local).value(), std::move(peers), bytes);
}

SymmetricMemory::~SymmetricMemory() = default;

Status SymmetricMemory::close(Bootstrap& boot, Deadline deadline) {
  Status st = peers_.close(boot, deadline);
  local_.reset();
  return st;
}

std::string Counters::toString() const {
  return "exports " + std::to_string(exports_allocated) + "/" + std::to_string(exports_freed) + " freed, legacy " +
         std::to_string(legacy_opens) + " opens/" + std::to_string(legacy_closes) + " closes, vmm " +
         std::to_string(vmm_imports) + " imports/" + std::to_string(vmm_releases) + " releases, fds exported " +
         std::to_string(fds_exported);
}

Counters counters() {
  const AtomicCounters& a = globalCounters();
  Counters c;
  c.exports_allocated = a.exports_allocated.load();
  c.exports_freed = a.exports_freed.load();
  c.legacy_opens = a.legacy_opens.load();
  c.legacy_closes = a.legacy_closes.load();
  c.vmm_imports = a.vmm_imports.load();
  c.vmm_releases = a.vmm_releases.load();
  c.fds_exported = a.fds_exported.load();
  return c;
}

}  // namespace peerlab::ipc
