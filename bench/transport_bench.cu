// NIXL and UCX between two processes on two GPUs (suite "transport"). One pair: `transport_bench --ranks=2`, rank 0
// drives the pair's source GPU, rank 1 the destination: --pairs=a-b (default 0-1). Many pairs in one job: --pairs
// rounds (or a --plan file's) and a rank per GPU named (bench/common/pair_rounds.h), each pair connecting its own
// endpoints when its round starts and closing them when it ends. One library per process, knob library=nixl|ucx
// (default nixl): NIXL carries its own UCX, and two UCX copies in one process break each other. The libraries are
// found as reference/transport/transport.h says (PEERLAB_NIXL_DIR, PEERLAB_UCX_DIR, the loader's path); where one is
// missing or fails the capability check, every row is skipped with the reason. The rows, sizes and sample counts are
// bench/transport_suite.h's.
//
// Impls: nixl.write / nixl.read, ucx.put / ucx.get. time_us is per transfer, the median of the samples:
//   uni, 8 B - 64 KB, writes: ping-pong; rank 0 writes with a notification, rank 1 answers with its own write once
//     the notification arrived; one-way time = round trip / 2 (as zcopy's peerlab.get / peerlab.put and NCCL rows);
//   uni, reads at every size and writes from 1 MB: N transfers one after the other from the initiator (write: rank 0,
//     read: rank 1), each posted once the one before completed, host-timed (a read is a whole request and response);
//   wait/<mode>/uni (8 B, 4 KB, 64 KB, 4 MB, 64 MB): single writes completed by the calling thread spinning on the
//     status ("spin", what NIXL's own examples do), polling with sleeps in between ("yield"), blocking while the
//     endpoint's progress thread polls ("progress"), or not at all: the end of the transfer is delivered into a CUDA
//     stream ("stream", StreamCompletion) and the host learns of it from a word the stream writes afterwards.
// NIXL knobs: nixl_descriptor_bytes=N splits a transfer above N bytes into descriptors of at most N bytes in one
// request (0: one descriptor; default EndpointOptions::nixl_descriptor_bytes; counter nixl_descriptors);
// nixl_backend_params=num_workers=2,... sets UCX backend parameters over the plugin's defaults;
// nixl_progress_thread=1 starts NIXL's own progress thread (default off; counter nixl_progress_thread).
// Counters: p10_us, p90_us, samples, cpu_us (CPU time of the posting thread per transfer: post plus its wait),
// process_cpu_us (every thread of the process, the libraries' progress threads included, per transfer),
// cpu_fraction (cpu_us / time_us), and the breakdown nixlbench reports: prep_us (building the request once),
// post_us (the post call), transfer_us (post returned to completion seen). Every sample writes a seeded pattern into
// poisoned slots, one slot per transfer, checked on the GPU that owns them afterwards (`wrong` counts bad 8-byte
// words). Every wait is bounded.

#include <benchmark/benchmark.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench/common/bench_util.h"
#include "bench/common/pair_rounds.h"
#include "bench/common/plan.h"
#include "bench/transport_suite.h"
#include "reference/core/check.h"
#include "reference/core/devices.h"
#include "reference/core/memory.h"
#include "reference/core/pattern.h"
#include "reference/core/scoped.h"
#include "reference/core/wait.h"
#include "reference/transport/completion.h"
#include "reference/transport/transport.h"

namespace peerlab::bench {
namespace {

using transport::Library;
using transport::Op;
using transport::WaitMode;
using Clock = std::chrono::steady_clock;

constexpr int64_t kSetupMs = 120'000;
constexpr int64_t kSampleMs = 20'000;
constexpr int64_t kExchangeMs = 60'000;
constexpr size_t kSrcBytes = size_t{1} << 30;
constexpr size_t kDstBytes = size_t{2} << 30;  // two 1 GiB slots: every transfer of a sample lands in its own slot
using transport_suite::kLatencyMax;
using transport_suite::Mode;
using transport_suite::recordName;
using transport_suite::Spec;
using transport_suite::unitsPerSample;

PEERLAB_BENCH_KNOB(library, transport_suite::kLibraryKnob, kText,
                   "nixl or ucx: the library this process drives (nixl)");
PEERLAB_BENCH_KNOB(descriptor_bytes, transport_suite::kDescriptorBytesKnob, kCount,
                   "NIXL: split a transfer above N bytes into descriptors of at most N bytes (0: one descriptor)");
PEERLAB_BENCH_KNOB(backend_params, transport_suite::kBackendParamsKnob, kText,
                   "NIXL: key=value[,key=value...] UCX backend parameters over the plugin's defaults");
PEERLAB_BENCH_KNOB(progress_thread, transport_suite::kProgressThreadKnob, kSwitch,
                   "NIXL: 1 starts NIXL's progress thread (0)");

struct Config {
  Library library = Library::kNixl;
  size_t nixl_descriptor_bytes = transport::kNixlDefaultDescriptorBytes;
  bool nixl_progress_thread = false;
  std::vector<std::pair<std::string, std::string>> nixl_backend_params;
  std::string error;
};

const Config& config() {
  static const Config c = [] {
    Config c;
    if (const std::string v = knobText(transport_suite::kDescriptorBytesKnob); !v.empty()) {
      char* end = nullptr;
      const unsigned long long b = std::strtoull(v.c_str(), &end, 10);
      if (end == v.c_str() || *end != '\0' || v[0] == '-') {
        c.error = "knob nixl_descriptor_bytes=\"" + v + "\": expected a byte count (0: one descriptor)";
      } else {
        c.nixl_descriptor_bytes = static_cast<size_t>(b);
      }
    }
    if (auto p = knobBool(transport_suite::kProgressThreadKnob, false); p.isOk()) {
      c.nixl_progress_thread = *p;
    } else {
      c.error = p.status().message();
    }
    if (const std::string v = knobText(transport_suite::kBackendParamsKnob); !v.empty()) {
      std::string rest = v;
      while (!rest.empty()) {
        const size_t comma = rest.find(',');
        const std::string item = rest.substr(0, comma);
        rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
        const size_t eq = item.find('=');
        if (eq == std::string::npos || eq == 0) {
          c.error = "knob nixl_backend_params=\"" + v + "\": expected key=value[,key=value...]";
          break;
        }
        c.nixl_backend_params.emplace_back(item.substr(0, eq), item.substr(eq + 1));
      }
    }
    if (const std::string lib = knobText(transport_suite::kLibraryKnob); !lib.empty()) {
      auto l = transport::parseLibrary(lib);
      if (!l) {
        c.error = "knob library=\"" + lib + "\": expected nixl or ucx";
      } else {
        c.library = *l;
      }
    }
    return c;
  }();
  return c;
}

std::string implName(Op op) {
  return transport_suite::implName(op, config().library);
}

// The plan's samples where it sets them, else the size's.
int plannedSamples(const Spec& s) {
  return plan().samples > 0 ? plan().samples : transport_suite::sampleCount(s);
}

WaitMode waitOf(Mode m) {
  return m == Mode::kYield ? WaitMode::kYield : m == Mode::kProgress ? WaitMode::kProgressThread : WaitMode::kSpin;
}

double threadCpuUs() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}
double processCpuUs() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}
double usBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

// ---- the per-process world, set up collectively by the first row ----

struct World {
  std::optional<Status> status;
  int me = -1;
  int peer = -1;
  int device = -1;
  int peer_device = -1;
  uint64_t run = 0;
  Bootstrap* boot = nullptr;
  DeviceBuffer src, dst;
  Stream stream;
  std::optional<PatternChecker> checker;
  std::unique_ptr<transport::Endpoint> ep;
  std::optional<transport::StreamCompletion> completion;
  PinnedBuffer seen;  // the stream writes the ticket it waited for here (wait/stream rows)
  void* seen_dev = nullptr;
  std::string broken;
};

Status setupWorld(World& w) {
  const Config& c = config();
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaSetDevice(w.device)));
  PEERLAB_ASSIGN_OR_RETURN(w.src, allocDevice(w.device, kSrcBytes));
  PEERLAB_ASSIGN_OR_RETURN(w.dst, allocDevice(w.device, kDstBytes));
  PEERLAB_ASSIGN_OR_RETURN(w.stream, createStream(w.device));
  PEERLAB_ASSIGN_OR_RETURN(PatternChecker checker, PatternChecker::create(w.device));
  w.checker.emplace(std::move(checker));
  PEERLAB_ASSIGN_OR_RETURN(w.seen, allocPinned(sizeof(uint32_t), cudaHostAllocMapped | cudaHostAllocPortable));
  *w.seen->as<volatile uint32_t>() = 0;
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaHostGetDevicePointer(&w.seen_dev, w.seen->ptr, 0)));
  const Deadline deadline = Deadline::afterMs(kSetupMs);
  uint64_t mine = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  std::vector<uint64_t> all(2);
  PEERLAB_RETURN_IF_ERROR(w.boot->allgather(&mine, all.data(), sizeof(mine), deadline));
  w.run = all[0];
  transport::EndpointOptions o;
  o.library = c.library;
  o.peer = w.peer;
  o.regions = {{w.src->ptr, kSrcBytes, transport::MemoryKind::kDevice, w.device},
               {w.dst->ptr, kDstBytes, transport::MemoryKind::kDevice, w.device}};
  o.deadline = deadline;
  o.progress_thread = true;
  o.progress_device = w.device;
  o.nixl_descriptor_bytes = c.nixl_descriptor_bytes;
  o.nixl_backend_params = c.nixl_backend_params;
  o.nixl_progress_thread = c.nixl_progress_thread;
  // Both ranks get the same verdict from connect (it trades both sides' capability checks).
  PEERLAB_ASSIGN_OR_RETURN(w.ep, transport::Endpoint::connect(*w.boot, o));
  PEERLAB_ASSIGN_OR_RETURN(auto completion, transport::StreamCompletion::create(*w.ep, w.device));
  w.completion.emplace(std::move(completion));
  return w.boot->barrier(deadline);
}

// The world lives until exit, and goes in an exit handler of its own rather than as a static object: a static
// registers its destructor on the first call of world(), before NIXL, its UCX plugin and the CUDA runtime register
// theirs, so at exit it would run after them and tear the endpoint down through freed library state (rank 0 died of
// SIGABRT, "malloc(): unsorted double linked list corrupted", after its last row). Exit handlers run in reverse order
// of registration: one registered once setupWorld returned runs before the libraries' own.
World* g_world = nullptr;

void teardownWorld() {
  World* w = g_world;
  g_world = nullptr;
  if (w == nullptr) return;
  if (w->device >= 0 && cudaSetDevice(w->device) != cudaSuccess) (void)cudaGetLastError();
  // In order: nothing watches the progress thread any more, the endpoint (its progress thread joined, requests
  // released, memory deregistered) before the buffers it registered.
  w->completion.reset();
  w->ep.reset();
  delete w;
}

// The world of the pair this rank is in for the current round; teardownWorld ends it with the round.
World& world(const PairContext& ctx) {
  if (g_world != nullptr) return *g_world;
  g_world = new World();
  World& w = *g_world;
  w.boot = ctx.boot;
  w.me = ctx.rank;
  w.peer = 1 - ctx.rank;
  w.device = ctx.gpu;
  w.peer_device = ctx.rank == 0 ? ctx.pair.second : ctx.pair.first;
  w.status = setupWorld(w);
  // Registered once the first endpoint is up, so that it runs before the libraries' own exit handlers.
  static const bool at_exit = std::atexit(teardownWorld) == 0;
  (void)at_exit;
  return w;
}

// ---- one row ----

struct Local {
  std::vector<double> time_us, cpu_us, process_cpu_us, post_us, transfer_us;
  double prep_us = 0;
  PatternCheck check;
};

// The rank that posts: rank 0 writes, rank 1 reads (it owns the destination and pulls).
int initiator(const Spec& s) {
  return s.op == Op::kWrite ? 0 : 1;
}

Status waitSeen(World& w, uint32_t ticket, Deadline d) {
  // The caller's CPU stays free: a short sleep between looks at the word the stream writes.
  while (*w.seen->as<volatile uint32_t>() < ticket) {
    if (d.expired()) return PEERLAB_TIMEOUT("the stream did not see the transfer complete by the deadline");
    timespec ts{0, 5'000};
    ::nanosleep(&ts, nullptr);
  }
  return Status::ok();
}

// One transfer from post to completion, in the row's mode; returns its post and transfer times.
Status oneTransfer(World& w, const Spec& spec, transport::RequestId id, Local& out) {
  const Deadline d = Deadline::afterMs(kSampleMs);
  transport::PostTiming pt;
  const auto t0 = Clock::now();
  PEERLAB_ASSIGN_OR_RETURN(transport::Ticket t, w.ep->post(id, &pt));
  const auto posted = Clock::now();
  if (spec.mode == Mode::kStream) {
    PEERLAB_RETURN_IF_ERROR(w.completion->enqueueWait(t, w.stream.get()));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CU(cuStreamWriteValue32, reinterpret_cast<CUstream>(w.stream.get()),
                                       reinterpret_cast<CUdeviceptr>(w.seen_dev), static_cast<uint32_t>(t),
                                       CU_STREAM_WRITE_VALUE_DEFAULT));
    PEERLAB_RETURN_IF_ERROR(waitSeen(w, static_cast<uint32_t>(t), d));
    // The ticket is collected by the progress thread; test() only confirms it finished.
    PEERLAB_ASSIGN_OR_RETURN(bool done, w.ep->test(t));
    if (!done) return PEERLAB_INTERNAL("the stream went on before the transfer finished");
  } else {
    PEERLAB_RETURN_IF_ERROR(w.ep->wait(t, waitOf(spec.mode), d));
  }
  out.post_us.push_back(pt.post_us);
  out.transfer_us.push_back(usBetween(posted, Clock::now()));
  (void)t0;
  return Status::ok();
}

uint64_t saltOf(const Spec& s) {
  return (static_cast<uint64_t>(s.op) << 56) ^ (static_cast<uint64_t>(s.mode) << 48) ^ s.bytes ^
         (static_cast<uint64_t>(config().library) << 60);
}

StatusOr<Local> measure(World& w, const Spec& spec) {
  const size_t n = spec.bytes;
  const int units = unitsPerSample(spec);
  const size_t slots = std::min<size_t>(static_cast<size_t>(units), kDstBytes / n);
  const uint64_t my_seed = patternSeed(w.run, w.device, w.peer_device, saltOf(spec));
  const uint64_t peer_seed = patternSeed(w.run, w.peer_device, w.device, saltOf(spec));
  // Who receives data into its dst slots: the peer of the writer, the reader itself, both in a ping-pong.
  const bool posts = spec.pingpong() || w.me == initiator(spec);
  const bool receives = spec.pingpong() || (spec.op == Op::kWrite ? w.me == 1 : w.me == 1);
  // The data a rank receives is the sender's pattern: for a read, the initiator pulls the peer's source.
  const uint64_t recv_seed = peer_seed;
  cudaStream_t s = w.stream.get();
  PEERLAB_RETURN_IF_ERROR(fillPattern(w.src->ptr, n, my_seed, s));
  PEERLAB_RETURN_IF_ERROR(waitStream(s, Deadline::afterMs(kSampleMs), "pattern"));

  Local out;
  std::vector<transport::RequestId> ids;
  if (posts) {
    const auto t0 = Clock::now();
    for (size_t i = 0; i < slots; ++i) {
      transport::Transfer t;
      t.op = spec.op;
      t.bytes = n;
      t.notify = spec.pingpong();
      if (spec.op == Op::kWrite) {
        t.local = 0;  // own src
        t.remote = 1;
        t.remote_offset = i * n;
      } else {
        t.local = 1;  // own dst slot
        t.local_offset = i * n;
        t.remote = 0;  // the peer's src
      }
      PEERLAB_ASSIGN_OR_RETURN(transport::RequestId id, w.ep->prepare(t));
      ids.push_back(id);
    }
    out.prep_us = usBetween(t0, Clock::now()) / static_cast<double>(slots);
  }
  auto releaseAll = [&] {
    for (transport::RequestId id : ids)
      (void)w.ep->release(id);
  };
  uint64_t notified = 0;
  if (spec.pingpong()) {
    PEERLAB_ASSIGN_OR_RETURN(notified, w.ep->notifications());
  }
  Status st;
  for (int sample = 0; sample <= plannedSamples(spec) && st.isOk(); ++sample) {
    if (receives) {
      for (size_t i = 0; i < slots; ++i)
        st = st.isOk() ? poisonPattern(static_cast<uint8_t*>(w.dst->ptr) + i * n, n, recv_seed, s) : st;
      if (st.isOk()) st = waitStream(s, Deadline::afterMs(kSampleMs), "poison");
    }
    if (st.isOk()) st = w.boot->barrier(Deadline::afterMs(kExchangeMs));
    if (!st.isOk()) break;
    const double cpu0 = threadCpuUs(), pcpu0 = processCpuUs();
    const auto t0 = Clock::now();
    for (int u = 0; u < units && st.isOk(); ++u) {
      const size_t slot = static_cast<size_t>(u) % slots;
      if (spec.pingpong()) {
        const Deadline d = Deadline::afterMs(kSampleMs);
        if (w.me == 0) {
          st = oneTransfer(w, spec, ids[slot], out);
          if (st.isOk()) st = w.ep->waitNotifications(++notified, WaitMode::kSpin, d);
        } else {
          st = w.ep->waitNotifications(++notified, WaitMode::kSpin, d);
          if (st.isOk()) st = oneTransfer(w, spec, ids[slot], out);
        }
      } else if (posts) {
        st = oneTransfer(w, spec, ids[slot], out);
      }
    }
    const double wall = usBetween(t0, Clock::now());
    const double cpu = threadCpuUs() - cpu0, pcpu = processCpuUs() - pcpu0;
    // The target's part ends when the initiator's does: the barrier keeps the samples in step.
    if (st.isOk()) st = w.boot->barrier(Deadline::afterMs(kExchangeMs));
    if (!st.isOk()) break;
    if (sample > 0 && posts) {
      const double per = spec.pingpong() ? 2.0 * units : static_cast<double>(units);
      out.time_us.push_back(wall / per);
      // In a ping-pong each side posts once per round trip: its CPU per transfer is over `units` posts.
      out.cpu_us.push_back(cpu / static_cast<double>(units));
      out.process_cpu_us.push_back(pcpu / static_cast<double>(units));
    }
    if (receives) {
      for (size_t i = 0; i < slots && st.isOk(); ++i)
        st = w.checker->enqueue(static_cast<uint8_t*>(w.dst->ptr) + i * n, n, recv_seed, s, 8);
      if (st.isOk()) {
        auto check = w.checker->collect(s, Deadline::afterMs(kSampleMs));
        if (!check.isOk()) {
          st = check.status();
        } else {
          out.check.elements += check->elements;
          out.check.wrong += check->wrong;
          if (check->first_bad < out.check.first_bad) out.check.first_bad = check->first_bad;
        }
      }
    }
  }
  releaseAll();
  if (!st.isOk()) return st;
  return out;
}

// What each rank reports after a row.
struct Outcome {
  int32_t ok = 1;
  int32_t code = 0;
  int32_t timed = 0;
  double median = 0, p10 = 0, p90 = 0, samples = 0, cpu = 0, pcpu = 0, prep = 0, post = 0, transfer = 0;
  double wrong = 0, elements = 0;
  char why[480] = {};
};

Status combine(Bootstrap& boot, const Outcome& mine, Outcome& sum) {
  std::vector<Outcome> all(2);
  PEERLAB_RETURN_IF_ERROR(boot.allgather(&mine, all.data(), sizeof(Outcome), Deadline::afterMs(kExchangeMs)));
  for (const Outcome& o : all) {
    if (o.ok == 0) return Status(static_cast<StatusCode>(o.code), std::string(o.why));
  }
  for (const Outcome& o : all) {
    // Rank 0's numbers for a ping-pong (both post), the initiator's otherwise.
    if (o.timed != 0 && sum.timed == 0) {
      sum = o;
      sum.wrong = sum.elements = 0;
    }
  }
  for (const Outcome& o : all) {
    sum.wrong += o.wrong;
    sum.elements += o.elements;
  }
  return Status::ok();
}

Record identity(const Spec& spec, const launch::OrderedPair& pair) {
  Record r;
  r.suite = "transport";
  r.impl = implName(spec.op);
  r.name = recordName(spec);
  r.src = pair.first;
  r.dst = pair.second;
  r.ranks = 2;
  r.bytes = static_cast<double>(spec.bytes);
  return r;
}

// One row on the two ranks of a pair; the source's rank reports it.
PairRow measureRow(const PairContext& ctx, const Spec& spec) {
  PairRow out;
  out.record = identity(spec, ctx.pair);
  Record& rec = out.record;
  const Config& c = config();
  if (!c.error.empty()) {
    // A malformed setting is an error of the run, not a row that could not run.
    out.status = PEERLAB_INVALID_ARGUMENT(c.error);
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
    out.status = w.status->code() == StatusCode::kUnavailable ? PEERLAB_UNAVAILABLE(w.status->message()) : *w.status;
    return out;
  }
  if (!w.broken.empty()) {
    out.status = PEERLAB_INTERNAL("not run after an earlier failure: " + w.broken);
    return out;
  }
  auto r = measure(w, spec);
  Outcome mine;
  if (!r.isOk()) {
    mine.ok = 0;
    mine.code = static_cast<int32_t>(r.status().code());
    std::snprintf(mine.why, sizeof(mine.why), "rank %d: %s", w.me, r.status().toString().c_str());
  } else if (!r->time_us.empty()) {
    mine.timed = 1;
    mine.median = median(r->time_us);
    mine.p10 = percentile(r->time_us, 10);
    mine.p90 = percentile(r->time_us, 90);
    mine.samples = static_cast<double>(r->time_us.size());
    mine.cpu = median(r->cpu_us);
    mine.pcpu = median(r->process_cpu_us);
    mine.prep = r->prep_us;
    mine.post = median(r->post_us);
    mine.transfer = median(r->transfer_us);
  }
  if (r.isOk()) {
    mine.wrong = static_cast<double>(r->check.wrong);
    mine.elements = static_cast<double>(r->check.elements);
  }
  Outcome sum;
  const Status st = combine(*w.boot, mine, sum);
  if (!st.isOk()) {
    w.broken = st.toString();
    out.status = st;
    return out;
  }
  if (sum.elements <= 0 || sum.timed == 0) {
    out.status = PEERLAB_INTERNAL("no data was checked or timed");
    return out;
  }
  rec.time_us = sum.median;
  rec.algbw_gbps = static_cast<double>(spec.bytes) / sum.median / 1e3;
  rec.busbw_gbps = rec.algbw_gbps;
  rec.wrong = sum.wrong;
  rec.extra["p10_us"] = sum.p10;
  rec.extra["p90_us"] = sum.p90;
  rec.extra["samples"] = sum.samples;
  rec.extra["cpu_us"] = sum.cpu;
  rec.extra["process_cpu_us"] = sum.pcpu;
  rec.extra["cpu_fraction"] = sum.median > 0 ? sum.cpu / sum.median : 0;
  rec.extra["prep_us"] = sum.prep;
  rec.extra["post_us"] = sum.post;
  rec.extra["transfer_us"] = sum.transfer;
  rec.extra["pingpong"] = spec.pingpong() ? 1 : 0;
  rec.extra["checked_words"] = sum.elements;
  if (config().library == Library::kNixl) {
    rec.extra["nixl_progress_thread"] =
        w.ep && w.ep->description().find("(NIXL progress thread)") != std::string::npos ? 1 : 0;
    rec.extra["nixl_descriptors"] =
        static_cast<double>(transport::nixlDescriptorPieces(spec.bytes, config().nixl_descriptor_bytes).size());
  }
  return out;
}

void runSpec(benchmark::State& state, const Spec& spec, const PairRowKey& key) {
  PairRowOptions o;
  o.exchange_ms = kSetupMs + 10 * kSampleMs;
  o.end_round = teardownWorld;
  runPairRow(
      state, pairJob(), key, identity(spec, key.pair), [&](const PairContext& ctx) { return measureRow(ctx, spec); },
      o);
}

void registerAll() {
  const std::vector<Spec> specs = transport_suite::specs();
  // Round by round; in a round every row once for all its pairs (they run it at the same time), the rows the plan runs.
  const PairJob& job = pairJob();
  for (size_t r = 0; r < job.rounds.size(); ++r) {
    for (size_t g = 0; g < specs.size(); ++g) {
      const Spec& spec = specs[g];
      for (const launch::OrderedPair& pair : job.rounds[r]) {
        report::RowKey row;
        row.impl = implName(spec.op);
        row.name = recordName(spec);
        row.bytes = spec.bytes;
        row.src = pair.first;
        row.dst = pair.second;
        if (!planned(row)) continue;
        const std::string name = transport_suite::rowName(spec, config().library, pair.first, pair.second);
        const PairRowKey key{static_cast<int>(r), static_cast<int>(g), pair};
        benchmark::RegisterBenchmark(name.c_str(), [spec, key](benchmark::State& st) { runSpec(st, spec, key); })
            ->Iterations(1)
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
}

PEERLAB_BENCH_REGISTER(transport, registerAll);

}  // namespace
}  // namespace peerlab::bench
