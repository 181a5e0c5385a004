#pragma once
/// Ordered GPU pairs in rounds, and a two-rank view of a larger job. A two-sided benchmark covers many pairs in one
/// process of one rank per GPU: the pairs of a round run at once (each GPU in at most one pair), and the two ranks of
/// a pair talk through a PairBootstrap over the job's bootstrap, as a two-rank job of their own would.

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "reference/core/bootstrap.h"
#include "reference/core/status.h"

namespace peerlab::launch {

using OrderedPair = std::pair<int, int>;
using PairRoundList = std::vector<std::vector<OrderedPair>>;

/// Most GPUs a round may name (GPU ordinals are below it).
inline constexpr int kMaxRoundGpus = 1024;

/// "0-1,2-3;1-0,3-2": rounds separated by ';', the pairs of a round by ','.
std::string formatPairRounds(const PairRoundList& rounds);
/// Parses formatPairRounds' text (checkPairRounds' rules). `invalid_argument` names the entry.
StatusOr<PairRoundList> parsePairRounds(std::string_view text);
/// The rules of rounds, however they were written: `invalid_argument` for a GPU paired with itself, a GPU in two pairs
/// of one round, an ordered pair in two rounds, an empty list or round, or an ordinal outside 0 .. `max_gpus` - 1.
Status checkPairRounds(const PairRoundList& rounds, int max_gpus = kMaxRoundGpus);

/// Two ranks of `parent` (its ranks `first` and `second`; the calling rank is one of them) as a job of two: rank 0 is
/// `first`. Collectives run over the parent's point-to-point messages, so pairs of disjoint ranks use theirs at the
/// same time. abort() aborts the parent (every rank learns of it).
class PairBootstrap final : public Bootstrap {
 public:
  /// `invalid_argument` when the calling rank is neither, the two are equal or outside the parent.
  static StatusOr<std::unique_ptr<PairBootstrap>> create(Bootstrap& parent, int first, int second);

  int rank() const override { return me_; }
  int size() const override { return 2; }
  Status allgather(const void* send, void* recv, size_t bytes, Deadline deadline) override;
  Status barrier(Deadline deadline) override;
  Status send(int peer, const void* data, size_t bytes, Deadline deadline) override;
  Status recv(int peer, void* data, size_t bytes, Deadline deadline) override;
  Status sendFds(int peer, const int* fds, size_t count, Deadline deadline) override;
  Status recvFds(int peer, int* fds, size_t count, Deadline deadline) override;
  void abort(std::string_view why) noexcept override;
  std::string_view kind() const override { return parent_.kind(); }

 private:
  PairBootstrap(Bootstrap& parent, int first, int second, int me) : parent_(parent), ranks_{first, second}, me_(me) {}
  StatusOr<int> parentRank(int peer, const char* what) const;

  Bootstrap& parent_;
  int ranks_[2];
  int me_;
};

}  // namespace peerlab::launch
