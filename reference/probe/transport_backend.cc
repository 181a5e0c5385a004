// The backend of a transport worker: one of the two processes that probe NIXL or UCX. Both offer a source and a
// destination buffer on every GPU to the library; the importer initiates every transfer, the side that owns the
// destination checks it on that GPU. The two sides meet per cell over the local bootstrap: "ready" (the target's
// buffer is poisoned or filled) and "done" (how the transfer ended).
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <thread>

#include "reference/core/check.h"
#include "reference/core/fd.h"
#include "reference/core/local_bootstrap.h"
#include "reference/core/memory.h"
#include "reference/core/pattern.h"
#include "reference/core/scoped.h"
#include "reference/core/wait.h"
#include "reference/probe/backend.h"
#include "reference/probe/kernels.h"
#include "reference/transport/transport.h"

namespace peerlab::probe {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kSetupMs = 60'000;

// What one side tells the other about a cell.
struct Note {
  uint32_t id = 0;
  int32_t code = 0;  // StatusCode of the side's part; 0 ok
  char why[480] = {};
};

Note noteOf(uint32_t id, const Status& st) {
  Note n;
  n.id = id;
  n.code = static_cast<int32_t>(st.code());
  if (!st.isOk()) std::snprintf(n.why, sizeof(n.why), "%s", st.message().c_str());
  return n;
}

Verdict verdictOf(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return Verdict::kOk;
    case StatusCode::kUnavailable:
      return Verdict::kUnsupported;
    case StatusCode::kTimeout:
      return Verdict::kHang;
    default:
      return Verdict::kError;
  }
}

uint64_t usSince(Clock::time_point t0) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count());
}

struct Gpu {
  Status status;
  DeviceBuffer src, dst;
  Stream stream;
  std::optional<PatternChecker> checker;
};

class TransportBackend final : public Backend {
 public:
  TransportBackend(transport::Library library, InjectPlan inject) : library_(library), inject_(std::move(inject)) {}

  Inventory inventory() override {
    inv_ = collectInventory();
    return inv_;
  }
  ReadyReport setup(const SetupRequest& req) override;
  ReadyReport import(const Exports&, std::vector<int> fds) override {
    for (int fd : fds)
      Fd{fd}.reset();
    ReadyReport r;
    r.role = role_;
    r.error = "import: transport workers import nothing";
    return r;
  }
  Status run(const RunRequest& req, const EmitFn& emit) override;

 private:
  Status setupGpu(int d);
  StatusOr<CellResult> target(const CellSpec& c, std::optional<FaultKind> fault);
  StatusOr<CellResult> initiate(const CellSpec& c, std::optional<FaultKind> fault, bool* fatal);
  Status check(const CellSpec& c, void* where, CellResult& r, std::optional<FaultKind> fault);
  Deadline cellDeadline() const { return Deadline::afterMs(static_cast<int64_t>(timeout_ms_)); }
  int peer() const { return role_ == Role::kOwner ? 1 : 0; }

  transport::Library library_;
  InjectPlan inject_;
  Inventory inv_;
  Role role_ = Role::kOwner;
  int n_ = 0;
  uint64_t max_bytes_ = 0;
  uint32_t timeout_ms_ = 5000;
  std::vector<Gpu> gpus_;
  std::unique_ptr<Bootstrap> boot_;
  std::unique_ptr<transport::Endpoint> ep_;
  Status unsupported_;  // the capability check's answer, for every cell
  Status broken_;       // the endpoint could not be connected for another reason
};

Status TransportBackend::setupGpu(int d) {
  Gpu& g = gpus_[d];
  PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(d));
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaFree(nullptr)));
  PEERLAB_ASSIGN_OR_RETURN(g.src, allocDevice(d, max_bytes_));
  PEERLAB_ASSIGN_OR_RETURN(g.dst, allocDevice(d, max_bytes_));
  PEERLAB_ASSIGN_OR_RETURN(g.stream, createStream(d));
  PEERLAB_ASSIGN_OR_RETURN(PatternChecker checker, PatternChecker::create(d));
  g.checker.emplace(std::move(checker));
  return Status::ok();
}

ReadyReport TransportBackend::setup(const SetupRequest& req) {
  ReadyReport out;
  out.role = req.role;
  role_ = req.role;
  max_bytes_ = req.max_bytes;
  timeout_ms_ = req.timeout_ms > 0 ? req.timeout_ms : timeout_ms_;
  n_ = inv_.count();
  if (!inv_.error.empty() || n_ == 0) {
    out.error = inv_.error.empty() ? "no CUDA device" : inv_.error;
    return out;
  }
  if (max_bytes_ == 0 || max_bytes_ % 16 != 0) {
    out.error = "setup: buffer size " + std::to_string(max_bytes_) + " is not a positive multiple of 16";
    return out;
  }
  auto t0 = Clock::now();
  gpus_ = std::vector<Gpu>(n_);
  for (int d = 0; d < n_; ++d)
    gpus_[d].status = setupGpu(d).withContext("GPU " + std::to_string(d));
  out.timings.push_back({"buffers", usSince(t0)});
  t0 = Clock::now();
  auto boot = connectLocalFromEnvironment(Deadline::afterMs(kSetupMs));
  if (!boot.isOk()) {
    out.error = "transport worker: " + boot.status().message();
    return out;
  }
  boot_ = std::move(boot).value();
  if (boot_->size() != 2 || boot_->rank() != (role_ == Role::kOwner ? 0 : 1)) {
    out.error = "transport worker: bootstrap rank " + std::to_string(boot_->rank()) + " of " +
                std::to_string(boot_->size()) + " does not match the " + std::string(roleName(role_));
    return out;
  }
  transport::EndpointOptions o;
  o.library = library_;
  o.peer = peer();
  o.deadline = Deadline::afterMs(kSetupMs);
  for (int d = 0; d < n_; ++d) {
    // A GPU that could not be set up offers nothing; the cells that need it fail with its status.
    if (!gpus_[d].status.isOk()) continue;
    o.regions.push_back({gpus_[d].src->ptr, max_bytes_, transport::MemoryKind::kDevice, d});
    o.regions.push_back({gpus_[d].dst->ptr, max_bytes_, transport::MemoryKind::kDevice, d});
  }
  if (o.regions.empty()) {
    out.error = gpus_[0].status.message();
    return out;
  }
  if (o.regions.size() != 2 * static_cast<size_t>(n_)) {
    out.error = "transport worker: not every GPU could be set up";
    return out;
  }
  auto ep = transport::Endpoint::connect(*boot_, o);
  if (ep.isOk()) {
    ep_ = std::move(ep).value();
  } else if (ep.status().code() == StatusCode::kUnavailable) {
    unsupported_ = ep.status();
  } else {
    broken_ = ep.status();
  }
  out.timings.push_back({"connect", usSince(t0)});
  return out;
}

Status TransportBackend::check(const CellSpec& c, void* where, CellResult& r, std::optional<FaultKind> fault) {
  Gpu& g = gpus_[c.dst];
  cudaStream_t s = g.stream.get();
  if (fault == FaultKind::kCorrupt) {
    const uint64_t offset = (c.bytes / 2) & ~static_cast<uint64_t>(kWordBytes - 1);
    PEERLAB_RETURN_IF_ERROR(launchFlipWord(c.dst, s, static_cast<uint8_t*>(where) + offset));
  }
  PEERLAB_RETURN_IF_ERROR(g.checker->enqueue(where, c.bytes, c.seed, s, kWordBytes));
  PEERLAB_ASSIGN_OR_RETURN(PatternCheck check, g.checker->collect(s, cellDeadline()));
  r.words = check.elements;
  r.wrong = check.wrong;
  r.first_bad = check.first_bad;
  r.verdict = check.ok() ? Verdict::kOk : Verdict::kCorrupt;
  return Status::ok();
}

// The owner: prepares its buffer, lets the initiator go, waits for its "done", checks a write.
StatusOr<CellResult> TransportBackend::target(const CellSpec& c, std::optional<FaultKind> fault) {
  CellResult r;
  const bool write = pushedBySource(c.method);
  Gpu& g = gpus_[write ? c.dst : c.src];
  void* buffer = write ? g.dst->ptr : g.src->ptr;
  {
    auto guard = ScopedDevice::make(write ? c.dst : c.src);
    Status st = write ? poisonPattern(buffer, c.bytes, c.seed, g.stream.get())
                      : fillPattern(buffer, c.bytes, c.seed, g.stream.get());
    if (st.isOk()) st = waitStream(g.stream.get(), cellDeadline(), "preparing the target buffer");
    const Note ready = noteOf(c.id, st);
    PEERLAB_RETURN_IF_ERROR(boot_->send(peer(), &ready, sizeof(ready), cellDeadline()));
    PEERLAB_RETURN_IF_ERROR(st);
  }
  Note done;
  // The initiator's own deadline comes first; this one only bounds a peer that died.
  PEERLAB_RETURN_IF_ERROR(
      boot_->recv(peer(), &done, sizeof(done), Deadline::afterMs(2 * static_cast<int64_t>(timeout_ms_) + 1000)));
  if (done.id != c.id) return PEERLAB_INTERNAL("transport worker: the peer answered for another cell");
  r.verdict = verdictOf(static_cast<StatusCode>(done.code));
  r.path = Path::kIpc;
  if (r.verdict != Verdict::kOk) {
    r.error = std::string("initiator: ") + done.why;
    return r;
  }
  if (write) {
    auto guard = ScopedDevice::make(c.dst);
    PEERLAB_RETURN_IF_ERROR(check(c, buffer, r, fault));
  }
  return r;
}

// The importer: prepares its own buffer, moves the data through the library, checks a read.
StatusOr<CellResult> TransportBackend::initiate(const CellSpec& c, std::optional<FaultKind> fault, bool* fatal) {
  CellResult r;
  r.path = Path::kIpc;
  const bool write = pushedBySource(c.method);
  Note ready;
  PEERLAB_RETURN_IF_ERROR(boot_->recv(peer(), &ready, sizeof(ready), cellDeadline()));
  if (ready.id != c.id) return PEERLAB_INTERNAL("transport worker: the peer is ready for another cell");
  auto part = [&]() -> Status {
    if (ready.code != 0) return Status(static_cast<StatusCode>(ready.code), std::string("target: ") + ready.why);
    const int local_gpu = write ? c.src : c.dst;
    Gpu& g = gpus_[local_gpu];
    void* local = write ? g.src->ptr : g.dst->ptr;
    {
      PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(local_gpu));
      PEERLAB_RETURN_IF_ERROR(write ? fillPattern(local, c.bytes, c.seed, g.stream.get())
                                    : poisonPattern(local, c.bytes, c.seed, g.stream.get()));
      PEERLAB_RETURN_IF_ERROR(waitStream(g.stream.get(), cellDeadline(), "preparing the initiator's buffer"));
    }
    if (fault == FaultKind::kError) {
      return PEERLAB_STATUS(StatusCode::kInternal, "injected error (PEERLAB_PROBE_INJECT)");
    }
    if (fault == FaultKind::kHang) {
      // The data never moves: this process sleeps until the parent kills it (bounded if nobody does).
      const Deadline end = Deadline::afterMs(10 * static_cast<int64_t>(timeout_ms_) + 30'000);
      while (!end.expired())
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      return PEERLAB_TIMEOUT("injected hang outlived its bound");
    }
    transport::Transfer t;
    t.op = write ? transport::Op::kWrite : transport::Op::kRead;
    t.local = 2 * local_gpu + (write ? 0 : 1);
    t.remote = write ? 2 * c.dst + 1 : 2 * c.src;
    t.bytes = c.bytes;
    // The library copies with the CUDA context current on the posting thread: the initiator's GPU.
    PEERLAB_ASSIGN_OR_RETURN(auto current, ScopedDevice::make(local_gpu));
    PEERLAB_ASSIGN_OR_RETURN(transport::RequestId id, ep_->prepare(t));
    auto ticket = ep_->post(id);
    Status st = ticket.isOk() ? ep_->wait(*ticket, transport::WaitMode::kSpin, cellDeadline()) : ticket.status();
    if (st.code() == StatusCode::kTimeout) {
      // The library still owns the transfer: this process must not be reused.
      *fatal = true;
      return st;
    }
    (void)ep_->release(id);
    PEERLAB_RETURN_IF_ERROR(st);
    if (!write) {
      PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(c.dst));
      PEERLAB_RETURN_IF_ERROR(check(c, local, r, fault));
    }
    return Status::ok();
  };
  const Status st = part();
  const Note done = noteOf(c.id, st);
  PEERLAB_RETURN_IF_ERROR(boot_->send(peer(), &done, sizeof(done), cellDeadline()));
  if (!st.isOk()) {
    r.verdict = verdictOf(st.code());
    r.error = st.message();
  } else if (write) {
    // The initiator's part of a write ended well; the target checks the data and its answer is the cell's.
    r.verdict = Verdict::kOk;
  }
  return r;
}

Status TransportBackend::run(const RunRequest& req, const EmitFn& emit) {
  if (gpus_.empty()) return PEERLAB_INTERNAL("run before setup");
  if (req.timeout_ms > 0) timeout_ms_ = req.timeout_ms;
  for (const CellSpec& c : req.cells) {
    const auto t0 = Clock::now();
    CellResult r;
    r.id = c.id;
    r.seed = c.seed;
    auto answer = [&](Verdict v, const std::string& why) {
      r.verdict = v;
      r.error = why;
      r.time_us = usSince(t0);
      return emit(r);
    };
    if (c.src < 0 || c.dst < 0 || c.src >= n_ || c.dst >= n_ || c.src == c.dst || !isTransportMethod(c.method) ||
        transportLibraryOf(c.method) != transport::libraryName(library_) || c.bytes == 0 || c.bytes % 16 != 0 ||
        c.bytes > max_bytes_ || req.phase != Phase::kLocal) {
      return PEERLAB_INVALID_ARGUMENT(std::string(methodName(c.method)) + " " + std::to_string(c.src) + "->" +
                                      std::to_string(c.dst) + " " + std::to_string(c.bytes) +
                                      " B is not a job for this " + std::string(transport::libraryName(library_)) +
                                      " worker");
    }
    if (!unsupported_.isOk()) {
      PEERLAB_RETURN_IF_ERROR(answer(Verdict::kUnsupported, unsupported_.message()));
      continue;
    }
    if (!broken_.isOk()) {
      PEERLAB_RETURN_IF_ERROR(answer(Verdict::kError, broken_.message()));
      continue;
    }
    const auto fault = inject_.find(c, role_, Phase::kLocal);
    bool fatal = false;
    auto result = role_ == Role::kOwner ? target(c, fault) : initiate(c, fault, &fatal);
    if (!result.isOk()) {
      // The bootstrap failed (the peer died or went silent) or the GPU failed: this worker is done.
      (void)answer(verdictOf(result.status().code()), result.status().message());
      return result.status();
    }
    r = *result;
    r.id = c.id;
    r.seed = c.seed;
    r.time_us = usSince(t0);
    PEERLAB_RETURN_IF_ERROR(emit(r));
    if (fatal) return PEERLAB_TIMEOUT("a transfer was still running at its deadline");
  }
  return Status::ok();
}

}  // namespace

std::unique_ptr<Backend> makeTransportBackend(const std::string& library, InjectPlan inject) {
  const auto lib = transport::parseLibrary(library);
  return std::make_unique<TransportBackend>(lib.value_or(transport::Library::kUcx), std::move(inject));
}

}  // namespace peerlab::probe
