// Host-only checks of the IPC layer: descriptor wire format and validation, the handle cache's keying (with fake
// mappings), the fd exchange order, and that an exchange in which a rank cannot export fails on every rank.

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "reference/ipc/handle_cache.h"
#include "reference/ipc/ipc.h"
#include "reference/testing/rank_test.h"
#include "reference/testing/testing.h"

namespace peerlab::ipc {
namespace {

Descriptor sampleDescriptor() {
  Descriptor d;
  d.kind = HandleKind::kVmmFd;
  d.owner_rank = 3;
  d.owner_device = 2;
  d.owner_pid = 4242;
  d.host_id = 0x1234567890abcdefull;
  d.buffer_id = 77;
  d.offset = 4096;
  d.bytes = 1 << 20;
  d.alloc_bytes = 2 << 20;
  d.exporter_address = 0x7f0000200000ull;
  for (int i = 0; i < 16; ++i)
    d.device_uuid[i] = static_cast<unsigned char>(i * 17);
  for (int i = 0; i < 64; ++i)
    d.legacy.reserved[i] = static_cast<char>(i);
  return d;
}

TEST(IpcDescriptor, RoundTripsThroughItsWireImage) {
  const Descriptor d = sampleDescriptor();
  std::array<std::byte, kDescriptorWireBytes> wire{};
  encodeDescriptor(d, wire);
  PEERLAB_ASSERT_OK_AND_ASSIGN(Descriptor back, decodeDescriptor(wire));
  EXPECT_EQ(std::memcmp(&back, &d, sizeof(Descriptor)), 0);
  EXPECT_EQ(back.buffer_id, 77u);
  EXPECT_EQ(back.offset, 4096u);
  EXPECT_EQ(back.kind, HandleKind::kVmmFd);
}

TEST(IpcDescriptor, DecodeRejectsWhatIsWrong) {
  std::array<std::byte, kDescriptorWireBytes> wire{};
  auto expectBad = [&](Descriptor d, const std::string& words) {
    encodeDescriptor(d, wire);
    auto r = decodeDescriptor(wire);
    ASSERT_FALSE(r.isOk()) << words;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(words), std::string::npos) << r.status().toString();
  };
  Descriptor d = sampleDescriptor();
  d.magic = 0;
  expectBad(d, "magic");
  d = sampleDescriptor();
  d.version = kDescriptorVersion + 1;
  expectBad(d, "version");
  d = sampleDescriptor();
  d.kind = static_cast<HandleKind>(9);
  expectBad(d, "kind");
  d = sampleDescriptor();
  d.owner_rank = -1;
  expectBad(d, "owner");
  d = sampleDescriptor();
  d.bytes = 0;
  expectBad(d, "does not fit");
  d = sampleDescriptor();
  d.offset = d.alloc_bytes - 10;
  expectBad(d, "does not fit");
  d = sampleDescriptor();
  d.offset = UINT64_MAX - 5;  // offset + bytes would wrap around
  expectBad(d, "does not fit");
  // A short or long image is refused before it is read.
  auto shortImage = decodeDescriptor(std::span<const std::byte>(wire.data(), wire.size() - 1));
  EXPECT_EQ(shortImage.status().code(), StatusCode::kInvalidArgument);
}

TEST(IpcDescriptor, HandleKindNamesRoundTrip) {
  for (HandleKind k : {HandleKind::kLegacy, HandleKind::kVmmFd}) {
    PEERLAB_ASSERT_OK_AND_ASSIGN(HandleKind back, parseHandleKind(handleKindName(k)));
    EXPECT_EQ(back, k);
  }
  EXPECT_EQ(parseHandleKind("cuda-ipc").status().code(), StatusCode::kInvalidArgument);
}

// A stand-in for ImportedBuffer: move-only, counts how many were closed.
struct FakeMapping {
  static inline int closed = 0;
  int id = 0;
  uint64_t buffer_id = 0;
  bool live = true;
  FakeMapping(int i, uint64_t b) : id(i), buffer_id(b) {}
  FakeMapping(FakeMapping&& o) noexcept : id(o.id), buffer_id(o.buffer_id), live(o.live) { o.live = false; }
  FakeMapping& operator=(FakeMapping&& o) noexcept {
    if (live) ++closed;
    id = o.id;
    buffer_id = o.buffer_id;
    live = o.live;
    o.live = false;
    return *this;
  }
  FakeMapping(const FakeMapping&) = delete;
  ~FakeMapping() {
    if (live) ++closed;
  }
};

struct FakeOpener {
  int opens = 0;
  std::vector<int> fds_seen;
  bool fail = false;
  BasicHandleCache<FakeMapping>::Opener fn() {
    return [this](const Descriptor& d, int fd) -> StatusOr<FakeMapping> {
      fds_seen.push_back(fd);
      if (fail) return PEERLAB_UNAVAILABLE("fake open failure");
      return FakeMapping(++opens, d.buffer_id);
    };
  }
};

Descriptor legacyDescriptor(int peer, uint64_t buffer_id, uint64_t offset, uint64_t address) {
  Descriptor d = sampleDescriptor();
  d.kind = HandleKind::kLegacy;
  d.owner_rank = peer;
  d.buffer_id = buffer_id;
  d.offset = offset;
  d.exporter_address = address;
  return d;
}

TEST(HandleCache, SameRangeHitsAndOpensOnce) {
  FakeOpener opener;
  BasicHandleCache<FakeMapping> cache(opener.fn());
  const Descriptor d = legacyDescriptor(1, 10, 0, 0x1000);
  PEERLAB_ASSERT_OK_AND_ASSIGN(const FakeMapping* a, cache.get(d));
  PEERLAB_ASSERT_OK_AND_ASSIGN(const FakeMapping* b, cache.get(d));
  EXPECT_EQ(a, b);
  EXPECT_EQ(opener.opens, 1);
  EXPECT_EQ(cache.hits(), 1u);
  EXPECT_EQ(cache.misses(), 1u);
  EXPECT_EQ(cache.find(d), a);
}

TEST(HandleCache, ReusedAddressOfANewBufferMisses) {
  FakeOpener opener;
  BasicHandleCache<FakeMapping> cache(opener.fn());
  // The exporter freed buffer 10 and got buffer 11 at the same address: the stale mapping must not be returned.
  const Descriptor old_buf = legacyDescriptor(1, 10, 0, 0x7f0000000000ull);
  const Descriptor new_buf = legacyDescriptor(1, 11, 0, 0x7f0000000000ull);
  PEERLAB_ASSERT_OK_AND_ASSIGN(const FakeMapping* a, cache.get(old_buf));
  PEERLAB_ASSERT_OK_AND_ASSIGN(const FakeMapping* b, cache.get(new_buf));
  EXPECT_NE(a, b);
  EXPECT_EQ(b->buffer_id, 11u);
  EXPECT_EQ(opener.opens, 2);
  EXPECT_EQ(cache.hits(), 0u);
}

TEST(HandleCache, KeyIncludesPeerProcessKindAndOffset) {
  FakeOpener opener;
  BasicHandleCache<FakeMapping> cache(opener.fn());
  const Descriptor base = legacyDescriptor(1, 10, 0, 0x1000);
  PEERLAB_ASSERT_OK(cache.get(base).status());
  Descriptor other_peer = base;
  other_peer.owner_rank = 2;  // buffer ids are only unique within one process
  Descriptor restarted = base;
  restarted.owner_pid = base.owner_pid + 1;
  Descriptor other_offset = base;
  other_offset.offset = 256;
  for (const Descriptor& d : {other_peer, restarted, other_offset})
    PEERLAB_ASSERT_OK(cache.get(d).status());
  EXPECT_EQ(opener.opens, 4);
  EXPECT_EQ(cache.size(), 4u);
  // Only the exporter's address differs: same range, a hit.
  Descriptor moved = base;
  moved.exporter_address = 0x9000;
  PEERLAB_ASSERT_OK(cache.get(moved).status());
  EXPECT_EQ(opener.opens, 4);
  EXPECT_EQ(cache.hits(), 1u);
}

TEST(HandleCache, LargerRangeReplacesTheEntry) {
  FakeOpener opener;
  BasicHandleCache<FakeMapping> cache(opener.fn());
  FakeMapping::closed = 0;
  Descriptor d = legacyDescriptor(1, 10, 0, 0x1000);
  d.bytes = 4096;
  PEERLAB_ASSERT_OK(cache.get(d).status());
  d.bytes = 8192;
  PEERLAB_ASSERT_OK_AND_ASSIGN(const FakeMapping* m, cache.get(d));
  EXPECT_EQ(m->id, 2);
  EXPECT_EQ(FakeMapping::closed, 1);
  EXPECT_EQ(cache.size(), 1u);
  d.bytes = 100;  // a smaller range of the same start is covered
  PEERLAB_ASSERT_OK(cache.get(d).status());
  EXPECT_EQ(opener.opens, 2);
}

TEST(HandleCache, ErasePeerAndClearCloseTheirMappings) {
  FakeOpener opener;
  FakeMapping::closed = 0;
  {
    BasicHandleCache<FakeMapping> cache(opener.fn());
    for (uint64_t b = 1; b <= 3; ++b)
      PEERLAB_ASSERT_OK(cache.get(legacyDescriptor(1, b, 0, 0x1000 * b)).status());
    for (uint64_t b = 1; b <= 2; ++b)
      PEERLAB_ASSERT_OK(cache.get(legacyDescriptor(2, b, 0, 0x1000 * b)).status());
    EXPECT_EQ(cache.erasePeer(1), 3u);
    EXPECT_EQ(FakeMapping::closed, 3);
    EXPECT_EQ(cache.find(legacyDescriptor(1, 1, 0, 0x1000)), nullptr);
    EXPECT_NE(cache.find(legacyDescriptor(2, 1, 0, 0x1000)), nullptr);
    EXPECT_TRUE(cache.erase(legacyDescriptor(2, 1, 0, 0)));
    EXPECT_FALSE(cache.erase(legacyDescriptor(2, 1, 0, 0)));
    EXPECT_EQ(FakeMapping::closed, 4);
  }
  // The last one is closed with the cache: every open was closed.
  EXPECT_EQ(FakeMapping::closed, opener.opens);
}

TEST(HandleCache, VmmDescriptorsNeedAnFdAndTheCacheClosesIt) {
  FakeOpener opener;
  BasicHandleCache<FakeMapping> cache(opener.fn());
  Descriptor d = sampleDescriptor();  // kVmmFd
  auto missing = cache.get(d, -1);
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(opener.opens, 0);

  int p1[2], p2[2];
  ASSERT_EQ(pipe2(p1, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(p2, O_CLOEXEC), 0);
  PEERLAB_ASSERT_OK(cache.get(d, p1[0]).status());  // miss: the opener sees the fd, then it is closed
  EXPECT_EQ(opener.fds_seen.back(), p1[0]);
  EXPECT_EQ(fcntl(p1[0], F_GETFD), -1) << "fd left open after a miss";
  PEERLAB_ASSERT_OK(cache.get(d, p2[0]).status());  // hit: the fd is closed unused
  EXPECT_EQ(fcntl(p2[0], F_GETFD), -1) << "fd left open after a hit";
  EXPECT_EQ(opener.opens, 1);
  close(p1[1]);
  close(p2[1]);
}

TEST(HandleCache, FailedOpenCachesNothing) {
  FakeOpener opener;
  opener.fail = true;
  BasicHandleCache<FakeMapping> cache(opener.fn());
  const Descriptor d = legacyDescriptor(1, 10, 0, 0x1000);
  EXPECT_EQ(cache.get(d).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(cache.size(), 0u);
  opener.fail = false;
  PEERLAB_ASSERT_OK(cache.get(d).status());
  EXPECT_EQ(cache.misses(), 2u);
}

TEST(HandleCache, InvalidDescriptorIsRejected) {
  FakeOpener opener;
  BasicHandleCache<FakeMapping> cache(opener.fn());
  Descriptor d = legacyDescriptor(1, 10, 0, 0x1000);
  d.magic = 1;
  EXPECT_EQ(cache.get(d).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(opener.opens, 0);
}

// Plays the schedule of every rank against rendezvous semantics (a send completes only when the peer is at the
// matching receive): it must finish for every size, and every ordered pair exchanges exactly once.
TEST(FdExchangeSchedule, CompletesWithoutDeadlockForEverySize) {
  for (int n = 1; n <= 9; ++n) {
    std::vector<std::vector<FdStep>> steps(static_cast<size_t>(n));
    std::map<std::pair<int, int>, int> sends, recvs;
    for (int r = 0; r < n; ++r) {
      steps[static_cast<size_t>(r)] = fdExchangeSchedule(r, n);
      EXPECT_EQ(steps[static_cast<size_t>(r)].size(), static_cast<size_t>(2 * (n - 1)));
      for (const FdStep& s : steps[static_cast<size_t>(r)]) {
        EXPECT_NE(s.peer, r);
        (s.send ? sends[{r, s.peer}] : recvs[{s.peer, r}])++;
      }
    }
    for (int a = 0; a < n; ++a) {
      for (int b = 0; b < n; ++b) {
        if (a == b) continue;
        EXPECT_EQ((sends[{a, b}]), 1) << a << "->" << b << " of " << n;
        EXPECT_EQ((recvs[{a, b}]), 1) << a << "->" << b << " of " << n;
      }
    }
    std::vector<size_t> at(static_cast<size_t>(n), 0);
    bool progress = true;
    while (progress) {
      progress = false;
      for (int a = 0; a < n; ++a) {
        if (at[static_cast<size_t>(a)] == steps[static_cast<size_t>(a)].size()) continue;
        const FdStep& s = steps[static_cast<size_t>(a)][at[static_cast<size_t>(a)]];
        if (!s.send) continue;
        const int b = s.peer;
        if (at[static_cast<size_t>(b)] == steps[static_cast<size_t>(b)].size()) continue;
        const FdStep& t = steps[static_cast<size_t>(b)][at[static_cast<size_t>(b)]];
        if (!t.send && t.peer == a) {
          ++at[static_cast<size_t>(a)];
          ++at[static_cast<size_t>(b)];
          progress = true;
        }
      }
    }
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(at[static_cast<size_t>(r)], steps[static_cast<size_t>(r)].size())
          << "rank " << r << " of " << n << " is stuck at step " << at[static_cast<size_t>(r)];
    }
  }
}

// A rank that cannot export joins the exchange with an invalid descriptor: every rank fails promptly, and all of
// them made the same collective calls (the barrier afterwards matches).
TEST(IpcExchange, ARankThatCannotExportFailsEveryRank) {
  PEERLAB_TEST_RANKS(3, boot);
  ExportAllocation bogus;
  bogus.ptr = reinterpret_cast<void*>(0x1000);
  bogus.bytes = 4096;
  bogus.alloc_bytes = 4096;
  bogus.device = -1;  // no such device: describe() fails on every machine
  bogus.kind = HandleKind::kVmmFd;
  const auto start = std::chrono::steady_clock::now();
  auto r = exchange(boot, bogus, ImportOptions{}, Deadline::afterMs(20'000));
  EXPECT_FALSE(r.isOk());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  PEERLAB_ASSERT_OK(boot.barrier(Deadline::afterMs(20'000)));
  EXPECT_TRUE(counters().balanced()) << counters().toString();
}

TEST(IpcExchange, SymmetricMemoryOnAMissingDeviceFailsEveryRank) {
  PEERLAB_TEST_RANKS(2, boot);
  auto sym = SymmetricMemory::create(boot, 4096, 1 << 20, HandleKind::kVmmFd, Deadline::afterMs(20'000));
  EXPECT_FALSE(sym.isOk());
  PEERLAB_ASSERT_OK(boot.barrier(Deadline::afterMs(20'000)));
}

}  // namespace
}  // namespace peerlab::ipc
