// The UCP endpoint: RMA put / get on registered memory, a flush for remote completion, and a host word the peer
// puts a counter into for notifications.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <map>

#include "reference/transport/transport.h"
#include "reference/transport/ucx_api.h"
#include "reference/transport/wire.h"

namespace peerlab::transport {

namespace {

constexpr uint32_t kBlobMagic = 0x55435850;  // "PXCU"
// The UCP API version peerlab is written against: the oldest it supports (Debian 12's 1.13).
constexpr unsigned kApiMajor = 1;
constexpr unsigned kApiMinor = 13;
constexpr size_t kSignalSlots = 64;

class UcxEndpoint final : public Endpoint {
 public:
  UcxEndpoint(int peer) : Endpoint(Library::kUcx, peer) {}
  ~UcxEndpoint() override;

  Status setupLocal(const EndpointOptions& o);
  std::vector<uint8_t> blob() const;
  Status connectPeer(const std::vector<uint8_t>& theirs);

 protected:
  StatusOr<RequestId> prepareLocked(const Transfer& t) override;
  Status releaseLocked(RequestId id) override;
  Status postLocked(RequestId id) override;
  StatusOr<bool> testLocked(RequestId id) override;
  StatusOr<uint64_t> notificationsLocked() override;
  void idleLocked() override {
    if (worker_) lib_->ucp_worker_progress(worker_);
  }

 private:
  Status ucsStatus(ucx::StatusT st, const std::string& what) const {
    if (st == ucx::kOk) return Status::ok();
    return PEERLAB_STATUS(st == ucx::kErrUnsupported ? StatusCode::kUnavailable : StatusCode::kInternal,
                          "UCX: " + what + ": " + lib_->describe(st));
  }
  // Keeps a non-blocking call's request; an immediate error is returned.
  Status track(ucx::StatusPtr p, std::vector<void*>& into, const std::string& what) {
    if (p == nullptr) return Status::ok();
    if (ucx::isErrorPtr(p)) return ucsStatus(ucx::errorOf(p), what);
    into.push_back(p);
    return Status::ok();
  }

  std::shared_ptr<ucx::Library> lib_;
  ucx::Context ctx_ = nullptr;
  ucx::Worker worker_ = nullptr;
  ucx::Address* address_ = nullptr;
  size_t address_len_ = 0;
  ucx::Ep ep_ = nullptr;
  std::vector<ucx::Mem> mems_;  // per local region, then the signal word
  std::vector<int> mem_types_;  // what UCX registered each as (ucs_memory_type_t)
  std::vector<std::vector<uint8_t>> rkeys_;
  std::vector<ucx::Rkey> remote_rkeys_;  // per remote region, then the peer's signal word
  uint64_t remote_signal_ = 0;
  alignas(64) volatile uint64_t signal_ = 0;  // the peer puts its notification count here
  std::array<uint64_t, kSignalSlots> signal_src_{};
  uint64_t sent_ = 0;
  std::map<RequestId, Transfer> transfers_;
  std::map<RequestId, std::vector<void*>> requests_;
  RequestId next_id_ = 1;
};

Status UcxEndpoint::setupLocal(const EndpointOptions& o) {
  const ucx::Location loc = ucx::locateUcx();
  if (!loc.found) return PEERLAB_UNAVAILABLE("UCX not found (" + loc.how + ")");
  // Before libucs loads: a UCX without its CUDA memory hooks would take every GPU buffer for host memory.
  const std::string detection = ucx::prepareMemoryTypeDetection(loc.library);
  PEERLAB_ASSIGN_OR_RETURN(lib_, ucx::Library::open(loc.library));
  report_.library = Library::kUcx;
  report_.version = lib_->version();
  description_ = "UCX " + report_.version + " " + loc.library + (detection.empty() ? "" : ", " + detection);
  local_ = o.regions;

  ucx::Config* config = nullptr;
  PEERLAB_RETURN_IF_ERROR(ucsStatus(lib_->ucp_config_read(nullptr, nullptr, &config), "ucp_config_read"));
  ucx::Params params;
  params.field_mask = ucx::kParamFieldFeatures;
  params.features = ucx::kFeatureRma;
  const ucx::StatusT init = lib_->ucp_init_version(kApiMajor, kApiMinor, &params, config, &ctx_);
  lib_->ucp_config_release(config);
  PEERLAB_RETURN_IF_ERROR(ucsStatus(init, "ucp_init"));

  ucx::ContextAttr attr;
  attr.field_mask = ucx::kAttrFieldMemoryTypes;
  if (lib_->ucp_context_query(ctx_, &attr) == ucx::kOk) {
    report_.context_known = true;
    report_.context_types = attr.memory_types;
  }
  ucx::WorkerParams wp;
  wp.field_mask = ucx::kWorkerFieldThreadMode;
  wp.thread_mode = ucx::kThreadModeSerialized;
  PEERLAB_RETURN_IF_ERROR(ucsStatus(lib_->ucp_worker_create(ctx_, &wp, &worker_), "ucp_worker_create"));
  PEERLAB_RETURN_IF_ERROR(
      ucsStatus(lib_->ucp_worker_get_address(worker_, &address_, &address_len_), "ucp_worker_get_address"));

  // A context without CUDA memory refuses GPU buffers before they are registered with it.
  report_.has_device_regions =
      std::any_of(local_.begin(), local_.end(), [](const Region& r) { return r.kind == MemoryKind::kDevice; });
  if (report_.has_device_regions && !(report_.context_types & (1ull << ucx::kMemoryCuda))) {
    return judgeCapability(report_);
  }
  // Register every region, letting UCX detect the memory type: a UCX without CUDA detects GPU memory as host.
  std::vector<std::pair<void*, size_t>> maps;
  for (const Region& r : local_)
    maps.emplace_back(r.ptr, r.bytes);
  maps.emplace_back(const_cast<uint64_t*>(&signal_), sizeof(uint64_t));
  for (size_t i = 0; i < maps.size(); ++i) {
    ucx::MemMapParams mp;
    mp.field_mask = ucx::kMemMapFieldAddress | ucx::kMemMapFieldLength;
    mp.address = maps[i].first;
    mp.length = maps[i].second;
    ucx::Mem mem = nullptr;
    PEERLAB_RETURN_IF_ERROR(ucsStatus(lib_->ucp_mem_map(ctx_, &mp, &mem), "ucp_mem_map"));
    mems_.push_back(mem);
    ucx::MemAttr ma;
    ma.field_mask = ucx::kMemAttrFieldMemType;
    PEERLAB_RETURN_IF_ERROR(ucsStatus(lib_->ucp_mem_query(mem, &ma), "ucp_mem_query"));
    mem_types_.push_back(ma.mem_type);
    if (i < local_.size() && local_[i].kind == MemoryKind::kDevice) report_.region_types.push_back(ma.mem_type);
    void* rkey = nullptr;
    size_t rkey_len = 0;
    PEERLAB_RETURN_IF_ERROR(ucsStatus(lib_->ucp_rkey_pack(ctx_, mem, &rkey, &rkey_len), "ucp_rkey_pack"));
    rkeys_.emplace_back(static_cast<uint8_t*>(rkey), static_cast<uint8_t*>(rkey) + rkey_len);
    lib_->ucp_rkey_buffer_release(rkey);
  }
  return judgeCapability(report_);
}

std::vector<uint8_t> UcxEndpoint::blob() const {
  wire::Writer w;
  w.put<uint32_t>(kBlobMagic);
  w.put<uint32_t>(static_cast<uint32_t>(local_.size()));
  w.bytes(address_, address_len_);
  for (size_t i = 0; i < local_.size(); ++i) {
    w.put<uint64_t>(reinterpret_cast<uintptr_t>(local_[i].ptr));
    w.put<uint64_t>(local_[i].bytes);
    w.put<uint8_t>(static_cast<uint8_t>(local_[i].kind));
    w.put<int32_t>(local_[i].device);
    w.bytes(rkeys_[i].data(), rkeys_[i].size());
  }
  w.put<uint64_t>(reinterpret_cast<uintptr_t>(&signal_));
  w.bytes(rkeys_.back().data(), rkeys_.back().size());
  return w.take();
}

Status UcxEndpoint::connectPeer(const std::vector<uint8_t>& theirs) {
  wire::Reader r(theirs);
  uint32_t magic = 0, n = 0;
  std::vector<uint8_t> address;
  if (!r.get(magic) || magic != kBlobMagic || !r.get(n) || n > 4096 || !r.bytes(address)) {
    return PEERLAB_INTERNAL("UCX: the peer's metadata is malformed");
  }
  std::vector<std::vector<uint8_t>> keys;
  for (uint32_t i = 0; i < n; ++i) {
    RemoteRegion rr;
    uint8_t kind = 0;
    int32_t device = -1;
    std::vector<uint8_t> key;
    if (!r.get(rr.addr) || !r.get(rr.bytes) || !r.get(kind) || !r.get(device) || !r.bytes(key) || kind > 1) {
      return PEERLAB_INTERNAL("UCX: the peer's region list is malformed");
    }
    rr.kind = static_cast<MemoryKind>(kind);
    rr.device = device;
    remote_.push_back(rr);
    keys.push_back(std::move(key));
  }
  std::vector<uint8_t> signal_key;
  if (!r.get(remote_signal_) || !r.bytes(signal_key) || !r.done()) {
    return PEERLAB_INTERNAL("UCX: the peer's signal word is malformed");
  }
  keys.push_back(std::move(signal_key));
  ucx::EpParams ep;
  ep.field_mask = ucx::kEpFieldRemoteAddress;
  ep.address = reinterpret_cast<const ucx::Address*>(address.data());
  PEERLAB_RETURN_IF_ERROR(ucsStatus(lib_->ucp_ep_create(worker_, &ep, &ep_), "ucp_ep_create"));
  for (const auto& key : keys) {
    ucx::Rkey rkey = nullptr;
    PEERLAB_RETURN_IF_ERROR(ucsStatus(lib_->ucp_ep_rkey_unpack(ep_, key.data(), &rkey), "ucp_ep_rkey_unpack"));
    remote_rkeys_.push_back(rkey);
  }
  return Status::ok();
}

StatusOr<RequestId> UcxEndpoint::prepareLocked(const Transfer& t) {
  if (t.notify && t.op != Op::kWrite) return PEERLAB_INVALID_ARGUMENT("transfer: only a write can notify the peer");
  const RequestId id = next_id_++;
  transfers_[id] = t;
  return id;
}

Status UcxEndpoint::releaseLocked(RequestId id) {
  if (!transfers_.erase(id)) return PEERLAB_INVALID_ARGUMENT("release: unknown request " + std::to_string(id));
  return Status::ok();
}

Status UcxEndpoint::postLocked(RequestId id) {
  auto it = transfers_.find(id);
  if (it == transfers_.end()) return PEERLAB_INVALID_ARGUMENT("post: unknown request " + std::to_string(id));
  const Transfer& t = it->second;
  auto* local = static_cast<uint8_t*>(local_[t.local].ptr) + t.local_offset;
  const uint64_t remote = remote_[t.remote].addr + t.remote_offset;
  ucx::Rkey rkey = remote_rkeys_[t.remote];
  ucx::RequestParam none;
  // The local buffer's registration and type: without them UCX registers (and detects) the buffer again for every
  // operation, which costs a GPU buffer tens of microseconds of host time per transfer.
  ucx::RequestParam data;
  data.op_attr_mask = ucx::kOpFieldMemh | ucx::kOpFieldMemoryType;
  data.memh = mems_[t.local];
  data.memory_type = mem_types_[t.local];
  std::vector<void*>& reqs = requests_[id];
  if (t.op == Op::kRead) return track(lib_->ucp_get_nbx(ep_, local, t.bytes, remote, rkey, &data), reqs, "ucp_get_nbx");
  PEERLAB_RETURN_IF_ERROR(track(lib_->ucp_put_nbx(ep_, local, t.bytes, remote, rkey, &data), reqs, "ucp_put_nbx"));
  if (t.notify) {
    // The counter lands after the data: the fence orders the two puts at the peer.
    PEERLAB_RETURN_IF_ERROR(ucsStatus(lib_->ucp_worker_fence(worker_), "ucp_worker_fence"));
    uint64_t& slot = signal_src_[sent_ % kSignalSlots];
    slot = ++sent_;
    ucx::RequestParam host;
    host.op_attr_mask = ucx::kOpFieldMemoryType;
    host.memory_type = ucx::kMemoryHost;
    PEERLAB_RETURN_IF_ERROR(
        track(lib_->ucp_put_nbx(ep_, &slot, sizeof(slot), remote_signal_, remote_rkeys_.back(), &host), reqs,
              "ucp_put_nbx (notification)"));
  }
  // A put completes locally; the flush completes once everything before it reached the peer's memory.
  return track(lib_->ucp_ep_flush_nbx(ep_, &none), reqs, "ucp_ep_flush_nbx");
}

StatusOr<bool> UcxEndpoint::testLocked(RequestId id) {
  lib_->ucp_worker_progress(worker_);
  std::vector<void*>& reqs = requests_[id];
  Status failure;
  for (auto it = reqs.begin(); it != reqs.end();) {
    const ucx::StatusT st = lib_->ucp_request_check_status(*it);
    if (st == ucx::kInProgress) {
      ++it;
      continue;
    }
    if (st != ucx::kOk && failure.isOk()) failure = ucsStatus(st, "transfer");
    lib_->ucp_request_free(*it);
    it = reqs.erase(it);
  }
  if (!failure.isOk()) return failure;
  return reqs.empty();
}

StatusOr<uint64_t> UcxEndpoint::notificationsLocked() {
  lib_->ucp_worker_progress(worker_);
  std::atomic_thread_fence(std::memory_order_acquire);
  return static_cast<uint64_t>(signal_);
}

UcxEndpoint::~UcxEndpoint() {
  stopProgress();
  if (!lib_) return;
  for (auto& [id, reqs] : requests_) {
    // A request still in flight is left to the worker's teardown; finished ones are returned.
    for (void* r : reqs) {
      if (lib_->ucp_request_check_status(r) != ucx::kInProgress) lib_->ucp_request_free(r);
    }
  }
  for (ucx::Rkey k : remote_rkeys_)
    lib_->ucp_rkey_destroy(k);
  if (ep_) {
    ucx::RequestParam force;
    force.op_attr_mask = ucx::kOpFieldFlags;
    force.flags = ucx::kEpCloseFlagForce;
    ucx::StatusPtr p = lib_->ucp_ep_close_nbx(ep_, &force);
    const Deadline d = Deadline::afterMs(2000);
    while (p != nullptr && !ucx::isErrorPtr(p) && !d.expired()) {
      lib_->ucp_worker_progress(worker_);
      if (lib_->ucp_request_check_status(p) != ucx::kInProgress) {
        lib_->ucp_request_free(p);
        break;
      }
    }
  }
  for (ucx::Mem m : mems_)
    (void)lib_->ucp_mem_unmap(ctx_, m);
  if (address_) lib_->ucp_worker_release_address(worker_, address_);
  if (worker_) lib_->ucp_worker_destroy(worker_);
  if (ctx_) lib_->ucp_cleanup(ctx_);
}

}  // namespace

StatusOr<std::unique_ptr<Endpoint>> connectUcx(Bootstrap& boot, const EndpointOptions& o) {
  auto ep = std::make_unique<UcxEndpoint>(o.peer);
  const Status local = ep->setupLocal(o);
  // Both sides learn both verdicts before either goes on, so neither waits for a peer that gave up.
  PEERLAB_RETURN_IF_ERROR(detail::agreeCapability(boot, o.peer, local, o.deadline));
  PEERLAB_ASSIGN_OR_RETURN(auto theirs, detail::tradeBlob(boot, o.peer, ep->blob(), o.deadline));
  // Both endpoints exist before either side's first transfer.
  const Status connected = ep->connectPeer(theirs);
  PEERLAB_RETURN_IF_ERROR(detail::agreeCapability(boot, o.peer, connected, o.deadline));
  return std::unique_ptr<Endpoint>(std::move(ep));
}

}  // namespace peerlab::transport
