#include "reference/transport/nixl_api.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "reference/transport/ucx_api.h"

namespace peerlab::transport::nixl {

namespace fs = std::filesystem;

std::string statusName(StatusT status) {
  static const char* const kErrors[] = {"NIXL_CAPI_ERROR_INVALID_PARAM", "NIXL_CAPI_ERROR_BACKEND",
                                        "NIXL_CAPI_ERROR_INVALID_STATE", "NIXL_CAPI_ERROR_EXCEPTION",
                                        "NIXL_CAPI_ERROR_NO_TELEMETRY",  "NIXL_CAPI_ERROR_NOT_FOUND"};
  std::string name = "NIXL status";
  if (status == kSuccess) name = "NIXL_CAPI_SUCCESS";
  if (status == kInProgress) name = "NIXL_CAPI_IN_PROG";
  if (status < 0 && -status <= static_cast<int>(std::size(kErrors))) name = kErrors[-status - 1];
  return name + " (" + std::to_string(status) + ")";
}

StatusOr<std::shared_ptr<Library>> Library::open(const std::string& path) {
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = ::dlerror();
    return PEERLAB_UNAVAILABLE("NIXL: cannot load " + path + (why ? std::string(": ") + why : std::string()));
  }
  std::shared_ptr<Library> lib(new Library());
  lib->handle_ = handle;
  lib->path_ = path;
  std::string missing;
#define PEERLAB_NIXL_RESOLVE(name, params)                                   \
  lib->name = reinterpret_cast<decltype(lib->name)>(::dlsym(handle, #name)); \
  if (!lib->name) missing += (missing.empty() ? "" : ", ") + std::string(#name);
  PEERLAB_NIXL_FUNCTIONS(PEERLAB_NIXL_RESOLVE)
#undef PEERLAB_NIXL_RESOLVE
  lib->nixl_capi_is_stub = reinterpret_cast<bool (*)()>(::dlsym(handle, "nixl_capi_is_stub"));
  lib->nixl_capi_create_configured_agent = reinterpret_cast<decltype(lib->nixl_capi_create_configured_agent)>(
      ::dlsym(handle, "nixl_capi_create_configured_agent"));
  if (!missing.empty()) return PEERLAB_UNAVAILABLE("NIXL: " + path + " lacks " + missing);
  if (lib->nixl_capi_is_stub && lib->nixl_capi_is_stub()) {
    return PEERLAB_UNAVAILABLE("NIXL: " + path + " is the stub C API (built without NIXL)");
  }
  return lib;
}

Location locateNixl() {
  Location out;
  std::error_code ec;
  if (const char* file = std::getenv("PEERLAB_NIXL_LIBRARY"); file && *file) {
    out.library = file;
    out.how = std::string("PEERLAB_NIXL_LIBRARY=") + file;
    out.found = fs::is_regular_file(file, ec);
    return out;
  }
  if (const char* dir = std::getenv("PEERLAB_NIXL_DIR"); dir && *dir) {
    const fs::path d(dir);
    out.how = std::string("PEERLAB_NIXL_DIR=") + dir;
    for (const fs::path& p :
         {d / "libnixl_capi.so", d / "lib" / "libnixl_capi.so", d / ".nixl_cu13.mesonpy.libs" / "libnixl_capi.so",
          d / ".nixl_cu12.mesonpy.libs" / "libnixl_capi.so"}) {
      if (fs::is_regular_file(p, ec)) {
        out.library = p.string();
        out.found = true;
        return out;
      }
    }
    out.library = (d / "lib" / "libnixl_capi.so").string();
    return out;
  }
  out.how = "the loader's search path";
  out.library = ucx::findOnLoaderPath("libnixl_capi.so");
  out.found = !out.library.empty();
  if (!out.found) out.library = "libnixl_capi.so";
  return out;
}

}  // namespace peerlab::transport::nixl
