#pragma once
/// Fd: the owner of a POSIX file descriptor (closed on destruction), on Owned<Traits>.

#include <unistd.h>

#include "reference/core/owned.h"

namespace peerlab {

struct FdTraits {
  using Handle = int;
  static Handle null() noexcept { return -1; }
  static bool isNull(Handle h) noexcept { return h < 0; }
  static void destroy(Handle h) noexcept { (void)::close(h); }
};
using Fd = Owned<FdTraits>;

}  // namespace peerlab
