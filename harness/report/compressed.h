// gzip (RFC 1952) for run files. Committed runs may be stored compressed (`.json.gz`, reports/README.md); the one
// run-file reader recognizes the gzip magic and inflates with a bound on the output, so that a small file cannot
// expand past what a run file may hold.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "reference/core/status.h"

namespace peerlab::report {

/// True when `bytes` starts with the gzip magic (1f 8b).
bool isGzip(std::string_view bytes);
/// Whether this peerlab was built with zlib (without it, gzipped run files are refused with a clear error).
bool haveGzip();
/// The inflated content of one or more concatenated gzip members. `invalid_argument` when the data is not gzip, is
/// corrupt or truncated, or would inflate past `max_bytes`; `unavailable` when built without zlib.
StatusOr<std::string> gunzip(std::string_view bytes, size_t max_bytes);
/// `text` as one gzip member (best compression). `unavailable` when built without zlib.
StatusOr<std::string> gzip(std::string_view text);

}  // namespace peerlab::report
