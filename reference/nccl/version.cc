#include "reference/nccl/version.h"

#include <dlfcn.h>

namespace peerlab::nccl {

std::string loadedVersionString() {
  // Already in the process (linked, or loaded by a library) first: that is the one its calls go to.
  void* lib = ::dlopen("libnccl.so.2", RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
  if (lib == nullptr) lib = ::dlopen("libnccl.so.2", RTLD_LAZY | RTLD_LOCAL);
  if (lib == nullptr) return "none";
  std::string out = "unknown";
  using GetVersion = int (*)(int*);  // ncclResult_t ncclGetVersion(int* version); ncclSuccess is 0
  if (auto get = reinterpret_cast<GetVersion>(::dlsym(lib, "ncclGetVersion")); get != nullptr) {
    int v = 0;
    if (get(&v) == 0 && v > 0) {
      out = std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) + "." + std::to_string(v % 100);
    }
  }
  ::dlclose(lib);
  return out;
}

}  // namespace peerlab::nccl
