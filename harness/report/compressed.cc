#include "harness/report/compressed.h"

#include <algorithm>
#include <climits>
#include <cstdint>

#if PEERLAB_HAVE_ZLIB
#include <zlib.h>
#endif

namespace peerlab::report {

bool isGzip(std::string_view bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
         static_cast<unsigned char>(bytes[1]) == 0x8b;
}

#if PEERLAB_HAVE_ZLIB

bool haveGzip() {
  return true;
}

namespace {

// Owns one zlib stream; ends it on every path.
class Inflater {
 public:
  Inflater() = default;
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;
  ~Inflater() {
    if (open_) inflateEnd(&z_);
  }
  bool open() {
    // 16 + MAX_WBITS: a gzip header and trailer (CRC-32 and length checked by zlib).
    open_ = inflateInit2(&z_, 16 + MAX_WBITS) == Z_OK;
    return open_;
  }
  z_stream& stream() { return z_; }

 private:
  z_stream z_{};
  bool open_ = false;
};

}  // namespace

StatusOr<std::string> gunzip(std::string_view bytes, size_t max_bytes) {
  if (!isGzip(bytes)) return PEERLAB_INVALID_ARGUMENT("not gzip data");
  const std::string allowed = std::to_string(max_bytes >> 20) + " MiB allowed";
  std::string out;
  size_t at = 0;  // offset of the current member in `bytes`
  while (at < bytes.size()) {
    Inflater inf;
    if (!inf.open()) return PEERLAB_INTERNAL("zlib: cannot start inflating");
    z_stream& z = inf.stream();
    const std::string_view member = bytes.substr(at);
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(member.data()));
    z.avail_in = static_cast<uInt>(std::min<size_t>(member.size(), UINT_MAX));
    int rc = Z_OK;
    char chunk[1 << 16];
    while (rc != Z_STREAM_END) {
      z.next_out = reinterpret_cast<Bytef*>(chunk);
      z.avail_out = sizeof(chunk);
      rc = inflate(&z, Z_NO_FLUSH);
      if (rc != Z_OK && rc != Z_STREAM_END) {
        if (rc == Z_BUF_ERROR && z.avail_in == 0) return PEERLAB_INVALID_ARGUMENT("gzip data is truncated");
        return PEERLAB_INVALID_ARGUMENT(std::string("corrupt gzip data (") + (z.msg != nullptr ? z.msg : "zlib") + ")");
      }
      const size_t got = sizeof(chunk) - z.avail_out;
      if (out.size() + got > max_bytes) {
        return PEERLAB_INVALID_ARGUMENT("inflates past the " + allowed);
      }
      out.append(chunk, got);
      if (rc == Z_OK && got == 0 && z.avail_in == 0) return PEERLAB_INVALID_ARGUMENT("gzip data is truncated");
    }
    at += member.size() - z.avail_in;
    // Trailing zero padding after the last member (some writers pad) ends the data.
    if (at < bytes.size() && !isGzip(bytes.substr(at))) {
      if (std::all_of(bytes.begin() + static_cast<std::ptrdiff_t>(at), bytes.end(), [](char c) { return c == 0; }))
        break;
      return PEERLAB_INVALID_ARGUMENT("data after the gzip member is not gzip");
    }
  }
  return out;
}

StatusOr<std::string> gzip(std::string_view text) {
  z_stream z{};
  if (deflateInit2(&z, Z_BEST_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 9, Z_DEFAULT_STRATEGY) != Z_OK) {
    return PEERLAB_INTERNAL("zlib: cannot start deflating");
  }
  std::string out;
  out.resize(deflateBound(&z, static_cast<uLong>(text.size())));
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  const size_t n = out.size() - z.avail_out;
  deflateEnd(&z);
  if (rc != Z_STREAM_END) return PEERLAB_INTERNAL("zlib: deflate did not finish");
  out.resize(n);
  return out;
}

#else

bool haveGzip() {
  return false;
}

StatusOr<std::string> gunzip(std::string_view, size_t) {
  return PEERLAB_UNAVAILABLE(
      "gzip-compressed, and this peerlab was built without zlib (install zlib1g-dev and rebuild)");
}

StatusOr<std::string> gzip(std::string_view) {
  return PEERLAB_UNAVAILABLE("this peerlab was built without zlib (install zlib1g-dev and rebuild)");
}

#endif

}  // namespace peerlab::report
