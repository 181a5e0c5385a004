#pragma once
/// Symmetric memory for GPU-initiated collectives: every rank allocates a region of the same size (cuMem VMM),
/// exports it as a POSIX file descriptor and maps every peer's region (peerlab::ipc). Kernels get SymmetricView, a
/// trivially copyable table of every rank's base pointer as seen from this process.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "reference/alltoallv/layout.h"
#include "reference/core/bootstrap.h"
#include "reference/core/deadline.h"
#include "reference/core/status.h"
#include "reference/ipc/ipc.h"

namespace peerlab::alltoallv {

/// Every rank's region, for kernels.
struct SymmetricView {
  uint8_t* ptrs[kMaxRanks];
  int32_t rank;
  int32_t size;
  uint64_t bytes;

  /// Address `offset` bytes into rank `r`'s region.
  template <class T>
  __host__ __device__ T* at(int r, uint64_t offset) const {
    return reinterpret_cast<T*>(ptrs[r] + offset);
  }
};
static_assert(std::is_trivially_copyable_v<SymmetricView>);

/// One symmetric region per rank, zeroed before any peer can write to it.
class SymmetricRegion {
 public:
  /// Collective over `boot` (at most kMaxRanks ranks, each on its own `device`): allocate, zero, exchange, barrier.
  static StatusOr<SymmetricRegion> create(Bootstrap& boot, int device, size_t bytes, Deadline deadline);

  SymmetricRegion(SymmetricRegion&&) noexcept = default;
  SymmetricRegion& operator=(SymmetricRegion&&) noexcept = default;
  /// Not collective (unmaps imports, frees the local region): prefer close().
  ~SymmetricRegion() = default;

  SymmetricView view() const;
  void* local() const { return mem_.localPtr(); }
  size_t bytes() const { return mem_.bytes(); }
  int device() const { return mem_.device(); }
  int rank() const { return mem_.rank(); }
  int size() const { return mem_.size(); }

  /// Collective teardown in the safe order: every importer unmaps, barrier, every owner frees its region.
  Status close(Bootstrap& boot, Deadline deadline);

 private:
  explicit SymmetricRegion(ipc::SymmetricMemory mem) : mem_(std::move(mem)) {}
  ipc::SymmetricMemory mem_;
};

}  // namespace peerlab::alltoallv
