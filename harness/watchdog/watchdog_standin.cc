// A stand-in child for the CPU tests of the watchdog and the probe runner; needs no GPU.
//   watchdog_standin echo          answers each message with the same bytes and descriptors; a message "exit:N",
//                                  "segv", "hang", "ignore-term" or "spawn" makes it do that instead
//   watchdog_standin silent        attaches and never answers
//   watchdog_standin exit N        exits with N at once
//   watchdog_standin probe-worker  a probe worker whose backend pretends to have PEERLAB_STANDIN_GPUS GPUs (3)
//                                  and applies PEERLAB_PROBE_INJECT like the CUDA backend; PEERLAB_STANDIN_NO_PEER
//                                  ("1-2,...") makes the driver deny those pairs; PEERLAB_STANDIN_FAIL_IMPORT=1
//                                  makes the importer's import fail.
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "harness/watchdog/probe_runner.h"
#include "harness/watchdog/watchdog.h"
#include "reference/probe/backend.h"
#include "reference/probe/inject.h"

namespace {

using namespace peerlab;
using namespace peerlab::probe;

[[noreturn]] void sleepForever() {
  for (;;)
    std::this_thread::sleep_for(std::chrono::seconds(600));
}

class FakeBackend final : public Backend {
 public:
  FakeBackend(int gpus, std::vector<Pair> denied, InjectPlan inject)
      : gpus_(gpus), denied_(std::move(denied)), inject_(std::move(inject)) {}

  Inventory inventory() override {
    Inventory inv;
    inv.driver_api = 13000;
    inv.runtime_api = 13000;
    inv.driver_release = "999.99.01";
    if (gpus_ <= 0) {
      inv.error = "no CUDA device (stand-in)";
      return inv;
    }
    for (int i = 0; i < gpus_; ++i) {
      GpuInfo g;
      char uuid[64], bus[32];
      std::snprintf(uuid, sizeof(uuid), "GPU-00000000-0000-0000-0000-0000000000%02x", i);
      std::snprintf(bus, sizeof(bus), "0000:%02x:00.0", 0x10 + i);
      g.ordinal = i;
      g.uuid = uuid;
      g.bus_id = bus;
      g.name = "Stand-in GPU";
      g.cc_major = 9;
      g.sm_count = 132;
      g.total_memory = 1ull << 34;
      g.vmm = g.posix_fd = g.ipc_event = true;
      inv.gpus.push_back(g);
    }
    const size_t n = static_cast<size_t>(gpus_);
    inv.can_access.assign(n * n, 0);
    inv.native_atomic.assign(n * n, 0);
    for (int s = 0; s < gpus_; ++s) {
      for (int d = 0; d < gpus_; ++d) {
        const bool ok = s != d && !denied(s, d);
        inv.can_access[s * n + d] = ok;
        inv.native_atomic[s * n + d] = ok;
      }
    }
    return inv;
  }

  ReadyReport setup(const SetupRequest& req) override {
    ReadyReport out;
    out.role = role_ = req.role;
    out.timings.push_back({"contexts", 1});
    if (req.role == Role::kOwner && req.exports) {
      for (int d = 0; d < gpus_; ++d) {
        DeviceExport e;
        e.legacy_ok = true;
        e.legacy_handle.fill(static_cast<uint8_t>(d));
        const int fd = ::memfd_create("standin-vmm", MFD_CLOEXEC);
        e.vmm_ok = fd >= 0;
        e.vmm_bytes = req.max_bytes;
        if (fd >= 0) {
          fds_.push_back(fd);
          out.fds.push_back(fd);
        } else {
          e.vmm_error = "memfd_create failed";
        }
        out.exports.devices.push_back(e);
      }
    }
    return out;
  }

  ReadyReport import(const Exports& exports, std::vector<int> fds) override {
    ReadyReport out;
    out.role = role_;
    if (fds.size() != exports.vmmCount()) out.error = "descriptor count does not match the exports";
    if (const char* fail = std::getenv("PEERLAB_STANDIN_FAIL_IMPORT"); fail && *fail == '1') {
      out.error = "import refused (stand-in)";
    }
    for (int fd : fds) {
      struct stat st {};
      if (::fstat(fd, &st) != 0) out.error = "a received descriptor is not open";
      ::close(fd);
    }
    out.timings.push_back({"import", 1});
    return out;
  }

  Status run(const RunRequest& req, const EmitFn& emit) override {
    for (const CellSpec& c : req.cells) {
      CellResult r;
      r.id = c.id;
      r.seed = c.seed;
      r.verdict = Verdict::kOk;
      const bool ipc = isIpcMethod(c.method);
      const bool peer = !denied(pushedBySource(c.method) ? c.src : c.dst, pushedBySource(c.method) ? c.dst : c.src);
      r.path = ipc ? Path::kIpc : (peer ? Path::kPeer : Path::kStaged);
      if (isTransportMethod(c.method)) {
        // A transport worker (PEERLAB_PROBE_TRANSPORT): both sides of the pair answer every cell.
        r.path = Path::kIpc;
        if (const char* t = std::getenv("PEERLAB_STANDIN_TRANSPORT"); t && std::string(t) == "unsupported") {
          r.verdict = Verdict::kUnsupported;
          r.path = Path::kNone;
          r.error = "rank 0: UCX without CUDA support: GPU memory would be treated as host memory (stand-in)";
        }
        const bool checker = (role_ == Role::kOwner) == pushedBySource(c.method);
        if (checker && r.verdict == Verdict::kOk) r.words = c.bytes / kWordBytes;
      } else if (!peer && (!usesCopyEngine(c.method))) {
        r.verdict = Verdict::kUnsupported;
        r.path = Path::kNone;
        r.error = "peer access not supported (stand-in)";
      }
      const bool checks = req.phase == Phase::kLocal || req.phase == Phase::kCheck;
      if (checks && r.verdict == Verdict::kOk && !isTransportMethod(c.method)) r.words = c.bytes / kWordBytes;
      switch (inject_.find(c, role_, req.phase).value_or(FaultKind::kPayload)) {
        case FaultKind::kHang:
          sleepForever();
        case FaultKind::kError:
          r.verdict = Verdict::kError;
          r.error = "injected error (PEERLAB_PROBE_INJECT)";
          break;
        case FaultKind::kCorrupt:
          r.verdict = Verdict::kCorrupt;
          r.wrong = 1;
          r.first_bad = (c.bytes / 2) & ~static_cast<uint64_t>(kWordBytes - 1);
          break;
        default:
          break;
      }
      PEERLAB_RETURN_IF_ERROR(emit(r));
    }
    return Status::ok();
  }

  ~FakeBackend() override {
    for (int fd : fds_)
      ::close(fd);
  }

 private:
  bool denied(int s, int d) const {
    for (const Pair& p : denied_) {
      if (p.first == s && p.second == d) return true;
    }
    return false;
  }

  int gpus_;
  std::vector<Pair> denied_;
  InjectPlan inject_;
  Role role_ = Role::kOwner;
  std::vector<int> fds_;
};

int echo() {
  auto channel = watchdog::attachToParent();
  if (!channel.isOk()) return 2;
  std::optional<watchdog::Child> grandchild;
  for (;;) {
    auto msg = channel->receive(Deadline::afterMs(60'000));
    if (!msg.isOk()) return 0;
    const std::string text(msg->bytes.begin(), msg->bytes.end());
    if (text.rfind("exit:", 0) == 0) std::_Exit(std::atoi(text.c_str() + 5));
    if (text == "segv") {
      ::signal(SIGSEGV, SIG_DFL);
      ::raise(SIGSEGV);
    }
    if (text == "hang") sleepForever();
    if (text == "ignore-term") {
      ::signal(SIGTERM, SIG_IGN);
      const std::string reply = "ignoring";
      (void)channel->send({reinterpret_cast<const uint8_t*>(reply.data()), reply.size()}, Deadline::afterMs(5000));
      sleepForever();
    }
    if (text == "spawn") {
      // A child of our own under interrupt handlers: SIGINT to us must take it down and reap it.
      // The grandchild has no channel and no parent-death signal: only the handler can take it down.
      watchdog::installInterruptHandlers();
      watchdog::SpawnOptions so;
      so.argv = {"/bin/sleep", "600"};
      so.channel = false;
      auto child = watchdog::Child::spawn(so);
      const std::string reply = child.isOk() ? std::to_string(child->pid()) : "spawn failed";
      if (child.isOk()) grandchild = std::move(child).value();
      (void)channel->send({reinterpret_cast<const uint8_t*>(reply.data()), reply.size()}, Deadline::afterMs(5000));
      continue;
    }
    std::vector<int> fds;
    for (const auto& fd : msg->fds)
      fds.push_back(fd.get());
    if (!channel->send(msg->bytes, Deadline::afterMs(5000), fds).isOk()) return 3;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "echo") return echo();
  if (mode == "silent") {
    auto channel = watchdog::attachToParent();
    sleepForever();
  }
  if (mode == "exit") return argc > 2 ? std::atoi(argv[2]) : 0;
  if (mode == "probe-worker") {
    auto channel = watchdog::attachToParent();
    if (!channel.isOk()) return 2;
    auto inject = injectFromEnvironment();
    if (!inject.isOk()) return 2;
    const char* gpus = std::getenv("PEERLAB_STANDIN_GPUS");
    std::vector<Pair> denied;
    if (const char* no_peer = std::getenv("PEERLAB_STANDIN_NO_PEER"); no_peer && *no_peer) {
      auto pairs = parsePairs(no_peer);
      if (!pairs.isOk()) return 2;
      denied = *pairs;
    }
    FakeBackend backend(gpus ? std::atoi(gpus) : 3, denied, *inject);
    return serveWorker(*channel, backend, *inject);
  }
  std::fprintf(stderr, "usage: watchdog_standin echo|silent|exit N|probe-worker\n");
  return 2;
}
