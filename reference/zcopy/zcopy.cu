#include "reference/zcopy/zcopy.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "reference/core/check.h"
#include "reference/core/device_time.cuh"
#include "reference/core/devices.h"
#include "reference/core/fd.h"
#include "reference/core/memory.h"
#include "reference/core/programmatic.cuh"
#include "reference/core/scoped.h"
#include "reference/core/wait.h"
#include "reference/ipc/handle_cache.h"
#include "reference/zcopy/semaphore_device.cuh"

namespace peerlab::zcopy {

namespace {

constexpr int kSmSendThreads = 512;

// Signal of a captured get/put call: the epoch comes from the device counter, so every replay writes the next one.
__global__ void graphSignalKernel(uint32_t* remote_word, uint32_t* counter) {
  const uint32_t v = *counter + 1;
  *counter = v;
  storeReleaseSys(remote_word, v);
}

// Wait of a captured get/put call, bounded by %globaltimer.
__global__ void graphWaitKernel(const uint32_t* local_word, uint32_t* counter, uint32_t* error, uint64_t timeout_ns) {
  const uint32_t want = *counter + 1;
  *counter = want;
  if (!waitFlagGe(local_word, want, timeout_ns)) reportError(error, kDeviceTimeout, want);
}

// sm_signal sendPost: a message of at most kSmLlMaxBytes goes out in LL lines by block 0 (smBlockSend). Otherwise
// every block waits for "free", pushes its contiguous share of the message and releases its own "arrived" word;
// block 0 also writes the bulk header and releases the words of blocks this message does not use, so the receiver
// always waits for all kSmMaxBlocks words. The last block to finish advances the device epoch.
__global__ void __launch_bounds__(kSmSendThreads)
    smSendKernel(SmEndpointView v, const uint8_t* src, uint64_t dst_offset, uint64_t bytes) {
  awaitPriorGrids();
  releaseDependents();
  if (bytes <= kSmLlMaxBytes && dst_offset < kSmLlMaxOffset) {
    if (blockIdx.x == 0) (void)smBlockSend(v, src, dst_offset, bytes);
    return;
  }
  __shared__ uint32_t s_epoch;
  __shared__ int s_ok;
  if (threadIdx.x == 0) {
    const uint32_t e = v.counters[kCtrSmSend] + 1;
    const bool ok = waitWordGe(v.local_words + kSmFreeWord, e, v.timeout_ns);
    if (!ok) reportError(v.error, kDeviceTimeout, e);
    if (ok && blockIdx.x == 0) storeLl(smLlBuffer(v.remote_words, e), smLlHeader(bytes, dst_offset, true), e);
    s_epoch = e;
    s_ok = ok ? 1 : 0;
  }
  __syncthreads();
  const uint32_t e = s_epoch;
  const bool ok = s_ok != 0;
  if (ok) {
    const uint64_t per = ((bytes + gridDim.x - 1) / gridDim.x + 15) & ~uint64_t{15};
    const uint64_t begin = blockIdx.x * per;
    const uint64_t end = begin + per < bytes ? begin + per : bytes;
    if (begin < end) {
      copyRange(v.remote_window + dst_offset + begin, src + begin, end - begin, threadIdx.x, blockDim.x);
    }
  }
  // The block's stores happen before its release (CTA barrier, then a system-scope release).
  __syncthreads();
  if (ok) {
    if (threadIdx.x == 0) storeReleaseSys(v.remote_words + kSmArrivedWord + blockIdx.x, e);
    if (blockIdx.x == 0 && threadIdx.x >= gridDim.x && threadIdx.x < kSmMaxBlocks) {
      storeReleaseSys(v.remote_words + kSmArrivedWord + threadIdx.x, e);
    }
  }
  if (threadIdx.x == 0) {
    if (gridDim.x == 1) {
      v.counters[kCtrSmSend] = e;
    } else {
      // Every block read the epoch before its increment; the last one writes the next epoch.
      __threadfence();
      const uint32_t done = atomicAdd(v.counters + kCtrSmBlocks, 1u);
      if (done == gridDim.x - 1) {
        v.counters[kCtrSmBlocks] = 0;
        v.counters[kCtrSmSend] = e;
      }
    }
  }
}

// Every sm_signal kernel may be launched programmatically (ContextOptions::programmatic_launch): it waits for the
// kernel before it in the stream before touching memory, then lets the next one be scheduled.
__global__ void smFreeKernel(SmEndpointView v) {
  awaitPriorGrids();
  releaseDependents();
  smThreadPostFree(v);
}

__global__ void smWaitKernel(SmEndpointView v) {
  awaitPriorGrids();
  releaseDependents();
  (void)smBlockWait(v);
}

// Adjacent sm_signal calls of a MemOpBatch, fused: one launch runs them in order.
__global__ void __launch_bounds__(kSmSendThreads) smProgramKernel(SmProgram p) {
  awaitPriorGrids();
  releaseDependents();
  smRunSteps(p.step, p.count);
}

// Loads every kernel of this file now: under lazy loading a first launch may synchronize the device, which would
// wait forever behind a stream that waits for a peer (see zcopy.h).
Status preloadKernels() {
  const void* kernels[] = {
      reinterpret_cast<const void*>(&graphSignalKernel), reinterpret_cast<const void*>(&graphWaitKernel),
      reinterpret_cast<const void*>(&smSendKernel),      reinterpret_cast<const void*>(&smFreeKernel),
      reinterpret_cast<const void*>(&smWaitKernel),      reinterpret_cast<const void*>(&smProgramKernel)};
  for (const void* k : kernels) {
    cudaFuncAttributes attr{};
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaFuncGetAttributes(&attr, k)).withContext("loading the zcopy kernels"));
  }
  return Status::ok();
}

// The runtime's current device, switched (and restored) only when it differs: calls stay cheap on the hot path.
class DeviceGuard {
 public:
  static StatusOr<DeviceGuard> make(int device) {
    DeviceGuard g;
    int current = -1;
    if (cudaGetDevice(&current) == cudaSuccess && current == device) return g;
    (void)cudaGetLastError();
    PEERLAB_ASSIGN_OR_RETURN(auto scoped, ScopedDevice::make(device));
    g.scoped_.emplace(std::move(scoped));
    return g;
  }

 private:
  std::optional<ScopedDevice> scoped_;
};

CUstream cuStream(cudaStream_t s) {
  return reinterpret_cast<CUstream>(s);
}
CUdeviceptr cuPtr(const void* p) {
  return reinterpret_cast<CUdeviceptr>(p);
}

Status enqueueWait(StreamRef s, const uint32_t* word, uint32_t value, unsigned flags) {
  if (s.batch() != nullptr) return s.batch()->addWait(word, value, flags);
  return PEERLAB_CU(cuStreamWaitValue32, cuStream(s.stream()), cuPtr(word), value, flags);
}

Status enqueueWrite(StreamRef s, uint32_t* word, uint32_t value) {
  if (s.batch() != nullptr) return s.batch()->addWrite(word, value);
  return PEERLAB_CU(cuStreamWriteValue32, cuStream(s.stream()), cuPtr(word), value, CU_STREAM_WRITE_VALUE_DEFAULT);
}

Status flushBatch(StreamRef s) {
  return s.batch() != nullptr ? s.batch()->flush() : Status::ok();
}

// A watched peer process is gone: its pid no longer exists, or it is a zombie nobody reaped yet.
bool processGone(int32_t pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (f == nullptr) return false;
  char buf[512] = {};
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  // "pid (comm) S ...": the state follows the last ')'.
  const char* close = nullptr;
  for (size_t i = 0; i < n; ++i)
    close = buf[i] == ')' ? buf + i : close;
  return close != nullptr && close + 2 < buf + n && (close[2] == 'Z' || close[2] == 'X');
}

}  // namespace

void detail::destroyGraphExec(cudaGraphExec_t g) noexcept {
  if (cudaGraphExecDestroy(g) != cudaSuccess) (void)cudaGetLastError();
}

struct Context::Impl {
  Bootstrap* boot = nullptr;
  ContextOptions options;
  int rank = -1;
  int size = 0;
  std::optional<ipc::SymmetricMemory> page;
  DeviceBuffer counters;  // slotCount * kCounterWords
  PinnedBuffer errors;    // slotCount * kErrorWords, mapped into the device
  uint32_t* errors_device = nullptr;
  std::optional<ipc::HandleCache> windows;
  Stream rescue;
  Stream probe;  // the stream-memory-operation probe at creation (the rescue stream stays free of it)
  Event done;
  bool can_flush_remote_writes = false;
  bool programmatic = false;                            // options.programmatic_launch on a device that has it
  std::vector<int32_t> peer_pid;                        // 0: not watched
  std::vector<int> peer_access_to;                      // devices this context enabled peer access to
  std::vector<std::weak_ptr<Channel::State>> channels;  // by slot
  bool closed = false;
  bool abandoned = false;

  ~Impl() { releaseMappings(); }

  size_t slots() const { return slotCount(size, options.channels); }
  uint32_t* localPage() const { return static_cast<uint32_t*>(page->localPtr()); }
  uint32_t* peerPage(int r) const { return static_cast<uint32_t*>(page->ptr(r)); }

  void releaseMappings() noexcept {
    if (windows) windows->clear();
    page.reset();
    if (!peer_access_to.empty()) {
      if (auto guard = ScopedDevice::make(options.device); guard.isOk()) {
        for (int d : peer_access_to) {
          if (cudaDeviceDisablePeerAccess(d) != cudaSuccess) (void)cudaGetLastError();
        }
      }
      peer_access_to.clear();
    }
  }
};

struct Channel::State {
  std::shared_ptr<Context::Impl> ctx;
  int peer = -1;
  int channel = 0;
  Protocol protocol = Protocol::kGet;
  Role role = Role::kSender;
  size_t slot = 0;
  uint32_t* local_words = nullptr;
  uint32_t* remote_words = nullptr;
  uint8_t* remote_window = nullptr;
  size_t remote_window_bytes = 0;
  uint8_t* local_window = nullptr;  // the exported window (sm_signal receiver: LL messages are copied out into it)
  size_t local_window_bytes = 0;
  uint32_t* counters = nullptr;
  uint32_t* error_host = nullptr;
  uint32_t* error_device = nullptr;
  EndpointState state;
  EndpointState capture_state;
  bool capturing = false;
  GraphSync capture_sync = GraphSync::kMemOps;
  size_t capture_memops = 0;  // stream memory operations enqueued while capturing
  ReplayEpochs replay;
  bool broken = false;
  std::string broken_why;

  std::string name() const {
    return std::string(protocolName(protocol)) + " " + std::string(roleName(role)) + " of channel " +
           std::to_string(channel) + " with rank " + std::to_string(peer);
  }

  SmEndpointView view() const {
    SmEndpointView v;
    v.local_words = local_words;
    v.remote_words = remote_words;
    v.remote_window = remote_window;
    v.remote_window_bytes = remote_window_bytes;
    v.local_window = local_window;
    v.local_window_bytes = local_window_bytes;
    v.counters = counters;
    v.error = error_device;
    v.timeout_ns = ctx->options.device_timeout_ns;
    return v;
  }

  Status deviceError() const {
    const volatile uint32_t* e = error_host;
    const uint32_t code = e[0];
    if (code == kDeviceOk) return Status::ok();
    const uint32_t epoch = e[1];
    const std::string what = name() + ": device-side wait for epoch " + std::to_string(epoch);
    if (code == kDeviceTimeout) {
      return PEERLAB_TIMEOUT(what + " timed out after " + std::to_string(ctx->options.device_timeout_ns / 1000000) +
                             " ms");
    }
    if (code == kDeviceBadInput) {
      return PEERLAB_INVALID_ARGUMENT(what + ": the message's range is outside this side's " +
                                      std::to_string(local_window_bytes) + "-byte window");
    }
    return PEERLAB_INTERNAL(what + " failed with device error " + std::to_string(code));
  }
};

// ---------------------------------------------------------------------------------------------------------------
// MemOpBatch

MemOpBatch::~MemOpBatch() {
  if (pending() > 0) flush().ignore();
}

Status MemOpBatch::flush() {
  PEERLAB_RETURN_IF_ERROR(flushMemOps());
  return flushSteps();
}

Status MemOpBatch::flushMemOps() {
  if (ops_.empty()) return Status::ok();
  std::vector<CUstreamBatchMemOpParams> ops;
  ops.swap(ops_);
  if (ops.size() == 1) {
    const auto& op = ops[0];
    if (op.operation == CU_STREAM_MEM_OP_WAIT_VALUE_32) {
      return PEERLAB_CU(cuStreamWaitValue32, cuStream(stream_), op.waitValue.address, op.waitValue.value,
                        op.waitValue.flags);
    }
    return PEERLAB_CU(cuStreamWriteValue32, cuStream(stream_), op.writeValue.address, op.writeValue.value,
                      op.writeValue.flags);
  }
  return PEERLAB_CU(cuStreamBatchMemOp, cuStream(stream_), static_cast<unsigned>(ops.size()), ops.data(), 0u);
}

Status MemOpBatch::flushSteps() {
  if (program_.count == 0) return Status::ok();
  const SmProgram p = program_;
  program_ = SmProgram{};
  // cudaStreamGetDevice is refused while the stream captures: a capture launches on the capturing thread's device.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaStreamIsCapturing(stream_, &capture)));
  int device = -1;
  if (capture == cudaStreamCaptureStatusNone) {
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaStreamGetDevice(stream_, &device)));
  } else {
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaGetDevice(&device)));
  }
  PEERLAB_ASSIGN_OR_RETURN(auto guard, DeviceGuard::make(device));
  const bool programmatic = program_programmatic_;
  program_programmatic_ = true;
  // One warp polls; a send needs the block of the send kernel.
  return PEERLAB_CUDA_LAUNCHED(launchKernel(smProgramKernel, dim3(1), dim3(kSmSendThreads), stream_, programmatic, p),
                               "smProgramKernel");
}

Status MemOpBatch::addWait(const uint32_t* addr, uint32_t value, unsigned flags) {
  if (addr == nullptr) return PEERLAB_INVALID_ARGUMENT("MemOpBatch::addWait: null address");
  PEERLAB_RETURN_IF_ERROR(flushSteps());
  if (ops_.size() >= kMaxOps) PEERLAB_RETURN_IF_ERROR(flushMemOps());
  CUstreamBatchMemOpParams p;
  std::memset(&p, 0, sizeof(p));
  p.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
  p.waitValue.address = cuPtr(addr);
  p.waitValue.value = value;
  p.waitValue.flags = flags;
  ops_.push_back(p);
  return Status::ok();
}

Status MemOpBatch::addWrite(uint32_t* addr, uint32_t value) {
  if (addr == nullptr) return PEERLAB_INVALID_ARGUMENT("MemOpBatch::addWrite: null address");
  PEERLAB_RETURN_IF_ERROR(flushSteps());
  if (ops_.size() >= kMaxOps) PEERLAB_RETURN_IF_ERROR(flushMemOps());
  CUstreamBatchMemOpParams p;
  std::memset(&p, 0, sizeof(p));
  p.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  p.writeValue.address = cuPtr(addr);
  p.writeValue.value = value;
  // NOTE: every write keeps the default memory barrier, although after the batch's first write only memory
  // operations run and a later write would need no fence of its own. Batches whose later writes dropped it
  // (CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER) failed with CUDA_ERROR_INVALID_VALUE on the H200 machine (driver 580).
  p.writeValue.flags = CU_STREAM_WRITE_VALUE_DEFAULT;
  ops_.push_back(p);
  return Status::ok();
}

Status MemOpBatch::addSmStep(const SmStep& step, bool programmatic) {
  if (step.kind == SmStepKind::kSend && step.bytes > kSmFusedSendBytes) {
    return PEERLAB_INVALID_ARGUMENT("MemOpBatch::addSmStep: a fused send moves at most " +
                                    std::to_string(kSmFusedSendBytes) + " bytes, not " + std::to_string(step.bytes));
  }
  PEERLAB_RETURN_IF_ERROR(flushMemOps());
  if (program_.count >= kSmProgramSteps) PEERLAB_RETURN_IF_ERROR(flushSteps());
  program_.step[program_.count++] = step;
  program_programmatic_ = program_programmatic_ && programmatic;
  if (step.kind == SmStepKind::kSend) program_.has_send = 1;
  return Status::ok();
}

// ---------------------------------------------------------------------------------------------------------------
// Context

namespace {

struct Agreement {
  int32_t ok = 0;
  int32_t channels = 0;
  uint32_t initial_epoch = 0;
  uint32_t kind = 0;
  int32_t device = -1;
  int32_t pad = 0;
};

Status checkStreamMemOps(int device) {
  int driver = 0;
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaDriverGetVersion(&driver)));
  // Stream memory operations (v2) are always on from CUDA 11.7; before, the kernel module had to enable them.
  if (driver < 11070) {
    CUdevice dev = 0;
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CU(cuDeviceGet, &dev, device));
    int v1 = 0;
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CU(cuDeviceGetAttribute, &v1, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1, dev));
    if (v1 == 0) {
      return PEERLAB_UNAVAILABLE("device " + std::to_string(device) +
                                 ": stream memory operations are disabled (driver " + formatCudaVersion(driver) +
                                 " needs NVreg_EnableStreamMemOPs=1)");
    }
  }
  return Status::ok();
}

Status checkOptions(const ContextOptions& o) {
  PEERLAB_ASSIGN_OR_RETURN(int count, deviceCount());
  if (o.device < 0 || o.device >= count) {
    return PEERLAB_INVALID_ARGUMENT("zcopy context: device " + std::to_string(o.device) + " is not one of the " +
                                    std::to_string(count) + " visible devices");
  }
  if (o.channels < 1 || o.channels > 1024) {
    return PEERLAB_INVALID_ARGUMENT("zcopy context: channels = " + std::to_string(o.channels) +
                                    " (1 to 1024 per peer)");
  }
  if (o.device_timeout_ns == 0) return PEERLAB_INVALID_ARGUMENT("zcopy context: device_timeout_ns = 0");
  return checkStreamMemOps(o.device);
}

// Probes that this device can write and wait on a local word and write a word in every peer's page (the value
// written into a peer's slot is the initial epoch it already holds or is about to hold).
Status probeMemOps(Context::Impl& c, Deadline deadline) {
  cudaStream_t s = c.probe.get();
  uint32_t* probe = c.counters->as<uint32_t>() + kCtrProbe;
  auto check = [&](CUresult r, const char* what) -> Status {
    if (r == CUDA_SUCCESS) return Status::ok();
    if (r == CUDA_ERROR_NOT_SUPPORTED) {
      return PEERLAB_UNAVAILABLE("device " + std::to_string(c.options.device) + ": " + what +
                                 " is not supported: " + describeCuResult(r));
    }
    return ::peerlab::detail::cuStatus(r, what, __FILE__, __LINE__);
  };
  PEERLAB_RETURN_IF_ERROR(
      check(PEERLAB_DRIVER_CALL(cuStreamWriteValue32, cuStream(s), cuPtr(probe), 1u, CU_STREAM_WRITE_VALUE_DEFAULT),
            "cuStreamWriteValue32"));
  PEERLAB_RETURN_IF_ERROR(
      check(PEERLAB_DRIVER_CALL(cuStreamWaitValue32, cuStream(s), cuPtr(probe), 1u, CU_STREAM_WAIT_VALUE_GEQ),
            "cuStreamWaitValue32"));
  for (int r = 0; r < c.size; ++r) {
    if (r == c.rank) continue;
    uint32_t* word = c.peerPage(r) + slotIndex(c.rank, 0, Role::kSender, c.options.channels) * kSlotWords + kInboxWord;
    PEERLAB_RETURN_IF_ERROR(check(PEERLAB_DRIVER_CALL(cuStreamWriteValue32, cuStream(s), cuPtr(word),
                                                      c.options.initial_epoch, CU_STREAM_WRITE_VALUE_DEFAULT),
                                  "cuStreamWriteValue32 into a peer's mapped page"));
  }
  Status done = waitStream(s, deadline, "zcopy stream memory operation probe");
  if (!done.isOk()) {
    // The probe's own write never landed (or its stream is held up): release its wait with a memset from the rescue
    // stream, so nothing is left waiting when the context is torn down.
    (void)PEERLAB_CU(cuMemsetD32Async, cuPtr(probe), 1u, 1, cuStream(c.rescue.get()));
    (void)waitStream(c.rescue.get(), Deadline::afterMs(1000), "releasing the probe's wait");
  }
  return done;
}

void enablePeerAccess(Context::Impl& c) {
  for (int r = 0; r < c.size; ++r) {
    if (r == c.rank) continue;
    auto ordinal = ordinalForUuid(formatUuid(c.page->peers().descriptor(r).device_uuid));
    if (!ordinal.isOk() || *ordinal == c.options.device) continue;
    int can = 0;
    if (cudaDeviceCanAccessPeer(&can, c.options.device, *ordinal) != cudaSuccess || can == 0) {
      (void)cudaGetLastError();
      continue;
    }
    const cudaError_t err = cudaDeviceEnablePeerAccess(*ordinal, 0);
    if (err == cudaSuccess) {
      c.peer_access_to.push_back(*ordinal);
    } else {
      // Already enabled by someone else (left as it is), or not possible: IPC mappings work without it.
      (void)cudaGetLastError();
    }
  }
}

}  // namespace

Context::Context(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Context::Context(Context&&) noexcept = default;
Context& Context::operator=(Context&&) noexcept = default;
Context::~Context() = default;

int Context::rank() const {
  return impl_->rank;
}
int Context::size() const {
  return impl_->size;
}
int Context::device() const {
  return impl_->options.device;
}
const ContextOptions& Context::options() const {
  return impl_->options;
}

StatusOr<Context> Context::create(Bootstrap& boot, const ContextOptions& options, Deadline deadline) {
  auto c = std::make_shared<Impl>();
  c->boot = &boot;
  c->options = options;
  c->rank = boot.rank();
  c->size = boot.size();

  // Every rank joins the agreement, also after its own checks failed, so that peers fail fast instead of waiting.
  Status local = checkOptions(options);
  Agreement mine{local.isOk() ? 1 : 0,  options.channels,
                 options.initial_epoch, static_cast<uint32_t>(options.semaphore_kind),
                 options.device,        0};
  std::vector<Agreement> all(static_cast<size_t>(c->size));
  PEERLAB_RETURN_IF_ERROR(boot.allgather(&mine, all.data(), sizeof(Agreement), deadline));
  PEERLAB_RETURN_IF_ERROR(local);
  for (int r = 0; r < c->size; ++r) {
    const Agreement& a = all[static_cast<size_t>(r)];
    if (a.ok == 0) return PEERLAB_UNAVAILABLE("zcopy context: rank " + std::to_string(r) + " could not start");
    if (a.channels != mine.channels || a.initial_epoch != mine.initial_epoch || a.kind != mine.kind) {
      return PEERLAB_INVALID_ARGUMENT(
          "zcopy context: rank " + std::to_string(r) + " has channels=" + std::to_string(a.channels) +
          " initial_epoch=" + std::to_string(a.initial_epoch) + " kind=" + std::to_string(a.kind) + ", rank " +
          std::to_string(c->rank) + " has " + std::to_string(mine.channels) + "/" + std::to_string(mine.initial_epoch) +
          "/" + std::to_string(mine.kind));
    }
  }

  const int dev = options.device;
  const size_t slots = c->slots();
  {
    PEERLAB_ASSIGN_OR_RETURN(auto page, ipc::SymmetricMemory::create(boot, dev, pageBytes(c->size, options.channels),
                                                                     options.semaphore_kind, deadline));
    c->page.emplace(std::move(page));
  }
  PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(dev));
  PEERLAB_RETURN_IF_ERROR(preloadKernels());
  PEERLAB_ASSIGN_OR_RETURN(c->counters, allocDevice(dev, slots * kCounterWords * sizeof(uint32_t)));
  PEERLAB_ASSIGN_OR_RETURN(
      c->errors, allocPinned(slots * kErrorWords * sizeof(uint32_t), cudaHostAllocMapped | cudaHostAllocPortable));
  std::memset(c->errors->ptr, 0, c->errors->bytes);
  void* mapped = nullptr;
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaHostGetDevicePointer(&mapped, c->errors->ptr, 0)));
  c->errors_device = static_cast<uint32_t*>(mapped);
  // The rescue stream releases waits on other streams: highest priority, so it does not queue behind them.
  int least_priority = 0, greatest_priority = 0;
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaDeviceGetStreamPriorityRange(&least_priority, &greatest_priority)));
  PEERLAB_ASSIGN_OR_RETURN(c->rescue, createStream(dev, cudaStreamNonBlocking, greatest_priority));
  PEERLAB_ASSIGN_OR_RETURN(c->probe, createStream(dev, cudaStreamNonBlocking, greatest_priority));
  PEERLAB_ASSIGN_OR_RETURN(c->done, createEvent(dev));

  // Every word starts at the initial epoch (the send kernel's block count at 0), before any peer may signal.
  std::vector<uint32_t> words(pageBytes(c->size, options.channels) / sizeof(uint32_t), options.initial_epoch);
  PEERLAB_RETURN_IF_ERROR(
      PEERLAB_CUDA(cudaMemcpy(c->localPage(), words.data(), words.size() * sizeof(uint32_t), cudaMemcpyHostToDevice)));
  std::vector<uint32_t> ctr(slots * kCounterWords, options.initial_epoch);
  for (size_t s = 0; s < slots; ++s)
    ctr[s * kCounterWords + kCtrSmBlocks] = 0;
  PEERLAB_RETURN_IF_ERROR(
      PEERLAB_CUDA(cudaMemcpy(c->counters->ptr, ctr.data(), ctr.size() * sizeof(uint32_t), cudaMemcpyHostToDevice)));

  int flush = 0;
  if (cudaDeviceGetAttribute(&flush, cudaDevAttrCanFlushRemoteWrites, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    flush = 0;
  }
  c->can_flush_remote_writes = flush != 0;
  c->programmatic = options.programmatic_launch && programmaticLaunchSupported(options.device);
  c->windows.emplace(ipc::makeHandleCache(ipc::ImportOptions{dev, {}}));
  c->channels.resize(slots);
  enablePeerAccess(*c);
  if (Status probed = probeMemOps(*c, deadline); !probed.isOk()) {
    // The probe's stream may still hold work the fault or the peer holds up (a delayed write, a write into a stuck
    // mapping): freeing the context's memory now would wait for it, past the deadline. Released once it drained.
    std::vector<cudaStream_t> busy{c->probe.get(), c->rescue.get()};
    releaseWhenIdle(std::move(c), std::move(busy), dev);
    return probed;
  }

  c->peer_pid.assign(static_cast<size_t>(c->size), 0);
  for (int r = 0; r < c->size; ++r) {
    if (r == c->rank) continue;
    const int32_t pid = c->page->peers().descriptor(r).owner_pid;
    // Watch a peer only when its pid is visible from here (same pid namespace).
    if (pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM)) c->peer_pid[static_cast<size_t>(r)] = pid;
  }
  // No peer signals into this page before every page is initialized.
  PEERLAB_RETURN_IF_ERROR(boot.barrier(deadline));
  return Context(std::move(c));
}

Status Context::deviceErrors() const {
  for (const auto& w : impl_->channels) {
    if (auto ch = w.lock()) PEERLAB_RETURN_IF_ERROR(ch->deviceError());
  }
  return Status::ok();
}

Status Context::wait(cudaStream_t stream, Deadline deadline, std::string_view what) {
  using namespace std::chrono;
  Impl& c = *impl_;
  PEERLAB_ASSIGN_OR_RETURN(auto guard, DeviceGuard::make(c.options.device));
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaEventRecord(c.done.get(), stream)));
  const auto start = steady_clock::now();
  auto next_check = start + milliseconds(1);
  std::optional<steady_clock::time_point> gone_at;
  int gone_rank = -1;
  for (;;) {
    const cudaError_t err = cudaEventQuery(c.done.get());
    if (err == cudaSuccess) break;
    if (err != cudaErrorNotReady) return PEERLAB_CUDA(err).withContext(std::string(what));
    const auto now = steady_clock::now();
    if (deadline.expired()) {
      return PEERLAB_TIMEOUT(std::string(what) + ": not complete after " +
                             std::to_string(duration_cast<milliseconds>(now - start).count()) + " ms");
    }
    if (now >= next_check) {
      next_check = now + milliseconds(1);
      if (!gone_at) {
        for (int r = 0; r < c.size; ++r) {
          if (processGone(c.peer_pid[static_cast<size_t>(r)])) {
            gone_at = now;
            gone_rank = r;
            break;
          }
        }
      } else if (now - *gone_at > milliseconds(500)) {
        // The stream did not drain within 500 ms of the peer's exit: it waits for that peer.
        return PEERLAB_TIMEOUT(std::string(what) + ": peer lost: rank " + std::to_string(gone_rank) + " (pid " +
                               std::to_string(c.peer_pid[static_cast<size_t>(gone_rank)]) +
                               ") exited while this stream still waited, after " +
                               std::to_string(duration_cast<milliseconds>(now - start).count()) + " ms");
      }
    }
    // Spin for the first 50 us (small-message latency), then yield, then sleep.
    const auto spent = now - start;
    if (spent < microseconds(50)) continue;
    if (spent < milliseconds(2)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(microseconds(100));
    }
  }
  return deviceErrors();
}

Status Context::abandon(Deadline deadline) {
  Impl& c = *impl_;
  if (c.closed) return Status::ok();
  PEERLAB_ASSIGN_OR_RETURN(auto guard, DeviceGuard::make(c.options.device));
  Status first;
  for (const auto& w : c.channels) {
    auto ch = w.lock();
    if (!ch) continue;
    if (!ch->broken) {
      ch->broken = true;
      ch->broken_why = "abandoned after a failure";
    }
    if (ch->protocol == Protocol::kSmSignal) continue;  // its kernels end at their own deadline
    // The last epoch this side's stream waits for (eager calls and completed replays): every earlier wait passes too.
    // Written with a memset, not a stream memory operation: the failure being cleaned up may be one of those.
    Status st = PEERLAB_CU(cuMemsetD32Async, cuPtr(ch->local_words + kInboxWord), ch->state.wait_epoch, 1,
                           cuStream(c.rescue.get()));
    if (!st.isOk() && first.isOk()) first = st;
  }
  c.abandoned = true;
  PEERLAB_RETURN_IF_ERROR(first);
  return waitStream(c.rescue.get(), deadline, "releasing blocked zero-copy stream waits");
}

Status Context::close(Deadline deadline) {
  Impl& c = *impl_;
  if (c.closed) return Status::ok();
  c.closed = true;
  if (c.windows) c.windows->clear();
  Status st = c.page ? c.page->close(*c.boot, deadline) : Status::ok();
  c.releaseMappings();
  return st;
}

// ---------------------------------------------------------------------------------------------------------------
// Channel

namespace {

struct Hello {
  uint32_t magic = 0x5a43504cu;  // "LPCZ"
  int32_t ok = 0;
  uint32_t protocol = 0;
  uint32_t role = 0;
  int32_t channel = -1;
  int32_t exports = 0;
  int32_t has_fd = 0;
  int32_t pad = 0;
  std::byte descriptor[ipc::kDescriptorWireBytes] = {};
};

bool exportsWindow(Protocol p, Role r) {
  return p == Protocol::kGet ? r == Role::kSender : r == Role::kReceiver;
}

// Point-to-point exchange in a fixed order (lower rank sends first), so it cannot deadlock.
template <class T>
Status swapWith(Bootstrap& boot, int peer, const T& mine, T& theirs, Deadline deadline) {
  if (boot.rank() < peer) {
    PEERLAB_RETURN_IF_ERROR(boot.send(peer, &mine, sizeof(T), deadline));
    return boot.recv(peer, &theirs, sizeof(T), deadline);
  }
  PEERLAB_RETURN_IF_ERROR(boot.recv(peer, &theirs, sizeof(T), deadline));
  return boot.send(peer, &mine, sizeof(T), deadline);
}

Status checkChannelOptions(const Context::Impl& c, const ChannelOptions& o) {
  const std::string who = "zcopy channel " + std::to_string(o.channel) + " with rank " + std::to_string(o.peer);
  if (c.closed || c.abandoned) return PEERLAB_INVALID_ARGUMENT(who + ": the context is closed or abandoned");
  if (o.peer < 0 || o.peer >= c.size || o.peer == c.rank) {
    return PEERLAB_INVALID_ARGUMENT(who + ": peer must be another rank of 0.." + std::to_string(c.size - 1));
  }
  if (o.channel < 0 || o.channel >= c.options.channels) {
    return PEERLAB_INVALID_ARGUMENT(who + ": channel must be 0.." + std::to_string(c.options.channels - 1));
  }
  if (o.protocol != Protocol::kGet && o.protocol != Protocol::kPut && o.protocol != Protocol::kSmSignal) {
    return PEERLAB_INVALID_ARGUMENT(who + ": unknown protocol");
  }
  if (o.role != Role::kSender && o.role != Role::kReceiver) return PEERLAB_INVALID_ARGUMENT(who + ": unknown role");
  const size_t slot = slotIndex(o.peer, o.channel, o.role, c.options.channels);
  if (!c.channels[slot].expired()) {
    return PEERLAB_INVALID_ARGUMENT(who + ": this side (" + std::string(roleName(o.role)) + ") is already connected");
  }
  if (exportsWindow(o.protocol, o.role)) {
    if (o.window == nullptr || o.window->ptr == nullptr) {
      return PEERLAB_INVALID_ARGUMENT(who + ": the " + std::string(roleName(o.role)) + " of a " +
                                      std::string(protocolName(o.protocol)) + " channel must export a window");
    }
    if (o.window->device != c.options.device) {
      return PEERLAB_INVALID_ARGUMENT(who + ": the window is on device " + std::to_string(o.window->device) +
                                      ", the context on device " + std::to_string(c.options.device));
    }
    if (o.window_offset > o.window->bytes || o.window_bytes > o.window->bytes - o.window_offset) {
      return PEERLAB_INVALID_ARGUMENT(who + ": window range [" + std::to_string(o.window_offset) + ", +" +
                                      std::to_string(o.window_bytes) + ") is outside the " +
                                      std::to_string(o.window->bytes) + "-byte allocation");
    }
  }
  return Status::ok();
}

}  // namespace

Channel::Channel(std::shared_ptr<State> state) : state_(std::move(state)) {}
Channel::Channel(Channel&&) noexcept = default;
Channel& Channel::operator=(Channel&&) noexcept = default;
Channel::~Channel() = default;

StatusOr<Channel> Channel::create(Context& ctx, const ChannelOptions& o, Deadline deadline) {
  Context::Impl& c = *ctx.impl();
  Bootstrap& boot = *c.boot;
  Status local = checkChannelOptions(c, o);
  const bool exporter = exportsWindow(o.protocol, o.role);
  // Without a valid peer there is nobody to tell; otherwise the peer learns of the failure through the exchange.
  if (o.peer < 0 || o.peer >= c.size || o.peer == c.rank) return local;

  Hello mine;
  ipc::Descriptor desc;
  int fd = -1;
  if (local.isOk() && exporter) {
    const size_t bytes = o.window_bytes != 0 ? o.window_bytes : o.window->bytes - o.window_offset;
    auto d = ipc::describeRange(*o.window, o.window_offset, bytes, c.rank);
    if (d.isOk()) {
      desc = *d;
      if (desc.kind == ipc::HandleKind::kVmmFd) {
        auto f = ipc::exportFd(*o.window);
        if (f.isOk()) {
          fd = *f;
        } else {
          local = f.status();
        }
      }
    } else {
      local = d.status();
    }
  }
  mine.ok = local.isOk() ? 1 : 0;
  mine.protocol = static_cast<uint32_t>(o.protocol);
  mine.role = static_cast<uint32_t>(o.role);
  mine.channel = o.channel;
  mine.exports = exporter ? 1 : 0;
  mine.has_fd = fd >= 0 ? 1 : 0;
  if (local.isOk() && exporter)
    ipc::encodeDescriptor(desc, std::span<std::byte, ipc::kDescriptorWireBytes>(mine.descriptor));
  const Fd fd_owner(fd);

  Hello theirs;
  PEERLAB_RETURN_IF_ERROR(swapWith(boot, o.peer, mine, theirs, deadline));
  PEERLAB_RETURN_IF_ERROR(local);
  const std::string who = "zcopy channel " + std::to_string(o.channel) + " with rank " + std::to_string(o.peer);
  if (theirs.magic != mine.magic) return PEERLAB_INTERNAL(who + ": garbled setup message");
  if (theirs.ok == 0) return PEERLAB_INVALID_ARGUMENT(who + ": rank " + std::to_string(o.peer) + " rejected its side");
  if (theirs.protocol != mine.protocol || theirs.channel != mine.channel ||
      theirs.role != static_cast<uint32_t>(opposite(o.role))) {
    return PEERLAB_INVALID_ARGUMENT(
        who + ": this rank is the " + std::string(protocolName(o.protocol)) + " " + std::string(roleName(o.role)) +
        " of channel " + std::to_string(o.channel) + ", rank " + std::to_string(o.peer) + " the " +
        std::string(protocolName(static_cast<Protocol>(theirs.protocol))) + " " +
        std::string(roleName(static_cast<Role>(theirs.role))) + " of channel " + std::to_string(theirs.channel));
  }

  // The window's file descriptor (kVmmFd) travels after the descriptors, from the exporter to the importer.
  Status imported;
  uint8_t* remote_window = nullptr;
  size_t remote_window_bytes = 0;
  if (exporter) {
    if (fd >= 0) PEERLAB_RETURN_IF_ERROR(boot.sendFds(o.peer, &fd, 1, deadline));
  } else {
    int peer_fd = -1;
    if (theirs.has_fd != 0) PEERLAB_RETURN_IF_ERROR(boot.recvFds(o.peer, &peer_fd, 1, deadline));
    auto d = ipc::decodeDescriptor(std::span<const std::byte>(theirs.descriptor, ipc::kDescriptorWireBytes));
    if (!d.isOk()) {
      if (peer_fd >= 0) ::close(peer_fd);
      imported = d.status();
    } else {
      auto m = c.windows->get(*d, peer_fd);  // takes the fd
      if (m.isOk()) {
        remote_window = static_cast<uint8_t*>((*m)->get().ptr);
        remote_window_bytes = (*m)->get().bytes;
      } else {
        imported = m.status();
      }
    }
  }
  // Both sides learn whether the import worked, so they fail together.
  int32_t my_ok = imported.isOk() ? 1 : 0, their_ok = 0;
  PEERLAB_RETURN_IF_ERROR(swapWith(boot, o.peer, my_ok, their_ok, deadline));
  PEERLAB_RETURN_IF_ERROR(imported.withContext(who + ": mapping the peer's window"));
  if (their_ok == 0) return PEERLAB_UNAVAILABLE(who + ": rank " + std::to_string(o.peer) + " could not map the window");

  auto s = std::make_shared<State>();
  s->ctx = ctx.impl_;
  s->peer = o.peer;
  s->channel = o.channel;
  s->protocol = o.protocol;
  s->role = o.role;
  s->slot = slotIndex(o.peer, o.channel, o.role, c.options.channels);
  s->local_words = c.localPage() + s->slot * kSlotWords;
  s->remote_words =
      c.peerPage(o.peer) + slotIndex(c.rank, o.channel, opposite(o.role), c.options.channels) * kSlotWords;
  s->remote_window = remote_window;
  s->remote_window_bytes = remote_window_bytes;
  if (exporter) {
    s->local_window = static_cast<uint8_t*>(o.window->ptr) + o.window_offset;
    s->local_window_bytes = o.window_bytes != 0 ? o.window_bytes : o.window->bytes - o.window_offset;
  }
  s->counters = c.counters->as<uint32_t>() + s->slot * kCounterWords;
  s->error_host = c.errors->as<uint32_t>() + s->slot * kErrorWords;
  s->error_device = c.errors_device + s->slot * kErrorWords;
  s->state = initialState(o.protocol, o.role, c.options.initial_epoch);
  c.channels[s->slot] = s;
  return Channel(std::move(s));
}

namespace {

Status launchCopy(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return Status::ok();
  return PEERLAB_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
}

// Turns a call's steps into work on the stream; `enqueued_any` tells whether something reached it before a failure.
Status enqueueSteps(Channel::State& s, Call call, const Steps& steps, StreamRef where, bool capturing, void* local,
                    size_t remote_offset, size_t bytes, bool& enqueued_any) {
  Context::Impl& c = *s.ctx;
  cudaStream_t stream = where.stream();
  if (s.protocol == Protocol::kSmSignal) {
    const SmEndpointView v = s.view();
    // Through a batch, the call becomes a step of the batch's fused kernel (a send that one block moves).
    if (where.batch() != nullptr && (call != Call::kSendPost || bytes <= kSmFusedSendBytes)) {
      SmStep step;
      step.view = v;
      switch (call) {
        case Call::kSendPost:
          step.kind = SmStepKind::kSend;
          step.src = local;
          step.dst_offset = remote_offset;
          step.bytes = bytes;
          break;
        case Call::kRecvPost:
          step.kind = SmStepKind::kFree;
          break;
        case Call::kRecvWait:
          step.kind = SmStepKind::kWait;
          break;
        case Call::kSendWait:
          return Status::ok();
      }
      PEERLAB_RETURN_IF_ERROR(where.batch()->addSmStep(step, c.programmatic));
      enqueued_any = true;
      return Status::ok();
    }
    PEERLAB_RETURN_IF_ERROR(flushBatch(where));
    const bool pdl = c.programmatic;
    switch (call) {
      case Call::kSendPost:
        enqueued_any = true;
        return PEERLAB_CUDA_LAUNCHED(launchKernel(smSendKernel, dim3(smSendBlocks(bytes)), dim3(kSmSendThreads), stream,
                                                  pdl, v, static_cast<const uint8_t*>(local), remote_offset, bytes),
                                     "smSendKernel");
      case Call::kRecvPost:
        enqueued_any = true;
        return PEERLAB_CUDA_LAUNCHED(launchKernel(smFreeKernel, dim3(1), dim3(1), stream, pdl, v), "smFreeKernel");
      case Call::kRecvWait:
        enqueued_any = true;
        return PEERLAB_CUDA_LAUNCHED(launchKernel(smWaitKernel, dim3(1), dim3(kSmSendThreads), stream, pdl, v),
                                     "smWaitKernel");
      case Call::kSendWait:
        return Status::ok();
    }
    return Status::ok();
  }
  uint32_t* inbox = s.local_words + kInboxWord;
  uint32_t* peer_inbox = s.remote_words + kInboxWord;
  // put: the receiver's wait for "arrived" also flushes remote writes where the platform can.
  const bool flush = c.can_flush_remote_writes && s.protocol == Protocol::kPut && call == Call::kRecvWait;
  const unsigned wait_flags = CU_STREAM_WAIT_VALUE_GEQ | (flush ? CU_STREAM_WAIT_VALUE_FLUSH : 0u);
  // Captured under GraphSync::kKernels: one-thread kernels with device-held epochs; otherwise stream memory
  // operations with the planned epochs (Graph::launch rewrites captured ones for every replay).
  const bool kernels = capturing && s.capture_sync == GraphSync::kKernels;
  for (int i = 0; i < steps.count; ++i) {
    const Step& step = steps.step[static_cast<size_t>(i)];
    switch (step.kind) {
      case StepKind::kWait:
        if (kernels) {
          PEERLAB_RETURN_IF_ERROR(flushBatch(where));
          graphWaitKernel<<<1, 1, 0, stream>>>(inbox, s.counters + kCtrWait, s.error_device,
                                               c.options.device_timeout_ns);
          PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA_LAUNCH("graphWaitKernel"));
        } else {
          PEERLAB_RETURN_IF_ERROR(enqueueWait(where, inbox, step.epoch, wait_flags));
          if (capturing) ++s.capture_memops;
        }
        break;
      case StepKind::kSignal:
        if (kernels) {
          PEERLAB_RETURN_IF_ERROR(flushBatch(where));
          graphSignalKernel<<<1, 1, 0, stream>>>(peer_inbox, s.counters + kCtrSignal);
          PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA_LAUNCH("graphSignalKernel"));
        } else {
          PEERLAB_RETURN_IF_ERROR(enqueueWrite(where, peer_inbox, step.epoch));
          if (capturing) ++s.capture_memops;
        }
        break;
      case StepKind::kCopy:
        PEERLAB_RETURN_IF_ERROR(flushBatch(where));
        if (s.protocol == Protocol::kGet) {
          PEERLAB_RETURN_IF_ERROR(launchCopy(local, s.remote_window + remote_offset, bytes, stream));
        } else {
          PEERLAB_RETURN_IF_ERROR(launchCopy(s.remote_window + remote_offset, local, bytes, stream));
        }
        break;
    }
    enqueued_any = true;
  }
  return Status::ok();
}

// Enqueues one call: plans it on the host state (or the capture state while a graph is being captured), then turns
// its steps into stream memory operations and a copy (get / put; one-thread kernels and a copy when captured under
// GraphSync::kKernels), or kernels (sm_signal: a step of a batch's fused kernel, or its own launch). The state
// advances only when everything was enqueued.
Status runCall(Channel::State& s, Call call, StreamRef where, void* local, size_t remote_offset, size_t bytes,
               bool has_message) {
  const std::string what = std::string(callName(call)) + " on the " + s.name();
  if (s.broken) return PEERLAB_INVALID_ARGUMENT(what + ": the channel is unusable (" + s.broken_why + ")");
  Context::Impl& c = *s.ctx;
  if (c.closed) return PEERLAB_INVALID_ARGUMENT(what + ": the context is closed");
  PEERLAB_ASSIGN_OR_RETURN(auto guard, DeviceGuard::make(c.options.device));
  cudaStream_t stream = where.stream();
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaStreamIsCapturing(stream, &capture)).withContext(what));
  const bool capturing = capture == cudaStreamCaptureStatusActive;
  if (capture == cudaStreamCaptureStatusInvalidated) {
    return PEERLAB_INVALID_ARGUMENT(what + ": the stream's capture was invalidated");
  }
  if (capturing && !s.capturing) {
    return PEERLAB_INVALID_ARGUMENT(what + ": the stream is being captured; capture through zcopy::Graph::capture");
  }
  if (!capturing && s.capturing) {
    return PEERLAB_INVALID_ARGUMENT(what + ": the channel is being captured; no eager calls until the capture ends");
  }

  EndpointState& st = capturing ? s.capture_state : s.state;
  EndpointState next = st;
  PEERLAB_ASSIGN_OR_RETURN(Steps steps, planCall(next, call));
  if (copiesOn(s.protocol, call) != has_message) {
    return PEERLAB_INVALID_ARGUMENT(what + (has_message ? ": this call takes no message (the other side names it)"
                                                        : ": this call moves the data and needs its message"));
  }
  if (has_message) {
    PEERLAB_RETURN_IF_ERROR(validateMessage(s.protocol, local, remote_offset, bytes, s.remote_window_bytes));
  }

  bool enqueued_any = false;
  Status enq = enqueueSteps(s, call, steps, where, capturing, local, remote_offset, bytes, enqueued_any);
  if (!enq.isOk()) {
    if (enqueued_any) {
      // Part of the call is on the stream: the two sides no longer agree on epochs.
      s.broken = true;
      s.broken_why = enq.toString();
    }
    return enq.withContext(what);
  }
  st = next;
  // The device counters of GraphSync::kKernels replays no longer match the host's epochs.
  if (!capturing && s.protocol != Protocol::kSmSignal) s.replay.eagerCall();
  return Status::ok();
}

}  // namespace

Status Channel::sendPost(StreamRef s) {
  return runCall(*state_, Call::kSendPost, s, nullptr, 0, 0, false);
}
Status Channel::sendPost(StreamRef s, const void* src, size_t dst_offset, size_t bytes) {
  return runCall(*state_, Call::kSendPost, s, const_cast<void*>(src), dst_offset, bytes, true);
}
Status Channel::sendWait(StreamRef s) {
  return runCall(*state_, Call::kSendWait, s, nullptr, 0, 0, false);
}
Status Channel::recvPost(StreamRef s, void* dst, size_t src_offset, size_t bytes) {
  return runCall(*state_, Call::kRecvPost, s, dst, src_offset, bytes, true);
}
Status Channel::recvPost(StreamRef s) {
  return runCall(*state_, Call::kRecvPost, s, nullptr, 0, 0, false);
}
Status Channel::recvWait(StreamRef s) {
  return runCall(*state_, Call::kRecvWait, s, nullptr, 0, 0, false);
}

Status Channel::deviceError() const {
  return state_->deviceError();
}

StatusOr<SmEndpointView> Channel::smView() const {
  if (state_->protocol != Protocol::kSmSignal) {
    return PEERLAB_INVALID_ARGUMENT("smView on the " + state_->name() + ": only sm_signal channels have one");
  }
  return state_->view();
}

Status Channel::accountDeviceCalls(Call call, uint64_t count) {
  State& s = *state_;
  if (s.protocol != Protocol::kSmSignal) {
    return PEERLAB_INVALID_ARGUMENT("accountDeviceCalls on the " + s.name() + ": only sm_signal channels");
  }
  EndpointState next = s.state;
  for (uint64_t i = 0; i < count; ++i)
    PEERLAB_RETURN_IF_ERROR(planCall(next, call).status());
  s.state = next;
  return Status::ok();
}

Protocol Channel::protocol() const {
  return state_->protocol;
}
Role Channel::role() const {
  return state_->role;
}
int Channel::peer() const {
  return state_->peer;
}
int Channel::channel() const {
  return state_->channel;
}
int Channel::smsOccupied(size_t bytes, bool sync_kernels) const {
  return zcopy::smsOccupied(state_->protocol, bytes, sync_kernels);
}
size_t Channel::remoteWindowBytes() const {
  return state_->remote_window_bytes;
}

// ---------------------------------------------------------------------------------------------------------------
// Graph

void detail::destroyGraph(cudaGraph_t g) noexcept {
  if (cudaGraphDestroy(g) != cudaSuccess) (void)cudaGetLastError();
}

StatusOr<Graph> Graph::capture(cudaStream_t stream, const std::vector<Channel*>& channels,
                               const std::function<Status()>& body, const GraphOptions& options) {
  if (stream == nullptr) return PEERLAB_INVALID_ARGUMENT("zcopy graph capture: null stream (use a created stream)");
  if (options.sync != GraphSync::kMemOps && options.sync != GraphSync::kKernels) {
    return PEERLAB_INVALID_ARGUMENT("zcopy graph capture: unknown GraphSync");
  }
  int device = -1;
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaStreamGetDevice(stream, &device)));
  std::vector<std::shared_ptr<Channel::State>> states;
  for (Channel* ch : channels) {
    if (ch == nullptr || !ch->state_) return PEERLAB_INVALID_ARGUMENT("zcopy graph capture: null channel");
    bool seen = false;
    for (const auto& s : states)
      seen = seen || s == ch->state_;
    if (seen) continue;
    if (ch->state_->capturing) {
      return PEERLAB_INVALID_ARGUMENT("zcopy graph capture: the " + ch->state_->name() + " is already being captured");
    }
    if (ch->state_->broken) {
      return PEERLAB_INVALID_ARGUMENT("zcopy graph capture: the " + ch->state_->name() + " is unusable");
    }
    if (ch->state_->ctx->options.device != device) {
      return PEERLAB_INVALID_ARGUMENT("zcopy graph capture: the stream is on device " + std::to_string(device) +
                                      ", the " + ch->state_->name() + " on device " +
                                      std::to_string(ch->state_->ctx->options.device));
    }
    states.push_back(ch->state_);
  }
  PEERLAB_ASSIGN_OR_RETURN(auto guard, DeviceGuard::make(device));
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal)));
  for (auto& s : states) {
    s->capturing = true;
    s->capture_state = s->state;
    s->capture_sync = options.sync;
    s->capture_memops = 0;
  }
  Status body_status = body();
  cudaGraph_t g = nullptr;
  Status end = PEERLAB_CUDA(cudaStreamEndCapture(stream, &g));
  Graph out;
  out.device_ = device;
  out.sync_ = options.sync;
  if (g != nullptr) out.graph_.reset(g);
  size_t memops = 0;
  for (auto& s : states) {
    s->capturing = false;
    out.entries_.push_back(Entry{s, deltaOf(s->state, s->capture_state), s->state});
    memops += s->capture_memops;
  }
  PEERLAB_RETURN_IF_ERROR(body_status.withContext("while capturing a zcopy graph"));
  PEERLAB_RETURN_IF_ERROR(end);
  if (memops > 0) PEERLAB_RETURN_IF_ERROR(out.findMemOpNodes(g, memops));
  cudaGraphExec_t exec = nullptr;
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaGraphInstantiate(&exec, g, 0)));
  out.exec_.reset(exec);
  // Upload now, so that the first launch does not (a launch may sit behind a gate or a waiting stream).
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaGraphUpload(exec, stream)));
  return out;
}

Status Graph::findMemOpNodes(cudaGraph_t g, size_t expected) {
  CUgraph graph = reinterpret_cast<CUgraph>(g);
  size_t count = 0;
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CU(cuGraphGetNodes, graph, nullptr, &count));
  std::vector<CUgraphNode> nodes(count);
  if (count > 0) PEERLAB_RETURN_IF_ERROR(PEERLAB_CU(cuGraphGetNodes, graph, nodes.data(), &count));
  size_t found = 0;
  for (CUgraphNode node : nodes) {
    CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CU(cuGraphNodeGetType, node, &type));
    if (type != CU_GRAPH_NODE_TYPE_BATCH_MEM_OP) continue;
    CUDA_BATCH_MEM_OP_NODE_PARAMS p;
    std::memset(&p, 0, sizeof(p));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CU(cuGraphBatchMemOpNodeGetParams, node, &p));
    MemOpNode m;
    m.node = node;
    m.ctx = p.ctx;
    m.flags = p.flags;
    m.ops.assign(p.paramArray, p.paramArray + p.count);
    // A channel's waits poll its own inbox and its signals write the peer's: the address names channel and kind.
    for (size_t i = 0; i < m.ops.size(); ++i) {
      const CUstreamBatchMemOpParams& op = m.ops[i];
      for (size_t e = 0; e < entries_.size(); ++e) {
        const Channel::State& s = *entries_[e].channel;
        if (s.protocol == Protocol::kSmSignal) continue;
        if (op.operation == CU_STREAM_MEM_OP_WAIT_VALUE_32 &&
            op.waitValue.address == cuPtr(s.local_words + kInboxWord)) {
          m.patches.push_back(Patch{i, e, true, op.waitValue.value});
        } else if (op.operation == CU_STREAM_MEM_OP_WRITE_VALUE_32 &&
                   op.writeValue.address == cuPtr(s.remote_words + kInboxWord)) {
          m.patches.push_back(Patch{i, e, false, op.writeValue.value});
        }
      }
    }
    found += m.patches.size();
    if (!m.patches.empty()) nodes_.push_back(std::move(m));
  }
  if (found != expected) {
    return PEERLAB_UNAVAILABLE("zcopy graph capture: " + std::to_string(expected) +
                               " stream memory operations were captured, " + std::to_string(found) +
                               " found as memory-operation nodes of the graph (use GraphSync::kKernels)");
  }
  return Status::ok();
}

size_t Graph::memOps() const {
  size_t n = 0;
  for (const auto& node : nodes_)
    n += node.patches.size();
  return n;
}

Status Graph::launch(cudaStream_t stream) {
  if (!exec_) return PEERLAB_INVALID_ARGUMENT("zcopy graph: launch of an empty graph");
  PEERLAB_ASSIGN_OR_RETURN(auto guard, DeviceGuard::make(device_));
  MemOpBatch rebase(stream);
  for (auto& e : entries_) {
    Channel::State& s = *e.channel;
    if (s.broken)
      return PEERLAB_INVALID_ARGUMENT("zcopy graph: the " + s.name() + " is unusable (" + s.broken_why + ")");
    if (s.ctx->closed) return PEERLAB_INVALID_ARGUMENT("zcopy graph: the context of the " + s.name() + " is closed");
    if (s.capturing) return PEERLAB_INVALID_ARGUMENT("zcopy graph: the " + s.name() + " is being captured");
    if (s.protocol == Protocol::kSmSignal || sync_ != GraphSync::kKernels) continue;
    if (auto epochs = s.replay.beforeLaunch(s.state)) {
      PEERLAB_RETURN_IF_ERROR(rebase.addWrite(s.counters + kCtrSignal, epochs->signal));
      PEERLAB_RETURN_IF_ERROR(rebase.addWrite(s.counters + kCtrWait, epochs->wait));
    }
  }
  PEERLAB_RETURN_IF_ERROR(rebase.flush());
  // kMemOps: this replay's epochs into the memory-operation nodes (later launches only; one in flight keeps its own).
  for (auto& n : nodes_) {
    bool changed = false;
    for (const Patch& p : n.patches) {
      const Entry& e = entries_[p.entry];
      const EndpointState& host = e.channel->state;
      CUstreamBatchMemOpParams& op = n.ops[p.op];
      if (p.wait) {
        const uint32_t v = replayEpoch(p.captured, e.base.wait_epoch, host.wait_epoch);
        changed = changed || op.waitValue.value != v;
        op.waitValue.value = v;
      } else {
        const uint32_t v = replayEpoch(p.captured, e.base.signal_epoch, host.signal_epoch);
        changed = changed || op.writeValue.value != v;
        op.writeValue.value = v;
      }
    }
    if (!changed) continue;
    CUDA_BATCH_MEM_OP_NODE_PARAMS p;
    std::memset(&p, 0, sizeof(p));
    p.ctx = n.ctx;
    p.count = static_cast<unsigned>(n.ops.size());
    p.paramArray = n.ops.data();
    p.flags = n.flags;
    PEERLAB_RETURN_IF_ERROR(
        PEERLAB_CU(cuGraphExecBatchMemOpNodeSetParams, reinterpret_cast<CUgraphExec>(exec_.get()), n.node, &p));
  }
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaGraphLaunch(exec_.get(), stream)));
  for (auto& e : entries_) {
    Channel::State& s = *e.channel;
    if (s.protocol == Protocol::kSmSignal) {
      applyDelta(s.state, e.per_replay);
    } else if (sync_ == GraphSync::kKernels) {
      s.replay.afterLaunch(s.state, e.per_replay);
    } else {
      applyDelta(s.state, e.per_replay);
      s.replay.eagerCall();  // the device counters did not move
    }
  }
  ++launches_;
  return Status::ok();
}

}  // namespace peerlab::zcopy
