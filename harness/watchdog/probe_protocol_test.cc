#include "harness/watchdog/probe_protocol.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "reference/testing/testing.h"

namespace peerlab::probe {
namespace {

Decoded roundTrip(const std::vector<uint8_t>& frame, MessageType type) {
  auto decoded = decode(frame);
  EXPECT_TRUE(decoded.isOk()) << decoded.status().toString();
  if (!decoded.isOk()) return Decoded{};
  EXPECT_EQ(decoded->type, type);
  return std::move(decoded).value();
}

TEST(Protocol, InventoryRoundTrips) {
  Inventory inv;
  inv.driver_api = 13000;
  inv.runtime_api = 12080;
  inv.driver_release = "580.159.04";
  for (int i = 0; i < 3; ++i) {
    GpuInfo g;
    g.ordinal = i;
    g.uuid = "GPU-" + std::to_string(i);
    g.bus_id = "0000:1" + std::to_string(i) + ":00.0";
    g.name = "NVIDIA H200";
    g.cc_major = 9;
    g.sm_count = 132;
    g.total_memory = 150ull << 30;
    g.vmm = true;
    g.posix_fd = i != 1;
    g.ipc_event = true;
    inv.gpus.push_back(g);
  }
  inv.can_access = {0, 1, 1, 1, 0, 0, 1, 1, 0};
  inv.native_atomic = {0, 1, 0, 1, 0, 0, 0, 1, 0};
  const Inventory back = roundTrip(encode(inv), MessageType::kInventory).inventory;
  ASSERT_EQ(back.count(), 3);
  EXPECT_EQ(back.driver_release, "580.159.04");
  EXPECT_EQ(back.runtime_api, 12080);
  EXPECT_EQ(back.gpus[2].bus_id, "0000:12:00.0");
  EXPECT_EQ(back.gpus[1].posix_fd, false);
  EXPECT_EQ(back.gpus[0].total_memory, 150ull << 30);
  EXPECT_EQ(back.can_access, inv.can_access);
  EXPECT_EQ(back.native_atomic, inv.native_atomic);
  EXPECT_FALSE(back.canAccess(1, 2));
  EXPECT_TRUE(back.canAccess(2, 1));

  Inventory none;
  none.error = "no CUDA device: cudaErrorNoDevice";
  EXPECT_EQ(roundTrip(encode(none), MessageType::kInventory).inventory.error, none.error);
}

TEST(Protocol, RequestsAndAnswersRoundTrip) {
  SetupRequest setup{Role::kImporter, 64ull << 20, 5000, true};
  const SetupRequest s = roundTrip(encode(setup), MessageType::kSetup).setup;
  EXPECT_EQ(s.role, Role::kImporter);
  EXPECT_EQ(s.max_bytes, 64ull << 20);
  EXPECT_EQ(s.timeout_ms, 5000u);
  EXPECT_TRUE(s.exports);

  RunRequest run;
  run.phase = Phase::kRemoteWrite;
  run.timeout_ms = 1234;
  for (uint32_t i = 0; i < 4; ++i)
    run.cells.push_back({i, Method::kIpcVmm, static_cast<int>(i), 3, 4096, 99 + i});
  const RunRequest r = roundTrip(encode(run), MessageType::kRun).run;
  EXPECT_EQ(r.phase, Phase::kRemoteWrite);
  ASSERT_EQ(r.cells.size(), 4u);
  EXPECT_EQ(r.cells[2].seed, 101u);
  EXPECT_EQ(r.cells[3].method, Method::kIpcVmm);
  EXPECT_EQ(r.cells[1].src, 1);

  CellResult done;
  done.id = 17;
  done.seed = 0xDEADBEEFCAFEull;
  done.verdict = Verdict::kCorrupt;
  done.path = Path::kStaged;
  done.wrong = 3;
  done.words = 512;
  done.first_bad = 2048;
  done.time_us = 77;
  done.error = "something";
  const CellResult d = roundTrip(encode(done), MessageType::kCellDone).cell;
  EXPECT_EQ(d.id, 17u);
  EXPECT_EQ(d.seed, done.seed);
  EXPECT_EQ(d.verdict, Verdict::kCorrupt);
  EXPECT_EQ(d.path, Path::kStaged);
  EXPECT_EQ(d.first_bad, 2048u);
  EXPECT_EQ(d.error, "something");

  ReadyReport ready;
  ready.role = Role::kOwner;
  ready.timings = {{"contexts", 250000}, {"buffers", 1200}};
  DeviceExport e;
  e.legacy_ok = true;
  e.legacy_handle.fill(0xAB);
  e.vmm_ok = true;
  e.vmm_bytes = 64ull << 20;
  ready.exports.devices = {e, e};
  ready.exports.devices[1].vmm_ok = false;
  ready.exports.devices[1].vmm_error = "not supported";
  const ReadyReport rr = roundTrip(encode(ready), MessageType::kReady).ready;
  ASSERT_EQ(rr.timings.size(), 2u);
  EXPECT_EQ(rr.timings[0].us, 250000u);
  ASSERT_EQ(rr.exports.devices.size(), 2u);
  EXPECT_EQ(rr.exports.devices[0].legacy_handle[63], 0xAB);
  EXPECT_EQ(rr.exports.vmmCount(), 1u);
  EXPECT_EQ(rr.exports.devices[1].vmm_error, "not supported");
  EXPECT_EQ(roundTrip(encode(ready.exports), MessageType::kImport).exports.vmmCount(), 1u);

  EXPECT_EQ(roundTrip(encode(BatchDone{"context lost"}), MessageType::kBatchDone).batch_done.fatal, "context lost");
  EXPECT_EQ(roundTrip(encode(Fatal{"bad"}), MessageType::kFatal).fatal.reason, "bad");
  EXPECT_EQ(roundTrip(encode(Quit{}), MessageType::kQuit).type, MessageType::kQuit);
}

void expectRejected(const std::vector<uint8_t>& frame, const std::string& why) {
  auto d = decode(frame);
  ASSERT_FALSE(d.isOk()) << "accepted: " << why;
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find(why), std::string::npos) << d.status().message();
}

TEST(Protocol, GarbageIsRejectedWithAReason) {
  CellResult done;
  done.id = 1;
  const std::vector<uint8_t> good = encode(done);
  ASSERT_TRUE(decode(good).isOk());

  expectRejected({}, "shorter than");
  expectRejected({'h', 'e', 'l', 'l', 'o'}, "shorter than");
  std::vector<uint8_t> text(64, 'x');
  expectRejected(text, "wrong magic");

  auto bad = good;
  bad[4] = 9;  // version
  expectRejected(bad, "protocol version 9");

  bad = good;
  bad[6] = 0xEE;  // type
  bad[7] = 0x00;
  // The checksum still matches, the type does not exist.
  expectRejected(bad, "unknown message type");

  bad = good;
  bad.back() ^= 0x01;  // payload bit flip
  expectRejected(bad, "checksum mismatch");

  bad = good;
  bad.pop_back();  // truncated: length field disagrees
  expectRejected(bad, "payload length");

  bad = good;
  bad.push_back(0);
  expectRejected(bad, "payload length");

  // A well-formed header around a payload that does not parse.
  CellResult wrong;
  wrong.verdict = Verdict::kOk;
  auto frame = encode(wrong);
  frame[kFrameHeaderBytes + 12] = 42;  // verdict byte out of range
  const uint32_t sum = fnv1a32(std::span<const uint8_t>(frame).subspan(kFrameHeaderBytes));
  std::memcpy(frame.data() + 12, &sum, 4);
  expectRejected(frame, "verdict 42 out of range");

  // Random bytes never decode.
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    std::vector<uint8_t> junk(16 + rng() % 200);
    for (auto& b : junk)
      b = static_cast<uint8_t>(rng());
    EXPECT_FALSE(decode(junk).isOk());
  }
}

TEST(Protocol, CountsOutOfRangeAreRejected) {
  RunRequest run;
  run.cells.resize(kMaxCellsPerBatch + 1);
  expectRejected(encode(run), "cell count");
  Inventory inv;
  inv.gpus.resize(kMaxGpus + 1);
  expectRejected(encode(inv), "GPU count");
}

}  // namespace
}  // namespace peerlab::probe
