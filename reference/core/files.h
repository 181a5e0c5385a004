#pragma once
/// Small file utilities: private temporary directories, whole text files, the tail of a log, the running executable,
/// a program in PATH.

#include <string>
#include <utility>

#include "reference/core/status.h"

namespace peerlab {

/// A new private (0700) directory under $TMPDIR (or /tmp), named <prefix>-XXXXXX. /tmp is taken instead when $TMPDIR
/// is too long for Unix socket addresses inside the directory.
StatusOr<std::string> makePrivateDir(const std::string& prefix);

/// Owner of a private temporary directory: removes it with everything in it when destroyed.
class TempDir {
 public:
  static StatusOr<TempDir> make(const std::string& prefix);
  TempDir() = default;
  TempDir(TempDir&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }
  TempDir& operator=(TempDir&& other) noexcept;
  ~TempDir();

  const std::string& path() const { return path_; }  ///< "" for an empty owner
  /// path() + "/" + name.
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  void remove() noexcept;
  std::string path_;
};

/// Largest file readTextFile() reads unless told otherwise.
inline constexpr size_t kMaxInputFileBytes = size_t{64} << 20;
/// The one reader of whole input files (run files, configs, fixtures, caches, what other programs wrote): a symlink
/// is resolved first, and only a regular file is read; a FIFO, a device, a socket or a directory is refused at once
/// naming what it is ("/dev/zero: a character device, not a regular file"), as is a file larger than `max_bytes`
/// (checked before reading and while reading, for a file that grows). `invalid_argument` names the file.
StatusOr<std::string> readTextFile(const std::string& path, size_t max_bytes = kMaxInputFileBytes);
/// Writes a file so that a reader never sees it half written and nothing outside it is touched: the text goes into a
/// new temporary in the target's directory (created O_CREAT | O_EXCL | O_NOFOLLOW, so no symlink is followed), which
/// is then renamed over `path` (a symlink at `path` is replaced, not followed). Missing parent directories are created.
/// A FIFO or character device at `path` (/dev/null, /dev/stdout) is written in place. `invalid_argument`:
/// "cannot write PATH: <reason>".
Status writeTextFile(const std::string& path, const std::string& text);
/// The last `lines` lines of a text file ("" when unreadable).
std::string tailOfFile(const std::string& path, int lines);
/// Path of the running executable, "" when unknown.
std::string selfExecutable();
/// Directory of the running executable (readlink /proc/self/exe), "" when unknown.
std::string selfExecutableDir();
/// `name` itself when it holds a '/' and is executable, else the first executable `name` in PATH; "" when none.
std::string findInPath(const std::string& name);

}  // namespace peerlab
