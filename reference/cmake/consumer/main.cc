// Uses the installed headers and libraries: a Status round trip, and the pattern generator's host reference.
#include <cstdio>

#include "reference/core/status.h"
#include "reference/peer/peer.h"

int main() {
  peerlab::Status ok;
  peerlab::Status bad = PEERLAB_INTERNAL("consumer check");
  if (!ok.isOk() || bad.isOk() || bad.toString().find("consumer check") == std::string::npos) {
    std::fprintf(stderr, "peerlab::Status does not behave\n");
    return 1;
  }
  std::printf("peerlab consumer: %s\n", bad.toString().c_str());
  return 0;
}
