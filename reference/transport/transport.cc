#include "reference/transport/transport.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>

#include <cuda_runtime_api.h>

#include "reference/transport/nixl_api.h"
#include "reference/transport/ucx_api.h"

namespace peerlab::transport {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string_view libraryName(Library library) {
  return library == Library::kNixl ? "nixl" : "ucx";
}

std::optional<Library> parseLibrary(std::string_view name) {
  if (name == "nixl") return Library::kNixl;
  if (name == "ucx") return Library::kUcx;
  return std::nullopt;
}

std::string Found::describe(Library library) const {
  const std::string who = library == Library::kNixl ? "NIXL" : "UCX";
  if (!found) return who + " not found (" + how + ")";
  return who + ": " + path + " (" + how + (cuda_module ? ", CUDA module present" : ", no CUDA module") + ")";
}

Found findLibrary(Library library) {
  Found out;
  std::error_code ec;
  if (library == Library::kUcx) {
    const ucx::Location loc = ucx::locateUcx();
    out.found = loc.found;
    out.path = loc.library;
    out.how = loc.how;
    out.cuda_module = loc.found && ucx::ucxHasCudaModule(loc.library);
    return out;
  }
  const nixl::Location loc = nixl::locateNixl();
  out.found = loc.found;
  out.path = loc.library;
  out.how = loc.how;
  if (loc.found) {
    // The UCX that NIXL bundles sits in the wheel's <name>.libs/ directory beside the one holding libnixl_capi.so.
    const fs::path dir = fs::path(loc.library).parent_path();
    for (const fs::path& libs : {dir.parent_path() / "nixl_cu13.libs", dir.parent_path() / "nixl_cu12.libs", dir}) {
      for (const auto& e : fs::directory_iterator(libs / "ucx", ec)) {
        if (e.path().filename().string().rfind("libuct_cuda.so", 0) == 0) out.cuda_module = true;
      }
    }
  }
  return out;
}

std::string memoryTypesText(uint64_t mask) {
  std::string out;
  for (int t = 0; t < 16; ++t) {
    if (mask & (1ull << t)) out += (out.empty() ? "" : ", ") + ucx::memoryTypeName(t);
  }
  return out.empty() ? "none" : out;
}

Status judgeCapability(const CapabilityReport& r) {
  if (r.library == Library::kUcx) {
    if (!r.has_device_regions) return Status::ok();
    if (!r.context_known) {
      return PEERLAB_UNAVAILABLE("UCX: the context did not report its memory types; GPU memory support unknown");
    }
    const bool context_cuda = (r.context_types & (1ull << ucx::kMemoryCuda)) != 0;
    std::string registered;
    bool all_cuda = true;
    for (int t : r.region_types) {
      all_cuda &= t == ucx::kMemoryCuda || t == ucx::kMemoryCudaManaged;
      if (registered.find(ucx::memoryTypeName(t)) == std::string::npos)
        registered += (registered.empty() ? "" : ", ") + ucx::memoryTypeName(t);
    }
    if (!context_cuda || !all_cuda) {
      // A context that lists CUDA yet registers a GPU buffer as host memory: UCX's memory type detection missed it
      // (typically its memory type cache, which only knows allocations its CUDA memory hooks saw).
      const std::string hint =
          context_cuda ? "; the context lists CUDA, so UCX's memory type detection took the GPU buffers for host "
                         "memory (its memory type cache learns of GPU allocations only through the CUDA memory "
                         "hooks, ucx/libucm_cuda.so; UCX_MEMTYPE_CACHE=n makes it ask the driver)"
                       : "";
      return PEERLAB_UNAVAILABLE(
          std::string(kUcxNoCudaReason) + " (context memory types: " + memoryTypesText(r.context_types) +
          (registered.empty() ? std::string() : "; GPU buffers registered as " + registered) + ")" + hint);
    }
    return Status::ok();
  }
  if (r.backend_status != nixl::kSuccess) {
    return PEERLAB_UNAVAILABLE("NIXL: the UCX backend could not be created: " + nixl::statusName(r.backend_status));
  }
  if (r.has_device_regions && r.context_known) {
    // NIXL's bundled UCX, asked directly: the same rule as for a UCX endpoint.
    CapabilityReport bundled = r;
    bundled.library = Library::kUcx;
    if (Status st = judgeCapability(bundled); !st.isOk()) return st.withContext("NIXL's UCX " + r.version);
  }
  if (!r.has_device_regions) {
    if (r.register_status != nixl::kSuccess)
      return PEERLAB_UNAVAILABLE("NIXL: registering host memory failed: " + nixl::statusName(r.register_status));
    return Status::ok();
  }
  if (!r.backend_lists_vram) {
    return PEERLAB_UNAVAILABLE("NIXL: its UCX backend does not list VRAM among its memory types");
  }
  if (r.register_status != nixl::kSuccess) {
    return PEERLAB_UNAVAILABLE("NIXL: registering GPU memory (VRAM) failed: " + nixl::statusName(r.register_status) +
                               " (a UCX without CUDA reports GPU memory as host memory)");
  }
  if (r.prepare_status != nixl::kSuccess) {
    return PEERLAB_UNAVAILABLE("NIXL: preparing a descriptor list of GPU memory failed: " +
                               nixl::statusName(r.prepare_status));
  }
  return Status::ok();
}

std::string_view waitModeName(WaitMode mode) {
  switch (mode) {
    case WaitMode::kSpin:
      return "spin";
    case WaitMode::kYield:
      return "yield";
    case WaitMode::kProgressThread:
      return "progress";
  }
  return "spin";
}

std::optional<WaitMode> parseWaitMode(std::string_view name) {
  for (WaitMode m : {WaitMode::kSpin, WaitMode::kYield, WaitMode::kProgressThread}) {
    if (waitModeName(m) == name) return m;
  }
  return std::nullopt;
}

StatusOr<std::unique_ptr<Endpoint>> Endpoint::connect(Bootstrap& boot, const EndpointOptions& o) {
  if (o.peer < 0 || o.peer >= boot.size() || o.peer == boot.rank()) {
    return PEERLAB_INVALID_ARGUMENT("transport: peer rank " + std::to_string(o.peer) + " of " +
                                    std::to_string(boot.size()));
  }
  if (o.regions.empty()) return PEERLAB_INVALID_ARGUMENT("transport: no region to offer");
  for (const Region& r : o.regions) {
    if (r.ptr == nullptr || r.bytes == 0) return PEERLAB_INVALID_ARGUMENT("transport: an empty region");
    if (r.kind != o.regions.front().kind) {
      return PEERLAB_INVALID_ARGUMENT("transport: regions of one endpoint must all be host or all be device memory");
    }
  }
  auto ep = o.library == Library::kNixl ? connectNixl(boot, o) : connectUcx(boot, o);
  if (!ep.isOk()) return ep.status();
  if (o.progress_thread) {
    (*ep)->device_ = o.progress_device;
    PEERLAB_RETURN_IF_ERROR((*ep)->startProgress());
  }
  return ep;
}

Endpoint::~Endpoint() {
  stopProgress();
}

Status Endpoint::checkTransfer(const Transfer& t) const {
  if (t.local < 0 || t.local >= static_cast<int>(local_.size()) || t.remote < 0 ||
      t.remote >= static_cast<int>(remote_.size())) {
    return PEERLAB_INVALID_ARGUMENT("transfer: region " + std::to_string(t.local) + " -> " + std::to_string(t.remote) +
                                    " outside the " + std::to_string(local_.size()) + " local and " +
                                    std::to_string(remote_.size()) + " remote regions");
  }
  if (t.bytes == 0 || t.local_offset + t.bytes > local_[t.local].bytes ||
      t.remote_offset + t.bytes > remote_[t.remote].bytes) {
    return PEERLAB_INVALID_ARGUMENT("transfer: " + std::to_string(t.bytes) + " bytes at offsets " +
                                    std::to_string(t.local_offset) + " / " + std::to_string(t.remote_offset) +
                                    " do not fit the regions");
  }
  return Status::ok();
}

StatusOr<RequestId> Endpoint::prepare(const Transfer& t) {
  PEERLAB_RETURN_IF_ERROR(checkTransfer(t));
  std::lock_guard<std::mutex> lock(mu_);
  return prepareLocked(t);
}

Status Endpoint::release(RequestId id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (in_flight_.count(id)) return PEERLAB_INVALID_ARGUMENT("release: request still posted");
  return releaseLocked(id);
}

StatusOr<Ticket> Endpoint::post(RequestId id, PostTiming* timing) {
  std::lock_guard<std::mutex> lock(mu_);
  if (in_flight_.count(id)) return PEERLAB_INVALID_ARGUMENT("post: the request's previous post is still running");
  const auto t0 = Clock::now();
  PEERLAB_RETURN_IF_ERROR(postLocked(id));
  if (timing) timing->post_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  const Ticket t = next_ticket_++;
  posted_[t] = Posted{id, false, Status::ok()};
  in_flight_[id] = t;
  return t;
}

StatusOr<bool> Endpoint::testHeld(Ticket ticket) {
  auto it = posted_.find(ticket);
  if (it == posted_.end()) {
    // Collected before: a ticket below the next one was posted and is done.
    if (ticket > 0 && ticket < next_ticket_) return true;
    return PEERLAB_INVALID_ARGUMENT("test: ticket " + std::to_string(ticket) + " was never posted");
  }
  Posted& p = it->second;
  if (!p.done) {
    StatusOr<bool> done = testLocked(p.id);
    if (!done.isOk()) {
      p.done = true;
      p.failure = done.status();
    } else {
      p.done = *done;
    }
    if (p.done) in_flight_.erase(p.id);
  }
  if (!p.done) return false;
  Status failure = p.failure;
  // A ticket the progress thread watches (or a blocked waiter waits for) is collected there.
  if (!watched_.count(ticket) && !waiting_.count(ticket)) posted_.erase(it);
  if (!failure.isOk()) return failure;
  return true;
}

StatusOr<bool> Endpoint::test(Ticket ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  return testHeld(ticket);
}

namespace {

// Sleeps between polls after a short spin, so a waiting thread leaves its core to others.
class Backoff {
 public:
  void pause() {
    if (Clock::now() - start_ < std::chrono::microseconds(10)) return;
    timespec ts{0, 20'000};
    ::nanosleep(&ts, nullptr);
  }

 private:
  Clock::time_point start_ = Clock::now();
};

}  // namespace

Status Endpoint::wait(Ticket ticket, WaitMode mode, Deadline deadline) {
  const std::string what = std::string(libraryName(library_)) + " transfer " + std::to_string(ticket);
  if (mode == WaitMode::kProgressThread) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!progress_.joinable()) return PEERLAB_INVALID_ARGUMENT("wait: no progress thread (EndpointOptions)");
    auto it = posted_.find(ticket);
    if (it == posted_.end()) return ticket > 0 && ticket < next_ticket_ ? Status::ok() : PEERLAB_INVALID_ARGUMENT(what);
    waiting_.insert(ticket);
    cv_.notify_all();
    const bool finished = cv_.wait_until(lock, deadline.when(), [&] { return posted_.at(ticket).done; });
    waiting_.erase(ticket);
    if (!finished) return PEERLAB_TIMEOUT(what + " still running at the deadline");
    Status failure = posted_.at(ticket).failure;
    if (!watched_.count(ticket)) posted_.erase(ticket);
    return failure;
  }
  Backoff backoff;
  for (;;) {
    PEERLAB_ASSIGN_OR_RETURN(bool done, test(ticket));
    if (done) return Status::ok();
    if (deadline.expired()) return PEERLAB_TIMEOUT(what + " still running at the deadline");
    if (mode == WaitMode::kYield) backoff.pause();
  }
}

StatusOr<uint64_t> Endpoint::notifications() {
  std::lock_guard<std::mutex> lock(mu_);
  return notificationsLocked();
}

Status Endpoint::waitNotifications(uint64_t count, WaitMode mode, Deadline deadline) {
  Backoff backoff;
  for (;;) {
    PEERLAB_ASSIGN_OR_RETURN(uint64_t n, notifications());
    if (n >= count) return Status::ok();
    if (deadline.expired()) {
      return PEERLAB_TIMEOUT(std::string(libraryName(library_)) + ": " + std::to_string(n) + " of " +
                             std::to_string(count) + " notifications from the peer by the deadline");
    }
    if (mode != WaitMode::kSpin) backoff.pause();
  }
}

uint64_t Endpoint::completedPrefix() const {
  std::lock_guard<std::mutex> lock(mu_);
  return prefix_;
}

Status Endpoint::watch(Ticket ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!progress_.joinable()) return PEERLAB_INVALID_ARGUMENT("watch: no progress thread (EndpointOptions)");
  if (!posted_.count(ticket)) return Status::ok();
  watched_.insert(ticket);
  cv_.notify_all();
  return Status::ok();
}

void Endpoint::onPrefix(std::function<void(uint64_t)> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  on_prefix_ = std::move(fn);
}

Status Endpoint::startProgress() {
  std::lock_guard<std::mutex> lock(mu_);
  if (progress_.joinable()) return Status::ok();
  stop_ = false;
  progress_ = std::thread([this] {
    // The library may look at CUDA events and streams of the transfers from this thread.
    if (device_ >= 0 && cudaSetDevice(device_) != cudaSuccess) (void)cudaGetLastError();
    progressLoop();
  });
  return Status::ok();
}

void Endpoint::stopProgress() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (progress_.joinable()) progress_.join();
}

void Endpoint::progressLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (watched_.empty() && waiting_.empty()) {
      // Nothing of this side's own to finish: keep the library moving for the peer's one-sided transfers (a get
      // or put that needs this side's progress), at a low rate.
      idleLocked();
      cv_.wait_for(lock, std::chrono::microseconds(100),
                   [&] { return stop_ || !watched_.empty() || !waiting_.empty(); });
      continue;
    }
    bool changed = false;
    std::vector<Ticket> poll(watched_.begin(), watched_.end());
    poll.insert(poll.end(), waiting_.begin(), waiting_.end());
    for (Ticket t : poll) {
      auto it = posted_.find(t);
      if (it == posted_.end() || it->second.done) continue;
      (void)testHeld(t);
      changed |= posted_.count(t) == 0 || posted_.at(t).done;
    }
    // The prefix of finished tickets: a post that is no longer outstanding (collected or done) counts as finished.
    uint64_t prefix = prefix_;
    while (prefix + 1 < next_ticket_) {
      auto it = posted_.find(prefix + 1);
      if (it != posted_.end() && !it->second.done) break;
      ++prefix;
    }
    if (prefix != prefix_) {
      prefix_ = prefix;
      if (on_prefix_) on_prefix_(prefix);
      for (auto it = watched_.begin(); it != watched_.end() && *it <= prefix_;) {
        if (!waiting_.count(*it)) posted_.erase(*it);
        it = watched_.erase(it);
      }
    }
    if (changed) cv_.notify_all();
    // Let the posting thread in between polls.
    lock.unlock();
    std::this_thread::yield();
    lock.lock();
  }
}

std::vector<std::pair<size_t, size_t>> nixlDescriptorPieces(size_t bytes, size_t limit) {
  size_t pieces = 1;
  if (limit > 0 && bytes > limit) pieces = std::min(kNixlMaxDescriptors, (bytes + limit - 1) / limit);
  const size_t piece = (bytes + pieces - 1) / pieces;
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t at = 0; out.empty() || at < bytes; at += piece)
    out.emplace_back(at, std::min(piece, bytes - at));
  return out;
}

namespace detail {

StatusOr<std::vector<uint8_t>> tradeBlob(Bootstrap& boot, int peer, const std::vector<uint8_t>& bytes,
                                         Deadline deadline) {
  const uint64_t mine = bytes.size();
  PEERLAB_RETURN_IF_ERROR(boot.send(peer, &mine, sizeof(mine), deadline));
  if (mine > 0) PEERLAB_RETURN_IF_ERROR(boot.send(peer, bytes.data(), bytes.size(), deadline));
  uint64_t theirs = 0;
  PEERLAB_RETURN_IF_ERROR(boot.recv(peer, &theirs, sizeof(theirs), deadline));
  if (theirs > (64u << 20))
    return PEERLAB_INTERNAL("transport: the peer announced " + std::to_string(theirs) + " bytes");
  std::vector<uint8_t> out(theirs);
  if (theirs > 0) PEERLAB_RETURN_IF_ERROR(boot.recv(peer, out.data(), out.size(), deadline));
  return out;
}

Status agreeCapability(Bootstrap& boot, int peer, const Status& mine, Deadline deadline) {
  const std::string text = mine.isOk() ? std::string() : mine.message();
  PEERLAB_ASSIGN_OR_RETURN(auto theirs,
                           tradeBlob(boot, peer, std::vector<uint8_t>(text.begin(), text.end()), deadline));
  const std::string other(theirs.begin(), theirs.end());
  if (text.empty() && other.empty()) return Status::ok();
  std::string why;
  if (!text.empty()) why = "rank " + std::to_string(boot.rank()) + ": " + text;
  if (!other.empty()) why += (why.empty() ? "" : "; ") + ("rank " + std::to_string(peer) + ": " + other);
  return PEERLAB_UNAVAILABLE(why);
}

}  // namespace detail

}  // namespace peerlab::transport
