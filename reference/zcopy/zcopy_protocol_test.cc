#include "reference/zcopy/protocol.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "reference/core/deadline.h"
#include "reference/testing/testing.h"

namespace peerlab::zcopy {
namespace {

// Host model of one channel: rank 0 is the sender, rank 1 the receiver. Each rank has one local semaphore word that
// only the other rank writes, and one in-order stream. Eager steps carry the epoch the host planned; graph steps take
// it from the rank's device counters when they execute, like the one-thread kernels of a replayed graph.
struct Model {
  enum class Kind { kWait, kSignal, kCopy, kFill, kCheck, kRebase };
  struct Op {
    Kind kind = Kind::kCopy;
    uint32_t epoch = 0;   // eager wait / signal
    bool graph = false;   // epoch from the device counters
    DeviceEpochs rebase;  // kRebase
  };
  static Op make(Kind kind) {
    Op op;
    op.kind = kind;
    return op;
  }

  Protocol protocol = Protocol::kGet;
  uint32_t word[2] = {0, 0};  // word[r]: rank r's local word
  DeviceEpochs device[2];
  bool geq = true;  // false: EQ comparison, to show why the protocols do not use it
  std::deque<Op> stream[2];
  // Data: the version in the source (rank 0) and the destination (rank 1); fills and checks count per rank.
  uint64_t src = 0, dst = 0, fills = 0, checks = 0;
  std::vector<std::string> violations;
  uint64_t executed = 0;
  bool wrapped = false;  // some signal wrote a value below the one before it (the 32-bit word wrapped)

  Model(Protocol p, uint32_t e0) : protocol(p) {
    word[0] = word[1] = e0;
    device[0] = device[1] = DeviceEpochs{e0, e0};
  }

  bool reached(uint32_t value, uint32_t want) const { return geq ? epochReached(value, want) : value == want; }

  // The operations of a call's steps (eager: epochs from the plan; graph: from the device counters).
  static std::vector<Op> opsFor(const Steps& steps, bool graph) {
    std::vector<Op> ops;
    for (int i = 0; i < steps.count; ++i) {
      const Step& s = steps.step[static_cast<size_t>(i)];
      Op op;
      op.kind = s.kind == StepKind::kWait ? Kind::kWait : s.kind == StepKind::kSignal ? Kind::kSignal : Kind::kCopy;
      op.epoch = s.epoch;
      op.graph = graph;
      ops.push_back(op);
    }
    return ops;
  }
  void push(int rank, Kind kind) { stream[rank].push_back(make(kind)); }

  // Executes the head of `rank`'s stream if it can run; false when it is a wait that is not satisfied.
  bool step(int rank) {
    if (stream[rank].empty()) return false;
    Op& op = stream[rank].front();
    switch (op.kind) {
      case Kind::kWait: {
        const uint32_t want = op.graph ? device[rank].wait + 1 : op.epoch;
        if (!reached(word[rank], want)) return false;
        if (op.graph) device[rank].wait = want;
        break;
      }
      case Kind::kSignal: {
        const uint32_t value = op.graph ? ++device[rank].signal : op.epoch;
        uint32_t& w = word[1 - rank];
        if (value < w) wrapped = true;
        w = value;
        break;
      }
      case Kind::kCopy:
        // get: the receiver (rank 1) pulls; put: the sender (rank 0) pushes. Same effect on the data.
        if ((protocol == Protocol::kGet) != (rank == 1)) violations.push_back("copy on the wrong side");
        dst = src;
        break;
      case Kind::kFill:
        src = ++fills;
        break;
      case Kind::kCheck:
        ++checks;
        if (dst != checks) {
          violations.push_back("check " + std::to_string(checks) + " saw version " + std::to_string(dst));
        }
        break;
      case Kind::kRebase:
        device[rank] = op.rebase;
        break;
    }
    stream[rank].pop_front();
    ++executed;
    return true;
  }

  bool idle() const { return stream[0].empty() && stream[1].empty(); }

  // Runs both streams in a random interleaving until both are empty; a state where neither can move is a hang,
  // which the host sees as a wait that times out at `deadline`.
  Status run(std::mt19937& rng, Deadline deadline) {
    for (;;) {
      if (idle()) return Status::ok();
      const int first = static_cast<int>(rng() & 1);
      if (step(first) || step(1 - first)) continue;
      while (!deadline.expired())
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return PEERLAB_TIMEOUT("channel model: rank 0 has " + std::to_string(stream[0].size()) + " and rank 1 " +
                             std::to_string(stream[1].size()) + " operations blocked");
    }
  }
};

// One side's host API over the model: plans each call and enqueues its steps (eager, or into a capture). A capture
// under GraphSync::kKernels records device-counter steps; under kMemOps it records the planned epochs, and every
// launch rewrites them with replayEpoch from the host's epochs at that launch (Graph::launch).
struct Side {
  int rank;
  EndpointState state;
  EndpointState capture_state;
  EndpointState capture_base;
  bool capturing = false;
  GraphSync sync = GraphSync::kKernels;
  ReplayEpochs replay;
  std::vector<Model::Op> captured;

  Side(int r, Protocol p, uint32_t e0)
      : rank(r), state(initialState(p, r == 0 ? Role::kSender : Role::kReceiver, e0)) {}

  void call(Model& m, Call c) {
    EndpointState& st = capturing ? capture_state : state;
    auto steps = planCall(st, c);
    ASSERT_TRUE(steps.isOk()) << steps.status().toString();
    for (const auto& op : Model::opsFor(*steps, capturing && sync == GraphSync::kKernels)) {
      if (capturing) {
        captured.push_back(op);
      } else {
        m.stream[rank].push_back(op);
      }
    }
    if (!capturing) replay.eagerCall();
  }
  void data(Model& m, Model::Kind kind) {
    if (capturing) {
      captured.push_back(Model::make(kind));
    } else {
      m.push(rank, kind);
    }
  }
  void fill(Model& m) { data(m, Model::Kind::kFill); }
  void check(Model& m) { data(m, Model::Kind::kCheck); }
  void beginCapture(GraphSync how = GraphSync::kKernels) {
    capturing = true;
    sync = how;
    capture_state = state;
    capture_base = state;
    captured.clear();
  }
  StateDelta endCapture() {
    capturing = false;
    return deltaOf(state, capture_state);
  }
  void launch(Model& m, const StateDelta& delta) {
    if (sync == GraphSync::kMemOps) {
      for (Model::Op op : captured) {
        if (op.kind == Model::Kind::kWait) op.epoch = replayEpoch(op.epoch, capture_base.wait_epoch, state.wait_epoch);
        if (op.kind == Model::Kind::kSignal) {
          op.epoch = replayEpoch(op.epoch, capture_base.signal_epoch, state.signal_epoch);
        }
        m.stream[rank].push_back(op);
      }
      applyDelta(state, delta);
      replay.eagerCall();
      return;
    }
    if (auto rebase = replay.beforeLaunch(state)) {
      Model::Op op = Model::make(Model::Kind::kRebase);
      op.rebase = *rebase;
      m.stream[rank].push_back(op);
    }
    for (const auto& op : captured)
      m.stream[rank].push_back(op);
    replay.afterLaunch(state, delta);
  }
};

// One message: the calls each side makes, with the data written before and checked after.
void oneMessage(Model& m, Side& sender, Side& receiver) {
  sender.fill(m);
  sender.call(m, Call::kSendPost);
  sender.call(m, Call::kSendWait);
  receiver.call(m, Call::kRecvPost);
  receiver.call(m, Call::kRecvWait);
  receiver.check(m);
}

class ProtocolModel : public ::testing::TestWithParam<Protocol> {};

TEST_P(ProtocolModel, EveryInterleavingDeliversEveryRound) {
  for (uint32_t seed = 0; seed < 200; ++seed) {
    Model m(GetParam(), 7);
    Side sender(0, GetParam(), 7), receiver(1, GetParam(), 7);
    for (int round = 0; round < 20; ++round)
      oneMessage(m, sender, receiver);
    std::mt19937 rng(seed);
    PEERLAB_ASSERT_OK(m.run(rng, Deadline::afterMs(1000)));
    ASSERT_TRUE(m.violations.empty()) << "seed " << seed << ": " << m.violations.front();
    EXPECT_EQ(m.checks, 20u);
    // Epoch counters, not resets: each word ends at the initial epoch plus one per round.
    EXPECT_EQ(m.word[0], 7u + 20u);
    EXPECT_EQ(m.word[1], 7u + 20u);
  }
}

TEST_P(ProtocolModel, ReceiverPostedFirstWaitsForTheSender) {
  Model m(GetParam(), 0);
  Side sender(0, GetParam(), 0), receiver(1, GetParam(), 0);
  receiver.call(m, Call::kRecvPost);
  receiver.call(m, Call::kRecvWait);
  receiver.check(m);
  // Only the receiver's stream runs: it must block on the sender's signal, never complete with stale data.
  while (m.step(1)) {
  }
  EXPECT_FALSE(m.stream[1].empty());
  EXPECT_EQ(m.checks, 0u);
  sender.fill(m);
  sender.call(m, Call::kSendPost);
  sender.call(m, Call::kSendWait);
  std::mt19937 rng(1);
  PEERLAB_ASSERT_OK(m.run(rng, Deadline::afterMs(1000)));
  EXPECT_TRUE(m.violations.empty());
  EXPECT_EQ(m.checks, 1u);
}

TEST_P(ProtocolModel, SourceIsNotOverwrittenBeforeTheReceiverIsDone) {
  // The sender refills its source for round k+1 only after sendWait of round k; any schedule must keep every check
  // right. Run the sender's stream as far ahead as it can before the receiver moves at all.
  Model m(GetParam(), 0);
  Side sender(0, GetParam(), 0), receiver(1, GetParam(), 0);
  for (int round = 0; round < 5; ++round)
    oneMessage(m, sender, receiver);
  while (m.step(0)) {
  }
  EXPECT_FALSE(m.stream[0].empty()) << "the sender ran through 5 rounds without the receiver";
  std::mt19937 rng(3);
  PEERLAB_ASSERT_OK(m.run(rng, Deadline::afterMs(1000)));
  EXPECT_TRUE(m.violations.empty()) << m.violations.front();
  EXPECT_EQ(m.checks, 5u);
}

TEST_P(ProtocolModel, WrapsAround32BitEpochs) {
  const uint32_t e0 = 0xFFFFFFF0u;
  for (uint32_t seed = 0; seed < 50; ++seed) {
    Model m(GetParam(), e0);
    Side sender(0, GetParam(), e0), receiver(1, GetParam(), e0);
    for (int round = 0; round < 64; ++round)
      oneMessage(m, sender, receiver);
    std::mt19937 rng(seed);
    PEERLAB_ASSERT_OK(m.run(rng, Deadline::afterMs(1000)));
    ASSERT_TRUE(m.violations.empty()) << m.violations.front();
    EXPECT_TRUE(m.wrapped);
    EXPECT_EQ(m.checks, 64u);
    EXPECT_EQ(m.word[1], e0 + 64u);  // 0x30 after the wrap
  }
}

TEST_P(ProtocolModel, MissingSignalTimesOut) {
  Model m(GetParam(), 0);
  Side sender(0, GetParam(), 0), receiver(1, GetParam(), 0);
  oneMessage(m, sender, receiver);
  // The receiver expects a second message the sender never posts.
  receiver.call(m, Call::kRecvPost);
  receiver.call(m, Call::kRecvWait);
  receiver.check(m);
  std::mt19937 rng(5);
  const auto start = std::chrono::steady_clock::now();
  Status st = m.run(rng, Deadline::afterMs(50));
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(st.code(), StatusCode::kTimeout) << st.toString();
  EXPECT_GE(waited, std::chrono::milliseconds(50));
  EXPECT_LT(waited, std::chrono::seconds(1));
  EXPECT_EQ(m.checks, 1u);  // the first message was delivered, the second never claimed to be
}

// Eager messages, replays of a captured pair of messages, eager again, replays again: every interleaving delivers
// every message, and the host's epochs follow the replays exactly.
void replaysShareEpochsWithEagerCalls(Protocol p, GraphSync sync) {
  for (uint32_t seed = 0; seed < 50; ++seed) {
    const uint32_t e0 = 0xFFFFFFFAu;  // the replays cross the wrap
    Model m(p, e0);
    Side sender(0, p, e0), receiver(1, p, e0);
    uint64_t rounds = 0;
    for (int i = 0; i < 3; ++i, ++rounds)
      oneMessage(m, sender, receiver);
    const size_t queued0 = m.stream[0].size(), queued1 = m.stream[1].size();
    sender.beginCapture(sync);
    receiver.beginCapture(sync);
    oneMessage(m, sender, receiver);
    oneMessage(m, sender, receiver);
    const StateDelta ds = sender.endCapture();
    const StateDelta dr = receiver.endCapture();
    EXPECT_EQ(ds.posts, 2u);
    EXPECT_EQ(m.stream[0].size(), queued0) << "capture must not enqueue anything";
    EXPECT_EQ(m.stream[1].size(), queued1) << "capture must not enqueue anything";
    for (int i = 0; i < 5; ++i, rounds += 2) {
      sender.launch(m, ds);
      receiver.launch(m, dr);
    }
    for (int i = 0; i < 2; ++i, ++rounds)
      oneMessage(m, sender, receiver);
    for (int i = 0; i < 4; ++i, rounds += 2) {
      sender.launch(m, ds);
      receiver.launch(m, dr);
    }
    oneMessage(m, sender, receiver);
    ++rounds;
    std::mt19937 rng(seed);
    PEERLAB_ASSERT_OK(m.run(rng, Deadline::afterMs(1000)));
    ASSERT_TRUE(m.violations.empty()) << m.violations.front();
    EXPECT_EQ(m.checks, rounds);
    EXPECT_EQ(m.word[1], static_cast<uint32_t>(e0 + rounds));
    // The host's epochs followed the replays exactly.
    EXPECT_EQ(sender.state.posts, rounds);
    EXPECT_EQ(receiver.state.wait_epoch, static_cast<uint32_t>(e0 + rounds));
  }
}

TEST_P(ProtocolModel, GraphReplaysAndEagerCallsShareEpochs) {
  replaysShareEpochsWithEagerCalls(GetParam(), GraphSync::kKernels);
}

TEST_P(ProtocolModel, MemOpNodeReplaysAndEagerCallsShareEpochs) {
  replaysShareEpochsWithEagerCalls(GetParam(), GraphSync::kMemOps);
}

TEST(ProtocolModel, MemOpNodesKeptAtTheirCapturedEpochsDeliverStaleData) {
  // Why launch() rewrites the nodes: a second replay with the captured values waits for epochs that already passed,
  // so the receiver's check runs before the second message arrived.
  Model m(Protocol::kPut, 0);
  Side sender(0, Protocol::kPut, 0), receiver(1, Protocol::kPut, 0);
  sender.beginCapture(GraphSync::kMemOps);
  receiver.beginCapture(GraphSync::kMemOps);
  oneMessage(m, sender, receiver);
  sender.endCapture();
  receiver.endCapture();
  auto replayAsCaptured = [&] {
    for (const auto& op : sender.captured)
      m.stream[0].push_back(op);
    for (const auto& op : receiver.captured)
      m.stream[1].push_back(op);
  };
  replayAsCaptured();
  std::mt19937 rng(2);
  PEERLAB_ASSERT_OK(m.run(rng, Deadline::afterMs(20)));
  ASSERT_TRUE(m.violations.empty());
  replayAsCaptured();
  // Only the receiver moves: its stale wait passes at once and its check sees the first message.
  while (m.step(1)) {
  }
  EXPECT_TRUE(m.stream[1].empty());
  ASSERT_FALSE(m.violations.empty()) << "stale epochs went unnoticed";
  EXPECT_NE(m.violations.front().find("check 2 saw version 1"), std::string::npos) << m.violations.front();
}

TEST(Epochs, ReplayEpochKeepsCapturedDistancesAcrossTheWrap) {
  EXPECT_EQ(replayEpoch(11, 10, 10), 11u);  // first launch right after the capture: unchanged
  EXPECT_EQ(replayEpoch(12, 10, 15), 17u);
  EXPECT_EQ(replayEpoch(0xFFFFFFFFu, 0xFFFFFFFEu, 0x00000004u), 5u);
  EXPECT_EQ(replayEpoch(3, 0xFFFFFFFEu, 0xFFFFFFFEu), 3u);
}

TEST(Protocol, GraphSyncNames) {
  EXPECT_EQ(graphSyncName(GraphSync::kMemOps), "memops");
  EXPECT_EQ(graphSyncName(GraphSync::kKernels), "kernels");
  EXPECT_EQ(*parseGraphSync("memops"), GraphSync::kMemOps);
  EXPECT_EQ(*parseGraphSync("kernels"), GraphSync::kKernels);
  auto bad = parseGraphSync("events");
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("\"events\""), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(AllProtocols, ProtocolModel,
                         ::testing::Values(Protocol::kGet, Protocol::kPut, Protocol::kSmSignal),
                         [](const auto& info) { return std::string(protocolName(info.param)); });

TEST(ProtocolModel, GeqToleratesASignallerRunningAheadWhereEqHangs) {
  // A get sender may post the same unchanged source twice before the receiver looks: the receiver's word then
  // holds epoch 2 when it waits for 1. GEQ passes; EQ would wait forever.
  for (bool geq : {true, false}) {
    Model m(Protocol::kGet, 0);
    m.geq = geq;
    Side sender(0, Protocol::kGet, 0), receiver(1, Protocol::kGet, 0);
    sender.fill(m);
    sender.call(m, Call::kSendPost);
    sender.call(m, Call::kSendPost);
    while (m.step(0)) {
    }
    for (int i = 0; i < 2; ++i) {
      receiver.call(m, Call::kRecvPost);
      receiver.call(m, Call::kRecvWait);
    }
    sender.call(m, Call::kSendWait);
    sender.call(m, Call::kSendWait);
    std::mt19937 rng(9);
    Status st = m.run(rng, Deadline::afterMs(20));
    if (geq) {
      PEERLAB_EXPECT_OK(st);
    } else {
      EXPECT_EQ(st.code(), StatusCode::kTimeout);
    }
  }
}

TEST(PlanCall, StepsOfEachCall) {
  EndpointState s = initialState(Protocol::kGet, Role::kReceiver, 10);
  auto steps = planCall(s, Call::kRecvPost);
  ASSERT_TRUE(steps.isOk());
  ASSERT_EQ(steps->count, 3);
  EXPECT_EQ(steps->step[0].kind, StepKind::kWait);
  EXPECT_EQ(steps->step[0].epoch, 11u);
  EXPECT_EQ(steps->step[1].kind, StepKind::kCopy);
  EXPECT_EQ(steps->step[2].kind, StepKind::kSignal);
  EXPECT_EQ(steps->step[2].epoch, 11u);
  steps = planCall(s, Call::kRecvWait);
  ASSERT_TRUE(steps.isOk());
  EXPECT_EQ(steps->count, 0);

  EndpointState p = initialState(Protocol::kPut, Role::kSender, 0);
  steps = planCall(p, Call::kSendPost);
  ASSERT_TRUE(steps.isOk());
  ASSERT_EQ(steps->count, 3);
  EXPECT_EQ(steps->step[0].kind, StepKind::kWait);
  EXPECT_EQ(steps->step[1].kind, StepKind::kCopy);
  EXPECT_EQ(steps->step[2].kind, StepKind::kSignal);
  EndpointState r = initialState(Protocol::kPut, Role::kReceiver, 0);
  steps = planCall(r, Call::kRecvPost);
  ASSERT_TRUE(steps.isOk());
  ASSERT_EQ(steps->count, 1);
  EXPECT_EQ(steps->step[0].kind, StepKind::kSignal);
  EXPECT_EQ(steps->step[0].epoch, 1u);
}

TEST(PlanCall, RejectsCallsOfTheOtherSide) {
  EndpointState s = initialState(Protocol::kGet, Role::kSender, 0);
  auto bad = planCall(s, Call::kRecvPost);
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("recvPost on the sender of a get channel"), std::string::npos)
      << bad.status().message();
  EndpointState r = initialState(Protocol::kPut, Role::kReceiver, 0);
  EXPECT_FALSE(planCall(r, Call::kSendPost).isOk());
  EXPECT_FALSE(planCall(r, Call::kSendWait).isOk());
  EXPECT_EQ(r.posts, 0u);
}

TEST(PlanCall, RejectsAWaitWithoutAPost) {
  for (Protocol p : {Protocol::kGet, Protocol::kPut, Protocol::kSmSignal}) {
    EndpointState s = initialState(p, Role::kSender, 0);
    auto bad = planCall(s, Call::kSendWait);
    ASSERT_FALSE(bad.isOk());
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(bad.status().message().find("no outstanding sendPost"), std::string::npos);
    // State unchanged by a rejected call.
    EXPECT_EQ(s.wait_epoch, 0u);
    EXPECT_EQ(s.completions, 0u);
    ASSERT_TRUE(planCall(s, Call::kSendPost).isOk());
    ASSERT_TRUE(planCall(s, Call::kSendWait).isOk());
    EXPECT_FALSE(planCall(s, Call::kSendWait).isOk());
    EndpointState r = initialState(p, Role::kReceiver, 0);
    EXPECT_FALSE(planCall(r, Call::kRecvWait).isOk());
  }
}

TEST(PlanCall, BoundsOutstandingPosts) {
  EndpointState s = initialState(Protocol::kGet, Role::kSender, 0);
  s.posts = kMaxOutstanding;
  auto bad = planCall(s, Call::kSendPost);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("outstanding"), std::string::npos);
  s.completions = 1;
  EXPECT_TRUE(planCall(s, Call::kSendPost).isOk());
}

TEST(ValidateMessage, NamesTheBadInput) {
  int local = 0;
  PEERLAB_EXPECT_OK(validateMessage(Protocol::kGet, &local, 0, 4096, 4096));
  PEERLAB_EXPECT_OK(validateMessage(Protocol::kPut, &local, 4095, 1, 4096));
  PEERLAB_EXPECT_OK(validateMessage(Protocol::kPut, nullptr, 0, 0, 4096));  // empty message
  PEERLAB_EXPECT_OK(validateMessage(Protocol::kPut, &local, 4096, 0, 4096));

  Status st = validateMessage(Protocol::kGet, nullptr, 0, 8, 4096);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("null destination"), std::string::npos) << st.message();
  st = validateMessage(Protocol::kPut, nullptr, 0, 8, 4096);
  EXPECT_NE(st.message().find("null source"), std::string::npos) << st.message();
  st = validateMessage(Protocol::kGet, &local, 4000, 97, 4096);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("outside the peer's 4096-byte window"), std::string::npos) << st.message();
  // Offsets that would overflow size_t are caught, not wrapped.
  EXPECT_FALSE(validateMessage(Protocol::kGet, &local, SIZE_MAX - 2, 8, 4096).isOk());
  EXPECT_FALSE(validateMessage(Protocol::kGet, &local, 8, SIZE_MAX - 2, 4096).isOk());
  EXPECT_FALSE(validateMessage(Protocol::kGet, &local, 4097, 0, 4096).isOk());
}

TEST(Epochs, CyclicComparison) {
  EXPECT_TRUE(epochReached(5, 5));
  EXPECT_TRUE(epochReached(6, 5));
  EXPECT_FALSE(epochReached(4, 5));
  EXPECT_TRUE(epochReached(0x00000002u, 0xFFFFFFFFu));  // wrapped past
  EXPECT_FALSE(epochReached(0xFFFFFFFFu, 0x00000002u));
  EXPECT_TRUE(epochReached(0x7FFFFFFFu, 0u));
  EXPECT_FALSE(epochReached(0x80000000u, 0u));  // more than 2^31 apart reads as behind
}

TEST(Epochs, DeltaAndReplayAccounting) {
  EndpointState before = initialState(Protocol::kGet, Role::kSender, 0xFFFFFFFEu);
  EndpointState after = before;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(planCall(after, Call::kSendPost).isOk());
    ASSERT_TRUE(planCall(after, Call::kSendWait).isOk());
  }
  StateDelta d = deltaOf(before, after);
  EXPECT_EQ(d.signals, 3u);
  EXPECT_EQ(d.waits, 3u);
  EXPECT_EQ(d.posts, 3u);
  applyDelta(before, d, 4);
  EXPECT_EQ(before.signal_epoch, 0xFFFFFFFEu + 12u);
  EXPECT_EQ(before.posts, 12u);

  ReplayEpochs r;
  EndpointState host = initialState(Protocol::kPut, Role::kReceiver, 100);
  EXPECT_FALSE(r.beforeLaunch(host).has_value());  // fresh: counters already hold the initial epoch
  r.eagerCall();
  ASSERT_TRUE(planCall(host, Call::kRecvPost).isOk());
  auto rebase = r.beforeLaunch(host);
  ASSERT_TRUE(rebase.has_value());
  EXPECT_EQ(rebase->signal, 101u);
  EXPECT_EQ(rebase->wait, 100u);
  r.afterLaunch(host, StateDelta{2, 2, 2, 2});
  EXPECT_EQ(host.signal_epoch, 103u);
  EXPECT_FALSE(r.beforeLaunch(host).has_value());
}

TEST(Protocol, NamesAndSmAccounting) {
  EXPECT_EQ(*parseProtocol("get"), Protocol::kGet);
  EXPECT_EQ(*parseProtocol("put"), Protocol::kPut);
  EXPECT_EQ(*parseProtocol("sm_signal"), Protocol::kSmSignal);
  auto bad = parseProtocol("push");
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("\"push\""), std::string::npos);
  EXPECT_EQ(smSendBlocks(0), 1);
  EXPECT_EQ(smSendBlocks(8), 1);
  EXPECT_EQ(smSendBlocks(16 * 1024), 1);
  EXPECT_EQ(smSendBlocks(64 * 1024), 4);
  EXPECT_EQ(smSendBlocks(size_t{1} << 30), static_cast<int>(kSmMaxBlocks));
  EXPECT_EQ(smsOccupied(Protocol::kGet, 1 << 20, false), 0);
  EXPECT_EQ(smsOccupied(Protocol::kPut, 8, false), 0);
  EXPECT_EQ(smsOccupied(Protocol::kGet, 8, true), 1);
  EXPECT_EQ(smsOccupied(Protocol::kSmSignal, 64 * 1024, false), 4);
}

TEST(Semaphore, SlotsOfBothSidesNeverCollide) {
  // Every (peer, channel, role) of a page has its own slot; the two directions of a channel use different slots.
  const int ranks = 4, channels = 3;
  std::vector<int> seen(slotCount(ranks, channels), 0);
  for (int p = 0; p < ranks; ++p)
    for (int c = 0; c < channels; ++c)
      for (Role r : {Role::kSender, Role::kReceiver})
        ++seen.at(slotIndex(p, c, r, channels));
  for (int n : seen)
    EXPECT_EQ(n, 1);
  EXPECT_EQ(pageBytes(ranks, channels), slotCount(ranks, channels) * kSlotBytes);
  // Slots hold whole 128-byte lines (two LL buffers each) and never share one.
  EXPECT_EQ(kSlotBytes % 128, 0u);
  EXPECT_GE(kSlotBytes, kSmLlWord * 4 + 2 * 16 * size_t{kSmLlBufferLines});
}

TEST(Semaphore, SmLlHeaderCarriesSizeOffsetAndKind) {
  const uint64_t offsets[] = {
      0, 5, (uint64_t{1} << 32) - 1, uint64_t{1} << 32, (uint64_t{1} << 47) + 12345, kSmLlMaxOffset - 1};
  for (uint64_t bytes : {uint64_t{0}, uint64_t{1}, uint64_t{8}, kSmLlMaxBytes - 1, kSmLlMaxBytes}) {
    for (uint64_t offset : offsets) {
      const uint64_t h = smLlHeader(bytes, offset, false);
      EXPECT_FALSE(smLlHeaderBulk(h));
      EXPECT_EQ(smLlHeaderBytes(h), bytes);
      EXPECT_EQ(smLlHeaderOffset(h), offset) << bytes;
    }
  }
  const uint64_t bulk = smLlHeader(1 << 20, 4096, true);
  EXPECT_TRUE(smLlHeaderBulk(bulk));
  EXPECT_EQ(smLlHeaderOffset(bulk), 4096u);
  // Consecutive epochs use alternate buffers.
  static_assert(kSmLlBufferLines == 1 + kSmLlMaxBytes / 8);
}

}  // namespace
}  // namespace peerlab::zcopy
