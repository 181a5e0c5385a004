#include "reference/peer/copy_plan.h"

#include <algorithm>
#include <charconv>
#include <string>

namespace peerlab::peer {

std::string_view copyPathName(CopyPath path) {
  switch (path) {
    case CopyPath::kAuto:
      return "auto";
    case CopyPath::kCopyEngine:
      return "ce";
    case CopyPath::kSmPull:
      return "sm_pull";
    case CopyPath::kSmPush:
      return "sm_push";
    case CopyPath::kStaged:
      return "staged";
  }
  return "unknown";
}

StatusOr<CopyPath> parseCopyPath(std::string_view name) {
  for (CopyPath p : {CopyPath::kAuto, CopyPath::kCopyEngine, CopyPath::kSmPull, CopyPath::kSmPush, CopyPath::kStaged}) {
    if (copyPathName(p) == name) return p;
  }
  return PEERLAB_INVALID_ARGUMENT("copy path '" + std::string(name) +
                                  "' is not one of auto, ce, sm_pull, sm_push, staged");
}

namespace {

std::string hexPointer(const void* p) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), reinterpret_cast<uintptr_t>(p), 16);
  return "0x" + std::string(buf, ec == std::errc() ? end : buf);
}

Status checkDevice(const char* which, int device, int device_count) {
  if (device < 0 || device >= device_count) {
    return PEERLAB_INVALID_ARGUMENT("copy: " + std::string(which) + " device " + std::to_string(device) +
                                    " is not a visible device (" + std::to_string(device_count) + " visible)");
  }
  return Status::ok();
}

}  // namespace

Status validateCopy(const CopyRequest& r, int device_count) {
  if (r.dst == nullptr) return PEERLAB_INVALID_ARGUMENT("copy: dst is null");
  if (r.src == nullptr) return PEERLAB_INVALID_ARGUMENT("copy: src is null");
  if (r.bytes == 0) return PEERLAB_INVALID_ARGUMENT("copy: bytes is 0 (nothing to copy)");
  PEERLAB_RETURN_IF_ERROR(checkDevice("src", r.src_device, device_count));
  PEERLAB_RETURN_IF_ERROR(checkDevice("dst", r.dst_device, device_count));
  const uintptr_t s = reinterpret_cast<uintptr_t>(r.src);
  const uintptr_t d = reinterpret_cast<uintptr_t>(r.dst);
  if (s + r.bytes < s) {
    return PEERLAB_INVALID_ARGUMENT("copy: src " + hexPointer(r.src) + " + " + std::to_string(r.bytes) +
                                    " bytes wraps around the address space");
  }
  if (d + r.bytes < d) {
    return PEERLAB_INVALID_ARGUMENT("copy: dst " + hexPointer(r.dst) + " + " + std::to_string(r.bytes) +
                                    " bytes wraps around the address space");
  }
  if (r.src_device == r.dst_device) {
    if (r.path != CopyPath::kAuto && r.path != CopyPath::kCopyEngine) {
      return PEERLAB_INVALID_ARGUMENT("copy: path " + std::string(copyPathName(r.path)) +
                                      " copies between two GPUs, but src and dst are both device " +
                                      std::to_string(r.src_device) + " (use ce or auto)");
    }
    if (s < d + r.bytes && d < s + r.bytes) {
      return PEERLAB_INVALID_ARGUMENT("copy: src " + hexPointer(r.src) + " and dst " + hexPointer(r.dst) +
                                      " ranges of " + std::to_string(r.bytes) + " bytes overlap on device " +
                                      std::to_string(r.src_device));
    }
  }
  return Status::ok();
}

StatusOr<CopyPath> selectPath(CopyPath requested, bool same_device, const Status& peer) {
  if (same_device) {
    if (requested == CopyPath::kAuto || requested == CopyPath::kCopyEngine) return CopyPath::kCopyEngine;
    return PEERLAB_INVALID_ARGUMENT("copy: path " + std::string(copyPathName(requested)) + " needs two devices");
  }
  if (requested == CopyPath::kStaged) return CopyPath::kStaged;
  if (peer.isOk()) return requested == CopyPath::kAuto ? CopyPath::kCopyEngine : requested;
  if (requested == CopyPath::kAuto && peer.code() == StatusCode::kUnavailable) return CopyPath::kStaged;
  return peer.withContext("copy path " + std::string(copyPathName(requested)) + " needs peer access");
}

StagedPlan stagedPlan(size_t bytes, size_t max_chunk) {
  constexpr size_t kPage = 4096;
  StagedPlan plan;
  if (bytes == 0) return plan;
  max_chunk = std::max(kPage, max_chunk / kPage * kPage);
  size_t chunk = bytes;
  if (bytes >= 4 * kMinStagingChunk) {
    const size_t quarter = (bytes + 3) / 4;
    chunk = std::max(kMinStagingChunk, (quarter + kPage - 1) / kPage * kPage);
  }
  chunk = std::min(chunk, max_chunk);
  plan.chunk = chunk;
  plan.count = (bytes + chunk - 1) / chunk;
  plan.last = bytes - (plan.count - 1) * chunk;
  return plan;
}

VectorSplit splitForVectors(uintptr_t dst, uintptr_t src, uint64_t bytes) {
  VectorSplit sp;
  const uint64_t head = (16 - (dst & 15)) & 15;
  if (head >= bytes || bytes - head < 16) {
    sp.head = bytes;
    return sp;
  }
  sp.head = head;
  sp.vecs = (bytes - head) / 16;
  sp.tail = (bytes - head) % 16;
  sp.shift = static_cast<uint32_t>((src + head) & 15);
  if (sp.shift != 0) {
    // The first aligned source block starts at src + head - shift: before src when head < shift.
    if (sp.head < sp.shift) {
      sp.head += 16;
      sp.vecs -= 1;
    }
    // The block after the last vector ends at src + head - shift + 16 * (vecs + 1): past the end unless
    // tail >= 16 - shift.
    if (sp.vecs > 0 && sp.tail < 16 - sp.shift) {
      sp.tail += 16;
      sp.vecs -= 1;
    }
  }
  if (sp.vecs == 0) {
    sp = VectorSplit{};
    sp.head = bytes;
  }
  return sp;
}

std::string_view smKernelName(SmKernel kernel) {
  switch (kernel) {
    case SmKernel::kAuto:
      return "auto";
    case SmKernel::kVector:
      return "vec";
    case SmKernel::kBulk:
      return "bulk";
  }
  return "unknown";
}

Status validateSmCopyConfig(const SmCopyConfig& c) {
  if (c.kernel != SmKernel::kAuto && c.kernel != SmKernel::kVector && c.kernel != SmKernel::kBulk) {
    return PEERLAB_INVALID_ARGUMENT("SM copy config: kernel is not auto, vec or bulk");
  }
  if (c.threads_per_block < 64 || c.threads_per_block > 1024 || c.threads_per_block % 32 != 0) {
    return PEERLAB_INVALID_ARGUMENT("SM copy config: threads=" + std::to_string(c.threads_per_block) +
                                    " is not a multiple of 32 in [64, 1024]");
  }
  if (std::find(std::begin(kSmCopyUnrolls), std::end(kSmCopyUnrolls), c.unroll) == std::end(kSmCopyUnrolls)) {
    return PEERLAB_INVALID_ARGUMENT("SM copy config: unroll=" + std::to_string(c.unroll) + " is not 2, 4 or 8");
  }
  if (c.blocks_per_sm < 1 || c.blocks_per_sm > 32) {
    return PEERLAB_INVALID_ARGUMENT("SM copy config: blocks_per_sm=" + std::to_string(c.blocks_per_sm) +
                                    " is not in [1, 32]");
  }
  if (c.hints < 0 || c.hints > 2) {
    return PEERLAB_INVALID_ARGUMENT("SM copy config: hints=" + std::to_string(c.hints) + " is not 0, 1 or 2");
  }
  if (c.sms < 0 || c.sms > 4096) {
    return PEERLAB_INVALID_ARGUMENT("SM copy config: sms=" + std::to_string(c.sms) + " is not in [0, 4096]");
  }
  if (c.bulk_kib < 1 || c.bulk_kib > 64) {
    return PEERLAB_INVALID_ARGUMENT("SM copy config: bulk_kib=" + std::to_string(c.bulk_kib) + " is not in [1, 64]");
  }
  if (c.bulk_stages < 2 || c.bulk_stages > kMaxBulkStages) {
    return PEERLAB_INVALID_ARGUMENT("SM copy config: bulk_stages=" + std::to_string(c.bulk_stages) + " is not in [2, " +
                                    std::to_string(kMaxBulkStages) + "]");
  }
  if (c.bulk_stages * c.bulk_kib > kMaxBulkSmemKib) {
    return PEERLAB_INVALID_ARGUMENT(
        "SM copy config: bulk_stages x bulk_kib = " + std::to_string(c.bulk_stages * c.bulk_kib) +
        " KiB of shared memory exceeds " + std::to_string(kMaxBulkSmemKib) + " KiB");
  }
  if (c.bulk_blocks_per_sm < 1 || c.bulk_blocks_per_sm > 8) {
    return PEERLAB_INVALID_ARGUMENT("SM copy config: bulk_blocks_per_sm=" + std::to_string(c.bulk_blocks_per_sm) +
                                    " is not in [1, 8]");
  }
  return Status::ok();
}

StatusOr<SmCopyConfig> parseSmCopyConfig(std::string_view text) {
  SmCopyConfig c;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    const std::string_view item = text.substr(pos, comma - pos);
    pos = comma + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return PEERLAB_INVALID_ARGUMENT("SM copy config: '" + std::string(item) + "' is not key=value");
    }
    const std::string_view key = item.substr(0, eq);
    const std::string_view value = item.substr(eq + 1);
    if (key == "kernel") {
      bool found = false;
      for (SmKernel k : {SmKernel::kAuto, SmKernel::kVector, SmKernel::kBulk}) {
        if (smKernelName(k) == value) {
          c.kernel = k;
          found = true;
        }
      }
      if (!found) {
        return PEERLAB_INVALID_ARGUMENT("SM copy config: kernel '" + std::string(value) +
                                        "' is not one of auto, vec, bulk");
      }
      continue;
    }
    int v = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (ec != std::errc() || end != value.data() + value.size()) {
      return PEERLAB_INVALID_ARGUMENT("SM copy config: value of '" + std::string(key) + "' is not an integer: '" +
                                      std::string(value) + "'");
    }
    if (key == "threads") {
      c.threads_per_block = v;
    } else if (key == "unroll") {
      c.unroll = v;
    } else if (key == "blocks_per_sm") {
      c.blocks_per_sm = v;
    } else if (key == "hints") {
      c.hints = v;
    } else if (key == "sms") {
      c.sms = v;
    } else if (key == "bulk_kib") {
      c.bulk_kib = v;
    } else if (key == "bulk_stages") {
      c.bulk_stages = v;
    } else if (key == "bulk_blocks_per_sm") {
      c.bulk_blocks_per_sm = v;
    } else {
      return PEERLAB_INVALID_ARGUMENT("SM copy config: unknown key '" + std::string(key) +
                                      "' (kernel, threads, unroll, blocks_per_sm, hints, sms, bulk_kib, bulk_stages, "
                                      "bulk_blocks_per_sm)");
    }
  }
  PEERLAB_RETURN_IF_ERROR(validateSmCopyConfig(c));
  return c;
}

std::string formatSmCopyConfig(const SmCopyConfig& c) {
  return "kernel=" + std::string(smKernelName(c.kernel)) + ",threads=" + std::to_string(c.threads_per_block) +
         ",unroll=" + std::to_string(c.unroll) + ",blocks_per_sm=" + std::to_string(c.blocks_per_sm) +
         ",hints=" + std::to_string(c.hints) + ",sms=" + std::to_string(c.sms) +
         ",bulk_kib=" + std::to_string(c.bulk_kib) + ",bulk_stages=" + std::to_string(c.bulk_stages) +
         ",bulk_blocks_per_sm=" + std::to_string(c.bulk_blocks_per_sm);
}

SmKernel resolveSmKernel(const SmCopyConfig& c, bool bulk_capable, const VectorSplit& split) {
  const bool qualifies = bulk_capable && split.shift == 0 && split.vecs > 0;
  switch (c.kernel) {
    case SmKernel::kBulk:
      return qualifies ? SmKernel::kBulk : SmKernel::kVector;
    case SmKernel::kAuto:
      return qualifies && 16 * split.vecs >= kBulkMinBytes ? SmKernel::kBulk : SmKernel::kVector;
    case SmKernel::kVector:
      break;
  }
  return SmKernel::kVector;
}

SmLaunch planSmLaunch(const SmCopyConfig& c, int sm_count, uint64_t vecs, SmKernel kernel) {
  SmLaunch l;
  int sms = std::max(1, sm_count);
  if (c.sms > 0) sms = std::min(sms, c.sms);
  if (kernel == SmKernel::kBulk) {
    l.threads = 32;
    l.chunk = static_cast<uint32_t>(c.bulk_kib) << 10;
    l.smem = static_cast<uint32_t>(c.bulk_stages) * l.chunk;
    const uint32_t fit = kSmemPerSm / (l.smem + kSmemReservedPerBlock);
    const uint64_t per_sm = std::max<uint64_t>(1, std::min<uint64_t>(c.bulk_blocks_per_sm, fit));
    const uint64_t needed = std::max<uint64_t>(1, bulkChunks(16 * vecs, l.chunk));
    l.blocks = static_cast<int>(std::min(needed, static_cast<uint64_t>(sms) * per_sm));
  } else {
    l.threads = c.threads_per_block;
    const uint64_t per_block = static_cast<uint64_t>(c.threads_per_block) * static_cast<uint64_t>(c.unroll);
    const uint64_t needed = std::max<uint64_t>(1, (vecs + per_block - 1) / per_block);
    const uint64_t cap = static_cast<uint64_t>(sms) * static_cast<uint64_t>(std::max(1, c.blocks_per_sm));
    l.blocks = static_cast<int>(std::min(needed, cap));
  }
  l.sms = std::min(l.blocks, sms);
  return l;
}

}  // namespace peerlab::peer
