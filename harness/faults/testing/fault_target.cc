// A small CUDA program for the interposer tests: it runs one scenario against the fake runtime and driver
// (testing/fake_cudart.cc, testing/fake_cuda.cc) and prints key=value lines that the tests check.
//   fault_target gpa | caps | enable | copy API SIDE | hang MODE [MAX_MS] | ipc | vmm | signal | export | dlsym_next

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#undef cuGetProcAddress

#ifndef PEERLAB_FAKE_CUDA_PATH
#error "PEERLAB_FAKE_CUDA_PATH must name the fake driver library"
#endif

namespace {

void out(const std::string& key, long long value) {
  std::printf("%s=%lld\n", key.c_str(), value);
  std::fflush(stdout);
}

bool fromInterposer(void* fn) {
  Dl_info info{};
  return fn != nullptr && dladdr(fn, &info) != 0 && info.dli_fname != nullptr &&
         std::strstr(info.dli_fname, "libpeerlab_faults") != nullptr;
}

template <class Fn>
Fn entry(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion(name, &fn, CUDA_VERSION, cudaEnableDefault, &q) != cudaSuccess) return nullptr;
  return reinterpret_cast<Fn>(fn);
}

int fakeCounter(const char* name) {
  void* lib = dlopen(PEERLAB_FAKE_CUDA_PATH, RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return -1;
  auto fn = reinterpret_cast<int (*)(const char*)>(dlsym(lib, "peerlab_fake_counter"));
  return fn != nullptr ? fn(name) : -1;
}

using GpaV2 = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
using GpaV1 = CUresult (*)(const char*, void**, int, cuuint64_t);

int scenarioGpa() {
  void* lib = dlopen(PEERLAB_FAKE_CUDA_PATH, RTLD_NOW | RTLD_LOCAL);
  auto v2 = reinterpret_cast<GpaV2>(dlsym(lib, "cuGetProcAddress_v2"));
  auto v1 = reinterpret_cast<GpaV1>(dlsym(lib, "cuGetProcAddress"));
  out("gpa_v2_wrapped", fromInterposer(reinterpret_cast<void*>(v2)));
  out("gpa_v1_wrapped", fromInterposer(reinterpret_cast<void*>(v1)));
  void* fn = nullptr;
  CUdriverProcAddressQueryResult q;
  v2("cuDeviceCanAccessPeer", &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &q);
  out("can_access_wrapped", fromInterposer(fn));
  int can = -1;
  reinterpret_cast<decltype(&::cuDeviceCanAccessPeer)>(fn)(&can, 0, 1);
  out("driver_can_access", can);
  void* fn1 = nullptr;
  v1("cuDeviceCanAccessPeer", &fn1, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT);
  out("v1_can_access_wrapped", fromInterposer(fn1));
  void* self = nullptr;
  v2("cuGetProcAddress", &self, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &q);
  out("gpa_self_wrapped", fromInterposer(self));
  void* plain = nullptr;
  v2("cuMemAlloc", &plain, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &q);
  out("unhooked_passes", plain != nullptr && !fromInterposer(plain));
  void* direct = dlsym(lib, "cuStreamWriteValue32_v2");
  out("dlsym_direct_wrapped", fromInterposer(direct));
  return 0;
}

int scenarioCaps() {
  int can = -1;
  out("rt_can_access_rc", cudaDeviceCanAccessPeer(&can, 0, 1));
  out("rt_can_access", can);
  int attr = -1;
  cudaDeviceGetP2PAttribute(&attr, cudaDevP2PAttrAccessSupported, 0, 1);
  out("rt_p2p_access", attr);
  int rank = -1;
  cudaDeviceGetP2PAttribute(&rank, cudaDevP2PAttrPerformanceRank, 0, 1);
  out("rt_p2p_rank", rank);
  auto drv_can = entry<decltype(&::cuDeviceCanAccessPeer)>("cuDeviceCanAccessPeer");
  int dcan = -1;
  drv_can(&dcan, 1, 0);
  out("drv_can_access", dcan);
  int self = -1;
  cudaDeviceCanAccessPeer(&self, 2, 2);
  out("rt_can_access_self", self);
  return 0;
}

int scenarioEnable() {
  cudaSetDevice(0);
  out("rt_enable_0_1", cudaDeviceEnablePeerAccess(1, 0));
  cudaSetDevice(1);
  out("rt_enable_1_0", cudaDeviceEnablePeerAccess(0, 0));
  // The driver path peerlab uses: entry points resolved through the runtime.
  auto enable = entry<decltype(&::cuCtxEnablePeerAccess)>("cuCtxEnablePeerAccess");
  auto retain = entry<decltype(&::cuDevicePrimaryCtxRetain)>("cuDevicePrimaryCtxRetain");
  CUcontext c3 = nullptr;
  retain(&c3, 3);
  cudaSetDevice(2);
  out("drv_enable_2_3", enable(c3, 0));
  out("enabled", fakeCounter("enabled"));
  return 0;
}

constexpr size_t kBytes = 64 * 1024;

void fillPattern(std::vector<uint8_t>& v, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b = static_cast<uint8_t>(x);
  }
}

// copy API SIDE: API rt_peer_async | rt_peer | rt_async | rt_sync | drv_peer_async | drv_async | drv_dtod_async;
// SIDE write (stream on the source device) | read (on the destination device).
int scenarioCopy(const std::string& api, const std::string& side) {
  const int src_dev = 0, dst_dev = 1;
  void* src = nullptr;
  void* dst = nullptr;
  cudaSetDevice(src_dev);
  cudaMalloc(&src, kBytes);
  cudaSetDevice(dst_dev);
  cudaMalloc(&dst, kBytes);
  std::vector<uint8_t> pattern(kBytes), poison(kBytes, 0xA5), got(kBytes);
  fillPattern(pattern, 7);
  cudaMemcpy(src, pattern.data(), kBytes, cudaMemcpyHostToDevice);
  cudaMemcpy(dst, poison.data(), kBytes, cudaMemcpyHostToDevice);
  cudaSetDevice(side == "read" ? dst_dev : src_dev);
  cudaStream_t stream = nullptr;
  cudaStreamCreate(&stream);
  int rc = 0;
  if (api == "rt_peer_async") {
    rc = cudaMemcpyPeerAsync(dst, dst_dev, src, src_dev, kBytes, stream);
  } else if (api == "rt_peer") {
    rc = cudaMemcpyPeer(dst, dst_dev, src, src_dev, kBytes);
  } else if (api == "rt_async") {
    rc = cudaMemcpyAsync(dst, src, kBytes, cudaMemcpyDefault, stream);
  } else if (api == "rt_sync") {
    rc = cudaMemcpy(dst, src, kBytes, cudaMemcpyDeviceToDevice);
  } else if (api == "drv_peer_async") {
    auto fn = entry<decltype(&::cuMemcpyPeerAsync)>("cuMemcpyPeerAsync");
    auto retain = entry<decltype(&::cuDevicePrimaryCtxRetain)>("cuDevicePrimaryCtxRetain");
    CUcontext cs = nullptr, cd = nullptr;
    retain(&cs, src_dev);
    retain(&cd, dst_dev);
    rc = fn(reinterpret_cast<CUdeviceptr>(dst), cd, reinterpret_cast<CUdeviceptr>(src), cs, kBytes,
            reinterpret_cast<CUstream>(stream));
  } else if (api == "drv_async") {
    auto fn = entry<decltype(&::cuMemcpyAsync)>("cuMemcpyAsync");
    rc = fn(reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(src), kBytes,
            reinterpret_cast<CUstream>(stream));
  } else if (api == "drv_dtod_async") {
    auto fn = entry<decltype(&::cuMemcpyDtoDAsync)>("cuMemcpyDtoDAsync");
    rc = fn(reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(src), kBytes,
            reinterpret_cast<CUstream>(stream));
  } else {
    std::fprintf(stderr, "unknown copy api %s\n", api.c_str());
    return 2;
  }
  out("copy_rc", rc);
  out("sync_rc", cudaStreamSynchronize(stream));
  cudaMemcpy(got.data(), dst, kBytes, cudaMemcpyDeviceToHost);
  long long diff = 0, first = -1, mask = 0, untouched = 1;
  for (size_t i = 0; i < kBytes; ++i) {
    if (got[i] != pattern[i]) {
      if (first < 0) {
        first = static_cast<long long>(i);
        mask = got[i] ^ pattern[i];
      }
      ++diff;
    }
    if (got[i] != poison[i]) untouched = 0;
  }
  out("diff", diff);
  out("first", first);
  out("mask", mask);
  out("untouched", untouched);
  // Calls the fake driver saw through a prototype older than the entry point it handed out (-1: the real driver).
  out("abi_mismatches", fakeCounter("abi_mismatches"));
  return 0;
}

// hang teardown|wait [MAX_MS]: a peer copy, then either a teardown call (cudaFree) or polling until it completes
// (at most MAX_MS, default 5000).
int scenarioHang(const std::string& mode, int max_wait_ms) {
  void* src = nullptr;
  void* dst = nullptr;
  void* other = nullptr;
  cudaSetDevice(1);
  cudaMalloc(&dst, kBytes);
  cudaSetDevice(0);
  cudaMalloc(&src, kBytes);
  cudaMalloc(&other, 256);
  std::vector<uint8_t> pattern(kBytes), got(kBytes);
  fillPattern(pattern, 3);
  cudaMemcpy(src, pattern.data(), kBytes, cudaMemcpyHostToDevice);
  cudaStream_t stream = nullptr;
  cudaStreamCreate(&stream);
  const auto start = std::chrono::steady_clock::now();
  out("copy_rc", cudaMemcpyPeerAsync(dst, 1, src, 0, kBytes, stream));
  out("pending", cudaStreamQuery(stream) == cudaErrorNotReady);
  if (mode == "teardown") {
    cudaFree(other);
  }
  long long waited = -1;
  while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(max_wait_ms)) {
    if (cudaStreamQuery(stream) == cudaSuccess) {
      waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  out("completed_ms", waited);
  // A copy still stalled stays unread: a synchronous copy on the legacy default stream would wait for it (the stall
  // ends at exit, which that copy would never reach).
  if (waited >= 0) {
    cudaMemcpy(got.data(), dst, kBytes, cudaMemcpyDeviceToHost);
    out("data_ok", got == pattern);
  }
  return 0;
}

// ipc: the owner's buffer on device 1, opened through its handle, written through the mapping.
int scenarioIpc() {
  cudaSetDevice(1);
  void* owner = nullptr;
  cudaMalloc(&owner, kBytes);
  std::vector<uint8_t> poison(kBytes, 0x5A), pattern(kBytes), got(kBytes);
  fillPattern(pattern, 11);
  cudaMemcpy(owner, poison.data(), kBytes, cudaMemcpyHostToDevice);
  cudaIpcMemHandle_t handle;
  out("get_rc", cudaIpcGetMemHandle(&handle, owner));
  cudaSetDevice(0);
  void* mapped = nullptr;
  const int open_rc = cudaIpcOpenMemHandle(&mapped, handle, cudaIpcMemLazyEnablePeerAccess);
  out("open_rc", open_rc);
  if (open_rc != 0) return 0;
  out("mapped_is_owner", mapped == owner);
  cudaMemcpy(mapped, pattern.data(), kBytes, cudaMemcpyHostToDevice);
  cudaMemcpy(got.data(), mapped, kBytes, cudaMemcpyDeviceToHost);
  out("writer_sees", got == pattern);
  cudaMemcpy(got.data(), owner, kBytes, cudaMemcpyDeviceToHost);
  out("owner_sees", got == pattern);
  const int frees_before = fakeCounter("frees");
  out("close_rc", cudaIpcCloseMemHandle(mapped));
  out("close_freed", fakeCounter("frees") - frees_before);
  out("driver_ipc_close", fakeCounter("ipc_close"));
  return 0;
}

// ipc_copy: a device-to-device copy from device 0 into the owner's buffer (device 1) opened through its handle;
// reports how many bytes differ from the source when read back through the mapping.
int scenarioIpcCopy() {
  cudaSetDevice(1);
  void* owner = nullptr;
  cudaMalloc(&owner, kBytes);
  cudaIpcMemHandle_t handle;
  out("get_rc", cudaIpcGetMemHandle(&handle, owner));
  cudaSetDevice(0);
  std::vector<uint8_t> pattern(kBytes), got(kBytes);
  fillPattern(pattern, 13);
  void* src = nullptr;
  cudaMalloc(&src, kBytes);
  cudaMemcpy(src, pattern.data(), kBytes, cudaMemcpyHostToDevice);
  void* mapped = nullptr;
  const int open_rc = cudaIpcOpenMemHandle(&mapped, handle, cudaIpcMemLazyEnablePeerAccess);
  out("open_rc", open_rc);
  if (open_rc != 0) return 0;
  auto attribute = entry<decltype(&::cuPointerGetAttribute)>("cuPointerGetAttribute");
  int dev = -1;
  attribute(&dev, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, reinterpret_cast<CUdeviceptr>(mapped));
  out("mapped_device", dev);
  out("copy_rc", cudaMemcpyAsync(mapped, src, kBytes, cudaMemcpyDeviceToDevice, nullptr));
  cudaStreamSynchronize(nullptr);
  cudaMemcpy(got.data(), mapped, kBytes, cudaMemcpyDeviceToHost);
  size_t diff = 0;
  for (size_t i = 0; i < kBytes; ++i)
    diff += got[i] != pattern[i] ? 1 : 0;
  out("diff", diff);
  out("close_rc", cudaIpcCloseMemHandle(mapped));
  return 0;
}

// vmm: an allocation on device 1 exported as a file descriptor, imported and mapped, written through the mapping.
int scenarioVmm() {
  cudaSetDevice(1);
  auto create = entry<decltype(&::cuMemCreate)>("cuMemCreate");
  auto exportFd = entry<decltype(&::cuMemExportToShareableHandle)>("cuMemExportToShareableHandle");
  auto importFd = entry<decltype(&::cuMemImportFromShareableHandle)>("cuMemImportFromShareableHandle");
  auto reserve = entry<decltype(&::cuMemAddressReserve)>("cuMemAddressReserve");
  auto map = entry<decltype(&::cuMemMap)>("cuMemMap");
  auto unmap = entry<decltype(&::cuMemUnmap)>("cuMemUnmap");
  auto release = entry<decltype(&::cuMemRelease)>("cuMemRelease");
  auto copy = entry<decltype(&::cuMemcpy)>("cuMemcpy");
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 1;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle owner_handle = 0;
  create(&owner_handle, kBytes, &prop, 0);
  CUdeviceptr owner_va = 0;
  reserve(&owner_va, kBytes, 0, 0, 0);
  map(owner_va, kBytes, 0, owner_handle, 0);
  std::vector<uint8_t> poison(kBytes, 0x3C), pattern(kBytes), got(kBytes);
  fillPattern(pattern, 19);
  copy(owner_va, reinterpret_cast<CUdeviceptr>(poison.data()), kBytes);
  int fd = -1;
  out("export_rc", exportFd(&fd, owner_handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  cudaSetDevice(0);
  CUmemGenericAllocationHandle imported = 0;
  const int import_rc =
      importFd(&imported, reinterpret_cast<void*>(static_cast<intptr_t>(fd)), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  out("import_rc", import_rc);
  close(fd);
  if (import_rc != 0) return 0;
  CUdeviceptr peer_va = 0;
  reserve(&peer_va, kBytes, 0, 0, 0);
  out("map_rc", map(peer_va, kBytes, 0, imported, 0));
  release(imported);
  copy(peer_va, reinterpret_cast<CUdeviceptr>(pattern.data()), kBytes);
  copy(reinterpret_cast<CUdeviceptr>(got.data()), peer_va, kBytes);
  out("writer_sees", got == pattern);
  copy(reinterpret_cast<CUdeviceptr>(got.data()), owner_va, kBytes);
  out("owner_sees", got == pattern);
  unmap(peer_va, kBytes);
  return 0;
}

// signal: a stream writes 7 into a word (cuStreamWriteValue32), then 9 (cuStreamWriteValue64 low word).
int scenarioSignal() {
  cudaSetDevice(0);
  uint32_t* word = nullptr;
  cudaMallocHost(reinterpret_cast<void**>(&word), 64);
  auto write32 = entry<decltype(&::cuStreamWriteValue32)>("cuStreamWriteValue32");
  cudaStream_t stream = nullptr;
  cudaStreamCreate(&stream);
  const auto start = std::chrono::steady_clock::now();
  out("write_rc", write32(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(word), 7, 0));
  cudaStreamSynchronize(stream);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  out("word", *word);
  out("elapsed_ms", ms.count());
  out("driver_writes", fakeCounter("write32"));
  return 0;
}

int scenarioExport() {
  cudaSetDevice(0);
  void* p = nullptr;
  cudaMalloc(&p, 4096);
  cudaIpcMemHandle_t handle;
  const int rc = cudaIpcGetMemHandle(&handle, p);
  out("exported", rc == 0);
  out("survived", 1);
  return 0;
}

int scenarioDlsymNext() {
  // From the main program, RTLD_NEXT finds the preloaded interposer's runtime hook first, as glibc does.
  void* next = dlsym(RTLD_NEXT, "cudaMemcpyAsync");
  out("next_is_interposer", fromInterposer(next));
  void* getpid_next = dlsym(RTLD_NEXT, "getpid");
  out("next_getpid_ok", getpid_next == reinterpret_cast<void*>(&getpid));
  out("missing_is_null", dlsym(RTLD_NEXT, "peerlab_no_such_symbol") == nullptr);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: fault_target SCENARIO [ARGS]\n");
    return 2;
  }
  const std::string s = argv[1];
  if (s == "gpa") return scenarioGpa();
  if (s == "caps") return scenarioCaps();
  if (s == "enable") return scenarioEnable();
  if (s == "copy" && argc >= 4) return scenarioCopy(argv[2], argv[3]);
  if (s == "hang" && argc >= 3) return scenarioHang(argv[2], argc >= 4 ? std::atoi(argv[3]) : 5000);
  if (s == "ipc") return scenarioIpc();
  if (s == "ipc_copy") return scenarioIpcCopy();
  if (s == "vmm") return scenarioVmm();
  if (s == "signal") return scenarioSignal();
  if (s == "export") return scenarioExport();
  if (s == "dlsym_next") return scenarioDlsymNext();
  std::fprintf(stderr, "fault_target: unknown scenario %s\n", s.c_str());
  return 2;
}
