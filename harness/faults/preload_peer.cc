// Capability answers (lie) and peer enable faults (enable_error).
#include "harness/faults/preload_internal.h"

namespace peerlab::faults::preload {

void lieCanAccess(Layer layer, int* can_access, int device, int peer) {
  if (!engaged(FaultKind::kLie) || can_access == nullptr || device == peer) return;
  if (*can_access == 0)
    note("lie", format("can-access-peer %d->%d reported 1 (really 0, %s)", device, peer, layerName(layer)));
  *can_access = 1;
}

void lieP2PAttribute(Layer layer, int* value, int attribute, int src, int dst) {
  if (!engaged(FaultKind::kLie) || value == nullptr || src == dst) return;
  // Access supported (2), native atomics (3) and CUDA array access (4) have the same numbers in both APIs.
  if (attribute != 2 && attribute != 3 && attribute != 4) return;
  if (*value == 0) {
    note("lie", format("p2p attribute %d for %d->%d reported 1 (really 0, %s)", attribute, src, dst, layerName(layer)));
  }
  *value = 1;
}

int enablePeer(Layer layer, int current, int peer, const std::function<int()>& real) {
  const FaultSpec& spec = config().spec;
  if (engaged(FaultKind::kEnableError)) {
    bool match = true;
    if (spec.pair_a >= 0) {
      const bool forward = current == spec.pair_a && peer == spec.pair_b;
      const bool reverse = current == spec.pair_b && peer == spec.pair_a;
      match = spec.direction == Direction::kFirst    ? forward
              : spec.direction == Direction::kSecond ? reverse
                                                     : forward || reverse;
    } else if (spec.direction == Direction::kFirst) {
      match = current < peer;
    } else if (spec.direction == Direction::kSecond) {
      match = current > peer;
    }
    if (match && decide() >= 0) {
      if (spec.code == 704) {
        // "Already enabled" is reported after really enabling, so the state matches the answer.
        const int r = real();
        note("enable_error", format("enable %d->%d returned 704 (real result %d, access enabled, %s)", current, peer, r,
                                    layerName(layer)));
        return 704;
      }
      note("enable_error", format("enable %d->%d returned %d (%s)", current, peer, spec.code, layerName(layer)));
      return spec.code;
    }
    return real();
  }
  const int r = real();
  if (engaged(FaultKind::kLie) && r == 217) {
    note("lie", format("enable %d->%d reported success (really 217, %s)", current, peer, layerName(layer)));
    return 0;
  }
  return r;
}

}  // namespace peerlab::faults::preload
