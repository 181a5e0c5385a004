#include "reference/testing/temp_dir.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "reference/core/files.h"
#include "reference/testing/guards.h"

namespace peerlab::testing {

TempDir::TempDir(const std::string& prefix) {
  auto dir = ::peerlab::TempDir::make(prefix);
  if (dir.isOk()) {
    ::peerlab::TempDir::operator=(std::move(*dir));
  } else {
    ADD_FAILURE() << "temporary directory: " << dir.status().toString();
  }
}

std::string readFile(const std::string& path) {
  auto text = readTextFile(path);
  return text.isOk() ? *text : std::string();
}

bool writeFile(const std::string& path, const std::string& text) {
  Status st = writeTextFile(path, text);
  if (!st.isOk()) ADD_FAILURE() << st.toString();
  return st.isOk();
}

ScopedEnv::ScopedEnv(const char* name, const char* value) : name_(name) {
  if (const char* old = std::getenv(name)) old_ = old;
  if (value != nullptr) {
    ::setenv(name, value, 1);
  } else {
    ::unsetenv(name);
  }
}

ScopedEnv::~ScopedEnv() {
  if (old_) {
    ::setenv(name_.c_str(), old_->c_str(), 1);
  } else {
    ::unsetenv(name_.c_str());
  }
}

}  // namespace peerlab::testing
