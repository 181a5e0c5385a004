// alltoallv and MoE dispatch/combine, peerlab's GPU-initiated alltoallv against the NCCL baselines in the same run.
//
//   alltoallv_bench --ranks=4                      full sweep: 4 KB .. 1 GB per rank, uniform and skewed, MoE T=1..4096
//   alltoallv_bench --ranks=2 --benchmark_filter=moe/   MoE only, T = 1, 8, 32, 64, 128, 256, 4096
//   alltoallv_bench --ranks=4 --benchmark_filter='bytes:(4096|65536|134217728)/|T=128/'   quick look
//   alltoallv_bench --ranks=4 --benchmark_filter='alltoallv/(peerlab[^/]*|nccl.alltoall)/(graph/)?uniform/bytes:4096/'
//
// Benchmark names end in /iterations:1/manual_time, so a filter that pins the size ends it with '/' (never '$').
// `peerlab bench` and `qualify` hand it a plan instead (--plan, bench/common/plan.h): the rows it registers are the
// plan's; the cases, sizes and calls per sample are bench/alltoallv_suite.h's.
// Suite "alltoallv": impls peerlab.alltoallv (the default: fused protocol, push), peerlab.alltoallv_twophase (the
// two-phase protocol, push), peerlab.alltoallv_pull (two-phase, pull), nccl.alltoall (uniform only),
// nccl.device_alltoallv, nccl.alltoallv_hostcounts; names "uniform" / "skewed", "graph/" prefixed when a captured
// CUDA graph is replayed. Suite "moe": peerlab.dispatch, peerlab.combine (default protocol), peerlab.dispatch_twophase,
// peerlab.combine_twophase, nccl.dispatch, nccl.combine, and the low-latency mode (T <= 256):
// peerlab.dispatch_ll / peerlab.combine_ll (bf16), peerlab.dispatch_ll_fp8 (fp8 e4m3, per-128 scales); name "T=<n>".
// MoE bandwidths: algbw_gbps counts the payload of every (token, valid top-k selection), the local rank included
// (DeepEP / pplx), over the time; busbw_gbps is that x (n-1)/n as for every alltoallv (nccl-tests); the counter
// nvlink_gbps counts only what crosses to another GPU, once per (token, destination rank) (nvlink_bytes of them).
// Low-latency rows also carry kernel_us: the kernel alone, from its first CTA's start of work to its last CTA's end by
// %globaltimer (LlKernelTimes), median over the last timed calls of the slowest rank, to compare with published kernel
// times; time_us is the whole call as replayed or enqueued.
// Every benchmark checks its data once (wrong > 0 fails the row) and reports the slowest rank's median.
//
// Tuning the default impl without rebuilding, knobs (--knob NAME=VALUE; every rank reads the same; the values used are
// reported as counters ctas, ll_max_bytes, chunk_bytes):
//   ctas=264                  CTAs per launch (up to two per SM; default: one per SM for large sizes)
//   ll_bytes=16384            largest segment sent in LL slots (default 524288)
//   chunk_bytes=262144        work-queue chunk (default: about 16 chunks per CTA, 16 KB .. 1 MB)
//   programmatic=0            launch peerlab's kernels (the MoE low-latency ones too) without programmatic dependent
//                             launch (default on)
//   small_kernel=0            never launch the small-call kernel (default: where the capacities allow it)
//   in_step=0                 the work queue's CTAs start spread over every peer (default: peers in step)
//   queue_min_bytes=33554432  large sends below this total split statically instead of queued
// and for every impl: batch=2  calls per timed sample (default 20 up to 1 MB, 10 above);
// moe_ll_tagged_max_tokens=0 sends the low-latency rows plain at every T (default: tagged words up to
// kLlDefaultTaggedMaxTokens tokens per rank; record field ll_tagged says which way a row went).
// moe_ll_ctas_per_sm=1 keeps the low-latency launches to one CTA per SM (default kLlDefaultCtasPerSm, where
// the kernels fit; record fields ll_ctas and ll_ctas_per_sm say what a row used).
// moe_ll_phases=1 adds, to the low-latency rows (named .../phases in the run file, as the stamps cost a few
// atomics per CTA), when the last CTA reached each phase (us after the call's
// start, median, slowest rank): ll_last_start_us, ll_sent_us (rows / partial sums and their flags sent), ll_signals_us
// (dispatch: every count block read; combine: every partial sum's flag seen), ll_rows_us (dispatch: every row flag
// seen; combine: every peer's mark seen).
// moe_ll_timeout_ms=2000 bounds the low-latency kernels' device waits (default 10000; shorter under a profiler
// that replays kernels, so a replayed kernel whose peer has moved on gives up soon). trace=1 asks the fused kernel
// for phase timestamps (counters trace_*).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/alltoallv_suite.h"
#include "bench/common/bench_util.h"
#include "bench/common/plan.h"
#include "reference/alltoallv/alltoallv.h"
#include "reference/alltoallv/moe/moe.h"
#include "reference/alltoallv/moe/moe_reference.h"
#include "reference/alltoallv/traffic.h"
#include "reference/alltoallv/verify.h"
#include "reference/core/check.h"
#include "reference/core/memory.h"
#include "reference/core/wait.h"
#include "reference/nccl/alltoall.h"
#include "reference/nccl/alltoall_moe.h"
#include "reference/nccl/alltoallv_device.h"
#include "reference/nccl/comm.h"

namespace peerlab::bench {
namespace {

using alltoallv::AllToAllV;
using alltoallv::TrafficDriver;
using alltoallv::TrafficKind;
using alltoallv::TrafficParams;
using alltoallv::Transfer;

constexpr size_t kElem = 4;  // 4-byte elements; skewed counts start segments at every 4-byte alignment

PEERLAB_BENCH_KNOB(ctas, "ctas", kCount, "CTAs per launch of the default impl (one per SM for large sizes)");
PEERLAB_BENCH_KNOB(ll_bytes, "ll_bytes", kCount, "largest segment sent in LL slots (524288)");
PEERLAB_BENCH_KNOB(chunk_bytes, "chunk_bytes", kCount, "work-queue chunk (about 16 chunks per CTA)");
PEERLAB_BENCH_KNOB(programmatic, "programmatic", kSwitch, "0 launches without programmatic dependent launch (1)");
PEERLAB_BENCH_KNOB(small_kernel, "small_kernel", kSwitch, "0 never launches the small-call kernel (1)");
PEERLAB_BENCH_KNOB(in_step, "in_step", kSwitch, "0 starts the work queue's CTAs spread over every peer (1)");
PEERLAB_BENCH_KNOB(queue_min_bytes, "queue_min_bytes", kCount, "large sends below this total split statically");
PEERLAB_BENCH_KNOB(batch, alltoallv_suite::kBatchKnob, kCount, "calls per timed sample, every impl (20 to 1 MB, 10)");
PEERLAB_BENCH_KNOB(trace, "trace", kSwitch, "1 asks the fused kernel for phase timestamps (0)");
PEERLAB_BENCH_KNOB(moe_ll_tagged_max_tokens, "moe_ll_tagged_max_tokens", kCount,
                   "tokens per rank up to which the low-latency rows send tagged words (0: plain at every T)");
PEERLAB_BENCH_KNOB(moe_ll_ctas_per_sm, "moe_ll_ctas_per_sm", kCount, "CTAs per SM of the low-latency launches");
PEERLAB_BENCH_KNOB(moe_ll_phases, "moe_ll_phases", kSwitch, "1 stamps the low-latency kernels' phases (0)");
PEERLAB_BENCH_KNOB(moe_ll_timeout_ms, "moe_ll_timeout_ms", kCount, "the low-latency kernels' device wait (10000)");

Deadline soon() {
  return Deadline::afterMs(120'000);
}

using alltoallv_suite::Impl;
using alltoallv_suite::implName;
using alltoallv_suite::kMoeLlMaxTokens;
using alltoallv_suite::moeImpl;
using alltoallv_suite::MoePath;

// Calls per timed sample and samples: the same on every rank (multi-rank rule), more for small sizes.
struct Plan {
  int warmup;
  int batch;
  int samples;
};
// A sample starts from an idle GPU on every rank, and the ranks' processes launch it a few microseconds apart: the
// first call of a sample waits for the last rank to arrive. At least 10 calls per sample (nccl-tests times 20) keep
// that skew a small share of each call: at 4 KB per rank, 2 calls per sample measured 6.5 us graph-replayed where 20
// measure 4.3; at 128 MB, 2 and 10 calls measure the same (h200-x4-nvswitch).
// Knob batch=<calls> overrides the batch for every size (the NCCL host-count path syncs the host in every call, so its
// per-call time does not depend on the batch).
Plan planFor(uint64_t bytes) {
  const alltoallv_suite::Calls c = alltoallv_suite::callsFor(static_cast<int64_t>(bytes));
  Plan p{c.warmup, c.batch, plan().samples > 0 ? plan().samples : c.samples};
  if (const uint64_t b = knobCount(alltoallv_suite::kBatchKnob, 0); b > 0 && b <= 100000) p.batch = static_cast<int>(b);
  return p;
}

// Everything one rank keeps between benchmarks: device, stream, communicator, events, and the instances of the
// current size (replaced when the size changes, so 1 GB buffers never pile up).
struct Env {
  Bootstrap* boot = nullptr;
  int rank = 0;
  int n = 1;
  Stream stream;
  Event start, stop;
  nccl::Comm comm;
  std::optional<TrafficDriver> driver;
  DeviceBuffer counts;  // int64 send [n], recv counts [n], recv offsets [n]
  uint64_t size = 0;    // bytes per rank the instances below are sized for
  std::map<Impl, std::unique_ptr<AllToAllV>> peerlab;
  std::unique_ptr<nccl::DeviceAlltoallv> device;
  Status device_status = Status::ok();
  std::unique_ptr<nccl::HostCountAlltoallv> hostcounts;
  DeviceBuffer plain_send, plain_recv;  // ncclAlltoAll and host-count sends
  int64_t* sendCounts() const { return counts->as<int64_t>(); }
  int64_t* recvCounts() const { return counts->as<int64_t>() + n; }
  int64_t* recvOffsets() const { return counts->as<int64_t>() + 2 * n; }
};

// Options of the default impl's alltoallv: the library defaults unless knobs tune them.
alltoallv::Options tunedOptions(alltoallv::Options o) {
  o.ll_max_bytes = knobCount("ll_bytes", o.ll_max_bytes);
  o.chunk_bytes = knobCount("chunk_bytes", o.chunk_bytes);
  o.queue_in_step = knobCount("in_step", o.queue_in_step ? 1 : 0) != 0;
  o.queue_min_bytes = knobCount("queue_min_bytes", o.queue_min_bytes);
  return o;
}
int tunedCtas() {
  return static_cast<int>(knobCount("ctas", 0));
}

Env*& envSlot() {
  static Env* e = nullptr;
  return e;
}

// True on every rank only when `ok` is true on every rank (skips are collective).
bool agree(Env& e, bool ok) {
  std::vector<int> all(e.n);
  int mine = ok ? 1 : 0;
  if (!e.boot->allgather(&mine, all.data(), sizeof(int), soon()).isOk()) return false;
  return std::all_of(all.begin(), all.end(), [](int v) { return v == 1; });
}

StatusOr<Env*> getEnv() {
  if (envSlot() != nullptr) return envSlot();
  Bootstrap* boot = bootstrap();
  if (boot == nullptr) return PEERLAB_UNAVAILABLE("run with --ranks=N (N GPUs, one rank each)");
  auto e = std::make_unique<Env>();
  e->boot = boot;
  e->rank = boot->rank();
  e->n = boot->size();
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < e->n) {
    (void)cudaGetLastError();
    return PEERLAB_UNAVAILABLE("needs " + std::to_string(e->n) + " GPUs, " + std::to_string(gpus) + " visible");
  }
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaSetDevice(e->rank)));
  PEERLAB_ASSIGN_OR_RETURN(e->stream, createStream(e->rank));
  PEERLAB_ASSIGN_OR_RETURN(e->start, createEvent(e->rank, cudaEventDefault));
  PEERLAB_ASSIGN_OR_RETURN(e->stop, createEvent(e->rank, cudaEventDefault));
  PEERLAB_ASSIGN_OR_RETURN(e->comm, nccl::createComm(*boot, e->rank, soon()));
  PEERLAB_ASSIGN_OR_RETURN(auto drv, TrafficDriver::create(e->rank));
  e->driver.emplace(std::move(drv));
  PEERLAB_ASSIGN_OR_RETURN(e->counts, allocDevice(e->rank, 3 * alltoallv::kMaxRanks * sizeof(int64_t)));
  envSlot() = e.release();
  return envSlot();
}

TrafficParams trafficFor(const std::string& pattern, int n, uint64_t bytes) {
  const uint64_t elements = bytes / kElem;
  if (pattern == "uniform") return alltoallv::makeTraffic(TrafficKind::kUniform, n, elements, 1);
  return alltoallv::makeTraffic(TrafficKind::kZipf, n, elements, 2, 1.2, 0);
}

// Closes (collectively) and frees the instances of the current alltoallv size.
Status releaseSizeInstances(Env& e) {
  for (auto& [impl, a] : e.peerlab)
    PEERLAB_RETURN_IF_ERROR(a->close(*e.boot, soon()));
  e.peerlab.clear();
  if (e.device) PEERLAB_RETURN_IF_ERROR(e.device->close());
  e.device.reset();
  e.hostcounts.reset();
  e.plain_send.reset();
  e.plain_recv.reset();
  e.size = 0;
  return Status::ok();
}

// Instances for `bytes` per rank, sized for the larger of the two patterns.
Status prepareSize(Env& e, uint64_t bytes) {
  if (e.size == bytes) return Status::ok();
  PEERLAB_RETURN_IF_ERROR(waitStream(e.stream.get(), soon(), "previous size"));
  PEERLAB_RETURN_IF_ERROR(releaseSizeInstances(e));
  const TrafficParams u = trafficFor("uniform", e.n, bytes), z = trafficFor("skewed", e.n, bytes);
  const uint64_t send = std::max(alltoallv::trafficSendBound(u), alltoallv::trafficSendBound(z));
  const uint64_t recv = std::max(alltoallv::trafficRecvBound(u), alltoallv::trafficRecvBound(z));
  for (Impl impl : {Impl::kPeerlabPush, Impl::kPeerlabTwoPhase, Impl::kPeerlabPull}) {
    alltoallv::Options o;
    o.elem_bytes = kElem;
    o.send_capacity = send;
    o.recv_capacity = recv;
    o.transfer = impl == Impl::kPeerlabPull ? Transfer::kPull : Transfer::kPush;
    o.protocol = impl == Impl::kPeerlabPush ? alltoallv::Protocol::kAuto : alltoallv::Protocol::kTwoPhase;
    if (impl == Impl::kPeerlabPush) o = tunedOptions(o);
    o.programmatic_launch = knobCount("programmatic", 1) != 0;
    o.small_kernel = knobCount("small_kernel", 1) != 0;
    PEERLAB_ASSIGN_OR_RETURN(auto a, AllToAllV::create(*e.boot, e.rank, o, soon()));
    e.peerlab[impl] = std::make_unique<AllToAllV>(std::move(a));
  }
  auto dev = nccl::DeviceAlltoallv::create(e.comm.get(), e.rank, kElem, send, recv);
  e.device_status = dev.status();
  if (dev.isOk()) e.device = std::make_unique<nccl::DeviceAlltoallv>(std::move(dev).value());
  PEERLAB_ASSIGN_OR_RETURN(auto hc, nccl::HostCountAlltoallv::create(e.comm.get(), e.rank, recv * kElem));
  e.hostcounts = std::make_unique<nccl::HostCountAlltoallv>(std::move(hc));
  PEERLAB_ASSIGN_OR_RETURN(e.plain_send, allocDevice(e.rank, send * kElem));
  PEERLAB_ASSIGN_OR_RETURN(e.plain_recv, allocDevice(e.rank, recv * kElem));
  e.size = bytes;
  return Status::ok();
}

// The slowest rank's median, so every rank reports the same number.
StatusOr<double> slowest(Env& e, double median_us) {
  std::vector<double> all(e.n);
  PEERLAB_RETURN_IF_ERROR(e.boot->allgather(&median_us, all.data(), sizeof(double), soon()));
  return *std::max_element(all.begin(), all.end());
}

// Times `batch` enqueued calls per sample (eager) or one replay of a graph of `batch` calls (graph).
StatusOr<std::vector<double>> timeSamples(Env& e, const Plan& plan, bool graph, const std::function<Status()>& call) {
  cudaStream_t s = e.stream.get();
  for (int i = 0; i < plan.warmup; ++i)
    PEERLAB_RETURN_IF_ERROR(call());
  PEERLAB_RETURN_IF_ERROR(waitStream(s, soon(), "warm-up"));
  cudaGraphExec_t exec = nullptr;
  if (graph) {
    cudaGraph_t g = nullptr;
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal)));
    auto capture = [&]() -> Status {
      for (int i = 0; i < plan.batch; ++i)
        PEERLAB_RETURN_IF_ERROR(call());
      return Status::ok();
    };
    const Status captured = capture();
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaStreamEndCapture(s, &g)));
    PEERLAB_RETURN_IF_ERROR(captured);
    Status inst = PEERLAB_CUDA(cudaGraphInstantiate(&exec, g, 0));
    cudaGraphDestroy(g);
    PEERLAB_RETURN_IF_ERROR(inst);
    // One replay to load the graph before timing.
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaGraphLaunch(exec, s)));
    PEERLAB_RETURN_IF_ERROR(waitStream(s, soon(), "graph warm-up"));
  }
  auto sample = [&]() -> StatusOr<double> {
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaEventRecord(e.start.get(), s)));
    if (graph) {
      PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaGraphLaunch(exec, s)));
    } else {
      for (int i = 0; i < plan.batch; ++i)
        PEERLAB_RETURN_IF_ERROR(call());
    }
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaEventRecord(e.stop.get(), s)));
    PEERLAB_RETURN_IF_ERROR(waitEvent(e.stop.get(), soon(), "sample"));
    float ms = 0;
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaEventElapsedTime(&ms, e.start.get(), e.stop.get())));
    return 1000.0 * ms / plan.batch;
  };
  std::vector<double> us;
  for (int k = 0; k < plan.samples; ++k) {
    auto t = sample();
    if (!t.isOk()) {
      if (exec != nullptr) cudaGraphExecDestroy(exec);
      return t.status();
    }
    us.push_back(*t);
  }
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  return us;
}

// Knob trace=1 asks the fused kernel for phase timestamps (diagnostics; see alltoallv.h TracePoint).
bool traceRequested() {
  return knobCount("trace", 0) == 1;
}

// Medians over the traced calls of each phase (us): from entry to the stores issued, to the counts checked, to the
// payload copied out, to every CTA arrived, to the epoch written, and the gap from one call's exit to the next
// call's entry (the launch in between).
void addTrace(Record& rec, const DeviceBuffer& trace, cudaStream_t s) {
  using alltoallv::kTraceCalls;
  using alltoallv::kTracePoints;
  std::vector<uint64_t> t(static_cast<size_t>(kTraceCalls) * kTracePoints);
  if (!PEERLAB_CUDA(cudaMemcpyAsync(t.data(), trace->ptr, t.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost, s))
           .isOk() ||
      !waitStream(s, soon(), "trace").isOk()) {
    return;
  }
  struct Call {
    uint64_t p[kTracePoints];
  };
  std::vector<Call> calls;
  for (int c = 0; c < kTraceCalls; ++c) {
    Call x;
    std::copy_n(t.begin() + c * kTracePoints, kTracePoints, x.p);
    if (x.p[alltoallv::kTraceEntry] != 0 && x.p[alltoallv::kTraceExit] >= x.p[alltoallv::kTraceEntry])
      calls.push_back(x);
  }
  std::sort(calls.begin(), calls.end(), [](const Call& a, const Call& b) { return a.p[0] < b.p[0]; });
  const char* names[] = {"", "trace_sent_us", "trace_counts_us", "trace_payload_us", "trace_close_us", "trace_exit_us"};
  for (int k = 1; k <= alltoallv::kTraceExit; ++k) {
    std::vector<double> d;
    for (const Call& c : calls)
      d.push_back(static_cast<double>(c.p[k] - c.p[k - 1]) / 1e3);
    if (!d.empty()) rec.extra[names[k]] = median(d);
  }
  std::vector<double> gaps;
  for (size_t i = 1; i < calls.size(); ++i) {
    const uint64_t prev_exit = calls[i - 1].p[alltoallv::kTraceExit];
    if (calls[i].p[0] > prev_exit) gaps.push_back(static_cast<double>(calls[i].p[0] - prev_exit) / 1e3);
  }
  if (!gaps.empty()) rec.extra["trace_gap_us"] = median(gaps);
  // From the latest CTA's exit of one call to the next call's entry (the kernel boundary).
  std::vector<double> tails;
  for (size_t i = 1; i < calls.size(); ++i) {
    const uint64_t end = calls[i - 1].p[alltoallv::kTraceEnd];
    if (end != 0 && calls[i].p[0] > end) tails.push_back(static_cast<double>(calls[i].p[0] - end) / 1e3);
  }
  if (!tails.empty()) rec.extra["trace_tail_us"] = median(tails);
  std::vector<double> epoch_us, row_us, wait_us, loaded_us, headers_us, local_us, last_us, flags_us, queued_us, end_us;
  auto us = [](uint64_t later, uint64_t earlier) { return static_cast<double>(later - earlier) / 1e3; };
  for (const Call& c : calls) {
    loaded_us.push_back(us(c.p[alltoallv::kTraceLoaded], c.p[alltoallv::kTraceEpoch]));
    headers_us.push_back(us(c.p[alltoallv::kTraceHeaders], c.p[alltoallv::kTraceSent]));
    // Calls with large segments stamp kTraceLocal after their queue; small ones after the local copy.
    local_us.push_back(us(c.p[alltoallv::kTraceLocal], c.p[alltoallv::kTraceCounts]));
    if (c.p[alltoallv::kTraceQueued] >= c.p[0] && c.p[alltoallv::kTraceLast] >= c.p[0] &&
        c.p[alltoallv::kTraceFlags] >= c.p[0]) {
      queued_us.push_back(us(c.p[alltoallv::kTraceQueued], c.p[alltoallv::kTraceCounts]));
      last_us.push_back(us(c.p[alltoallv::kTraceLast], c.p[alltoallv::kTraceCounts]));
      // Signed: this rank's own pushes may be released after every peer's have arrived here.
      flags_us.push_back(static_cast<double>(c.p[alltoallv::kTraceFlags]) / 1e3 -
                         static_cast<double>(c.p[alltoallv::kTraceLast]) / 1e3);
    }
    if (c.p[alltoallv::kTraceEnd] >= c.p[alltoallv::kTraceExit]) {
      end_us.push_back(us(c.p[alltoallv::kTraceEnd], c.p[alltoallv::kTraceExit]));
    }
    epoch_us.push_back(us(c.p[alltoallv::kTraceEpoch], c.p[alltoallv::kTraceEntry]));
    row_us.push_back(us(c.p[alltoallv::kTraceRow], c.p[alltoallv::kTraceEpoch]));
    // How long CTA 0 was resident before the previous kernel let it go (programmatic launch; ~0 without).
    wait_us.push_back(us(c.p[alltoallv::kTraceEntry], c.p[alltoallv::kTraceResident]));
  }
  if (!calls.empty()) {
    rec.extra["trace_epoch_us"] = median(epoch_us);
    rec.extra["trace_row_us"] = median(row_us);
    rec.extra["trace_wait_us"] = median(wait_us);
    rec.extra["trace_loaded_us"] = median(loaded_us);
    rec.extra["trace_headers_us"] = median(headers_us);
    rec.extra["trace_local_us"] = median(local_us);
    if (!last_us.empty()) {
      // Large calls: from the counts checked to the latest CTA off the queue and to the latest CTA's pushes
      // released; from those to every large segment arrived here (CTA 0).
      rec.extra["trace_queued_us"] = median(queued_us);
      rec.extra["trace_last_us"] = median(last_us);
      rec.extra["trace_flags_us"] = median(flags_us);
    }
    // From CTA 0's epoch write to the latest CTA done.
    if (!end_us.empty()) rec.extra["trace_end_us"] = median(end_us);
  }
  rec.extra["trace_calls"] = static_cast<double>(calls.size());
}

// `nvlink_bytes` >= 0 (suite moe): rec.bytes counts every selection, the local rank included, so algbw_gbps is the
// logical rate; the counter nvlink_gbps is the rate of `nvlink_bytes`, what crosses to other GPUs.
void publishTimed(benchmark::State& state, Env& e, Record rec, const std::vector<double>& us,
                  double nvlink_bytes = -1) {
  auto worst = slowest(e, median(us));
  if (!worst.isOk()) return fail(state, rec, worst.status());
  rec.time_us = *worst;
  rec.algbw_gbps = rec.bytes / rec.time_us / 1e3;
  rec.busbw_gbps = rec.algbw_gbps * (e.n - 1) / e.n;
  if (nvlink_bytes >= 0) rec.extra["nvlink_gbps"] = nvlink_bytes / rec.time_us / 1e3;
  rec.extra["p10_us"] = percentile(us, 10);
  rec.extra["p90_us"] = percentile(us, 90);
  rec.extra["samples"] = static_cast<double>(us.size());
  state.SetIterationTime(rec.time_us * 1e-6);
  publish(state, rec);
}

void runAlltoallv(benchmark::State& state, Impl impl, std::string pattern, bool graph, uint64_t bytes) {
  Record rec;
  rec.suite = "alltoallv";
  rec.impl = implName(impl);
  rec.name = (graph ? "graph/" : "") + pattern;
  rec.bytes = static_cast<double>(bytes);
  for (auto _ : state) {
    auto got = getEnv();
    if (!got.isOk()) return skip(state, rec, got.status().message());
    Env& e = **got;
    rec.ranks = e.n;
    Status prepared = prepareSize(e, bytes);
    if (!agree(e, prepared.isOk()))
      return fail(state, rec, prepared.isOk() ? PEERLAB_INTERNAL("a peer failed") : prepared);
    if (impl == Impl::kNcclDevice && !agree(e, e.device != nullptr)) {
      return skip(state, rec, e.device_status.isOk() ? "unavailable on a peer" : e.device_status.message());
    }
    const TrafficParams p = trafficFor(pattern, e.n, bytes);
    cudaStream_t s = e.stream.get();
    TrafficDriver& drv = *e.driver;
    const uint64_t seed = 0xB0 + bytes;
    void* send = nullptr;
    const void* recv = nullptr;
    size_t recv_bytes = 0;
    std::function<Status()> call;
    AllToAllV* a = e.peerlab.count(impl) ? e.peerlab[impl].get() : nullptr;
    switch (impl) {
      case Impl::kPeerlabPush:
      case Impl::kPeerlabTwoPhase:
      case Impl::kPeerlabPull: {
        send = a->sendBuffer();
        recv = a->recvBuffer();
        recv_bytes = a->options().recv_capacity * kElem;
        const int ctas = impl == Impl::kPeerlabPush ? tunedCtas() : 0;
        rec.extra["ctas"] = static_cast<double>(a->gridFor(ctas));
        rec.extra["programmatic"] = a->programmaticLaunch() ? 1 : 0;
        rec.extra["small_kernel"] = a->smallKernel() ? 1 : 0;
        if (a->protocol() == alltoallv::Protocol::kFused) {
          rec.extra["ll_max_bytes"] = static_cast<double>(a->options().ll_max_bytes);
          rec.extra["chunk_bytes"] = static_cast<double>(a->options().chunk_bytes);
          rec.extra["queue_in_step"] = a->options().queue_in_step ? 1 : 0;
        }
        call = [&e, a, s, ctas] { return a->run(s, e.sendCounts(), e.recvCounts(), e.recvOffsets(), ctas); };
        break;
      }
      case Impl::kNcclDevice:
        send = e.device->sendBuffer();
        recv = e.device->recvBuffer();
        recv_bytes = e.device->recvCapacity() * kElem;
        call = [&e, s] { return e.device->run(e.sendCounts(), e.recvCounts(), e.recvOffsets(), s); };
        break;
      case Impl::kNcclAlltoAll:
        send = e.plain_send->ptr;
        recv = e.plain_recv->ptr;
        recv_bytes = e.plain_recv->bytes;
        call = [&e, s, bytes] {
          return nccl::alltoall(e.comm.get(), e.plain_send->ptr, e.plain_recv->ptr, bytes / kElem / e.n, ncclFloat32,
                                s);
        };
        break;
      case Impl::kNcclHostCounts:
        send = e.plain_send->ptr;
        recv = e.hostcounts->recvBuffer();
        recv_bytes = e.hostcounts->recvCapacityBytes();
        call = [&e, s] {
          return e.hostcounts->run(e.plain_send->ptr, e.sendCounts(), kElem, e.recvCounts(), e.recvOffsets(), s,
                                   soon());
        };
        break;
    }
    // Counts and payload once; every timed call moves the same data. Then the data check: poison, one call, check
    // on this (the receiving) GPU, and the device status.
    const bool counts_out = impl != Impl::kNcclAlltoAll;
    auto check = [&]() -> StatusOr<alltoallv::VerifyResult> {
      PEERLAB_RETURN_IF_ERROR(drv.setCall(0, s));
      PEERLAB_RETURN_IF_ERROR(drv.writeCounts(p, e.rank, e.sendCounts(), s));
      PEERLAB_RETURN_IF_ERROR(drv.fillSend(p, e.rank, send, kElem, seed, s));
      PEERLAB_RETURN_IF_ERROR(drv.poisonRecv(p, e.rank, const_cast<void*>(recv), recv_bytes, kElem, seed, s));
      PEERLAB_RETURN_IF_ERROR(call());
      if (impl == Impl::kNcclHostCounts) recv = e.hostcounts->recvBuffer();
      PEERLAB_RETURN_IF_ERROR(drv.checkRecv(p, e.rank, recv, counts_out ? e.recvCounts() : nullptr,
                                            counts_out ? e.recvOffsets() : nullptr, kElem, seed, s));
      PEERLAB_ASSIGN_OR_RETURN(auto r, drv.collect(s, soon()));
      if (a != nullptr) PEERLAB_RETURN_IF_ERROR(a->checkStatus(s, soon()));
      if (impl == Impl::kNcclDevice) PEERLAB_RETURN_IF_ERROR(e.device->checkStatus(s, soon()));
      return r;
    };
    auto checked = check();
    if (!agree(e, checked.isOk())) {
      return fail(state, rec, checked.isOk() ? PEERLAB_INTERNAL("a peer failed") : checked.status());
    }
    rec.wrong = static_cast<double>(checked->wrong_elements + checked->wrong_counts);
    // Knob trace=1: the fused kernel's phase timestamps of the timed calls, as trace_* counters.
    DeviceBuffer trace;
    if (a != nullptr && a->protocol() == alltoallv::Protocol::kFused && traceRequested()) {
      auto t = allocDevice(a->device(), alltoallv::kTraceCalls * alltoallv::kTracePoints * sizeof(uint64_t));
      if (t.isOk() && PEERLAB_CUDA(cudaMemsetAsync((*t)->ptr, 0, (*t)->bytes, s)).isOk()) {
        trace = std::move(*t);
        a->setTrace(trace->as<uint64_t>());
      }
    }
    auto us = timeSamples(e, planFor(bytes), graph, call);
    if (a != nullptr) a->setTrace(nullptr);
    if (!agree(e, us.isOk())) return fail(state, rec, us.isOk() ? PEERLAB_INTERNAL("a peer failed") : us.status());
    if (a != nullptr) {
      Status after = a->checkStatus(s, soon());
      if (!agree(e, after.isOk())) return fail(state, rec, after.isOk() ? PEERLAB_INTERNAL("a peer failed") : after);
    }
    if (trace) addTrace(rec, trace, s);
    rec.extra["checked_elements"] = static_cast<double>(checked->checked_elements);
    publishTimed(state, e, rec, *us);
  }
}

// MoE: DeepSeek-V3 shape (H 7168, top-8 of 256 experts, bf16), T tokens per rank, identity experts, weights
// normalized per token, so combine gives the tokens back (checked within bf16 rounding).

struct MoeInstance {
  int tokens = 0;
  std::unique_ptr<alltoallv::moe::MoeExchange> peerlab, peerlab_twophase, nccl, peerlab_ll, peerlab_ll_fp8;
  DeviceBuffer x, ids, w, out;
  std::vector<uint16_t> host_x;
  std::vector<int32_t> host_ids;
};
MoeInstance& moeSlot() {
  static MoeInstance m;
  return m;
}

StatusOr<MoeInstance*> prepareMoe(Env& e, int tokens) {
  MoeInstance& m = moeSlot();
  if (m.tokens == tokens) return &m;
  PEERLAB_RETURN_IF_ERROR(waitStream(e.stream.get(), soon(), "previous moe"));
  // Free the alltoallv instances of the sweep too: the MoE buffers are large.
  PEERLAB_RETURN_IF_ERROR(releaseSizeInstances(e));
  if (m.peerlab) PEERLAB_RETURN_IF_ERROR(m.peerlab->close(*e.boot, soon()));
  if (m.peerlab_twophase) PEERLAB_RETURN_IF_ERROR(m.peerlab_twophase->close(*e.boot, soon()));
  if (m.peerlab_ll) PEERLAB_RETURN_IF_ERROR(m.peerlab_ll->close(*e.boot, soon()));
  if (m.peerlab_ll_fp8) PEERLAB_RETURN_IF_ERROR(m.peerlab_ll_fp8->close(*e.boot, soon()));
  m = MoeInstance{};
  alltoallv::moe::MoeConfig cfg;
  cfg.max_tokens = tokens;
  // Balanced random routing: about T * k pairs arrive per rank; twice that is plenty.
  cfg.pair_capacity = std::max<uint64_t>(2ull * tokens * cfg.top_k + 1024, 4096);
  PEERLAB_ASSIGN_OR_RETURN(
      auto p, alltoallv::moe::MoeExchange::createWithAllToAllV(*e.boot, e.rank, cfg, Transfer::kPush, soon()));
  m.peerlab = std::make_unique<alltoallv::moe::MoeExchange>(std::move(p));
  PEERLAB_ASSIGN_OR_RETURN(auto p2, alltoallv::moe::MoeExchange::createWithAllToAllV(
                                        *e.boot, e.rank, cfg, Transfer::kPush, soon(), alltoallv::Protocol::kTwoPhase));
  m.peerlab_twophase = std::make_unique<alltoallv::moe::MoeExchange>(std::move(p2));
  PEERLAB_ASSIGN_OR_RETURN(auto q, nccl::createHostCountMoe(e.comm.get(), e.rank, e.n, e.rank, cfg));
  m.nccl = std::make_unique<alltoallv::moe::MoeExchange>(std::move(q));
  if (tokens <= kMoeLlMaxTokens) {
    for (auto payload : {alltoallv::moe::LlPayload::kBf16, alltoallv::moe::LlPayload::kFp8}) {
      alltoallv::moe::MoeConfig ll = cfg;
      ll.ll_max_tokens = tokens;
      ll.ll_payload = payload;
      ll.ll_timeout_ms = static_cast<int64_t>(knobCount("moe_ll_timeout_ms", static_cast<uint64_t>(ll.ll_timeout_ms)));
      ll.ll_programmatic_launch = knobCount("programmatic", 1) != 0;
      ll.ll_tagged_max_tokens =
          static_cast<int>(knobCount("moe_ll_tagged_max_tokens", static_cast<uint64_t>(ll.ll_tagged_max_tokens)));
      ll.ll_ctas_per_sm = static_cast<int>(knobCount("moe_ll_ctas_per_sm", static_cast<uint64_t>(ll.ll_ctas_per_sm)));
      PEERLAB_ASSIGN_OR_RETURN(
          auto l, alltoallv::moe::MoeExchange::createWithAllToAllV(*e.boot, e.rank, ll, Transfer::kPush, soon()));
      (payload == alltoallv::moe::LlPayload::kFp8 ? m.peerlab_ll_fp8 : m.peerlab_ll) =
          std::make_unique<alltoallv::moe::MoeExchange>(std::move(l));
    }
  }
  alltoallv::moe::MoeShape shape{e.n, cfg.hidden, cfg.top_k, cfg.experts};
  std::vector<int> counts(e.n, 0);
  counts[e.rank] = tokens;
  auto in = alltoallv::moe::makeMoeInputs(shape, counts, 4242 + tokens);
  auto& mine = in[e.rank];
  for (int t = 0; t < tokens; ++t) {
    float sum = 0;
    for (int j = 0; j < cfg.top_k; ++j)
      sum += mine.weights[t * cfg.top_k + j];
    for (int j = 0; j < cfg.top_k; ++j)
      mine.weights[t * cfg.top_k + j] /= sum;
  }
  auto up = [&](const void* src, size_t bytes) -> StatusOr<DeviceBuffer> {
    PEERLAB_ASSIGN_OR_RETURN(auto b, allocDevice(e.rank, std::max<size_t>(bytes, 16)));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaMemcpy(b->ptr, src, bytes, cudaMemcpyHostToDevice)));
    return b;
  };
  PEERLAB_ASSIGN_OR_RETURN(m.x, up(mine.x.data(), mine.x.size() * 2));
  PEERLAB_ASSIGN_OR_RETURN(m.ids, up(mine.ids.data(), mine.ids.size() * 4));
  PEERLAB_ASSIGN_OR_RETURN(m.w, up(mine.weights.data(), mine.weights.size() * 4));
  PEERLAB_ASSIGN_OR_RETURN(m.out, allocDevice(e.rank, std::max<size_t>(mine.x.size() * 2, 16)));
  m.host_x = std::move(mine.x);
  m.host_ids = std::move(mine.ids);
  m.tokens = tokens;
  return &m;
}

// Wrong combined elements: identity experts and unit weight sums give the tokens back within bf16 rounding.
StatusOr<uint64_t> checkCombine(Env& e, MoeInstance& m) {
  std::vector<uint16_t> got(m.host_x.size());
  PEERLAB_RETURN_IF_ERROR(waitStream(e.stream.get(), soon(), "moe check"));
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaMemcpy(got.data(), m.out->ptr, got.size() * 2, cudaMemcpyDeviceToHost)));
  uint64_t wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float want = alltoallv::moe::bf16ToFloat(m.host_x[i]);
    const float have = alltoallv::moe::bf16ToFloat(got[i]);
    wrong += std::fabs(have - want) <= 1e-2f * std::fabs(want) + 1e-6f ? 0 : 1;
  }
  return wrong;
}

// Wrong rows of an fp8 LL dispatch: the rows this rank sent to its own experts must hold its tokens quantized as the
// CPU reference does, and their number must match its routing.
StatusOr<uint64_t> checkLlFp8Dispatch(Env& e, MoeInstance& m, alltoallv::moe::MoeExchange& moe) {
  namespace moe_ns = alltoallv::moe;
  PEERLAB_RETURN_IF_ERROR(waitStream(e.stream.get(), soon(), "moe ll check"));
  const moe_ns::LlDispatchOutput o = moe.lowLatency()->output();
  const auto& cfg = moe.config();
  const int H = cfg.hidden, groups = H / moe_ns::kFp8Group;
  const size_t rows = static_cast<size_t>(o.local_experts) * o.expert_stride;
  std::vector<int64_t> counts(o.local_experts);
  std::vector<int4> src(rows);
  std::vector<uint8_t> q(rows * H);
  std::vector<float> scales(rows * groups);
  PEERLAB_RETURN_IF_ERROR(
      PEERLAB_CUDA(cudaMemcpy(counts.data(), o.expert_counts, counts.size() * 8, cudaMemcpyDeviceToHost)));
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaMemcpy(src.data(), o.row_source, rows * 16, cudaMemcpyDeviceToHost)));
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaMemcpy(q.data(), o.rows, q.size(), cudaMemcpyDeviceToHost)));
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaMemcpy(scales.data(), o.scales, scales.size() * 4, cudaMemcpyDeviceToHost)));
  int64_t mine = 0, want_mine = 0;
  for (int32_t id : m.host_ids)
    want_mine += (id >= 0 && id < cfg.experts && id / o.local_experts == e.rank) ? 1 : 0;
  uint64_t wrong = 0;
  std::vector<uint8_t> wq(H);
  std::vector<float> ws(groups);
  for (int le = 0; le < o.local_experts; ++le)
    for (int64_t i = 0; i < counts[le]; ++i) {
      const size_t r = le * o.expert_stride + static_cast<size_t>(i);
      if (src[r].x != e.rank) continue;
      ++mine;
      const int t = src[r].y;
      if (t < 0 || t >= m.tokens) {
        ++wrong;
        continue;
      }
      moe_ns::quantizeRowFp8(&m.host_x[static_cast<size_t>(t) * H], H, wq.data(), ws.data());
      bool same = std::equal(wq.begin(), wq.end(), q.begin() + r * H);
      same = same && std::equal(ws.begin(), ws.end(), scales.begin() + r * groups);
      wrong += same ? 0 : 1;
    }
  return wrong + static_cast<uint64_t>(std::llabs(mine - want_mine));
}

// Knob moe_ll_phases=1: the low-latency kernels also stamp their phases (a few atomics more per CTA).
bool llPhasesRequested() {
  return knobCount("moe_ll_phases", 0) == 1;
}

// A cleared LlKernelTimes on this rank's GPU, set on `ll` (its next kernels stamp their spans into it).
StatusOr<DeviceBuffer> startKernelTimes(Env& e, alltoallv::moe::LowLatencyExchange& ll) {
  alltoallv::moe::LlKernelTimes cleared{};
  alltoallv::moe::llClearTimes(&cleared);
  PEERLAB_ASSIGN_OR_RETURN(auto b, allocDevice(e.rank, sizeof(cleared)));
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaMemcpy(b->ptr, &cleared, sizeof(cleared), cudaMemcpyHostToDevice)));
  ll.setKernelTimes(b->as<alltoallv::moe::LlKernelTimes>(), llPhasesRequested());
  return b;
}

// This rank's median kernel span (us) of the dispatch or combine calls stamped into `times`, and with phase stamps
// on, the median moment (us after the call's start) of each phase.
StatusOr<std::map<std::string, double>> kernelMediansUs(Env& e, const DeviceBuffer& times, bool combine) {
  PEERLAB_RETURN_IF_ERROR(waitStream(e.stream.get(), soon(), "ll kernel times"));
  alltoallv::moe::LlKernelTimes t{};
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaMemcpy(&t, times->ptr, sizeof(t), cudaMemcpyDeviceToHost)));
  const std::vector<double> spans = alltoallv::moe::llKernelSpansUs(t, combine);
  if (spans.empty()) return PEERLAB_INTERNAL("no low-latency kernel stamped its span");
  std::map<std::string, double> out{{"kernel_us", median(spans)}};
  if (llPhasesRequested()) {
    namespace m = alltoallv::moe;
    const std::pair<int, const char*> phases[] = {{m::kLlStampLastStart, "ll_last_start_us"},
                                                  {m::kLlStampSent, "ll_sent_us"},
                                                  {m::kLlStampSignals, "ll_signals_us"},
                                                  {m::kLlStampRows, "ll_rows_us"}};
    for (const auto& [stamp, name] : phases) {
      // Every rank names every phase (the slowest-rank exchange is collective); -1: this rank has no stamp of it.
      const std::vector<double> at = m::llStampOffsetsUs(t, combine, stamp);
      out[name] = at.empty() ? -1.0 : median(at);
    }
  }
  return out;
}

void runMoe(benchmark::State& state, MoePath path, bool combine, bool graph, int tokens) {
  Record rec;
  rec.suite = "moe";
  rec.impl = moeImpl(path, combine);
  rec.name = (graph ? "graph/T=" : "T=") + std::to_string(tokens);
  // Phase stamps cost a few atomics per CTA: those rows are a measurement of their own.
  if ((path == MoePath::kPeerlabLowLatency || path == MoePath::kPeerlabLowLatencyFp8) && llPhasesRequested()) {
    rec.name += "/phases";
  }
  for (auto _ : state) {
    auto got = getEnv();
    if (!got.isOk()) return skip(state, rec, got.status().message());
    Env& e = **got;
    rec.ranks = e.n;
    auto prepared = prepareMoe(e, tokens);
    if (!agree(e, prepared.isOk())) {
      return fail(state, rec, prepared.isOk() ? PEERLAB_INTERNAL("a peer failed") : prepared.status());
    }
    MoeInstance& m = **prepared;
    const bool ll = path == MoePath::kPeerlabLowLatency || path == MoePath::kPeerlabLowLatencyFp8;
    if (ll && tokens > kMoeLlMaxTokens) {
      return skip(state, rec,
                  "the low-latency mode holds " + std::to_string(kMoeLlMaxTokens) +
                      " tokens per rank; at this T the auto choice takes the normal mode (peerlab.dispatch)");
    }
    alltoallv::moe::MoeExchange& moe = path == MoePath::kNccl                   ? *m.nccl
                                       : path == MoePath::kPeerlabTwoPhase      ? *m.peerlab_twophase
                                       : path == MoePath::kPeerlabLowLatency    ? *m.peerlab_ll
                                       : path == MoePath::kPeerlabLowLatencyFp8 ? *m.peerlab_ll_fp8
                                                                                : *m.peerlab;
    const auto& cfg = moe.config();
    cudaStream_t s = e.stream.get();
    // Logical bytes: every (token, valid selection)'s payload row, the local rank included; NVLink bytes: once per
    // (token, other rank). fp8 rows carry H bytes and H / 128 fp32 scales; combine rows are bf16.
    const bool fp8 = path == MoePath::kPeerlabLowLatencyFp8 && !combine;
    const uint64_t row_bytes = fp8 ? cfg.hidden + 4ull * (cfg.hidden / alltoallv::moe::kFp8Group) : 2ull * cfg.hidden;
    const auto traffic =
        alltoallv::moe::moeTrafficBytes(m.host_ids.data(), tokens, cfg.top_k, cfg.experts, e.n, e.rank, row_bytes);
    rec.bytes = static_cast<double>(traffic.logical);
    const alltoallv::moe::MoeMode mode = ll ? alltoallv::moe::MoeMode::kLowLatency : alltoallv::moe::MoeMode::kNormal;
    auto dispatch = [&] {
      return moe.dispatch(m.x->as<__nv_bfloat16>(), m.ids->as<int32_t>(), m.w->as<float>(), tokens, s, soon(), mode);
    };
    // Identity experts: the expert input rows are the output rows (bf16 in both modes' layouts).
    const __nv_bfloat16* expert_rows =
        ll ? reinterpret_cast<const __nv_bfloat16*>(moe.lowLatency()->output().rows) : moe.output().rows;
    auto combineCall = [&] { return moe.combine(expert_rows, m.out->as<__nv_bfloat16>(), s, soon()); };
    // Check once: dispatch, identity experts, combine (fp8 dispatch: the rows this rank sent itself, quantized).
    auto check = [&]() -> StatusOr<uint64_t> {
      if (fp8) {
        PEERLAB_RETURN_IF_ERROR(dispatch());
        PEERLAB_RETURN_IF_ERROR(moe.checkStatus(s, soon()));
        return checkLlFp8Dispatch(e, m, moe);
      }
      PEERLAB_RETURN_IF_ERROR(dispatch());
      PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaMemsetAsync(m.out->ptr, 0xFF, m.out->bytes, s)));
      PEERLAB_RETURN_IF_ERROR(combineCall());
      PEERLAB_RETURN_IF_ERROR(moe.checkStatus(s, soon()));
      return checkCombine(e, m);
    };
    auto wrong = check();
    if (!agree(e, wrong.isOk()))
      return fail(state, rec, wrong.isOk() ? PEERLAB_INTERNAL("a peer failed") : wrong.status());
    rec.wrong = static_cast<double>(*wrong);
    const alltoallv_suite::Calls c = alltoallv_suite::moeCallsFor(tokens);
    const Plan plan{c.warmup, c.batch, bench::plan().samples > 0 ? bench::plan().samples : c.samples};
    // Knob trace=1: the phases of the timed exchange's alltoallv (fused protocol), as for alltoallv.
    alltoallv::AllToAllV* traced = nullptr;
    DeviceBuffer trace;
    if (traceRequested() && path == MoePath::kPeerlab) {
      auto* t = dynamic_cast<alltoallv::moe::AllToAllVTransport*>(combine ? &moe.combineTransport()
                                                                          : &moe.dispatchTransport());
      if (t != nullptr && t->alltoallv().protocol() == alltoallv::Protocol::kFused) {
        auto buf =
            allocDevice(t->alltoallv().device(), alltoallv::kTraceCalls * alltoallv::kTracePoints * sizeof(uint64_t));
        if (buf.isOk() && PEERLAB_CUDA(cudaMemsetAsync((*buf)->ptr, 0, (*buf)->bytes, s)).isOk()) {
          trace = std::move(*buf);
          traced = &t->alltoallv();
          traced->setTrace(trace->as<uint64_t>());
        }
      }
    }
    // Low-latency rows: the kernels stamp their spans (the ring keeps the last kLlTimeSlots calls: timed ones).
    DeviceBuffer ll_times;
    if (ll) {
      auto t = startKernelTimes(e, *moe.lowLatency());
      if (!agree(e, t.isOk())) return fail(state, rec, t.isOk() ? PEERLAB_INTERNAL("a peer failed") : t.status());
      ll_times = std::move(t).value();
    }
    auto us = combine ? timeSamples(e, plan, graph, combineCall) : timeSamples(e, plan, graph, dispatch);
    if (traced != nullptr) traced->setTrace(nullptr);
    if (ll_times) moe.lowLatency()->setKernelTimes(nullptr);
    if (!agree(e, us.isOk())) return fail(state, rec, us.isOk() ? PEERLAB_INTERNAL("a peer failed") : us.status());
    Status after = moe.checkStatus(s, soon());
    if (!agree(e, after.isOk())) return fail(state, rec, after.isOk() ? PEERLAB_INTERNAL("a peer failed") : after);
    if (traced != nullptr) addTrace(rec, trace, s);
    if (ll_times) {
      auto k = kernelMediansUs(e, ll_times, combine);
      if (!agree(e, k.isOk())) return fail(state, rec, k.isOk() ? PEERLAB_INTERNAL("a peer failed") : k.status());
      for (const auto& [name, us] : *k) {
        auto worst = slowest(e, us);
        if (!worst.isOk()) return fail(state, rec, worst.status());
        if (*worst >= 0) rec.extra[name] = *worst;
      }
    }
    rec.extra["nvlink_bytes"] = static_cast<double>(traffic.nvlink);
    if (ll) {
      const auto* x = moe.lowLatency();
      rec.extra["ll_tagged"] = x->layout().tagged(tokens) ? 1.0 : 0.0;
      rec.extra["ll_ctas"] = static_cast<double>(combine ? x->ctasFor(tokens) : x->dispatchCtasFor(tokens));
      rec.extra["ll_ctas_per_sm"] = static_cast<double>(x->ctasPerSm());
    }
    publishTimed(state, e, rec, *us, static_cast<double>(traffic.nvlink));
  }
}

void registerAll() {
  auto reg = [](const std::string& name, auto fn) {
    benchmark::RegisterBenchmark(name.c_str(), fn)->Iterations(1)->UseManualTime()->Unit(benchmark::kMicrosecond);
  };
  // The rows the plan runs (every rank registers the same list: the same plan).
  for (const alltoallv_suite::Case& c : alltoallv_suite::cases()) {
    report::RowKey key;
    key.impl = implName(c.impl);
    key.name = c.name();
    key.bytes = c.bytes;
    if (!planned(key)) continue;
    const uint64_t bytes = static_cast<uint64_t>(c.bytes);
    reg(c.rowName(), [impl = c.impl, pattern = c.pattern, graph = c.graph, bytes](benchmark::State& st) {
      runAlltoallv(st, impl, pattern, graph, bytes);
    });
  }
  for (const alltoallv_suite::MoeCase& c : alltoallv_suite::moeCases()) {
    report::RowKey key;
    key.impl = moeImpl(c.path, c.combine);
    key.name = c.name();
    if (!planned(key)) continue;
    reg(c.rowName(), [path = c.path, combine = c.combine, graph = c.graph, tokens = c.tokens](benchmark::State& st) {
      runMoe(st, path, combine, graph, tokens);
    });
  }
}

PEERLAB_BENCH_REGISTER(alltoallv, registerAll);

}  // namespace
}  // namespace peerlab::bench
