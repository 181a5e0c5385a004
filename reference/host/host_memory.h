#pragma once
/// Host buffers for host <-> device copies: pinned memory placed on a chosen NUMA node (mmap, mbind(2), first touch,
/// then cudaHostRegister, mapped for every GPU) or plain pageable memory.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <optional>

#include "reference/core/owned.h"
#include "reference/core/status.h"

namespace peerlab::host {

struct HostPlacement {
  bool pinned = true;         ///< page-locked and registered with CUDA (portable and mapped); false: pageable
  std::optional<int> node;    ///< NUMA node to bind the pages to; nullopt: wherever the kernel puts them
  bool node_required = true;  ///< with `node`: fail (`unavailable`) when the pages cannot be bound there, instead of
                              ///< keeping the kernel's placement
};

/// One host allocation. `node` is where its first page is (-1: unknown).
struct HostAllocation {
  void* ptr = nullptr;
  size_t bytes = 0;         ///< what the caller asked for
  size_t mapped_bytes = 0;  ///< the whole pages mapped
  bool registered = false;  ///< cudaHostRegister succeeded (unregistered before unmapping)
  int node = -1;
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
};
struct HostMemoryTraits {
  using Handle = HostAllocation;
  static Handle null() noexcept { return {}; }
  static bool isNull(const Handle& h) noexcept { return h.ptr == nullptr; }
  static void destroy(const Handle& h) noexcept;
};
using HostBuffer = Owned<HostMemoryTraits>;

/// Whole pages holding `bytes` (at least one page).
size_t pageRound(size_t bytes, size_t page);

/// `bytes` of host memory placed as asked. Every page is touched before registration, so a bound buffer's pages
/// really sit on its node. `invalid_argument` for 0 bytes; `unavailable` when a required node cannot be used.
StatusOr<HostBuffer> allocHost(size_t bytes, const HostPlacement& placement = {});

/// The device-side address of pinned host memory `p` (cudaHostGetDevicePointer), for SM kernels.
StatusOr<void*> deviceAddress(const void* p);

/// The host NUMA node nearest `device`: cudaDevAttrHostNumaId, else the GPU's PCI function in sysfs; nullopt when
/// neither says (a one-node machine may report nothing).
StatusOr<std::optional<int>> gpuHostNode(int device);

}  // namespace peerlab::host
