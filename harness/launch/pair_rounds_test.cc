// Pair rounds: the text a pair suite's process reads its rounds from, and two ranks of a larger job as a job of two,
// with two pairs talking at the same time (4 local ranks).

#include "harness/launch/pair_rounds.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "reference/testing/rank_test.h"
#include "reference/testing/testing.h"

namespace peerlab::launch {
namespace {

TEST(PairRounds, FormatAndParseAgree) {
  const PairRoundList rounds = {{{0, 1}, {2, 3}}, {{1, 0}, {3, 2}}, {{5, 4}}};
  const std::string text = formatPairRounds(rounds);
  EXPECT_EQ(text, "0-1,2-3;1-0,3-2;5-4");
  PEERLAB_ASSERT_OK_AND_ASSIGN(PairRoundList back, parsePairRounds(text));
  EXPECT_EQ(back, rounds);
}

TEST(PairRounds, BadTextIsRefusedNamingTheEntry) {
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& c : std::vector<Case>{{"", "no pair rounds"},
                                         {"0-1,1-2", "GPU 1 in two pairs"},
                                         {"0-1;0-1", "0-1 is in two rounds"},
                                         {"2-2", "pairs a GPU with itself"},
                                         {"0-x", "\"0-x\" is not SRC-DST"},
                                         {"0-1;", "\"\" is not SRC-DST"},
                                         {"0-99999", "is not SRC-DST"},
                                         {"-1-2", "is not SRC-DST"}}) {
    auto r = parsePairRounds(c.text);
    ASSERT_FALSE(r.isOk()) << c.text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.says), std::string::npos) << c.text << ": " << r.status().message();
  }
}

// Ranks 0-1 and 2-3 each form a pair and run the pair's collectives and messages at the same time; each pair sees
// only its own partner's data.
TEST(PairBootstrap, TwoPairsTalkAtOnce) {
  PEERLAB_TEST_RANKS(4, boot);
  const int me = boot.rank();
  const int first = me < 2 ? 0 : 2;
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto pair, PairBootstrap::create(boot, first, first + 1));
  EXPECT_EQ(pair->size(), 2);
  EXPECT_EQ(pair->rank(), me - first);
  for (int round = 0; round < 20; ++round) {
    const int32_t mine = me * 1000 + round;
    int32_t both[2] = {-1, -1};
    PEERLAB_ASSERT_OK(pair->allgather(&mine, both, sizeof(mine), Deadline::afterMs(30'000)));
    EXPECT_EQ(both[0], first * 1000 + round);
    EXPECT_EQ(both[1], (first + 1) * 1000 + round);
    PEERLAB_ASSERT_OK(pair->barrier(Deadline::afterMs(30'000)));
    std::vector<char> msg(1 + round * 997, static_cast<char>(me));
    std::vector<char> got(msg.size());
    if (pair->rank() == 0) {
      PEERLAB_ASSERT_OK(pair->send(1, msg.data(), msg.size(), Deadline::afterMs(30'000)));
      PEERLAB_ASSERT_OK(pair->recv(1, got.data(), got.size(), Deadline::afterMs(30'000)));
    } else {
      PEERLAB_ASSERT_OK(pair->recv(0, got.data(), got.size(), Deadline::afterMs(30'000)));
      PEERLAB_ASSERT_OK(pair->send(0, msg.data(), msg.size(), Deadline::afterMs(30'000)));
    }
    EXPECT_EQ(got, std::vector<char>(msg.size(), static_cast<char>(me ^ 1)));
  }
  // The job's own collectives still line up after the pairs' traffic.
  int32_t mine = me, all[4] = {};
  PEERLAB_ASSERT_OK(boot.allgather(&mine, all, sizeof(mine), Deadline::afterMs(30'000)));
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(all[r], r);
}

TEST(PairBootstrap, RefusesRanksOutsideThePair) {
  PEERLAB_TEST_RANKS(4, boot);
  auto outside = PairBootstrap::create(boot, boot.rank() == 0 ? 1 : 0, 3 - (boot.rank() == 3));
  if (boot.rank() == 0 || boot.rank() == 3) {
    // Rank 0 asks for 1-3, rank 3 for 0-2: neither is in its pair.
    ASSERT_FALSE(outside.isOk());
    EXPECT_NE(outside.status().message().find("is not in the pair"), std::string::npos);
  }
  EXPECT_FALSE(PairBootstrap::create(boot, 1, 1).isOk());
  EXPECT_FALSE(PairBootstrap::create(boot, 0, 4).isOk());
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto pair, PairBootstrap::create(boot, boot.rank(), (boot.rank() + 1) % 4));
  EXPECT_EQ(pair->rank(), 0);
  int bad = 0;
  EXPECT_FALSE(pair->send(2, &bad, sizeof(bad), Deadline::afterMs(1000)).isOk());
}

}  // namespace
}  // namespace peerlab::launch
