#pragma once
/// Traffic that wakes a GPU's PCIe link before health reads it: GPUs drop the link to a lower generation at idle, so
/// a link read at rest looks downtrained. Keeps host-to-device copies flowing while the read runs.

#include <string>

#include "harness/health/health.h"

namespace peerlab::health {

/// A hook for Monitor::sample: on each GPU, 64 MiB pinned host-to-device copies stay in flight (two at a time) from
/// before `read` starts until it returns, then the buffers are freed, every wait under a deadline. When CUDA cannot
/// run copies on the GPU, `read` runs at idle (the sample says so) and `*error` gets the reason.
TrafficHook copyTraffic(std::string* error = nullptr);

}  // namespace peerlab::health
