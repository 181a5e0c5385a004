// Zero-copy get / put / sm_signal against NCCL send/recv between two processes (one per GPU), in one run so the
// ratios sit side by side. One pair: `zcopy_bench --ranks=2`, rank 0 drives the pair's source device, rank 1 the
// destination: --pairs=a-b (default 0-1). Many pairs in one job: --pairs="0-1,2-3;1-0,3-2" (or the rounds of a
// --plan file) and a rank per GPU named (bench/common/pair_rounds.h); the pairs of a round run every row at once. A
// rank sets up its own device once (streams, gate, data windows, checker); each pair's context, channels and NCCL
// communicator are set up when its round starts and torn down when it ends. This is how `peerlab bench` and
// `qualify` cover every ordered pair; the rows, sizes and sample counts are bench/zcopy_suite.h's. Knobs
// (--knob NAME=VALUE): handle=legacy|vmm_fd picks how the data windows are shared (default vmm_fd);
// programmatic=0 launches the sm_signal kernels without programmatic dependent launch (default on; counter
// `programmatic`).
//
// time_us is ONE-WAY per message, the median of many samples:
//   8 B - 64 KB (latency): ping-pong, rank 0 sends, rank 1 receives and sends back; a sample is N round trips timed
//     with events on rank 0, divided by 2N;
//   1 MB - 1 GB (bandwidth): N messages back to back in one direction; a sample is timed with events on the rank
//     whose stream moves the data (get: the receiver; put, sm_signal: the sender; NCCL: the receiver), divided by N.
// A peerlab sample is enqueued whole while its stream is held at a gate (a wait on a host-mapped word), so the host's
// enqueue rate is never timed; NCCL is not held, as nccl-tests.
//
// Rows ("name"), the default variant of each mode first:
//   uni                eager: every call from the host, each round's calls through one zcopy::MemOpBatch (get/put:
//                      one memory-operation batch and one copy per message and side; sm_signal: one fused kernel
//                      per round and side)
//   graph/uni          the same calls captured once into a CUDA graph (K rounds per graph) and replayed; get/put wait
//                      and signal with memory-operation nodes whose epochs each launch rewrites (GraphSync::kMemOps)
//   kernel/uni         sm_signal only, latency sizes: one persistent kernel per side drives the channel (one block,
//                      a thread per LL line of the message, 32 to 512; knob kernel_threads=N fixes it)
// Alternatives for comparison at latency sizes, registered with knob variants=all (or a comma list of calls,
// graph-calls, graph-kernels):
//   calls/uni          eager, every call straight to the stream (one command per semaphore operation, one kernel
//                      per sm_signal call)
//   graph-calls/uni    graph of the calls made straight to the stream (one node per operation or call)
//   graph-kernels/uni  get/put graph synchronized by one-thread kernels with device-held epochs (GraphSync::kKernels)
// nccl.sendrecv is eager, nccl.sendrecv_graph captured and replayed ("uni"). Every row writes a seeded pattern,
// poisons the destination and checks it on the GPU that owns it afterwards. Counters: sms (SMs occupied), p10_us /
// p90_us, samples, pingpong, gated.
//
// Every wait is bounded: samples and data checks by deadlines (a failed row, later rows go on), the gate by a
// watchdog that releases it when the host blocks inside a CUDA call (the row fails), and a row that makes no progress
// for 60 s ends the process with a message naming the row and the stage.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/common/bench_util.h"
#include "bench/common/pair_rounds.h"
#include "bench/common/plan.h"
#include "bench/zcopy_suite.h"
#include "reference/core/check.h"
#include "reference/core/devices.h"
#include "reference/core/memory.h"
#include "reference/core/pattern.h"
#include "reference/core/wait.h"
#include "reference/nccl/comm.h"
#include "reference/nccl/sendrecv.h"
#include "reference/zcopy/semaphore_device.cuh"
#include "reference/zcopy/zcopy.h"

namespace peerlab::bench {
namespace {

using zcopy::Channel;
using zcopy::Protocol;
using zcopy::StreamRef;

constexpr int64_t kSetupMs = 180'000;    // world setup: allocations, IPC, NCCL init
constexpr int64_t kSampleMs = 10'000;    // one sample (the largest is 3 GB: under 0.1 s at link rate)
constexpr int64_t kExchangeMs = 30'000;  // barriers and outcome exchanges between rows
constexpr int64_t kDrainMs = 10'000;     // draining streams after a failure (sm_signal kernels end within 5 s)
constexpr int64_t kGateMs = 5'000;       // a gate the host has not released by then is released by the watchdog
constexpr int64_t kStallMs = 60'000;     // a row without progress for this long ends the process
constexpr uint64_t kDeviceTimeoutNs = 5'000'000'000ull;

using zcopy_suite::Impl;
using zcopy_suite::implName;
using zcopy_suite::kLatencyMax;
using zcopy_suite::kMaxBytes;
using zcopy_suite::Mode;
using zcopy_suite::recordName;
using zcopy_suite::Spec;
using zcopy_suite::Variant;

PEERLAB_BENCH_KNOB(handle, zcopy_suite::kHandleKnob, kText,
                   "legacy or vmm_fd: how the data windows are shared (vmm_fd)");
PEERLAB_BENCH_KNOB(variants, zcopy_suite::kVariantsKnob, kText,
                   "default, all, or a comma list of calls, graph-calls, graph-kernels: the comparison rows");
PEERLAB_BENCH_KNOB(programmatic, zcopy_suite::kProgrammaticKnob, kSwitch,
                   "0 launches the sm_signal kernels without programmatic dependent launch (1)");
PEERLAB_BENCH_KNOB(kernel_threads, zcopy_suite::kKernelThreadsKnob, kCount,
                   "threads of the kernel/uni block, a multiple of 32 from 32 to 512 (one per LL line)");

Protocol protocolOf(Impl i) {
  return i == Impl::kGet ? Protocol::kGet : i == Impl::kPut ? Protocol::kPut : Protocol::kSmSignal;
}

// ---- configuration (the same on every rank: same environment, same machine) ----

struct PairConfig {
  ipc::HandleKind kind = ipc::HandleKind::kVmmFd;
  bool calls = false;          // register calls/uni and graph-calls/uni
  bool graph_kernels = false;  // register graph-kernels/uni
  int kernel_threads = 0;      // threads of the kernel/uni block; 0: one per LL line of the message (32 .. 512)
  bool programmatic = true;    // ContextOptions::programmatic_launch
  std::string error;
};

const PairConfig& pairConfig() {
  static const PairConfig config = [] {
    PairConfig c;
    if (const std::string v = knobText(zcopy_suite::kHandleKnob); !v.empty()) {
      auto kind = ipc::parseHandleKind(v);
      if (kind.isOk()) {
        c.kind = *kind;
      } else {
        c.error = "knob handle: " + kind.status().message();
      }
    }
    if (const std::string v = knobText(zcopy_suite::kVariantsKnob); !v.empty()) {
      std::stringstream list(v);
      std::string item;
      while (std::getline(list, item, ',')) {
        if (item == "all") {
          c.calls = c.graph_kernels = true;
        } else if (item == "calls" || item == "graph-calls") {
          c.calls = true;
        } else if (item == "graph-kernels") {
          c.graph_kernels = true;
        } else if (item != "default") {
          c.error = "knob variants: unknown variant \"" + item + "\" (default, all, calls, graph-calls, graph-kernels)";
        }
      }
    }
    if (auto p = knobBool(zcopy_suite::kProgrammaticKnob, true); p.isOk()) {
      c.programmatic = *p;
    } else {
      c.error = p.status().message();
    }
    if (auto t = knobInt(zcopy_suite::kKernelThreadsKnob, 0, 0, 512); !t.isOk() || (*t != 0 && (*t < 32 || *t % 32))) {
      c.error = "knob kernel_threads=\"" + knobText(zcopy_suite::kKernelThreadsKnob) +
                "\": expected a multiple of 32 from 32 to 512";
    } else {
      c.kernel_threads = static_cast<int>(*t);
    }
    return c;
  }();
  return config;
}

// Threads of the persistent ping-pong block for `n`-byte messages: knob kernel_threads, else one per line of
// an LL message (its header and one line per 8 bytes) rounded up to whole warps, 32 to 512. Threads beyond the
// message's lines would only poll lines that never arrive and wait at every barrier.
int kernelThreads(size_t n) {
  if (pairConfig().kernel_threads > 0) return pairConfig().kernel_threads;
  const size_t lines = 1 + (n + 7) / 8;
  return static_cast<int>(std::clamp<size_t>((lines + 31) / 32 * 32, 32, 512));
}

// ---- watchdog: bounds what no deadline can (a host thread blocked inside a CUDA call) ----

class Watchdog {
 public:
  Watchdog() : thread_([this] { loop(); }) {}
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  ~Watchdog() {
    stop_.store(true);
    thread_.join();
  }

  // A row (or the setup) starts; `stage` names where it is, for the message if it stalls for `budget`.
  void beginRow(int rank, const std::string& row, std::chrono::milliseconds budget) {
    std::lock_guard<std::mutex> lock(mu_);
    rank_ = rank;
    row_ = row;
    stage_ = "starting";
    progress_ = Clock::now();
    budget_ = budget;
    armed_ = true;
  }
  void stage(const char* what) {
    std::lock_guard<std::mutex> lock(mu_);
    stage_ = what;
    progress_ = Clock::now();
  }
  void endRow() {
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = false;
  }
  // The stream waits until *gate >= value; the host releases it once the sample is enqueued. A host that blocked
  // inside a CUDA call that itself waits for this stream (an implicit synchronization) would never get there: the
  // watchdog releases the gate after kGateMs, and the row fails.
  void holdGate(volatile uint32_t* gate, uint32_t value) {
    std::lock_guard<std::mutex> lock(mu_);
    gate_ = gate;
    gate_value_ = value;
    gate_since_ = Clock::now();
    gate_forced_ = false;
  }
  // Releases the gate (if the watchdog has not); true when the watchdog had to.
  bool releaseGate() {
    std::lock_guard<std::mutex> lock(mu_);
    if (gate_ != nullptr) *gate_ = gate_value_;
    gate_ = nullptr;
    return gate_forced_;
  }

 private:
  using Clock = std::chrono::steady_clock;
  void loop() {
    while (!stop_.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      std::lock_guard<std::mutex> lock(mu_);
      const auto now = Clock::now();
      if (gate_ != nullptr && now - gate_since_ > std::chrono::milliseconds(kGateMs)) {
        std::fprintf(stderr, "zcopy_bench: rank %d: %s: the host held the gate for %lld ms (stage \"%s\"): released\n",
                     rank_, row_.c_str(), static_cast<long long>(kGateMs), stage_);
        *gate_ = gate_value_;
        gate_ = nullptr;
        gate_forced_ = true;
      }
      if (armed_ && now - progress_ > budget_) {
        std::fprintf(stderr, "zcopy_bench: rank %d: %s: no progress for %lld s at \"%s\": leaving\n", rank_,
                     row_.c_str(), static_cast<long long>(budget_.count() / 1000), stage_);
        std::fflush(nullptr);
        std::_Exit(3);
      }
    }
  }

  std::mutex mu_;
  int rank_ = -1;
  std::string row_;
  const char* stage_ = "";
  Clock::time_point progress_;
  std::chrono::milliseconds budget_{kStallMs};
  bool armed_ = false;
  volatile uint32_t* gate_ = nullptr;
  uint32_t gate_value_ = 0;
  Clock::time_point gate_since_;
  bool gate_forced_ = false;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// ---- what a rank keeps for the whole process, and the pair it serves in the current round ----

// The rank's own device: streams, events, the gate, the data windows and the checker, set up once by the first row
// that runs (setupLocal), whatever pair the rank serves afterwards. Data windows are exported anew to each round's
// peer.
struct Local {
  std::optional<Status> status;  // the setup's outcome, once
  int device = -1;
  Stream stream;       // zero-copy rows
  Stream nccl_stream;  // NCCL rows: a stuck NCCL kernel cannot hold the zero-copy rows
  Event ev0, ev1;
  PinnedBuffer gate;
  uint32_t* gate_dev = nullptr;
  uint32_t gate_value = 0;
  bool gated = false;
  ipc::ExportableBuffer src, dst;
  std::optional<PatternChecker> checker;
  bool stuck = false;  // a stream could not be drained after a failure: teardown would wait for it forever
  Watchdog watchdog;
};

// The pair this rank serves in the current round, set up collectively by the round's first row and torn down when the
// round ends (endRound): its context, channels and NCCL communicator, over the rank's Local.
struct World {
  explicit World(Local& l)
      : stream(l.stream),
        nccl_stream(l.nccl_stream),
        ev0(l.ev0),
        ev1(l.ev1),
        gate(l.gate),
        gate_dev(l.gate_dev),
        gate_value(l.gate_value),
        gated(l.gated),
        src(l.src),
        dst(l.dst),
        checker(l.checker),
        stuck(l.stuck),
        watchdog(l.watchdog),
        local(l) {}
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  std::optional<Status> status;  // set once by world(): the same verdict on every rank of the pair
  int me = -1;
  int peer = -1;
  int device = -1;
  int peer_device = -1;
  uint64_t run = 0;
  Bootstrap* boot = nullptr;  // the pair's
  Stream& stream;
  Stream& nccl_stream;
  Event& ev0;
  Event& ev1;
  PinnedBuffer& gate;
  uint32_t*& gate_dev;
  uint32_t& gate_value;
  bool& gated;
  ipc::ExportableBuffer& src;
  ipc::ExportableBuffer& dst;
  std::optional<PatternChecker>& checker;
  std::optional<zcopy::Context> ctx;
  std::vector<Channel> fwd, bwd;  // by protocol: get, put, sm_signal
  std::optional<nccl::Comm> comm;
  std::string zcopy_broken;  // set after a failure: later rows of that family fail fast
  std::string nccl_broken;
  bool& stuck;
  bool enqueued = false;  // the current row enqueued channel or NCCL calls (a failure then breaks that family)
  Watchdog& watchdog;
  Local& local;

  ~World() {
    if (stuck) {
      // Freeing memory and destroying the context would wait for the blocked stream forever.
      std::fprintf(stderr, "zcopy_bench: rank %d: a stream stayed blocked after a failure: leaving without teardown\n",
                   me);
      std::fflush(nullptr);
      std::_Exit(5);
    }
  }
};

// Every rank contributes its verdict; all learn the first failure, so they stay in step.
struct Verdict {
  int32_t ok = 1;
  int32_t code = 0;
  char why[480] = {};
};

Status agree(Bootstrap& boot, const Status& mine, Deadline deadline) {
  Verdict v;
  if (!mine.isOk()) {
    v.ok = 0;
    v.code = static_cast<int32_t>(mine.code());
    std::snprintf(v.why, sizeof(v.why), "%s", mine.toString().c_str());
  }
  std::vector<Verdict> all(static_cast<size_t>(boot.size()));
  PEERLAB_RETURN_IF_ERROR(boot.allgather(&v, all.data(), sizeof(Verdict), deadline));
  for (int r = 0; r < boot.size(); ++r) {
    const Verdict& x = all[static_cast<size_t>(r)];
    if (x.ok == 0) {
      return Status(static_cast<StatusCode>(x.code), "rank " + std::to_string(r) + ": " + std::string(x.why));
    }
  }
  return Status::ok();
}

// Ping-pong driven from the device: one block per side, its epochs in registers (read from the endpoints' device
// counters at the start, written back at the end). Each side answers (or sends the next message) as soon as a message
// arrived and posts "free" for the peer's next message after that, so the release store of the "free" is not on the
// way of the reply: an LL message needs only the "free" of the message before it, posted a round trip earlier.
__global__ void __launch_bounds__(512) smPingPongKernel(zcopy::SmEndpointView fwd, zcopy::SmEndpointView bwd,
                                                        const uint8_t* src, uint64_t n, int rounds, int initiator) {
  if (rounds <= 0) return;
  // Initiator: sends on fwd, receives on bwd; the other side the mirror.
  // Copies, not references: a reference to a kernel parameter puts the parameters on the stack, and a first launch
  // that needs a larger stack than the device has reserved synchronizes the device (while the stream is gated).
  const zcopy::SmEndpointView out = initiator != 0 ? fwd : bwd;
  const zcopy::SmEndpointView in = initiator != 0 ? bwd : fwd;
  uint32_t sent = out.counters[zcopy::kCtrSmSend];
  uint32_t received = in.counters[zcopy::kCtrSmRecv];
  uint32_t freed = in.counters[zcopy::kCtrSmFree];
  __syncthreads();  // every thread read the counters before thread 0 writes them below
  if (threadIdx.x == 0) zcopy::smThreadPostFreeEpoch(in, ++freed);
  for (int i = 0; i < rounds; ++i) {
    if (initiator != 0) {
      if (!zcopy::smBlockSendEpoch(out, ++sent, src, 0, n)) break;
      if (i > 0 && threadIdx.x == 0) zcopy::smThreadPostFreeEpoch(in, ++freed);
      if (!zcopy::smBlockWaitEpoch(in, ++received)) break;
    } else {
      if (!zcopy::smBlockWaitEpoch(in, ++received)) break;
      if (!zcopy::smBlockSendEpoch(out, ++sent, src, 0, n)) break;
      if (i + 1 < rounds && threadIdx.x == 0) zcopy::smThreadPostFreeEpoch(in, ++freed);
    }
  }
  if (threadIdx.x == 0) {
    out.counters[zcopy::kCtrSmSend] = sent;
    in.counters[zcopy::kCtrSmRecv] = received;
    in.counters[zcopy::kCtrSmFree] = freed;
  }
}

Status setupLocal(Local& w) {
  const PairConfig& pc = pairConfig();
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaSetDevice(w.device)));
  // Loaded now: a first launch under lazy loading may synchronize the device, and the gate holds the stream then.
  cudaFuncAttributes attr{};
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(&smPingPongKernel))));
  PEERLAB_ASSIGN_OR_RETURN(w.stream, createStream(w.device));
  // One empty launch now (0 rounds): a first launch may also grow the device's local memory for the kernel's stack,
  // which waits for the whole device, and must not happen while a stream is held at the gate.
  smPingPongKernel<<<1, 512, 0, w.stream.get()>>>(zcopy::SmEndpointView{}, zcopy::SmEndpointView{}, nullptr, 0, 0, 0);
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA_LAUNCH("smPingPongKernel (warm-up)"));
  PEERLAB_RETURN_IF_ERROR(waitStream(w.stream.get(), Deadline::afterMs(kSampleMs), "ping-pong kernel warm-up"));
  PEERLAB_ASSIGN_OR_RETURN(w.nccl_stream, createStream(w.device));
  PEERLAB_ASSIGN_OR_RETURN(w.ev0, createEvent(w.device, cudaEventDefault));
  PEERLAB_ASSIGN_OR_RETURN(w.ev1, createEvent(w.device, cudaEventDefault));
  PEERLAB_ASSIGN_OR_RETURN(w.gate, allocPinned(sizeof(uint32_t), cudaHostAllocMapped | cudaHostAllocPortable));
  *w.gate->as<volatile uint32_t>() = 0;
  void* gate_dev = nullptr;
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaHostGetDevicePointer(&gate_dev, w.gate->ptr, 0)));
  w.gate_dev = static_cast<uint32_t*>(gate_dev);
  // The gate holds a stream until the host enqueued a whole sample; without it the host's rate could be timed.
  const CUresult r = PEERLAB_DRIVER_CALL(cuStreamWaitValue32, reinterpret_cast<CUstream>(w.stream.get()),
                                         reinterpret_cast<CUdeviceptr>(w.gate_dev), 0u, CU_STREAM_WAIT_VALUE_GEQ);
  w.gated = r == CUDA_SUCCESS;
  PEERLAB_RETURN_IF_ERROR(waitStream(w.stream.get(), Deadline::afterMs(kSampleMs), "zcopy bench gate probe"));
  PEERLAB_ASSIGN_OR_RETURN(w.src, ipc::allocExportable(w.device, kMaxBytes, pc.kind));
  PEERLAB_ASSIGN_OR_RETURN(w.dst, ipc::allocExportable(w.device, kMaxBytes, pc.kind));
  PEERLAB_ASSIGN_OR_RETURN(PatternChecker checker, PatternChecker::create(w.device));
  w.checker.emplace(std::move(checker));
  return Status::ok();
}

Status setupShared(World& w) {
  const Deadline deadline = Deadline::afterMs(kSetupMs);
  uint64_t mine = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  std::vector<uint64_t> all(2);
  PEERLAB_RETURN_IF_ERROR(w.boot->allgather(&mine, all.data(), sizeof(mine), deadline));
  w.run = all[0];

  zcopy::ContextOptions o;
  o.device = w.device;
  o.channels = 6;
  o.device_timeout_ns = kDeviceTimeoutNs;
  o.programmatic_launch = pairConfig().programmatic;
  PEERLAB_ASSIGN_OR_RETURN(zcopy::Context ctx, zcopy::Context::create(*w.boot, o, deadline));
  w.ctx.emplace(std::move(ctx));
  // Per protocol: channel 2i carries rank 0 -> rank 1, channel 2i + 1 the way back.
  for (int i = 0; i < 3; ++i) {
    const Protocol p = protocolOf(static_cast<Impl>(i));
    for (int dir = 0; dir < 2; ++dir) {
      zcopy::ChannelOptions c;
      c.peer = w.peer;
      c.channel = 2 * i + dir;
      c.protocol = p;
      const bool sender = (dir == 0) == (w.me == 0);
      c.role = sender ? zcopy::Role::kSender : zcopy::Role::kReceiver;
      c.window = p == Protocol::kGet ? &w.src.get() : &w.dst.get();  // get exports the source, put the destination
      PEERLAB_ASSIGN_OR_RETURN(Channel ch, Channel::create(*w.ctx, c, deadline));
      (dir == 0 ? w.fwd : w.bwd).push_back(std::move(ch));
    }
  }
  return Status::ok();
}

// One communicator for every NCCL row of the pair, made by its first NCCL row (both ranks run it at once): a job
// whose filter selects no NCCL row never pays for NCCL's setup.
Status connectNccl(World& w, Deadline deadline) {
  if (w.comm) return Status::ok();
  PEERLAB_ASSIGN_OR_RETURN(nccl::Comm comm, nccl::createComm(*w.boot, w.device, deadline));
  w.comm.emplace(std::move(comm));
  // NCCL connects lazily: one eager exchange now, so captures later find the connections in place.
  PEERLAB_RETURN_IF_ERROR(
      nccl::enqueuePingPong(w.comm->get(), w.peer, w.me == 0, w.src->ptr, w.dst->ptr, 8, 1, w.nccl_stream.get()));
  return waitStream(w.nccl_stream.get(), deadline, "NCCL warm-up");
}

// The rank's device, set up by the first round that needs it; every later round reuses it (or its failure).
const Status& localReady(Local& l) {
  if (!l.status) l.status = setupLocal(l);
  return *l.status;
}

Status setupWorld(World& w, Deadline deadline) {
  PEERLAB_RETURN_IF_ERROR(agree(*w.boot, localReady(w.local), deadline));
  Status shared = setupShared(w);
  // After a timeout the peer may be gone: do not wait for it again.
  if (shared.code() == StatusCode::kTimeout) return shared;
  return agree(*w.boot, shared, deadline);
}

// What this rank holds: its device for the whole process (one GPU per rank, the same in every round) and the world of
// the pair it is in for the current round, which goes when the round ends (endRound). The world refers to the device:
// it goes first.
struct RankState {
  std::unique_ptr<Local> local;
  std::unique_ptr<World> world;
  ~RankState() {
    world.reset();
    local.reset();
  }
};

RankState& rankState() {
  static RankState r;
  return r;
}

Local& localOf(int device) {
  std::unique_ptr<Local>& l = rankState().local;
  if (!l) {
    l = std::make_unique<Local>();
    l->device = device;
  }
  return *l;
}

std::unique_ptr<World>& worldSlot() {
  return rankState().world;
}

World& world(const PairContext& ctx) {
  std::unique_ptr<World>& w = worldSlot();
  if (w) return *w;
  w = std::make_unique<World>(localOf(ctx.gpu));
  w->boot = ctx.boot;
  w->me = ctx.rank;
  w->peer = 1 - ctx.rank;
  w->device = ctx.gpu;
  w->peer_device = ctx.rank == 0 ? ctx.pair.second : ctx.pair.first;
  w->watchdog.beginRow(w->me, "setup " + PairJob::pairName(ctx.pair),
                       std::chrono::milliseconds(kSetupMs + kExchangeMs));
  w->status = std::make_optional(setupWorld(*w, Deadline::afterMs(kSetupMs)));
  w->watchdog.endRow();
  return *w;
}

void endRound() {
  worldSlot().reset();
}

// ---- timing helpers ----

// Holds the zero-copy stream until release(): the whole sample is enqueued before the GPU starts it.
class Gate {
 public:
  explicit Gate(World& w) : w_(w) {}
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;
  Status hold() {
    if (!w_.gated) return Status::ok();
    const uint32_t value = ++w_.gate_value;
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CU(cuStreamWaitValue32, reinterpret_cast<CUstream>(w_.stream.get()),
                                       reinterpret_cast<CUdeviceptr>(w_.gate_dev), value, CU_STREAM_WAIT_VALUE_GEQ));
    w_.watchdog.holdGate(w_.gate->as<volatile uint32_t>(), value);
    held_ = true;
    return Status::ok();
  }
  // Releases the stream; `forced` tells whether the watchdog had to.
  void release() {
    if (!held_) return;
    forced_ = w_.watchdog.releaseGate() || forced_;
    held_ = false;
  }
  bool forced() const { return forced_; }
  ~Gate() { release(); }

 private:
  World& w_;
  bool held_ = false;
  bool forced_ = false;
};

StatusOr<double> elapsedUs(World& w) {
  float ms = 0;
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaEventElapsedTime(&ms, w.ev0.get(), w.ev1.get())));
  return static_cast<double>(ms) * 1000.0;
}

// ---- what one rank enqueues ----

// `count` ping-pong rounds of a zero-copy protocol: rank 0 sends on fwd and receives on bwd, rank 1 the mirror.
// put: each side posts "free" for the peer's next message before its own send, so the signal never trails the data
// it must precede at the peer; sm_signal's rank 1 answers first and posts "free" after. With a batch, sm_signal flushes
// every round (one fused kernel per round and side); get / put let a round's last operations and the next round's first
// share one batch.
Status zcopyRounds(World& w, int pi, StreamRef s, size_t n, int count) {
  Channel& fwd = w.fwd[static_cast<size_t>(pi)];
  Channel& bwd = w.bwd[static_cast<size_t>(pi)];
  const bool per_round = fwd.protocol() == Protocol::kSmSignal && s.batch() != nullptr;
  auto endRound = [&]() -> Status { return per_round ? s.batch()->flush() : Status::ok(); };
  if (fwd.protocol() == Protocol::kGet) {
    for (int i = 0; i < count; ++i) {
      if (w.me == 0) {
        PEERLAB_RETURN_IF_ERROR(fwd.sendPost(s));
        PEERLAB_RETURN_IF_ERROR(bwd.recvPost(s, w.dst->ptr, 0, n));
        PEERLAB_RETURN_IF_ERROR(bwd.recvWait(s));
        PEERLAB_RETURN_IF_ERROR(fwd.sendWait(s));
      } else {
        PEERLAB_RETURN_IF_ERROR(fwd.recvPost(s, w.dst->ptr, 0, n));
        PEERLAB_RETURN_IF_ERROR(fwd.recvWait(s));
        PEERLAB_RETURN_IF_ERROR(bwd.sendPost(s));
        PEERLAB_RETURN_IF_ERROR(bwd.sendWait(s));
      }
      PEERLAB_RETURN_IF_ERROR(endRound());
    }
    return Status::ok();
  }
  Channel& incoming = w.me == 0 ? bwd : fwd;
  Channel& outgoing = w.me == 0 ? fwd : bwd;
  if (count > 0) PEERLAB_RETURN_IF_ERROR(incoming.recvPost(s));
  for (int i = 0; i < count; ++i) {
    if (w.me == 0) {
      PEERLAB_RETURN_IF_ERROR(outgoing.sendPost(s, w.src->ptr, 0, n));
      PEERLAB_RETURN_IF_ERROR(incoming.recvWait(s));
      if (i + 1 < count) PEERLAB_RETURN_IF_ERROR(incoming.recvPost(s));
    } else if (fwd.protocol() == Protocol::kSmSignal) {
      // sm_signal answers first: its LL messages need only the "free" of the message before, posted a round earlier.
      PEERLAB_RETURN_IF_ERROR(incoming.recvWait(s));
      PEERLAB_RETURN_IF_ERROR(outgoing.sendPost(s, w.src->ptr, 0, n));
      if (i + 1 < count) PEERLAB_RETURN_IF_ERROR(incoming.recvPost(s));
    } else {
      PEERLAB_RETURN_IF_ERROR(incoming.recvWait(s));
      if (i + 1 < count) PEERLAB_RETURN_IF_ERROR(incoming.recvPost(s));
      PEERLAB_RETURN_IF_ERROR(outgoing.sendPost(s, w.src->ptr, 0, n));
    }
    PEERLAB_RETURN_IF_ERROR(outgoing.sendWait(s));
    PEERLAB_RETURN_IF_ERROR(endRound());
  }
  return Status::ok();
}

// `count` one-way messages rank 0 -> rank 1. The side that does not time posts everything first.
Status zcopyStream(World& w, int pi, StreamRef s, size_t n, int count, bool timed_side) {
  Channel& fwd = w.fwd[static_cast<size_t>(pi)];
  const bool get = fwd.protocol() == Protocol::kGet;
  const bool sender = w.me == 0;
  if (timed_side) {  // one message at a time: get receiver, put / sm_signal sender
    for (int i = 0; i < count; ++i) {
      if (sender) {
        PEERLAB_RETURN_IF_ERROR(fwd.sendPost(s, w.src->ptr, 0, n));
        PEERLAB_RETURN_IF_ERROR(fwd.sendWait(s));
      } else {
        PEERLAB_RETURN_IF_ERROR(fwd.recvPost(s, w.dst->ptr, 0, n));
        PEERLAB_RETURN_IF_ERROR(fwd.recvWait(s));
      }
    }
    return Status::ok();
  }
  // get sender: every "ready" up front (the source does not change); put receiver: every "free" up front.
  for (int i = 0; i < count; ++i)
    PEERLAB_RETURN_IF_ERROR(sender && get ? fwd.sendPost(s) : fwd.recvPost(s));
  for (int i = 0; i < count; ++i)
    PEERLAB_RETURN_IF_ERROR(sender ? fwd.sendWait(s) : fwd.recvWait(s));
  return Status::ok();
}

Status smKernelRounds(World& w, size_t n, int rounds) {
  Channel& fwd = w.fwd[2];
  Channel& bwd = w.bwd[2];
  PEERLAB_ASSIGN_OR_RETURN(zcopy::SmEndpointView fv, fwd.smView());
  PEERLAB_ASSIGN_OR_RETURN(zcopy::SmEndpointView bv, bwd.smView());
  smPingPongKernel<<<1, kernelThreads(n), 0, w.stream.get()>>>(fv, bv, w.src->as<uint8_t>(), n, rounds,
                                                               w.me == 0 ? 1 : 0);
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA_LAUNCH("smPingPongKernel"));
  // The kernel made these calls from the device: the host's bookkeeping follows.
  using zcopy::Call;
  const uint64_t k = static_cast<uint64_t>(rounds);
  if (w.me == 0) {
    PEERLAB_RETURN_IF_ERROR(fwd.accountDeviceCalls(Call::kSendPost, k));
    PEERLAB_RETURN_IF_ERROR(fwd.accountDeviceCalls(Call::kSendWait, k));
    PEERLAB_RETURN_IF_ERROR(bwd.accountDeviceCalls(Call::kRecvPost, k));
    return bwd.accountDeviceCalls(Call::kRecvWait, k);
  }
  PEERLAB_RETURN_IF_ERROR(fwd.accountDeviceCalls(Call::kRecvPost, k));
  PEERLAB_RETURN_IF_ERROR(fwd.accountDeviceCalls(Call::kRecvWait, k));
  PEERLAB_RETURN_IF_ERROR(bwd.accountDeviceCalls(Call::kSendPost, k));
  return bwd.accountDeviceCalls(Call::kSendWait, k);
}

// `count` units (round trips or one-way messages) of a zero-copy spec on `s`, eagerly or into a capture.
Status enqueueZcopy(World& w, const Spec& spec, cudaStream_t s, int count, bool timed_side) {
  const int pi = static_cast<int>(spec.impl);
  zcopy::MemOpBatch batch(s);
  const StreamRef ref = spec.batched() ? StreamRef(batch) : StreamRef(s);
  if (spec.pingpong()) {
    PEERLAB_RETURN_IF_ERROR(zcopyRounds(w, pi, ref, spec.bytes, count));
  } else {
    PEERLAB_RETURN_IF_ERROR(zcopyStream(w, pi, ref, spec.bytes, count, timed_side));
  }
  return batch.flush();
}

// Enqueues `count` units of `spec` eagerly on this rank.
Status enqueueEager(World& w, const Spec& spec, int count, bool timed_side) {
  const size_t n = spec.bytes;
  if (spec.nccl()) {
    cudaStream_t ns = w.nccl_stream.get();
    if (spec.pingpong())
      return nccl::enqueuePingPong(w.comm->get(), w.peer, w.me == 0, w.src->ptr, w.dst->ptr, n, count, ns);
    return nccl::enqueueStream(w.comm->get(), w.peer, w.me == 0, w.src->ptr, w.dst->ptr, n, count, ns);
  }
  if (spec.mode == Mode::kKernel) return smKernelRounds(w, n, count);
  return enqueueZcopy(w, spec, w.stream.get(), count, timed_side);
}

// The rank whose events time a sample.
int timedRank(const Spec& spec) {
  if (spec.pingpong()) return 0;
  return spec.impl == Impl::kPut || spec.impl == Impl::kSm ? 0 : 1;
}

struct LocalResult {
  std::vector<double> samples_us;
  PatternCheck check;
};

using zcopy_suite::unitsPerSample;

// The plan's samples where it sets them, else the size's.
int plannedSamples(const Spec& s) {
  return plan().samples > 0 ? plan().samples : zcopy_suite::sampleCount(s);
}

StatusOr<LocalResult> measure(World& w, const Spec& spec) {
  const size_t n = spec.bytes;
  const uint64_t salt = (static_cast<uint64_t>(spec.impl) << 56) ^ (static_cast<uint64_t>(spec.mode) << 48) ^
                        (static_cast<uint64_t>(spec.variant) << 44) ^ n;
  const uint64_t send_seed = patternSeed(w.run, w.device, w.peer_device, salt);
  const uint64_t recv_seed = patternSeed(w.run, w.peer_device, w.device, salt);
  const bool receives = spec.pingpong() || w.me == 1;
  cudaStream_t s = spec.nccl() ? w.nccl_stream.get() : w.stream.get();
  if (spec.nccl()) {
    w.watchdog.stage("creating the NCCL communicator");
    PEERLAB_RETURN_IF_ERROR(connectNccl(w, Deadline::afterMs(kSetupMs)));
  }
  w.watchdog.stage("writing the pattern, poisoning the destination");
  PEERLAB_RETURN_IF_ERROR(fillPattern(w.src->ptr, n, send_seed, s));
  PEERLAB_RETURN_IF_ERROR(poisonPattern(w.dst->ptr, n, recv_seed, s));
  PEERLAB_RETURN_IF_ERROR(waitStream(s, Deadline::afterMs(kSampleMs), "pattern setup"));
  w.watchdog.stage("barrier before the row");
  PEERLAB_RETURN_IF_ERROR(w.boot->barrier(Deadline::afterMs(kExchangeMs)));

  const int units = unitsPerSample(spec);
  const bool timed = w.me == timedRank(spec);
  LocalResult out;
  // Graph mode: the warm-up and the timed launch of a sample use two graphs captured alike, so the epochs written
  // into one never change while a launch of it is in flight.
  std::optional<zcopy::Graph> zwarm, ztimed;
  std::optional<nccl::CapturedGraph> ngraph;
  if (spec.mode == Mode::kGraph) {
    w.watchdog.stage("capturing the graphs");
    // Both sides capture `units`: every launch is one sample's worth on both.
    if (spec.nccl()) {
      PEERLAB_ASSIGN_OR_RETURN(auto g,
                               nccl::CapturedGraph::capture(s, [&] { return enqueueEager(w, spec, units, timed); }));
      ngraph.emplace(std::move(g));
    } else {
      const int pi = static_cast<int>(spec.impl);
      std::vector<Channel*> chans = {&w.fwd[static_cast<size_t>(pi)], &w.bwd[static_cast<size_t>(pi)]};
      zcopy::GraphOptions go;
      go.sync = spec.variant == Variant::kGraphKernels ? zcopy::GraphSync::kKernels : zcopy::GraphSync::kMemOps;
      auto body = [&]() -> Status { return enqueueZcopy(w, spec, s, units, timed); };
      PEERLAB_ASSIGN_OR_RETURN(auto a, zcopy::Graph::capture(s, chans, body, go));
      PEERLAB_ASSIGN_OR_RETURN(auto b, zcopy::Graph::capture(s, chans, body, go));
      zwarm.emplace(std::move(a));
      ztimed.emplace(std::move(b));
    }
  }

  // Sample 0 is a warm-up (first launches, first touches of the mappings) and is not kept.
  for (int sample = 0; sample <= plannedSamples(spec); ++sample) {
    w.watchdog.stage("enqueueing a sample");
    w.enqueued = true;
    // NCCL is not held: its host-side enqueue may wait for its own kernels to make room.
    Gate gate(w);
    if (!spec.nccl()) PEERLAB_RETURN_IF_ERROR(gate.hold());
    // A warm-up unit first on the timed side (it meets the peer), then the timed units.
    if (spec.mode == Mode::kGraph) {
      PEERLAB_RETURN_IF_ERROR(zwarm ? zwarm->launch(s) : ngraph->launch(s));
      if (timed) PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaEventRecord(w.ev0.get(), s)));
      PEERLAB_RETURN_IF_ERROR(ztimed ? ztimed->launch(s) : ngraph->launch(s));
    } else if (timed) {
      PEERLAB_RETURN_IF_ERROR(enqueueEager(w, spec, 1, true));
      PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaEventRecord(w.ev0.get(), s)));
      PEERLAB_RETURN_IF_ERROR(enqueueEager(w, spec, units, true));
    } else {
      PEERLAB_RETURN_IF_ERROR(enqueueEager(w, spec, units + 1, false));
    }
    if (timed) PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaEventRecord(w.ev1.get(), s)));
    gate.release();
    w.watchdog.stage("waiting for a sample");
    const Deadline d = Deadline::afterMs(kSampleMs);
    PEERLAB_RETURN_IF_ERROR(spec.nccl() ? waitStream(s, d, "NCCL sample") : w.ctx->wait(s, d, "zero-copy sample"));
    if (gate.forced()) {
      return PEERLAB_INTERNAL("the host blocked inside a CUDA call for " + std::to_string(kGateMs / 1000) +
                              " s while its stream was held at the gate (an implicit synchronization): sample void");
    }
    if (timed && sample > 0) {
      PEERLAB_ASSIGN_OR_RETURN(double us, elapsedUs(w));
      out.samples_us.push_back(us / (spec.pingpong() ? 2.0 * units : static_cast<double>(units)));
    }
  }
  if (receives) {
    w.watchdog.stage("checking the destination");
    PEERLAB_RETURN_IF_ERROR(w.checker->enqueue(w.dst->ptr, n, recv_seed, s));
    PEERLAB_ASSIGN_OR_RETURN(out.check, w.checker->collect(s, Deadline::afterMs(kSampleMs)));
  }
  return out;
}

// What each rank reports to the others after a benchmark.
struct Outcome {
  int32_t ok = 1;
  int32_t code = 0;
  int32_t timed = 0;
  int32_t enqueued = 0;
  double median = 0, p10 = 0, p90 = 0, samples = 0;
  double wrong = 0, elements = 0;
  char why[480] = {};
};

// Exchanges outcomes: `sum` gets the timed rank's numbers, both ranks' check counts and whether any rank enqueued
// calls; the first failure wins. When the exchange itself fails, the peer may have enqueued anything.
Status combine(Bootstrap& boot, const Outcome& mine, Outcome& sum) {
  std::vector<Outcome> all(static_cast<size_t>(boot.size()));
  sum.enqueued = 1;
  PEERLAB_RETURN_IF_ERROR(boot.allgather(&mine, all.data(), sizeof(Outcome), Deadline::afterMs(kExchangeMs)));
  sum.enqueued = 0;
  for (const Outcome& o : all)
    sum.enqueued = std::max(sum.enqueued, o.enqueued);
  for (const Outcome& o : all) {
    if (o.ok == 0) return Status(static_cast<StatusCode>(o.code), std::string(o.why));
  }
  for (const Outcome& o : all) {
    if (o.timed != 0) {
      sum.median = o.median;
      sum.p10 = o.p10;
      sum.p90 = o.p90;
      sum.samples = o.samples;
    }
    sum.wrong += o.wrong;
    sum.elements += o.elements;
  }
  return Status::ok();
}

// After a failed row: stop that family, and release what its stream may still wait for.
void recover(World& w, const Spec& spec, const Status& why) {
  w.watchdog.stage("recovering after a failure");
  if (spec.nccl()) {
    w.nccl_broken = why.toString();
    if (w.comm && w.comm->get() != nullptr) {
      // Aborting makes NCCL's kernels give up; the communicator is gone afterwards.
      (void)ncclCommAbort(w.comm->get());
      (void)w.comm->release();
    }
    if (!waitStream(w.nccl_stream.get(), Deadline::afterMs(kDrainMs), "draining NCCL after a failure").isOk()) {
      w.stuck = true;
    }
    return;
  }
  w.zcopy_broken = why.toString();
  w.ctx->abandon(Deadline::afterMs(kDrainMs)).ignore();
  if (!waitStream(w.stream.get(), Deadline::afterMs(kDrainMs), "draining after a failure").isOk()) w.stuck = true;
}

Record identity(const Spec& spec, const launch::OrderedPair& pair) {
  Record r;
  r.suite = "zcopy";
  r.impl = implName(spec.impl);
  r.name = recordName(spec);
  r.src = pair.first;
  r.dst = pair.second;
  r.ranks = 2;
  r.bytes = static_cast<double>(spec.bytes);
  return r;
}

// One row on the two ranks of a pair; the source's rank reports it.
PairRow measureRow(const PairContext& ctx, const Spec& spec, const std::string& row) {
  PairRow out;
  out.record = identity(spec, ctx.pair);
  Record& rec = out.record;
  const PairConfig& pc = pairConfig();
  if (!pc.error.empty()) {
    // A malformed setting is an error of the run, not a row that could not run.
    out.status = PEERLAB_INVALID_ARGUMENT(pc.error);
    return out;
  }
  auto count = deviceCount();
  if (!count.isOk() || std::max(ctx.pair.first, ctx.pair.second) >= *count) {
    out.status = PEERLAB_UNAVAILABLE("needs devices " + std::to_string(ctx.pair.first) + " and " +
                                     std::to_string(ctx.pair.second) + ", " +
                                     std::to_string(count.isOk() ? *count : 0) + " visible");
    return out;
  }
  World& w = world(ctx);
  if (!w.status->isOk()) {
    out.status = *w.status;
    return out;
  }
  const std::string& broken = spec.nccl() ? w.nccl_broken : w.zcopy_broken;
  if (!broken.empty()) {
    out.status = PEERLAB_INTERNAL("not run after an earlier failure: " + broken);
    return out;
  }
  w.watchdog.beginRow(w.me, row, std::chrono::milliseconds(kStallMs));
  w.enqueued = false;
  StatusOr<LocalResult> r = measure(w, spec);
  Outcome mine;
  mine.enqueued = w.enqueued ? 1 : 0;
  if (!r.isOk()) {
    mine.ok = 0;
    mine.code = static_cast<int32_t>(r.status().code());
    std::snprintf(mine.why, sizeof(mine.why), "rank %d: %s", w.me, r.status().toString().c_str());
  } else {
    mine.timed = r->samples_us.empty() ? 0 : 1;
    if (mine.timed != 0) {
      mine.median = median(r->samples_us);
      mine.p10 = percentile(r->samples_us, 10);
      mine.p90 = percentile(r->samples_us, 90);
      mine.samples = static_cast<double>(r->samples_us.size());
    }
    mine.wrong = static_cast<double>(r->check.wrong);
    mine.elements = static_cast<double>(r->check.elements);
  }
  w.watchdog.stage("exchanging outcomes");
  Outcome sum;
  const Status st = combine(*w.boot, mine, sum);
  if (!st.isOk()) {
    // Failed before any rank enqueued a call (a capture, the pattern setup): the channels are as they were.
    if (sum.enqueued != 0) recover(w, spec, st);
    w.watchdog.endRow();
    out.status = st;
    return out;
  }
  w.watchdog.endRow();
  if (sum.elements <= 0) {
    out.status = PEERLAB_INTERNAL("no data was checked");
    return out;
  }
  rec.time_us = sum.median;
  rec.algbw_gbps = static_cast<double>(spec.bytes) / sum.median / 1e3;
  rec.busbw_gbps = rec.algbw_gbps;
  rec.wrong = sum.wrong;
  rec.extra["p10_us"] = sum.p10;
  rec.extra["p90_us"] = sum.p90;
  rec.extra["samples"] = sum.samples;
  rec.extra["pingpong"] = spec.pingpong() ? 1 : 0;
  rec.extra["gated"] = w.gated && !spec.nccl() ? 1 : 0;
  if (!spec.nccl()) {
    // The persistent kernel is one block; otherwise what the implementation occupies for this size.
    rec.extra["sms"] = spec.mode == Mode::kKernel ? 1
                                                  : zcopy::smsOccupied(protocolOf(spec.impl), spec.bytes,
                                                                       spec.variant == Variant::kGraphKernels);
    if (spec.mode == Mode::kKernel) rec.extra["threads"] = kernelThreads(spec.bytes);
    if (protocolOf(spec.impl) == Protocol::kSmSignal && spec.mode != Mode::kKernel) {
      rec.extra["programmatic"] = pairConfig().programmatic ? 1 : 0;
    }
  }
  return out;
}

void runSpec(benchmark::State& state, const Spec& spec, const PairRowKey& key, const std::string& row) {
  PairRowOptions o;
  o.exchange_ms = kSetupMs + 2 * kStallMs;
  o.end_round = endRound;
  runPairRow(
      state, pairJob(), key, identity(spec, key.pair),
      [&](const PairContext& ctx) { return measureRow(ctx, spec, row); }, o);
}

void registerAll() {
  const PairConfig& pc = pairConfig();
  const std::vector<Spec> specs = zcopy_suite::specs(pc.calls, pc.graph_kernels);
  // Round by round; in a round every row once for all its pairs (they run it at the same time), the rows the plan runs.
  const PairJob& job = pairJob();
  for (size_t r = 0; r < job.rounds.size(); ++r) {
    for (size_t g = 0; g < specs.size(); ++g) {
      const Spec& spec = specs[g];
      for (const launch::OrderedPair& pair : job.rounds[r]) {
        report::RowKey row;
        row.impl = implName(spec.impl);
        row.name = recordName(spec);
        row.bytes = spec.bytes;
        row.src = pair.first;
        row.dst = pair.second;
        if (!planned(row)) continue;
        const std::string name = zcopy_suite::rowName(spec, pair.first, pair.second);
        const PairRowKey key{static_cast<int>(r), static_cast<int>(g), pair};
        benchmark::RegisterBenchmark(name.c_str(),
                                     [spec, key, name](benchmark::State& st) { runSpec(st, spec, key, name); })
            ->Iterations(1)
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
}

PEERLAB_BENCH_REGISTER(zcopy, registerAll);

}  // namespace
}  // namespace peerlab::bench
