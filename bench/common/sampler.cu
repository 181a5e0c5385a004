#include "bench/common/sampler.h"

#include <algorithm>
#include <string>

#include "reference/core/check.h"
#include "reference/core/deadline.h"
#include "reference/core/device_time.cuh"
#include "reference/core/memory.h"
#include "reference/core/scoped.h"
#include "reference/core/wait.h"

namespace peerlab::bench {
namespace {

constexpr int64_t kWaitMs = 60000;
constexpr uint64_t kGateTimeoutNs = 10'000'000'000ull;

__global__ void gateKernel(const uint32_t* flag, uint32_t want, uint64_t timeout_ns, uint32_t* error) {
  if (!waitFlagGe(flag, want, timeout_ns)) *error = kDeviceTimeout;
}

// The gate's host words: [0] the flag, [1 + lane] the lane's error word. Grown on demand, never freed (a process
// runs its benchmarks one at a time).
struct Gate {
  PinnedBuffer words;
  size_t lanes = 0;
  uint32_t value = 0;
};

StatusOr<Gate*> gateFor(size_t lanes) {
  static Gate gate;
  if (gate.lanes < lanes) {
    PEERLAB_ASSIGN_OR_RETURN(PinnedBuffer w,
                             allocPinned(sizeof(uint32_t) * (1 + lanes), cudaHostAllocMapped | cudaHostAllocPortable));
    std::fill_n(w->as<uint32_t>(), 1 + lanes, 0u);
    w->as<uint32_t>()[0] = gate.value;
    gate.words = std::move(w);
    gate.lanes = lanes;
  }
  return &gate;
}

}  // namespace

StatusOr<Samples> timeBatches(const SampleSpec& spec, const std::function<Status(size_t lane)>& issue) {
  if (spec.lanes.empty() || spec.batch == 0 || spec.samples <= 0) {
    return PEERLAB_INVALID_ARGUMENT("timeBatches: no lanes, batch or samples");
  }
  const size_t n = spec.lanes.size();
  PEERLAB_ASSIGN_OR_RETURN(Gate * gate, gateFor(n));
  uint32_t* flag = gate->words->as<uint32_t>();
  std::vector<Event> start, stop;
  for (const Lane& l : spec.lanes) {
    PEERLAB_ASSIGN_OR_RETURN(Event a, createEvent(l.device, cudaEventDefault));
    PEERLAB_ASSIGN_OR_RETURN(Event b, createEvent(l.device, cudaEventDefault));
    start.push_back(std::move(a));
    stop.push_back(std::move(b));
  }
  Samples out;
  out.lane_us.resize(n);
  const int most = std::max(spec.samples, spec.max_samples);
  for (int s = 0; s < most; ++s) {
    if (s >= spec.samples && relativeSpread(out.slowest_us) <= spec.settle_spread) break;
    if (spec.min_samples > 0 && s >= spec.min_samples && s < spec.samples &&
        relativeSpread(out.slowest_us) <= spec.quiet_spread) {
      break;
    }
    const uint32_t want = ++gate->value;
    // Opens the gate on every exit, so an error never leaves a gate kernel spinning.
    struct Opener {
      uint32_t* flag;
      uint32_t want;
      ~Opener() { __atomic_store_n(flag, want, __ATOMIC_RELEASE); }
    } opener{flag, want};
    for (size_t i = 0; i < n; ++i) {
      const Lane& l = spec.lanes[i];
      PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(l.device));
      if (spec.gated) {
        flag[1 + i] = 0;
        gateKernel<<<1, 1, 0, l.stream>>>(flag, want, kGateTimeoutNs, flag + 1 + i);
        PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA_LAUNCH("gateKernel"));
      }
      PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaEventRecord(start[i].get(), l.stream)));
    }
    for (size_t k = 0; k < spec.batch; ++k) {
      for (size_t i = 0; i < n; ++i)
        PEERLAB_RETURN_IF_ERROR(issue(i));
    }
    for (size_t i = 0; i < n; ++i) {
      PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(spec.lanes[i].device));
      PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaEventRecord(stop[i].get(), spec.lanes[i].stream)));
    }
    __atomic_store_n(flag, want, __ATOMIC_RELEASE);
    double slowest = 0;
    for (size_t i = 0; i < n; ++i) {
      PEERLAB_RETURN_IF_ERROR(waitEvent(stop[i].get(), Deadline::afterMs(kWaitMs), "timed batch"));
      if (spec.gated && flag[1 + i] != kDeviceOk) {
        return PEERLAB_TIMEOUT("gate kernel on device " + std::to_string(spec.lanes[i].device) + " timed out");
      }
      float ms = 0;
      PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaEventElapsedTime(&ms, start[i].get(), stop[i].get())));
      const double us = 1e3 * ms / static_cast<double>(spec.batch);
      out.lane_us[i].push_back(us);
      slowest = std::max(slowest, us);
    }
    out.slowest_us.push_back(slowest);
  }
  return out;
}

double relativeSpread(const std::vector<double>& us) {
  if (us.size() < 2) return 0;
  std::vector<double> v = us;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    const double pos = q * static_cast<double>(v.size() - 1);
    const size_t lo = static_cast<size_t>(pos);
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
  };
  const double median = at(0.5);
  return median > 0 ? (at(0.9) - at(0.1)) / median : 0;
}

}  // namespace peerlab::bench
