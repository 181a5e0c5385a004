#pragma once
/// UCX's UCP loaded at run time: dlopen of libucp.so.0 found on peerlab's search path (locateUcx) and dlsym of each
/// entry point, so peerlab builds and runs without UCX. Only what the transports use is declared here, written from
/// UCX's public API reference (ucp.h, ucs/type/status.h, ucs/memory/memory_type.h). UCP's parameter structs are
/// extended at their end between releases and read only the fields their field mask names, so the declarations below
/// stop at the last field peerlab sets or reads (padded where UCX writes a fixed-size array); they are
/// layout-compatible with UCX 1.13 (Debian 12) through 1.22 (the libucx-cu13 wheel).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "reference/core/status.h"

namespace peerlab::transport::ucx {

// ucs_status_t: 0 ok, 1 in progress, negative errors.
using StatusT = int8_t;
inline constexpr StatusT kOk = 0;
inline constexpr StatusT kInProgress = 1;
inline constexpr StatusT kErrUnsupported = -22;
/// ucs_status_ptr_t: a request pointer, null (done at once) or an encoded error (the top of the address space).
using StatusPtr = void*;
/// UCS_PTR_IS_ERR: errors are the small negative numbers cast to pointers.
inline bool isErrorPtr(StatusPtr p) {
  return reinterpret_cast<uintptr_t>(p) >= static_cast<uintptr_t>(-100);
}
inline StatusT errorOf(StatusPtr p) {
  return static_cast<StatusT>(reinterpret_cast<intptr_t>(p));
}

// ucs_memory_type_t (stable values; later releases append).
inline constexpr int kMemoryHost = 0;
inline constexpr int kMemoryCuda = 1;
inline constexpr int kMemoryCudaManaged = 2;
/// "host", "cuda", "cuda-managed", "rocm", ... as UCX names them; "type N" beyond what peerlab knows.
std::string memoryTypeName(int type);

// Opaque handles.
using Config = struct ConfigOpaque;
using Context = struct ContextOpaque*;
using Worker = struct WorkerOpaque*;
using Ep = struct EpOpaque*;
using Mem = struct MemOpaque*;
using Rkey = struct RkeyOpaque*;
using Address = struct AddressOpaque;

// ucp_params_t field and feature bits.
inline constexpr uint64_t kParamFieldFeatures = 1ull << 0;
inline constexpr uint64_t kFeatureRma = 1ull << 1;
/// ucp_params_t up to `features` (the only fields peerlab sets).
struct Params {
  uint64_t field_mask = 0;
  uint64_t features = 0;
  uint8_t unused[96] = {};  ///< the fields peerlab leaves out of the mask, zeroed
};

// ucp_context_attr_t.
inline constexpr uint64_t kAttrFieldMemoryTypes = 1ull << 2;
struct ContextAttr {
  uint64_t field_mask = 0;
  size_t request_size = 0;
  int thread_mode = 0;
  uint64_t memory_types = 0;  ///< bit (1 << ucs_memory_type_t) per memory type the context supports
  char name[128] = {};        ///< UCP_ENTITY_NAME_MAX is 32; room to spare
  uint8_t tail[64] = {};
};

// ucp_worker_params_t.
inline constexpr uint64_t kWorkerFieldThreadMode = 1ull << 0;
inline constexpr int kThreadModeSerialized = 1;  ///< one thread at a time (peerlab holds a mutex around every call)
struct WorkerParams {
  uint64_t field_mask = 0;
  int thread_mode = 0;
  uint8_t unused[256] = {};
};

// ucp_ep_params_t.
inline constexpr uint64_t kEpFieldRemoteAddress = 1ull << 0;
struct EpParams {
  uint64_t field_mask = 0;
  const Address* address = nullptr;
  uint8_t unused[512] = {};
};

// ucp_mem_map_params_t.
inline constexpr uint64_t kMemMapFieldAddress = 1ull << 0;
inline constexpr uint64_t kMemMapFieldLength = 1ull << 1;
struct MemMapParams {
  uint64_t field_mask = 0;
  void* address = nullptr;
  size_t length = 0;
  unsigned flags = 0;
  unsigned prot = 0;
  int memory_type = 0;
  uint8_t unused[64] = {};
};

// ucp_mem_attr_t.
inline constexpr uint64_t kMemAttrFieldMemType = 1ull << 2;
struct MemAttr {
  uint64_t field_mask = 0;
  void* address = nullptr;
  size_t length = 0;
  int mem_type = 0;
  uint8_t tail[64] = {};
};

// ucp_request_param_t (UCX 1.13 and later): the fields up to memh.
inline constexpr uint32_t kOpFieldFlags = 1u << 4;
inline constexpr uint32_t kOpFieldMemoryType = 1u << 6;
inline constexpr uint32_t kOpFieldMemh = 1u << 8;
inline constexpr uint32_t kEpCloseFlagForce = 1u << 0;
struct RequestParam {
  uint32_t op_attr_mask = 0;
  uint32_t flags = 0;
  void* request = nullptr;
  void* cb = nullptr;
  uint64_t datatype = 0;
  void* user_data = nullptr;
  void* reply_buffer = nullptr;
  int memory_type = 0;  ///< ucs_memory_type_t, with kOpFieldMemoryType: no detection of the buffer's type
  void* recv_info = nullptr;
  void* memh = nullptr;  ///< ucp_mem_h of the local buffer, with kOpFieldMemh: no registration per operation
  uint8_t unused[64] = {};
};

// Every entry point peerlab uses, as X(name, return type, parameters).
#define PEERLAB_UCX_FUNCTIONS(X)                                                                            \
  X(ucp_get_version, void, (unsigned* major, unsigned* minor, unsigned* release))                           \
  X(ucp_config_read, StatusT, (const char* prefix, const char* file, Config** config))                      \
  X(ucp_config_release, void, (Config * config))                                                            \
  X(ucp_init_version, StatusT,                                                                              \
    (unsigned api_major, unsigned api_minor, const Params* params, const Config* config, Context* context)) \
  X(ucp_cleanup, void, (Context context))                                                                   \
  X(ucp_context_query, StatusT, (Context context, ContextAttr * attr))                                      \
  X(ucp_worker_create, StatusT, (Context context, const WorkerParams* params, Worker* worker))              \
  X(ucp_worker_destroy, void, (Worker worker))                                                              \
  X(ucp_worker_get_address, StatusT, (Worker worker, Address * *address, size_t * length))                  \
  X(ucp_worker_release_address, void, (Worker worker, Address * address))                                   \
  X(ucp_worker_progress, unsigned, (Worker worker))                                                         \
  X(ucp_worker_fence, StatusT, (Worker worker))                                                             \
  X(ucp_ep_create, StatusT, (Worker worker, const EpParams* params, Ep* ep))                                \
  X(ucp_ep_close_nbx, StatusPtr, (Ep ep, const RequestParam* param))                                        \
  X(ucp_ep_flush_nbx, StatusPtr, (Ep ep, const RequestParam* param))                                        \
  X(ucp_mem_map, StatusT, (Context context, const MemMapParams* params, Mem* mem))                          \
  X(ucp_mem_unmap, StatusT, (Context context, Mem mem))                                                     \
  X(ucp_mem_query, StatusT, (Mem mem, MemAttr * attr))                                                      \
  X(ucp_rkey_pack, StatusT, (Context context, Mem mem, void** buffer, size_t* size))                        \
  X(ucp_rkey_buffer_release, void, (void* buffer))                                                          \
  X(ucp_ep_rkey_unpack, StatusT, (Ep ep, const void* buffer, Rkey* rkey))                                   \
  X(ucp_rkey_destroy, void, (Rkey rkey))                                                                    \
  X(ucp_put_nbx, StatusPtr,                                                                                 \
    (Ep ep, const void* buffer, size_t count, uint64_t remote, Rkey rkey, const RequestParam* param))       \
  X(ucp_get_nbx, StatusPtr,                                                                                 \
    (Ep ep, void* buffer, size_t count, uint64_t remote, Rkey rkey, const RequestParam* param))             \
  X(ucp_request_check_status, StatusT, (void* request))                                                     \
  X(ucp_request_free, void, (void* request))                                                                \
  X(ucs_status_string, const char*, (StatusT status))

/// The loaded library: one pointer per entry point. open() fails unless every one resolves.
class Library {
 public:
  /// dlopens `path` (libucp.so.0; libucs comes with it). `unavailable` says why not.
  static StatusOr<std::shared_ptr<Library>> open(const std::string& path);
  ~Library();
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  const std::string& path() const { return path_; }
  /// "1.22.0".
  std::string version() const;
  /// ucs_status_string, e.g. "Unsupported operation (-22)".
  std::string describe(StatusT status) const;

#define PEERLAB_UCX_POINTER(name, ret, params) ret(*name) params = nullptr;
  PEERLAB_UCX_FUNCTIONS(PEERLAB_UCX_POINTER)
#undef PEERLAB_UCX_POINTER

 private:
  Library() = default;
  void* handle_ = nullptr;
  std::string path_;
};

/// Where peerlab looks for UCX, in order: $PEERLAB_UCX_LIBRARY (the file libucp.so.0 itself); $PEERLAB_UCX_DIR, a
/// directory holding libucp.so.0 directly, in lib/, or in libucx/lib/ (a pip libucx-cu13 tree); then the dynamic
/// loader's own search ("libucp.so.0": LD_LIBRARY_PATH and the system library directories). Nothing is loaded.
struct Location {
  std::string library;  ///< path to dlopen (a bare soname for the loader's search)
  std::string how;      ///< "PEERLAB_UCX_DIR=/x", "PEERLAB_UCX_LIBRARY=/x", "the loader's search path"
  bool found = false;   ///< the file exists (always true for the loader's search once dlopen works)
};
Location locateUcx();
/// The first LD_LIBRARY_PATH or system library directory holding `soname`, "" when none does (loads nothing).
std::string findOnLoaderPath(const std::string& soname);
/// True when the UCX at `library` ships its CUDA transport module (ucx/libuct_cuda.so* beside libucp): a cheap
/// file check that loads nothing; the capability check at run time has the last word.
bool ucxHasCudaModule(const std::string& library);
/// True when the UCX at `library` ships UCM's CUDA memory hooks (ucx/libucm_cuda.so* beside libucp). UCX's memory
/// type cache learns of GPU allocations only through them; without them the cache is still created, never hears of
/// a cudaMalloc, and UCX takes every GPU pointer it does not know (ucp_mem_map without a memory type, put / get of
/// an unregistered buffer) for host memory: "not found in memtype cache, assuming host memory".
bool ucxHasCudaHooks(const std::string& library);
/// Called before the UCX at `library` is loaded: where it has the CUDA transport (ucx/libuct_cuda.so*) but not the
/// CUDA memory hooks, sets UCX_MEMTYPE_CACHE=n (unless the environment already names a value), so that UCX asks its
/// CUDA memory domain (cuPointerGetAttributes) about every pointer instead of trusting the cache. libucs reads the
/// variable once, when it is loaded: a copy already in the process keeps what it read. Returns what it did ("" when
/// nothing), for the endpoint's description.
std::string prepareMemoryTypeDetection(const std::string& library);

}  // namespace peerlab::transport::ucx
