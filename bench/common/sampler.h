#pragma once
/// The sample loop of a stream-timed benchmark, written once: per sample, each lane (a stream of some GPU) is held by
/// a gate kernel that spins on a host flag (with a %globaltimer deadline) while the whole batch is enqueued, then the
/// gate opens and CUDA events time the batch on every lane. nvbandwidth times its copies the same way, so the events
/// measure the GPU, not the host's enqueue rate. Work that blocks the host while it is enqueued (pageable copies)
/// must run ungated.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <vector>

#include "reference/core/status.h"

namespace peerlab::bench {

struct Lane {
  cudaStream_t stream = nullptr;
  int device = -1;  ///< the stream's device
};

struct SampleSpec {
  std::vector<Lane> lanes;
  size_t batch = 1;  ///< operations per lane per sample
  int samples = 5;
  bool gated = true;
  /// Up to this many samples in all (0: `samples`) while the spread of the slowest lane's times, (p90 - p10) /
  /// median, stays above `settle_spread`: a burst of interference from outside (another tenant of the PCIe switch, a
  /// busy host) then passes instead of deciding the median. A spread that persists stays in the numbers reported.
  int max_samples = 0;
  double settle_spread = 0.10;
  /// Where set (> 0): stop after this many samples already when their spread is at most `quiet_spread`.
  int min_samples = 0;
  double quiet_spread = 0.02;
};

struct Samples {
  std::vector<double> slowest_us;            ///< per sample: the slowest lane's time per operation
  std::vector<std::vector<double>> lane_us;  ///< per lane, per sample: time per operation
};

/// Runs `samples` batches (more, up to max_samples, while the times have not settled); `issue(lane)` enqueues one
/// operation on lanes[lane].stream (called batch times per lane, lanes interleaved). Every host wait has a deadline;
/// a gate that times out on the device fails the sample.
StatusOr<Samples> timeBatches(const SampleSpec& spec, const std::function<Status(size_t lane)>& issue);

/// (p90 - p10) / median of `us` (0 for fewer than 2 values).
double relativeSpread(const std::vector<double>& us);

}  // namespace peerlab::bench
