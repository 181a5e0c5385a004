#include "harness/layout/layout.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "reference/testing/temp_dir.h"

namespace peerlab::layout {
namespace {

namespace fs = std::filesystem;

void touch(const std::string& path, bool executable) {
  fs::create_directories(fs::path(path).parent_path());
  ASSERT_TRUE(testing::writeFile(path, "x"));
  ::chmod(path.c_str(), executable ? 0755 : 0644);
}

TEST(Layout, InstalledTreeFindsEverythingRelativeToBin) {
  testing::TempDir tmp("layout");
  const std::string prefix = fs::canonical(tmp.path()).string() + "/opt/peerlab";
  touch(prefix + "/bin/peerlab", true);
  touch(prefix + "/libexec/peerlab/zcopy_bench", true);
  touch(prefix + "/libexec/peerlab/not_executable", false);
  touch(prefix + "/lib/libpeerlab_faults.so", false);
  touch(prefix + "/share/peerlab/chart.min.js", false);
  const std::string exe = prefix + "/bin/peerlab";

  const auto dirs = executableDirs(exe);
  ASSERT_EQ(dirs.size(), 2u);
  EXPECT_EQ(dirs[0], prefix + "/libexec/peerlab");
  EXPECT_EQ(dirs[1], prefix + "/bin");
  EXPECT_EQ(findExecutable("zcopy_bench", dirs), prefix + "/libexec/peerlab/zcopy_bench");
  EXPECT_EQ(findExecutable("not_executable", dirs), "");  // present but not executable
  EXPECT_EQ(findExecutable("host_copy_bench", dirs), "");
  EXPECT_EQ(findFile("libpeerlab_faults.so", libraryDirs(exe)), prefix + "/lib/libpeerlab_faults.so");
  EXPECT_EQ(findFile("chart.min.js", dataDirs(exe)), prefix + "/share/peerlab/chart.min.js");
  // A helper in libexec finds the peerlab binary in bin/.
  EXPECT_EQ(peerlabBinary(prefix + "/libexec/peerlab/zcopy_bench"), prefix + "/bin/peerlab");
  // Not a build tree: the command names the target and leaves the directory to the reader.
  EXPECT_EQ(buildTree(exe), "");
  EXPECT_EQ(buildCommand(exe), "cmake --build <build dir> --target peerlab_qualify");

  // Moved elsewhere, the same files are found at the new place.
  const std::string moved = fs::canonical(tmp.path()).string() + "/elsewhere";
  fs::rename(prefix, moved);
  EXPECT_EQ(findExecutable("zcopy_bench", executableDirs(moved + "/bin/peerlab")),
            moved + "/libexec/peerlab/zcopy_bench");
}

TEST(Layout, BuildTreeKeepsHelpersBesidePeerlab) {
  testing::TempDir tmp("layout");
  const std::string build = fs::canonical(tmp.path()).string() + "/build";
  touch(build + "/CMakeCache.txt", false);
  touch(build + "/bin/peerlab", true);
  touch(build + "/bin/zcopy_bench", true);
  touch(build + "/lib/libpeerlab_faults.so", false);
  const std::string exe = build + "/bin/peerlab";
  EXPECT_EQ(findExecutable("zcopy_bench", executableDirs(exe)), build + "/bin/zcopy_bench");
  EXPECT_EQ(findFile("libpeerlab_faults.so", libraryDirs(exe)), build + "/lib/libpeerlab_faults.so");
  EXPECT_EQ(peerlabBinary(build + "/bin/zcopy_bench"), build + "/bin/peerlab");
  EXPECT_EQ(buildTree(exe), build);
  EXPECT_EQ(buildCommand(exe), "cmake --build " + build + " --target peerlab_qualify");
}

TEST(Layout, SymlinkToPeerlabFindsTheTreeItPointsInto) {
  testing::TempDir tmp("layout");
  const std::string root = fs::canonical(tmp.path()).string();
  touch(root + "/p/bin/peerlab", true);
  touch(root + "/p/libexec/peerlab/alltoallv_bench", true);
  fs::create_directories(root + "/usr/bin");
  fs::create_symlink(root + "/p/bin/peerlab", root + "/usr/bin/peerlab");
  EXPECT_EQ(findExecutable("alltoallv_bench", executableDirs(root + "/usr/bin/peerlab")),
            root + "/p/libexec/peerlab/alltoallv_bench");
}

TEST(Layout, ThisProcessIsInTheBuildTree) {
  // The test binary runs from <build>/bin: its directory is searched and the build tree is named.
  const auto dirs = executableDirs();
  ASSERT_FALSE(dirs.empty());
  EXPECT_EQ(fs::path(dirs.back()).filename(), "bin");
  EXPECT_TRUE(fs::exists(buildTree() + "/CMakeCache.txt")) << buildTree();
}

}  // namespace
}  // namespace peerlab::layout
