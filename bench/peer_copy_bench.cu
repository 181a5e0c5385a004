// Peer enable cost, peer copy bandwidth (copy engine, SM pull, SM push, host-staged; one direction and both at once)
// and peer latency (flag ping-pong, pointer chase), for every ordered pair of visible GPUs.
//
// Timing: every benchmark runs Iterations(1) with its own sample loop and reports the median through
// UseManualTime/SetIterationTime and bench::publish. A copy sample is a batch of back-to-back copies between CUDA
// events on the stream of the device that runs them (dst for ce, sm_pull and staged, src for sm_push); for the copy
// engine and SM paths the batch is enqueued behind a gate kernel that spins on a host flag (with a %globaltimer
// deadline), so the events time the GPU, not the host's enqueue rate (nvbandwidth does the same). Staged copies are
// not gated (their chunks are host-driven). time_us is the median time per copy; bidir runs both directions of the
// pair at once, each on its own device, and a sample's time is the slower direction's.
//   algbw_gbps = bytes / time_us / 1e3 (one direction); busbw_gbps = algbw for uni, 2 x algbw (both directions
//   summed, comparable to nvbandwidth's bidirectional figure) for bidir.
// Data check: the destination is poisoned, a warm-up batch runs and is verified, the destination is poisoned again,
// the timed samples run and the result is verified again on the GPU that owns it (PatternChecker); `wrong` is the sum
// and any wrong element fails the row.
//
// Latency: BM_PeerLatency/flag is a ping-pong of one thread per GPU, each polling a flag in its own memory that the
// other writes over the link (relaxed system-scope loads and stores, no fences); time_us is half the round trip.
// flag_acq_rel is the same with release stores and acquire polls (what a protocol publishing data with the flag
// pays). pointer_chase is one thread's dependent loads through a 1 MiB chain in the peer's memory, one node per
// 128-byte line, walked in address order (nvbandwidth's device_to_device_latency_sm method); pointer_chase_random
// walks the same lines in one random cycle; pointer_chase_ld is the line walk with default (L1-allocating) loads, as
// nvbandwidth's kernel compiles; pointer_chase_sms runs pointer_chase_ld on every SM in turn and reports the mean over
// the SMs (nvbandwidth's statistic: it launches one block per SM and lets each walk alone), with min/median/max per SM.
// All time a steady-state pass after an untimed one (owner's L2 and the reader's TLB warm); time_us is the time per
// load.
//
// What runs: the plan (bench/common/plan.h: --plan, --pairs); with pair rounds, the copy-engine and SM rows of a
// round's pairs run at once, and so do its pointer chases (knob chase_in_rounds=0 keeps the chases one pair at a
// time); sizes, batches and sample counts are bench/peer_copy_suite.h's. Knobs (--knob NAME=VALUE):
// sm_copy="kernel=auto,threads=512,unroll=8,blocks_per_sm=2,hints=2,sms=0,bulk_kib=16,bulk_stages=4,
// bulk_blocks_per_sm=1" (any subset) sets the SM kernels' configuration (copy_plan.h); sm_copy_sweep=1 adds
// BM_PeerCopyTune rows (vector and bulk kernels over their parameters, 0->1 at 256 MiB, about 175 rows, ~10 s) and
// prints them as one table, fastest first, when the process exits; chase_sm_loads=N times N loads per SM in
// pointer_chase_sms (64 to the chain's length; default half the chain).

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench/common/bench_util.h"
#include "bench/common/plan.h"
#include "bench/peer_copy_suite.h"
#include "reference/core/check.h"
#include "reference/core/device_time.cuh"
#include "reference/core/devices.h"
#include "reference/core/memory.h"
#include "reference/core/pattern.h"
#include "reference/core/scoped.h"
#include "reference/core/wait.h"
#include "reference/peer/copy.h"
#include "reference/peer/peer.h"

namespace peerlab {
namespace {

using bench::knobInt;
using bench::knobText;
using bench::plan;
using bench::planned;
using bench::Record;
using peer::CopyPath;

constexpr int64_t kWaitMs = 60000;
constexpr uint64_t kDeviceTimeoutNs = 10'000'000'000ull;
constexpr size_t kMaxBytes = static_cast<size_t>(peer_copy_suite::kMaxBytes);

PEERLAB_BENCH_KNOB(sm_copy, peer_copy_suite::kSmCopyKnob, kText,
                   "the SM kernels' configuration, e.g. kernel=bulk,bulk_kib=16 (reference/peer/copy_plan.h)");
PEERLAB_BENCH_KNOB(sm_copy_sweep, peer_copy_suite::kSmCopySweepKnob, kSwitch,
                   "1 adds the BM_PeerCopyTune rows and prints them as one table (0)");
PEERLAB_BENCH_KNOB(chase_sm_loads, peer_copy_suite::kChaseSmLoadsKnob, kCount,
                   "loads timed on each SM by pointer_chase_sms, 64 to the chain's nodes (half the chain)");
PEERLAB_BENCH_KNOB(chase_in_rounds, peer_copy_suite::kChaseInRoundsKnob, kSwitch,
                   "0 runs the pointer chases one pair at a time even where the copies run in rounds (1)");

// Waits for `stream` with its device current (the event that waitStream records must belong to that device).
Status syncStream(cudaStream_t stream, const char* what) {
  int device = -1;
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaStreamGetDevice(stream, &device)));
  PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(device));
  return waitStream(stream, Deadline::afterMs(kWaitMs), what);
}

// Waits (bounded) until the host releases the gate.
__global__ void gateKernel(const uint32_t* flag, uint32_t want, uint64_t timeout_ns, uint32_t* error) {
  if (!waitFlagGe(flag, want, timeout_ns)) *error = kDeviceTimeout;
}

struct PingResult {
  uint64_t ns;
  uint32_t error;
};

// The ping-pong's flags are read and written relaxed at system scope (loadRelaxedSys / storeRelaxedSys): a poll
// always reads the flag's home (no stale L1 copy) and a store goes straight to the peer, with no fence; nothing else
// is published, so nothing needs ordering. Flag values compare wrap-safe.
__device__ __forceinline__ bool reached(uint32_t v, uint32_t want) {
  return static_cast<int32_t>(v - want) >= 0;
}

// Spins until *flag >= want (wrap-safe), reading the timer once per 256 polls so that the poll loop stays tight.
// Relaxed polls keep four loads in flight (each one is checked while the next three are under way), so a flag that
// lands is seen a quarter of a load's latency later on average instead of half; an acquire poll orders the loads
// after it, so the acquire loop polls one load at a time.
template <bool kAcqRel>
__device__ __forceinline__ bool spinUntil(const uint32_t* flag, uint32_t want, uint64_t deadline) {
  if constexpr (kAcqRel) {
    for (;;) {
      for (int i = 0; i < 256; ++i) {
        if (reached(loadAcquireSys(flag), want)) return true;
      }
      if (globalTimerNs() > deadline) return false;
    }
  } else {
    uint32_t r0 = loadRelaxedSys(flag), r1 = loadRelaxedSys(flag), r2 = loadRelaxedSys(flag);
    uint32_t r3 = loadRelaxedSys(flag);
    for (;;) {
      for (int i = 0; i < 64; ++i) {
        if (reached(r0, want)) return true;
        r0 = loadRelaxedSys(flag);
        if (reached(r1, want)) return true;
        r1 = loadRelaxedSys(flag);
        if (reached(r2, want)) return true;
        r2 = loadRelaxedSys(flag);
        if (reached(r3, want)) return true;
        r3 = loadRelaxedSys(flag);
      }
      if (globalTimerNs() > deadline) return false;
    }
  }
}

// One thread per GPU. Each side polls a flag in its own memory and writes the other side's flag over the link:
// `initiator` writes first and waits for the answer; the other answers. Flags only grow. kAcqRel: release stores
// and acquire polls at system scope (what a protocol that publishes data with the flag pays); otherwise relaxed.
template <bool kAcqRel>
__global__ void pingPongKernel(uint32_t* mine, uint32_t* theirs, uint32_t base, uint32_t warmup, uint32_t iters,
                               bool initiator, uint64_t timeout_ns, PingResult* out) {
  const uint64_t deadline = globalTimerNs() + timeout_ns;
  uint64_t t0 = globalTimerNs();
  uint32_t error = kDeviceOk;
  for (uint32_t i = 1; i <= warmup + iters; ++i) {
    if (i == warmup + 1) t0 = globalTimerNs();
    const uint32_t v = base + i;
    if (!initiator && !spinUntil<kAcqRel>(mine, v, deadline)) {
      error = kDeviceTimeout;
      break;
    }
    if (kAcqRel) {
      storeReleaseSys(theirs, v);
    } else {
      storeRelaxedSys(theirs, v);
    }
    if (initiator && !spinUntil<kAcqRel>(mine, v, deadline)) {
      error = kDeviceTimeout;
      break;
    }
  }
  out->ns = globalTimerNs() - t0;
  out->error = error;
}

struct ChaseResult {
  uint64_t ns;
  uint64_t last;
  uint32_t smid;  ///< the SM the walk ran on
  uint32_t pad;
};

// A plain (weak) load that never allocates in L1: every step is a fresh trip to the owner. (An L2-only ld.global.cg
// compiles to a strong GPU-scope load, a different path.) With kPlain, the default ld.global that nvbandwidth's
// `p = p->next` compiles to (L1-allocating; a 1 MiB walk still misses L1 on every step).
template <bool kPlain>
__device__ __forceinline__ const uint64_t* chaseNext(const uint64_t* p) {
  uint64_t v;
  if constexpr (kPlain) {
    asm volatile("ld.global.u64 %0, [%1];" : "=l"(v) : "l"(p));
  } else {
    asm volatile("ld.global.L1::no_allocate.u64 %0, [%1];" : "=l"(v) : "l"(p));
  }
  return reinterpret_cast<const uint64_t*>(v);
}

__device__ __forceinline__ uint32_t smId() {
  uint32_t id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

// One thread follows `warmup` then `loads` (a multiple of 8) dependent pointers; times the second part only.
template <bool kPlain>
__device__ __forceinline__ void chaseWalk(const uint64_t* start, uint32_t warmup, uint32_t loads, ChaseResult* out) {
  const uint64_t* p = start;
  for (uint32_t i = 0; i < warmup; ++i)
    p = chaseNext<kPlain>(p);
  if (reinterpret_cast<uintptr_t>(p) == 1) __trap();  // wait for the warm-up's last load
  const uint64_t t0 = globalTimerNs();
  for (uint32_t i = 0; i < loads; i += 8) {
#pragma unroll
    for (int u = 0; u < 8; ++u)
      p = chaseNext<kPlain>(p);
  }
  if (reinterpret_cast<uintptr_t>(p) == 1) __trap();  // the timer below reads after the last load returned
  out->ns = globalTimerNs() - t0;
  out->last = reinterpret_cast<uint64_t>(p);
  out->smid = smId();
}

template <bool kPlain>
__global__ void chaseKernel(const uint64_t* start, uint32_t warmup, uint32_t loads, ChaseResult* out) {
  chaseWalk<kPlain>(start, warmup, loads, out);
}

// nvbandwidth's statistic: a grid of one single-thread block per SM in which only block `target` walks (launched once
// per target, so every SM walks alone), averaged over the targets. Which SM issues the loads matters: the SMs sit at
// different distances from the NVLink ports.
__global__ void chaseTargetKernel(const uint64_t* start, uint32_t target, uint32_t warmup, uint32_t loads,
                                  ChaseResult* out) {
  if (blockIdx.x != target) return;
  chaseWalk<true>(start, warmup, loads, out + target);
}

// Everything the benchmarks share, created on first use.
// The pointer chase's chain (measureChase below): 1 MiB, one node per 128-byte line.
constexpr size_t kChaseBytes = size_t{1} << 20;
constexpr size_t kChaseStride = 128;
constexpr unsigned long kChaseNodes = kChaseBytes / kChaseStride;

struct Env {
  int devices = 0;
  uint64_t run = 0;
  std::optional<peer::PeerCopier> copier;
  std::vector<Stream> streams;
  std::vector<Event> start;
  std::vector<Event> stop;
  std::vector<std::optional<PatternChecker>> checkers;
  std::vector<DeviceBuffer> src;
  std::vector<DeviceBuffer> dst;
  PinnedBuffer gate;  // [0] the flag, [1 + d] device d's error word; mapped for the GPUs
  uint32_t gate_value = 0;
  uint32_t chase_sm_loads = 0;  // pointer_chase_sms: dependent loads timed on each SM (0: half the chain)

  uint32_t* gateFlag() { return gate->as<uint32_t>(); }
  uint32_t* gateError(int d) { return gate->as<uint32_t>() + 1 + d; }

  Status ensureBuffers(int d) {
    if (src[d]) return Status::ok();
    PEERLAB_ASSIGN_OR_RETURN(src[d], allocDevice(d, kMaxBytes));
    PEERLAB_ASSIGN_OR_RETURN(dst[d], allocDevice(d, kMaxBytes));
    return Status::ok();
  }
};

// NOTE: the environment is never destroyed: static destructors run after the CUDA runtime's own teardown, and
// process exit releases the GPU resources anyway.
StatusOr<Env*> env() {
  static Env* e = nullptr;
  static Status failed = Status::ok();
  if (e) return e;
  if (!failed.isOk()) return failed;
  auto build = [&]() -> Status {
    auto made = std::make_unique<Env>();
    PEERLAB_ASSIGN_OR_RETURN(made->devices, deviceCount());
    made->run = (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
    peer::PeerCopierOptions options;
    if (const std::string text = knobText(peer_copy_suite::kSmCopyKnob); !text.empty()) {
      auto config = peer::parseSmCopyConfig(text);
      if (!config.isOk()) return config.status().withContext("knob sm_copy");
      options.sm = *config;
    }
    if (!knobText(peer_copy_suite::kChaseSmLoadsKnob).empty()) {
      PEERLAB_ASSIGN_OR_RETURN(const int64_t v,
                               knobInt(peer_copy_suite::kChaseSmLoadsKnob, 0, 64, static_cast<int64_t>(kChaseNodes)));
      made->chase_sm_loads = static_cast<uint32_t>(v);
    }
    PEERLAB_ASSIGN_OR_RETURN(peer::PeerCopier copier, peer::PeerCopier::create(options));
    made->copier.emplace(std::move(copier));
    const int n = made->devices;
    made->checkers.resize(n);
    made->src.resize(n);
    made->dst.resize(n);
    for (int d = 0; d < n; ++d) {
      PEERLAB_ASSIGN_OR_RETURN(Stream s, createStream(d));
      made->streams.push_back(std::move(s));
      PEERLAB_ASSIGN_OR_RETURN(Event a, createEvent(d, cudaEventDefault));
      made->start.push_back(std::move(a));
      PEERLAB_ASSIGN_OR_RETURN(Event b, createEvent(d, cudaEventDefault));
      made->stop.push_back(std::move(b));
      PEERLAB_ASSIGN_OR_RETURN(PatternChecker c, PatternChecker::create(d));
      made->checkers[d].emplace(std::move(c));
    }
    PEERLAB_ASSIGN_OR_RETURN(made->gate,
                             allocPinned(sizeof(uint32_t) * (1 + n), cudaHostAllocMapped | cudaHostAllocPortable));
    std::fill_n(made->gate->as<uint32_t>(), 1 + n, 0u);
    e = made.release();
    return Status::ok();
  };
  if (Status st = build(); !st.isOk()) {
    failed = st;
    return failed;
  }
  return e;
}

uint64_t hashName(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s)
    h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

using peer_copy_suite::pairName;

// Reports a failed or unavailable Status for the row.
void finish(benchmark::State& state, const Record& rec, const Status& st) {
  if (st.code() == StatusCode::kUnavailable) {
    bench::skip(state, rec, st.toString());
  } else {
    bench::fail(state, rec, st);
  }
}

// ---- peer copies ----

enum class Method { kCopier, kMemcpyPeerNoP2P };

struct CopySpec {
  std::string impl;
  Method method = Method::kCopier;
  CopyPath path = CopyPath::kCopyEngine;
  bool bidir = false;
  int a = 0;
  int b = 1;
  size_t bytes = 0;
  std::optional<peer::SmCopyConfig> sm;  // a tuning row's configuration
  std::string name = "uni";
};

struct Direction {
  int src;
  int dst;
  int engine;  // device whose stream issues and times the copy
  uint64_t seed;
};

int engineFor(const CopySpec& spec, int src, int dst) {
  return spec.method == Method::kCopier && spec.path == CopyPath::kSmPush ? src : dst;
}

// Host-staged copies and the driver's anchor are slow: fewer, smaller batches (bench/peer_copy_suite.h).
bool slowCopy(const CopySpec& spec) {
  return spec.path == CopyPath::kStaged || spec.method != Method::kCopier;
}

size_t batchFor(const CopySpec& spec) {
  return static_cast<size_t>(
      peer_copy_suite::batchFor(static_cast<int64_t>(spec.bytes), slowCopy(spec), spec.path == CopyPath::kStaged));
}

// The plan's samples where it sets them, else the size's.
int samplesFor(const CopySpec& spec) {
  if (plan().samples > 0) return plan().samples;
  return peer_copy_suite::samplesFor(static_cast<int64_t>(spec.bytes), slowCopy(spec));
}

// Restores peer access between a and b as it was found, for rows that must measure without it.
class PeerAccessRestorer {
 public:
  PeerAccessRestorer(int a, int b, bool reenable) : a_(a), b_(b), reenable_(reenable) {}
  ~PeerAccessRestorer() {
    if (reenable_) peer::enablePeerAccess(a_, b_).ignore();
  }

 private:
  int a_, b_;
  bool reenable_;
};

Status issueCopy(Env& e, const CopySpec& spec, const Direction& d) {
  void* to = e.dst[d.dst]->ptr;
  const void* from = e.src[d.src]->ptr;
  cudaStream_t s = e.streams[d.engine].get();
  if (spec.method == Method::kMemcpyPeerNoP2P) {
    PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(d.engine));
    return PEERLAB_CUDA(cudaMemcpyPeerAsync(to, d.dst, from, d.src, spec.bytes, s));
  }
  PEERLAB_ASSIGN_OR_RETURN(CopyPath ran, e.copier->copy(to, d.dst, from, d.src, spec.bytes, s, spec.path));
  if (ran != spec.path) return PEERLAB_INTERNAL("copy ran " + std::string(peer::copyPathName(ran)));
  return Status::ok();
}

// Poisons every destination and waits.
Status poisonAll(Env& e, const CopySpec& spec, const std::vector<Direction>& dirs) {
  for (const auto& d : dirs) {
    PEERLAB_RETURN_IF_ERROR(poisonPattern(e.dst[d.dst]->ptr, spec.bytes, d.seed, e.streams[d.dst].get()));
  }
  for (const auto& d : dirs) {
    PEERLAB_RETURN_IF_ERROR(syncStream(e.streams[d.dst].get(), "poison"));
  }
  return Status::ok();
}

// Checks every destination on its owner after the copies issued on the engines' streams.
StatusOr<PatternCheck> verifyAll(Env& e, const CopySpec& spec, const std::vector<Direction>& dirs) {
  PatternCheck total;
  for (const auto& d : dirs) {
    PEERLAB_RETURN_IF_ERROR(syncStream(e.streams[d.engine].get(), "copies"));
    PEERLAB_RETURN_IF_ERROR(e.checkers[d.dst]->enqueue(e.dst[d.dst]->ptr, spec.bytes, d.seed, e.streams[d.dst].get()));
    PEERLAB_ASSIGN_OR_RETURN(PatternCheck c,
                             e.checkers[d.dst]->collect(e.streams[d.dst].get(), Deadline::afterMs(kWaitMs)));
    total.elements += c.elements;
    total.wrong += c.wrong;
    total.first_bad = std::min(total.first_bad, c.first_bad);
  }
  return total;
}

Record copyIdentity(const CopySpec& spec);

// The row `spec` for every pair of `pairs` at once (pairs of one round: no GPU in two of them), each pair on its own
// engines' streams; one record per pair. A row of one pair is the plain case.
StatusOr<std::map<std::pair<int, int>, Record>> measureCopies(const CopySpec& spec,
                                                              const std::vector<std::pair<int, int>>& pairs) {
  PEERLAB_ASSIGN_OR_RETURN(Env * e, env());
  if (e->devices < 2) return PEERLAB_UNAVAILABLE("needs 2 GPUs, " + std::to_string(e->devices) + " visible");
  std::vector<Direction> dirs;
  std::vector<size_t> owner;  // the pair each direction belongs to
  for (size_t i = 0; i < pairs.size(); ++i) {
    const auto [a, b] = pairs[i];
    if (a >= e->devices || b >= e->devices) return PEERLAB_UNAVAILABLE("pair not visible");
    dirs.push_back({a, b, engineFor(spec, a, b), 0});
    owner.push_back(i);
    if (spec.bidir) {
      dirs.push_back({b, a, engineFor(spec, b, a), 0});
      owner.push_back(i);
    }
  }
  for (auto& d : dirs) {
    d.seed = patternSeed(e->run, d.src, d.dst, hashName(spec.impl + spec.name) ^ spec.bytes);
    PEERLAB_RETURN_IF_ERROR(e->ensureBuffers(d.src));
    PEERLAB_RETURN_IF_ERROR(e->ensureBuffers(d.dst));
  }

  std::optional<PeerAccessRestorer> restore;
  std::optional<peer::SmCopyConfig> previous_sm;
  if (spec.method == Method::kMemcpyPeerNoP2P && pairs.size() != 1) {
    return PEERLAB_INVALID_ARGUMENT("the driver-staged anchor runs one pair at a time");
  }
  if (spec.method == Method::kMemcpyPeerNoP2P) {
    // The driver stages through host memory only when peer access is off: switch it off for this row.
    PEERLAB_ASSIGN_OR_RETURN(peer::PeerState before, peer::peerState(spec.a, spec.b));
    const bool was_on = before.forward == peer::PeerAccess::kEnabled || before.reverse == peer::PeerAccess::kEnabled ||
                        before.forward == peer::PeerAccess::kUnknown || before.reverse == peer::PeerAccess::kUnknown;
    PEERLAB_RETURN_IF_ERROR(peer::disablePeerAccess(spec.a, spec.b));
    restore.emplace(spec.a, spec.b, was_on);
  } else {
    for (const auto& d : dirs)
      PEERLAB_RETURN_IF_ERROR(e->copier->prepare(d.src, d.dst, spec.path));
    if (spec.sm) {
      previous_sm = e->copier->smConfig();
      PEERLAB_RETURN_IF_ERROR(e->copier->setSmConfig(*spec.sm));
    }
  }
  struct SmRestorer {
    Env* e;
    std::optional<peer::SmCopyConfig>& previous;
    ~SmRestorer() {
      if (previous) e->copier->setSmConfig(*previous).ignore();
    }
  } sm_restorer{e, previous_sm};

  // Source patterns, written by the source's owner.
  for (const auto& d : dirs) {
    PEERLAB_RETURN_IF_ERROR(fillPattern(e->src[d.src]->ptr, spec.bytes, d.seed, e->streams[d.src].get()));
    PEERLAB_RETURN_IF_ERROR(syncStream(e->streams[d.src].get(), "fill"));
  }
  const size_t batch = batchFor(spec);
  const int samples = samplesFor(spec);
  const bool gated = spec.method == Method::kCopier && spec.path != CopyPath::kStaged;

  // Warm-up batch, verified.
  PEERLAB_RETURN_IF_ERROR(poisonAll(*e, spec, dirs));
  for (size_t k = 0; k < batch; ++k) {
    for (const auto& d : dirs)
      PEERLAB_RETURN_IF_ERROR(issueCopy(*e, spec, d));
  }
  std::vector<PatternCheck> warm_by_pair(pairs.size());
  for (size_t p = 0; p < pairs.size(); ++p) {
    std::vector<Direction> mine;
    for (size_t i = 0; i < dirs.size(); ++i)
      if (owner[i] == p) mine.push_back(dirs[i]);
    PEERLAB_ASSIGN_OR_RETURN(warm_by_pair[p], verifyAll(*e, spec, mine));
  }
  PEERLAB_RETURN_IF_ERROR(poisonAll(*e, spec, dirs));

  std::vector<double> per_sample;
  std::vector<std::vector<double>> per_dir(dirs.size());
  for (int s = 0; s < samples; ++s) {
    const uint32_t want = ++e->gate_value;
    // Opens the gate on every exit from this sample, so an error never leaves a gate kernel spinning.
    struct GateOpener {
      uint32_t* flag;
      uint32_t want;
      ~GateOpener() { __atomic_store_n(flag, want, __ATOMIC_RELEASE); }
    } opener{e->gateFlag(), want};
    for (const auto& d : dirs) {
      PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(d.engine));
      cudaStream_t st = e->streams[d.engine].get();
      if (gated) {
        *e->gateError(d.engine) = 0;
        gateKernel<<<1, 1, 0, st>>>(e->gateFlag(), want, kDeviceTimeoutNs, e->gateError(d.engine));
        PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA_LAUNCH("gateKernel"));
      }
      PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaEventRecord(e->start[d.engine].get(), st)));
    }
    for (size_t k = 0; k < batch; ++k) {
      for (const auto& d : dirs)
        PEERLAB_RETURN_IF_ERROR(issueCopy(*e, spec, d));
    }
    for (const auto& d : dirs) {
      PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(d.engine));
      PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaEventRecord(e->stop[d.engine].get(), e->streams[d.engine].get())));
    }
    __atomic_store_n(e->gateFlag(), want, __ATOMIC_RELEASE);
    double slowest = 0;
    for (size_t i = 0; i < dirs.size(); ++i) {
      const auto& d = dirs[i];
      PEERLAB_RETURN_IF_ERROR(waitEvent(e->stop[d.engine].get(), Deadline::afterMs(kWaitMs), "timed batch"));
      if (gated && *e->gateError(d.engine) != kDeviceOk) {
        return PEERLAB_TIMEOUT("gate kernel on device " + std::to_string(d.engine) + " timed out");
      }
      float ms = 0;
      PEERLAB_RETURN_IF_ERROR(
          PEERLAB_CUDA(cudaEventElapsedTime(&ms, e->start[d.engine].get(), e->stop[d.engine].get())));
      const double us = 1e3 * ms / static_cast<double>(batch);
      per_dir[i].push_back(us);
      slowest = std::max(slowest, us);
    }
    per_sample.push_back(slowest);
  }
  std::map<std::pair<int, int>, Record> out;
  for (size_t p = 0; p < pairs.size(); ++p) {
    const auto [a, b] = pairs[p];
    std::vector<Direction> mine;
    std::vector<size_t> idx;
    for (size_t i = 0; i < dirs.size(); ++i) {
      if (owner[i] != p) continue;
      mine.push_back(dirs[i]);
      idx.push_back(i);
    }
    CopySpec one = spec;
    one.a = a;
    one.b = b;
    Record rec = copyIdentity(one);
    // Per sample, the slower of this pair's directions.
    std::vector<double> per_sample(per_dir[idx.front()].size(), 0.0);
    for (size_t k = 0; k < per_sample.size(); ++k) {
      for (size_t i : idx)
        per_sample[k] = std::max(per_sample[k], per_dir[i][k]);
    }
    const PatternCheck& warm_one = warm_by_pair[p];
    PEERLAB_ASSIGN_OR_RETURN(PatternCheck timed, verifyAll(*e, spec, mine));
    const double time_us = bench::median(per_sample);
    rec.time_us = time_us;
    rec.algbw_gbps = static_cast<double>(spec.bytes) / time_us / 1e3;
    rec.busbw_gbps = spec.bidir ? 2 * rec.algbw_gbps : rec.algbw_gbps;
    rec.wrong = static_cast<double>(warm_one.wrong + timed.wrong);
    const int sms = spec.method == Method::kCopier ? e->copier->smsFor(spec.path, a, b, spec.bytes) : 0;
    rec.extra["sms"] = sms;
    rec.extra["samples"] = samples;
    rec.extra["batch"] = static_cast<double>(batch);
    rec.extra["p10_us"] = bench::percentile(per_sample, 10);
    rec.extra["p90_us"] = bench::percentile(per_sample, 90);
    if (pairs.size() > 1) rec.extra["concurrent_pairs"] = static_cast<double>(pairs.size());
    if (spec.bidir) {
      rec.extra["fwd_gbps"] = static_cast<double>(spec.bytes) / bench::median(per_dir[idx[0]]) / 1e3;
      rec.extra["rev_gbps"] = static_cast<double>(spec.bytes) / bench::median(per_dir[idx[1]]) / 1e3;
    }
    if (warm_one.wrong + timed.wrong > 0) {
      rec.extra["first_bad"] = static_cast<double>(std::min(warm_one.first_bad, timed.first_bad));
    }
    if (spec.method == Method::kCopier && (spec.path == CopyPath::kSmPull || spec.path == CopyPath::kSmPush)) {
      // 1: the bulk-copy kernel ran, 0: the vector kernel.
      const peer::SmKernel kernel = e->copier->smKernelFor(spec.path, a, b, e->dst[b]->ptr, e->src[a]->ptr, spec.bytes);
      rec.extra["bulk"] = kernel == peer::SmKernel::kBulk ? 1 : 0;
    }
    if (spec.sm) {
      rec.extra["threads"] = spec.sm->threads_per_block;
      rec.extra["unroll"] = spec.sm->unroll;
      rec.extra["blocks_per_sm"] = spec.sm->blocks_per_sm;
      rec.extra["hints"] = spec.sm->hints;
      rec.extra["sm_cap"] = spec.sm->sms;
      rec.extra["bulk_kib"] = spec.sm->bulk_kib;
      rec.extra["bulk_stages"] = spec.sm->bulk_stages;
      rec.extra["bulk_blocks_per_sm"] = spec.sm->bulk_blocks_per_sm;
    }
    out[{a, b}] = rec;
  }
  return out;
}

Record copyIdentity(const CopySpec& spec) {
  Record r;
  r.suite = "peer_copy";
  r.impl = spec.impl;
  r.name = spec.name;
  r.src = spec.a;
  r.dst = spec.b;
  r.bytes = static_cast<double>(spec.bytes);
  return r;
}

// The SM tuning sweep's results, printed as one table when the process exits.
struct TuneRow {
  std::string path;
  std::string shape;   // uni or bidir
  std::string label;   // compact configuration
  std::string config;  // knob sm_copy value
  double gbps = 0;
  double p10 = 0, p90 = 0;
  int bulk = 0;
  bool ok = false;
  std::string why;
};

std::vector<TuneRow>& tuneRows() {
  static std::vector<TuneRow> rows;
  return rows;
}

void printTuneTable() {
  auto rows = tuneRows();
  if (rows.empty()) return;
  std::stable_sort(rows.begin(), rows.end(), [](const TuneRow& x, const TuneRow& y) {
    if (x.shape != y.shape) return x.shape > y.shape;  // uni first
    if (x.path != y.path) return x.path < y.path;
    return x.gbps > y.gbps;
  });
  std::printf("\nSM copy sweep, 0->1, 256 MiB: algbw GB/s per direction (median; p10-p90), fastest first\n");
  std::printf("%-8s %-6s %-32s %8s %17s  %s\n", "path", "shape", "config", "GB/s", "p10-p90", "kernel");
  std::string last;
  for (const TuneRow& r : rows) {
    if (r.path + r.shape != last && !last.empty()) std::printf("\n");
    last = r.path + r.shape;
    if (!r.ok) {
      std::printf("%-8s %-6s %-32s %8s  %.70s\n", r.path.c_str(), r.shape.c_str(), r.label.c_str(), "-", r.why.c_str());
      continue;
    }
    std::printf("%-8s %-6s %-32s %8.1f %8.1f-%-8.1f  %s\n", r.path.c_str(), r.shape.c_str(), r.label.c_str(), r.gbps,
                r.p10, r.p90, r.bulk ? "bulk" : "vec");
  }
  std::printf("\nBest per path (knob sm_copy value):\n");
  std::string seen;
  for (const TuneRow& r : rows) {
    if (!r.ok || seen.find("|" + r.path + r.shape + "|") != std::string::npos) continue;
    seen += "|" + r.path + r.shape + "|";
    std::printf("  %-8s %-6s %8.1f GB/s  --knob sm_copy=%s\n", r.path.c_str(), r.shape.c_str(), r.gbps,
                r.config.c_str());
  }
  std::fflush(stdout);
}

// Rows measured with the other pairs of their round, waiting for their own benchmark to report them.
std::map<std::string, StatusOr<Record>>& measuredRows() {
  static std::map<std::string, StatusOr<Record>> rows;
  return rows;
}

std::string rowKey(const CopySpec& spec, int a, int b) {
  return spec.impl + "/" + spec.name + "/" + std::to_string(a) + "-" + std::to_string(b) + "/" +
         std::to_string(spec.bytes);
}

// `group`: the pairs that measure this row at once (the pairs of its round; just its own pair otherwise).
void copyBenchmark(benchmark::State& state, const CopySpec& spec, const std::string& tune_label,
                   const std::vector<std::pair<int, int>>& group) {
  Record rec = copyIdentity(spec);
  TuneRow row;
  if (spec.sm) {
    row.path = std::string(peer::copyPathName(spec.path));
    row.shape = spec.bidir ? "bidir" : "uni";
    row.label = tune_label;
    row.config = peer::formatSmCopyConfig(*spec.sm);
  }
  for (auto _ : state) {
    (void)_;
    StatusOr<Record> mine = PEERLAB_INTERNAL("not measured");
    auto& cache = measuredRows();
    if (auto it = cache.find(rowKey(spec, spec.a, spec.b)); it != cache.end()) {
      mine = std::move(it->second);
      cache.erase(it);
    } else {
      auto rows = measureCopies(spec, group.empty() ? std::vector<std::pair<int, int>>{{spec.a, spec.b}} : group);
      for (const auto& [a, b] : group) {
        if (a == spec.a && b == spec.b) continue;
        if (rows.isOk()) {
          cache.emplace(rowKey(spec, a, b), rows->at({a, b}));
        } else {
          cache.emplace(rowKey(spec, a, b), rows.status());
        }
      }
      if (rows.isOk()) {
        mine = rows->at({spec.a, spec.b});
      } else {
        mine = rows.status();
      }
    }
    if (!mine.isOk()) {
      row.why = mine.status().toString();
      finish(state, rec, mine.status());
      break;
    }
    rec = *mine;
    state.SetIterationTime(rec.time_us * 1e-6);
    bench::publish(state, rec);
    row.ok = rec.wrong == 0;
    if (!row.ok) row.why = "wrong data";
    row.gbps = rec.algbw_gbps;
    // Per-direction bandwidth of the sample percentiles (the slower time is the lower bandwidth).
    row.p10 = static_cast<double>(spec.bytes) / rec.extra["p90_us"] / 1e3;
    row.p90 = static_cast<double>(spec.bytes) / rec.extra["p10_us"] / 1e3;
    row.bulk = static_cast<int>(rec.extra["bulk"]);
  }
  if (spec.sm) tuneRows().push_back(row);
}

// ---- peer enable ----

Status measureEnable(const Record& id, bool first, Record& rec) {
  PEERLAB_ASSIGN_OR_RETURN(Env * e, env());
  if (e->devices < 2) return PEERLAB_UNAVAILABLE("needs 2 GPUs, " + std::to_string(e->devices) + " visible");
  const int a = id.src, b = id.dst;
  PEERLAB_ASSIGN_OR_RETURN(peer::PeerState before, peer::peerState(a, b));
  const bool was_off =
      before.forward == peer::PeerAccess::kNotEnabled && before.reverse == peer::PeerAccess::kNotEnabled;
  PEERLAB_RETURN_IF_ERROR(peer::enablePeerAccess(a, b));
  const int samples = first ? 15 : 200;
  std::vector<double> us;
  for (int i = 0; i < samples; ++i) {
    if (first) PEERLAB_RETURN_IF_ERROR(peer::disablePeerAccess(a, b));
    const auto t0 = std::chrono::steady_clock::now();
    Status st = peer::enablePeerAccess(a, b);
    const auto t1 = std::chrono::steady_clock::now();
    PEERLAB_RETURN_IF_ERROR(st);
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  if (was_off) PEERLAB_RETURN_IF_ERROR(peer::disablePeerAccess(a, b));
  rec.time_us = bench::median(us);
  rec.wrong = 0;
  rec.extra["samples"] = samples;
  rec.extra["p10_us"] = bench::percentile(us, 10);
  rec.extra["p90_us"] = bench::percentile(us, 90);
  return Status::ok();
}

void enableBenchmark(benchmark::State& state, int a, int b, bool first) {
  Record rec;
  rec.suite = "peer_enable";
  rec.impl = "peerlab.enable";
  rec.name = first ? "first" : "repeat";
  rec.src = a;
  rec.dst = b;
  for (auto _ : state) {
    (void)_;
    Status st = measureEnable(rec, first, rec);
    if (!st.isOk()) {
      finish(state, rec, st);
      break;
    }
    state.SetIterationTime(rec.time_us * 1e-6);
    bench::publish(state, rec);
  }
}

// ---- peer latency ----

constexpr uint32_t kPingWarmup = 100;
constexpr uint32_t kPingIters = 2000;

Status measureFlag(int a, int b, bool acq_rel, Record& rec) {
  PEERLAB_ASSIGN_OR_RETURN(Env * e, env());
  if (e->devices < 2) return PEERLAB_UNAVAILABLE("needs 2 GPUs, " + std::to_string(e->devices) + " visible");
  PEERLAB_RETURN_IF_ERROR(peer::enablePeerAccess(a, b));
  // Each GPU polls a flag in its own memory; the other writes it over the link. Freed with its device current.
  DeviceBuffer flag_a, flag_b;
  struct Release {
    int a, b;
    DeviceBuffer &fa, &fb;
    ~Release() {
      if (auto g = ScopedDevice::make(a); g.isOk()) fa.reset();
      if (auto g = ScopedDevice::make(b); g.isOk()) fb.reset();
    }
  } release{a, b, flag_a, flag_b};
  PEERLAB_ASSIGN_OR_RETURN(flag_a, allocDevice(a, 256));
  PEERLAB_ASSIGN_OR_RETURN(flag_b, allocDevice(b, 256));
  for (auto [dev, buf] : {std::pair{a, &flag_a}, std::pair{b, &flag_b}}) {
    PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(dev));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaMemsetAsync((*buf)->ptr, 0, 256, e->streams[dev].get())));
    PEERLAB_RETURN_IF_ERROR(syncStream(e->streams[dev].get(), "flag reset"));
  }
  PEERLAB_ASSIGN_OR_RETURN(PinnedBuffer results,
                           allocPinned(2 * sizeof(PingResult), cudaHostAllocMapped | cudaHostAllocPortable));
  auto* res = results->as<PingResult>();
  auto kernel = acq_rel ? pingPongKernel<true> : pingPongKernel<false>;
  const int samples = 15;
  uint32_t base = 0;
  std::vector<double> one_way;
  for (int s = 0; s < samples; ++s) {
    res[0] = PingResult{0, kDeviceTimeout};
    res[1] = PingResult{0, kDeviceTimeout};
    // The answering side first, so it is polling when the first flag arrives (both kernels must be co-resident,
    // which one block each on otherwise idle GPUs is; the device deadline bounds the wait if they are not).
    {
      PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(b));
      kernel<<<1, 1, 0, e->streams[b].get()>>>(flag_b->as<uint32_t>(), flag_a->as<uint32_t>(), base, kPingWarmup,
                                               kPingIters, false, kDeviceTimeoutNs / 5, &res[1]);
      PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA_LAUNCH("pingPongKernel"));
    }
    {
      PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(a));
      kernel<<<1, 1, 0, e->streams[a].get()>>>(flag_a->as<uint32_t>(), flag_b->as<uint32_t>(), base, kPingWarmup,
                                               kPingIters, true, kDeviceTimeoutNs / 5, &res[0]);
      PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA_LAUNCH("pingPongKernel"));
    }
    for (int d : {a, b}) {
      PEERLAB_RETURN_IF_ERROR(syncStream(e->streams[d].get(), "ping-pong"));
    }
    if (res[0].error != kDeviceOk || res[1].error != kDeviceOk) {
      return PEERLAB_TIMEOUT("ping-pong " + pairName(a, b, true) + ": a flag never arrived (device deadline)");
    }
    base += kPingWarmup + kPingIters;
    // The initiator's loop is kPingIters round trips: write the peer's flag, see the answer in its own.
    one_way.push_back(static_cast<double>(res[0].ns) / kPingIters / 2 / 1e3);
  }
  rec.time_us = bench::median(one_way);
  rec.wrong = 0;
  rec.extra["round_trip_us"] = 2 * rec.time_us;
  rec.extra["iterations"] = kPingIters;
  rec.extra["samples"] = samples;
  rec.extra["p10_us"] = bench::percentile(one_way, 10);
  rec.extra["p90_us"] = bench::percentile(one_way, 90);
  return Status::ok();
}

// The pointer chase: one node per 128-byte line of a 1 MiB chain in the owner's memory (L2-resident on the owner,
// covered by the reader's TLB after the untimed first pass), each load depending on the previous one. kLineWalk
// visits the lines in address order, as nvbandwidth's device_to_device_latency_sm does (its 128-byte stride; its
// kernels walk about 1 MB from the buffer start); kRandom visits them in one random cycle (no locality at all).
// kEverySm is the line walk with default loads on every SM in turn (chaseTargetKernel), reported as the mean over
// the SMs like nvbandwidth's figure, with the spread between SMs beside it.
enum class ChasePattern { kLineWalk, kRandom, kLineWalkPlain, kEverySm };

Status measureChase(int reader, int owner, ChasePattern pattern, Record& rec) {
  PEERLAB_ASSIGN_OR_RETURN(Env * e, env());
  if (e->devices < 2) return PEERLAB_UNAVAILABLE("needs 2 GPUs, " + std::to_string(e->devices) + " visible");
  {
    // The pairs of a round chase on threads of their own: peer access is enabled one pair at a time.
    static std::mutex enabling;
    std::lock_guard<std::mutex> lock(enabling);
    PEERLAB_RETURN_IF_ERROR(peer::enablePeerAccess(reader, owner));
  }
  DeviceBuffer chain;
  struct Release {
    int owner;
    DeviceBuffer& chain;
    ~Release() {
      if (auto g = ScopedDevice::make(owner); g.isOk()) chain.reset();
    }
  } release{owner, chain};
  PEERLAB_ASSIGN_OR_RETURN(chain, allocDevice(owner, kChaseBytes));
  const size_t nodes = kChaseBytes / kChaseStride;
  const size_t words = kChaseStride / sizeof(uint64_t);
  std::vector<size_t> order(nodes);
  std::iota(order.begin(), order.end(), size_t{0});
  if (pattern == ChasePattern::kRandom) {
    // A random single cycle through all nodes (Sattolo).
    std::mt19937_64 rng(e->run ^ hashName(pairName(reader, owner, false)));
    for (size_t i = nodes - 1; i > 0; --i)
      std::swap(order[i], order[rng() % i]);
  }
  std::vector<size_t> next(nodes);
  for (size_t i = 0; i < nodes; ++i)
    next[order[i]] = order[(i + 1) % nodes];
  const auto base = reinterpret_cast<uint64_t>(chain->ptr);
  std::vector<uint64_t> host(kChaseBytes / sizeof(uint64_t), 0);
  for (size_t i = 0; i < nodes; ++i)
    host[i * words] = base + next[i] * kChaseStride;
  {
    PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(owner));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(
        cudaMemcpyAsync(chain->ptr, host.data(), kChaseBytes, cudaMemcpyHostToDevice, e->streams[owner].get())));
    PEERLAB_RETURN_IF_ERROR(syncStream(e->streams[owner].get(), "chain upload"));
  }
  int sms = 1;
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, reader)));
  PEERLAB_ASSIGN_OR_RETURN(PinnedBuffer out, allocPinned(sizeof(ChaseResult) * static_cast<size_t>(sms),
                                                         cudaHostAllocMapped | cudaHostAllocPortable));
  auto* res = out->as<ChaseResult>();
  const auto loads = static_cast<uint32_t>(nodes);
  const int samples = pattern == ChasePattern::kEverySm ? 0 : 7;
  std::vector<double> ns_per_load;
  uint64_t wrong = 0;
  // Where the chain is after `steps` steps from node 0.
  auto expected = [&](uint64_t steps) {
    size_t at = 0;
    for (uint64_t i = 0; i < steps; ++i)
      at = next[at];
    return base + at * kChaseStride;
  };
  PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(reader));
  for (int s = -1; s < samples; ++s) {
    // Sample -1 walks the whole cycle once untimed first (the owner's L2 and the reader's TLB warm up), then a timed
    // pass that is not kept; the kept samples warm up for 64 loads only.
    const uint32_t warm = s < 0 ? loads : 64;
    *res = ChaseResult{0, 0};
    if (pattern == ChasePattern::kLineWalkPlain || pattern == ChasePattern::kEverySm) {
      chaseKernel<true><<<1, 1, 0, e->streams[reader].get()>>>(chain->as<const uint64_t>(), warm, loads, res);
    } else {
      chaseKernel<false><<<1, 1, 0, e->streams[reader].get()>>>(chain->as<const uint64_t>(), warm, loads, res);
    }
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA_LAUNCH("chaseKernel"));
    PEERLAB_RETURN_IF_ERROR(syncStream(e->streams[reader].get(), "pointer chase"));
    // After warm + loads steps from node 0 the chain is at a known node.
    if (res->last != expected(warm + static_cast<uint64_t>(loads))) ++wrong;
    if (s >= 0) ns_per_load.push_back(static_cast<double>(res->ns) / loads);
  }
  if (pattern == ChasePattern::kEverySm) {
    // Each SM walks half the chain (or knob chase_sm_loads loads: qualify's standard level walks fewer) after a
    // short warm-up of its own (the owner's L2 is warm from the pass above; the 1 MiB chain lies within one or two
    // pages, so the first loads warm this SM's TLB).
    const uint32_t sm_warm = 256;
    const uint32_t sm_loads = e->chase_sm_loads ? e->chase_sm_loads : loads / 2;
    std::set<uint32_t> seen;  // %smid values (they need not be dense)
    const uint64_t sm_last = expected(sm_warm + static_cast<uint64_t>(sm_loads));  // the same walk on every SM
    for (int t = 0; t < sms; ++t) {
      res[t] = ChaseResult{0, 0, 0, 0};
      chaseTargetKernel<<<sms, 1, 0, e->streams[reader].get()>>>(chain->as<const uint64_t>(), static_cast<uint32_t>(t),
                                                                 sm_warm, sm_loads, res);
      PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA_LAUNCH("chaseTargetKernel"));
      PEERLAB_RETURN_IF_ERROR(syncStream(e->streams[reader].get(), "pointer chase (one SM)"));
      if (res[t].last != sm_last) ++wrong;
      ns_per_load.push_back(static_cast<double>(res[t].ns) / sm_loads);
      seen.insert(res[t].smid);
    }
    const auto fastest = std::min_element(ns_per_load.begin(), ns_per_load.end()) - ns_per_load.begin();
    double sum = 0;
    for (double v : ns_per_load)
      sum += v;
    const double mean = sum / static_cast<double>(ns_per_load.size());
    rec.time_us = mean / 1e3;
    rec.wrong = static_cast<double>(wrong);
    rec.extra["ns_per_load"] = mean;
    rec.extra["median_sm_ns"] = bench::median(ns_per_load);
    rec.extra["min_sm_ns"] = ns_per_load[static_cast<size_t>(fastest)];
    rec.extra["max_sm_ns"] = *std::max_element(ns_per_load.begin(), ns_per_load.end());
    rec.extra["fastest_smid"] = res[fastest].smid;
    rec.extra["sms"] = sms;
    rec.extra["distinct_sms"] = static_cast<double>(seen.size());
    rec.extra["chain_bytes"] = static_cast<double>(kChaseBytes);
    rec.extra["stride_bytes"] = static_cast<double>(kChaseStride);
    rec.extra["loads"] = sm_loads;
    return Status::ok();
  }
  rec.time_us = bench::median(ns_per_load) / 1e3;
  rec.wrong = static_cast<double>(wrong);
  rec.extra["ns_per_load"] = bench::median(ns_per_load);
  rec.extra["p10_ns"] = bench::percentile(ns_per_load, 10);
  rec.extra["p90_ns"] = bench::percentile(ns_per_load, 90);
  rec.extra["chain_bytes"] = static_cast<double>(kChaseBytes);
  rec.extra["stride_bytes"] = static_cast<double>(kChaseStride);
  rec.extra["loads"] = loads;
  rec.extra["samples"] = samples;
  return Status::ok();
}

enum class Latency { kFlag, kFlagAcqRel, kChase, kChaseRandom, kChasePlain, kChaseEverySm };

ChasePattern chasePattern(Latency kind) {
  return kind == Latency::kChase          ? ChasePattern::kLineWalk
         : kind == Latency::kChasePlain   ? ChasePattern::kLineWalkPlain
         : kind == Latency::kChaseEverySm ? ChasePattern::kEverySm
                                          : ChasePattern::kRandom;
}

// A round's pointer chases measured at once, one thread per pair (each GPU is in at most one pair of a round: every
// reader and owner has its own stream), kept for the round's other rows to report.
struct ChaseOutcome {
  Status status = Status::ok();
  Record rec;
};
std::map<std::string, std::map<std::pair<int, int>, ChaseOutcome>>& chaseRoundCache() {
  static std::map<std::string, std::map<std::pair<int, int>, ChaseOutcome>> cache;
  return cache;
}

void latencyBenchmark(benchmark::State& state, int a, int b, Latency kind,
                      const std::vector<std::pair<int, int>>& group = {}, const std::string& group_key = "") {
  Record rec;
  rec.suite = "peer_latency";
  const bool flag = kind == Latency::kFlag || kind == Latency::kFlagAcqRel;
  switch (kind) {
    case Latency::kFlag:
      rec.impl = "peerlab.flag";
      break;
    case Latency::kFlagAcqRel:
      rec.impl = "peerlab.flag_acq_rel";
      break;
    case Latency::kChase:
      rec.impl = "peerlab.pointer_chase";
      break;
    case Latency::kChaseRandom:
      rec.impl = "peerlab.pointer_chase_random";
      break;
    case Latency::kChasePlain:
      rec.impl = "peerlab.pointer_chase_ld";
      break;
    case Latency::kChaseEverySm:
      rec.impl = "peerlab.pointer_chase_sms";
      break;
  }
  rec.name = flag ? "one_way" : "dependent_load";
  rec.src = a;
  rec.dst = b;
  for (auto _ : state) {
    (void)_;
    Status st = Status::ok();
    if (!flag && group.size() > 1) {
      auto& round = chaseRoundCache()[group_key];
      if (round.empty()) {
        // The first row of the round measures every pair of it at once.
        if (auto e = env(); !e.isOk()) {
          (void)(st = e.status());
        } else {
          for (const auto& p : group)
            round[p].rec = rec;
          std::vector<std::thread> threads;
          for (const auto& p : group) {
            ChaseOutcome& out = round[p];
            out.rec.src = p.first;
            out.rec.dst = p.second;
            threads.emplace_back(
                [&out, p, kind] { (void)(out.status = measureChase(p.first, p.second, chasePattern(kind), out.rec)); });
          }
          for (std::thread& t : threads)
            t.join();
        }
      }
      if (st.isOk()) {
        const auto it = round.find({a, b});
        if (it == round.end()) {
          (void)(st = PEERLAB_INTERNAL("pointer chase " + pairName(a, b, false) + " is not in its round"));
        } else {
          (void)(st = it->second.status);
          rec = it->second.rec;
          rec.extra["pairs_at_once"] = static_cast<double>(group.size());
        }
      }
    } else {
      (void)(st = flag ? measureFlag(a, b, kind == Latency::kFlagAcqRel, rec)
                       : measureChase(a, b, chasePattern(kind), rec));
    }
    if (!st.isOk()) {
      finish(state, rec, st);
      break;
    }
    state.SetIterationTime(rec.time_us * 1e-6);
    bench::publish(state, rec);
  }
}

// ---- registration ----

void configure(benchmark::internal::Benchmark* b) {
  b->Iterations(1)->UseManualTime()->Unit(benchmark::kMicrosecond);
}

void registerCopy(const CopySpec& spec, const std::string& name, const std::string& tune_label = "",
                  const std::vector<std::pair<int, int>>& group = {}) {
  configure(benchmark::RegisterBenchmark(
      name.c_str(), [spec, tune_label, group](benchmark::State& st) { copyBenchmark(st, spec, tune_label, group); }));
}

// A tuning configuration and its compact label: "vec t512 u8 b2 h2", "bulk 16K x4 b1", "... sms64".
struct TuneConfig {
  peer::SmCopyConfig config;
  std::string label;
};

TuneConfig vecConfig(int threads, int unroll, int blocks, int hints, int sms = 0) {
  TuneConfig t;
  t.config.kernel = peer::SmKernel::kVector;
  t.config.threads_per_block = threads;
  t.config.unroll = unroll;
  t.config.blocks_per_sm = blocks;
  t.config.hints = hints;
  t.config.sms = sms;
  t.label = "vec t" + std::to_string(threads) + " u" + std::to_string(unroll) + " b" + std::to_string(blocks) + " h" +
            std::to_string(hints) + (sms ? " sms" + std::to_string(sms) : "");
  return t;
}

TuneConfig bulkConfig(int kib, int stages, int blocks, int sms = 0) {
  TuneConfig t;
  t.config.kernel = peer::SmKernel::kBulk;
  t.config.bulk_kib = kib;
  t.config.bulk_stages = stages;
  t.config.bulk_blocks_per_sm = blocks;
  t.config.sms = sms;
  t.label = "bulk " + std::to_string(kib) + "K x" + std::to_string(stages) + " b" + std::to_string(blocks) +
            (sms ? " sms" + std::to_string(sms) : "");
  return t;
}

// The sweep: 0->1 at 256 MiB, one direction, per SM path. Vector kernel: threads x unroll x blocks per SM x hints
// (bytes in flight per SM from 8 KiB to 256 KiB), then the default shape on fewer SMs. Bulk kernel: chunk x stages
// (16 KiB to 192 KiB of ring per block) x blocks per SM, then fewer SMs. Both directions at once for the default and
// the main candidates. About 175 rows of 20-40 ms each.
std::vector<TuneConfig> tuneConfigs() {
  std::vector<TuneConfig> all;
  for (int threads : {256, 512, 1024}) {
    for (int unroll : {2, 4, 8}) {
      for (int blocks : {1, 2}) {
        for (int hints : {0, 1, 2}) {
          all.push_back(vecConfig(threads, unroll, blocks, hints));
        }
      }
    }
  }
  for (int sms : {16, 32, 48, 64, 96})
    all.push_back(vecConfig(512, 8, 2, 1, sms));
  const std::pair<int, int> rings[] = {{4, 4},  {4, 8},  {8, 4},  {8, 8},  {16, 2}, {16, 4},
                                       {16, 8}, {32, 2}, {32, 4}, {32, 6}, {64, 2}, {64, 3}};
  for (auto [kib, stages] : rings) {
    for (int blocks : {1, 2}) {
      // Rings of more than half the SM's shared memory fit once per SM: blocks=2 would repeat blocks=1.
      if (blocks == 2 && 2 * (kib * stages + 1) > 228) continue;
      all.push_back(bulkConfig(kib, stages, blocks));
    }
  }
  for (int sms : {16, 32, 64, 96})
    all.push_back(bulkConfig(16, 4, 1, sms));
  return all;
}

std::vector<TuneConfig> tuneBidirConfigs() {
  TuneConfig def;
  def.label = "default (" + std::string(peer::smKernelName(def.config.kernel)) + ")";
  return {def, vecConfig(512, 8, 2, 2), vecConfig(512, 8, 1, 1), bulkConfig(16, 4, 1), bulkConfig(32, 4, 1)};
}

report::RowKey copyKey(const CopySpec& spec) {
  report::RowKey k;
  k.impl = spec.impl;
  k.name = spec.name;
  k.bytes = static_cast<int64_t>(spec.bytes);
  k.src = spec.a;
  k.dst = spec.b;
  k.both_ways = spec.bidir;
  return k;
}

report::RowKey latencyKey(const char* impl, bool flag, int a, int b) {
  report::RowKey k;
  k.impl = impl;
  k.name = flag ? "one_way" : "dependent_load";
  k.src = a;
  k.dst = b;
  k.both_ways = flag;
  return k;
}

Latency latencyOf(const std::string& label) {
  if (label == "flag") return Latency::kFlag;
  if (label == "flag_acq_rel") return Latency::kFlagAcqRel;
  if (label == "pointer_chase") return Latency::kChase;
  if (label == "pointer_chase_random") return Latency::kChaseRandom;
  if (label == "pointer_chase_ld") return Latency::kChasePlain;
  return Latency::kChaseEverySm;
}

void registerAll() {
  auto count = deviceCount();
  // Without two GPUs, one row per suite still runs and reports why it was skipped.
  const int n = count.isOk() ? std::max(*count, 2) : 2;
  const bool sweep = knobText(peer_copy_suite::kSmCopySweepKnob) == "1";

  // Enable cost first, before the copy rows allocate their buffers.
  for (bool first : {true, false}) {
    report::RowKey key;
    key.impl = peer_copy_suite::kEnableImpl;
    key.name = first ? "first" : "repeat";
    key.src = 0;
    key.dst = 1;
    key.both_ways = true;
    if (!planned(key)) continue;
    const std::string name = std::string("BM_PeerEnable/") + (first ? "first" : "repeat") + "/" + pairName(0, 1, true);
    configure(benchmark::RegisterBenchmark(name.c_str(),
                                           [first](benchmark::State& st) { enableBenchmark(st, 0, 1, first); }));
  }

  // Driver-staged anchor: cudaMemcpyPeerAsync with peer access off for this row only.
  {
    CopySpec spec;
    spec.impl = peer_copy_suite::kAnchorImpl;
    spec.method = Method::kMemcpyPeerNoP2P;
    spec.bytes = static_cast<size_t>(peer_copy_suite::kAnchorBytes);
    if (planned(copyKey(spec)))
      registerCopy(spec, "BM_PeerCopy/cuda_memcpy_peer_noP2P/uni/0->1/bytes:" + std::to_string(spec.bytes));
  }

  const std::pair<CopyPath, const char*> paths[] = {{CopyPath::kCopyEngine, "peerlab.ce"},
                                                    {CopyPath::kSmPull, "peerlab.sm_pull"},
                                                    {CopyPath::kSmPush, "peerlab.sm_push"},
                                                    {CopyPath::kStaged, "peerlab.staged"}};
  auto copy = [](CopyPath path, const char* impl, bool bidir, int a, int b, int64_t bytes) {
    CopySpec spec;
    spec.impl = impl;
    spec.path = path;
    spec.bidir = bidir;
    spec.name = bidir ? "bidir" : "uni";
    spec.a = a;
    spec.b = b;
    spec.bytes = static_cast<size_t>(bytes);
    return spec;
  };
  auto copyName = [](const CopySpec& spec) {
    return "BM_PeerCopy/" + std::string(peer::copyPathName(spec.path)) + "/" + spec.name + "/" +
           pairName(spec.a, spec.b, spec.bidir) + "/bytes:" + std::to_string(spec.bytes);
  };
  // Pair rounds (the plan's): the copy-engine and SM rows of a round's pairs run at once (host-staged copies, driven
  // from this thread, stay one pair at a time), and so do its pointer chases unless knob chase_in_rounds=0.
  const report::PairRoundList& rounds = plan().rounds;
  std::vector<std::vector<std::pair<int, int>>> chase_rounds;
  if (!rounds.empty() && knobText(peer_copy_suite::kChaseInRoundsKnob) != "0") chase_rounds = rounds;
  for (const auto& round : rounds) {
    for (const auto& [path, impl] : paths) {
      for (bool bidir : {false, true}) {
        for (int64_t bytes : peer_copy_suite::sizes()) {
          // The round's pairs that run this row (both ways: once per unordered pair).
          std::vector<std::pair<int, int>> members;
          for (const auto& [a, b] : round) {
            if ((!bidir || a < b) && planned(copyKey(copy(path, impl, bidir, a, b, bytes)))) members.emplace_back(a, b);
          }
          const bool together = path != CopyPath::kStaged && members.size() > 1;
          for (const auto& [a, b] : members) {
            const CopySpec spec = copy(path, impl, bidir, a, b, bytes);
            registerCopy(spec, copyName(spec), "", together ? members : std::vector<std::pair<int, int>>{});
          }
        }
      }
    }
  }
  if (rounds.empty()) {
    for (const auto& [path, impl] : paths) {
      for (bool bidir : {false, true}) {
        for (int a = 0; a < n; ++a) {
          for (int b = 0; b < n; ++b) {
            if (a == b || (bidir && b < a)) continue;
            for (int64_t bytes : peer_copy_suite::sizes()) {
              const CopySpec spec = copy(path, impl, bidir, a, b, bytes);
              if (planned(copyKey(spec))) registerCopy(spec, copyName(spec));
            }
          }
        }
      }
    }
  }

  if (sweep) {
    // Results are also printed as one table at exit (after the vector holding them exists, so it outlives the print).
    tuneRows();
    std::atexit(printTuneTable);
    auto add = [&](CopyPath path, const TuneConfig& t, bool bidir) {
      CopySpec spec;
      spec.impl = path == CopyPath::kSmPull ? "peerlab.sm_pull" : "peerlab.sm_push";
      spec.path = path;
      spec.bidir = bidir;
      spec.bytes = size_t{256} << 20;
      spec.sm = t.config;
      std::string compact = t.label;
      for (char& ch : compact)
        if (ch == ' ' || ch == '(' || ch == ')') ch = '_';
      spec.name = std::string(bidir ? "tune_bidir/" : "tune/") + compact;
      registerCopy(spec,
                   "BM_PeerCopyTune/" + std::string(peer::copyPathName(path)) + "/" + (bidir ? "bidir/" : "uni/") +
                       compact + "/" + pairName(0, 1, bidir) + "/bytes:" + std::to_string(spec.bytes),
                   t.label);
    };
    for (CopyPath path : {CopyPath::kSmPull, CopyPath::kSmPush}) {
      for (const TuneConfig& t : tuneConfigs())
        add(path, t, false);
    }
    for (CopyPath path : {CopyPath::kSmPull, CopyPath::kSmPush}) {
      for (const TuneConfig& t : tuneBidirConfigs())
        add(path, t, true);
    }
  }

  // The flags: every unordered pair of the rounds, else of the visible GPUs.
  std::set<std::pair<int, int>> unordered;
  for (const auto& round : rounds)
    for (const auto& [a, b] : round)
      unordered.insert({std::min(a, b), std::max(a, b)});
  if (rounds.empty()) {
    for (int a = 0; a < n; ++a)
      for (int b = a + 1; b < n; ++b)
        unordered.insert({a, b});
  }
  for (const peer_copy_suite::LatencyCase& c : peer_copy_suite::kFlags) {
    const Latency kind = latencyOf(c.label);
    for (const auto& [a, b] : unordered) {
      if (!planned(latencyKey(c.impl, true, a, b))) continue;
      const std::string name = std::string("BM_PeerLatency/") + c.label + "/" + pairName(a, b, true);
      configure(benchmark::RegisterBenchmark(
          name.c_str(), [a = a, b = b, kind](benchmark::State& st) { latencyBenchmark(st, a, b, kind); }));
    }
  }
  for (const peer_copy_suite::LatencyCase& c : peer_copy_suite::kChases) {
    const Latency kind = latencyOf(c.label);
    // In rounds: a round's pairs chase at once (one load in flight per pair: they do not contend), each row reports
    // its pair.
    for (size_t r = 0; r < chase_rounds.size(); ++r) {
      std::vector<std::pair<int, int>> round;
      for (const auto& [a, b] : chase_rounds[r])
        if (planned(latencyKey(c.impl, false, a, b))) round.emplace_back(a, b);
      const std::string key = std::string(c.label) + "/round" + std::to_string(r);
      for (const auto& [a, b] : round) {
        const std::string name = std::string("BM_PeerLatency/") + c.label + "/" + pairName(a, b, false);
        configure(benchmark::RegisterBenchmark(name.c_str(), [a = a, b = b, kind, round, key](benchmark::State& st) {
          latencyBenchmark(st, a, b, kind, round, key);
        }));
      }
    }
    if (!chase_rounds.empty()) continue;
    // One pair at a time: every ordered pair of the rounds, else of the visible GPUs.
    std::vector<std::pair<int, int>> pairs;
    for (const auto& round : rounds)
      pairs.insert(pairs.end(), round.begin(), round.end());
    if (rounds.empty()) {
      for (int a = 0; a < n; ++a)
        for (int b = 0; b < n; ++b)
          if (a != b) pairs.emplace_back(a, b);
    }
    for (const auto& [a, b] : pairs) {
      if (!planned(latencyKey(c.impl, false, a, b))) continue;
      const std::string name = std::string("BM_PeerLatency/") + c.label + "/" + pairName(a, b, false);
      configure(benchmark::RegisterBenchmark(
          name.c_str(), [a = a, b = b, kind](benchmark::State& st) { latencyBenchmark(st, a, b, kind); }));
    }
  }
}

PEERLAB_BENCH_REGISTER(peer_copy, registerAll);

}  // namespace
}  // namespace peerlab
