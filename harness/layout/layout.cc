#include "harness/layout/layout.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "reference/core/files.h"

// Relative directories from GNUInstallDirs (harness/layout/CMakeLists.txt); these defaults are the usual ones.
#ifndef PEERLAB_LAYOUT_BIN_TO_LIBEXEC
#define PEERLAB_LAYOUT_BIN_TO_LIBEXEC "../libexec/peerlab"
#endif
#ifndef PEERLAB_LAYOUT_BIN_TO_LIB
#define PEERLAB_LAYOUT_BIN_TO_LIB "../lib"
#endif
#ifndef PEERLAB_LAYOUT_BIN_TO_DATA
#define PEERLAB_LAYOUT_BIN_TO_DATA "../share/peerlab"
#endif
#ifndef PEERLAB_LAYOUT_LIBEXEC_TO_BIN
#define PEERLAB_LAYOUT_LIBEXEC_TO_BIN "../../bin"
#endif

namespace peerlab::layout {

namespace fs = std::filesystem;

namespace {

// The directory of `self_exe` (this process when empty), symlinks resolved: a link to peerlab in /usr/local/bin
// finds the files of the tree the link points into.
fs::path exeDir(const std::string& self_exe) {
  const std::string exe = self_exe.empty() ? selfExecutable() : self_exe;
  if (exe.empty()) return {};
  std::error_code ec;
  fs::path p = fs::canonical(exe, ec);
  if (ec) p = fs::absolute(exe, ec);
  return p.parent_path();
}

std::vector<std::string> under(const fs::path& dir, std::initializer_list<const char*> relatives) {
  std::vector<std::string> out;
  if (dir.empty()) return out;
  for (const char* rel : relatives) {
    const std::string p = (dir / rel).lexically_normal().string();
    std::string trimmed = p.size() > 1 && p.back() == '/' ? p.substr(0, p.size() - 1) : p;
    if (std::find(out.begin(), out.end(), trimmed) == out.end()) out.push_back(trimmed);
  }
  return out;
}

}  // namespace

std::vector<std::string> executableDirs(const std::string& self_exe) {
  return under(exeDir(self_exe), {PEERLAB_LAYOUT_BIN_TO_LIBEXEC, "."});
}

std::vector<std::string> libraryDirs(const std::string& self_exe) {
  return under(exeDir(self_exe), {PEERLAB_LAYOUT_BIN_TO_LIB, "../lib", "."});
}

std::vector<std::string> dataDirs(const std::string& self_exe) {
  return under(exeDir(self_exe), {PEERLAB_LAYOUT_BIN_TO_DATA});
}

std::string findExecutable(const std::string& name, const std::vector<std::string>& dirs) {
  for (const std::string& d : dirs) {
    const std::string p = d + "/" + name;
    std::error_code ec;
    if (fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

std::string findFile(const std::string& name, const std::vector<std::string>& dirs) {
  for (const std::string& d : dirs) {
    const std::string p = d + "/" + name;
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p;
  }
  return "";
}

std::string peerlabBinary(const std::string& self_exe) {
  return findExecutable("peerlab", under(exeDir(self_exe), {".", PEERLAB_LAYOUT_LIBEXEC_TO_BIN}));
}

std::string buildTree(const std::string& self_exe) {
  const fs::path dir = exeDir(self_exe);
  if (dir.empty()) return "";
  std::error_code ec;
  const fs::path top = dir.parent_path();
  return fs::is_regular_file(top / "CMakeCache.txt", ec) ? top.string() : "";
}

std::string buildCommand(const std::string& self_exe) {
  const std::string tree = buildTree(self_exe);
  return "cmake --build " + (tree.empty() ? std::string("<build dir>") : tree) + " --target " + kQualifyTarget;
}

}  // namespace peerlab::layout
