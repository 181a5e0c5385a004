// The NIXL endpoint: an agent with the UCX backend, its regions registered as VRAM (or DRAM), metadata loaded from
// the peer, one NIXL transfer request per prepared transfer (re-posted as often as needed), notifications for writes.
#include <link.h>
#include <unistd.h>
#include <atomic>

#include <cstdlib>
#include <map>

#include "reference/transport/nixl_api.h"
#include "reference/transport/transport.h"
#include "reference/transport/ucx_api.h"
#include "reference/transport/wire.h"

namespace peerlab::transport {

namespace {

constexpr uint32_t kBlobMagic = 0x4C58494E;  // "NIXL"
constexpr char kNotification[] = "peerlab";

// The file of the UCP library NIXL's UCX backend loaded into this process ("" when none is loaded).
std::string loadedUcp() {
  std::string found;
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) -> int {
        const std::string name = info->dlpi_name ? info->dlpi_name : "";
        const size_t slash = name.rfind('/');
        if (name.compare(slash == std::string::npos ? 0 : slash + 1, 6, "libucp") == 0) {
          *static_cast<std::string*>(out) = name;
          return 1;
        }
        return 0;
      },
      &found);
  return found;
}

// NIXL's own UCX asked the same questions as a UCX endpoint asks (a second UCP context of the same, already loaded
// copy): does its context list CUDA memory, and do the GPU buffers register as CUDA memory? NIXL versions differ in
// whether their registration fails when UCX takes GPU memory for host memory; this check does not depend on it.
void checkBundledUcx(CapabilityReport& report, const std::vector<Region>& regions) {
  const std::string path = loadedUcp();
  if (path.empty()) return;
  auto lib = ucx::Library::open(path);  // the loaded copy: dlopen of its own path maps nothing new
  if (!lib.isOk()) return;
  ucx::Library& u = **lib;
  ucx::Config* config = nullptr;
  if (u.ucp_config_read(nullptr, nullptr, &config) != ucx::kOk) return;
  ucx::Params params;
  params.field_mask = ucx::kParamFieldFeatures;
  params.features = ucx::kFeatureRma;
  ucx::Context ctx = nullptr;
  const ucx::StatusT init = u.ucp_init_version(1, 13, &params, config, &ctx);
  u.ucp_config_release(config);
  if (init != ucx::kOk) return;
  ucx::ContextAttr attr;
  attr.field_mask = ucx::kAttrFieldMemoryTypes;
  if (u.ucp_context_query(ctx, &attr) == ucx::kOk) {
    report.context_known = true;
    report.context_types = attr.memory_types;
    report.version = u.version();
  }
  const bool cuda = report.context_known && (report.context_types & (1ull << ucx::kMemoryCuda));
  for (const Region& r : regions) {
    if (!cuda) break;  // refused on the context alone; GPU buffers are not registered with it
    if (r.kind != MemoryKind::kDevice) continue;
    ucx::MemMapParams mp;
    mp.field_mask = ucx::kMemMapFieldAddress | ucx::kMemMapFieldLength;
    mp.address = r.ptr;
    mp.length = r.bytes;
    ucx::Mem mem = nullptr;
    if (u.ucp_mem_map(ctx, &mp, &mem) != ucx::kOk) continue;
    ucx::MemAttr ma;
    ma.field_mask = ucx::kMemAttrFieldMemType;
    if (u.ucp_mem_query(mem, &ma) == ucx::kOk) report.region_types.push_back(ma.mem_type);
    (void)u.ucp_mem_unmap(ctx, mem);
  }
  u.ucp_cleanup(ctx);
}

class NixlEndpoint final : public Endpoint {
 public:
  explicit NixlEndpoint(int peer) : Endpoint(Library::kNixl, peer) {}
  ~NixlEndpoint() override;

  Status setupLocal(const EndpointOptions& o, int rank);
  StatusOr<std::vector<uint8_t>> blob();
  Status connectPeer(const std::vector<uint8_t>& theirs);

 protected:
  StatusOr<RequestId> prepareLocked(const Transfer& t) override;
  Status releaseLocked(RequestId id) override;
  Status postLocked(RequestId id) override;
  StatusOr<bool> testLocked(RequestId id) override;
  StatusOr<uint64_t> notificationsLocked() override;
  void idleLocked() override {
    // Reading the notifications progresses every UCX worker of the backend; what arrives is counted as always.
    if (!progress_thread_ && agent_ && notifs_) (void)notificationsLocked();
  }

 private:
  Status check(nixl::StatusT st, const std::string& what) const {
    if (st == nixl::kSuccess) return Status::ok();
    return PEERLAB_INTERNAL("NIXL: " + what + ": " + nixl::statusName(st));
  }
  int memType(MemoryKind k) const { return k == MemoryKind::kDevice ? nixl::kMemVram : nixl::kMemDram; }
  uint64_t devId(MemoryKind k, int device) const {
    return k == MemoryKind::kDevice ? static_cast<uint64_t>(device) : 0;
  }

  struct Request {
    nixl::XferReq req = nullptr;
    bool done_at_post = false;
  };

  std::shared_ptr<nixl::Library> lib_;
  nixl::Agent agent_ = nullptr;
  nixl::Backend backend_ = nullptr;
  nixl::OptArgs opt_ = nullptr;  // the UCX backend
  nixl::RegDlist registered_ = nullptr;
  bool is_registered_ = false;
  std::string remote_name_;
  nixl::NotifMap notifs_ = nullptr;
  uint64_t notified_ = 0;
  size_t descriptor_bytes_ = 0;
  bool progress_thread_ = true;  // NIXL's own progress thread runs
  std::map<RequestId, Request> requests_;
  RequestId next_id_ = 1;
};

Status NixlEndpoint::setupLocal(const EndpointOptions& o, int rank) {
  const nixl::Location loc = nixl::locateNixl();
  if (!loc.found) return PEERLAB_UNAVAILABLE("NIXL not found (" + loc.how + ")");
  PEERLAB_ASSIGN_OR_RETURN(lib_, nixl::Library::open(loc.library));
  report_.library = Library::kNixl;
  description_ = "NIXL " + loc.library;
  local_ = o.regions;
  descriptor_bytes_ = o.nixl_descriptor_bytes;
  report_.has_device_regions = local_.front().kind == MemoryKind::kDevice;

  // Unique within the process too: one process may connect one pair after another.
  static std::atomic<int> endpoints{0};
  const std::string name = "peerlab-" + std::to_string(rank) + "-" + std::to_string(::getpid()) + "-" +
                           std::to_string(endpoints.fetch_add(1));
  // Without NIXL's thread the endpoint's own progress thread keeps UCX moving (idleLocked), for the peer's
  // one-sided transfers that need this side's progress too; with neither, NIXL's thread runs.
  if (lib_->nixl_capi_create_configured_agent && !o.nixl_progress_thread && o.progress_thread) {
    nixl::AgentConfig config;
    config.enable_prog_thread = false;
    PEERLAB_RETURN_IF_ERROR(
        check(lib_->nixl_capi_create_configured_agent(name.c_str(), &config, &agent_), "creating the agent"));
    progress_thread_ = false;
  } else {
    PEERLAB_RETURN_IF_ERROR(check(lib_->nixl_capi_create_agent(name.c_str(), &agent_), "creating the agent"));
    progress_thread_ = true;
  }
  description_ += progress_thread_ ? " (NIXL progress thread)" : " (no NIXL progress thread)";
  nixl::MemList mems = nullptr;
  nixl::Params params = nullptr;
  report_.backend_status = lib_->nixl_capi_get_plugin_params(agent_, "UCX", &mems, &params);
  if (report_.backend_status == nixl::kSuccess) {
    size_t n = 0;
    report_.backend_lists_vram = false;
    if (lib_->nixl_capi_mem_list_size(mems, &n) == nixl::kSuccess) {
      for (size_t i = 0; i < n; ++i) {
        int type = -1;
        if (lib_->nixl_capi_mem_list_get(mems, i, &type) == nixl::kSuccess && type == nixl::kMemVram)
          report_.backend_lists_vram = true;
      }
    }
    for (const auto& [key, value] : o.nixl_backend_params) {
      if (report_.backend_status != nixl::kSuccess) break;
      report_.backend_status = lib_->nixl_capi_params_add(params, key.c_str(), value.c_str());
    }
    if (report_.backend_status == nixl::kSuccess) {
      report_.backend_status = lib_->nixl_capi_create_backend(agent_, "UCX", params, &backend_);
    }
  }
  if (mems) (void)lib_->nixl_capi_destroy_mem_list(mems);
  if (params) (void)lib_->nixl_capi_destroy_params(params);
  if (report_.backend_status != nixl::kSuccess) return judgeCapability(report_);
  if (report_.has_device_regions) {
    checkBundledUcx(report_, local_);
    // A UCX that takes GPU memory for host memory stops here, before NIXL registers anything with it.
    PEERLAB_RETURN_IF_ERROR(judgeCapability(report_));
  }

  PEERLAB_RETURN_IF_ERROR(check(lib_->nixl_capi_create_opt_args(&opt_), "creating options"));
  PEERLAB_RETURN_IF_ERROR(check(lib_->nixl_capi_opt_args_add_backend(opt_, backend_), "naming the UCX backend"));
  const int type = memType(local_.front().kind);
  PEERLAB_RETURN_IF_ERROR(check(lib_->nixl_capi_create_reg_dlist(type, &registered_), "creating a descriptor list"));
  nixl::XferDlist local = nullptr;
  PEERLAB_RETURN_IF_ERROR(check(lib_->nixl_capi_create_xfer_dlist(type, &local), "creating a descriptor list"));
  for (const Region& r : local_) {
    const auto addr = reinterpret_cast<uintptr_t>(r.ptr);
    PEERLAB_RETURN_IF_ERROR(
        check(lib_->nixl_capi_reg_dlist_add_desc(registered_, addr, r.bytes, devId(r.kind, r.device), nullptr, 0),
              "adding a descriptor"));
    PEERLAB_RETURN_IF_ERROR(check(lib_->nixl_capi_xfer_dlist_add_desc(local, addr, r.bytes, devId(r.kind, r.device)),
                                  "adding a descriptor"));
  }
  report_.register_status = lib_->nixl_capi_register_mem(agent_, registered_, opt_);
  is_registered_ = report_.register_status == nixl::kSuccess;
  if (is_registered_) {
    // The descriptor list NIXL prepares for this agent's own memory ("" names the local agent).
    nixl::DlistHandle handle = nullptr;
    report_.prepare_status = lib_->nixl_capi_prep_xfer_dlist(agent_, "", local, &handle, opt_);
    if (handle) (void)lib_->nixl_capi_release_xfer_dlist_handle(agent_, handle);
  }
  (void)lib_->nixl_capi_destroy_xfer_dlist(local);
  PEERLAB_RETURN_IF_ERROR(check(lib_->nixl_capi_create_notif_map(&notifs_), "creating a notification map"));
  return judgeCapability(report_);
}

StatusOr<std::vector<uint8_t>> NixlEndpoint::blob() {
  void* md = nullptr;
  size_t len = 0;
  PEERLAB_RETURN_IF_ERROR(check(lib_->nixl_capi_get_local_md(agent_, &md, &len), "reading the local metadata"));
  wire::Writer w;
  w.put<uint32_t>(kBlobMagic);
  w.bytes(md, len);
  std::free(md);  // the C API hands the metadata out from malloc
  w.put<uint32_t>(static_cast<uint32_t>(local_.size()));
  for (const Region& r : local_) {
    w.put<uint64_t>(reinterpret_cast<uintptr_t>(r.ptr));
    w.put<uint64_t>(r.bytes);
    w.put<uint8_t>(static_cast<uint8_t>(r.kind));
    w.put<int32_t>(r.device);
  }
  return w.take();
}

Status NixlEndpoint::connectPeer(const std::vector<uint8_t>& theirs) {
  wire::Reader r(theirs);
  uint32_t magic = 0, n = 0;
  std::vector<uint8_t> md;
  if (!r.get(magic) || magic != kBlobMagic || !r.bytes(md) || !r.get(n) || n > 4096) {
    return PEERLAB_INTERNAL("NIXL: the peer's metadata is malformed");
  }
  for (uint32_t i = 0; i < n; ++i) {
    RemoteRegion rr;
    uint8_t kind = 0;
    int32_t device = -1;
    if (!r.get(rr.addr) || !r.get(rr.bytes) || !r.get(kind) || !r.get(device) || kind > 1) {
      return PEERLAB_INTERNAL("NIXL: the peer's region list is malformed");
    }
    rr.kind = static_cast<MemoryKind>(kind);
    rr.device = device;
    remote_.push_back(rr);
  }
  if (!r.done()) return PEERLAB_INTERNAL("NIXL: the peer's metadata has trailing bytes");
  char* name = nullptr;
  PEERLAB_RETURN_IF_ERROR(
      check(lib_->nixl_capi_load_remote_md(agent_, md.data(), md.size(), &name), "loading the peer's metadata"));
  remote_name_ = name ? name : "";
  std::free(name);
  return Status::ok();
}

StatusOr<RequestId> NixlEndpoint::prepareLocked(const Transfer& t) {
  const Region& l = local_[t.local];
  const RemoteRegion& rr = remote_[t.remote];
  nixl::XferDlist local = nullptr, remote = nullptr;
  nixl::OptArgs args = nullptr;
  auto cleanup = [&] {
    if (local) (void)lib_->nixl_capi_destroy_xfer_dlist(local);
    if (remote) (void)lib_->nixl_capi_destroy_xfer_dlist(remote);
    if (args) (void)lib_->nixl_capi_destroy_opt_args(args);
  };
  auto body = [&]() -> StatusOr<RequestId> {
    PEERLAB_RETURN_IF_ERROR(check(lib_->nixl_capi_create_xfer_dlist(memType(l.kind), &local), "descriptor list"));
    PEERLAB_RETURN_IF_ERROR(check(lib_->nixl_capi_create_xfer_dlist(memType(rr.kind), &remote), "descriptor list"));
    // Several descriptors of one request are in flight together.
    for (const auto& [at, n] : nixlDescriptorPieces(t.bytes, descriptor_bytes_)) {
      PEERLAB_RETURN_IF_ERROR(
          check(lib_->nixl_capi_xfer_dlist_add_desc(local, reinterpret_cast<uintptr_t>(l.ptr) + t.local_offset + at, n,
                                                    devId(l.kind, l.device)),
                "local descriptor"));
      PEERLAB_RETURN_IF_ERROR(check(
          lib_->nixl_capi_xfer_dlist_add_desc(remote, rr.addr + t.remote_offset + at, n, devId(rr.kind, rr.device)),
          "remote descriptor"));
    }
    PEERLAB_RETURN_IF_ERROR(check(lib_->nixl_capi_create_opt_args(&args), "options"));
    PEERLAB_RETURN_IF_ERROR(check(lib_->nixl_capi_opt_args_add_backend(args, backend_), "options"));
    if (t.notify) {
      PEERLAB_RETURN_IF_ERROR(check(
          lib_->nixl_capi_opt_args_set_notif_msg(args, kNotification, sizeof(kNotification) - 1), "notification"));
      PEERLAB_RETURN_IF_ERROR(check(lib_->nixl_capi_opt_args_set_has_notif(args, true), "notification"));
    }
    Request req;
    const int op = t.op == Op::kWrite ? nixl::kOpWrite : nixl::kOpRead;
    PEERLAB_RETURN_IF_ERROR(
        check(lib_->nixl_capi_create_xfer_req(agent_, op, local, remote, remote_name_.c_str(), &req.req, args),
              "creating a transfer request"));
    const RequestId id = next_id_++;
    requests_[id] = req;
    return id;
  };
  auto out = body();
  cleanup();
  return out;
}

Status NixlEndpoint::releaseLocked(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return PEERLAB_INVALID_ARGUMENT("release: unknown request " + std::to_string(id));
  Status st = check(lib_->nixl_capi_release_xfer_req(agent_, it->second.req), "releasing a transfer request");
  (void)lib_->nixl_capi_destroy_xfer_req(it->second.req);
  requests_.erase(it);
  return st;
}

Status NixlEndpoint::postLocked(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return PEERLAB_INVALID_ARGUMENT("post: unknown request " + std::to_string(id));
  const nixl::StatusT st = lib_->nixl_capi_post_xfer_req(agent_, it->second.req, nullptr);
  if (st != nixl::kSuccess && st != nixl::kInProgress) return check(st, "posting a transfer");
  it->second.done_at_post = st == nixl::kSuccess;
  return Status::ok();
}

StatusOr<bool> NixlEndpoint::testLocked(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return PEERLAB_INVALID_ARGUMENT("test: unknown request " + std::to_string(id));
  if (it->second.done_at_post) return true;
  const nixl::StatusT st = lib_->nixl_capi_get_xfer_status(agent_, it->second.req);
  if (st == nixl::kInProgress) return false;
  PEERLAB_RETURN_IF_ERROR(check(st, "transfer"));
  return true;
}

StatusOr<uint64_t> NixlEndpoint::notificationsLocked() {
  PEERLAB_RETURN_IF_ERROR(check(lib_->nixl_capi_get_notifs(agent_, notifs_, nullptr), "reading notifications"));
  size_t agents = 0;
  PEERLAB_RETURN_IF_ERROR(check(lib_->nixl_capi_notif_map_size(notifs_, &agents), "reading notifications"));
  for (size_t i = 0; i < agents; ++i) {
    const char* who = nullptr;
    size_t n = 0;
    if (lib_->nixl_capi_notif_map_get_agent_at(notifs_, i, &who) == nixl::kSuccess &&
        lib_->nixl_capi_notif_map_get_notifs_size(notifs_, who, &n) == nixl::kSuccess) {
      notified_ += n;
    }
  }
  (void)lib_->nixl_capi_notif_map_clear(notifs_);
  return notified_;
}

NixlEndpoint::~NixlEndpoint() {
  stopProgress();
  if (!lib_) return;
  for (auto& [id, r] : requests_) {
    (void)lib_->nixl_capi_release_xfer_req(agent_, r.req);
    (void)lib_->nixl_capi_destroy_xfer_req(r.req);
  }
  if (!remote_name_.empty()) (void)lib_->nixl_capi_invalidate_remote_md(agent_, remote_name_.c_str());
  if (is_registered_) (void)lib_->nixl_capi_deregister_mem(agent_, registered_, opt_);
  if (registered_) (void)lib_->nixl_capi_destroy_reg_dlist(registered_);
  if (notifs_) (void)lib_->nixl_capi_destroy_notif_map(notifs_);
  if (opt_) (void)lib_->nixl_capi_destroy_opt_args(opt_);
  if (backend_) (void)lib_->nixl_capi_destroy_backend(backend_);
  if (agent_) (void)lib_->nixl_capi_destroy_agent(agent_);
}

}  // namespace

StatusOr<std::unique_ptr<Endpoint>> connectNixl(Bootstrap& boot, const EndpointOptions& o) {
  auto ep = std::make_unique<NixlEndpoint>(o.peer);
  const Status local = ep->setupLocal(o, boot.rank());
  PEERLAB_RETURN_IF_ERROR(detail::agreeCapability(boot, o.peer, local, o.deadline));
  PEERLAB_ASSIGN_OR_RETURN(auto mine, ep->blob());
  PEERLAB_ASSIGN_OR_RETURN(auto theirs, detail::tradeBlob(boot, o.peer, mine, o.deadline));
  const Status connected = ep->connectPeer(theirs);
  PEERLAB_RETURN_IF_ERROR(detail::agreeCapability(boot, o.peer, connected, o.deadline));
  return std::unique_ptr<Endpoint>(std::move(ep));
}

}  // namespace peerlab::transport
