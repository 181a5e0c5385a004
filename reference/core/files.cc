#include "reference/core/files.h"

#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace peerlab {

namespace {

bool isExecutable(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

StatusOr<std::string> makePrivateDir(const std::string& prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string base = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  while (base.size() > 1 && base.back() == '/')
    base.pop_back();
  // Keep room for a socket name ("/r<rank>") inside a Unix socket address.
  if (base.size() + prefix.size() + 8 + 8 >= sizeof(sockaddr_un::sun_path)) base = "/tmp";
  std::string templ = base + "/" + prefix + "-XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) {
    const int err = errno;
    return PEERLAB_UNAVAILABLE("cannot create a private directory under '" + base + "': " + std::strerror(err) +
                               " (errno " + std::to_string(err) + ")");
  }
  return templ;
}

StatusOr<TempDir> TempDir::make(const std::string& prefix) {
  PEERLAB_ASSIGN_OR_RETURN(std::string path, makePrivateDir(prefix));
  return TempDir(std::move(path));
}

TempDir& TempDir::operator=(TempDir&& other) noexcept {
  if (this != &other) {
    remove();
    path_ = std::move(other.path_);
    other.path_.clear();
  }
  return *this;
}

TempDir::~TempDir() {
  remove();
}

void TempDir::remove() noexcept {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  path_.clear();
}

StatusOr<std::string> readTextFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return PEERLAB_INVALID_ARGUMENT(path + ": cannot read: " + std::strerror(errno));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Status writeTextFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return PEERLAB_INVALID_ARGUMENT(path + ": cannot write: " + std::strerror(errno));
  f << text;
  f.flush();
  if (!f) return PEERLAB_INVALID_ARGUMENT(path + ": write failed");
  return Status::ok();
}

std::string tailOfFile(const std::string& path, int lines) {
  std::ifstream f(path);
  if (!f) return "";
  std::deque<std::string> keep;
  std::string line;
  while (std::getline(f, line)) {
    keep.push_back(line);
    if (static_cast<int>(keep.size()) > lines) keep.pop_front();
  }
  std::string out;
  for (const auto& l : keep)
    out += l + "\n";
  return out;
}

std::string selfExecutable() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  buf[n] = '\0';
  return buf;
}

std::string selfExecutableDir() {
  std::string exe = selfExecutable();
  const auto slash = exe.rfind('/');
  return slash == std::string::npos ? "" : exe.substr(0, slash);
}

std::string findInPath(const std::string& name) {
  if (name.find('/') != std::string::npos) return isExecutable(name) ? name : "";
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (dir.empty()) continue;
    const std::string candidate = dir + "/" + name;
    if (isExecutable(candidate)) return candidate;
  }
  return "";
}

}  // namespace peerlab
