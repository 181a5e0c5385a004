// The one level parser and its conflict rules, as every command and run-file reader applies them.
#include "harness/report/level.h"

#include <gtest/gtest.h>

namespace peerlab::report {
namespace {

TEST(Level, NamesReadBackAndNothingElseReads) {
  for (Level l : {Level::kQuick, Level::kStandard, Level::kFull})
    EXPECT_EQ(parseLevel(levelName(l)), l);
  for (const char* bad : {"", "Quick", "FULL", "medium", "quick "})
    EXPECT_FALSE(parseLevel(bad).has_value()) << bad;
}

TEST(Level, FlagsChooseOneLevel) {
  EXPECT_EQ(*chooseLevel({}), Level::kStandard);
  EXPECT_EQ(*chooseLevel({}, Level::kQuick), Level::kQuick);
  EXPECT_EQ(*chooseLevel({"full", false, false}), Level::kFull);
  EXPECT_EQ(*chooseLevel({"", true, false}), Level::kQuick);
  EXPECT_EQ(*chooseLevel({"", false, true}), Level::kFull);
  // The same level twice agrees.
  EXPECT_EQ(*chooseLevel({"quick", true, false}), Level::kQuick);
  EXPECT_EQ(*chooseLevel({"full", false, true}), Level::kFull);
}

TEST(Level, ConflictingOrUnknownFlagsAreRefusedNamingThem) {
  auto a = chooseLevel({"", true, true});
  ASSERT_FALSE(a.isOk());
  EXPECT_EQ(a.status().message(), "--quick and --full name different levels");
  auto b = chooseLevel({"standard", false, true});
  ASSERT_FALSE(b.isOk());
  EXPECT_EQ(b.status().message(), "--level standard and --full name different levels");
  auto c = chooseLevel({"fast", false, false});
  ASSERT_FALSE(c.isOk());
  EXPECT_EQ(c.status().message(), "--level fast: unknown level (known: quick, standard, full)");
}

// Plans written before levels said "mode": quick was the default sweep (today's standard).
TEST(Level, RecordsOfEveryVersionRead) {
  EXPECT_EQ(*levelOfRecord(std::string("quick"), std::nullopt), Level::kQuick);
  EXPECT_EQ(*levelOfRecord(std::nullopt, std::string("quick")), Level::kStandard);
  EXPECT_EQ(*levelOfRecord(std::nullopt, std::string("full")), Level::kFull);
  EXPECT_EQ(*levelOfRecord(std::nullopt, std::nullopt), Level::kStandard);
  EXPECT_EQ(*levelOfRecord(std::string("full"), std::string("quick")), Level::kFull);
  EXPECT_FALSE(levelOfRecord(std::string("medium"), std::nullopt).isOk());
  EXPECT_FALSE(levelOfRecord(std::nullopt, std::string("standard")).isOk());
}

}  // namespace
}  // namespace peerlab::report
