#include "reference/transport/ucx_api.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>

namespace peerlab::transport::ucx {

namespace fs = std::filesystem;

std::string memoryTypeName(int type) {
  static const char* const kNames[] = {"host", "cuda", "cuda-managed", "rocm", "rocm-managed"};
  if (type >= 0 && type < static_cast<int>(std::size(kNames))) return kNames[type];
  return "type " + std::to_string(type);
}

StatusOr<std::shared_ptr<Library>> Library::open(const std::string& path) {
  // RTLD_LOCAL: UCX's symbols stay out of the global namespace, so nothing else in the process binds to them.
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = ::dlerror();
    return PEERLAB_UNAVAILABLE("UCX: cannot load " + path + (why ? std::string(": ") + why : std::string()));
  }
  std::shared_ptr<Library> lib(new Library());
  lib->handle_ = handle;
  lib->path_ = path;
  std::string missing;
#define PEERLAB_UCX_RESOLVE(name, ret, params)                               \
  lib->name = reinterpret_cast<decltype(lib->name)>(::dlsym(handle, #name)); \
  if (!lib->name) missing += (missing.empty() ? "" : ", ") + std::string(#name);
  PEERLAB_UCX_FUNCTIONS(PEERLAB_UCX_RESOLVE)
#undef PEERLAB_UCX_RESOLVE
  if (!missing.empty()) return PEERLAB_UNAVAILABLE("UCX: " + path + " lacks " + missing);
  return lib;
}

Library::~Library() {
  // UCX keeps threads and memory hooks of its own: the library stays mapped for the life of the process.
}

std::string Library::version() const {
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

std::string Library::describe(StatusT status) const {
  const char* s = ucs_status_string(status);
  return std::string(s ? s : "unknown UCX status") + " (" + std::to_string(static_cast<int>(status)) + ")";
}

namespace {

std::string firstExisting(const std::vector<fs::path>& candidates) {
  std::error_code ec;
  for (const fs::path& p : candidates) {
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  return "";
}

}  // namespace

std::string findOnLoaderPath(const std::string& soname) {
  // LD_LIBRARY_PATH first, then the usual system directories: a file check, nothing is loaded.
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("LD_LIBRARY_PATH"); env && *env) {
    std::string list(env);
    size_t start = 0;
    while (start <= list.size()) {
      const size_t colon = list.find(':', start);
      const std::string dir = list.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
      if (!dir.empty()) candidates.push_back(fs::path(dir) / soname);
      if (colon == std::string::npos) break;
      start = colon + 1;
    }
  }
  for (const char* dir :
       {"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/local/lib", "/usr/lib64", "/usr/lib"}) {
    candidates.push_back(fs::path(dir) / soname);
  }
  return firstExisting(candidates);
}

Location locateUcx() {
  Location out;
  if (const char* file = std::getenv("PEERLAB_UCX_LIBRARY"); file && *file) {
    out.library = file;
    out.how = std::string("PEERLAB_UCX_LIBRARY=") + file;
    std::error_code ec;
    out.found = fs::is_regular_file(file, ec);
    return out;
  }
  if (const char* dir = std::getenv("PEERLAB_UCX_DIR"); dir && *dir) {
    const fs::path d(dir);
    out.how = std::string("PEERLAB_UCX_DIR=") + dir;
    out.library = firstExisting({d / "libucp.so.0", d / "lib" / "libucp.so.0", d / "libucx" / "lib" / "libucp.so.0"});
    out.found = !out.library.empty();
    if (!out.found) out.library = (d / "lib" / "libucp.so.0").string();
    return out;
  }
  out.how = "the loader's search path";
  out.library = findOnLoaderPath("libucp.so.0");
  out.found = !out.library.empty();
  if (!out.found) out.library = "libucp.so.0";
  return out;
}

namespace {

bool hasModule(const std::string& library, const std::string& prefix) {
  std::error_code ec;
  const fs::path modules = fs::path(library).parent_path() / "ucx";
  for (const auto& entry : fs::directory_iterator(modules, ec)) {
    if (entry.path().filename().string().rfind(prefix, 0) == 0) return true;
  }
  return false;
}

}  // namespace

bool ucxHasCudaModule(const std::string& library) {
  return hasModule(library, "libuct_cuda.so");
}

bool ucxHasCudaHooks(const std::string& library) {
  return hasModule(library, "libucm_cuda.so");
}

std::string prepareMemoryTypeDetection(const std::string& library) {
  if (!ucxHasCudaModule(library) || ucxHasCudaHooks(library)) return "";
  if (const char* set = std::getenv("UCX_MEMTYPE_CACHE"); set != nullptr) return "";
  ::setenv("UCX_MEMTYPE_CACHE", "n", 0);
  return "UCX_MEMTYPE_CACHE=n (no CUDA memory hooks, ucx/libucm_cuda.so, beside it)";
}

}  // namespace peerlab::transport::ucx
