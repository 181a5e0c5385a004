#include "harness/launch/pair_rounds.h"

#include <cstring>
#include <set>
#include <vector>

namespace peerlab::launch {

std::string formatPairRounds(const PairRoundList& rounds) {
  std::string out;
  for (size_t r = 0; r < rounds.size(); ++r) {
    if (r > 0) out += ';';
    for (size_t p = 0; p < rounds[r].size(); ++p) {
      if (p > 0) out += ',';
      out += std::to_string(rounds[r][p].first) + "-" + std::to_string(rounds[r][p].second);
    }
  }
  return out;
}

namespace {

bool parseOrdinal(std::string_view s, int& out) {
  if (s.empty() || s.size() > 4) return false;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  out = v;
  return v < kMaxRoundGpus;
}

std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    const size_t at = text.find(sep, start);
    out.push_back(text.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start));
    if (at == std::string_view::npos) break;
    start = at + 1;
  }
  return out;
}

}  // namespace

StatusOr<PairRoundList> parsePairRounds(std::string_view text) {
  PairRoundList rounds;
  if (text.empty()) return PEERLAB_INVALID_ARGUMENT("no pair rounds (expected e.g. \"0-1,2-3;1-0,3-2\")");
  if (text.size() > 1'000'000) return PEERLAB_INVALID_ARGUMENT("pair rounds: longer than 1,000,000 characters");
  for (std::string_view round : split(text, ';')) {
    std::vector<OrderedPair> pairs;
    for (std::string_view item : split(round, ',')) {
      const size_t dash = item.find('-');
      int a = 0, b = 0;
      if (dash == std::string_view::npos || !parseOrdinal(item.substr(0, dash), a) ||
          !parseOrdinal(item.substr(dash + 1), b)) {
        return PEERLAB_INVALID_ARGUMENT("pair rounds: \"" + std::string(item.substr(0, 40)) +
                                        "\" is not SRC-DST with GPU ordinals below " + std::to_string(kMaxRoundGpus));
      }
      pairs.emplace_back(a, b);
    }
    rounds.push_back(std::move(pairs));
  }
  PEERLAB_RETURN_IF_ERROR(checkPairRounds(rounds));
  return rounds;
}

Status checkPairRounds(const PairRoundList& rounds, int max_gpus) {
  if (rounds.empty()) return PEERLAB_INVALID_ARGUMENT("no pair rounds (expected e.g. \"0-1,2-3;1-0,3-2\")");
  std::set<OrderedPair> seen;
  for (size_t r = 0; r < rounds.size(); ++r) {
    if (rounds[r].empty()) return PEERLAB_INVALID_ARGUMENT("pair rounds: round " + std::to_string(r + 1) + " is empty");
    std::set<int> busy;
    for (const auto& [a, b] : rounds[r]) {
      const std::string name = std::to_string(a) + "-" + std::to_string(b);
      if (a < 0 || b < 0 || a >= max_gpus || b >= max_gpus) {
        return PEERLAB_INVALID_ARGUMENT("pair rounds: " + name + " names a GPU outside 0.." +
                                        std::to_string(max_gpus - 1));
      }
      if (a == b) return PEERLAB_INVALID_ARGUMENT("pair rounds: " + name + " pairs a GPU with itself");
      for (int g : {a, b}) {
        if (!busy.insert(g).second) {
          return PEERLAB_INVALID_ARGUMENT("pair rounds: round " + std::to_string(r + 1) + " has GPU " +
                                          std::to_string(g) + " in two pairs (" + name + ")");
        }
      }
      if (!seen.insert({a, b}).second) return PEERLAB_INVALID_ARGUMENT("pair rounds: " + name + " is in two rounds");
    }
  }
  return Status::ok();
}

StatusOr<std::unique_ptr<PairBootstrap>> PairBootstrap::create(Bootstrap& parent, int first, int second) {
  const int n = parent.size();
  if (first < 0 || second < 0 || first >= n || second >= n || first == second) {
    return PEERLAB_INVALID_ARGUMENT("pair bootstrap: ranks " + std::to_string(first) + " and " +
                                    std::to_string(second) + " are not two ranks of a job of " + std::to_string(n));
  }
  const int me = parent.rank() == first ? 0 : parent.rank() == second ? 1 : -1;
  if (me < 0) {
    return PEERLAB_INVALID_ARGUMENT("pair bootstrap: rank " + std::to_string(parent.rank()) + " is not in the pair " +
                                    std::to_string(first) + "-" + std::to_string(second));
  }
  return std::unique_ptr<PairBootstrap>(new PairBootstrap(parent, first, second, me));
}

StatusOr<int> PairBootstrap::parentRank(int peer, const char* what) const {
  if (peer != 0 && peer != 1) {
    return PEERLAB_INVALID_ARGUMENT(std::string(what) + ": rank " + std::to_string(peer) + " of a pair (0 or 1)");
  }
  return ranks_[peer];
}

Status PairBootstrap::allgather(const void* send, void* recv, size_t bytes, Deadline deadline) {
  if (bytes > 0 && (send == nullptr || recv == nullptr)) {
    return PEERLAB_INVALID_ARGUMENT("pair allgather: null buffer for " + std::to_string(bytes) + " bytes");
  }
  auto* out = static_cast<char*>(recv);
  if (bytes > 0) std::memmove(out + static_cast<size_t>(me_) * bytes, send, bytes);
  const int other = ranks_[1 - me_];
  // A one-byte token stands in for an empty contribution; the first rank sends first, so neither waits on the other.
  const char token = 1;
  const void* mine = bytes > 0 ? static_cast<const void*>(out + static_cast<size_t>(me_) * bytes) : &token;
  const size_t n = bytes > 0 ? bytes : 1;
  std::vector<char> theirs(n);
  if (me_ == 0) {
    PEERLAB_RETURN_IF_ERROR(parent_.send(other, mine, n, deadline).withContext("pair allgather"));
    PEERLAB_RETURN_IF_ERROR(parent_.recv(other, theirs.data(), n, deadline).withContext("pair allgather"));
  } else {
    PEERLAB_RETURN_IF_ERROR(parent_.recv(other, theirs.data(), n, deadline).withContext("pair allgather"));
    PEERLAB_RETURN_IF_ERROR(parent_.send(other, mine, n, deadline).withContext("pair allgather"));
  }
  if (bytes > 0) std::memcpy(out + static_cast<size_t>(1 - me_) * bytes, theirs.data(), bytes);
  return Status::ok();
}

Status PairBootstrap::barrier(Deadline deadline) {
  return allgather(nullptr, nullptr, 0, deadline).withContext("pair barrier");
}

Status PairBootstrap::send(int peer, const void* data, size_t bytes, Deadline deadline) {
  PEERLAB_ASSIGN_OR_RETURN(int p, parentRank(peer, "pair send"));
  return parent_.send(p, data, bytes, deadline);
}

Status PairBootstrap::recv(int peer, void* data, size_t bytes, Deadline deadline) {
  PEERLAB_ASSIGN_OR_RETURN(int p, parentRank(peer, "pair recv"));
  return parent_.recv(p, data, bytes, deadline);
}

Status PairBootstrap::sendFds(int peer, const int* fds, size_t count, Deadline deadline) {
  PEERLAB_ASSIGN_OR_RETURN(int p, parentRank(peer, "pair sendFds"));
  return parent_.sendFds(p, fds, count, deadline);
}

Status PairBootstrap::recvFds(int peer, int* fds, size_t count, Deadline deadline) {
  PEERLAB_ASSIGN_OR_RETURN(int p, parentRank(peer, "pair recvFds"));
  return parent_.recvFds(p, fds, count, deadline);
}

void PairBootstrap::abort(std::string_view why) noexcept {
  parent_.abort(why);
}

}  // namespace peerlab::launch
