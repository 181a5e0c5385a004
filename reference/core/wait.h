#pragma once
/// Host waits on device work with a deadline: stream operations cannot time out by themselves.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <string_view>
#include <vector>

#include "reference/core/deadline.h"
#include "reference/core/status.h"

namespace peerlab {

/// Polls `event` until it completes or `deadline` passes (`timeout` naming `what`). Spins briefly, then backs off.
Status waitEvent(cudaEvent_t event, Deadline deadline, std::string_view what);
/// Records an event on `stream` (on the stream's device) and waits for it with a deadline; the current device is kept.
Status waitStream(cudaStream_t stream, Deadline deadline, std::string_view what);

/// Teardown after a deadline passed with work still queued: freeing device or pinned memory (or disabling peer
/// access) synchronizes with the device, so destroying `owner` now would wait as long as the stuck work does. This
/// keeps `owner` alive until every stream in `streams` (which `owner` may own) has drained, then destroys it on a
/// background thread with `device` current, and returns at once. At process exit what is still held is left to the
/// driver (which reclaims it with the process) rather than waited for.
void releaseWhenIdle(std::shared_ptr<void> owner, std::vector<cudaStream_t> streams, int device);
/// How many owners releaseWhenIdle still holds.
size_t heldForRelease();

}  // namespace peerlab
