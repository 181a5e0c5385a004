#pragma once
/// What peerlab's GoogleTest suites share (tests only; the libraries never include this): status
/// assertions, GPU requirements, source paths. Scope guards, temporary directories and files, and multi-rank tests are
/// in guards.h, temp_dir.h and rank_test.h beside this file.

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "reference/core/devices.h"
#include "reference/core/status.h"

namespace peerlab::testing {

/// Path of a file in the source tree (PEERLAB_SOURCE_DIR is set by ctest; falls back to the compile-time root).
std::string sourcePath(const std::string& relative);

/// Iterations of a repeated test: `n`, or PEERLAB_TEST_MAX_ITERATIONS when that is set and smaller. ci/sanitize.sh
/// sets it: under compute-sanitizer every kernel runs tens of times slower, and the sanitizer looks at each code path,
/// which a few iterations already take. A value that is not a positive number is ignored.
int iterations(int n);

/// The compute-sanitizer tool this process runs under (PEERLAB_UNDER_SANITIZER, set by ci/sanitize.sh for every job),
/// or "" at full speed. The sanitizer loads the CUDA driver into every process it follows, so checks that a process
/// never touched CUDA do not hold under it.
std::string underSanitizer();

}  // namespace peerlab::testing

#define PEERLAB_ASSERT_OK(expr)                                \
  do {                                                         \
    ::peerlab::Status peerlab_st_ = (expr);                    \
    ASSERT_TRUE(peerlab_st_.isOk()) << peerlab_st_.toString(); \
  } while (0)
#define PEERLAB_EXPECT_OK(expr)                                \
  do {                                                         \
    ::peerlab::Status peerlab_st_ = (expr);                    \
    EXPECT_TRUE(peerlab_st_.isOk()) << peerlab_st_.toString(); \
  } while (0)

/// `PEERLAB_ASSERT_OK_AND_ASSIGN(auto x, makeX());`
#define PEERLAB_ASSERT_OK_AND_ASSIGN(lhs, expr)                      \
  auto PEERLAB_CONCAT(peerlab_sor_, __LINE__) = (expr);              \
  ASSERT_TRUE(PEERLAB_CONCAT(peerlab_sor_, __LINE__).isOk())         \
      << PEERLAB_CONCAT(peerlab_sor_, __LINE__).status().toString(); \
  lhs = std::move(PEERLAB_CONCAT(peerlab_sor_, __LINE__)).value()

/// Skips the test (with the reason) unless at least `n` CUDA devices are visible.
#define PEERLAB_REQUIRE_GPUS(n)                                                                               \
  do {                                                                                                        \
    auto peerlab_count_ = ::peerlab::deviceCount();                                                           \
    if (!peerlab_count_.isOk()) GTEST_SKIP() << "no GPU: " << peerlab_count_.status().toString();             \
    if (*peerlab_count_ < (n)) GTEST_SKIP() << "needs " << (n) << " GPUs, " << *peerlab_count_ << " visible"; \
  } while (0)

/// Turns an `unavailable` status into a skip with its reason; any other error fails the test.
#define PEERLAB_SKIP_IF_UNAVAILABLE(expr)                                                                  \
  do {                                                                                                     \
    ::peerlab::Status peerlab_st_ = (expr);                                                                \
    if (peerlab_st_.code() == ::peerlab::StatusCode::kUnavailable) GTEST_SKIP() << peerlab_st_.toString(); \
    ASSERT_TRUE(peerlab_st_.isOk()) << peerlab_st_.toString();                                             \
  } while (0)
