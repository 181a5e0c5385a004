#include "harness/watchdog/probe_protocol.h"

#include <cstring>

namespace peerlab::probe {

namespace {

constexpr size_t kMaxString = 4096;

class Writer {
 public:
  explicit Writer(MessageType type) : type_(type) { bytes_.resize(kFrameHeaderBytes); }

  void u8(uint8_t v) { bytes_.push_back(v); }
  void u16(uint16_t v) { raw(&v, sizeof(v)); }
  void u32(uint32_t v) { raw(&v, sizeof(v)); }
  void i32(int32_t v) { raw(&v, sizeof(v)); }
  void u64(uint64_t v) { raw(&v, sizeof(v)); }
  void flag(bool v) { u8(v ? 1 : 0); }
  void str(std::string_view s) {
    if (s.size() > kMaxString) s = s.substr(0, kMaxString);
    u16(static_cast<uint16_t>(s.size()));
    raw(s.data(), s.size());
  }
  void raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    bytes_.insert(bytes_.end(), b, b + n);
  }

  std::vector<uint8_t> finish() {
    const uint32_t magic = kProtocolMagic;
    const uint16_t version = kProtocolVersion;
    const uint16_t type = static_cast<uint16_t>(type_);
    const uint32_t length = static_cast<uint32_t>(bytes_.size() - kFrameHeaderBytes);
    const uint32_t sum = fnv1a32(std::span<const uint8_t>(bytes_).subspan(kFrameHeaderBytes));
    std::memcpy(bytes_.data() + 0, &magic, 4);
    std::memcpy(bytes_.data() + 4, &version, 2);
    std::memcpy(bytes_.data() + 6, &type, 2);
    std::memcpy(bytes_.data() + 8, &length, 4);
    std::memcpy(bytes_.data() + 12, &sum, 4);
    return std::move(bytes_);
  }

 private:
  MessageType type_;
  std::vector<uint8_t> bytes_;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> payload) : p_(payload) {}

  bool u8(uint8_t& v) { return raw(&v, 1); }
  bool u16(uint16_t& v) { return raw(&v, 2); }
  bool u32(uint32_t& v) { return raw(&v, 4); }
  bool i32(int32_t& v) { return raw(&v, 4); }
  bool u64(uint64_t& v) { return raw(&v, 8); }
  bool flag(bool& v) {
    uint8_t b = 0;
    if (!u8(b) || b > 1) return fail("flag byte is not 0 or 1");
    v = b != 0;
    return true;
  }
  bool str(std::string& s) {
    uint16_t n = 0;
    if (!u16(n)) return false;
    if (n > kMaxString) return fail("string longer than " + std::to_string(kMaxString));
    if (pos_ + n > p_.size()) return fail("truncated payload");
    s.assign(reinterpret_cast<const char*>(p_.data() + pos_), n);
    pos_ += n;
    return true;
  }
  bool raw(void* out, size_t n) {
    if (pos_ + n > p_.size()) return fail("truncated payload");
    std::memcpy(out, p_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool fail(std::string why) {
    if (error_.empty()) error_ = std::move(why);
    return false;
  }
  bool done() const { return pos_ == p_.size(); }
  const std::string& error() const { return error_; }

 private:
  std::span<const uint8_t> p_;
  size_t pos_ = 0;
  std::string error_;
};

template <class E>
bool readEnum(Reader& r, E& out, uint8_t limit, const char* what) {
  uint8_t v = 0;
  if (!r.u8(v)) return false;
  if (v >= limit) return r.fail(std::string(what) + " " + std::to_string(v) + " out of range");
  out = static_cast<E>(v);
  return true;
}

void writeExports(Writer& w, const Exports& e) {
  w.u32(static_cast<uint32_t>(e.devices.size()));
  for (const DeviceExport& d : e.devices) {
    w.flag(d.legacy_ok);
    w.raw(d.legacy_handle.data(), d.legacy_handle.size());
    w.str(d.legacy_error);
    w.flag(d.vmm_ok);
    w.u64(d.vmm_bytes);
    w.str(d.vmm_error);
  }
}

bool readExports(Reader& r, Exports& e) {
  uint32_t n = 0;
  if (!r.u32(n)) return false;
  if (n > kMaxGpus) return r.fail("device count " + std::to_string(n) + " out of range");
  e.devices.resize(n);
  for (DeviceExport& d : e.devices) {
    if (!r.flag(d.legacy_ok) || !r.raw(d.legacy_handle.data(), d.legacy_handle.size()) || !r.str(d.legacy_error) ||
        !r.flag(d.vmm_ok) || !r.u64(d.vmm_bytes) || !r.str(d.vmm_error)) {
      return false;
    }
  }
  return true;
}

bool readInventory(Reader& r, Inventory& inv) {
  int32_t driver = 0, runtime = 0;
  uint32_t n = 0;
  if (!r.str(inv.error) || !r.i32(driver) || !r.i32(runtime) || !r.str(inv.driver_release) || !r.u32(n)) return false;
  if (n > kMaxGpus) return r.fail("GPU count " + std::to_string(n) + " out of range");
  inv.driver_api = driver;
  inv.runtime_api = runtime;
  inv.gpus.resize(n);
  for (GpuInfo& g : inv.gpus) {
    int32_t ordinal = 0, major = 0, minor = 0, sms = 0;
    if (!r.i32(ordinal) || !r.str(g.uuid) || !r.str(g.bus_id) || !r.str(g.name) || !r.i32(major) || !r.i32(minor) ||
        !r.i32(sms) || !r.u64(g.total_memory) || !r.flag(g.vmm) || !r.flag(g.posix_fd) || !r.flag(g.ipc_event)) {
      return false;
    }
    g.ordinal = ordinal;
    g.cc_major = major;
    g.cc_minor = minor;
    g.sm_count = sms;
  }
  const size_t nn = static_cast<size_t>(n) * n;
  inv.can_access.resize(nn);
  inv.native_atomic.resize(nn);
  for (auto& v : inv.can_access) {
    bool b = false;
    if (!r.flag(b)) return false;
    v = b;
  }
  for (auto& v : inv.native_atomic) {
    bool b = false;
    if (!r.flag(b)) return false;
    v = b;
  }
  return true;
}

bool readCell(Reader& r, CellSpec& c) {
  int32_t src = 0, dst = 0;
  if (!r.u32(c.id) || !readEnum(r, c.method, kMethodCount, "method") || !r.i32(src) || !r.i32(dst) || !r.u64(c.bytes) ||
      !r.u64(c.seed)) {
    return false;
  }
  if (src < 0 || dst < 0 || src >= kMaxGpus || dst >= kMaxGpus) return r.fail("cell GPU ordinal out of range");
  c.src = src;
  c.dst = dst;
  return true;
}

}  // namespace

uint32_t fnv1a32(std::span<const uint8_t> bytes) {
  uint32_t h = 2166136261u;
  for (uint8_t b : bytes) {
    h ^= b;
    h *= 16777619u;
  }
  return h;
}

std::string_view messageTypeName(MessageType t) {
  switch (t) {
    case MessageType::kInventory:
      return "inventory";
    case MessageType::kSetup:
      return "setup";
    case MessageType::kReady:
      return "ready";
    case MessageType::kImport:
      return "import";
    case MessageType::kRun:
      return "run";
    case MessageType::kCellDone:
      return "cell_done";
    case MessageType::kBatchDone:
      return "batch_done";
    case MessageType::kFatal:
      return "fatal";
    case MessageType::kQuit:
      return "quit";
  }
  return "unknown";
}

std::vector<uint8_t> encode(const Inventory& inv) {
  Writer w(MessageType::kInventory);
  w.str(inv.error);
  w.i32(inv.driver_api);
  w.i32(inv.runtime_api);
  w.str(inv.driver_release);
  const size_t n = inv.gpus.size();
  w.u32(static_cast<uint32_t>(n));
  for (const GpuInfo& g : inv.gpus) {
    w.i32(g.ordinal);
    w.str(g.uuid);
    w.str(g.bus_id);
    w.str(g.name);
    w.i32(g.cc_major);
    w.i32(g.cc_minor);
    w.i32(g.sm_count);
    w.u64(g.total_memory);
    w.flag(g.vmm);
    w.flag(g.posix_fd);
    w.flag(g.ipc_event);
  }
  for (size_t i = 0; i < n * n; ++i)
    w.flag(i < inv.can_access.size() && inv.can_access[i] != 0);
  for (size_t i = 0; i < n * n; ++i)
    w.flag(i < inv.native_atomic.size() && inv.native_atomic[i] != 0);
  return w.finish();
}

std::vector<uint8_t> encode(const SetupRequest& req) {
  Writer w(MessageType::kSetup);
  w.u8(static_cast<uint8_t>(req.role));
  w.u64(req.max_bytes);
  w.u32(req.timeout_ms);
  w.flag(req.exports);
  return w.finish();
}

std::vector<uint8_t> encode(const ReadyReport& ready) {
  Writer w(MessageType::kReady);
  w.u8(static_cast<uint8_t>(ready.role));
  w.str(ready.error);
  w.u32(static_cast<uint32_t>(ready.timings.size()));
  for (const Timing& t : ready.timings) {
    w.str(t.name);
    w.u64(t.us);
  }
  writeExports(w, ready.exports);
  return w.finish();
}

std::vector<uint8_t> encode(const Exports& exports) {
  Writer w(MessageType::kImport);
  writeExports(w, exports);
  return w.finish();
}

std::vector<uint8_t> encode(const RunRequest& req) {
  Writer w(MessageType::kRun);
  w.u8(static_cast<uint8_t>(req.phase));
  w.u32(req.timeout_ms);
  w.u32(static_cast<uint32_t>(req.cells.size()));
  for (const CellSpec& c : req.cells) {
    w.u32(c.id);
    w.u8(static_cast<uint8_t>(c.method));
    w.i32(c.src);
    w.i32(c.dst);
    w.u64(c.bytes);
    w.u64(c.seed);
  }
  return w.finish();
}

std::vector<uint8_t> encode(const CellResult& r) {
  Writer w(MessageType::kCellDone);
  w.u32(r.id);
  w.u64(r.seed);
  w.u8(static_cast<uint8_t>(r.verdict));
  w.u8(static_cast<uint8_t>(r.path));
  w.u64(r.wrong);
  w.u64(r.words);
  w.u64(r.first_bad);
  w.u64(r.time_us);
  w.str(r.error);
  return w.finish();
}

std::vector<uint8_t> encode(const BatchDone& done) {
  Writer w(MessageType::kBatchDone);
  w.str(done.fatal);
  return w.finish();
}

std::vector<uint8_t> encode(const Fatal& fatal) {
  Writer w(MessageType::kFatal);
  w.str(fatal.reason);
  return w.finish();
}

std::vector<uint8_t> encode(const Quit&) {
  Writer w(MessageType::kQuit);
  return w.finish();
}

StatusOr<Decoded> decode(std::span<const uint8_t> frame) {
  auto bad = [](const std::string& why) { return PEERLAB_INVALID_ARGUMENT("bad probe message: " + why); };
  if (frame.size() < kFrameHeaderBytes) {
    return bad(std::to_string(frame.size()) + " bytes, shorter than the " + std::to_string(kFrameHeaderBytes) +
               "-byte header");
  }
  if (frame.size() > kMaxFrameBytes) return bad(std::to_string(frame.size()) + " bytes, larger than the limit");
  uint32_t magic = 0, length = 0, sum = 0;
  uint16_t version = 0, type = 0;
  std::memcpy(&magic, frame.data() + 0, 4);
  std::memcpy(&version, frame.data() + 4, 2);
  std::memcpy(&type, frame.data() + 6, 2);
  std::memcpy(&length, frame.data() + 8, 4);
  std::memcpy(&sum, frame.data() + 12, 4);
  if (magic != kProtocolMagic) return bad("wrong magic (not a peerlab probe frame)");
  if (version != kProtocolVersion) {
    return bad("protocol version " + std::to_string(version) + ", expected " + std::to_string(kProtocolVersion));
  }
  if (length != frame.size() - kFrameHeaderBytes) {
    return bad("payload length " + std::to_string(length) + " does not match the frame's " +
               std::to_string(frame.size() - kFrameHeaderBytes) + " bytes");
  }
  const auto payload = frame.subspan(kFrameHeaderBytes);
  if (fnv1a32(payload) != sum) return bad("checksum mismatch");

  Reader r(payload);
  Decoded out;
  bool ok = false;
  switch (static_cast<MessageType>(type)) {
    case MessageType::kInventory: {
      ok = readInventory(r, out.inventory);
      break;
    }
    case MessageType::kSetup: {
      SetupRequest& req = out.setup;
      ok = readEnum(r, req.role, 2, "role") && r.u64(req.max_bytes) && r.u32(req.timeout_ms) && r.flag(req.exports);
      break;
    }
    case MessageType::kReady: {
      ReadyReport& ready = out.ready;
      uint32_t n = 0;
      ok = readEnum(r, ready.role, 2, "role") && r.str(ready.error) && r.u32(n);
      if (ok && n > 256) ok = r.fail("timing count out of range");
      for (uint32_t i = 0; ok && i < n; ++i) {
        Timing t;
        ok = r.str(t.name) && r.u64(t.us);
        ready.timings.push_back(std::move(t));
      }
      ok = ok && readExports(r, ready.exports);
      break;
    }
    case MessageType::kImport: {
      ok = readExports(r, out.exports);
      break;
    }
    case MessageType::kRun: {
      RunRequest& req = out.run;
      uint32_t n = 0;
      ok = readEnum(r, req.phase, 4, "phase") && r.u32(req.timeout_ms) && r.u32(n);
      if (ok && n > kMaxCellsPerBatch) ok = r.fail("cell count " + std::to_string(n) + " out of range");
      for (uint32_t i = 0; ok && i < n; ++i) {
        CellSpec c;
        ok = readCell(r, c);
        req.cells.push_back(c);
      }
      break;
    }
    case MessageType::kCellDone: {
      CellResult& c = out.cell;
      ok = r.u32(c.id) && r.u64(c.seed) && readEnum(r, c.verdict, 5, "verdict") && readEnum(r, c.path, 4, "path") &&
           r.u64(c.wrong) && r.u64(c.words) && r.u64(c.first_bad) && r.u64(c.time_us) && r.str(c.error);
      break;
    }
    case MessageType::kBatchDone: {
      ok = r.str(out.batch_done.fatal);
      break;
    }
    case MessageType::kFatal: {
      ok = r.str(out.fatal.reason);
      break;
    }
    case MessageType::kQuit:
      ok = true;
      break;
    default:
      return bad("unknown message type " + std::to_string(type));
  }
  if (!ok) return bad(std::string(messageTypeName(static_cast<MessageType>(type))) + ": " + r.error());
  if (!r.done()) return bad(std::string(messageTypeName(static_cast<MessageType>(type))) + ": trailing bytes");
  out.type = static_cast<MessageType>(type);
  return out;
}

}  // namespace peerlab::probe
