#include "reference/host/host_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "reference/core/check.h"
#include "reference/core/devices.h"
#include "reference/host/numa.h"

namespace peerlab::host {

void HostMemoryTraits::destroy(const Handle& h) noexcept {
  if (h.registered) (void)cudaHostUnregister(h.ptr);
  (void)cudaGetLastError();
  munmap(h.ptr, h.mapped_bytes);
}

size_t pageRound(size_t bytes, size_t page) {
  if (page == 0) return bytes;
  const size_t pages = bytes == 0 ? 1 : (bytes + page - 1) / page;
  return pages * page;
}

StatusOr<HostBuffer> allocHost(size_t bytes, const HostPlacement& placement) {
  if (bytes == 0) return PEERLAB_INVALID_ARGUMENT("allocHost: 0 bytes");
  const long page = sysconf(_SC_PAGESIZE);
  HostAllocation a;
  a.bytes = bytes;
  a.mapped_bytes = pageRound(bytes, page > 0 ? static_cast<size_t>(page) : 4096);
  void* p = mmap(nullptr, a.mapped_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return PEERLAB_UNAVAILABLE("allocHost: mmap of " + std::to_string(a.mapped_bytes) +
                               " bytes: " + std::strerror(errno));
  }
  a.ptr = p;
  HostBuffer buffer(a);
  if (placement.node) {
    Status bound = bindToNode(p, a.mapped_bytes, *placement.node);
    if (!bound.isOk() && placement.node_required) {
      return bound.withContext("allocHost on node " + std::to_string(*placement.node));
    }
  }
  // First touch: the pages are allocated now, on the bound node.
  std::memset(p, 0, a.mapped_bytes);
  auto node = nodeOfPage(p);
  int where = node.isOk() ? *node : -1;
  if (placement.node && placement.node_required && where != *placement.node) {
    return PEERLAB_UNAVAILABLE("allocHost: pages bound to node " + std::to_string(*placement.node) + " sit on node " +
                               std::to_string(where));
  }
  if (placement.pinned) {
    PEERLAB_RETURN_IF_ERROR(
        PEERLAB_CUDA(cudaHostRegister(p, a.mapped_bytes, cudaHostRegisterPortable | cudaHostRegisterMapped)));
    a.registered = true;
  }
  a.node = where;
  buffer.release();
  return HostBuffer(a);
}

StatusOr<void*> deviceAddress(const void* p) {
  void* d = nullptr;
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaHostGetDevicePointer(&d, const_cast<void*>(p), 0)));
  return d;
}

StatusOr<std::optional<int>> gpuHostNode(int device) {
  int node = -1;
  if (cudaDeviceGetAttribute(&node, cudaDevAttrHostNumaId, device) == cudaSuccess && node >= 0) {
    return std::optional<int>{node};
  }
  (void)cudaGetLastError();
  PEERLAB_ASSIGN_OR_RETURN(DeviceInfo info, deviceInfo(device));
  return pciNumaNode(info.bus_id);
}

}  // namespace peerlab::host
