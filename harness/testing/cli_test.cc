// runCommand: exit codes, both output streams, the environment, a program that cannot start, the deadline.

#include "harness/testing/cli.h"

#include <gtest/gtest.h>

#include "reference/testing/testing.h"

namespace peerlab::testing {
namespace {

TEST(RunCommand, CapturesBothStreamsAndTheExitCode) {
  CliRun r = runCommand({"/bin/sh", "-c", "echo out-$0; echo err-line >&2; exit 5", "x"});
  EXPECT_EQ(r.exit_code, 5);
  EXPECT_EQ(r.out, "out-x\n");
  EXPECT_EQ(r.err, "err-line\n");
}

TEST(RunCommand, PassesTheEnvironmentChanges) {
  CliRun r = runCommand({"/bin/sh", "-c", "echo \"$PEERLAB_CLI_TEST_A/${HOME:-unset}\""},
                        {"PEERLAB_CLI_TEST_A=alpha", "HOME"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "alpha/unset\n");
}

TEST(RunCommand, MissingProgramIsNamed) {
  CliRun r = runCommand({"/nonexistent/peerlab-no-such-program"});
  EXPECT_EQ(r.exit_code, -1);
  EXPECT_NE(r.err.find("peerlab-no-such-program"), std::string::npos) << r.err;
}

TEST(RunCommand, StopsAProgramAtTheDeadline) {
  CliRun r = runCommand({"/bin/sh", "-c", "sleep 30"}, {}, std::chrono::seconds(1));
  EXPECT_EQ(r.exit_code, -1);
  EXPECT_NE(r.err.find("deadline"), std::string::npos) << r.err;
}

TEST(LineCount, CountsAnUnterminatedLastLine) {
  EXPECT_EQ(lineCount(""), 0);
  EXPECT_EQ(lineCount("a\n"), 1);
  EXPECT_EQ(lineCount("a\nb"), 2);
}

}  // namespace
}  // namespace peerlab::testing
