// `peerlab inject` end to end: the real peerlab binary runs commands under faults.

#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/faults/fault_spec.h"
#include "harness/faults/testing/run_process.h"
#include "harness/watchdog/probe_cache.h"

namespace peerlab::faults {
namespace {

using testing::ProcessResult;
using testing::runProcess;

ProcessResult inject(const std::vector<std::string>& args, std::vector<std::string> env = {}) {
  std::vector<std::string> argv = {PEERLAB_BINARY_PATH, "inject"};
  argv.insert(argv.end(), args.begin(), args.end());
  env.push_back("PEERLAB_FAULT");
  env.push_back("PEERLAB_FAULTS_LIB");
  return runProcess(argv, env);
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    out.push_back(line);
  return out;
}

TEST(InjectCommand, PassesTheSpecAndTheExitCode) {
  auto r = inject(
      {"--fault", "bitflip:seed=7,offset=4096", "--", "/bin/sh", "-c", "echo $PEERLAB_FAULT; echo $LD_PRELOAD; exit 3"},
      {"LD_PRELOAD"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  auto out = lines(r.out);
  ASSERT_EQ(out.size(), 2u) << r.out;
  EXPECT_EQ(out[0], "bitflip:seed=7,offset=4096");
  EXPECT_EQ(std::filesystem::path(out[1]).filename(), "libpeerlab_faults.so");
  EXPECT_TRUE(std::filesystem::exists(out[1]));
}

TEST(InjectCommand, ForwardsSuccessAndTheCanonicalForm) {
  auto r = inject({"--fault", " enable_error : code=711 ", "--", "/bin/sh", "-c", "echo $PEERLAB_FAULT"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "enable_error:code=711\n");
}

TEST(InjectCommand, AppendsToAnExistingPreload) {
  const std::string existing = PEERLAB_FAKE_CUDA_PATH;
  auto r = inject({"--fault", "none", "--", "/bin/sh", "-c", "echo $LD_PRELOAD"}, {"LD_PRELOAD=" + existing});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, existing + ":" + PEERLAB_FAULTS_LIB_PATH + "\n");
}

TEST(InjectCommand, SignalsEndTheCommandAsTheyWould) {
  auto r = inject({"--fault", "none", "--", "/bin/sh", "-c", "kill -TERM $$"});
  EXPECT_EQ(r.signal, SIGTERM);
}

TEST(InjectCommand, BadFaultIsAUsageErrorOnOneLine) {
  for (const char* bad : {"nope", "bitflip:bit=9", "enable_error:code=300", "signal_late", "bitflip:x=1"}) {
    auto r = inject({"--fault", bad, "--", "/bin/true"});
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_EQ(r.out, "");
    auto err = lines(r.err);
    ASSERT_EQ(err.size(), 1u) << r.err;
    EXPECT_EQ(err[0].rfind("peerlab inject: ", 0), 0u) << err[0];
  }
}

TEST(InjectCommand, MissingPiecesAreUsageErrors) {
  EXPECT_EQ(inject({"--", "/bin/true"}).exit_code, 2);
  EXPECT_EQ(inject({"--fault", "none"}).exit_code, 2);
  auto missing = inject({"--fault", "none", "--", "/nonexistent/program"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("cannot run '/nonexistent/program'"), std::string::npos) << missing.err;
  auto lib = inject({"--fault", "none", "--lib", "/nonexistent/lib.so", "--", "/bin/true"});
  EXPECT_EQ(lib.exit_code, 2);
  EXPECT_NE(lib.err.find("/nonexistent/lib.so"), std::string::npos) << lib.err;
}

TEST(InjectCommand, ListShowsEveryFault) {
  auto r = inject({"--list"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const auto& info : catalog())
    EXPECT_NE(r.out.find(info.name + "\n"), std::string::npos) << info.name;
}

// A valid probe cache (what `peerlab probe` writes) of two cells.
std::string probeCacheText() {
  probe::CacheEntry e;
  e.key.hostname = "node-a";
  e.key.driver = "580.159.04";
  e.key.cuda_visible_devices = "<unset>";
  e.key.cuda_device_order = "<unset>";
  e.key.gpus = {{"GPU-a", "0000:01:00.0"}, {"GPU-b", "0000:02:00.0"}};
  e.created = "2026-11-21T08:00:00Z";
  for (int src = 0; src < 2; ++src) {
    probe::CellReport c;
    c.spec.method = probe::Method::kCeWrite;
    c.spec.src = src;
    c.spec.dst = 1 - src;
    c.spec.bytes = 4096;
    c.claimed = true;
    c.result.verdict = probe::Verdict::kOk;
    e.cells.push_back(c);
  }
  return probe::encodeCache(e);
}

std::string fileText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(InjectCommand, CacheCorruptDamagesTheFileBeforeTheCommand) {
  const std::string path = ::testing::TempDir() + "inject-cache-" + std::to_string(getpid()) + ".json";
  const std::string original = probeCacheText();
  std::ofstream(path, std::ios::binary) << original;
  auto r = inject({"--fault", "cache_corrupt:mode=garbage,seed=1,path=" + path, "--", "/bin/sh", "-c",
                   "test -s " + path + " && echo $PEERLAB_FAULT; echo ${LD_PRELOAD:-none}"},
                  {"LD_PRELOAD"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "cache_corrupt:mode=garbage,seed=1,path=" + path + "\nnone\n");
  std::ifstream f(path, std::ios::binary);
  std::stringstream now;
  now << f.rdbuf();
  EXPECT_NE(now.str(), original);
  EXPECT_EQ(now.str().size(), original.size());
  std::filesystem::remove(path);
  auto missing = inject({"--fault", "cache_corrupt:path=" + path, "--", "/bin/true"});
  EXPECT_EQ(missing.exit_code, 2);
}

// cache_corrupt and cache_stale touch only probe caches of this user's: a path= naming any other file, or a cache
// another user owns, is refused (exit 2, one line) and left byte for byte as it was, and the command never runs.
TEST(InjectCommand, CacheFaultsTouchOnlyProbeCaches) {
  const std::string dir = ::testing::TempDir() + "inject-precious-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  const std::string precious = dir + "/precious.txt";
  std::ofstream(precious) << "the only copy of something that matters\n";
  const std::string foreign = dir + "/foreign.json";
  std::ofstream(foreign) << probeCacheText();
  const bool chowned = ::geteuid() == 0 && ::chown(foreign.c_str(), 65534, 65534) == 0;
  struct Case {
    std::string file, says;
  };
  std::vector<Case> cases = {{precious, "precious.txt: not a probe cache"}};
  if (chowned) cases.push_back({foreign, "foreign.json: owned by uid 65534, not by this user"});
  for (const Case& c : cases) {
    const std::string before = fileText(c.file);
    for (const char* fault : {"cache_corrupt:mode=garbage,", "cache_stale:", "cache_corrupt:mode=empty,"}) {
      auto r = inject({"--fault", std::string(fault) + "path=" + c.file, "--", "/bin/sh", "-c", "echo ran"});
      EXPECT_EQ(r.exit_code, 2) << fault << " " << c.file << ": " << r.err;
      EXPECT_EQ(r.out, "") << "the command ran";
      EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
      EXPECT_NE(r.err.find("touch only probe caches"), std::string::npos) << r.err;
      EXPECT_EQ(lines(r.err).size(), 1u) << r.err;
      EXPECT_EQ(fileText(c.file), before) << fault << " changed " << c.file;
    }
  }
  if (!chowned) std::printf("not root: the other user's cache is not tested\n");
  std::filesystem::remove_all(dir);
}

// A run made under the interposer says so: the process announces the interposer once on stderr (verbose or not), the
// run file records the fault, the interposer and the stand-in NVML in its fingerprint, the console says INJECTED,
// and the history stores it as injected while baseline make refuses it.
TEST(InjectCommand, RunsUnderTheInterposerAreRecordedAsInjected) {
  const std::string dir = ::testing::TempDir() + "inject-health-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  const std::string run = dir + "/health.json";
  auto r =
      inject({"--fault", "copy_slow:percent=50", "--", PEERLAB_BINARY_PATH, "health", "--watch", "0", "--json", run},
             {"LD_PRELOAD", std::string("PEERLAB_NVML_LIBRARY=") + PEERLAB_FAKE_NVML_PATH, "PEERLAB_FAKE_NVML=healthy",
              "XDG_CACHE_HOME=" + dir});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  size_t announced = 0;
  for (const std::string& line : lines(r.err))
    announced += line.rfind("peerlab-faults: loaded fault copy_slow:percent=50 (pid ", 0) == 0;
  EXPECT_EQ(announced, 1u) << r.err;
  EXPECT_NE(r.out.find("peerlab health: INJECTED: fault copy_slow:percent=50 (interposer "), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("stand-in NVML " + std::string(PEERLAB_FAKE_NVML_PATH)), std::string::npos) << r.out;
  const nlohmann::json doc = nlohmann::json::parse(fileText(run), nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << fileText(run).substr(0, 300);
  const nlohmann::json& injected = doc["fingerprint"]["injected"];
  EXPECT_EQ(injected["fault"], "copy_slow:percent=50") << doc["fingerprint"].dump();
  EXPECT_EQ(std::filesystem::path(injected["interposer"].get<std::string>()).filename(), "libpeerlab_faults.so");
  EXPECT_EQ(injected["nvml"], PEERLAB_FAKE_NVML_PATH);
  EXPECT_FALSE(injected.contains("probe_worker")) << "health runs no probe";
  auto ingest = runProcess({PEERLAB_BINARY_PATH, "history", "ingest", "--db", dir + "/h.sqlite", run}, {});
  EXPECT_EQ(ingest.exit_code, 0) << ingest.err;
  EXPECT_NE(ingest.out.find("as INJECTED (counted nowhere)"), std::string::npos) << ingest.out;
  auto baseline = runProcess({PEERLAB_BINARY_PATH, "baseline", "make", "--from", run, "--out", dir + "/b.json"}, {});
  EXPECT_EQ(baseline.exit_code, 2) << baseline.err;
  EXPECT_NE(baseline.err.find("ran with stand-ins or injected faults"), std::string::npos) << baseline.err;
  // Without the interposer, the same stand-in NVML alone marks the run.
  auto plain = runProcess({PEERLAB_BINARY_PATH, "health", "--watch", "0", "--json", dir + "/plain.json"},
                          {"LD_PRELOAD", "PEERLAB_FAULT", std::string("PEERLAB_NVML_LIBRARY=") + PEERLAB_FAKE_NVML_PATH,
                           "PEERLAB_FAKE_NVML=healthy"});
  EXPECT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.err.find("peerlab-faults"), std::string::npos) << plain.err;
  const nlohmann::json plainDoc = nlohmann::json::parse(fileText(dir + "/plain.json"));
  EXPECT_EQ(plainDoc["fingerprint"]["injected"], nlohmann::json({{"nvml", PEERLAB_FAKE_NVML_PATH}}));
  std::filesystem::remove_all(dir);
}

TEST(InjectCommand, RunsAProgramUnderTheFault) {
  auto r = inject({"--fault", "bitflip:offset=100,bit=0", "--verbose", "--", PEERLAB_FAULT_TARGET_PATH, "copy",
                   "rt_peer_async", "write"},
                  {"LD_PRELOAD"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto values = r.values();
  EXPECT_EQ(values["diff"], "1") << r.out;
  EXPECT_EQ(values["first"], "100");
  EXPECT_EQ(values["mask"], "1");
  EXPECT_NE(r.err.find("peerlab-faults: bitflip at 0x"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace peerlab::faults
