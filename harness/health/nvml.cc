#include "harness/health/nvml.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

namespace peerlab::health::nvml {

StatusOr<std::shared_ptr<Library>> Library::open() {
  const char* env = std::getenv("PEERLAB_NVML_LIBRARY");
  const std::string path = env && *env ? env : "libnvidia-ml.so.1";
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = ::dlerror();
    return PEERLAB_UNAVAILABLE("NVML: cannot load " + path + (why ? std::string(": ") + why : std::string()));
  }
  std::shared_ptr<Library> lib(new Library());
  lib->handle_ = handle;
  lib->path_ = path;
#define PEERLAB_NVML_RESOLVE(name, params) lib->name = reinterpret_cast<decltype(lib->name)>(::dlsym(handle, #name));
  PEERLAB_NVML_FUNCTIONS(PEERLAB_NVML_RESOLVE)
#undef PEERLAB_NVML_RESOLVE
  lib->error_string_ = reinterpret_cast<const char* (*)(Return)>(::dlsym(handle, "nvmlErrorString"));
  if (!lib->nvmlInit_v2) return PEERLAB_UNAVAILABLE("NVML: " + path + " has no nvmlInit_v2");
  if (Return r = lib->nvmlInit_v2(); r != kSuccess) {
    const std::string why = lib->errorString(r);
    // Do not call nvmlShutdown after a failed init.
    lib->nvmlShutdown = nullptr;
    return PEERLAB_UNAVAILABLE("NVML: nvmlInit: " + why);
  }
  return lib;
}

Library::~Library() {
  if (nvmlShutdown) nvmlShutdown();
  // The library stays mapped: NVML may still run threads of its own after nvmlShutdown.
}

std::string Library::errorString(Return r) const {
  if (error_string_) {
    if (const char* s = error_string_(r)) return s;
  }
  return "NVML error " + std::to_string(r);
}

std::string busIdOf(const PciInfo& pci) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%04x:%02x:%02x.0", pci.domain & 0xffffu, pci.bus & 0xffu, pci.device & 0xffu);
  return buf;
}

bool fieldAsDouble(const FieldValue& v, double* out) {
  if (v.nvmlReturn != kSuccess) return false;
  switch (v.valueType) {
    case kValueDouble:
      *out = v.value.dVal;
      break;
    case kValueUnsignedInt:
      *out = v.value.uiVal;
      break;
    case kValueUnsignedLong:
      *out = static_cast<double>(v.value.ulVal);
      break;
    case kValueUnsignedLongLong:
      *out = static_cast<double>(v.value.ullVal);
      break;
    case kValueSignedLongLong:
      *out = static_cast<double>(v.value.sllVal);
      break;
    default:
      *out = v.value.siVal;
      break;
  }
  return true;
}

}  // namespace peerlab::health::nvml
