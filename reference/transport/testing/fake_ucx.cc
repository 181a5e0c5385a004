// A stand-in libucp for the transport's CPU tests ($PEERLAB_UCX_LIBRARY). It exports the UCP entry points peerlab
// declares (reference/transport/ucx_api.h) and answers from the scenario in $PEERLAB_FAKE_UCX:
//   cuda               the context lists host and CUDA memory; every mapping larger than 8 bytes is CUDA memory
//   no_cuda            the context lists host memory only and every mapping is host memory (Debian's UCX)
//   host_registration  the context lists CUDA, yet GPU buffers register as host memory
//   init_error         ucp_init fails with "Unsupported operation"
//   put_error          ucp_put_nbx fails at once with an I/O error
//   never_completes    every request stays in progress
// Nothing moves: a put or get completes after a few progress calls ("cuda") without touching memory.
// Built twice: with PEERLAB_FAKE_UCX_MINIMAL the library lacks ucp_put_nbx (an incomplete install).

#include <cstdlib>
#include <cstring>
#include <string>

#include "reference/transport/ucx_api.h"

using namespace peerlab::transport::ucx;  // NOLINT: the UCP types

namespace {

std::string scenario() {
  const char* s = std::getenv("PEERLAB_FAKE_UCX");
  return s && *s ? s : "cuda";
}

struct FakeRequest {
  int polls = 0;
};
struct FakeMem {
  size_t length = 0;
};
int g_dummy = 0;
char g_address[16] = "fake-address";

StatusPtr request() {
  if (scenario() == "never_completes") return new FakeRequest{-1};
  return new FakeRequest{0};
}

}  // namespace

extern "C" {

void ucp_get_version(unsigned* major, unsigned* minor, unsigned* release) {
  *major = 1;
  *minor = 99;
  *release = 0;
}
StatusT ucp_config_read(const char*, const char*, Config** config) {
  *config = reinterpret_cast<Config*>(&g_dummy);
  return kOk;
}
void ucp_config_release(Config*) {}
StatusT ucp_init_version(unsigned, unsigned, const Params* params, const Config*, Context* context) {
  if (scenario() == "init_error") return kErrUnsupported;
  if (!(params->field_mask & kParamFieldFeatures) || !(params->features & kFeatureRma)) return -5;
  *context = reinterpret_cast<Context>(&g_dummy);
  return kOk;
}
void ucp_cleanup(Context) {}
StatusT ucp_context_query(Context, ContextAttr* attr) {
  if (attr->field_mask & kAttrFieldMemoryTypes) {
    attr->memory_types = 1ull << kMemoryHost;
    if (scenario() != "no_cuda") attr->memory_types |= (1ull << kMemoryCuda) | (1ull << kMemoryCudaManaged);
  }
  return kOk;
}
StatusT ucp_worker_create(Context, const WorkerParams*, Worker* worker) {
  *worker = reinterpret_cast<Worker>(&g_dummy);
  return kOk;
}
void ucp_worker_destroy(Worker) {}
StatusT ucp_worker_get_address(Worker, Address** address, size_t* length) {
  *address = reinterpret_cast<Address*>(g_address);
  *length = sizeof(g_address);
  return kOk;
}
void ucp_worker_release_address(Worker, Address*) {}
unsigned ucp_worker_progress(Worker) {
  return 0;
}
StatusT ucp_worker_fence(Worker) {
  return kOk;
}
StatusT ucp_ep_create(Worker, const EpParams* params, Ep* ep) {
  if (!(params->field_mask & kEpFieldRemoteAddress) || std::memcmp(params->address, "fake-address", 12) != 0) return -3;
  *ep = reinterpret_cast<Ep>(&g_dummy);
  return kOk;
}
StatusPtr ucp_ep_close_nbx(Ep, const RequestParam*) {
  return nullptr;
}
StatusPtr ucp_ep_flush_nbx(Ep, const RequestParam*) {
  return request();
}
StatusT ucp_mem_map(Context, const MemMapParams* params, Mem* mem) {
  *mem = reinterpret_cast<Mem>(new FakeMem{params->length});
  return kOk;
}
StatusT ucp_mem_unmap(Context, Mem mem) {
  delete reinterpret_cast<FakeMem*>(mem);
  return kOk;
}
StatusT ucp_mem_query(Mem mem, MemAttr* attr) {
  const bool large = reinterpret_cast<FakeMem*>(mem)->length > 8;
  const std::string s = scenario();
  attr->mem_type = large && s != "no_cuda" && s != "host_registration" ? kMemoryCuda : kMemoryHost;
  return kOk;
}
StatusT ucp_rkey_pack(Context, Mem, void** buffer, size_t* size) {
  *buffer = std::malloc(4);
  std::memcpy(*buffer, "key", 4);
  *size = 4;
  return kOk;
}
void ucp_rkey_buffer_release(void* buffer) {
  std::free(buffer);
}
StatusT ucp_ep_rkey_unpack(Ep, const void* buffer, Rkey* rkey) {
  if (std::memcmp(buffer, "key", 4) != 0) return -3;
  *rkey = reinterpret_cast<Rkey>(&g_dummy);
  return kOk;
}
void ucp_rkey_destroy(Rkey) {}
#ifndef PEERLAB_FAKE_UCX_MINIMAL
StatusPtr ucp_put_nbx(Ep, const void*, size_t, uint64_t, Rkey, const RequestParam*) {
  if (scenario() == "put_error") return reinterpret_cast<StatusPtr>(static_cast<intptr_t>(-3));
  return request();
}
#endif
StatusPtr ucp_get_nbx(Ep, void*, size_t, uint64_t, Rkey, const RequestParam*) {
  return request();
}
StatusT ucp_request_check_status(void* r) {
  auto* req = static_cast<FakeRequest*>(r);
  if (req->polls < 0) return kInProgress;
  return ++req->polls >= 3 ? kOk : kInProgress;
}
void ucp_request_free(void* r) {
  delete static_cast<FakeRequest*>(r);
}
const char* ucs_status_string(StatusT status) {
  switch (status) {
    case -3:
      return "Input/output error";
    case -22:
      return "Unsupported operation";
    default:
      return "Fake UCX status";
  }
}

}  // extern "C"
