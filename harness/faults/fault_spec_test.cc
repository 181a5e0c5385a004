#include "harness/faults/fault_spec.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "harness/faults/inject.h"
#include "harness/watchdog/probe_cache.h"
#include "reference/testing/temp_dir.h"
#include "reference/testing/testing.h"

namespace peerlab::faults {
namespace {

TEST(FaultSpec, ParsesNameAlone) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(FaultSpec spec, parseFaultSpec("bitflip"));
  EXPECT_EQ(spec.kind, FaultKind::kBitflip);
  EXPECT_EQ(spec.count, -1);
  EXPECT_EQ(spec.after, 0);
  EXPECT_FALSE(spec.offset.has_value());
  EXPECT_EQ(spec.bit, -1);
  EXPECT_EQ(spec.canonical(), "bitflip");
}

TEST(FaultSpec, ParsesEveryCommonLimit) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(
      FaultSpec spec, parseFaultSpec("bitflip:seed=7,offset=0x1000,bit=3,count=2,after=5,pair=0-1,side=write,rank=1"));
  EXPECT_EQ(spec.seed, 7u);
  ASSERT_TRUE(spec.offset.has_value());
  EXPECT_EQ(*spec.offset, 4096u);
  EXPECT_EQ(spec.bit, 3);
  EXPECT_EQ(spec.count, 2);
  EXPECT_EQ(spec.after, 5);
  EXPECT_EQ(spec.pair_a, 0);
  EXPECT_EQ(spec.pair_b, 1);
  EXPECT_EQ(spec.side, Side::kWrite);
  EXPECT_EQ(spec.rank, 1);
}

TEST(FaultSpec, CanonicalFormRoundTrips) {
  const char* specs[] = {"none",
                         "lie:flips=9,pair=2-3",
                         "bitflip:seed=7,offset=4096",
                         "enable_error:code=217,direction=second",
                         "ipc_open_fail:code=205,ipc=vmm",
                         "copy_hang:release_ms=250,side=read",
                         "signal_withhold:value=1,after=2",
                         "signal_late:ms=300",
                         "kill_after_export:rank=1,delay_ms=50",
                         "drop_writes:target=ipc",
                         "cache_corrupt:mode=truncate,seed=4",
                         "cache_stale:path=/tmp/x"};
  for (const char* text : specs) {
    PEERLAB_ASSERT_OK_AND_ASSIGN(FaultSpec spec, parseFaultSpec(text));
    EXPECT_EQ(spec.canonical(), text);
    PEERLAB_ASSERT_OK_AND_ASSIGN(FaultSpec again, parseFaultSpec(spec.canonical()));
    EXPECT_EQ(again.kind, spec.kind);
    EXPECT_EQ(again.given, spec.given);
  }
}

TEST(FaultSpec, DefaultsPerFault) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(FaultSpec enable, parseFaultSpec("enable_error"));
  EXPECT_EQ(enable.code, 217);
  EXPECT_EQ(enable.direction, Direction::kBoth);
  PEERLAB_ASSERT_OK_AND_ASSIGN(FaultSpec ipc, parseFaultSpec("ipc_open_fail"));
  EXPECT_EQ(ipc.code, 400);
  EXPECT_EQ(ipc.ipc, IpcKind::kBoth);
  PEERLAB_ASSERT_OK_AND_ASSIGN(FaultSpec drop, parseFaultSpec("drop_writes"));
  EXPECT_EQ(drop.side, Side::kWrite);
  PEERLAB_ASSERT_OK_AND_ASSIGN(FaultSpec hang, parseFaultSpec("copy_hang"));
  EXPECT_EQ(hang.release, Release::kTeardown);
  PEERLAB_ASSERT_OK_AND_ASSIGN(FaultSpec timed, parseFaultSpec("copy_hang:release_ms=40"));
  EXPECT_EQ(timed.release, Release::kTimer);
  EXPECT_EQ(timed.ms, 40);
  PEERLAB_ASSERT_OK_AND_ASSIGN(FaultSpec lie, parseFaultSpec("lie"));
  EXPECT_EQ(lie.flips, 4);
}

TEST(FaultSpec, WhichFaultsNeedTheInterposer) {
  for (const auto& info : catalog()) {
    PEERLAB_ASSERT_OK_AND_ASSIGN(FaultSpec spec,
                                 parseFaultSpec(info.kind == FaultKind::kSignalLate        ? "signal_late:ms=1"
                                                : info.kind == FaultKind::kKillAfterExport ? "kill_after_export:rank=0"
                                                                                           : info.name));
    const bool file = info.kind == FaultKind::kCacheCorrupt || info.kind == FaultKind::kCacheStale;
    EXPECT_EQ(spec.isCacheFault(), file) << info.name;
    EXPECT_EQ(spec.needsInterposer(), !file && info.kind != FaultKind::kNone) << info.name;
  }
}

TEST(FaultSpec, RejectsBadInputWithOneLineNamingIt) {
  struct Case {
    const char* text;
    const char* mentions;
  };
  const Case cases[] = {
      {"", "empty fault spec"},
      {"nope", "unknown fault 'nope'"},
      {"bitflip:", "empty parameter list"},
      {"bitflip:offset", "not key=value"},
      {"bitflip:=3", "has no key"},
      {"bitflip:offset=", "has no value"},
      {"bitflip:ofset=3", "unknown parameter 'ofset'"},
      {"bitflip:seed=1,seed=2", "given twice"},
      {"bitflip:seed=1,,bit=2", "stray ','"},
      {"bitflip:bit=8", "bit=8"},
      {"bitflip:offset=-1", "offset=-1"},
      {"bitflip:offset=12abc", "offset=12abc"},
      {"bitflip:pair=1-1", "same device twice"},
      {"bitflip:pair=0", "pair=0"},
      {"bitflip:side=up", "side=up"},
      {"enable_error:code=300", "not one of 205, 217, 704, 711"},
      {"enable_error:direction=left", "direction=left"},
      {"ipc_open_fail:ipc=nvlink", "ipc=nvlink"},
      {"ipc_open_fail:code=0", "code=0"},
      {"signal_late", "needs ms=N"},
      {"signal_late:ms=0", "ms=0"},
      {"kill_after_export", "needs rank=r"},
      {"kill_after_export:count=1,rank=0", "unknown parameter 'count'"},
      {"lie:flips=65", "flips=65"},
      {"none:seed=1", "unknown parameter 'seed'"},
      {"drop_writes:target=dram", "target=dram"},
      {"copy_hang:release=never", "release=never"},
      {"cache_corrupt:mode=shred", "mode=shred"},
      {"bitflip:count=99999999999999999999", "count=99999999999999999999"},
  };
  for (const Case& c : cases) {
    auto spec = parseFaultSpec(c.text);
    ASSERT_FALSE(spec.isOk()) << c.text;
    EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument) << c.text;
    const std::string& msg = spec.status().message();
    EXPECT_NE(msg.find(c.mentions), std::string::npos) << c.text << " -> " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(FaultSpec, ControlCharactersInTheSpecStayOnOneLine) {
  for (const char* text : {"kill\n\n_after_export:rank=1", "bitflip:offset=1\n2", "bitflip:se\ted=1", "lie:\x7f=1"}) {
    auto spec = parseFaultSpec(text);
    ASSERT_FALSE(spec.isOk()) << text;
    EXPECT_EQ(spec.status().message().find('\n'), std::string::npos) << spec.status().message();
    EXPECT_EQ(spec.status().message().find('\t'), std::string::npos) << spec.status().message();
  }
  auto spec = parseFaultSpec("kill\n_after_export:rank=1");
  EXPECT_NE(spec.status().message().find("'kill\\x0a_after_export'"), std::string::npos) << spec.status().message();
}

TEST(FaultSpec, UnknownParameterListsTheKnownOnes) {
  auto spec = parseFaultSpec("enable_error:cod=217");
  ASSERT_FALSE(spec.isOk());
  EXPECT_NE(spec.status().message().find("code, direction"), std::string::npos) << spec.status().message();
}

TEST(FaultSpec, ToleratesSpacesAroundTokens) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(FaultSpec spec, parseFaultSpec(" bitflip : seed = 3 , bit = 1 "));
  EXPECT_EQ(spec.seed, 3u);
  EXPECT_EQ(spec.bit, 1);
  EXPECT_EQ(spec.canonical(), "bitflip:seed=3,bit=1");
}

TEST(FaultSpec, ListNamesEveryFaultAndParameter) {
  const std::string text = listText();
  for (const auto& info : catalog()) {
    EXPECT_NE(text.find(info.name + "\n"), std::string::npos) << info.name;
    for (const auto& p : info.params)
      EXPECT_NE(text.find("    " + p.key + "="), std::string::npos) << p.key;
  }
  EXPECT_EQ(findFault("nope"), nullptr);
  ASSERT_NE(findFault("copy_hang"), nullptr);
}

TEST(FaultSpec, Mix64IsASeededPermutation) {
  EXPECT_EQ(mix64(7), mix64(7));
  EXPECT_NE(mix64(7), mix64(8));
  EXPECT_NE(mix64(0), 0u);
}

TEST(Inject, AppendsToAnExistingPreload) {
  EXPECT_EQ(appendPreload("", "/l/libpeerlab_faults.so"), "/l/libpeerlab_faults.so");
  EXPECT_EQ(appendPreload("/a.so", "/l/f.so"), "/a.so:/l/f.so");
  EXPECT_EQ(appendPreload("/a.so /b.so", "/l/f.so"), "/a.so:/b.so:/l/f.so");
  EXPECT_EQ(appendPreload("/l/f.so:/a.so", "/l/f.so"), "/l/f.so:/a.so");
  EXPECT_EQ(appendPreload("::/a.so:", "/l/f.so"), "/a.so:/l/f.so");
}

TEST(Inject, EnvironmentCarriesTheCanonicalSpec) {
  InjectOptions options;
  PEERLAB_ASSERT_OK_AND_ASSIGN(options.spec, parseFaultSpec("bitflip: seed=7"));
  options.interposer = "/x/libpeerlab_faults.so";
  options.verbose = true;
  options.stats = "/tmp/stats";
  auto env = injectEnvironment(options, "/pre.so");
  std::map<std::string, std::string> m(env.begin(), env.end());
  EXPECT_EQ(m["PEERLAB_FAULT"], "bitflip:seed=7");
  EXPECT_EQ(m["LD_PRELOAD"], "/pre.so:/x/libpeerlab_faults.so");
  EXPECT_EQ(m["PEERLAB_FAULTS_VERBOSE"], "1");
  EXPECT_EQ(m["PEERLAB_FAULTS_STATS"], "/tmp/stats");
  options.interposer.clear();
  options.verbose = false;
  options.stats.clear();
  env = injectEnvironment(options, "/pre.so");
  EXPECT_EQ(env.size(), 1u);
}

TEST(Inject, InterposerPathHonoursTheEnvironment) {
  const std::string dir = ::testing::TempDir() + "faults-lib-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  const std::string lib = dir + "/libpeerlab_faults.so";
  std::ofstream(lib) << "x";
  setenv(kEnvLibrary, lib.c_str(), 1);
  PEERLAB_ASSERT_OK_AND_ASSIGN(std::string found, interposerPath(""));
  EXPECT_EQ(found, lib);
  setenv(kEnvLibrary, (dir + "/missing.so").c_str(), 1);
  auto missing = interposerPath("");
  ASSERT_FALSE(missing.isOk());
  EXPECT_NE(missing.status().message().find("missing.so"), std::string::npos);
  unsetenv(kEnvLibrary);
  // Beside a binary in <dir>/bin: <dir>/lib/libpeerlab_faults.so.
  std::filesystem::create_directories(dir + "/bin");
  std::filesystem::create_directories(dir + "/lib");
  std::ofstream(dir + "/bin/peerlab") << "x";
  std::ofstream(dir + "/lib/libpeerlab_faults.so") << "x";
  PEERLAB_ASSERT_OK_AND_ASSIGN(std::string beside, interposerPath(dir + "/bin/peerlab"));
  EXPECT_EQ(beside, std::filesystem::weakly_canonical(dir + "/lib/libpeerlab_faults.so").string());
  std::filesystem::remove_all(dir);
}

using testing::readFile;

TEST(Inject, CacheCorruptIsSeededAndChangesTheFile) {
  const std::string dir = ::testing::TempDir() + "faults-cache-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  // A probe cache (cache faults touch nothing else) of a few cells.
  probe::CacheEntry entry;
  entry.key.hostname = "host";
  entry.key.driver = "580.159.04";
  entry.key.cuda_visible_devices = "<unset>";
  entry.key.cuda_device_order = "<unset>";
  entry.created = "2026-11-21T00:00:00Z";
  for (int c = 0; c < 4; ++c) {
    probe::CellReport cell;
    cell.spec.method = probe::Method::kCeWrite;
    cell.spec.src = c % 2;
    cell.spec.dst = 1 - c % 2;
    cell.spec.bytes = 4096u << c;
    cell.result.verdict = probe::Verdict::kOk;
    entry.cells.push_back(cell);
  }
  const std::string original = probe::encodeCache(entry);
  ASSERT_GT(original.size(), 600u);
  const char* modes[] = {"flip", "truncate", "empty", "garbage"};
  for (const char* mode : modes) {
    std::string results[2];
    for (int run = 0; run < 2; ++run) {
      const std::string path = dir + "/cache-" + mode + std::to_string(run);
      std::ofstream(path, std::ios::binary) << original;
      PEERLAB_ASSERT_OK_AND_ASSIGN(FaultSpec spec, parseFaultSpec(std::string("cache_corrupt:seed=5,mode=") + mode));
      PEERLAB_ASSERT_OK_AND_ASSIGN(std::string what, applyCacheFault(spec, path));
      EXPECT_NE(what.find(path), std::string::npos);
      results[run] = readFile(path);
      EXPECT_NE(results[run], original) << mode;
    }
    EXPECT_EQ(results[0], results[1]) << mode << " is not deterministic for a seed";
  }
  PEERLAB_ASSERT_OK_AND_ASSIGN(FaultSpec spec, parseFaultSpec("cache_corrupt"));
  auto missing = applyCacheFault(spec, dir + "/none.json");
  ASSERT_FALSE(missing.isOk());
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cachePathFor(spec, "/default"), "/default");
  PEERLAB_ASSERT_OK_AND_ASSIGN(FaultSpec with_path, parseFaultSpec("cache_corrupt:path=/given"));
  EXPECT_EQ(cachePathFor(with_path, "/default"), "/given");
  std::filesystem::remove_all(dir);
}

TEST(Inject, CacheStaleKeepsTheCacheValidForAnotherMachine) {
  const std::string path = ::testing::TempDir() + "faults-stale-" + std::to_string(getpid()) + ".json";
  probe::CacheEntry entry;
  entry.key.hostname = "host";
  entry.key.driver = "580.159.04";
  entry.key.cuda_visible_devices = "<unset>";
  entry.key.cuda_device_order = "<unset>";
  entry.key.gpus = {{"GPU-11111111-2222-3333-4444-555555555555", "0000:03:00.0"},
                    {"GPU-66666666-7777-8888-9999-000000000000", "0000:04:00.0"}};
  entry.created = "2026-11-21T00:00:00Z";
  probe::CellReport cell;
  cell.spec.method = probe::Method::kCeWrite;
  cell.spec.src = 0;
  cell.spec.dst = 1;
  cell.spec.bytes = 4096;
  cell.claimed = true;
  cell.result.verdict = probe::Verdict::kOk;
  entry.cells = {cell};
  PEERLAB_ASSERT_OK(probe::writeCache(path, entry));
  PEERLAB_ASSERT_OK_AND_ASSIGN(FaultSpec spec, parseFaultSpec("cache_stale:seed=3"));
  PEERLAB_ASSERT_OK_AND_ASSIGN(std::string what, applyCacheFault(spec, path));
  EXPECT_NE(what.find("stale"), std::string::npos) << what;
  PEERLAB_ASSERT_OK_AND_ASSIGN(probe::CacheEntry stale, probe::decodeCache(readFile(path)));
  EXPECT_FALSE(probe::keyDifference(entry.key, stale.key).empty());
  EXPECT_NE(stale.key.driver, entry.key.driver);
  ASSERT_EQ(stale.key.gpus.size(), 2u);
  EXPECT_NE(stale.key.gpus[0].uuid, entry.key.gpus[0].uuid);
  EXPECT_EQ(stale.cells.size(), 1u);
  // A file that is not a valid cache cannot be made stale.
  std::ofstream(path, std::ios::binary) << "{\"format\": 1";
  auto bad = applyCacheFault(spec, path);
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace peerlab::faults
