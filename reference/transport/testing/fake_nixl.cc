// A stand-in libnixl_capi for the transport's CPU tests ($PEERLAB_NIXL_LIBRARY). It exports the C API entry points
// peerlab declares (reference/transport/nixl_api.h) and answers from the scenario in $PEERLAB_FAKE_NIXL:
//   ok              the UCX plugin lists DRAM and VRAM, everything succeeds, a transfer finishes after a few polls
//   no_vram         the UCX plugin lists DRAM only
//   backend_error   creating the UCX backend fails
//   register_error  registering VRAM fails (what NIXL does when its UCX reports GPU memory as host memory)
//   prepare_error   preparing the local descriptor list fails
//   xfer_error      a posted transfer fails
//   never_completes a posted transfer stays in progress
//   stub            nixl_capi_is_stub() says true (a C API built without NIXL)
//   params_error    adding a UCX backend parameter fails
// A transfer takes as many descriptors as $PEERLAB_FAKE_NIXL_DESCRIPTORS says (default 1), on both sides.
// Nothing moves; every remote write with a notification makes the fake count one for its own agent.

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "reference/transport/nixl_api.h"

using namespace peerlab::transport::nixl;  // NOLINT: the C API types

namespace {

std::string scenario() {
  const char* s = std::getenv("PEERLAB_FAKE_NIXL");
  return s && *s ? s : "ok";
}
bool is(const char* s) {
  return scenario() == s;
}

struct FakeAgent {
  std::string name;
  bool progress_thread = true;
};
struct FakeList {
  int type = 0;
  size_t descs = 0;
};
struct FakeReq {
  int polls = 0;
};
int g_dummy = 0;

}  // namespace

extern "C" {

bool nixl_capi_is_stub() {
  return is("stub");
}
StatusT nixl_capi_create_agent(const char* name, Agent* agent) {
  *agent = reinterpret_cast<Agent>(new FakeAgent{name});
  return kSuccess;
}
StatusT nixl_capi_create_configured_agent(const char* name, const AgentConfig* config, Agent* agent) {
  if (!name || !config || !agent) return -1;
  *agent = reinterpret_cast<Agent>(new FakeAgent{name, config->enable_prog_thread});
  return kSuccess;
}
StatusT nixl_capi_destroy_agent(Agent agent) {
  delete reinterpret_cast<FakeAgent*>(agent);
  return kSuccess;
}
StatusT nixl_capi_get_local_md(Agent agent, void** data, size_t* len) {
  const std::string& name = reinterpret_cast<FakeAgent*>(agent)->name;
  *data = std::malloc(name.size());
  std::memcpy(*data, name.data(), name.size());
  *len = name.size();
  return kSuccess;
}
StatusT nixl_capi_load_remote_md(Agent, const void* data, size_t len, char** agent_name) {
  if (len == 0 || std::memcmp(data, "peerlab-", 8) != 0) return -1;
  *agent_name = strndup(static_cast<const char*>(data), len);
  return kSuccess;
}
StatusT nixl_capi_invalidate_remote_md(Agent, const char*) {
  return kSuccess;
}
StatusT nixl_capi_get_plugin_params(Agent, const char* plugin, MemList* mems, Params* params) {
  if (std::string(plugin) != "UCX") return -6;
  *mems = reinterpret_cast<MemList>(new FakeList{is("no_vram") ? 1 : 2, 0});
  *params = reinterpret_cast<Params>(&g_dummy);
  return kSuccess;
}
StatusT nixl_capi_destroy_mem_list(MemList list) {
  delete reinterpret_cast<FakeList*>(list);
  return kSuccess;
}
StatusT nixl_capi_destroy_params(Params) {
  return kSuccess;
}
StatusT nixl_capi_params_add(Params params, const char* key, const char* value) {
  if (is("params_error")) return -1;
  return params && key && value ? kSuccess : -1;
}
StatusT nixl_capi_mem_list_size(MemList list, size_t* size) {
  *size = static_cast<size_t>(reinterpret_cast<FakeList*>(list)->type);
  return kSuccess;
}
StatusT nixl_capi_mem_list_get(MemList, size_t index, int* mem_type) {
  *mem_type = index == 0 ? kMemDram : kMemVram;
  return kSuccess;
}
StatusT nixl_capi_create_backend(Agent, const char*, Params, Backend* backend) {
  if (is("backend_error")) return -2;
  *backend = reinterpret_cast<Backend>(&g_dummy);
  return kSuccess;
}
StatusT nixl_capi_destroy_backend(Backend) {
  return kSuccess;
}
StatusT nixl_capi_create_opt_args(OptArgs* args) {
  *args = reinterpret_cast<OptArgs>(new int(0));
  return kSuccess;
}
StatusT nixl_capi_destroy_opt_args(OptArgs args) {
  delete reinterpret_cast<int*>(args);
  return kSuccess;
}
StatusT nixl_capi_opt_args_add_backend(OptArgs, Backend) {
  return kSuccess;
}
StatusT nixl_capi_opt_args_set_notif_msg(OptArgs, const void*, size_t) {
  return kSuccess;
}
StatusT nixl_capi_opt_args_set_has_notif(OptArgs args, bool has) {
  *reinterpret_cast<int*>(args) = has ? 1 : 0;
  return kSuccess;
}
StatusT nixl_capi_create_reg_dlist(int type, RegDlist* dlist) {
  *dlist = reinterpret_cast<RegDlist>(new FakeList{type, 0});
  return kSuccess;
}
StatusT nixl_capi_destroy_reg_dlist(RegDlist dlist) {
  delete reinterpret_cast<FakeList*>(dlist);
  return kSuccess;
}
StatusT nixl_capi_reg_dlist_add_desc(RegDlist dlist, uintptr_t, size_t, uint64_t, const void*, size_t) {
  ++reinterpret_cast<FakeList*>(dlist)->descs;
  return kSuccess;
}
StatusT nixl_capi_register_mem(Agent, RegDlist dlist, OptArgs) {
  if (is("register_error") && reinterpret_cast<FakeList*>(dlist)->type == kMemVram) return -2;
  return kSuccess;
}
StatusT nixl_capi_deregister_mem(Agent, RegDlist, OptArgs) {
  return kSuccess;
}
StatusT nixl_capi_create_xfer_dlist(int type, XferDlist* dlist) {
  *dlist = reinterpret_cast<XferDlist>(new FakeList{type, 0});
  return kSuccess;
}
StatusT nixl_capi_destroy_xfer_dlist(XferDlist dlist) {
  delete reinterpret_cast<FakeList*>(dlist);
  return kSuccess;
}
StatusT nixl_capi_xfer_dlist_add_desc(XferDlist dlist, uintptr_t, size_t, uint64_t) {
  ++reinterpret_cast<FakeList*>(dlist)->descs;
  return kSuccess;
}
StatusT nixl_capi_prep_xfer_dlist(Agent, const char*, XferDlist, DlistHandle* handle, OptArgs) {
  if (is("prepare_error")) return -2;
  *handle = reinterpret_cast<DlistHandle>(&g_dummy);
  return kSuccess;
}
StatusT nixl_capi_release_xfer_dlist_handle(Agent, DlistHandle) {
  return kSuccess;
}
StatusT nixl_capi_make_xfer_req(Agent, int, DlistHandle, const int*, size_t, DlistHandle, const int*, size_t, XferReq*,
                                OptArgs) {
  return -2;
}
StatusT nixl_capi_create_xfer_req(Agent, int, XferDlist local, XferDlist remote, const char* remote_agent, XferReq* req,
                                  OptArgs) {
  const char* want_env = std::getenv("PEERLAB_FAKE_NIXL_DESCRIPTORS");
  const size_t want = want_env && *want_env ? std::strtoull(want_env, nullptr, 10) : 1;
  if (reinterpret_cast<FakeList*>(local)->descs != want || reinterpret_cast<FakeList*>(remote)->descs != want)
    return -1;
  if (std::strncmp(remote_agent, "peerlab-", 8) != 0) return -6;
  *req = reinterpret_cast<XferReq>(new FakeReq{});
  return kSuccess;
}
StatusT nixl_capi_post_xfer_req(Agent, XferReq req, OptArgs) {
  reinterpret_cast<FakeReq*>(req)->polls = 0;
  return kInProgress;
}
StatusT nixl_capi_get_xfer_status(Agent, XferReq req) {
  if (is("xfer_error")) return -2;
  if (is("never_completes")) return kInProgress;
  return ++reinterpret_cast<FakeReq*>(req)->polls >= 3 ? kSuccess : kInProgress;
}
StatusT nixl_capi_release_xfer_req(Agent, XferReq) {
  return kSuccess;
}
StatusT nixl_capi_destroy_xfer_req(XferReq req) {
  delete reinterpret_cast<FakeReq*>(req);
  return kSuccess;
}
StatusT nixl_capi_create_notif_map(NotifMap* map) {
  *map = reinterpret_cast<NotifMap>(new int(0));
  return kSuccess;
}
StatusT nixl_capi_destroy_notif_map(NotifMap map) {
  delete reinterpret_cast<int*>(map);
  return kSuccess;
}
StatusT nixl_capi_get_notifs(Agent, NotifMap, OptArgs) {
  return kSuccess;
}
StatusT nixl_capi_notif_map_size(NotifMap, size_t* size) {
  *size = 0;
  return kSuccess;
}
StatusT nixl_capi_notif_map_get_agent_at(NotifMap, size_t, const char**) {
  return -1;
}
StatusT nixl_capi_notif_map_get_notifs_size(NotifMap, const char*, size_t*) {
  return -1;
}
StatusT nixl_capi_notif_map_get_notif(NotifMap, const char*, size_t, const void**, size_t*) {
  return -1;
}
StatusT nixl_capi_notif_map_clear(NotifMap) {
  return kSuccess;
}

}  // extern "C"
