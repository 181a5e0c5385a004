// Untrusted input at the command line and in the files commands read: an unknown command, probe method names from a
// user or a file, strings that would drive a terminal or a shell, injected probe faults, symlinks in an output
// directory. Each case asserts the exit code, the one line on stderr and that nothing was written or changed.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef PEERLAB_TEST_HAVE_ZLIB
#include <zlib.h>
#endif

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "harness/report/report.h"
#include "harness/testing/cli.h"
#include "harness/watchdog/probe_cache.h"
#include "reference/testing/testing.h"

namespace peerlab::testing {
namespace {

namespace fs = std::filesystem;

TEST(CliInput, UnknownCommandListsTheCommands) {
  CliRun r = runPeerlab({"bogus", "--json", "x"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_EQ(lineCount(r.err), 1) << r.err;
  EXPECT_EQ(r.err.rfind("peerlab usage: unknown command bogus (known: ", 0), 0u) << r.err;
  for (const char* name : {"history", "probe", "repro", "health", "report", "qualify"})
    EXPECT_NE(r.err.find(name), std::string::npos) << name;
  EXPECT_EQ(r.err.find("probe-worker"), std::string::npos) << "the hidden worker command is not listed: " << r.err;
  EXPECT_EQ(r.out, "");
  CliRun esc = runPeerlab({"bo\x1b[2Jgus"});
  EXPECT_EQ(esc.exit_code, 2);
  EXPECT_EQ(esc.err.find('\x1b'), std::string::npos) << esc.err;
}

// ci/qualify.sh checks its arguments against peerlab qualify's options before it installs or builds anything: the
// options it reads from the sources are the binary's own, every one (a drift refuses a real option, as --level once).
TEST(CliInput, QualifyScriptKnowsEveryOptionOfQualify) {
  auto options = [](const std::string& text, const std::regex& re) {
    std::set<std::string> out;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it)
      out.insert((*it)[1]);
    return out;
  };
  CliRun help = runPeerlab({"qualify", "--help"});
  ASSERT_EQ(help.exit_code, 0) << help.err;
  std::set<std::string> binary = options(help.out, std::regex(R"(\n +(?:-h,)?(--[a-z][a-z-]*))"));
  binary.erase("--help");
  CliRun script = runCommand({"bash", sourcePath("ci/qualify.sh"), "--help"});
  ASSERT_EQ(script.exit_code, 0) << script.err;
  const std::string marker = "peerlab qualify's options: ";
  const size_t at = script.out.find(marker);
  ASSERT_NE(at, std::string::npos) << script.out;
  const std::string list = script.out.substr(at + marker.size(), script.out.find('\n', at) - at - marker.size());
  const std::set<std::string> known = options(" " + list, std::regex(R"( (--[a-z][a-z-]*))"));
  ASSERT_GT(binary.size(), 10u) << help.out;
  EXPECT_EQ(known, binary) << "ci/qualify.sh --help: " << list;
  CliRun level = runCommand({"bash", sourcePath("ci/qualify.sh"), "--level", "quick", "--no-such-option"});
  EXPECT_EQ(level.exit_code, 2);
  EXPECT_NE(level.err.find("has no option --no-such-option"), std::string::npos) << level.err;
}

// A baseline's --fleet over every committed run: the runs of other kinds are one counted line, not one line each.
TEST(CliInput, BaselineFleetCountsOtherKindsOnOneLine) {
  const std::string dir = scratchDir("baseline-fleet");
  CliRun r = runPeerlab({"baseline", "make", "--from",
                         sourcePath("reports/qualify/2026-12-02-h200-x1-75de70d-standard/results.json.gz"), "--fleet",
                         sourcePath("reports/runs"), sourcePath("reports/qualify"), "--out", dir + "/b.json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("another kind"), std::string::npos) << r.err;
  const std::regex counted("peerlab baseline: --fleet: left out ([0-9]+) runs of other kinds\n");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m, counted)) << r.err;
  EXPECT_GT(std::stoi(m[1]), 10) << r.err;
  EXPECT_LE(lineCount(r.err), 5) << r.err;
}

// Option values get messages a person can read: no 309-digit bounds, whatever checks the value.
TEST(CliInput, OptionRangeMessagesAreReadable) {
  CliRun bench = runPeerlab({"bench", "--dry-run", "--timeout", "0"});
  EXPECT_EQ(bench.exit_code, 2) << bench.out << bench.err;
  EXPECT_NE(bench.err.find("--timeout \"0\": expected a number from 1 to 604800 seconds"), std::string::npos)
      << bench.err;
  for (const std::vector<std::string>& args : {std::vector<std::string>{"qualify", "--dry-run", "--timeout", "0"},
                                               std::vector<std::string>{"bench", "--timeout", "1e400"}}) {
    CliRun r = runPeerlab(args);
    EXPECT_EQ(r.exit_code, 2) << args[0] << ": " << r.out << r.err;
    EXPECT_EQ(lineCount(r.err), 1) << r.err;
    EXPECT_LT(r.err.size(), 200u) << r.err;
  }
}

// A probe run file with the given cells (method name, verdict) and anything else merged in.
report::Run probeRun(const std::vector<std::pair<std::string, std::string>>& cells) {
  auto run = report::readRun(sourcePath("reports/schema/sample-run.json"));
  EXPECT_TRUE(run.isOk()) << run.status().message();
  report::Run out = *run;
  out.results.clear();
  int k = 0;
  for (const auto& [method, verdict] : cells) {
    report::Result r;
    r.suite = "probe";
    r.impl = "peerlab.probe";
    r.name = method + "/4096";
    r.src = k % 2;
    r.dst = 1 - k % 2;
    r.bytes = 4096;
    r.status = verdict;
    r.extra = {{"method", method}, {"claimed", true}, {"lie", verdict != "ok"}, {"error", ""}};
    out.results.push_back(r);
    ++k;
  }
  return out;
}

class ReproInput : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = scratchDir("repro-input"); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(ReproInput, UnknownMethodsAreRefusedBeforeAnythingIsWritten) {
  CliRun r = runPeerlab({"repro", "--skip-probe", "--methods", "ce_write,bogus", "--out", dir_ + "/bundle"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_EQ(lineCount(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("--methods: unknown method \"bogus\" (known: ce_write, ce_read"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir_ + "/bundle"));
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"--pairs", "0-x"}, std::vector<std::string>{"--sizes", "4K,lots"},
        std::vector<std::string>{"--timeout", "soon"}}) {
    std::vector<std::string> args = {"repro", "--skip-probe", "--out", dir_ + "/bundle"};
    args.insert(args.end(), bad.begin(), bad.end());
    CliRun b = runPeerlab(args);
    EXPECT_EQ(b.exit_code, 2) << bad[0] << ": " << b.err;
    EXPECT_NE(b.err.find(bad[0] + ": "), std::string::npos) << b.err;
    EXPECT_FALSE(fs::exists(dir_ + "/bundle"));
  }
}

// A method name from a probe file would be pasted into a shell: it must be a known one.
TEST_F(ReproInput, MethodNamesFromAProbeFileAreChecked) {
  const std::string marker = dir_ + "/pwned";
  report::Run run = probeRun({{"ce_write", "ok"}, {"ce_write $(touch " + marker + ")", "corrupt"}});
  ASSERT_TRUE(report::writeRun(run, dir_ + "/probe.json").isOk());
  CliRun r = runPeerlab({"repro", "--probe-json", dir_ + "/probe.json", "--out", dir_ + "/bundle"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_EQ(lineCount(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("probe.json: $.results[1].method \"ce_write $(touch "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("is not a probe method (known: ce_write"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir_ + "/bundle"));
  EXPECT_FALSE(fs::exists(marker));
}

// Strings from the probe file reach the README and the terminal escaped; the bundle's files replace symlinks.
TEST_F(ReproInput, BundleTextIsQuotedEscapedAndWrittenSafely) {
  report::Run run = probeRun({{"ce_write", "corrupt"}});
  run.results[0].extra["error"] = "bad | cell \x1b[2J`rm -rf ~`";
  for (auto& g : run.fingerprint.gpus)
    g.name = "GPU | \x1b]0;title\x07";
  ASSERT_TRUE(report::writeRun(run, dir_ + "/probe.json").isOk());
  const std::string bundle = dir_ + "/bundle";
  fs::create_directories(bundle);
  std::ofstream(dir_ + "/outside.txt") << "keep";
  fs::create_symlink(dir_ + "/outside.txt", bundle + "/README.md");
  fs::create_symlink(dir_ + "/outside.txt", bundle + "/probe.json");
  // (The probe file names another host: the bundle holds its fingerprint and cells, no state of this machine.)
  CliRun r = runPeerlab(
      {"repro", "--probe-json", dir_ + "/probe.json", "--out", bundle, "--timeout", "5s", "--other-machine"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(readFile(dir_ + "/outside.txt"), "keep");
  EXPECT_FALSE(fs::is_symlink(bundle + "/README.md"));
  EXPECT_FALSE(fs::is_symlink(bundle + "/probe.json"));
  const std::string readme = readFile(bundle + "/README.md");
  EXPECT_EQ(readme.find('\x1b'), std::string::npos);
  EXPECT_EQ(readme.find('\x07'), std::string::npos);
  // The reader removes control characters from everything a run file says; the cell keeps the rest.
  EXPECT_NE(readme.find("bad \\| cell [2J'rm -rf ~'"), std::string::npos) << readme;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("reproduce with: peerlab probe --methods ce_write --pairs 0-1 --sizes 4096 --timeout 5s"),
            std::string::npos)
      << r.out;
}

// A probe that ran with injected faults or a stand-in worker is never presented as a driver fault.
TEST_F(ReproInput, InjectedFailuresAreNotDriverFaults) {
  report::Run run = probeRun({{"ce_write", "corrupt"}, {"sm_store", "ok"}});
  run.results[0].extra["injected"] = "corrupt";
  run.extra["injected"] = {{"probe_inject", "corrupt:ce_write:0:1"}, {"faults", 1}, {"worker", nullptr}};
  ASSERT_TRUE(report::writeRun(run, dir_ + "/probe.json").isOk());
  CliRun r = runPeerlab({"repro", "--probe-json", dir_ + "/probe.json", "--out", dir_ + "/bundle", "--other-machine"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("INJECTED: PEERLAB_PROBE_INJECT=corrupt:ce_write:0:1: 1 of 1 failing cells injected; not a "
                       "driver fault"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("reproduce with: PEERLAB_PROBE_INJECT=corrupt:ce_write:0:1 peerlab probe"), std::string::npos)
      << r.out;
  const std::string readme = readFile(dir_ + "/bundle/README.md");
  EXPECT_NE(readme.find("# peerlab fault-injection run (not a driver bug bundle)"), std::string::npos) << readme;
  EXPECT_NE(readme.find("they are not driver faults"), std::string::npos) << readme;
  EXPECT_NE(readme.find("| yes: corrupt |"), std::string::npos) << readme;
  EXPECT_EQ(readme.find("# peerlab bug bundle"), std::string::npos);
}

#ifdef PEERLAB_STANDIN_PATH
// `peerlab probe` under PEERLAB_PROBE_INJECT with the stand-in worker: the run file says so in its fingerprint and in
// the cell the fault hit, --json - puts only the run file on stdout, and the console says INJECTED.
TEST(ProbeInput, InjectedProbeIsMarkedAndJsonDashIsTheOnlyStdout) {
  const std::string dir = scratchDir("probe-input");
  const std::vector<std::string> env = {std::string("PEERLAB_PROBE_WORKER=") + PEERLAB_STANDIN_PATH,
                                        "PEERLAB_STANDIN_GPUS=2", "PEERLAB_PROBE_INJECT=corrupt:ce_write:0:1",
                                        "XDG_CACHE_HOME=" + dir};
  CliRun r = runPeerlab({"probe", "--no-cache", "--methods", "ce_write,sm_store", "--sizes", "4K", "--json", "-"}, env);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const nlohmann::json doc = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << "stdout is not one JSON document:\n" << r.out.substr(0, 400);
  ASSERT_TRUE(doc["fingerprint"].contains("injected")) << doc.dump().substr(0, 400);
  EXPECT_FALSE(doc.contains("injected")) << "one home: the fingerprint's";
  EXPECT_EQ(doc["fingerprint"]["injected"]["probe_inject"], "corrupt:ce_write:0:1");
  EXPECT_EQ(doc["fingerprint"]["injected"]["probe_worker"], PEERLAB_STANDIN_PATH);
  int marked = 0;
  for (const auto& res : doc["results"]) {
    if (!res.contains("injected")) continue;
    ++marked;
    EXPECT_EQ(res["injected"], "corrupt");
    EXPECT_EQ(res["name"], "ce_write/4096");
    EXPECT_EQ(res["src"], 0);
    EXPECT_EQ(res["dst"], 1);
  }
  EXPECT_EQ(marked, 1);
  EXPECT_NE(r.err.find("INJECTED: PEERLAB_PROBE_INJECT=corrupt:ce_write:0:1"), std::string::npos) << r.err;
  // Without injection the stand-in worker is still named: its verdicts are not this machine's. The run file's
  // missing parent directories are created, as for every output file.
  CliRun plain = runPeerlab({"probe", "--no-cache", "--sizes", "4K", "--json", dir + "/new/dir/p.json"},
                            {env[0], env[1], "XDG_CACHE_HOME=" + dir});
  EXPECT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_NE(plain.out.find("INJECTED: stand-in probe worker "), std::string::npos) << plain.out;
  auto file = report::readRun(dir + "/new/dir/p.json");
  ASSERT_TRUE(file.isOk()) << file.status().message();
  EXPECT_TRUE(file->fingerprint.injected.probe_inject.empty());
  EXPECT_EQ(file->fingerprint.injected.probe_worker, PEERLAB_STANDIN_PATH);
  fs::remove_all(dir);
}

// A cache planted by another user (its checksum recomputed over a forged verdict) is ignored with a line naming its
// owner, and the probe probes again: the forged "corrupt" cell is not reported. The cache lives in a 0700 directory.
TEST(ProbeInput, AnotherUsersCacheIsIgnoredWithALine) {
  if (::geteuid() != 0) GTEST_SKIP() << "another user's file needs root to make";
  const std::string dir = scratchDir("probe-foreign-cache");
  const std::vector<std::string> env = {std::string("PEERLAB_PROBE_WORKER=") + PEERLAB_STANDIN_PATH,
                                        "PEERLAB_STANDIN_GPUS=2", "XDG_CACHE_HOME=" + dir};
  const std::vector<std::string> args = {"probe", "--methods", "ce_write", "--sizes", "4K"};
  CliRun first = runPeerlab(args, env);
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  const std::string cache = dir + "/peerlab/probe.json";
  struct stat st {};
  ASSERT_EQ(::stat((dir + "/peerlab").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  auto entry = probe::decodeCache(readFile(cache));
  ASSERT_TRUE(entry.isOk()) << entry.status().message();
  for (probe::CellReport& c : entry->cells) {
    c.result.verdict = probe::Verdict::kCorrupt;
    c.result.wrong = 1;
  }
  ASSERT_TRUE(writeFile(cache, probe::encodeCache(*entry)));
  ASSERT_EQ(::chown(cache.c_str(), 65534, 65534), 0);
  CliRun again = runPeerlab(args, env);
  EXPECT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_NE(again.err.find(cache + ": owned by uid 65534, not by this user (uid 0); ignored; probing again"),
            std::string::npos)
      << again.err;
  EXPECT_EQ(again.out.find("cached:"), std::string::npos) << again.out;
  EXPECT_NE(again.out.find("2 ok, 0 corrupt"), std::string::npos) << again.out;
  fs::remove_all(dir);
}
#endif

// What a run of peerlab took: its exit code, wall time and peak resident memory (wait4's rusage, so the figure is the
// child's own, however the test itself grew).
struct Measured {
  int exit_code = -1;
  double wall_s = 0;
  long max_rss_kib = 0;
  std::string err;
};

Measured measure(const std::vector<std::string>& args, double deadline_s = 30) {
  Measured m;
  const std::string errPath = scratchDir("measure") + "/err";
  std::vector<std::string> argv = {PEERLAB_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(errPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
      ::dup2(fd, 2);
      ::dup2(fd, 1);
    }
    ::alarm(static_cast<unsigned>(deadline_s));  // a read that never ends is a failure, not a hang of the test
    std::vector<char*> cargv;
    for (std::string& a : argv)
      cargv.push_back(a.data());
    cargv.push_back(nullptr);
    ::execv(cargv[0], cargv.data());
    ::_exit(127);
  }
  int status = 0;
  struct rusage usage {};
  if (pid > 0 && ::wait4(pid, &status, 0, &usage) == pid) {
    m.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    m.max_rss_kib = usage.ru_maxrss;
  }
  m.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  m.err = readFile(errPath);
  return m;
}

#ifdef PEERLAB_TEST_HAVE_ZLIB
// A valid run file whose results are followed by `zeros` more JSON values ("0,0,0,..." in an unknown key), gzip'd as
// it is written (the text itself is never held): a small file that inflates to 2 x `zeros` bytes. `trailer_bytes`,
// when not 0, is written into the gzip trailer's length in place of the true one (a bomb that lies about its size).
std::string writeBomb(const std::string& path, size_t zeros, uint32_t trailer_bytes = 0) {
  auto run = report::readRun(sourcePath("reports/schema/sample-run.json"));
  EXPECT_TRUE(run.isOk()) << run.status().message();
  std::string head = report::toJson(*run).dump();
  head.pop_back();  // the closing brace
  head += ",\"padding\":[";
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 9, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out;
  auto feed = [&](const std::string& text, int flush) {
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
    z.avail_in = static_cast<uInt>(text.size());
    char buf[1 << 16];
    do {
      z.next_out = reinterpret_cast<Bytef*>(buf);
      z.avail_out = sizeof buf;
      deflate(&z, flush);
      out.append(buf, sizeof buf - z.avail_out);
    } while (z.avail_out == 0);
  };
  feed(head, Z_NO_FLUSH);
  std::string chunk;
  for (int i = 0; i < 1 << 19; ++i)
    chunk += "0,";
  for (size_t done = 0; done + (1 << 19) <= zeros; done += 1 << 19)
    feed(chunk, Z_NO_FLUSH);
  feed("0]}", Z_FINISH);
  deflateEnd(&z);
  if (trailer_bytes != 0) std::memcpy(out.data() + out.size() - 4, &trailer_bytes, 4);
  EXPECT_TRUE(writeFile(path, out));
  return out;
}

// A .json.gz bomb (a valid run and 250 million zeros: 500 MB inflated from under 1 MB) is refused in under a second
// using less than 256 MiB, whether its gzip trailer says how large it is or lies, and so is a smaller one whose text
// fits the size bound but holds 30 million values; report, ingest and baseline make alike.
TEST(InputBounds, GzipBombIsRefusedFastInLittleMemory) {
  const std::string dir = scratchDir("bomb");
  const std::string honest = dir + "/bomb.json.gz";
  const std::string liar = dir + "/liar.json.gz";
  const std::string values = dir + "/values.json.gz";
  const size_t compressed = writeBomb(honest, size_t{250} << 20).size();
  EXPECT_LT(compressed, size_t{1} << 20);
  std::printf("bomb: %zu bytes of gzip, 500 MiB of JSON\n", compressed);
  writeBomb(liar, size_t{250} << 20, 4096);
  writeBomb(values, size_t{30} << 20);
  struct Case {
    std::string file, says;
  };
  for (const Case& c :
       {Case{honest, "inflates past the 64 MiB allowed"}, Case{liar, "inflates past the 64 MiB allowed"},
        Case{values, "more than the 2000000 JSON values allowed"}}) {
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"report", c.file, "--summary", dir + "/s.md"},
          std::vector<std::string>{"history", "ingest", "--db", dir + "/h.sqlite", c.file},
          std::vector<std::string>{"baseline", "make", "--from", c.file, "--out", dir + "/b.json"}}) {
      const Measured m = measure(args);
      EXPECT_EQ(m.exit_code, 2) << args[0] << " " << c.file << ": " << m.err;
      EXPECT_NE(m.err.find(c.says), std::string::npos) << args[0] << ": " << m.err;
      EXPECT_NE(m.err.find(c.file), std::string::npos) << m.err;
      EXPECT_LT(m.wall_s, 1.0) << args[0] << " " << c.file;
      EXPECT_LT(m.max_rss_kib, 256 * 1024) << args[0] << " " << c.file;
      std::printf("%s %s: exit %d in %.3f s, %ld MiB\n", args[0].c_str(), fs::path(c.file).filename().c_str(),
                  m.exit_code, m.wall_s, m.max_rss_kib / 1024);
    }
  }
  EXPECT_FALSE(fs::exists(dir + "/s.md"));
  EXPECT_FALSE(fs::exists(dir + "/b.json"));
  // The largest committed run reads with room to spare, through the same bounds.
  const Measured big = measure(
      {"report", sourcePath("reports/runs/2026-11-28-h100-x4-nvswitch-15bd040.json.gz"), "--summary", dir + "/big.md"});
  EXPECT_NE(big.exit_code, 2) << big.err;
  EXPECT_TRUE(fs::exists(dir + "/big.md"));
  fs::remove_all(dir);
}
#else
TEST(InputBounds, GzipBombIsRefusedFastInLittleMemory) {
  GTEST_SKIP() << "built without zlib: gzip-compressed run files are refused altogether";
}
#endif

// Only regular files are read: /dev/zero, a *.json symlink to it, a FIFO and a socket are refused at once (exit 2,
// naming what they are), never read without bound or waited on.
TEST(InputBounds, OnlyRegularFilesAreRead) {
  const std::string dir = scratchDir("not-regular");
  const std::string link = dir + "/zero.json";
  fs::create_symlink("/dev/zero", link);
  const std::string fifo = dir + "/fifo.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  const std::string sock = dir + "/sock.json";
  const int sfd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", sock.c_str());
  ASSERT_EQ(::bind(sfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
  struct Case {
    std::string file, says;
  };
  for (const Case& c :
       {Case{"/dev/zero", "/dev/zero: a character device, not a regular file"},
        Case{link, "zero.json (a symlink to /dev/zero): a character device, not a regular file"},
        Case{fifo, "fifo.json: a FIFO, not a regular file"}, Case{sock, "sock.json: a socket, not a regular file"}}) {
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"report", c.file},
          std::vector<std::string>{"history", "ingest", "--db", dir + "/h.sqlite", c.file},
          std::vector<std::string>{"qualify", "--results", c.file, "--out", dir + "/q"},
          std::vector<std::string>{"qualify", "--dry-run", "--config", c.file},
          std::vector<std::string>{"topo", "--fixture", c.file}}) {
      const Measured m = measure(args, 20);
      EXPECT_EQ(m.exit_code, 2) << args[0] << " " << c.file << ": " << m.err;
      EXPECT_NE(m.err.find(c.says), std::string::npos) << args[0] << " " << args[1] << ": " << m.err;
      EXPECT_LT(m.wall_s, 5.0) << args[0] << " " << c.file;
      EXPECT_LT(m.max_rss_kib, 256 * 1024) << args[0] << " " << c.file;
    }
  }
  ::close(sfd);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace peerlab::testing
