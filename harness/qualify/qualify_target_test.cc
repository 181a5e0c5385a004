// The peerlab_qualify target builds everything qualify and bench can start: CMake writes the file names of the
// target's components (top-level CMakeLists.txt), and every executable the planner can name must be among them.
#include <gtest/gtest.h>

#include <set>
#include <sstream>

#include "harness/qualify/suites.h"
#include "reference/testing/temp_dir.h"

namespace peerlab::qualify {
namespace {

std::set<std::string> targetFiles() {
  std::set<std::string> out;
  std::istringstream in(testing::readFile(PEERLAB_QUALIFY_FILES));
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.insert(line);
  }
  return out;
}

TEST(QualifyTarget, BuildsEveryExecutableThePlannerCanName) {
  const std::set<std::string> files = targetFiles();
  ASSERT_FALSE(files.empty()) << PEERLAB_QUALIFY_FILES << " is missing or empty";
  const std::vector<std::string> planned = plannedExecutables();
  ASSERT_GE(planned.size(), 6u);  // peerlab and the five suites' binaries at least
  for (const std::string& exe : planned) {
    EXPECT_TRUE(files.count(exe))
        << exe << " can be planned (harness/qualify/suites.cc) but the peerlab_qualify target does not build it: "
        << "give its peerlab_add_bench call in bench/CMakeLists.txt the QUALIFY keyword (or call "
           "peerlab_qualify_component for it)";
  }
  // The fault interposer `peerlab inject` preloads is part of the tool too.
  EXPECT_TRUE(files.count("libpeerlab_faults.so"));
}

TEST(QualifyTarget, EverySuiteBinaryIsPlanned) {
  // plannedExecutables() is what the test above checks: it must cover every suite's binary and peerlab itself.
  const std::vector<std::string> planned = plannedExecutables();
  const std::set<std::string> set(planned.begin(), planned.end());
  EXPECT_TRUE(set.count("peerlab"));
  for (const auto& s : suites())
    EXPECT_TRUE(set.count(s->info().binary)) << s->name();
  EXPECT_EQ(set.size(), planned.size()) << "duplicates";
}

}  // namespace
}  // namespace peerlab::qualify
