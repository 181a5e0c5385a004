#include "reference/core/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "reference/core/fd.h"

namespace peerlab {

namespace {

bool writeAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

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

namespace {

const char* fileTypeName(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

std::string mebibytes(size_t bytes) {
  return bytes >= (size_t{1} << 20) && bytes % (size_t{1} << 20) == 0 ? std::to_string(bytes >> 20) + " MiB"
                                                                      : std::to_string(bytes) + " bytes";
}

}  // namespace

StatusOr<std::string> readTextFile(const std::string& path, size_t max_bytes) {
  // A symlink is resolved first: what is judged is what a read would reach ("x.json" -> /dev/zero is a device).
  std::string target;
  struct stat link {};
  if (::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {
    std::error_code ec;
    const auto resolved = std::filesystem::canonical(path, ec);
    if (!ec) target = " (a symlink to " + resolved.string() + ")";
  }
  auto bad = [&](const std::string& why) { return PEERLAB_INVALID_ARGUMENT(path + target + ": " + why); };
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return bad(errno == ENOENT ? "no such file" : std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return bad(std::string(fileTypeName(st.st_mode)) + ", not a regular file");
  // O_NONBLOCK: should the file have been swapped for a FIFO meanwhile, open() does not wait for a writer.
  Fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (!static_cast<bool>(fd)) return bad(std::string("cannot read: ") + std::strerror(errno));
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return bad(std::string(fileTypeName(st.st_mode)) + ", not a regular file");
  }
  auto tooLarge = [&](const std::string& size) {
    return bad(size + ", larger than the " + mebibytes(max_bytes) + " allowed");
  };
  if (static_cast<size_t>(st.st_size) > max_bytes) return tooLarge(std::to_string(st.st_size) + " bytes");
  std::string text;
  text.reserve(static_cast<size_t>(st.st_size));
  char buf[65536];
  while (true) {
    const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return bad(std::string("cannot read: ") + std::strerror(errno));
    if (n == 0) break;
    if (text.size() + static_cast<size_t>(n) > max_bytes) return tooLarge("grew while read");
    text.append(buf, static_cast<size_t>(n));
  }
  return text;
}

Status writeTextFile(const std::string& path, const std::string& text) {
  namespace fs = std::filesystem;
  auto cannot = [&](const std::string& why) { return PEERLAB_INVALID_ARGUMENT("cannot write " + path + ": " + why); };
  if (path.empty()) return PEERLAB_INVALID_ARGUMENT("cannot write a file without a name");
  const fs::path target(path);
  if (!target.has_filename()) return cannot("names a directory");
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec) return cannot("cannot create " + dir.string() + ": " + ec.message());
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return cannot("is a directory");
    // A device or a pipe cannot be replaced: written in place (through a symlink such as /dev/stdout too).
    struct stat to {};
    const bool special = ::stat(path.c_str(), &to) == 0 && (S_ISCHR(to.st_mode) || S_ISFIFO(to.st_mode));
    if (special) {
      Fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
      if (!static_cast<bool>(fd)) return cannot(std::strerror(errno));
      if (!writeAll(fd.get(), text)) return cannot(std::strerror(errno));
      return Status::ok();
    }
  }
  std::random_device rd;
  std::string tmp;
  Fd fd;
  for (int attempt = 0; attempt < 100 && !static_cast<bool>(fd); ++attempt) {
    char suffix[32];
    std::snprintf(suffix, sizeof(suffix), ".tmp-%08x", static_cast<unsigned>(rd()));
    tmp = (dir / ("." + target.filename().string() + suffix)).string();
    fd = Fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666));
    if (!static_cast<bool>(fd) && errno != EEXIST) return cannot(std::strerror(errno));
  }
  if (!static_cast<bool>(fd)) return cannot("no free temporary name in " + dir.string());
  const bool written = writeAll(fd.get(), text) && ::fsync(fd.get()) == 0;
  const int err = errno;
  fd = Fd();
  if (!written) {
    ::unlink(tmp.c_str());
    return cannot(std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int rename_err = errno;
    ::unlink(tmp.c_str());
    return cannot(std::strerror(rename_err));
  }
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
