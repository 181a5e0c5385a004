#include "reference/testing/testing.h"

namespace peerlab::testing {

std::string sourcePath(const std::string& relative) {
  const char* root = std::getenv("PEERLAB_SOURCE_DIR");
  std::string base = root && *root ? root : PEERLAB_SOURCE_ROOT;
  return base + "/" + relative;
}

int iterations(int n) {
  const char* cap = std::getenv("PEERLAB_TEST_MAX_ITERATIONS");
  if (cap == nullptr || *cap == '\0') return n;
  char* end = nullptr;
  const long v = std::strtol(cap, &end, 10);
  if (end == nullptr || *end != '\0' || v <= 0) return n;
  return v < n ? static_cast<int>(v) : n;
}

std::string underSanitizer() {
  const char* tool = std::getenv("PEERLAB_UNDER_SANITIZER");
  return tool != nullptr ? tool : "";
}

}  // namespace peerlab::testing
