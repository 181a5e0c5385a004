#include "reference/alltoallv/layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <numeric>
#include <random>
#include <vector>

#include "reference/alltoallv/alltoallv.h"
#include "reference/core/device_time.cuh"
#include "reference/core/local_bootstrap.h"
#include "reference/testing/testing.h"

namespace peerlab::alltoallv {
namespace {

TEST(Layout, OffsetsArePrefixSumsOfRowsAndColumns) {
  // m[src][dst]
  const std::vector<uint64_t> m = {1, 2, 3,  //
                                   4, 0, 6,  //
                                   0, 8, 9};
  EXPECT_EQ(sendOffset(m.data(), 3, 0, 0), 0u);
  EXPECT_EQ(sendOffset(m.data(), 3, 0, 2), 3u);
  EXPECT_EQ(sendOffset(m.data(), 3, 1, 2), 4u);
  EXPECT_EQ(sendTotal(m.data(), 3, 2), 17u);
  EXPECT_EQ(recvOffset(m.data(), 3, 0, 1), 0u);
  EXPECT_EQ(recvOffset(m.data(), 3, 2, 1), 2u);
  EXPECT_EQ(recvOffset(m.data(), 3, 2, 2), 9u);
  EXPECT_EQ(recvTotal(m.data(), 3, 0), 5u);
  EXPECT_EQ(recvTotal(m.data(), 3, 2), 18u);
}

TEST(Layout, OffsetsMatchANaiveScanOnRandomMatrices) {
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + static_cast<int>(rng() % kMaxRanks);
    std::vector<uint64_t> m(static_cast<size_t>(n) * n);
    for (auto& v : m)
      v = rng() % 5 == 0 ? 0 : rng() % 100000;
    for (int s = 0; s < n; ++s) {
      for (int d = 0; d < n; ++d) {
        uint64_t send = 0, recv = 0;
        for (int k = 0; k < d; ++k)
          send += m[s * n + k];
        for (int k = 0; k < s; ++k)
          recv += m[k * n + d];
        ASSERT_EQ(sendOffset(m.data(), n, s, d), send);
        ASSERT_EQ(recvOffset(m.data(), n, s, d), recv);
      }
    }
    // Receive segments tile [0, recvTotal) with no gap or overlap.
    for (int d = 0; d < n; ++d) {
      uint64_t end = 0;
      for (int s = 0; s < n; ++s) {
        ASSERT_EQ(recvOffset(m.data(), n, s, d), end);
        end += m[s * n + d];
      }
      ASSERT_EQ(end, recvTotal(m.data(), n, d));
    }
  }
}

TEST(Layout, SplitGivesEveryNonEmptySegmentACtaAndUsesThemAll) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const int n = 1 + static_cast<int>(rng() % kMaxRanks);
    const int self = static_cast<int>(rng() % n);
    uint64_t bytes[kMaxRanks] = {};
    int nonempty = 0;
    for (int i = 0; i < n; ++i) {
      bytes[i] = rng() % 3 == 0 ? 0 : rng() % (uint64_t{1} << (rng() % 34));
      nonempty += bytes[i] ? 1 : 0;
    }
    const int ctas = n + static_cast<int>(rng() % 140);
    int g[kMaxRanks];
    splitCtas(bytes, n, self, ctas, g);
    int sum = 0;
    for (int i = 0; i < n; ++i) {
      sum += g[i];
      if (bytes[i] == 0) {
        ASSERT_EQ(g[i], 0) << "empty segment " << i << " got CTAs";
      } else {
        ASSERT_GE(g[i], 1) << "segment " << i << " of " << bytes[i] << " bytes got none";
      }
    }
    ASSERT_EQ(sum, nonempty ? ctas : 0);
    // Deterministic: the same input gives the same split.
    int again[kMaxRanks];
    splitCtas(bytes, n, self, ctas, again);
    for (int i = 0; i < n; ++i)
      ASSERT_EQ(g[i], again[i]);
  }
}

TEST(Layout, SplitFollowsTheBytesAndWeighsTheLocalCopyDown) {
  const uint64_t bytes[4] = {1 << 20, 3 << 20, 1 << 20, 3 << 20};
  int g[4];
  splitCtas(bytes, 4, /*self=*/3, 64, g);
  EXPECT_GT(g[1], 2 * g[0]);  // three times the bytes, clearly more CTAs
  EXPECT_LT(g[3], g[1]);      // the same bytes locally get fewer CTAs than over NVLink
  EXPECT_EQ(g[0] + g[1] + g[2] + g[3], 64);
}

TEST(Layout, SplitWithFewerCtasThanSegmentsFavoursTheBiggest) {
  const uint64_t bytes[4] = {10, 1000, 0, 100};
  int g[4];
  splitCtas(bytes, 4, 0, 2, g);
  EXPECT_EQ(g[1], 1);
  EXPECT_EQ(g[3], 1);
  EXPECT_EQ(g[0] + g[2], 0);
}

TEST(Layout, CopyPlanAlignsTheDestinationAndCoversEveryByte) {
  for (uint64_t src = 0; src < 32; ++src) {
    for (uint64_t dst = 0; dst < 32; ++dst) {
      for (uint64_t bytes : {0ull, 1ull, 5ull, 15ull, 16ull, 17ull, 31ull, 32ull, 33ull, 1000ull, 4099ull}) {
        const uint64_t sa = 0x10000 + src, da = 0x20000 + dst;
        const CopyPlan p = planCopy(sa, da, bytes);
        ASSERT_EQ(p.head + 16 * p.chunks + p.tail, bytes);
        ASSERT_LT(p.head, 16u);
        ASSERT_LT(p.tail, 16u);
        if (p.chunks) {
          ASSERT_EQ((da + p.head) % 16, 0u);
        }
        ASSERT_EQ(p.shift, (sa + p.head) % 16);
        if (src % 16 == dst % 16 && p.chunks > 0) {
          ASSERT_EQ(p.shift, 0u);
        }
      }
    }
  }
}

TEST(Layout, PiecesTileTheBodyWithoutGapsOrOverlap) {
  for (uint64_t chunks : {0ull, 1ull, 7ull, 64ull, 1000003ull}) {
    for (int pieces : {1, 2, 3, 8, 33, 132}) {
      uint64_t expect = 0;
      for (int i = 0; i < pieces; ++i) {
        uint64_t b, e;
        pieceRange(chunks, pieces, i, &b, &e);
        ASSERT_EQ(b, expect);
        ASSERT_LE(e - b, chunks / pieces + 1);
        expect = e;
      }
      ASSERT_EQ(expect, chunks);
    }
  }
}

TEST(Layout, CountWordsCarryEpochAndCountAndSaturate) {
  const uint64_t w = packCount(0xDEADBEEFu, 123456789u);
  EXPECT_EQ(countEpoch(w), 0xDEADBEEFu);
  EXPECT_EQ(countValue(w), 123456789u);
  EXPECT_EQ(countValue(packCount(5, uint64_t{1} << 33)), kCountInvalid);
  EXPECT_EQ(countValue(packCount(5, kCountInvalid)), kCountInvalid);
  // A freshly zeroed slot never matches the first call's epoch (1).
  EXPECT_NE(countEpoch(0), 1u);
}

TEST(Layout, ControlWordsDoNotOverlap) {
  // Counts [kMaxRanks][kMaxRanks], completion flags [kMaxRanks], arrived bytes [2][kMaxRanks], all 8-byte words.
  EXPECT_LE(RegionLayout::kCountsOffset + kMaxRanks * kMaxRanks * 8, RegionLayout::kDoneOffset);
  EXPECT_LE(RegionLayout::kDoneOffset + kMaxRanks * 8, RegionLayout::kArrivedBytesOffset);
  EXPECT_LE(RegionLayout::kArrivedBytesOffset + 2 * kMaxRanks * 8, RegionLayout::kControlBytes);
  EXPECT_EQ(RegionLayout::kArrivedBytesOffset % 8, 0u);
}

TEST(Layout, RegionLayoutKeepsBuffersAlignedAndTheGuardInside) {
  for (uint64_t send : {0ull, 1ull, 3ull, 4096ull, 1000001ull}) {
    for (uint64_t recv : {0ull, 7ull, 65536ull, 3000003ull}) {
      const RegionLayout l = RegionLayout::make(send, recv);
      EXPECT_EQ(l.send_offset % 256, 0u);
      EXPECT_EQ(l.recv_offset % 256, 0u);
      EXPECT_GE(l.recv_offset, l.send_offset + send);
      EXPECT_GE(l.total_bytes, l.recv_offset + recv + RegionLayout::kGuardBytes);
      EXPECT_GE(l.send_offset, RegionLayout::kArrivedBytesOffset + 2 * kMaxRanks * 8);
      EXPECT_EQ(l.total_bytes % 4096, 0u);
    }
  }
}

TEST(Layout, RegionLayoutPutsTheLlSlotsBeforeTheSendBuffer) {
  for (int ranks : {1, 2, 4, 8}) {
    for (uint64_t ll : {0ull, 8ull, 1000ull, 65536ull}) {
      const RegionLayout l = RegionLayout::make(12345, 777, ranks, ll);
      EXPECT_EQ(l.staging_offset % 16, 0u);
      EXPECT_EQ(l.slot_stride % 16, 0u);
      EXPECT_GE(l.slot_stride, 16 * (kLlHeaderWords + llWords(ll)));
      EXPECT_EQ(l.staging_bytes, 2ull * ranks * l.slot_stride);
      EXPECT_GE(l.staging_offset, RegionLayout::kArrivedBytesOffset + 2 * kMaxRanks * 8);
      EXPECT_GE(l.send_offset, l.staging_offset + l.staging_bytes);
      EXPECT_EQ(l.send_offset % 256, 0u);
      EXPECT_GE(l.recv_offset, l.send_offset + 12345);
      // load8 may read 15 bytes past the send buffer's end: still inside the region.
      EXPECT_GE(l.recv_offset + 16, l.send_offset + 12345 + 15);
      EXPECT_GE(l.total_bytes, l.recv_offset + 777 + RegionLayout::kGuardBytes);
    }
  }
  // Without slots (two-phase) the layout is the one it always was.
  EXPECT_EQ(RegionLayout::make(100, 100).staging_bytes, 0u);
  EXPECT_EQ(RegionLayout::make(100, 100).send_offset, RegionLayout::kControlBytes);
}

TEST(Layout, LlTagsNeverZeroAndDifferForCallsSharingASlot) {
  for (uint64_t e : {1ull, 2ull, 3ull, 1000ull, 0xFFFFFFFEull, 0xFFFFFFFFull, 0x100000000ull, 0x100000001ull,
                     0x1FFFFFFFEull, 0x1FFFFFFFFull, ~0ull - 5}) {
    EXPECT_NE(llTag(e), 0u) << e;
    EXPECT_NE(llTag(e), llTag(e + 2)) << e;
    EXPECT_NE(llTag(e), llTag(e + 1)) << e;
  }
  EXPECT_EQ(llTag(1), 1u);
  EXPECT_EQ(llHeaderWords(1), 1u);
  EXPECT_EQ(llHeaderWords(4), 2u);
  EXPECT_EQ(llHeaderWords(7), 4u);
  EXPECT_EQ(llHeaderWords(kMaxRanks), kLlHeaderWords);
  EXPECT_EQ(llWords(0), 0u);
  EXPECT_EQ(llWords(1), 1u);
  EXPECT_EQ(llWords(8), 1u);
  EXPECT_EQ(llWords(9), 2u);
}

TEST(Layout, LoadUpTo8ReadsExactlyItsBytesAtEveryAlignment) {
  alignas(16) uint8_t src[32];
  for (int i = 0; i < 32; ++i)
    src[i] = static_cast<uint8_t>(i * 37 + 11);
  for (int o = 0; o < 16; ++o) {
    for (uint64_t n = 0; n <= 8; ++n) {
      uint64_t want = 0;
      std::memcpy(&want, src + o, n);
      EXPECT_EQ(loadUpTo8(src + o, n), want) << "offset " << o << " n " << n;
    }
  }
}

TEST(Layout, Load8AndStore8MoveExactlyTheirBytesAtEveryAlignment) {
  alignas(16) uint8_t src[64];
  for (int i = 0; i < 64; ++i)
    src[i] = static_cast<uint8_t>(i * 37 + 11);
  for (int o = 0; o < 16; ++o) {
    uint64_t want = 0;
    std::memcpy(&want, src + o, 8);
    EXPECT_EQ(load8(src + o), want) << "offset " << o;
  }
  for (int o = 0; o < 16; ++o) {
    for (uint64_t len = 1; len <= 8; ++len) {
      alignas(16) uint8_t dst[32];
      std::memset(dst, 0xEE, sizeof(dst));
      store8(dst + o, 0x0807060504030201ull, len);
      for (int i = 0; i < 32; ++i) {
        const bool inside = i >= o && i < o + static_cast<int>(len);
        ASSERT_EQ(dst[i], inside ? static_cast<uint8_t>(i - o + 1) : 0xEE) << "offset " << o << " len " << len;
      }
    }
  }
}

TEST(Layout, QueueChunksTileEverySegmentOnce) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 3000; ++trial) {
    const uint64_t bytes = rng() % 5 == 0 ? rng() % 40 : rng() % 100000;
    const CopyPlan p = planCopy(rng() % 4096, rng() % 4096, bytes);
    const uint64_t units = 1 + rng() % 300;
    const uint64_t chunks = queueChunks(p, bytes, units);
    if (bytes == 0) {
      ASSERT_EQ(chunks, 0u);
      continue;
    }
    ASSERT_GE(chunks, 1u);
    uint64_t next = 0;
    for (uint64_t c = 0; c < chunks; ++c) {
      uint64_t b = 0, e = 0;
      queueChunkRange(p, units, c, &b, &e);
      ASSERT_EQ(b, next);
      ASSERT_LE(e - b, units);
      ASSERT_TRUE(e > b || p.chunks == 0);
      next = e;
    }
    ASSERT_EQ(next, p.chunks);
  }
  for (uint64_t total : {0ull, 1ull << 20, 1ull << 27, 1ull << 34}) {
    for (int ctas : {1, 4, 132, 264}) {
      const uint64_t c = autoChunkBytes(total, ctas);
      EXPECT_GE(c, kMinChunkBytes);
      EXPECT_LE(c, kMaxChunkBytes);
      EXPECT_EQ(c % 16, 0u);
    }
  }
  // 128 MB per rank over 132 CTAs: 64 KB chunks, about 16 per CTA.
  EXPECT_EQ(autoChunkBytes(128ull << 20, 132), 64u * 1024);
}

TEST(Layout, QueueJobsStartSpreadOrInStep) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 500; ++trial) {
    const int n = 2 + static_cast<int>(rng() % (kMaxRanks - 1));
    std::vector<uint64_t> m(static_cast<size_t>(n) * n);
    for (auto& v : m)
      v = rng() % 4 == 0 ? 0 : rng() % 100000;
    const int me = static_cast<int>(rng() % n);
    const uint64_t ll = rng() % 3 == 0 ? 0 : rng() % 50000;
    const QueueJobs q = queueJobs(m.data(), n, me, 4, ll);
    int expect = m[me * n + me] ? 1 : 0;
    for (int d = 0; d < n; ++d)
      expect += d != me && m[me * n + d] * 4 > ll ? 1 : 0;
    ASSERT_EQ(q.count, expect);
    ASSERT_EQ(q.self >= 0, m[me * n + me] != 0);
    if (q.count == 0) continue;
    const int ctas = 1 + static_cast<int>(rng() % 200);
    std::vector<int> spread(q.count, 0);
    std::vector<int> in_step(q.count, 0);
    for (int b = 0; b < ctas; ++b) {
      for (const bool step : {false, true}) {
        const int j = queueStartJob(q, ctas, b, step);
        ASSERT_GE(j, 0);
        ASSERT_LT(j, q.count);
        ++(step ? in_step : spread)[j];
      }
    }
    // Spread: every job has a CTA from the start (when there are enough CTAs).
    if (ctas >= q.count) {
      for (int j = 0; j < q.count; ++j)
        ASSERT_GE(spread[j], 1) << "job " << j << " has no CTA at the start";
    }
    // In step: the first peer job and the local copy (with its spread share) are the only starting jobs.
    for (int j = 1; j < q.count; ++j) {
      if (j == q.self) {
        ASSERT_EQ(in_step[j], spread[j]) << "the local copy keeps its share";
      } else {
        ASSERT_EQ(in_step[j], 0) << "peer job " << j << " started before its turn";
      }
    }
    ASSERT_EQ(in_step[0], ctas - (q.self > 0 ? spread[q.self] : 0));
  }
}

TEST(Layout, QueueInStepOnlyForEvenLargeTraffic) {
  const int n = 4;
  std::vector<uint64_t> m(n * n, 1000);
  m[0] = 5;  // the diagonal does not count
  EXPECT_TRUE(queueInStep(m.data(), n, 4, 3999));
  EXPECT_FALSE(queueInStep(m.data(), n, 4, 4000)) << "a segment at the LL threshold is not large";
  m[1 * n + 2] = 876;  // 12.4% below the largest
  EXPECT_TRUE(queueInStep(m.data(), n, 4, 0));
  m[1 * n + 2] = 874;  // 12.6% below
  EXPECT_FALSE(queueInStep(m.data(), n, 4, 0));
  m[1 * n + 2] = 1000;
  m[3 * n + 0] = 1200;  // one hot cell
  EXPECT_FALSE(queueInStep(m.data(), n, 4, 0));
  m[3 * n + 0] = 0;  // an empty segment
  EXPECT_FALSE(queueInStep(m.data(), n, 4, 0));
  const std::vector<uint64_t> two(4, 1000);
  EXPECT_FALSE(queueInStep(two.data(), 2, 4, 0)) << "one peer: nothing to put in step";
}

// One fused call simulated on the host with the kernel's own bookkeeping (layout.h): every sender writes its header
// and small segments into LL slots and pushes its large segments in queue chunks (the local copy too when the call
// has a large segment, else in grid pieces); every receiver rebuilds the matrix from the headers and copies its small
// segments out. Every receive buffer must hold exactly the expected bytes, each written once.
TEST(FusedProtocol, SimulatedCallDeliversEveryByteExactlyOnce) {
  std::mt19937_64 rng(2026);
  const uint64_t elems[] = {1, 2, 3, 4, 6, 8, 16, 24};
  const uint64_t lls[] = {0, 8, 40, 512, 4096};
  for (int trial = 0; trial < 400; ++trial) {
    const int n = 1 + static_cast<int>(rng() % kMaxRanks);
    const uint64_t eb = elems[rng() % 8];
    const uint64_t ll = lls[rng() % 5];
    const uint64_t units = 1 + rng() % 8;
    const int grid = 1 + static_cast<int>(rng() % 6);
    const uint32_t tag = llTag(1 + rng() % 100);
    const uint64_t hw = llHeaderWords(n);
    std::vector<uint64_t> m(static_cast<size_t>(n) * n);
    for (auto& v : m)
      v = rng() % 4 == 0 ? 0 : rng() % 300;
    // Regions: send bytes then 16 bytes of slack (load8 reads past the end), receive buffers with a poisoned tail.
    std::vector<std::vector<uint8_t>> send(n), recv(n), writes(n);
    for (int r = 0; r < n; ++r) {
      send[r].resize(sendTotal(m.data(), n, r) * eb + 16);
      for (auto& b : send[r])
        b = static_cast<uint8_t>(rng());
      recv[r].assign(recvTotal(m.data(), n, r) * eb + 32, 0xA5);
      writes[r].assign(recv[r].size(), 0);
    }
    // slots[receiver][source]: 16-byte LL words {data lo, tag, data hi, tag}.
    std::vector<std::vector<std::vector<std::array<uint32_t, 4>>>> slots(
        n, std::vector<std::vector<std::array<uint32_t, 4>>>(
               n, std::vector<std::array<uint32_t, 4>>(kLlHeaderWords + llWords(ll), {0, 0, 0, 0})));
    auto put = [&](int to, int from, uint64_t idx, uint64_t data) {
      ASSERT_LT(idx, slots[to][from].size()) << "LL word outside the slot";
      slots[to][from][idx] = {static_cast<uint32_t>(data), tag, static_cast<uint32_t>(data >> 32), tag};
    };
    auto write = [&](int r, uint64_t at, uint8_t v) {
      ASSERT_LT(at, recvTotal(m.data(), n, r) * eb) << "write past the receive total";
      recv[r][at] = v;
      ++writes[r][at];
    };
    // 1. Senders: header and small segments, as the grid-wide list hands them out.
    for (int s = 0; s < n; ++s) {
      const uint64_t* row = &m[s * n];
      const LlList list = llSendList(row, true, n, s, eb, ll);
      for (uint64_t w = 0; w < list.words; ++w) {
        const int j = llPeerIndex(list, n, w);
        const int d = llSendPeer(s, j, n);
        const uint64_t k = w - list.first[j];
        if (k < hw) {
          put(d, s, k, llHeaderData(row, n, k));
        } else {
          put(d, s, kLlHeaderWords + k - hw, load8(send[s].data() + sendOffset(m.data(), n, s, d) * eb + 8 * (k - hw)));
        }
      }
    }
    // 2. Receivers: the matrix from the headers.
    for (int d = 0; d < n; ++d) {
      for (int s = 0; s < n; ++s) {
        if (s == d) continue;
        for (uint64_t k = 0; k < hw; ++k) {
          const auto& word = slots[d][s][k];
          ASSERT_TRUE(word[1] == tag && word[3] == tag) << "header word " << k << " from " << s << " missing";
          ASSERT_EQ(word[0], m[s * n + 2 * k]);
          if (2 * k + 1 < static_cast<uint64_t>(n)) {
            ASSERT_EQ(word[2], m[s * n + 2 * k + 1]);
          }
        }
      }
    }
    // 3. Large segments and the local copy through the queue, chunk by chunk (or the local copy in grid pieces).
    auto copyChunk = [&](int s, int d, const CopyPlan& p, uint64_t c0, uint64_t c1, bool head, bool tail) {
      const uint8_t* src = send[s].data() + sendOffset(m.data(), n, s, d) * eb;
      const uint64_t at = recvOffset(m.data(), n, s, d) * eb;
      auto byte = [&](uint64_t i) { write(d, at + i, src[i]); };
      if (head)
        for (uint64_t i = 0; i < p.head; ++i)
          byte(i);
      for (uint64_t i = p.head + 16 * c0; i < p.head + 16 * c1; ++i)
        byte(i);
      if (tail)
        for (uint64_t i = p.head + 16 * p.chunks; i < p.head + 16 * p.chunks + p.tail; ++i)
          byte(i);
    };
    for (int s = 0; s < n; ++s) {
      bool large = false;
      for (int i = 0; i < n; ++i)
        large = large || (i != s && (m[s * n + i] * eb > ll || m[i * n + s] * eb > ll));
      // Addresses as the kernel sees them: the plan depends only on their low 4 bits.
      auto planFor = [&](int d) {
        const uint64_t bytes = m[s * n + d] * eb;
        return planCopy(sendOffset(m.data(), n, s, d) * eb, recvOffset(m.data(), n, s, d) * eb + 256, bytes);
      };
      if (large) {
        const QueueJobs q = queueJobs(m.data(), n, s, eb, ll);
        for (int jb = 0; jb < q.count; ++jb) {
          const CopyPlan p = planFor(q.rank[jb]);
          const uint64_t chunks = queueChunks(p, q.bytes[jb], units);
          for (uint64_t c = 0; c < chunks; ++c) {
            uint64_t c0 = 0, c1 = 0;
            queueChunkRange(p, units, c, &c0, &c1);
            copyChunk(s, q.rank[jb], p, c0, c1, c == 0, c + 1 == chunks);
          }
        }
      } else if (m[s * n + s] != 0) {
        const CopyPlan p = planFor(s);
        for (int piece = 0; piece < grid; ++piece) {
          uint64_t c0 = 0, c1 = 0;
          pieceRange(p.chunks, grid, piece, &c0, &c1);
          copyChunk(s, s, p, c0, c1, piece == 0, piece == grid - 1);
        }
      }
    }
    // 4. Receivers: small segments out of the slots.
    for (int d = 0; d < n; ++d) {
      const LlList list = llRecvList(m.data(), n, d, eb, ll);
      for (uint64_t w = 0; w < list.words; ++w) {
        const int j = llPeerIndex(list, n, w);
        const int s = llRecvPeer(d, j, n);
        const uint64_t p = w - list.first[j];
        const auto& word = slots[d][s][kLlHeaderWords + p];
        ASSERT_TRUE(word[1] == tag && word[3] == tag) << "payload word " << p << " from " << s << " never sent";
        const uint64_t bytes = m[s * n + d] * eb;
        const uint64_t at = recvOffset(m.data(), n, s, d) * eb + 8 * p;
        std::vector<uint8_t> tmp(8, 0);
        store8(tmp.data(), static_cast<uint64_t>(word[2]) << 32 | word[0], std::min<uint64_t>(8, bytes - 8 * p));
        for (uint64_t i = 0; i < std::min<uint64_t>(8, bytes - 8 * p); ++i)
          write(d, at + i, tmp[i]);
      }
    }
    if (HasFatalFailure()) return;
    // Every receive buffer: each source's segment in source order, every byte written once, nothing past the end.
    for (int d = 0; d < n; ++d) {
      for (int s = 0; s < n; ++s) {
        const uint64_t bytes = m[s * n + d] * eb;
        const uint8_t* want = send[s].data() + sendOffset(m.data(), n, s, d) * eb;
        const uint64_t at = recvOffset(m.data(), n, s, d) * eb;
        for (uint64_t i = 0; i < bytes; ++i) {
          ASSERT_EQ(writes[d][at + i], 1) << "byte " << i << " of " << s << " -> " << d << ", trial " << trial;
          ASSERT_EQ(recv[d][at + i], want[i]) << "byte " << i << " of " << s << " -> " << d << ", trial " << trial;
        }
      }
      for (uint64_t i = recvTotal(m.data(), n, d) * eb; i < recv[d].size(); ++i)
        ASSERT_EQ(recv[d][i], 0xA5);
    }
  }
}

TEST(FusedProtocol, BadOptionsAreRejectedBeforeAnyDeviceWork) {
  auto boot = singleRankBootstrap();
  ASSERT_NE(boot, nullptr);
  Options o;
  o.elem_bytes = 4;
  o.send_capacity = 16;
  o.recv_capacity = 16;
  o.protocol = Protocol::kFused;
  o.transfer = Transfer::kPull;
  EXPECT_EQ(AllToAllV::create(*boot, 0, o, Deadline::afterMs(1000)).status().code(), StatusCode::kInvalidArgument);
  o.transfer = Transfer::kPush;
  o.chunk_bytes = 1000;
  EXPECT_EQ(AllToAllV::create(*boot, 0, o, Deadline::afterMs(1000)).status().code(), StatusCode::kInvalidArgument);
  o.chunk_bytes = 0;
  o.ll_max_bytes = kMaxLlMaxBytes + 1;
  EXPECT_EQ(AllToAllV::create(*boot, 0, o, Deadline::afterMs(1000)).status().code(), StatusCode::kInvalidArgument);
  o.ll_max_bytes = kDefaultLlMaxBytes;
  o.protocol = static_cast<Protocol>(7);
  EXPECT_EQ(AllToAllV::create(*boot, 0, o, Deadline::afterMs(1000)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(protocolName(Protocol::kFused), "fused");
  EXPECT_EQ(protocolName(Protocol::kTwoPhase), "two_phase");
}

TEST(Layout, DeviceStatusBecomesAHostStatusNamingRankAndSizes) {
  DeviceStatus s{};
  EXPECT_TRUE(statusFromDevice(s, 4).isOk());
  s.code = kDeviceOverflow;
  s.rank = 2;
  s.epoch = 17;
  s.a = 5000;
  s.b = 4096;
  Status st = statusFromDevice(s, 4);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("rank 2"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("5000"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("4096"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("20000 bytes"), std::string::npos) << st.message();
  s.code = kDeviceTimeout;
  s.rank = 3;
  st = statusFromDevice(s, 4);
  EXPECT_EQ(st.code(), StatusCode::kTimeout);
  EXPECT_NE(st.message().find("rank 3"), std::string::npos) << st.message();
}

TEST(Layout, PiecesOfACopyAddUpToItsBytes) {
  for (uint64_t bytes : {0ull, 1ull, 15ull, 16ull, 17ull, 4095ull, 65536ull, 1000003ull}) {
    for (uint64_t src : {0ull, 3ull, 16ull}) {
      for (uint64_t dst : {0ull, 5ull, 15ull}) {
        const CopyPlan p = planCopy(src, dst, bytes);
        for (int pieces : {1, 2, 3, 7, 64}) {
          uint64_t sum = 0;
          for (int i = 0; i < pieces; ++i)
            sum += pieceBytes(p, pieces, i);
          EXPECT_EQ(sum, bytes) << bytes << " bytes, src " << src << ", dst " << dst << ", " << pieces << " pieces";
        }
      }
    }
  }
}

TEST(Layout, StaticSplitGivesEveryJobCtasAndEveryCtaAtMostOnePiece) {
  // 4 ranks, rank 1: three large peer segments (jobs 0..2: to ranks 2, 3, 0) and the local copy (job 3).
  const uint64_t m[16] = {0, 0, 0, 0, 3 << 20, 1 << 20, 5 << 20, 2 << 20, 0, 0, 0, 0, 0, 0, 0, 0};
  const QueueJobs q = queueJobs(m, 4, 1, 1, 512 * 1024);
  ASSERT_EQ(q.count, 4);
  for (int ctas : {4, 7, 132, 264}) {
    int per_job[kMaxRanks] = {};
    int active = 0;
    for (int cta = 0; cta < ctas; ++cta) {
      int job = -1, piece = -1, pieces = -1;
      splitJob(q, ctas, cta, &job, &piece, &pieces);
      if (job < 0) continue;
      ++active;
      ++per_job[job];
      EXPECT_LT(piece, pieces);
    }
    for (int j = 0; j < q.count; ++j)
      EXPECT_GE(per_job[j], 1) << "job " << j << " got no CTA of " << ctas;
    // About kSplitBytesPerCta per CTA: 11 MiB total wants 176 CTAs.
    EXPECT_EQ(active, std::min(ctas, 176)) << ctas << " CTAs";
    // The biggest peer segment gets the most CTAs once there are enough.
    if (ctas >= 132) {
      EXPECT_GT(per_job[0], per_job[2]);
    }
  }
  // Too little to split: one CTA per job, the others idle.
  const uint64_t small[4] = {0, 600 * 1024, 0, 0};
  const QueueJobs one = queueJobs(small, 2, 0, 1, 512 * 1024);
  ASSERT_EQ(one.count, 1);
  int job = -1, piece = -1, pieces = -1;
  splitJob(one, 132, 0, &job, &piece, &pieces);
  EXPECT_EQ(job, 0);
  EXPECT_EQ(pieces, 10);
  splitJob(one, 132, 10, &job, &piece, &pieces);
  EXPECT_EQ(job, -1);
}

}  // namespace
}  // namespace peerlab::alltoallv
