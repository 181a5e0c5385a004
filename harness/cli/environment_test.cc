// The environment variables peerlab reads are few, and each is in the README's table: nothing between peerlab's own
// programs travels by environment (a benchmark is handed its plan as a file), and a setting a user can give is an
// option, a knob or one of these.

#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "reference/testing/temp_dir.h"
#include "reference/testing/testing.h"

namespace peerlab {
namespace {

namespace fs = std::filesystem;

// Every "PEERLAB_*" string literal of the non-test C++ sources, except names read from the plans of run files of
// earlier versions (what a recorded process ran with: legacyEnv(...), never the environment).
std::set<std::string> variablesRead() {
  const std::regex literal("\"(PEERLAB_[A-Z0-9_]+)\"");
  std::set<std::string> out;
  for (const char* dir : {"harness", "reference", "bench"}) {
    for (const auto& e : fs::recursive_directory_iterator(testing::sourcePath(dir))) {
      const std::string path = e.path().string();
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".cc" && ext != ".h" && ext != ".cu" && ext != ".cuh")) continue;
      if (path.find("_test.") != std::string::npos || path.find("/testing/") != std::string::npos ||
          path.find("/fuzz/") != std::string::npos || path.find("standin") != std::string::npos) {
        continue;
      }
      std::istringstream lines(testing::readFile(path));
      for (std::string line; std::getline(lines, line);) {
        if (line.find("legacyEnv(") != std::string::npos) continue;
        for (auto it = std::sregex_iterator(line.begin(), line.end(), literal); it != std::sregex_iterator(); ++it)
          out.insert((*it)[1]);
      }
    }
  }
  return out;
}

TEST(Environment, FewVariablesEachInTheReadmeTable) {
  const std::set<std::string> read = variablesRead();
  EXPECT_GE(read.size(), 10u);  // the scan finds them
  EXPECT_LE(read.size(), 30u);
  const std::string readme = testing::readFile(testing::sourcePath("README.md"));
  const size_t start = readme.find("\n## Environment\n");
  ASSERT_NE(start, std::string::npos) << "README.md has no Environment section";
  const std::string section = readme.substr(start, readme.find("\n## ", start + 1) - start);
  for (const std::string& name : read)
    EXPECT_NE(section.find("`" + name + "`"), std::string::npos) << name << " is read but not in README's table";
  // What used to go from qualify to the benchmarks by environment is the plan's now.
  for (const char* gone : {"PEERLAB_PAIR_ROUNDS", "PEERLAB_HOST_COPY_SETS", "PEERLAB_CHASE_SM_LOADS",
                           "PEERLAB_TRANSPORT_LIBRARY", "PEERLAB_ZCOPY_DEVICES", "PEERLAB_BIN"})
    EXPECT_FALSE(read.count(gone)) << gone;
}

}  // namespace
}  // namespace peerlab
