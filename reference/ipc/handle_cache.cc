#include "reference/ipc/handle_cache.h"

namespace peerlab::ipc {

HandleCache makeHandleCache(const ImportOptions& options) {
  return HandleCache([options](const Descriptor& d, int fd) { return importBuffer(d, fd, options); });
}

}  // namespace peerlab::ipc
