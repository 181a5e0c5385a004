// Output files are written through a temporary in the target's directory, renamed into place: no symlink is followed
// (at the target or at a temporary's name), missing parents are created, failures name the file and the reason.
// Text from files is printed through one helper that escapes control characters; URL passwords are redacted.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "reference/core/files.h"
#include "reference/core/text.h"

namespace peerlab {
namespace {

namespace fs = std::filesystem;

std::string slurp(const std::string& path) {
  auto t = readTextFile(path);
  return t.isOk() ? *t : "<unreadable>";
}

class WriteTextFile : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = TempDir::make("peerlab-files-test");
    ASSERT_TRUE(dir.isOk()) << dir.status().toString();
    dir_ = std::move(*dir);
  }
  TempDir dir_;
};

TEST_F(WriteTextFile, WritesAndReplacesWithoutLeavingTemporaries) {
  const std::string path = dir_.file("out.json");
  ASSERT_TRUE(writeTextFile(path, "first").isOk());
  ASSERT_TRUE(writeTextFile(path, "second").isOk());
  EXPECT_EQ(slurp(path), "second");
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir_.path())) {
    ++entries;
    EXPECT_EQ(e.path().filename(), "out.json");
  }
  EXPECT_EQ(entries, 1);
}

TEST_F(WriteTextFile, SymlinkAtTheTargetIsReplacedNotFollowed) {
  const std::string outside = dir_.file("outside.txt");
  ASSERT_TRUE(writeTextFile(outside, "keep").isOk());
  const std::string path = dir_.file("index.html");
  fs::create_symlink(outside, path);
  ASSERT_TRUE(writeTextFile(path, "page").isOk());
  EXPECT_EQ(slurp(outside), "keep");
  EXPECT_FALSE(fs::is_symlink(path));
  EXPECT_EQ(slurp(path), "page");
}

TEST_F(WriteTextFile, SymlinkAtAnOldTemporaryNameIsNotFollowed) {
  const std::string outside = dir_.file("outside.txt");
  ASSERT_TRUE(writeTextFile(outside, "keep").isOk());
  fs::create_symlink(outside, dir_.file("index.html.tmp"));
  fs::create_symlink(outside, dir_.file(".index.html.tmp"));
  ASSERT_TRUE(writeTextFile(dir_.file("index.html"), "page").isOk());
  EXPECT_EQ(slurp(outside), "keep");
  EXPECT_EQ(slurp(dir_.file("index.html")), "page");
}

TEST_F(WriteTextFile, MissingParentsAreCreated) {
  const std::string path = dir_.file("a/b/c/out.txt");
  ASSERT_TRUE(writeTextFile(path, "x").isOk());
  EXPECT_EQ(slurp(path), "x");
}

TEST_F(WriteTextFile, FailuresNameTheFileAndTheReason) {
  fs::create_directories(dir_.file("adir"));
  Status st = writeTextFile(dir_.file("adir"), "x");
  EXPECT_FALSE(st.isOk());
  EXPECT_EQ(st.message(), "cannot write " + dir_.file("adir") + ": is a directory");
  std::ofstream(dir_.file("plain")) << "file";
  st = writeTextFile(dir_.file("plain/below.txt"), "x");
  EXPECT_FALSE(st.isOk());
  EXPECT_EQ(st.message().rfind("cannot write " + dir_.file("plain/below.txt") + ": ", 0), 0u) << st.message();
  EXPECT_EQ(slurp(dir_.file("plain")), "file");
  // A directory without write permission (root writes anyway: then /sys, which refuses everyone).
  std::string ro = dir_.file("ro");
  fs::create_directories(ro);
  ::chmod(ro.c_str(), 0555);
  int fd = ::open((ro + "/t").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd >= 0) {
    ::close(fd);
    ::unlink((ro + "/t").c_str());
    ro = "/sys";
    fd = ::open((ro + "/peerlab-t").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  }
  if (fd >= 0) {
    ::close(fd);
    GTEST_SKIP() << "no directory refuses new files here";
  }
  const std::string reason = std::strerror(errno);
  st = writeTextFile(ro + "/out.json", "x");
  EXPECT_EQ(st.message(), "cannot write " + ro + "/out.json: " + reason);
  ::chmod(dir_.file("ro").c_str(), 0755);
}

TEST_F(WriteTextFile, DevicesAreWrittenInPlace) {
  EXPECT_TRUE(writeTextFile("/dev/null", "discarded").isOk());
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
}

TEST(Printable, EscapesWhatATerminalWouldObey) {
  EXPECT_EQ(printable("a\x1b[2Jb"), "a\\x1b[2Jb");
  EXPECT_EQ(printable("bell\x07 del\x7f"), "bell\\x07 del\\x7f");
  EXPECT_EQ(printable("csi \xc2\x9b"
                      "31m"),
            "csi \\u009b31m");
  EXPECT_EQ(printable("lone \x9b byte"), "lone \\x9b byte");
  EXPECT_EQ(printable("ok: \xc3\xbc \xe2\x82\xac \xf0\x9f\x98\x80"), "ok: \xc3\xbc \xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(printable("line\nnext", 4), "line...");
}

TEST(RedactSecrets, PasswordsNeverShow) {
  EXPECT_EQ(redactSecrets("--db postgresql://peerlab:s3cret@db:5432/h: refused"),
            "--db postgresql://peerlab:***@db:5432/h: refused");
  EXPECT_EQ(redactSecrets("postgres://u:p%40ss@h/d?sslmode=require"), "postgres://u:***@h/d?sslmode=require");
  EXPECT_EQ(redactSecrets("postgresql://h/d?user=u&password=s3cret&x=1"), "postgresql://h/d?user=u&password=***&x=1");
  EXPECT_EQ(redactSecrets("host=h password='a b' dbname=d"), "host=h password=*** dbname=d");
  EXPECT_EQ(redactSecrets("postgresql://peerlab@db:5432/h"), "postgresql://peerlab@db:5432/h");
  EXPECT_EQ(redactSecrets("no url here"), "no url here");
}

}  // namespace
}  // namespace peerlab
