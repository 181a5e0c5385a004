#pragma once
/// Small file utilities: whole text files, the tail of a log, the running executable, a program in PATH.

#include <string>

#include "reference/core/status.h"

namespace peerlab {

/// Whole file as a string; `invalid_argument` names the file when it cannot be read.
StatusOr<std::string> readTextFile(const std::string& path);
/// Writes a file (truncating); `invalid_argument` names the file when it cannot be written.
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
