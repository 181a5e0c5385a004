#pragma once
/// Scope guards for tests: run a function on every exit path (ASSERT returns included), set an environment variable
/// for a scope.

#include <optional>
#include <string>
#include <utility>

namespace peerlab::testing {

/// Runs `fn` when it goes out of scope: `Finally release([&] { ... });`.
template <class F>
class Finally {
 public:
  explicit Finally(F fn) : fn_(std::move(fn)) {}
  ~Finally() { fn_(); }
  Finally(const Finally&) = delete;
  Finally& operator=(const Finally&) = delete;

 private:
  F fn_;
};

/// Sets (or, with nullptr, removes) an environment variable for the scope, restoring the previous value.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace peerlab::testing
