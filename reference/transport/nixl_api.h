#pragma once
/// NIXL's C API (libnixl_capi.so) loaded at run time, so peerlab builds and runs without NIXL. NIXL ships no headers
/// in its wheels: the part of the C API peerlab uses is declared here from NIXL's published C API (the nixl_capi_*
/// functions of its Rust bindings' wrapper) and checked against the symbols libnixl_capi.so exports. Every handle is
/// opaque; statuses are plain ints (0 success, 1 in progress, negative errors).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "reference/core/status.h"

namespace peerlab::transport::nixl {

using StatusT = int;
inline constexpr StatusT kSuccess = 0;
inline constexpr StatusT kInProgress = 1;
/// "NIXL_CAPI_ERROR_BACKEND (-2)".
std::string statusName(StatusT status);

// nixl_capi_mem_type_t
inline constexpr int kMemDram = 0;
inline constexpr int kMemVram = 1;

// nixl_capi_xfer_op_t
inline constexpr int kOpRead = 0;
inline constexpr int kOpWrite = 1;

// nixl_capi_thread_sync_t
inline constexpr int kThreadSyncNone = 0;

/// nixl_capi_agent_config_t (nixlAgentConfig's fields through the C API).
struct AgentConfig {
  bool enable_prog_thread = false;
  bool enable_listen_thread = false;
  int listen_port = 0;
  int thread_sync = kThreadSyncNone;  ///< nixl_capi_thread_sync_t
  unsigned int num_workers = 1;
  uint64_t pthr_delay_us = 0;
  uint64_t lthr_delay_us = 100000;
  bool capture_telemetry = false;
};

using Agent = struct AgentOpaque*;
using Params = struct ParamsOpaque*;
using MemList = struct MemListOpaque*;
using Backend = struct BackendOpaque*;
using OptArgs = struct OptArgsOpaque*;
using XferDlist = struct XferDlistOpaque*;
using DlistHandle = struct DlistHandleOpaque*;
using RegDlist = struct RegDlistOpaque*;
using XferReq = struct XferReqOpaque*;
using NotifMap = struct NotifMapOpaque*;

// Every entry point peerlab uses, as X(name, parameters); all return StatusT.
#define PEERLAB_NIXL_FUNCTIONS(X)                                                                                      \
  X(nixl_capi_create_agent, (const char* name, Agent* agent))                                                          \
  X(nixl_capi_destroy_agent, (Agent agent))                                                                            \
  X(nixl_capi_get_local_md, (Agent agent, void** data, size_t* len))                                                   \
  X(nixl_capi_load_remote_md, (Agent agent, const void* data, size_t len, char** agent_name))                          \
  X(nixl_capi_invalidate_remote_md, (Agent agent, const char* remote_agent))                                           \
  X(nixl_capi_get_plugin_params, (Agent agent, const char* plugin, MemList* mems, Params* params))                     \
  X(nixl_capi_destroy_mem_list, (MemList list))                                                                        \
  X(nixl_capi_destroy_params, (Params params))                                                                         \
  X(nixl_capi_params_add, (Params params, const char* key, const char* value))                                         \
  X(nixl_capi_mem_list_size, (MemList list, size_t * size))                                                            \
  X(nixl_capi_mem_list_get, (MemList list, size_t index, int* mem_type))                                               \
  X(nixl_capi_create_backend, (Agent agent, const char* plugin, Params params, Backend* backend))                      \
  X(nixl_capi_destroy_backend, (Backend backend))                                                                      \
  X(nixl_capi_create_opt_args, (OptArgs * args))                                                                       \
  X(nixl_capi_destroy_opt_args, (OptArgs args))                                                                        \
  X(nixl_capi_opt_args_add_backend, (OptArgs args, Backend backend))                                                   \
  X(nixl_capi_opt_args_set_notif_msg, (OptArgs args, const void* data, size_t len))                                    \
  X(nixl_capi_opt_args_set_has_notif, (OptArgs args, bool has_notif))                                                  \
  X(nixl_capi_create_reg_dlist, (int mem_type, RegDlist* dlist))                                                       \
  X(nixl_capi_destroy_reg_dlist, (RegDlist dlist))                                                                     \
  X(nixl_capi_reg_dlist_add_desc,                                                                                      \
    (RegDlist dlist, uintptr_t addr, size_t len, uint64_t dev_id, const void* metadata, size_t metadata_len))          \
  X(nixl_capi_register_mem, (Agent agent, RegDlist dlist, OptArgs args))                                               \
  X(nixl_capi_deregister_mem, (Agent agent, RegDlist dlist, OptArgs args))                                             \
  X(nixl_capi_create_xfer_dlist, (int mem_type, XferDlist* dlist))                                                     \
  X(nixl_capi_destroy_xfer_dlist, (XferDlist dlist))                                                                   \
  X(nixl_capi_xfer_dlist_add_desc, (XferDlist dlist, uintptr_t addr, size_t len, uint64_t dev_id))                     \
  X(nixl_capi_prep_xfer_dlist, (Agent agent, const char* remote, XferDlist descs, DlistHandle* handle, OptArgs a))     \
  X(nixl_capi_release_xfer_dlist_handle, (Agent agent, DlistHandle handle))                                            \
  X(nixl_capi_make_xfer_req, (Agent agent, int op, DlistHandle local, const int* local_idx, size_t local_n,            \
                              DlistHandle remote, const int* remote_idx, size_t remote_n, XferReq* req, OptArgs args)) \
  X(nixl_capi_create_xfer_req,                                                                                         \
    (Agent agent, int op, XferDlist local, XferDlist remote, const char* remote_agent, XferReq* req, OptArgs args))    \
  X(nixl_capi_post_xfer_req, (Agent agent, XferReq req, OptArgs args))                                                 \
  X(nixl_capi_get_xfer_status, (Agent agent, XferReq req))                                                             \
  X(nixl_capi_release_xfer_req, (Agent agent, XferReq req))                                                            \
  X(nixl_capi_destroy_xfer_req, (XferReq req))                                                                         \
  X(nixl_capi_create_notif_map, (NotifMap * map))                                                                      \
  X(nixl_capi_destroy_notif_map, (NotifMap map))                                                                       \
  X(nixl_capi_get_notifs, (Agent agent, NotifMap map, OptArgs args))                                                   \
  X(nixl_capi_notif_map_size, (NotifMap map, size_t * size))                                                           \
  X(nixl_capi_notif_map_get_agent_at, (NotifMap map, size_t index, const char** agent))                                \
  X(nixl_capi_notif_map_get_notifs_size, (NotifMap map, const char* agent, size_t* size))                              \
  X(nixl_capi_notif_map_get_notif, (NotifMap map, const char* agent, size_t index, const void** data, size_t* len))    \
  X(nixl_capi_notif_map_clear, (NotifMap map))

/// The loaded library; open() fails unless every entry point resolves.
class Library {
 public:
  /// dlopens `path` (libnixl_capi.so; libnixl.so and its plugins come with it). `unavailable` says why not.
  static StatusOr<std::shared_ptr<Library>> open(const std::string& path);
  ~Library() = default;
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  const std::string& path() const { return path_; }

#define PEERLAB_NIXL_POINTER(name, params) StatusT(*name) params = nullptr;
  PEERLAB_NIXL_FUNCTIONS(PEERLAB_NIXL_POINTER)
#undef PEERLAB_NIXL_POINTER
  /// nixl_capi_is_stub, where the library has it: a stub C API aborts on every call.
  bool (*nixl_capi_is_stub)() = nullptr;
  /// nixl_capi_create_configured_agent, where the library has it (NIXL's C API since late 2025); without it an agent
  /// comes from nixl_capi_create_agent, which always starts NIXL's progress thread.
  StatusT (*nixl_capi_create_configured_agent)(const char* name, const AgentConfig* config, Agent* agent) = nullptr;

 private:
  Library() = default;
  void* handle_ = nullptr;
  std::string path_;
};

/// Where peerlab looks for NIXL, in order: $PEERLAB_NIXL_LIBRARY (libnixl_capi.so itself); $PEERLAB_NIXL_DIR, a
/// directory holding libnixl_capi.so directly, in lib/, or in .nixl_cu13.mesonpy.libs/ / .nixl_cu12.mesonpy.libs/
/// (an unpacked nixl-cu13 / nixl-cu12 wheel or its site-packages directory); then LD_LIBRARY_PATH and the system
/// library directories. NIXL loads its backends from <dir of libnixl.so>/plugins unless NIXL_PLUGIN_DIR is set.
struct Location {
  std::string library;
  std::string how;
  bool found = false;
};
Location locateNixl();

}  // namespace peerlab::transport::nixl
