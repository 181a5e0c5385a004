// The CUDA backend of a probe worker: contexts, buffers, peer access and exports once, then cells in batches.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>
#include <type_traits>

#include "reference/core/check.h"
#include "reference/core/deadline.h"
#include "reference/core/devices.h"
#include "reference/core/fd.h"
#include "reference/core/memory.h"
#include "reference/core/owned.h"
#include "reference/core/pattern.h"
#include "reference/core/scoped.h"
#include "reference/probe/backend.h"
#include "reference/probe/kernels.h"

namespace peerlab::probe {

namespace {

using Clock = std::chrono::steady_clock;

struct VmmAllocation {
  CUmemGenericAllocationHandle handle = 0;
  CUdeviceptr va = 0;
  size_t bytes = 0;
  bool mapped = false;
  int device = -1;
};
struct VmmTraits {
  using Handle = VmmAllocation;
  static Handle null() noexcept { return {}; }
  static bool isNull(const Handle& h) noexcept { return h.handle == 0 && h.va == 0; }
  static void destroy(const Handle& h) noexcept {
    auto guard = ScopedDevice::make(h.device);
    if (h.mapped) (void)PEERLAB_DRIVER_CALL(cuMemUnmap, h.va, h.bytes);
    if (h.va) (void)PEERLAB_DRIVER_CALL(cuMemAddressFree, h.va, h.bytes);
    if (h.handle) (void)PEERLAB_DRIVER_CALL(cuMemRelease, h.handle);
  }
};
using Vmm = Owned<VmmTraits>;

struct IpcMapping {
  void* ptr = nullptr;
  int device = -1;
};
struct IpcMappingTraits {
  using Handle = IpcMapping;
  static Handle null() noexcept { return {}; }
  static bool isNull(const Handle& h) noexcept { return h.ptr == nullptr; }
  static void destroy(const Handle& h) noexcept {
    auto guard = ScopedDevice::make(h.device);
    if (cudaIpcCloseMemHandle(h.ptr) != cudaSuccess) (void)cudaGetLastError();
  }
};
using IpcOpen = Owned<IpcMappingTraits>;

Verdict verdictFor(const Status& st) {
  switch (st.code()) {
    case StatusCode::kUnavailable:
      return Verdict::kUnsupported;
    case StatusCode::kTimeout:
      return Verdict::kHang;
    default:
      return Verdict::kError;
  }
}

Status cudaResult(cudaError_t err, const char* what) {
  return detail::cudaStatus(err, what, __FILE__, __LINE__);
}

uint64_t usSince(Clock::time_point t0) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count());
}

std::string cellName(const CellSpec& c) {
  return std::string(methodName(c.method)) + " " + std::to_string(c.src) + "->" + std::to_string(c.dst) + " " +
         std::to_string(c.bytes) + " B";
}

struct Device {
  Status status;  // context and resources of this GPU
  Stream own;     // owner: poison, pulls issued by this GPU, checks; importer: unused
  Stream init;    // owner: source fill and pushes issued by this GPU; importer: writes through imports
  Event own_mark, init_mark, done;
  // Owner
  DeviceBuffer src, dst;
  std::optional<PatternChecker> checker;
  cudaIpcMemHandle_t legacy{};
  Status legacy_status = PEERLAB_UNAVAILABLE("not exported");
  Vmm vmm;
  Fd vmm_fd;
  Status vmm_status = PEERLAB_UNAVAILABLE("not exported");
  // Importer
  DeviceExport exported;
  Vmm imported;
  Status import_status = PEERLAB_UNAVAILABLE("not imported");
  std::vector<Status> access;  // [source]: cuMemSetAccess of the imported range for that GPU
};

struct Pending {
  const CellSpec* cell = nullptr;
  Clock::time_point t0;
  cudaEvent_t done = nullptr;
  int check_device = -1;  // >= 0: collect that GPU's pattern check when done
  Path path = Path::kNone;
  IpcOpen legacy;  // importer: the mapping this cell opened, closed when it is done
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(InjectPlan inject) : inject_(std::move(inject)) {}

  Inventory inventory() override;
  ReadyReport setup(const SetupRequest& request) override;
  ReadyReport import(const Exports& exports, std::vector<int> fds) override;
  Status run(const RunRequest& request, const EmitFn& emit) override;

 private:
  void setupDevice(int d, const SetupRequest& req, uint64_t* ctx_us, uint64_t* res_us, uint64_t* exp_us);
  Status createVmm(int d, Device& D);
  void enablePeers(int s);
  Status importVmm(int d, int fd, uint64_t bytes);

  Status enqueue(Phase phase, const CellSpec& c, Pending& p, std::vector<int>& as_src, std::vector<int>& as_dst);
  Status enqueueLocal(const CellSpec& c, Pending& p, std::optional<FaultKind> fault);
  Status enqueueRemoteWrite(const CellSpec& c, Pending& p, std::optional<FaultKind> fault);
  StatusOr<void*> ipcBuffer(const CellSpec& c);
  Status drain(std::vector<Pending>& pending, Deadline backstop, const EmitFn& emit);
  StatusOr<CellResult> finish(Pending& p);
  bool healthy(int device);

  Status spin(int device, cudaStream_t stream);
  Status flip(int device, cudaStream_t stream, void* base, uint64_t bytes);
  const Status& peer(int from, int to) const { return peer_[static_cast<size_t>(from) * n_ + to]; }

  InjectPlan inject_;
  Inventory inv_;
  Role role_ = Role::kOwner;
  int n_ = 0;
  uint64_t max_bytes_ = 0;
  uint32_t timeout_ms_ = 5000;
  std::vector<Device> dev_;
  std::vector<Status> peer_;  // [from * n + to]: cudaDeviceEnablePeerAccess from `from` to `to`
};

}  // namespace

Inventory collectInventory() {
  Inventory inv;
  DriverVersions v = driverVersions();
  inv.driver_api = v.driver_api;
  inv.runtime_api = v.runtime_api;
  inv.driver_release = v.release;
  auto devices = listDevices();
  if (!devices.isOk()) {
    inv.error = devices.status().message();
    return inv;
  }
  const int n = static_cast<int>(devices->size());
  for (const DeviceInfo& d : *devices) {
    GpuInfo g;
    g.ordinal = d.ordinal;
    g.uuid = d.uuid;
    g.bus_id = d.bus_id;
    g.name = d.name;
    g.cc_major = d.cc_major;
    g.cc_minor = d.cc_minor;
    g.sm_count = d.sm_count;
    g.total_memory = d.total_memory;
    CUdevice cu = 0;
    int value = 0;
    if (PEERLAB_DRIVER_CALL(cuDeviceGet, &cu, d.ordinal) == CUDA_SUCCESS) {
      if (PEERLAB_DRIVER_CALL(cuDeviceGetAttribute, &value, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                              cu) == CUDA_SUCCESS) {
        g.vmm = value != 0;
      }
      if (PEERLAB_DRIVER_CALL(cuDeviceGetAttribute, &value,
                              CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, cu) == CUDA_SUCCESS) {
        g.posix_fd = value != 0;
      }
    }
    if (cudaDeviceGetAttribute(&value, cudaDevAttrIpcEventSupport, d.ordinal) == cudaSuccess) {
      g.ipc_event = value != 0;
    } else {
      (void)cudaGetLastError();
    }
    inv.gpus.push_back(std::move(g));
  }
  inv.can_access.assign(static_cast<size_t>(n) * n, 0);
  inv.native_atomic.assign(static_cast<size_t>(n) * n, 0);
  for (int s = 0; s < n; ++s) {
    for (int d = 0; d < n; ++d) {
      if (s == d) continue;
      int value = 0;
      if (cudaDeviceCanAccessPeer(&value, s, d) == cudaSuccess) {
        inv.can_access[static_cast<size_t>(s) * n + d] = value != 0;
      } else {
        (void)cudaGetLastError();
      }
      if (cudaDeviceGetP2PAttribute(&value, cudaDevP2PAttrNativeAtomicSupported, s, d) == cudaSuccess) {
        inv.native_atomic[static_cast<size_t>(s) * n + d] = value != 0;
      } else {
        (void)cudaGetLastError();
      }
    }
  }
  return inv;
}

namespace {

Inventory CudaBackend::inventory() {
  inv_ = collectInventory();
  return inv_;
}

Status CudaBackend::createVmm(int d, Device& D) {
  const GpuInfo& g = inv_.gpus[d];
  if (!g.vmm || !g.posix_fd) {
    return PEERLAB_UNAVAILABLE("GPU " + std::to_string(d) + " does not support cuMemCreate with POSIX fd handles");
  }
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = d;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t granularity = 0;
  PEERLAB_RETURN_IF_ERROR(
      PEERLAB_CU(cuMemGetAllocationGranularity, &granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  if (granularity == 0) granularity = 2u << 20;
  VmmAllocation a;
  a.device = d;
  a.bytes = (max_bytes_ + granularity - 1) / granularity * granularity;
  auto undo = [&](Status st) {
    VmmTraits::destroy(a);
    return st;
  };
  Status st = PEERLAB_CU(cuMemCreate, &a.handle, a.bytes, &prop, 0);
  if (!st.isOk()) return st;
  if (st = PEERLAB_CU(cuMemAddressReserve, &a.va, a.bytes, 0, 0, 0); !st.isOk()) return undo(st);
  if (st = PEERLAB_CU(cuMemMap, a.va, a.bytes, 0, a.handle, 0); !st.isOk()) return undo(st);
  a.mapped = true;
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = d;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (st = PEERLAB_CU(cuMemSetAccess, a.va, a.bytes, &access, 1); !st.isOk()) return undo(st);
  int fd = -1;
  if (st = PEERLAB_CU(cuMemExportToShareableHandle, static_cast<void*>(&fd), a.handle,
                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0ull);
      !st.isOk()) {
    return undo(st);
  }
  D.vmm = Vmm(a);
  D.vmm_fd = Fd(fd);
  return Status::ok();
}

void CudaBackend::setupDevice(int d, const SetupRequest& req, uint64_t* ctx_us, uint64_t* res_us, uint64_t* exp_us) {
  Device& D = dev_[d];
  const std::string gpu = "GPU " + std::to_string(d);
  auto t0 = Clock::now();
  // The primary context is created here (cudaSetDevice or the cudaFree after it), once per GPU and process.
  auto guard = ScopedDevice::make(d);
  if (!guard.isOk()) {
    D.status = guard.status().withContext(gpu);
    return;
  }
  if (Status st = PEERLAB_CUDA(cudaFree(nullptr)); !st.isOk()) {
    D.status = st.withContext(gpu + ": creating the context");
    return;
  }
  *ctx_us = usSince(t0);
  t0 = Clock::now();
  auto resources = [&]() -> Status {
    PEERLAB_ASSIGN_OR_RETURN(D.own, createStream(d));
    PEERLAB_ASSIGN_OR_RETURN(D.init, createStream(d));
    PEERLAB_ASSIGN_OR_RETURN(D.own_mark, createEvent(d));
    PEERLAB_ASSIGN_OR_RETURN(D.init_mark, createEvent(d));
    PEERLAB_ASSIGN_OR_RETURN(D.done, createEvent(d));
    if (req.role == Role::kOwner) {
      PEERLAB_ASSIGN_OR_RETURN(D.src, allocDevice(d, max_bytes_));
      PEERLAB_ASSIGN_OR_RETURN(D.dst, allocDevice(d, max_bytes_));
      PEERLAB_ASSIGN_OR_RETURN(PatternChecker checker, PatternChecker::create(d));
      D.checker.emplace(std::move(checker));
    }
    return Status::ok();
  };
  if (Status st = resources(); !st.isOk()) {
    D.status = st.withContext(gpu);
    return;
  }
  *res_us = usSince(t0);
  if (req.role != Role::kOwner || !req.exports) return;
  t0 = Clock::now();
  D.legacy_status = PEERLAB_CUDA(cudaIpcGetMemHandle(&D.legacy, D.dst->ptr)).withContext(gpu);
  D.vmm_status = createVmm(d, D).withContext(gpu);
  *exp_us = usSince(t0);
}

void CudaBackend::enablePeers(int s) {
  auto guard = ScopedDevice::make(s);
  for (int d = 0; d < n_; ++d) {
    if (d == s) continue;
    Status& out = peer_[static_cast<size_t>(s) * n_ + d];
    const std::string what = "GPU " + std::to_string(s) + " -> GPU " + std::to_string(d);
    if (!guard.isOk()) {
      out = guard.status().withContext(what);
      continue;
    }
    if (!dev_[s].status.isOk() || !dev_[d].status.isOk()) {
      out = PEERLAB_INTERNAL(what + ": a GPU of the pair could not be set up");
      continue;
    }
    // Tried whatever the driver claims: a refusal is safe and is itself the answer.
    cudaError_t err = cudaDeviceEnablePeerAccess(d, 0);
    if (err == cudaErrorPeerAccessAlreadyEnabled) {
      (void)cudaGetLastError();
      err = cudaSuccess;
    }
    out = cudaResult(err, "cudaDeviceEnablePeerAccess").withContext(what);
  }
}

ReadyReport CudaBackend::setup(const SetupRequest& req) {
  ReadyReport out;
  out.role = req.role;
  role_ = req.role;
  max_bytes_ = req.max_bytes;
  timeout_ms_ = req.timeout_ms;
  n_ = inv_.count();
  if (!inv_.error.empty() || n_ == 0) {
    out.error = inv_.error.empty() ? "no CUDA device" : inv_.error;
    return out;
  }
  if (max_bytes_ == 0 || max_bytes_ % 16 != 0) {
    out.error = "setup: buffer size " + std::to_string(max_bytes_) + " is not a positive multiple of 16";
    return out;
  }
  dev_ = std::vector<Device>(n_);
  peer_.assign(static_cast<size_t>(n_) * n_, PEERLAB_UNAVAILABLE("same GPU"));
  for (Device& D : dev_)
    D.access.assign(n_, PEERLAB_UNAVAILABLE("not imported"));

  // Contexts and buffers of all GPUs in parallel: context creation dominates the probe's setup.
  std::vector<uint64_t> ctx(n_, 0), res(n_, 0), exp(n_, 0);
  {
    std::vector<std::thread> threads;
    for (int d = 0; d < n_; ++d) {
      threads.emplace_back([this, d, &req, &ctx, &res, &exp] { setupDevice(d, req, &ctx[d], &res[d], &exp[d]); });
    }
    for (auto& t : threads)
      t.join();
  }
  out.timings.push_back({"contexts", *std::max_element(ctx.begin(), ctx.end())});
  out.timings.push_back({"buffers", *std::max_element(res.begin(), res.end())});
  if (req.role == Role::kOwner && req.exports) {
    out.timings.push_back({"exports", *std::max_element(exp.begin(), exp.end())});
  }
  int usable = 0;
  std::string first_error;
  for (int d = 0; d < n_; ++d) {
    if (dev_[d].status.isOk()) {
      ++usable;
    } else if (first_error.empty()) {
      first_error = dev_[d].status.message();
    }
  }
  if (usable == 0) {
    out.error = first_error;
    return out;
  }
  if (req.role == Role::kOwner) {
    const auto t0 = Clock::now();
    std::vector<std::thread> threads;
    for (int s = 0; s < n_; ++s)
      threads.emplace_back([this, s] { enablePeers(s); });
    for (auto& t : threads)
      t.join();
    out.timings.push_back({"peer_access", usSince(t0)});
    if (req.exports) {
      for (int d = 0; d < n_; ++d) {
        Device& D = dev_[d];
        DeviceExport e;
        e.legacy_ok = D.status.isOk() && D.legacy_status.isOk();
        if (e.legacy_ok) {
          static_assert(sizeof(cudaIpcMemHandle_t) == 64, "cudaIpcMemHandle_t is 64 bytes");
          std::memcpy(e.legacy_handle.data(), &D.legacy, sizeof(D.legacy));
        } else {
          e.legacy_error = D.status.isOk() ? D.legacy_status.message() : D.status.message();
        }
        e.vmm_ok = D.status.isOk() && D.vmm_status.isOk() && D.vmm;
        if (e.vmm_ok) {
          e.vmm_bytes = D.vmm->bytes;
          out.fds.push_back(D.vmm_fd.get());
        } else {
          e.vmm_error = D.status.isOk() ? D.vmm_status.message() : D.status.message();
        }
        out.exports.devices.push_back(std::move(e));
      }
    }
  }
  return out;
}

Status CudaBackend::importVmm(int d, int fd, uint64_t bytes) {
  Device& D = dev_[d];
  PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(d));
  VmmAllocation a;
  a.device = d;
  a.bytes = bytes;
  auto undo = [&](Status st) {
    VmmTraits::destroy(a);
    return st;
  };
  Status st = PEERLAB_CU(cuMemImportFromShareableHandle, &a.handle, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  if (!st.isOk()) return st;
  if (st = PEERLAB_CU(cuMemAddressReserve, &a.va, a.bytes, 0, 0, 0); !st.isOk()) return undo(st);
  if (st = PEERLAB_CU(cuMemMap, a.va, a.bytes, 0, a.handle, 0); !st.isOk()) return undo(st);
  a.mapped = true;
  // Access for each source GPU separately, so that one refusal does not hide the other pairs.
  for (int s = 0; s < n_; ++s) {
    if (s == d) continue;
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = s;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    D.access[s] = PEERLAB_CU(cuMemSetAccess, a.va, a.bytes, &access, 1)
                      .withContext("GPU " + std::to_string(s) + " access to GPU " + std::to_string(d) + "'s memory");
  }
  D.imported = Vmm(a);
  return Status::ok();
}

ReadyReport CudaBackend::import(const Exports& exports, std::vector<int> fds) {
  ReadyReport out;
  out.role = role_;
  std::vector<Fd> owned;
  for (int fd : fds)
    owned.emplace_back(fd);
  if (role_ != Role::kImporter || dev_.empty()) {
    out.error = "import: this worker was not set up as the importer";
    return out;
  }
  if (static_cast<int>(exports.devices.size()) != n_) {
    out.error = "import: exports for " + std::to_string(exports.devices.size()) + " GPUs, this worker sees " +
                std::to_string(n_);
    return out;
  }
  if (exports.vmmCount() != owned.size()) {
    out.error = "import: " + std::to_string(exports.vmmCount()) + " VMM exports but " + std::to_string(owned.size()) +
                " file descriptors";
    return out;
  }
  const auto t0 = Clock::now();
  size_t next = 0;
  for (int d = 0; d < n_; ++d) {
    Device& D = dev_[d];
    D.exported = exports.devices[d];
    if (!D.exported.vmm_ok) {
      D.import_status = PEERLAB_UNAVAILABLE(D.exported.vmm_error.empty() ? "not exported" : D.exported.vmm_error);
      continue;
    }
    Fd fd = std::move(owned[next++]);
    if (!D.status.isOk()) {
      D.import_status = D.status;
      continue;
    }
    if (D.exported.vmm_bytes < max_bytes_) {
      D.import_status = PEERLAB_INTERNAL("import: exported VMM range is smaller than the largest cell");
      continue;
    }
    D.import_status = importVmm(d, fd.get(), D.exported.vmm_bytes).withContext("GPU " + std::to_string(d));
  }
  out.timings.push_back({"import", usSince(t0)});
  return out;
}

Status CudaBackend::spin(int device, cudaStream_t stream) {
  return launchSpin(device, stream, (10ull * timeout_ms_ + 30'000ull) * 1'000'000ull);
}

Status CudaBackend::flip(int device, cudaStream_t stream, void* base, uint64_t bytes) {
  const uint64_t offset = (bytes / 2) & ~static_cast<uint64_t>(kWordBytes - 1);
  return launchFlipWord(device, stream, static_cast<uint8_t*>(base) + offset);
}

Status record(cudaEvent_t event, cudaStream_t stream, int device) {
  PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(device));
  return PEERLAB_CUDA(cudaEventRecord(event, stream));
}

Status waitOn(cudaStream_t stream, cudaEvent_t event, int device) {
  PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(device));
  return PEERLAB_CUDA(cudaStreamWaitEvent(stream, event, 0));
}

Status CudaBackend::enqueueLocal(const CellSpec& c, Pending& p, std::optional<FaultKind> fault) {
  Device& S = dev_[c.src];
  Device& D = dev_[c.dst];
  const bool push = pushedBySource(c.method);
  const int from = push ? c.src : c.dst;
  const int to = push ? c.dst : c.src;
  const Status& mapping = peer(from, to);
  // Without a peer mapping a kernel would fault on the peer pointer and poison the context: not tried. The copy
  // engine methods are tried anyway: the driver stages them through the host.
  if (!usesCopyEngine(c.method) && !mapping.isOk()) return mapping;
  p.path = mapping.isOk() ? Path::kPeer : Path::kStaged;
  if (fault == FaultKind::kError)
    return PEERLAB_STATUS(StatusCode::kCudaError, "injected error (PEERLAB_PROBE_INJECT)");

  void* dst = D.dst->ptr;
  void* src = S.src->ptr;
  PEERLAB_RETURN_IF_ERROR(poisonPattern(dst, c.bytes, c.seed, D.own.get()));
  if (readsSourceBuffer(c.method)) PEERLAB_RETURN_IF_ERROR(fillPattern(src, c.bytes, c.seed, S.init.get()));
  cudaStream_t stream = push ? S.init.get() : D.own.get();
  if (push) {
    // The source's stream waits for the destination's poison.
    PEERLAB_RETURN_IF_ERROR(record(D.own_mark.get(), D.own.get(), c.dst));
    PEERLAB_RETURN_IF_ERROR(waitOn(S.init.get(), D.own_mark.get(), c.src));
  } else {
    // The destination's stream waits for the source's fill.
    PEERLAB_RETURN_IF_ERROR(record(S.init_mark.get(), S.init.get(), c.src));
    PEERLAB_RETURN_IF_ERROR(waitOn(D.own.get(), S.init_mark.get(), c.dst));
  }
  if (fault == FaultKind::kHang) PEERLAB_RETURN_IF_ERROR(spin(from, stream));
  switch (c.method) {
    case Method::kCeWrite:
    case Method::kCeRead: {
      PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(from));
      PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaMemcpyPeerAsync(dst, c.dst, src, c.src, c.bytes, stream)));
      break;
    }
    case Method::kSmStore:
    case Method::kSmLoad:
      PEERLAB_RETURN_IF_ERROR(launchPeerCopy(from, stream, dst, src, c.bytes));
      break;
    case Method::kAtomic:
      PEERLAB_RETURN_IF_ERROR(launchAtomicPattern(from, stream, dst, c.bytes, c.seed));
      break;
    default:
      return PEERLAB_INTERNAL("not an in-process method");
  }
  if (push) {
    // The destination's stream waits for the source's write before checking.
    PEERLAB_RETURN_IF_ERROR(record(S.init_mark.get(), S.init.get(), c.src));
    PEERLAB_RETURN_IF_ERROR(waitOn(D.own.get(), S.init_mark.get(), c.dst));
  }
  if (fault == FaultKind::kCorrupt) PEERLAB_RETURN_IF_ERROR(flip(c.dst, D.own.get(), dst, c.bytes));
  PEERLAB_RETURN_IF_ERROR(D.checker->enqueue(dst, c.bytes, c.seed, D.own.get(), kWordBytes));
  PEERLAB_RETURN_IF_ERROR(record(D.done.get(), D.own.get(), c.dst));
  p.done = D.done.get();
  p.check_device = c.dst;
  return Status::ok();
}

StatusOr<void*> CudaBackend::ipcBuffer(const CellSpec& c) {
  Device& D = dev_[c.dst];
  if (c.method == Method::kIpcLegacy) {
    PEERLAB_RETURN_IF_ERROR(D.legacy_status);
    return D.dst->ptr;
  }
  PEERLAB_RETURN_IF_ERROR(D.vmm_status);
  if (!D.vmm) return PEERLAB_INTERNAL("no VMM allocation");
  return reinterpret_cast<void*>(D.vmm->va);
}

Status CudaBackend::enqueueRemoteWrite(const CellSpec& c, Pending& p, std::optional<FaultKind> fault) {
  Device& S = dev_[c.src];
  Device& D = dev_[c.dst];
  void* target = nullptr;
  if (c.method == Method::kIpcLegacy) {
    if (!D.exported.legacy_ok) {
      return PEERLAB_UNAVAILABLE(D.exported.legacy_error.empty() ? "not exported" : D.exported.legacy_error);
    }
    cudaIpcMemHandle_t handle;
    std::memcpy(&handle, D.exported.legacy_handle.data(), sizeof(handle));
    PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(c.src));
    // Opened on the source GPU for this cell and closed when it is done: one open mapping per handle at a time.
    PEERLAB_RETURN_IF_ERROR(
        PEERLAB_CUDA(cudaIpcOpenMemHandle(&target, handle, cudaIpcMemLazyEnablePeerAccess))
            .withContext("opening GPU " + std::to_string(c.dst) + "'s handle on GPU " + std::to_string(c.src)));
    p.legacy = IpcOpen(IpcMapping{target, c.src});
  } else {
    PEERLAB_RETURN_IF_ERROR(D.import_status);
    PEERLAB_RETURN_IF_ERROR(D.access[c.src]);
    target = reinterpret_cast<void*>(D.imported->va);
  }
  p.path = Path::kIpc;
  if (fault == FaultKind::kError)
    return PEERLAB_STATUS(StatusCode::kCudaError, "injected error (PEERLAB_PROBE_INJECT)");
  if (fault == FaultKind::kHang) PEERLAB_RETURN_IF_ERROR(spin(c.src, S.init.get()));
  PEERLAB_RETURN_IF_ERROR(fillPattern(target, c.bytes, c.seed, S.init.get()));
  PEERLAB_RETURN_IF_ERROR(record(S.done.get(), S.init.get(), c.src));
  p.done = S.done.get();
  return Status::ok();
}

Status CudaBackend::enqueue(Phase phase, const CellSpec& c, Pending& p, std::vector<int>& as_src,
                            std::vector<int>& as_dst) {
  if (c.src < 0 || c.dst < 0 || c.src >= n_ || c.dst >= n_ || c.src == c.dst) {
    return PEERLAB_INVALID_ARGUMENT("GPU pair " + std::to_string(c.src) + "->" + std::to_string(c.dst) +
                                    " out of range (" + std::to_string(n_) + " GPUs)");
  }
  if (as_src[c.src]++ > 0 || as_dst[c.dst]++ > 0) {
    return PEERLAB_INVALID_ARGUMENT("GPU " + std::to_string(c.src) + " or " + std::to_string(c.dst) +
                                    " appears twice in the same role in one batch");
  }
  if (c.bytes == 0 || c.bytes % 16 != 0 || c.bytes > max_bytes_) {
    return PEERLAB_INVALID_ARGUMENT(std::to_string(c.bytes) + " bytes: not a multiple of 16 up to " +
                                    std::to_string(max_bytes_));
  }
  const bool ipc = isIpcMethod(c.method);
  const bool owner_phase = phase == Phase::kLocal || phase == Phase::kPoison || phase == Phase::kCheck;
  if ((role_ == Role::kOwner) != owner_phase || ipc != (phase != Phase::kLocal)) {
    return PEERLAB_INVALID_ARGUMENT(std::string(phaseName(phase)) + " of " + std::string(methodName(c.method)) +
                                    " is not a job for the " + std::string(roleName(role_)));
  }
  PEERLAB_RETURN_IF_ERROR(dev_[c.src].status);
  PEERLAB_RETURN_IF_ERROR(dev_[c.dst].status);
  const auto fault = inject_.find(c, role_, phase);
  switch (phase) {
    case Phase::kLocal:
      return enqueueLocal(c, p, fault);
    case Phase::kRemoteWrite:
      return enqueueRemoteWrite(c, p, fault);
    case Phase::kPoison: {
      Device& D = dev_[c.dst];
      PEERLAB_ASSIGN_OR_RETURN(void* target, ipcBuffer(c));
      PEERLAB_RETURN_IF_ERROR(poisonPattern(target, c.bytes, c.seed, D.own.get()));
      PEERLAB_RETURN_IF_ERROR(record(D.done.get(), D.own.get(), c.dst));
      p.done = D.done.get();
      return Status::ok();
    }
    case Phase::kCheck: {
      Device& D = dev_[c.dst];
      PEERLAB_ASSIGN_OR_RETURN(void* target, ipcBuffer(c));
      if (fault == FaultKind::kCorrupt) PEERLAB_RETURN_IF_ERROR(flip(c.dst, D.own.get(), target, c.bytes));
      PEERLAB_RETURN_IF_ERROR(D.checker->enqueue(target, c.bytes, c.seed, D.own.get(), kWordBytes));
      PEERLAB_RETURN_IF_ERROR(record(D.done.get(), D.own.get(), c.dst));
      p.done = D.done.get();
      p.check_device = c.dst;
      p.path = Path::kIpc;
      return Status::ok();
    }
  }
  return PEERLAB_INTERNAL("unknown phase");
}

bool CudaBackend::healthy(int device) {
  if (device < 0 || device >= n_) return true;
  Device& D = dev_[device];
  for (const Stream* s : {&D.own, &D.init}) {
    if (!*s) continue;
    const cudaError_t err = cudaStreamQuery(s->get());
    if (err != cudaSuccess && err != cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
  }
  return true;
}

StatusOr<CellResult> CudaBackend::finish(Pending& p) {
  CellResult r;
  r.id = p.cell->id;
  r.seed = p.cell->seed;
  r.path = p.path;
  r.verdict = Verdict::kOk;
  p.legacy.reset();
  if (p.check_device >= 0) {
    Device& D = dev_[p.check_device];
    PEERLAB_ASSIGN_OR_RETURN(PatternCheck check,
                             D.checker->collect(D.own.get(), Deadline::afterMs(static_cast<int64_t>(timeout_ms_))));
    r.words = check.elements;
    r.wrong = check.wrong;
    r.first_bad = check.first_bad;
    r.verdict = check.ok() ? Verdict::kOk : Verdict::kCorrupt;
  }
  r.time_us = usSince(p.t0);
  return r;
}

Status CudaBackend::drain(std::vector<Pending>& pending, Deadline backstop, const EmitFn& emit) {
  const auto spin_until = Clock::now() + std::chrono::microseconds(200);
  auto abandon = [&pending] {
    // The process exits after this batch: mappings still in use by running kernels are left to process teardown.
    for (Pending& p : pending)
      (void)p.legacy.release();
  };
  while (!pending.empty()) {
    bool progressed = false;
    for (size_t i = 0; i < pending.size();) {
      Pending& p = pending[i];
      const cudaError_t err = cudaEventQuery(p.done);
      if (err == cudaErrorNotReady) {
        ++i;
        continue;
      }
      if (err != cudaSuccess) {
        (void)cudaGetLastError();
        abandon();
        return PEERLAB_STATUS(StatusCode::kCudaError,
                              cellName(*p.cell) + ": " + describeCudaError(err) + " (the GPU context is unusable)");
      }
      auto result = finish(p);
      if (!result.isOk()) {
        abandon();
        return result.status().withContext(cellName(*p.cell));
      }
      pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
      PEERLAB_RETURN_IF_ERROR(emit(*result));
      progressed = true;
    }
    if (pending.empty()) break;
    if (backstop.expired()) {
      for (Pending& p : pending) {
        CellResult r;
        r.id = p.cell->id;
        r.seed = p.cell->seed;
        r.verdict = Verdict::kHang;
        r.path = p.path;
        r.time_us = usSince(p.t0);
        r.error = "still running when the worker's own deadline passed";
        (void)emit(r);
      }
      abandon();
      return PEERLAB_TIMEOUT("cells still running at the worker's own deadline");
    }
    if (!progressed && Clock::now() > spin_until) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  return Status::ok();
}

Status CudaBackend::run(const RunRequest& req, const EmitFn& emit) {
  if (dev_.empty()) return PEERLAB_INTERNAL("run before setup");
  if (req.timeout_ms > 0) timeout_ms_ = req.timeout_ms;
  const Deadline backstop = Deadline::afterMs(2 * static_cast<int64_t>(timeout_ms_) + 1000);
  std::vector<Pending> pending;
  pending.reserve(req.cells.size());
  // The cells of a batch run concurrently on per-GPU streams, events and buffers: a GPU may be the source of one
  // cell and the destination of one cell, no more.
  std::vector<int> as_src(n_, 0), as_dst(n_, 0);
  for (const CellSpec& c : req.cells) {
    Pending p;
    p.cell = &c;
    p.t0 = Clock::now();
    Status st = enqueue(req.phase, c, p, as_src, as_dst);
    if (st.isOk()) {
      pending.push_back(std::move(p));
      continue;
    }
    // A failed call that left a GPU's context broken ends this process: later cells would inherit the error.
    if (!healthy(c.src) || !healthy(c.dst)) {
      for (Pending& q : pending)
        (void)q.legacy.release();
      (void)p.legacy.release();
      return PEERLAB_STATUS(StatusCode::kCudaError,
                            cellName(c) + ": " + st.message() + " (the GPU context is unusable)");
    }
    CellResult r;
    r.id = c.id;
    r.seed = c.seed;
    r.verdict = verdictFor(st);
    r.path = Path::kNone;
    r.error = st.message();
    r.time_us = usSince(p.t0);
    PEERLAB_RETURN_IF_ERROR(emit(r));
  }
  return drain(pending, backstop, emit);
}

}  // namespace

std::unique_ptr<Backend> makeCudaBackend(InjectPlan inject) {
  return std::make_unique<CudaBackend>(std::move(inject));
}

}  // namespace peerlab::probe
