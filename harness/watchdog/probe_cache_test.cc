#include "harness/watchdog/probe_cache.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "reference/testing/temp_dir.h"
#include "reference/testing/testing.h"

namespace peerlab::probe {
namespace {

CacheKey key() {
  CacheKey k;
  k.hostname = "gpu-box";
  k.driver = "580.159.04";
  k.cuda_visible_devices = "<unset>";
  k.cuda_device_order = "<unset>";
  k.gpus = {{"GPU-aaaa", "0000:18:00.0"}, {"GPU-bbbb", "0000:2a:00.0"}};
  return k;
}

std::vector<CellSpec> wanted() {
  std::vector<CellSpec> out;
  uint32_t id = 0;
  for (Method m : {Method::kCeWrite, Method::kIpcVmm}) {
    for (uint64_t bytes : {4096ull, 1ull << 20}) {
      for (auto [s, d] : allPairs(2))
        out.push_back({id++, m, s, d, bytes, 0});
    }
  }
  return out;
}

CacheEntry entry() {
  CacheEntry e;
  e.key = key();
  e.created = "2026-11-21T10:00:00Z";
  e.wall_us = 812345;
  e.run_seed = 42;
  for (const CellSpec& w : wanted()) {
    CellReport r;
    r.spec = w;
    r.spec.seed = cellSeed(42, w.method, w.bytes, w.src, w.dst);
    r.claimed = true;
    r.result.id = w.id;
    r.result.seed = r.spec.seed;
    r.result.verdict = Verdict::kOk;
    r.result.path = isIpcMethod(w.method) ? Path::kIpc : Path::kPeer;
    r.result.words = w.bytes / 8;
    r.result.time_us = 100 + w.id;
    e.cells.push_back(r);
  }
  e.cells[3].result.verdict = Verdict::kCorrupt;
  e.cells[3].result.wrong = 2;
  e.cells[3].result.first_bad = 64;
  e.cells[5].result.verdict = Verdict::kHang;
  e.cells[5].result.error = "no answer within 5000 ms";
  return e;
}

class Cache : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.path();
    ASSERT_FALSE(dir_.empty());
    path_ = dir_ + "/probe.json";
  }
  std::string read() const { return testing::readFile(path_); }
  void write(const std::string& text) const { std::ofstream(path_, std::ios::trunc) << text; }

  testing::TempDir tmp_{"peerlab-cache-test"};
  std::string dir_, path_;
};

TEST_F(Cache, RoundTripsEveryField) {
  PEERLAB_ASSERT_OK(writeCache(path_, entry()));
  CacheLookup hit = lookupCache(path_, key(), wanted());
  ASSERT_EQ(hit.state, CacheState::kHit) << hit.why;
  const CacheEntry want = entry();
  ASSERT_EQ(hit.cells.size(), want.cells.size());
  for (size_t i = 0; i < want.cells.size(); ++i) {
    const CellReport& a = want.cells[i];
    const CellReport& b = hit.cells[i];
    EXPECT_EQ(b.spec.method, a.spec.method);
    EXPECT_EQ(b.spec.src, a.spec.src);
    EXPECT_EQ(b.spec.dst, a.spec.dst);
    EXPECT_EQ(b.spec.bytes, a.spec.bytes);
    EXPECT_EQ(b.spec.id, a.spec.id);
    EXPECT_EQ(b.claimed, a.claimed);
    EXPECT_EQ(b.result.verdict, a.result.verdict);
    EXPECT_EQ(b.result.path, a.result.path);
    EXPECT_EQ(b.result.wrong, a.result.wrong);
    EXPECT_EQ(b.result.words, a.result.words);
    EXPECT_EQ(b.result.first_bad, a.result.first_bad);
    EXPECT_EQ(b.result.time_us, a.result.time_us);
    EXPECT_EQ(b.result.error, a.result.error);
    EXPECT_EQ(b.result.seed, a.result.seed);
  }
  EXPECT_EQ(hit.entry.wall_us, 812345u);
  EXPECT_EQ(hit.entry.created, "2026-11-21T10:00:00Z");
}

TEST_F(Cache, AnyKeyChangeMisses) {
  PEERLAB_ASSERT_OK(writeCache(path_, entry()));
  const std::vector<std::pair<std::string, std::function<void(CacheKey&)>>> changes = {
      {"hostname", [](CacheKey& k) { k.hostname = "other-box"; }},
      {"driver", [](CacheKey& k) { k.driver = "580.160.01"; }},
      {"CUDA_VISIBLE_DEVICES", [](CacheKey& k) { k.cuda_visible_devices = "1,0"; }},
      {"CUDA_DEVICE_ORDER", [](CacheKey& k) { k.cuda_device_order = "PCI_BUS_ID"; }},
      {"UUID", [](CacheKey& k) { k.gpus[1].uuid = "GPU-cccc"; }},
      {"bus id", [](CacheKey& k) { k.gpus[0].bus_id = "0000:19:00.0"; }},
      {"GPUs", [](CacheKey& k) { k.gpus.pop_back(); }},
  };
  for (const auto& [field, change] : changes) {
    CacheKey k = key();
    change(k);
    CacheLookup r = lookupCache(path_, k, wanted());
    EXPECT_EQ(r.state, CacheState::kMismatch) << field;
    EXPECT_NE(r.why.find(field), std::string::npos) << field << ": " << r.why;
    EXPECT_TRUE(r.cells.empty());
  }
  EXPECT_EQ(lookupCache(path_, key(), wanted()).state, CacheState::kHit);
}

TEST_F(Cache, KeyFromInventoryAndEnvironment) {
  Inventory inv;
  inv.driver_release = "580.159.04";
  GpuInfo g;
  g.uuid = "GPU-1";
  g.bus_id = "0000:01:00.0";
  inv.gpus = {g};
  ::setenv("CUDA_VISIBLE_DEVICES", "3", 1);
  const CacheKey a = cacheKeyFor(inv);
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  const CacheKey b = cacheKeyFor(inv);
  EXPECT_EQ(a.cuda_visible_devices, "3");
  EXPECT_EQ(b.cuda_visible_devices, "<unset>");
  EXPECT_NE(keyDifference(a, b), "");
  EXPECT_EQ(keyDifference(a, a), "");
  EXPECT_EQ(a.driver, "580.159.04");
  ASSERT_EQ(a.gpus.size(), 1u);
  EXPECT_EQ(a.gpus[0].bus_id, "0000:01:00.0");
  EXPECT_FALSE(a.hostname.empty());
}

TEST_F(Cache, MissingFileAndMissingCells) {
  EXPECT_EQ(lookupCache(path_, key(), wanted()).state, CacheState::kMissing);
  PEERLAB_ASSERT_OK(writeCache(path_, entry()));
  auto more = wanted();
  more.push_back({99, Method::kAtomic, 0, 1, 4096, 0});
  CacheLookup r = lookupCache(path_, key(), more);
  EXPECT_EQ(r.state, CacheState::kIncomplete);
  EXPECT_NE(r.why.find("atomic 0->1"), std::string::npos) << r.why;
  // A subset is served.
  auto fewer = wanted();
  fewer.resize(2);
  EXPECT_EQ(lookupCache(path_, key(), fewer).state, CacheState::kHit);
}

TEST_F(Cache, DamagedFilesAreDetectedNeverTrusted) {
  PEERLAB_ASSERT_OK(writeCache(path_, entry()));
  const std::string good = read();

  // Truncated.
  write(good.substr(0, good.size() / 2));
  CacheLookup r = lookupCache(path_, key(), wanted());
  EXPECT_EQ(r.state, CacheState::kInvalid);
  EXPECT_NE(r.why.find("not valid JSON"), std::string::npos) << r.why;

  // Hand-edited: a verdict changed from corrupt to ok, checksum left alone.
  std::string edited = good;
  const auto at = edited.find("\"corrupt\"");
  ASSERT_NE(at, std::string::npos);
  edited.replace(at, 9, "\"ok\"");
  write(edited);
  r = lookupCache(path_, key(), wanted());
  EXPECT_EQ(r.state, CacheState::kInvalid);
  EXPECT_NE(r.why.find("checksum mismatch"), std::string::npos) << r.why;

  // Wrong version.
  std::string version = good;
  const auto v = version.find("\"version\": 1");
  ASSERT_NE(v, std::string::npos) << good.substr(0, 200);
  version.replace(v, 12, "\"version\": 2");
  write(version);
  r = lookupCache(path_, key(), wanted());
  EXPECT_EQ(r.state, CacheState::kInvalid);
  EXPECT_NE(r.why.find("cache version 2"), std::string::npos) << r.why;

  // Not a cache at all, or empty.
  write("{\"hello\": 1}");
  EXPECT_EQ(lookupCache(path_, key(), wanted()).state, CacheState::kInvalid);
  write("");
  EXPECT_EQ(lookupCache(path_, key(), wanted()).state, CacheState::kInvalid);
  write("[1, 2, 3]");
  EXPECT_EQ(lookupCache(path_, key(), wanted()).state, CacheState::kInvalid);

  // Rewriting replaces whatever was there.
  PEERLAB_ASSERT_OK(writeCache(path_, entry()));
  EXPECT_EQ(lookupCache(path_, key(), wanted()).state, CacheState::kHit);
  EXPECT_EQ(read(), good);
}

TEST_F(Cache, StructureIsCheckedEvenWithAValidChecksum) {
  // A file whose checksum is right but whose cells are malformed (written by something else) is still refused.
  CacheEntry e = entry();
  std::string text = encodeCache(e);
  auto doc = nlohmann::json::parse(text);
  doc["cells"][0].erase("verdict");
  doc.erase("checksum");
  char sum[40];
  std::snprintf(sum, sizeof(sum), "fnv1a64:%016llx", static_cast<unsigned long long>(fnv1a64(doc.dump())));
  doc["checksum"] = sum;
  write(doc.dump());
  CacheLookup r = lookupCache(path_, key(), wanted());
  EXPECT_EQ(r.state, CacheState::kInvalid);
  EXPECT_NE(r.why.find("verdict"), std::string::npos) << r.why;
}

TEST_F(Cache, PathChecks) {
  PEERLAB_EXPECT_OK(checkCachePath(path_, false));
  EXPECT_FALSE(checkCachePath(dir_, false).isOk()) << "a directory is not a cache file";
  EXPECT_FALSE(checkCachePath(dir_ + "/missing/probe.json", false).isOk());
  PEERLAB_EXPECT_OK(checkCachePath(dir_ + "/made/probe.json", true));
  EXPECT_TRUE(std::filesystem::is_directory(dir_ + "/made"));
  EXPECT_FALSE(checkCachePath("", false).isOk());
  ::setenv("XDG_CACHE_HOME", "/some/where", 1);
  EXPECT_EQ(defaultCachePath(), "/some/where/peerlab/probe.json");
  ::unsetenv("XDG_CACHE_HOME");
  ::setenv("HOME", "/home/someone", 1);
  EXPECT_EQ(defaultCachePath(), "/home/someone/.cache/peerlab/probe.json");
}

// Without HOME (slurmd runs health checks and prologs so) the cache is never a file in /tmp another user can plant:
// root's lives in /var/cache/peerlab, another account's under its home directory.
TEST_F(Cache, WithoutHomeTheCacheIsNeverShared) {
  const char* home = std::getenv("HOME");
  const std::string saved = home ? home : "";
  ::unsetenv("XDG_CACHE_HOME");
  ::unsetenv("HOME");
  const std::string path = defaultCachePath();
  if (::geteuid() == 0) {
    EXPECT_EQ(path, "/var/cache/peerlab/probe.json");
  } else {
    EXPECT_EQ(path.rfind("/tmp", 0), std::string::npos) << path;
    EXPECT_NE(path.find("/.cache/peerlab/probe.json"), std::string::npos) << path;
  }
  ::setenv("HOME", "relative/dir", 1);  // not a path to trust either
  EXPECT_EQ(defaultCachePath().rfind("relative", 0), std::string::npos) << defaultCachePath();
  if (!saved.empty()) ::setenv("HOME", saved.c_str(), 1);
}

// The default directory is made the user's own: created 0700, an existing one of the user's made 0700, one another
// user owns refused (the cache is then off, with the reason).
TEST_F(Cache, TheCacheDirectoryIsPrivate) {
  ::setenv("XDG_CACHE_HOME", dir_.c_str(), 1);
  const std::string cacheDir = dir_ + "/peerlab";
  PEERLAB_EXPECT_OK(checkCachePath(defaultCachePath(), true));
  struct stat st {};
  ASSERT_EQ(::stat(cacheDir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::chmod(cacheDir.c_str(), 0777), 0);
  PEERLAB_EXPECT_OK(checkCachePath(defaultCachePath(), true));
  ASSERT_EQ(::stat(cacheDir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(cacheDir.c_str(), 65534, 65534), 0);
    const Status st2 = checkCachePath(defaultCachePath(), true);
    EXPECT_FALSE(st2.isOk());
    EXPECT_NE(st2.message().find("owned by uid 65534, not by this user"), std::string::npos) << st2.message();
  }
  ::unsetenv("XDG_CACHE_HOME");
}

// A cache file is believed only when it is this user's and only this user may write it: another user's file (its
// checksum recomputed over a forged verdict), one anyone may write, or a symlink is ignored with the reason, and never
// read (a forged "corrupt" is not reported, a real one not hidden).
TEST_F(Cache, OnlyTheUsersOwnCacheFileIsBelieved) {
  write(encodeCache(entry()));
  EXPECT_EQ(lookupCache(path_, key(), wanted()).state, CacheState::kHit);
  ASSERT_EQ(::chmod(path_.c_str(), 0666), 0);
  CacheLookup open = lookupCache(path_, key(), wanted());
  EXPECT_EQ(open.state, CacheState::kInvalid);
  EXPECT_NE(open.why.find("writable by other users (mode 0666); ignored"), std::string::npos) << open.why;
  EXPECT_TRUE(open.cells.empty());
  ASSERT_EQ(::chmod(path_.c_str(), 0644), 0);
  const std::string link = dir_ + "/link.json";
  std::filesystem::create_symlink(path_, link);
  EXPECT_EQ(lookupCache(link, key(), wanted()).state, CacheState::kInvalid);
  if (::geteuid() != 0) GTEST_SKIP() << "another user's file needs root to make";
  ASSERT_EQ(::chown(path_.c_str(), 65534, 65534), 0);
  CacheLookup foreign = lookupCache(path_, key(), wanted());
  EXPECT_EQ(foreign.state, CacheState::kInvalid);
  EXPECT_NE(foreign.why.find("owned by uid 65534, not by this user (uid 0); ignored"), std::string::npos)
      << foreign.why;
  EXPECT_TRUE(foreign.cells.empty());
}

}  // namespace
}  // namespace peerlab::probe
