#pragma once
/// The end of a transfer delivered into a CUDA stream: the endpoint's progress thread writes how far transfers have
/// finished (Endpoint::completedPrefix) into a word of mapped pinned memory, and the stream waits on that word with
/// cuStreamWaitValue32 (GEQ the transfer's ticket). GPU work enqueued after the wait runs once the transfer is done,
/// while the host thread that posted the transfer goes on without blocking.
///
/// The wait is a stream memory operation and can be captured into a CUDA graph (a memory-operation node). The value
/// it waits for is fixed at capture: a graph replayed for later transfers needs the node's value moved on
/// (cuGraphExecBatchMemOpNodeSetParams) or a graph captured per ticket. The post itself is a host call into the
/// library and is not capturable; it stays on the host.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "reference/core/memory.h"
#include "reference/core/status.h"
#include "reference/transport/transport.h"

namespace peerlab::transport {

class StreamCompletion {
 public:
  /// `endpoint` must have its progress thread (EndpointOptions::progress_thread) and outlive this object; `device`
  /// is the GPU whose streams wait.
  static StatusOr<StreamCompletion> create(Endpoint& endpoint, int device);
  StreamCompletion(StreamCompletion&&) noexcept = default;
  StreamCompletion& operator=(StreamCompletion&&) noexcept = default;
  ~StreamCompletion();

  /// Makes `stream` wait until transfer `ticket` finished; the progress thread watches the ticket from now on.
  /// Tickets are compared as 32-bit values: one completion serves 2^32 - 1 transfers.
  Status enqueueWait(Ticket ticket, cudaStream_t stream);
  /// The value the progress thread last published.
  uint32_t published() const;

 private:
  StreamCompletion() = default;
  Endpoint* endpoint_ = nullptr;
  PinnedBuffer word_;
  void* device_word_ = nullptr;
  int device_ = -1;
};

}  // namespace peerlab::transport
