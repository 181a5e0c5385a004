#pragma once
/// The byte layout of what two endpoints trade over the bootstrap (both sides run the same binary): fixed-width
/// little-endian fields appended in order, read back with bounds checks.

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace peerlab::transport::wire {

class Writer {
 public:
  template <class T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out_.insert(out_.end(), p, p + sizeof(T));
  }
  void bytes(const void* data, size_t n) {
    put<uint64_t>(n);
    const auto* p = static_cast<const uint8_t*>(data);
    out_.insert(out_.end(), p, p + n);
  }
  std::vector<uint8_t> take() { return std::move(out_); }

 private:
  std::vector<uint8_t> out_;
};

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& in) : in_(in) {}
  template <class T>
  bool get(T& v) {
    if (pos_ + sizeof(T) > in_.size()) return false;
    std::memcpy(&v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool bytes(std::vector<uint8_t>& v) {
    uint64_t n = 0;
    if (!get(n) || n > in_.size() - pos_) return false;
    v.assign(in_.begin() + static_cast<std::ptrdiff_t>(pos_), in_.begin() + static_cast<std::ptrdiff_t>(pos_ + n));
    pos_ += n;
    return true;
  }
  bool done() const { return pos_ == in_.size(); }

 private:
  const std::vector<uint8_t>& in_;
  size_t pos_ = 0;
};

}  // namespace peerlab::transport::wire
