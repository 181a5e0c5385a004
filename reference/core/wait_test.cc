#include "reference/core/wait.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <utility>

namespace peerlab {
namespace {

using namespace std::chrono;

// Records where and when it was destroyed.
struct Probe {
  std::atomic<bool> destroyed{false};
  std::thread::id by;
};

struct Owner {
  explicit Owner(std::shared_ptr<Probe> p) : probe(std::move(p)) {}
  Owner(const Owner&) = delete;
  Owner& operator=(const Owner&) = delete;
  std::shared_ptr<Probe> probe;
  ~Owner() {
    probe->by = std::this_thread::get_id();
    probe->destroyed.store(true);
  }
};

bool waitFor(const std::atomic<bool>& flag, milliseconds limit) {
  const auto end = steady_clock::now() + limit;
  while (!flag.load()) {
    if (steady_clock::now() > end) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

TEST(ReleaseWhenIdle, ReleasesOnItsOwnThreadWhenThereIsNothingToWaitFor) {
  auto probe = std::make_shared<Probe>();
  releaseWhenIdle(std::make_shared<Owner>(probe), {}, 0);
  ASSERT_TRUE(waitFor(probe->destroyed, seconds(5)));
  EXPECT_NE(probe->by, std::this_thread::get_id());
  // Taken off the list before it is destroyed.
  EXPECT_EQ(heldForRelease(), 0u);
}

TEST(ReleaseWhenIdle, KeepsAnOwnerTheCallerStillSharesAlive) {
  auto probe = std::make_shared<Probe>();
  auto owner = std::make_shared<Owner>(probe);
  releaseWhenIdle(owner, {}, 0);
  const auto end = steady_clock::now() + seconds(5);
  while (heldForRelease() != 0 && steady_clock::now() < end)
    std::this_thread::sleep_for(milliseconds(1));
  EXPECT_EQ(heldForRelease(), 0u);
  EXPECT_FALSE(probe->destroyed.load());  // released its reference; the caller's keeps it
  owner.reset();
  EXPECT_TRUE(probe->destroyed.load());
  EXPECT_EQ(probe->by, std::this_thread::get_id());
}

TEST(ReleaseWhenIdle, IgnoresAnEmptyOwner) {
  releaseWhenIdle(nullptr, {}, 0);
  EXPECT_EQ(heldForRelease(), 0u);
}

TEST(ReleaseWhenIdle, StartsAgainAfterItsThreadEnded) {
  for (int round = 0; round < 3; ++round) {
    auto probe = std::make_shared<Probe>();
    releaseWhenIdle(std::make_shared<Owner>(probe), {}, 0);
    ASSERT_TRUE(waitFor(probe->destroyed, seconds(5))) << "round " << round;
    std::this_thread::sleep_for(milliseconds(20));  // the thread ends once its list is empty
  }
}

}  // namespace
}  // namespace peerlab
