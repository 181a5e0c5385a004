#pragma once
/// Temporary directories and whole files for tests.

#include <string>

#include "reference/core/files.h"

namespace peerlab::testing {

/// A fresh private directory (mkdtemp under $TMPDIR or /tmp), removed with everything in it at the end of the scope.
/// Creating it fails the test (ADD_FAILURE) when it cannot be made; path() is then "".
class TempDir : public ::peerlab::TempDir {
 public:
  explicit TempDir(const std::string& prefix = "peerlab-test");
};

/// The whole file, "" when it cannot be read (a test compares it with what it expects).
std::string readFile(const std::string& path);
/// Writes (truncates) a file; a file that cannot be written fails the test (ADD_FAILURE) and returns false.
bool writeFile(const std::string& path, const std::string& text);

}  // namespace peerlab::testing
