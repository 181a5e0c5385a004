// Host <-> device paths of every visible GPU, as nvbandwidth's host testcases measure them, and device-local copy
// bandwidth.
//
// Rows (suite host_copy; src = the GPU; numa = the host node the memory sits on):
//   BM_HostCopy/<impl>/<name>/gpu:<g>/numa:<local|remote>/bytes:<N>   name h2d, d2h, bidir (both at once)
//     impl cuda.memcpy_async  the plain loop: cudaMallocHost memory and cudaMemcpyAsync, the anchor
//          peerlab.ce         host::copyEngine on memory bound to the GPU's node (numa:local) or another node
//                             (numa:remote, the misplaced-memory case; skipped on a one-node machine)
//          peerlab.sm         host::smCopy: a kernel loads (h2d) or stores (d2h) the mapped pinned memory
//          cuda.pageable      cudaMemcpyAsync of pageable memory (staged by the driver, ungated)
//   BM_HostCopy/<impl>/<all_h2d|all_d2h>/bytes:<N>   every GPU at once, each with memory on its own node
//     (nvbandwidth's host_to_all / all_to_host); busbw is the sum over the GPUs
//   BM_HostLatency/peerlab.sm/latency/gpu:<g>/numa:local   one thread's dependent loads through a 1 MiB chain in
//     pinned host memory, one node per 128-byte line (nvbandwidth's host_device_latency_sm); time_us per load
//   BM_DeviceLocal/peerlab.ce/device_local/gpu:<g>/bytes:<N>   cudaMemcpyAsync within one GPU's memory; peak_gbps is
//     the DRAM figure (bus width x clock x 2) and mem_efficiency = 2 x algbw / peak (a copy reads and writes each byte)
//
// What runs: the plan (bench/common/plan.h); its GPU sets ("gpu_sets": [[0,1],[2,3]]) name GPUs whose rows of one
// kind (impl, direction, size, placement) are measured together, each GPU on its own lanes, where each has a PCIe
// link of its own (qualify decides, bench/host_copy_suite.cc); a GPU in no set, and pageable copies (the driver stages
// them on the calling thread), run alone. A row measured with others says so (counter concurrent_gpus). The kinds,
// sizes and batches are bench/host_copy_suite.h's.
// Timing (bench/common/sampler.h): per sample a batch of copies per lane behind a gate kernel, timed by events on
// each lane; time_us is the median over the samples of the slowest lane's time per copy. Sampling stops after 3
// samples whose spread (p10..p90 over the median) is under 2%, else after 7, and goes on to 28 only while the spread
// stays above 10% (a burst of interference from outside passes instead of deciding the median). algbw_gbps = bytes /
// time_us / 1e3 per lane; busbw_gbps = the sum over the lanes (bidir: h2d + d2h, the anchors' "both at once" figure).
// Every peerlab.ce row also reports vs_plain = its busbw / the plain loop's for the same GPU, name and size (the
// anchor rows run first), the >= 0.98 target.
// Data check: sources hold a fresh seeded pattern, destinations are poisoned; a verified warm-up copy, then the timed
// samples, then the destinations are verified again, on their owner (the device for h2d, the host for d2h).

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "bench/common/bench_util.h"
#include "bench/common/plan.h"
#include "bench/common/sampler.h"
#include "bench/host_copy_suite.h"
#include "reference/core/check.h"
#include "reference/core/devices.h"
#include "reference/core/memory.h"
#include "reference/core/pattern.h"
#include "reference/core/scoped.h"
#include "reference/core/wait.h"
#include "reference/host/host_copy.h"
#include "reference/host/host_memory.h"
#include "reference/host/numa.h"

namespace peerlab {
namespace {

using bench::Record;
using host::Direction;
using host::HostBuffer;

constexpr int64_t kWaitMs = 60000;
constexpr size_t kMaxBytes = static_cast<size_t>(host_copy_suite::kMaxBytes);
constexpr size_t kChaseBytes = size_t{1} << 20;
constexpr size_t kChaseStride = 128;
constexpr uint32_t kChaseLoads = 20000;

using host_copy_suite::Impl;
using host_copy_suite::implName;

struct GpuState {
  Stream lane[2];  // by Direction
  DeviceBuffer dev[2];
  std::optional<PatternChecker> checker;
  host::NodeChoice nodes;
};

struct Env {
  int devices = 0;
  uint64_t run = 0;
  std::vector<GpuState> gpus;
  std::vector<std::vector<int>> sets;  // the plan's GPU sets: GPUs measured together
  // Rows measured with other GPUs of their set, waiting for their own benchmark to report them.
  std::map<std::string, std::pair<Status, Record>> measured;
  // The host pool (hostSlot).
  struct HostSlot {
    host::HostBuffer host;  // peerlab placements
    PinnedBuffer pinned;    // the plain loop's cudaMallocHost memory
    void* ptr = nullptr;
    int numa = -1;
    uint64_t used = 0;
  };
  std::map<std::string, HostSlot> pool;
  uint64_t tick = 0;
  uint64_t row_start = 0;  // buffers used after this serve the row in progress
  // Plain-loop busbw per (name, gpu, bytes), for the vs_plain ratio.
  std::map<std::tuple<std::string, int, size_t>, double> plain;
};

// NOTE: never destroyed (static destructors run after the CUDA runtime's teardown; exit releases the GPU).
StatusOr<Env*> env() {
  static Env* e = nullptr;
  static Status failed = Status::ok();
  if (e) return e;
  if (!failed.isOk()) return failed;
  auto build = [&]() -> Status {
    auto made = std::make_unique<Env>();
    PEERLAB_ASSIGN_OR_RETURN(made->devices, deviceCount());
    made->run = (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
    PEERLAB_ASSIGN_OR_RETURN(std::vector<int> online, host::onlineNodes());
    made->gpus.resize(made->devices);
    for (int g = 0; g < made->devices; ++g) {
      PEERLAB_RETURN_IF_ERROR(host::checkKernelImage(g));
      GpuState& s = made->gpus[g];
      for (int d = 0; d < 2; ++d) {
        PEERLAB_ASSIGN_OR_RETURN(s.lane[d], createStream(g));
        PEERLAB_ASSIGN_OR_RETURN(s.dev[d], allocDevice(g, kMaxBytes));
      }
      PEERLAB_ASSIGN_OR_RETURN(PatternChecker c, PatternChecker::create(g));
      s.checker.emplace(std::move(c));
      PEERLAB_ASSIGN_OR_RETURN(std::optional<int> node, host::gpuHostNode(g));
      s.nodes = host::chooseNodes(node, online);
    }
    for (const std::vector<int>& set : bench::plan().gpu_sets) {
      // A set naming a GPU this process does not see measures without it.
      std::vector<int> gpus;
      for (int g : set)
        if (g < made->devices) gpus.push_back(g);
      if (gpus.size() > 1) made->sets.push_back(gpus);
    }
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

void finish(benchmark::State& state, const Record& rec, const Status& st) {
  if (st.code() == StatusCode::kUnavailable) {
    bench::skip(state, rec, st.toString());
  } else {
    bench::fail(state, rec, st);
  }
}

struct HostSpec {
  Impl impl = Impl::kCe;
  std::string name;  // h2d, d2h, bidir, all_h2d, all_d2h
  int gpu = -1;      // -1: every GPU
  bool remote = false;
  size_t bytes = 0;
};

// One direction of one GPU: its stream, its buffers and its pattern.
struct Lane {
  int gpu;
  Direction dir;
  void* host_ptr = nullptr;  // a buffer of the host pool (Env::pool)
  int numa = -1;
  uint64_t seed = 0;
};

// The host pool: buffers of kMaxBytes by placement, GPU and direction, reused by the rows after the one that made
// them (allocating and pinning 256 MiB took longer than the copies). At most kPoolSlots are kept; a buffer a row in
// progress uses is never given up.
constexpr size_t kPoolSlots = 8;

StatusOr<Env::HostSlot*> hostSlot(Env& e, const std::string& key, const std::function<Status(Env::HostSlot&)>& make) {
  if (auto it = e.pool.find(key); it != e.pool.end()) {
    it->second.used = ++e.tick;
    return &it->second;
  }
  while (e.pool.size() >= kPoolSlots) {
    auto oldest = e.pool.end();
    for (auto it = e.pool.begin(); it != e.pool.end(); ++it) {
      if (it->second.used <= e.row_start && (oldest == e.pool.end() || it->second.used < oldest->second.used))
        oldest = it;
    }
    if (oldest == e.pool.end()) break;  // every buffer serves the row in progress: the pool grows
    e.pool.erase(oldest);
  }
  Env::HostSlot slot;
  PEERLAB_RETURN_IF_ERROR(make(slot));
  slot.used = ++e.tick;
  return &e.pool.emplace(key, std::move(slot)).first->second;
}

StatusOr<Lane> makeLane(Env& e, const HostSpec& spec, int gpu, Direction dir) {
  Lane l{gpu, dir, nullptr, -1, 0};
  const GpuState& g = e.gpus[gpu];
  const std::string where_key = std::to_string(gpu) + "/" + std::to_string(static_cast<int>(dir)) + "/";
  if (spec.impl == Impl::kPlain) {
    PEERLAB_ASSIGN_OR_RETURN(Env::HostSlot * slot, hostSlot(e, "plain/" + where_key, [](Env::HostSlot& s) -> Status {
                               PEERLAB_ASSIGN_OR_RETURN(s.pinned, allocPinned(kMaxBytes));
                               s.ptr = s.pinned->ptr;
                               std::fill_n(static_cast<uint8_t*>(s.ptr), kMaxBytes, uint8_t{0});
                               auto node = host::nodeOfPage(s.ptr);
                               s.numa = node.isOk() ? *node : -1;
                               return Status::ok();
                             }));
    l.host_ptr = slot->ptr;
    l.numa = slot->numa;
  } else {
    host::HostPlacement where;
    where.pinned = spec.impl != Impl::kPageable;
    if (spec.remote) {
      if (!g.nodes.remote) {
        return PEERLAB_UNAVAILABLE("GPU " + std::to_string(gpu) + ": no NUMA node other than the GPU's own");
      }
      where.node = g.nodes.remote;
    } else {
      // The local node when known; memory stays where the kernel puts it when it cannot be bound.
      where.node = g.nodes.local;
      where.node_required = false;
    }
    const std::string key =
        std::string(where.pinned ? "pinned/" : "pageable/") + (spec.remote ? "remote/" : "local/") + where_key;
    PEERLAB_ASSIGN_OR_RETURN(Env::HostSlot * slot, hostSlot(e, key, [&](Env::HostSlot& s) -> Status {
                               PEERLAB_ASSIGN_OR_RETURN(s.host, host::allocHost(kMaxBytes, where));
                               s.ptr = s.host->ptr;
                               s.numa = s.host->node;
                               return Status::ok();
                             }));
    l.host_ptr = slot->ptr;
    l.numa = slot->numa;
  }
  l.seed = patternSeed(e.run, gpu, static_cast<int>(dir), hashName(spec.name + implName(spec.impl)) ^ spec.bytes);
  return l;
}

cudaStream_t laneStream(Env& e, const Lane& l) {
  return e.gpus[l.gpu].lane[static_cast<int>(l.dir)].get();
}
void* laneDevice(Env& e, const Lane& l) {
  return e.gpus[l.gpu].dev[static_cast<int>(l.dir)]->ptr;
}

Status syncLane(Env& e, const Lane& l, const char* what) {
  PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(l.gpu));
  return waitStream(laneStream(e, l), Deadline::afterMs(kWaitMs), what);
}

// Sources get the pattern, destinations its complement.
Status prepareLanes(Env& e, const HostSpec& spec, std::vector<Lane>& lanes, bool sources) {
  for (Lane& l : lanes) {
    auto* h = static_cast<uint8_t*>(l.host_ptr);
    void* d = laneDevice(e, l);
    if (l.dir == Direction::kHostToDevice) {
      if (sources) fillPatternHost(h, spec.bytes, l.seed);
      PEERLAB_RETURN_IF_ERROR(poisonPattern(d, spec.bytes, l.seed, laneStream(e, l)));
    } else {
      if (sources) PEERLAB_RETURN_IF_ERROR(fillPattern(d, spec.bytes, l.seed, laneStream(e, l)));
      poisonPatternHost(h, spec.bytes, l.seed);
    }
  }
  for (Lane& l : lanes)
    PEERLAB_RETURN_IF_ERROR(syncLane(e, l, "fill/poison"));
  return Status::ok();
}

Status issue(Env& e, const HostSpec& spec, const Lane& l) {
  void* d = laneDevice(e, l);
  cudaStream_t s = laneStream(e, l);
  switch (spec.impl) {
    case Impl::kPlain:
    case Impl::kPageable:
      if (l.dir == Direction::kHostToDevice) {
        return PEERLAB_CUDA(cudaMemcpyAsync(d, l.host_ptr, spec.bytes, cudaMemcpyHostToDevice, s));
      }
      return PEERLAB_CUDA(cudaMemcpyAsync(l.host_ptr, d, spec.bytes, cudaMemcpyDeviceToHost, s));
    case Impl::kCe:
      return host::copyEngine(d, l.host_ptr, spec.bytes, l.dir, s);
    case Impl::kSm:
      return host::smCopy(d, l.host_ptr, spec.bytes, l.dir, s);
  }
  return PEERLAB_INTERNAL("unknown impl");
}

// Wrong bytes of one lane's destination, checked by its owner.
StatusOr<PatternCheck> verifyLane(Env& e, const HostSpec& spec, Lane& l) {
  PEERLAB_RETURN_IF_ERROR(syncLane(e, l, "copies"));
  if (l.dir == Direction::kHostToDevice) {
    return checkPattern(laneDevice(e, l), spec.bytes, l.seed, l.gpu, laneStream(e, l), Deadline::afterMs(kWaitMs));
  }
  return checkPatternHost(l.host_ptr, spec.bytes, l.seed);
}

size_t batchFor(const HostSpec& spec) {
  return static_cast<size_t>(host_copy_suite::batchFor(spec.impl, static_cast<int64_t>(spec.bytes)));
}

// The plan's samples where it sets them, else the size's.
int samplesFor(const HostSpec& spec) {
  if (bench::plan().samples > 0) return bench::plan().samples;
  return host_copy_suite::samplesFor(spec.impl, static_cast<int64_t>(spec.bytes));
}

// The rows of `spec` for `gpus` (one GPU, the GPUs of a set measured at once, or every GPU for an all_* row: then one
// record over all lanes), keyed by GPU (-1 for an all_* row).
StatusOr<std::map<int, Record>> measureHost(const HostSpec& spec, const std::vector<int>& gpus,
                                            const std::function<Record(int gpu)>& identity) {
  PEERLAB_ASSIGN_OR_RETURN(Env * e, env());
  for (int g : gpus) {
    if (g >= e->devices) return PEERLAB_UNAVAILABLE("GPU " + std::to_string(g) + " not visible");
  }
  const bool all = spec.gpu < 0;
  e->row_start = e->tick;
  std::vector<Lane> lanes;
  for (int g : gpus) {
    if (spec.name == "h2d" || spec.name == "bidir" || spec.name == "all_h2d") {
      PEERLAB_ASSIGN_OR_RETURN(Lane l, makeLane(*e, spec, g, Direction::kHostToDevice));
      lanes.push_back(std::move(l));
    }
    if (spec.name == "d2h" || spec.name == "bidir" || spec.name == "all_d2h") {
      PEERLAB_ASSIGN_OR_RETURN(Lane l, makeLane(*e, spec, g, Direction::kDeviceToHost));
      lanes.push_back(std::move(l));
    }
  }

  // Warm-up copy, verified; then the destinations are poisoned again.
  PEERLAB_RETURN_IF_ERROR(prepareLanes(*e, spec, lanes, true));
  for (const Lane& l : lanes)
    PEERLAB_RETURN_IF_ERROR(issue(*e, spec, l));
  std::map<int, PatternCheck> warm, timed;
  for (int g : (all ? std::vector<int>{-1} : gpus)) {
    std::vector<Lane*> mine;
    for (Lane& l : lanes)
      if (all || l.gpu == g) mine.push_back(&l);
    PatternCheck c;
    for (Lane* l : mine) {
      PEERLAB_ASSIGN_OR_RETURN(PatternCheck x, verifyLane(*e, spec, *l));
      c.elements += x.elements;
      c.wrong += x.wrong;
      c.first_bad = std::min(c.first_bad, x.first_bad);
    }
    warm[g] = c;
  }
  PEERLAB_RETURN_IF_ERROR(prepareLanes(*e, spec, lanes, false));

  bench::SampleSpec sample;
  for (const Lane& l : lanes)
    sample.lanes.push_back({laneStream(*e, l), l.gpu});
  sample.batch = batchFor(spec);
  sample.samples = samplesFor(spec);
  if (spec.impl != Impl::kPageable) {
    // Three quiet samples are enough; a noisy start (another tenant on the PCIe path) gets more samples rather than
    // deciding the median.
    sample.min_samples = 3;
    sample.max_samples = 4 * sample.samples;
  }
  // A pageable copy returns only once the driver has staged its source: behind a closed gate it would never return.
  sample.gated = spec.impl != Impl::kPageable;
  PEERLAB_ASSIGN_OR_RETURN(bench::Samples times,
                           bench::timeBatches(sample, [&](size_t i) { return issue(*e, spec, lanes[i]); }));

  std::map<int, Record> out;
  for (int g : (all ? std::vector<int>{-1} : gpus)) {
    PatternCheck check;
    std::vector<size_t> mine;
    for (size_t i = 0; i < lanes.size(); ++i) {
      if (!all && lanes[i].gpu != g) continue;
      mine.push_back(i);
      PEERLAB_ASSIGN_OR_RETURN(PatternCheck x, verifyLane(*e, spec, lanes[i]));
      check.elements += x.elements;
      check.wrong += x.wrong;
      check.first_bad = std::min(check.first_bad, x.first_bad);
    }
    // Per sample, the slowest of this GPU's lanes (of every lane for an all_* row).
    std::vector<double> slowest(times.slowest_us.size(), 0.0);
    for (size_t k = 0; k < slowest.size(); ++k) {
      for (size_t i : mine)
        slowest[k] = std::max(slowest[k], times.lane_us[i][k]);
    }
    Record rec = identity(g);
    const double time_us = bench::median(slowest);
    rec.time_us = time_us;
    rec.algbw_gbps = static_cast<double>(spec.bytes) / time_us / 1e3;
    double sum = 0;
    for (size_t i : mine) {
      const double gbps = static_cast<double>(spec.bytes) / bench::median(times.lane_us[i]) / 1e3;
      sum += gbps;
      if (spec.name == "bidir") rec.extra[std::string(host::directionName(lanes[i].dir)) + "_gbps"] = gbps;
    }
    // Both at once: the sum of what each lane moved over its own time, never more than lanes x the slowest.
    rec.busbw_gbps = mine.size() == 1 ? rec.algbw_gbps : sum;
    rec.wrong = static_cast<double>(warm[g].wrong + check.wrong);
    if (rec.wrong > 0) rec.extra["first_bad"] = static_cast<double>(std::min(warm[g].first_bad, check.first_bad));
    rec.extra["samples"] = static_cast<double>(slowest.size());
    rec.extra["batch"] = static_cast<double>(sample.batch);
    rec.extra["p10_us"] = bench::percentile(slowest, 10);
    rec.extra["p90_us"] = bench::percentile(slowest, 90);
    if (all) rec.extra["gpus"] = e->devices;
    if (!all && gpus.size() > 1) rec.extra["concurrent_gpus"] = static_cast<double>(gpus.size());
    // One node for the row when every lane agrees.
    const int numa = lanes[mine.front()].numa;
    const bool same = std::all_of(mine.begin(), mine.end(), [&](size_t i) { return lanes[i].numa == numa; });
    if (numa >= 0 && same) rec.extra["numa"] = numa;
    // Which placement the row measures: the GPU's own node (1) or another (0); pages label the row by it.
    if (!all) rec.extra["numa_local"] = spec.remote ? 0.0 : 1.0;
    const auto key = std::make_tuple(spec.name, g, spec.bytes);
    if (spec.impl == Impl::kPlain) e->plain[key] = rec.busbw_gbps;
    if (spec.impl == Impl::kCe && !spec.remote) {
      if (auto it = e->plain.find(key); it != e->plain.end() && it->second > 0) {
        rec.extra["vs_plain"] = rec.busbw_gbps / it->second;
      }
    }
    out[g] = rec;
  }
  return out;
}

Record hostIdentity(const HostSpec& spec) {
  Record r;
  r.suite = "host_copy";
  r.impl = implName(spec.impl);
  r.name = spec.name;
  r.src = spec.gpu;
  r.bytes = static_cast<double>(spec.bytes);
  return r;
}

// The set the plan puts `gpu` in ({gpu} when none; pageable copies always alone).
std::vector<int> setOf(const Env& e, const HostSpec& spec) {
  if (spec.gpu < 0) {
    // An all_* row: every GPU at once.
    std::vector<int> all;
    for (int g = 0; g < e.devices; ++g)
      all.push_back(g);
    return all;
  }
  if (spec.impl == Impl::kPageable) return {spec.gpu};
  for (const std::vector<int>& set : e.sets) {
    if (std::find(set.begin(), set.end(), spec.gpu) != set.end()) return set;
  }
  return {spec.gpu};
}

std::string rowKey(const HostSpec& spec, int gpu) {
  return std::string(implName(spec.impl)) + "/" + spec.name + "/" + std::to_string(gpu) + "/" +
         (spec.remote ? "remote" : "local") + "/" + std::to_string(spec.bytes);
}

void hostBenchmark(benchmark::State& state, const HostSpec& spec) {
  Record rec = hostIdentity(spec);
  for (auto _ : state) {
    (void)_;
    StatusOr<Env*> e = env();
    if (!e.isOk()) {
      finish(state, rec, e.status());
      break;
    }
    // Measured already, with the other GPUs of its set.
    if (auto it = (*e)->measured.find(rowKey(spec, spec.gpu)); it != (*e)->measured.end()) {
      const auto [st, row] = it->second;
      (*e)->measured.erase(it);
      if (!st.isOk()) {
        finish(state, rec, st);
        break;
      }
      state.SetIterationTime(row.time_us * 1e-6);
      bench::publish(state, row);
      continue;  // the one iteration ends by itself (only a skipped run may leave the loop early)
    }
    const std::vector<int> set = setOf(**e, spec);
    auto rows = measureHost(spec, set, [&](int g) {
      HostSpec x = spec;
      x.gpu = spec.gpu < 0 ? -1 : g;
      return hostIdentity(x);
    });
    if (!rows.isOk()) {
      for (int g : set) {
        if (g != spec.gpu) (*e)->measured[rowKey(spec, g)] = {rows.status(), Record{}};
      }
      finish(state, rec, rows.status());
      break;
    }
    for (const auto& [g, row] : *rows) {
      if (g != spec.gpu) (*e)->measured[rowKey(spec, g)] = {Status::ok(), row};
    }
    const Record& mine = rows->at(spec.gpu);
    state.SetIterationTime(mine.time_us * 1e-6);
    bench::publish(state, mine);
  }
}

Status measureLatency(benchmark::State& state, int gpu, Record& rec) {
  PEERLAB_ASSIGN_OR_RETURN(Env * e, env());
  if (gpu >= e->devices) return PEERLAB_UNAVAILABLE("GPU " + std::to_string(gpu) + " not visible");
  const GpuState& g = e->gpus[gpu];
  host::HostPlacement where;
  where.node = g.nodes.local;
  where.node_required = false;
  PEERLAB_ASSIGN_OR_RETURN(HostBuffer chain, host::allocHost(kChaseBytes, where));
  PEERLAB_RETURN_IF_ERROR(host::buildChase(chain->ptr, kChaseBytes, kChaseStride));
  std::vector<double> ns;
  for (int s = 0; s < 5; ++s) {
    PEERLAB_ASSIGN_OR_RETURN(double v, host::chaseLatency(chain->ptr, kChaseBytes, kChaseStride, kChaseLoads, gpu,
                                                          g.lane[0].get(), Deadline::afterMs(kWaitMs)));
    ns.push_back(v);
  }
  const double us = bench::median(ns) / 1e3;
  state.SetIterationTime(us * 1e-6);
  rec.time_us = us;
  rec.wrong = 0;
  rec.extra["samples"] = 5;
  rec.extra["loads"] = kChaseLoads;
  if (chain->node >= 0) rec.extra["numa"] = chain->node;
  return Status::ok();
}

void latencyBenchmark(benchmark::State& state, int gpu) {
  Record rec;
  rec.suite = "host_copy";
  rec.impl = "peerlab.sm";
  rec.name = "latency";
  rec.src = gpu;
  rec.bytes = 8;
  for (auto _ : state) {
    (void)_;
    Status st = measureLatency(state, gpu, rec);
    if (!st.isOk()) {
      finish(state, rec, st);
      break;
    }
    bench::publish(state, rec);
  }
}

// Device-local copy: one GPU's memory to itself by the copy engine, against the DRAM peak.
Status measureLocal(benchmark::State& state, int gpu, size_t bytes, Record& rec) {
  PEERLAB_ASSIGN_OR_RETURN(Env * e, env());
  if (gpu >= e->devices) return PEERLAB_UNAVAILABLE("GPU " + std::to_string(gpu) + " not visible");
  GpuState& g = e->gpus[gpu];
  void* src = g.dev[0]->ptr;
  void* dst = g.dev[1]->ptr;
  cudaStream_t s = g.lane[0].get();
  const uint64_t seed = patternSeed(e->run, gpu, gpu, hashName("device_local") ^ bytes);
  PEERLAB_RETURN_IF_ERROR(fillPattern(src, bytes, seed, s));
  PEERLAB_RETURN_IF_ERROR(poisonPattern(dst, bytes, seed, s));
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s)));
  PEERLAB_ASSIGN_OR_RETURN(PatternCheck warm, checkPattern(dst, bytes, seed, gpu, s, Deadline::afterMs(kWaitMs)));
  PEERLAB_RETURN_IF_ERROR(poisonPattern(dst, bytes, seed, s));
  bench::SampleSpec sample;
  sample.lanes = {{s, gpu}};
  sample.batch = std::clamp<size_t>((size_t{4} << 30) / bytes, 1, 64);
  sample.samples = 7;
  PEERLAB_ASSIGN_OR_RETURN(bench::Samples times, bench::timeBatches(sample, [&](size_t) {
                             return PEERLAB_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
                           }));
  PEERLAB_ASSIGN_OR_RETURN(PatternCheck timed, checkPattern(dst, bytes, seed, gpu, s, Deadline::afterMs(kWaitMs)));
  const double time_us = bench::median(times.slowest_us);
  state.SetIterationTime(time_us * 1e-6);
  rec.time_us = time_us;
  rec.algbw_gbps = static_cast<double>(bytes) / time_us / 1e3;
  rec.busbw_gbps = rec.algbw_gbps;
  rec.wrong = static_cast<double>(warm.wrong + timed.wrong);
  rec.extra["samples"] = sample.samples;
  rec.extra["batch"] = static_cast<double>(sample.batch);
  if (auto peak = host::memoryPeakGbps(gpu); peak.isOk()) {
    rec.extra["peak_gbps"] = *peak;
    rec.extra["mem_efficiency"] = 2 * rec.algbw_gbps / *peak;
  }
  return Status::ok();
}

void localBenchmark(benchmark::State& state, int gpu, size_t bytes) {
  Record rec;
  rec.suite = "host_copy";
  rec.impl = "peerlab.ce";
  rec.name = "device_local";
  rec.src = gpu;
  rec.dst = gpu;
  rec.bytes = static_cast<double>(bytes);
  for (auto _ : state) {
    (void)_;
    Status st = measureLocal(state, gpu, bytes, rec);
    if (!st.isOk()) {
      finish(state, rec, st);
      break;
    }
    bench::publish(state, rec);
  }
}

void configure(benchmark::internal::Benchmark* b) {
  b->Iterations(1)->UseManualTime()->Unit(benchmark::kMicrosecond);
}

// Registers the row when the plan runs it.
void registerHost(const HostSpec& spec) {
  const host_copy_suite::Kind kind{spec.impl, spec.name, spec.remote, static_cast<int64_t>(spec.bytes)};
  report::RowKey key;
  key.impl = implName(spec.impl);
  key.name = host_copy_suite::caseName(kind, spec.gpu >= 0);
  key.bytes = kind.bytes;
  key.gpu = spec.gpu;
  if (!bench::planned(key)) return;
  const std::string name = host_copy_suite::rowName(kind, spec.gpu);
  configure(benchmark::RegisterBenchmark(name.c_str(), [spec](benchmark::State& st) { hostBenchmark(st, spec); }));
}

void registerAll() {
  auto count = deviceCount();
  // Without a GPU, one row per kind still runs and reports why it was skipped.
  const int n = count.isOk() ? std::max(*count, 1) : 1;
  // With GPU sets (the plan's) one kind of row for every GPU in turn, so that the GPUs of a set meet it together;
  // otherwise GPU by GPU, so that a GPU's rows reuse its host buffers.
  const bool sets = !bench::plan().gpu_sets.empty();
  std::vector<HostSpec> kinds;
  for (const host_copy_suite::Kind& k : host_copy_suite::gpuKinds())
    kinds.push_back({k.impl, k.name, 0, k.remote, static_cast<size_t>(k.bytes)});
  auto reg = [](HostSpec spec, int g) {
    spec.gpu = g;
    registerHost(spec);
  };
  if (sets) {
    for (const HostSpec& kind : kinds)
      for (int g = 0; g < n; ++g)
        reg(kind, g);
  } else {
    for (int g = 0; g < n; ++g)
      for (const HostSpec& kind : kinds)
        reg(kind, g);
  }
  for (int g = 0; g < n; ++g) {
    report::RowKey lat;
    lat.impl = host_copy_suite::kLatencyImpl;
    lat.name = host_copy_suite::kLatencyName;
    lat.gpu = g;
    if (bench::planned(lat)) {
      configure(benchmark::RegisterBenchmark(host_copy_suite::latencyRowName(g).c_str(),
                                             [g](benchmark::State& st) { latencyBenchmark(st, g); }));
    }
    report::RowKey local;
    local.impl = host_copy_suite::kLocalImpl;
    local.name = host_copy_suite::kLocalName;
    local.bytes = host_copy_suite::kMaxBytes;
    local.gpu = g;
    if (bench::planned(local)) {
      configure(benchmark::RegisterBenchmark(host_copy_suite::localRowName(g).c_str(),
                                             [g](benchmark::State& st) { localBenchmark(st, g, kMaxBytes); }));
    }
  }
  for (const host_copy_suite::Kind& k : host_copy_suite::allKinds())
    registerHost({k.impl, k.name, -1, k.remote, static_cast<size_t>(k.bytes)});
}

PEERLAB_BENCH_REGISTER(host_copy, registerAll);

}  // namespace
}  // namespace peerlab
