#pragma once
/// The NCCL version of this process without linking NCCL: the library the process already has loaded (a benchmark
/// that links it), else libnccl.so.2 as the dynamic loader finds it, opened only to ask. Programs that run where NCCL
/// may be absent (the `peerlab` binary: health check, gate, probe worker) record the version this way.

#include <string>

namespace peerlab::nccl {

/// "2.28.3"; "none" when no libnccl.so.2 can be loaded; "unknown" when it has no ncclGetVersion or that fails.
std::string loadedVersionString();

}  // namespace peerlab::nccl
