#include "reference/alltoallv/moe/ll_layout.h"

#include "reference/alltoallv/layout.h"

namespace peerlab::alltoallv::moe {

std::string llShapeError(const LlShape& s) {
  if (s.ranks < 1 || s.ranks > kMaxRanks) return "ll: rank count " + std::to_string(s.ranks) + " out of range";
  if (s.experts < s.ranks || s.experts % s.ranks != 0) {
    return "ll: " + std::to_string(s.experts) + " experts do not split evenly over " + std::to_string(s.ranks) +
           " ranks";
  }
  if (s.experts > kLlMaxExperts) {
    return "ll: " + std::to_string(s.experts) + " experts, at most " + std::to_string(kLlMaxExperts);
  }
  if (s.top_k < 1 || s.top_k > kMaxTopK) {
    return "ll: top_k " + std::to_string(s.top_k) + " outside [1, " + std::to_string(kMaxTopK) + "]";
  }
  if (s.max_tokens < 1) return "ll: max tokens " + std::to_string(s.max_tokens) + " must be positive";
  if (s.capacity < 1) return "ll: expert capacity " + std::to_string(s.capacity) + " must be positive";
  if (s.tagged_max_tokens < 0) {
    return "ll: tagged_max_tokens " + std::to_string(s.tagged_max_tokens) + " must not be negative";
  }
  const int multiple = s.payload == LlPayload::kFp8 ? kFp8Group : 8;
  if (s.hidden <= 0 || s.hidden % multiple != 0) {
    return "ll: hidden size " + std::to_string(s.hidden) + " is not a multiple of " + std::to_string(multiple) +
           (s.payload == LlPayload::kFp8 ? " (fp8 scales cover 128 elements)" : "");
  }
  return {};
}

MoeTrafficBytes moeTrafficBytes(const int32_t* ids, int tokens, int top_k, int experts, int ranks, int rank,
                                uint64_t row_bytes) {
  MoeTrafficBytes b;
  const int per = experts / ranks;
  for (int t = 0; t < tokens; ++t) {
    uint32_t remote = 0;
    for (int j = 0; j < top_k; ++j) {
      const int e = ids[static_cast<int64_t>(t) * top_k + j];
      if (e < 0 || e >= experts) continue;
      b.logical += row_bytes;
      if (e / per != rank) remote |= 1u << (e / per);
    }
    b.nvlink += static_cast<uint64_t>(__builtin_popcount(remote)) * row_bytes;
  }
  return b;
}

void llClearTimes(LlKernelTimes* t) {
  for (int i = 0; i < kLlTimeSlots; ++i) {
    for (int j = 0; j < kLlStamps; ++j)
      t->dispatch[i][j] = t->combine[i][j] = 0;
    t->dispatch[i][kLlStampStart] = t->combine[i][kLlStampStart] = UINT64_MAX;
  }
}

std::vector<double> llKernelSpansUs(const LlKernelTimes& t, bool combine) {
  return llStampOffsetsUs(t, combine, kLlStampEnd);
}

std::vector<double> llStampOffsetsUs(const LlKernelTimes& t, bool combine, int stamp) {
  std::vector<double> us;
  if (stamp <= kLlStampStart || stamp >= kLlStamps) return us;
  for (int i = 0; i < kLlTimeSlots; ++i) {
    const uint64_t* s = combine ? t.combine[i] : t.dispatch[i];
    const uint64_t start = s[kLlStampStart];
    const uint64_t end = s[kLlStampEnd];
    // A whole call: started and ended; a stamp of it lies between the two.
    if (start == UINT64_MAX || end < start || s[stamp] < start || s[stamp] > end) continue;
    us.push_back(static_cast<double>(s[stamp] - start) / 1e3);
  }
  return us;
}

}  // namespace peerlab::alltoallv::moe
