#include "reference/transport/completion.h"

#include <cuda.h>

#include <atomic>

#include "reference/core/check.h"
#include "reference/core/scoped.h"

namespace peerlab::transport {

StatusOr<StreamCompletion> StreamCompletion::create(Endpoint& endpoint, int device) {
  StreamCompletion c;
  c.endpoint_ = &endpoint;
  c.device_ = device;
  PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(device));
  PEERLAB_ASSIGN_OR_RETURN(c.word_, allocPinned(sizeof(uint32_t), cudaHostAllocMapped | cudaHostAllocPortable));
  *c.word_->as<volatile uint32_t>() = static_cast<uint32_t>(endpoint.completedPrefix());
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaHostGetDevicePointer(&c.device_word_, c.word_->ptr, 0)));
  auto* word = c.word_->as<uint32_t>();
  endpoint.onPrefix([word](uint64_t prefix) {
    // The stream reads the word over PCIe: a plain store after the transfer's completion was observed.
    std::atomic_thread_fence(std::memory_order_release);
    *reinterpret_cast<volatile uint32_t*>(word) = static_cast<uint32_t>(prefix);
  });
  return c;
}

StreamCompletion::~StreamCompletion() {
  if (endpoint_ && word_) endpoint_->onPrefix(nullptr);
}

Status StreamCompletion::enqueueWait(Ticket ticket, cudaStream_t stream) {
  if (!endpoint_) return PEERLAB_INTERNAL("StreamCompletion: moved from");
  if (ticket == 0 || ticket > UINT32_MAX) {
    return PEERLAB_INVALID_ARGUMENT("StreamCompletion: ticket " + std::to_string(ticket) + " out of range");
  }
  PEERLAB_RETURN_IF_ERROR(endpoint_->watch(ticket));
  PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(device_));
  return PEERLAB_CU(cuStreamWaitValue32, reinterpret_cast<CUstream>(stream),
                    reinterpret_cast<CUdeviceptr>(device_word_), static_cast<uint32_t>(ticket),
                    CU_STREAM_WAIT_VALUE_GEQ);
}

uint32_t StreamCompletion::published() const {
  return word_ ? *word_->as<volatile uint32_t>() : 0;
}

}  // namespace peerlab::transport
