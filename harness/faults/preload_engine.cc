#include "harness/faults/preload_engine.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "harness/faults/preload_internal.h"

// What a peerlab process looks up to know it runs under the interposer, whatever the library's file is called
// (report::detectInjection): its runs are then marked injected.
extern "C" __attribute__((visibility("default"))) const char peerlab_faults_interposer[] = "peerlab fault interposer";

namespace peerlab::faults::preload {

namespace {

thread_local int t_runtime_depth = 0;

std::atomic<void*> g_real_dlsym{nullptr};
std::atomic<void*> g_real_dlopen{nullptr};
std::atomic<void*> g_real_dlclose{nullptr};
std::atomic<GpaV2Fn> g_gpa_v2{nullptr};
std::atomic<GpaV1Fn> g_gpa_v1{nullptr};

// glibc's definition of `name` after this library: libc's since glibc 2.34, libdl's (GLIBC_2.2.5) before.
void* nextGlibc(std::atomic<void*>& cache, const char* name) {
  void* fn = cache.load(std::memory_order_acquire);
  if (fn == nullptr) {
    fn = dlvsym(RTLD_NEXT, name, "GLIBC_2.34");
    if (fn == nullptr) fn = dlvsym(RTLD_NEXT, name, "GLIBC_2.2.5");
    cache.store(fn, std::memory_order_release);
  }
  return fn;
}

int processRank() {
  for (const char* var : {"PEERLAB_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0') return std::atoi(v);
  }
  return -1;
}

Config loadConfig() {
  Config cfg;
  const char* verbose = std::getenv(kEnvVerbose);
  cfg.verbose = verbose != nullptr && std::strcmp(verbose, "0") != 0 && *verbose != '\0';
  cfg.rank = processRank();
  const char* text = std::getenv(kEnvFault);
  if (text == nullptr || *text == '\0') return cfg;
  auto spec = parseFaultSpec(text);
  if (!spec.isOk()) {
    std::fprintf(stderr, "peerlab-faults: %s=%s: %s; no fault injected\n", kEnvFault, text,
                 spec.status().message().c_str());
    return cfg;
  }
  cfg.spec = *spec;
  cfg.engaged = cfg.spec.needsInterposer() && (cfg.spec.rank < 0 || cfg.spec.rank == cfg.rank);
  return cfg;
}

}  // namespace

const Config& config() {
  static const Config cfg = loadConfig();
  return cfg;
}

bool engaged(FaultKind kind) {
  const Config& cfg = config();
  return cfg.engaged && cfg.spec.kind == kind;
}

DlsymFn realDlsym() {
  return reinterpret_cast<DlsymFn>(nextGlibc(g_real_dlsym, "dlsym"));
}

void* openLoaded(const char* file) {
  using DlopenFn = void* (*)(const char*, int);
  auto fn = reinterpret_cast<DlopenFn>(nextGlibc(g_real_dlopen, "dlopen"));
  return fn != nullptr ? fn(file, RTLD_LAZY | RTLD_NOLOAD) : nullptr;
}

void closeLoaded(void* handle) {
  using DlcloseFn = int (*)(void*);
  auto fn = reinterpret_cast<DlcloseFn>(nextGlibc(g_real_dlclose, "dlclose"));
  if (fn != nullptr && handle != nullptr) fn(handle);
}

void noteRealGpaV2(GpaV2Fn fn) {
  if (fn != nullptr) g_gpa_v2.store(fn, std::memory_order_release);
}
void noteRealGpaV1(GpaV1Fn fn) {
  if (fn != nullptr) g_gpa_v1.store(fn, std::memory_order_release);
}

GpaV2Fn realGpaV2() {
  GpaV2Fn fn = g_gpa_v2.load(std::memory_order_acquire);
  if (fn != nullptr) return fn;
  // Not looked up by the process yet: take it from the loaded driver, if any.
  DlsymFn dls = realDlsym();
  if (dls == nullptr) return nullptr;
  if (void* lib = openLoaded("libcuda.so.1")) {
    fn = reinterpret_cast<GpaV2Fn>(dls(lib, "cuGetProcAddress_v2"));
    closeLoaded(lib);
  }
  noteRealGpaV2(fn);
  return fn;
}

GpaV1Fn realGpaV1() {
  return g_gpa_v1.load(std::memory_order_acquire);
}

void* realEntryPoint(const char* name, int version) {
  void* fn = nullptr;
  CUresult r = CUDA_ERROR_NOT_FOUND;
  if (GpaV2Fn v2 = realGpaV2()) {
    CUdriverProcAddressQueryResult q = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    r = v2(name, &fn, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &q);
    if (q != CU_GET_PROC_ADDRESS_SUCCESS) fn = nullptr;
  } else if (GpaV1Fn v1 = realGpaV1()) {
    r = v1(name, &fn, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM);
  }
  return r == CUDA_SUCCESS ? fn : nullptr;
}

RuntimeScope::RuntimeScope() {
  ++t_runtime_depth;
}
RuntimeScope::~RuntimeScope() {
  --t_runtime_depth;
}
bool insideRuntimeCall() {
  return t_runtime_depth > 0;
}

namespace {

// Loads the configuration when the library is loaded, so that every process under the interposer says so once on
// stderr, verbose or not: nothing it prints may pass for the machine's own behaviour.
__attribute__((constructor)) void announce() {
  const Config& cfg = config();
  std::string detail = std::getenv(kEnvFault) == nullptr ? std::string("without a fault (PEERLAB_FAULT unset)")
                                                         : "fault " + cfg.spec.canonical();
  if (std::getenv(kEnvFault) != nullptr && !cfg.engaged) detail += " (not engaged in this process)";
  announceLoaded(detail);
}

// Eligible calls counted against after= and count=.
std::mutex g_decide_mu;
int64_t g_eligible = 0;
int64_t g_injected = 0;

}  // namespace

int64_t decide() {
  const FaultSpec& spec = config().spec;
  std::lock_guard<std::mutex> lock(g_decide_mu);
  const int64_t seen = g_eligible++;
  if (seen < spec.after) return -1;
  if (spec.count >= 0 && g_injected >= spec.count) return -1;
  return g_injected++;
}

bool pairMatches(int a, int b) {
  const FaultSpec& spec = config().spec;
  return spec.pair_a < 0 || (a == spec.pair_a && b == spec.pair_b);
}

}  // namespace peerlab::faults::preload
