#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "reference/peer/copy_plan.h"
#include "reference/peer/peer.h"
#include "reference/testing/testing.h"

namespace peerlab::peer {
namespace {

bool oneLine(const Status& st) {
  return st.message().find('\n') == std::string::npos && !st.message().empty();
}

TEST(CopyPathNames, RoundTripAndRejectUnknown) {
  for (CopyPath p : {CopyPath::kAuto, CopyPath::kCopyEngine, CopyPath::kSmPull, CopyPath::kSmPush, CopyPath::kStaged}) {
    auto parsed = parseCopyPath(copyPathName(p));
    ASSERT_TRUE(parsed.isOk()) << parsed.status().toString();
    EXPECT_EQ(*parsed, p);
  }
  EXPECT_EQ(copyPathName(CopyPath::kCopyEngine), "ce");
  auto bad = parseCopyPath("nvlink");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("nvlink"), std::string::npos);
}

// Two distinct fake device addresses, far apart.
void* fakeDst() {
  return reinterpret_cast<void*>(uintptr_t{0x7f0000100000});
}
const void* fakeSrc() {
  return reinterpret_cast<const void*>(uintptr_t{0x7f0000900000});
}

TEST(ValidateCopy, AcceptsAWellFormedRequest) {
  for (CopyPath p : {CopyPath::kAuto, CopyPath::kCopyEngine, CopyPath::kSmPull, CopyPath::kSmPush, CopyPath::kStaged}) {
    PEERLAB_EXPECT_OK(validateCopy(CopyRequest{fakeDst(), 1, fakeSrc(), 0, 4097, p}, 4));
  }
  // One device: the copy engine and auto are fine when the ranges do not overlap.
  PEERLAB_EXPECT_OK(validateCopy(CopyRequest{fakeDst(), 2, fakeSrc(), 2, 1 << 20, CopyPath::kAuto}, 4));
  PEERLAB_EXPECT_OK(validateCopy(CopyRequest{fakeDst(), 2, fakeSrc(), 2, 1 << 20, CopyPath::kCopyEngine}, 4));
}

struct BadCase {
  const char* what;
  CopyRequest request;
  const char* mentions;
};

TEST(ValidateCopy, RejectsBadInputWithOneLineNamingIt) {
  const auto* src = static_cast<const uint8_t*>(fakeSrc());
  const std::vector<BadCase> cases = {
      {"null dst", {nullptr, 1, fakeSrc(), 0, 16, CopyPath::kAuto}, "dst is null"},
      {"null src", {fakeDst(), 1, nullptr, 0, 16, CopyPath::kAuto}, "src is null"},
      {"zero bytes", {fakeDst(), 1, fakeSrc(), 0, 0, CopyPath::kCopyEngine}, "bytes is 0"},
      {"negative src device", {fakeDst(), 1, fakeSrc(), -1, 16, CopyPath::kAuto}, "src device -1"},
      {"dst device past the end", {fakeDst(), 4, fakeSrc(), 0, 16, CopyPath::kAuto}, "dst device 4"},
      {"huge device", {fakeDst(), 1, fakeSrc(), 1000, 16, CopyPath::kAuto}, "src device 1000"},
      {"sm_pull on one device", {fakeDst(), 1, fakeSrc(), 1, 16, CopyPath::kSmPull}, "sm_pull"},
      {"sm_push on one device", {fakeDst(), 3, fakeSrc(), 3, 16, CopyPath::kSmPush}, "sm_push"},
      {"staged on one device", {fakeDst(), 0, fakeSrc(), 0, 16, CopyPath::kStaged}, "staged"},
      {"overlap on one device", {src + 100, 2, src, 2, 101, CopyPath::kAuto}, "overlap"},
      {"overlap, dst first", {src, 2, src + 8, 2, 9, CopyPath::kCopyEngine}, "overlap"},
      {"src wraps", {fakeDst(), 1, reinterpret_cast<const void*>(~uintptr_t{0} - 8), 0, 16, CopyPath::kAuto}, "wraps"},
      {"dst wraps", {reinterpret_cast<void*>(~uintptr_t{0} - 3), 1, fakeSrc(), 0, 16, CopyPath::kAuto}, "wraps"},
  };
  for (const auto& c : cases) {
    Status st = validateCopy(c.request, 4);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c.what << ": " << st.toString();
    EXPECT_TRUE(oneLine(st)) << c.what;
    EXPECT_EQ(st.message().rfind("copy: ", 0), 0u) << c.what << ": " << st.message();
    EXPECT_NE(st.message().find(c.mentions), std::string::npos) << c.what << ": " << st.message();
  }
  // Adjacent ranges on one device do not overlap.
  PEERLAB_EXPECT_OK(validateCopy(CopyRequest{src + 100, 2, src, 2, 100, CopyPath::kAuto}, 4));
  // Without devices every ordinal is out of range.
  EXPECT_EQ(validateCopy(CopyRequest{fakeDst(), 0, fakeSrc(), 0, 16, CopyPath::kAuto}, 0).code(),
            StatusCode::kInvalidArgument);
}

TEST(SelectPath, AutoUsesTheCopyEngineOrFallsBackToStaged) {
  const Status ok = Status::ok();
  const Status refused = PEERLAB_UNAVAILABLE("cudaDeviceCanAccessPeer reports that device 0 cannot access device 1");
  const Status broken = PEERLAB_STATUS(StatusCode::kCudaError, "cudaDeviceEnablePeerAccess: cudaErrorUnknown");

  EXPECT_EQ(*selectPath(CopyPath::kAuto, false, ok), CopyPath::kCopyEngine);
  EXPECT_EQ(*selectPath(CopyPath::kAuto, false, refused), CopyPath::kStaged);
  EXPECT_EQ(selectPath(CopyPath::kAuto, false, broken).status().code(), StatusCode::kCudaError);
  for (CopyPath p : {CopyPath::kCopyEngine, CopyPath::kSmPull, CopyPath::kSmPush}) {
    EXPECT_EQ(*selectPath(p, false, ok), p);
    auto no = selectPath(p, false, refused);
    EXPECT_EQ(no.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(no.status().message().find("needs peer access"), std::string::npos) << no.status().message();
    EXPECT_NE(no.status().message().find("cannot access"), std::string::npos) << no.status().message();
  }
  // Staged never needs peer access.
  EXPECT_EQ(*selectPath(CopyPath::kStaged, false, refused), CopyPath::kStaged);
  EXPECT_EQ(*selectPath(CopyPath::kStaged, false, broken), CopyPath::kStaged);
  // One device: the copy engine, whatever peer access says.
  EXPECT_EQ(*selectPath(CopyPath::kAuto, true, broken), CopyPath::kCopyEngine);
  EXPECT_EQ(*selectPath(CopyPath::kCopyEngine, true, ok), CopyPath::kCopyEngine);
  EXPECT_EQ(selectPath(CopyPath::kSmPull, true, ok).status().code(), StatusCode::kInvalidArgument);
}

TEST(StagedPlan, CoversEveryByteWithBoundedChunks) {
  const std::vector<size_t> sizes = {
      1,      15,      4095,          4096,     4097,           65535,     65536,           262143,         262144,
      262145, 1 << 20, (1 << 20) + 3, 8u << 20, (8u << 20) + 1, 64u << 20, (64u << 20) + 5, size_t{1} << 30};
  for (size_t max_chunk : {size_t{1}, size_t{4096}, size_t{5000}, size_t{1} << 20, size_t{8} << 20}) {
    const size_t cap = std::max<size_t>(4096, max_chunk / 4096 * 4096);
    for (size_t bytes : sizes) {
      const StagedPlan p = stagedPlan(bytes, max_chunk);
      ASSERT_GE(p.count, 1u) << bytes;
      EXPECT_LE(p.chunk, cap) << bytes << " " << max_chunk;
      EXPECT_GT(p.last, 0u);
      EXPECT_LE(p.last, p.chunk);
      size_t covered = 0;
      for (size_t i = 0; i < p.count; ++i) {
        EXPECT_EQ(p.offset(i), covered);
        covered += p.size(i);
      }
      EXPECT_EQ(covered, bytes) << "bytes=" << bytes << " max_chunk=" << max_chunk;
      if (p.count > 1) {
        EXPECT_EQ(p.chunk % 4096, 0u);
      }
      // Large copies are cut in at least four chunks so that both halves of the double buffer overlap.
      if (bytes >= 4 * kMinStagingChunk) {
        EXPECT_GE(p.count, 4u) << bytes;
      }
      if (bytes < 4 * kMinStagingChunk && bytes <= cap) {
        EXPECT_EQ(p.count, 1u) << bytes;
      }
    }
  }
  EXPECT_EQ(stagedPlan(0, 8 << 20).count, 0u);
  // 1 GiB through 8 MiB buffers: 128 chunks.
  EXPECT_EQ(stagedPlan(size_t{1} << 30, 8 << 20).count, 128u);
}

TEST(Funnel, JoinsTwoBlocksAtEveryShift) {
  uint8_t bytes[32];
  for (int i = 0; i < 32; ++i)
    bytes[i] = static_cast<uint8_t>(0xA0 + i);
  uint4 a, b;
  std::memcpy(&a, bytes, 16);
  std::memcpy(&b, bytes + 16, 16);
  auto check = [&](int shift, uint4 out) {
    uint8_t got[16];
    std::memcpy(got, &out, 16);
    for (int i = 0; i < 16; ++i)
      EXPECT_EQ(got[i], bytes[shift + i]) << "shift " << shift << " byte " << i;
  };
  for (int shift = 1; shift < 16; ++shift) {
    const uint32_t bits = (shift & 3) * 8;
    switch (shift / 4) {
      case 0:
        check(shift, funnelVector<0>(a, b, bits));
        break;
      case 1:
        check(shift, funnelVector<1>(a, b, bits));
        break;
      case 2:
        check(shift, funnelVector<2>(a, b, bits));
        break;
      default:
        check(shift, funnelVector<3>(a, b, bits));
        break;
    }
  }
}

// Runs the SM kernels' algorithm on the host: byte head, aligned vector body (funnel-shifted when the source is
// misaligned), byte tail. Every source read goes through `load`, which fails the test outside [src, src + bytes).
void emulateSplit(uint8_t* dst, const uint8_t* src, uint64_t bytes, const VectorSplit& sp) {
  auto inRange = [&](const uint8_t* p, size_t n) { return p >= src && p + n <= src + bytes; };
  auto load = [&](const uint8_t* p) {
    EXPECT_TRUE(inRange(p, 16)) << "vector load outside the source";
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 16, 0u) << "unaligned vector load";
    uint4 v;
    std::memcpy(&v, p, 16);
    return v;
  };
  for (uint64_t i = 0; i < sp.head; ++i)
    dst[i] = src[i];
  uint8_t* d = dst + sp.head;
  const uint8_t* s = src + sp.head - sp.shift;
  const uint32_t bits = (sp.shift & 3) * 8;
  for (uint64_t v = 0; v < sp.vecs; ++v) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(d + 16 * v) % 16, 0u) << "unaligned vector store";
    uint4 out;
    if (sp.shift == 0) {
      out = load(s + 16 * v);
    } else {
      const uint4 a = load(s + 16 * v);
      const uint4 b = load(s + 16 * (v + 1));
      switch (sp.shift / 4) {
        case 0:
          out = funnelVector<0>(a, b, bits);
          break;
        case 1:
          out = funnelVector<1>(a, b, bits);
          break;
        case 2:
          out = funnelVector<2>(a, b, bits);
          break;
        default:
          out = funnelVector<3>(a, b, bits);
          break;
      }
    }
    std::memcpy(d + 16 * v, &out, 16);
  }
  const uint64_t tail_at = sp.head + 16 * sp.vecs;
  for (uint64_t i = 0; i < sp.tail; ++i)
    dst[tail_at + i] = src[tail_at + i];
}

uint8_t* align64(std::vector<uint8_t>& v) {
  const auto p = reinterpret_cast<uintptr_t>(v.data());
  return reinterpret_cast<uint8_t*>((p + 63) / 64 * 64);
}

TEST(SplitForVectors, CopiesEveryByteAtEveryMisalignmentAndSize) {
  std::vector<uint64_t> sizes;
  for (uint64_t n = 0; n <= 130; ++n)
    sizes.push_back(n);
  for (uint64_t n : {4095ull, 4096ull, 4097ull, 65541ull, (1ull << 20) + 7})
    sizes.push_back(n);
  const uint64_t max_bytes = (1ull << 20) + 7;
  std::vector<uint8_t> src_store(max_bytes + 256), dst_store(max_bytes + 256);
  std::mt19937_64 rng(12345);
  for (auto& b : src_store)
    b = static_cast<uint8_t>(rng());
  uint8_t* src_base = align64(src_store);
  uint8_t* dst_base = align64(dst_store);
  for (uint64_t bytes : sizes) {
    for (int so = 0; so < 16; ++so) {
      for (int d_off = 0; d_off < 16; ++d_off) {
        // Large sizes at a few offsets only (the small ones cover every combination).
        if (bytes > 4096 && (so + d_off) % 5 != 0) continue;
        const uint8_t* src = src_base + 64 + so;
        uint8_t* dst = dst_base + 64 + d_off;
        std::memset(dst_base, 0xEE, 64 + 16 + bytes + 64);
        const VectorSplit sp =
            splitForVectors(reinterpret_cast<uintptr_t>(dst), reinterpret_cast<uintptr_t>(src), bytes);
        ASSERT_EQ(sp.head + 16 * sp.vecs + sp.tail, bytes) << bytes << " " << so << " " << d_off;
        if (sp.vecs > 0) {
          EXPECT_EQ((reinterpret_cast<uintptr_t>(dst) + sp.head) % 16, 0u);
          EXPECT_EQ((reinterpret_cast<uintptr_t>(src) + sp.head) % 16, sp.shift);
          EXPECT_LT(sp.head, 32u);
          EXPECT_LT(sp.tail, 32u);
          // Nearly everything moves as vectors.
          EXPECT_GE(16 * sp.vecs + 62, bytes);
        } else {
          EXPECT_LT(bytes, 64u) << "so=" << so << " d_off=" << d_off;
        }
        emulateSplit(dst, src, bytes, sp);
        ASSERT_EQ(std::memcmp(dst, src, bytes), 0) << "bytes=" << bytes << " src+" << so << " dst+" << d_off;
        // Nothing written outside [dst, dst + bytes).
        for (int i = 0; i < 64 + d_off; ++i)
          ASSERT_EQ(dst_base[i], 0xEE);
        for (int i = 0; i < 32; ++i)
          ASSERT_EQ(dst[bytes + i], 0xEE);
      }
    }
  }
}

TEST(SmCopyConfig, ParsesValidatesAndFormats) {
  PEERLAB_EXPECT_OK(validateSmCopyConfig(SmCopyConfig{}));
  auto c = parseSmCopyConfig("threads=256,unroll=4,blocks_per_sm=3,hints=0");
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->threads_per_block, 256);
  EXPECT_EQ(c->unroll, 4);
  EXPECT_EQ(c->blocks_per_sm, 3);
  EXPECT_EQ(c->hints, 0);
  EXPECT_EQ(c->kernel, SmKernel::kAuto);
  auto round = parseSmCopyConfig(formatSmCopyConfig(*c));
  ASSERT_TRUE(round.isOk());
  EXPECT_EQ(formatSmCopyConfig(*round), formatSmCopyConfig(*c));
  auto defaults = parseSmCopyConfig("");
  ASSERT_TRUE(defaults.isOk());
  EXPECT_EQ(formatSmCopyConfig(*defaults), formatSmCopyConfig(SmCopyConfig{}));
  auto partial = parseSmCopyConfig("unroll=2");
  ASSERT_TRUE(partial.isOk());
  EXPECT_EQ(partial->unroll, 2);
  EXPECT_EQ(partial->threads_per_block, SmCopyConfig{}.threads_per_block);
  auto bulk = parseSmCopyConfig("kernel=bulk,bulk_kib=32,bulk_stages=6,bulk_blocks_per_sm=2,sms=64,hints=1");
  ASSERT_TRUE(bulk.isOk()) << bulk.status().toString();
  EXPECT_EQ(bulk->kernel, SmKernel::kBulk);
  EXPECT_EQ(bulk->bulk_kib, 32);
  EXPECT_EQ(bulk->bulk_stages, 6);
  EXPECT_EQ(bulk->bulk_blocks_per_sm, 2);
  EXPECT_EQ(bulk->sms, 64);
  EXPECT_EQ(bulk->hints, 1);
  auto bulk_round = parseSmCopyConfig(formatSmCopyConfig(*bulk));
  ASSERT_TRUE(bulk_round.isOk()) << bulk_round.status().toString();
  EXPECT_EQ(formatSmCopyConfig(*bulk_round), formatSmCopyConfig(*bulk));
  EXPECT_EQ(parseSmCopyConfig("kernel=vec")->kernel, SmKernel::kVector);
  EXPECT_EQ(parseSmCopyConfig("kernel=auto")->kernel, SmKernel::kAuto);
  for (const char* bad : {"threads=100",
                          "threads=2048",
                          "threads=32",
                          "unroll=3",
                          "unroll=16",
                          "blocks_per_sm=0",
                          "blocks_per_sm=33",
                          "hints=3",
                          "hints=-1",
                          "speed=9",
                          "threads",
                          "threads=abc",
                          "threads=5x",
                          "kernel=fast",
                          "kernel=",
                          "sms=-1",
                          "bulk_kib=0",
                          "bulk_kib=65",
                          "bulk_stages=1",
                          "bulk_stages=9",
                          "bulk_kib=64,bulk_stages=4",
                          "bulk_blocks_per_sm=0",
                          "bulk_blocks_per_sm=9"}) {
    auto st = parseSmCopyConfig(bad);
    EXPECT_EQ(st.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(oneLine(st.status())) << bad;
  }
  EXPECT_EQ(smKernelName(SmKernel::kAuto), "auto");
  EXPECT_EQ(smKernelName(SmKernel::kVector), "vec");
  EXPECT_EQ(smKernelName(SmKernel::kBulk), "bulk");
}

TEST(SmLaunch, GridFollowsTheSmCountAndTheWork) {
  SmCopyConfig c;  // 512 threads x unroll 8 = 4096 vectors per block per step
  SmLaunch tiny = planSmLaunch(c, 132, 0);
  EXPECT_EQ(tiny.blocks, 1);
  EXPECT_EQ(tiny.threads, 512);
  EXPECT_EQ(tiny.sms, 1);
  EXPECT_EQ(planSmLaunch(c, 132, 4096).blocks, 1);
  EXPECT_EQ(planSmLaunch(c, 132, 4097).blocks, 2);
  SmLaunch big = planSmLaunch(c, 132, uint64_t{1} << 26);
  EXPECT_EQ(big.blocks, 132 * 2);
  EXPECT_EQ(big.sms, 132);
  c.blocks_per_sm = 4;
  c.threads_per_block = 256;
  EXPECT_EQ(planSmLaunch(c, 132, uint64_t{1} << 26).blocks, 528);
  SmLaunch mid = planSmLaunch(c, 132, 256 * 8 * 50);
  EXPECT_EQ(mid.blocks, 50);
  EXPECT_EQ(mid.sms, 50);
  // `sms` caps the SMs.
  c.sms = 32;
  SmLaunch capped = planSmLaunch(c, 132, uint64_t{1} << 26);
  EXPECT_EQ(capped.blocks, 32 * 4);
  EXPECT_EQ(capped.sms, 32);
  c.sms = 500;
  EXPECT_EQ(planSmLaunch(c, 132, uint64_t{1} << 26).sms, 132);
}

TEST(SmLaunch, BulkGridFollowsChunksSharedMemoryAndSms) {
  SmCopyConfig c;
  c.bulk_kib = 16;
  c.bulk_stages = 4;
  c.bulk_blocks_per_sm = 2;
  const uint64_t vecs = (uint64_t{256} << 20) / 16;
  SmLaunch l = planSmLaunch(c, 132, vecs, SmKernel::kBulk);
  EXPECT_EQ(l.threads, 32);
  EXPECT_EQ(l.chunk, 16u << 10);
  EXPECT_EQ(l.smem, 64u << 10);
  EXPECT_EQ(l.blocks, 264);
  EXPECT_EQ(l.sms, 132);
  // Fewer chunks than blocks: one block per chunk.
  SmLaunch few = planSmLaunch(c, 132, (uint64_t{5} * 16 * 1024 + 16) / 16, SmKernel::kBulk);
  EXPECT_EQ(few.blocks, 6);
  EXPECT_EQ(few.sms, 6);
  EXPECT_EQ(planSmLaunch(c, 132, 1, SmKernel::kBulk).blocks, 1);
  // 192 KiB of stages: only one block fits an SM, whatever was asked.
  c.bulk_kib = 64;
  c.bulk_stages = 3;
  EXPECT_EQ(planSmLaunch(c, 132, vecs, SmKernel::kBulk).blocks, 132);
  c.sms = 40;
  EXPECT_EQ(planSmLaunch(c, 132, vecs, SmKernel::kBulk).blocks, 40);
  EXPECT_EQ(planSmLaunch(c, 132, vecs, SmKernel::kBulk).sms, 40);
}

TEST(SmKernelChoice, BulkOnlyForCapableDevicesAndEquallyAlignedCopies) {
  const VectorSplit aligned = splitForVectors(0x1000, 0x2000, uint64_t{1} << 20);
  const VectorSplit shifted = splitForVectors(0x1000, 0x2003, uint64_t{1} << 20);
  const VectorSplit small = splitForVectors(0x1000, 0x2000, 4096);
  const VectorSplit tiny = splitForVectors(0x1000, 0x2000, 15);
  ASSERT_EQ(aligned.shift, 0u);
  ASSERT_NE(shifted.shift, 0u);
  ASSERT_EQ(tiny.vecs, 0u);
  SmCopyConfig c;
  c.kernel = SmKernel::kVector;
  EXPECT_EQ(resolveSmKernel(c, true, aligned), SmKernel::kVector);
  c.kernel = SmKernel::kBulk;
  EXPECT_EQ(resolveSmKernel(c, true, aligned), SmKernel::kBulk);
  EXPECT_EQ(resolveSmKernel(c, true, small), SmKernel::kBulk);
  EXPECT_EQ(resolveSmKernel(c, true, shifted), SmKernel::kVector);
  EXPECT_EQ(resolveSmKernel(c, true, tiny), SmKernel::kVector);
  EXPECT_EQ(resolveSmKernel(c, false, aligned), SmKernel::kVector);
  c.kernel = SmKernel::kAuto;
  EXPECT_EQ(resolveSmKernel(c, true, aligned), SmKernel::kBulk);
  EXPECT_EQ(resolveSmKernel(c, true, small), SmKernel::kVector);
  EXPECT_EQ(resolveSmKernel(c, true, shifted), SmKernel::kVector);
  EXPECT_EQ(resolveSmKernel(c, false, aligned), SmKernel::kVector);
  EXPECT_EQ(resolveSmKernel(c, true, splitForVectors(0x1000, 0x2000, kBulkMinBytes)), SmKernel::kBulk);
  EXPECT_EQ(resolveSmKernel(c, true, splitForVectors(0x1000, 0x2000, kBulkMinBytes - 16)), SmKernel::kVector);
}

TEST(BulkShare, EveryChunkGoesToExactlyOneBlock) {
  for (uint64_t chunks : {0ull, 1ull, 5ull, 131ull, 132ull, 133ull, 1000ull, 16384ull}) {
    for (uint32_t blocks : {1u, 7u, 132u, 264u}) {
      std::vector<int> owner(chunks, 0);
      uint64_t total = 0;
      for (uint32_t b = 0; b < blocks; ++b) {
        const uint64_t n = bulkShare(chunks, b, blocks);
        total += n;
        for (uint64_t k = 0; k < n; ++k) {
          const uint64_t c = b + k * blocks;
          ASSERT_LT(c, chunks) << "block " << b << " of " << blocks;
          ++owner[c];
        }
      }
      EXPECT_EQ(total, chunks);
      for (uint64_t c = 0; c < chunks; ++c)
        EXPECT_EQ(owner[c], 1) << "chunk " << c;
    }
  }
  EXPECT_EQ(bulkChunks(0, 16), 0u);
  EXPECT_EQ(bulkChunks(16, 16384), 1u);
  EXPECT_EQ(bulkChunks(16384, 16384), 1u);
  EXPECT_EQ(bulkChunks(16400, 16384), 2u);
}

// A model of one block's bulk-copy engine under the schedule of bulkPipeline. Loads complete only when a wait needs
// them and store groups finish reading shared memory only when a wait forces them (the latest the hardware may), so
// any hazard the schedule leaves open shows: a stage refilled while its load or a store reading it is pending, a
// store of a stage whose load has not completed (a barrier phase mistaken for another), a wait that could never
// complete, a chunk loaded or stored twice or out of order.
struct SimBulkEngine {
  uint32_t stages;
  uint64_t n;
  std::vector<int64_t> loading;                       // per stage: chunk being loaded, -1 none
  std::vector<int64_t> holds;                         // per stage: chunk whose load completed, -1 none
  std::vector<uint32_t> phases;                       // per stage: completed barrier phases
  std::deque<std::pair<uint32_t, uint64_t>> reading;  // store groups still reading their stage, oldest first
  std::vector<int> loads, stores;
  std::vector<uint64_t> stored_order;
  int in_flight = 0, max_in_flight = 0;
  bool finished = false;

  SimBulkEngine(uint32_t s, uint64_t count)
      : stages(s), n(count), loading(s, -1), holds(s, -1), phases(s, 0), loads(count, 0), stores(count, 0) {}

  void load(uint64_t k, uint32_t stage) {
    ASSERT_LT(k, n);
    ASSERT_LT(stage, stages);
    EXPECT_EQ(stage, k % stages) << "chunk " << k;
    EXPECT_EQ(loading[stage], -1) << "stage " << stage << " refilled while a load into it is pending";
    for (const auto& r : reading)
      EXPECT_NE(r.first, stage) << "stage " << stage << " refilled while the store of chunk " << r.second
                                << " still reads it";
    loading[stage] = static_cast<int64_t>(k);
    holds[stage] = -1;
    ++loads[k];
    max_in_flight = std::max(max_in_flight, ++in_flight);
  }
  bool waitLoaded(uint32_t stage, uint32_t parity) {
    // try_wait.parity succeeds at once when the phase of that parity is the last completed one.
    if ((phases[stage] & 1) != parity) return true;
    if (loading[stage] < 0) return false;  // nothing can complete the phase: a real block would spin forever
    holds[stage] = loading[stage];
    loading[stage] = -1;
    ++phases[stage];
    --in_flight;
    return true;
  }
  void store(uint64_t k, uint32_t stage) {
    EXPECT_EQ(holds[stage], static_cast<int64_t>(k)) << "stored stage " << stage << " before chunk " << k << " arrived";
    reading.emplace_back(stage, k);
    ++stores[k];
    stored_order.push_back(k);
  }
  void waitStoresRead() {
    while (reading.size() > 1)
      reading.pop_front();
  }
  void waitStoresDone() {
    reading.clear();
    finished = true;
  }
};

TEST(BulkPipeline, EveryScheduleIsHazardFreeAndCopiesEveryChunkOnce) {
  for (uint32_t stages = 2; stages <= static_cast<uint32_t>(kMaxBulkStages); ++stages) {
    for (uint64_t n = 0; n <= 41; ++n) {
      SimBulkEngine sim(stages, n);
      EXPECT_TRUE(bulkPipeline(sim, n, stages)) << "stages " << stages << " chunks " << n;
      EXPECT_TRUE(sim.finished);
      EXPECT_TRUE(sim.reading.empty());
      EXPECT_EQ(sim.in_flight, 0);
      EXPECT_EQ(sim.max_in_flight, static_cast<int>(std::min<uint64_t>(n, stages))) << stages << " " << n;
      for (uint64_t k = 0; k < n; ++k) {
        EXPECT_EQ(sim.loads[k], 1) << "chunk " << k << " stages " << stages << " n " << n;
        EXPECT_EQ(sim.stores[k], 1) << "chunk " << k << " stages " << stages << " n " << n;
      }
      ASSERT_EQ(sim.stored_order.size(), n);
      for (uint64_t k = 0; k < n; ++k)
        EXPECT_EQ(sim.stored_order[k], k);
      if (::testing::Test::HasFailure()) return;
    }
  }
}

// Seam bookkeeping needs no GPU: a fake that only replaces `enable`.
cudaError_t fakeEnable(void* user, int, int) {
  ++*static_cast<int*>(user);
  return cudaErrorTooManyPeers;
}
cudaError_t otherEnable(void*, int, int) {
  return cudaErrorUnknown;
}

TEST(PeerOpsSeam, ScopedOverridesNestAndRestore) {
  const PeerOps real = cudaPeerOps();
  ASSERT_NE(real.enable, nullptr);
  ASSERT_NE(real.cu_enable, nullptr);
  EXPECT_EQ(activePeerOps().enable, real.enable);
  int calls = 0;
  {
    PeerOps fake;
    fake.user = &calls;
    fake.enable = fakeEnable;
    ScopedPeerOps outer(fake);
    PeerOps active = activePeerOps();
    EXPECT_EQ(active.enable, &fakeEnable);
    EXPECT_EQ(active.user, &calls);
    // Entries the fake left null are the real calls.
    EXPECT_EQ(active.disable, real.disable);
    EXPECT_EQ(active.can_access, real.can_access);
    EXPECT_EQ(active.cu_enable, real.cu_enable);
    EXPECT_EQ(active.enable(active.user, 0, 1), cudaErrorTooManyPeers);
    EXPECT_EQ(calls, 1);
    {
      PeerOps inner;
      inner.enable = otherEnable;
      ScopedPeerOps nested(inner);
      EXPECT_EQ(activePeerOps().enable, &otherEnable);
      EXPECT_EQ(activePeerOps().user, nullptr);
    }
    EXPECT_EQ(activePeerOps().enable, &fakeEnable);
  }
  EXPECT_EQ(activePeerOps().enable, real.enable);
  EXPECT_EQ(activePeerOps().user, nullptr);
}

TEST(PeerAccessArguments, NegativeOrdinalsAndNullContextsAreInvalid) {
  // Checked before any CUDA call, so the answer is the same with or without a GPU.
  for (Status st : {enablePeerAccess(-1, 0), enablePeerAccess(0, -3), disablePeerAccess(-2, 1)}) {
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
    EXPECT_TRUE(oneLine(st));
    EXPECT_NE(st.message().find("negative"), std::string::npos) << st.message();
  }
  EXPECT_EQ(peerState(-1, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(enableContextPeerAccess(nullptr, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(disableContextPeerAccess(nullptr, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(contextPeerState(nullptr, nullptr).status().code(), StatusCode::kInvalidArgument);
}

TEST(PeerAccessNames, AreStable) {
  EXPECT_EQ(peerAccessName(PeerAccess::kUnknown), "unknown");
  EXPECT_EQ(peerAccessName(PeerAccess::kNotEnabled), "not_enabled");
  EXPECT_EQ(peerAccessName(PeerAccess::kEnabled), "enabled");
  EXPECT_EQ(peerAccessName(PeerAccess::kUnsupported), "unsupported");
}

}  // namespace
}  // namespace peerlab::peer
