#include "harness/watchdog/probe_runner.h"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <tuple>

#include "harness/watchdog/probe_protocol.h"
#include "reference/core/devices.h"
#include "reference/core/files.h"
#include "reference/core/local_bootstrap.h"
#include "reference/nccl/version.h"

namespace peerlab::probe {

namespace {

using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::duration<double, std::milli>>(Clock::now() - t).count();
}

constexpr auto kKillGrace = std::chrono::milliseconds(200);
constexpr int kMaxAttempts = 3;

struct Worker {
  explicit Worker(Role r) : role(r) {}
  Role role;
  watchdog::Child child;
  bool spawned = false;
  bool ready = false;
  int generation = 0;
  std::vector<Timing> timings;
  std::string name() const { return std::string(roleName(role)) + " worker"; }
};

struct Incoming {
  Decoded msg;
  std::vector<Fd> fds;
};

// What came back from one batch: the answers, and why the rest did not come.
struct Exchange {
  std::map<uint32_t, CellResult> answers;
  bool failed = false;
  Verdict verdict = Verdict::kError;
  std::string why;
};

bool sameGpus(const Inventory& a, const Inventory& b) {
  if (a.count() != b.count()) return false;
  for (int i = 0; i < a.count(); ++i) {
    if (a.gpus[i].uuid != b.gpus[i].uuid) return false;
  }
  return true;
}

}  // namespace

struct ProbeSession::Impl {
  RunnerOptions opt;
  Clock::time_point t0;
  Worker owner{Role::kOwner};
  Worker importer{Role::kImporter};
  bool need_importer = false;
  bool importer_pending = false;  // setup and import sent, answers not read yet
  Inventory inventory;
  Exports exports;
  std::vector<Fd> export_fds;
  int owner_generation = 0;
  int starts = 0;
  int owner_starts = 0;
  int importer_starts = 0;
  int restarts = 0;
  std::vector<CellReport> reports;
  std::vector<bool> done;
  std::vector<int> attempts;
  std::deque<uint32_t> solo;
  std::vector<PhaseTime> phases;

  uint32_t timeoutMs() const { return static_cast<uint32_t>(opt.cell_timeout.count()); }
  Deadline setupDeadline() const { return Deadline::after(opt.setup_timeout); }

  Status spawn(Worker& w) {
    watchdog::SpawnOptions so;
    so.argv = opt.worker_argv;
    so.env = opt.worker_env;
    auto child = watchdog::Child::spawn(so);
    if (!child.isOk()) return child.status().withContext("starting the " + w.name());
    w.child = std::move(child).value();
    w.spawned = true;
    w.ready = false;
    ++starts;
    ++(w.role == Role::kOwner ? owner_starts : importer_starts);
    return Status::ok();
  }

  // Kills and reaps; the worker is started again when next needed.
  void retire(Worker& w) {
    if (w.spawned) (void)w.child.kill(kKillGrace);
    w.spawned = false;
    w.ready = false;
    if (&w == &importer) importer_pending = false;
  }

  void retireOwner() {
    retire(owner);
    // The importer's mappings referred to the old owner's memory.
    retire(importer);
  }

  std::string describeDeath(Worker& w) {
    auto ended = w.child.wait(Deadline::afterMs(2000));
    const watchdog::ExitStatus e = ended.isOk() ? *ended : w.child.kill(kKillGrace);
    w.spawned = false;
    w.ready = false;
    return w.name() + " " + e.describe();
  }

  StatusOr<Incoming> receive(Worker& w, Deadline deadline, const std::string& waiting_for) {
    auto msg = w.child.receive(deadline);
    if (!msg.isOk()) {
      if (msg.status().code() == StatusCode::kTimeout) {
        return PEERLAB_TIMEOUT(w.name() + ": no " + waiting_for + " before the deadline");
      }
      if (msg.status().code() == StatusCode::kUnavailable) {
        return PEERLAB_UNAVAILABLE(describeDeath(w) + " before its " + waiting_for);
      }
      return msg.status().withContext(w.name());
    }
    auto decoded = decode(msg->bytes);
    if (!decoded.isOk()) return decoded.status().withContext(w.name() + " answered garbage");
    if (decoded->type == MessageType::kFatal) {
      return PEERLAB_INTERNAL(w.name() + ": " + decoded->fatal.reason);
    }
    return Incoming{std::move(decoded).value(), std::move(msg->fds)};
  }

  StatusOr<Inventory> awaitInventory(Worker& w) {
    PEERLAB_ASSIGN_OR_RETURN(Incoming in, receive(w, setupDeadline(), "inventory"));
    if (in.msg.type != MessageType::kInventory) {
      return PEERLAB_INTERNAL(w.name() + " sent " + std::string(messageTypeName(in.msg.type)) +
                              " before its inventory");
    }
    return std::move(in.msg.inventory);
  }

  Status sendSetup(Worker& w) {
    SetupRequest req;
    req.role = w.role;
    req.max_bytes = *std::max_element(opt.sizes.begin(), opt.sizes.end());
    req.timeout_ms = timeoutMs();
    req.exports = w.role == Role::kOwner && need_importer;
    Status st = w.child.send(encode(req), setupDeadline());
    return st.withContext("sending setup to the " + w.name());
  }

  Status awaitReady(Worker& w, const char* step) {
    PEERLAB_ASSIGN_OR_RETURN(Incoming in, receive(w, setupDeadline(), step));
    if (in.msg.type != MessageType::kReady) {
      return PEERLAB_INTERNAL(w.name() + " sent " + std::string(messageTypeName(in.msg.type)) + " instead of ready");
    }
    auto& ready = in.msg.ready;
    if (!ready.error.empty()) return PEERLAB_INTERNAL(w.name() + " " + step + " failed: " + ready.error);
    for (auto& t : ready.timings)
      w.timings.push_back(std::move(t));
    if (w.role == Role::kOwner && std::string(step) == "setup") {
      if (in.fds.size() != ready.exports.vmmCount()) {
        return PEERLAB_INTERNAL(w.name() + " sent " + std::to_string(in.fds.size()) + " descriptors for " +
                                std::to_string(ready.exports.vmmCount()) + " VMM exports");
      }
      exports = std::move(ready.exports);
      export_fds = std::move(in.fds);
    }
    return Status::ok();
  }

  Status sendImport(Worker& w) {
    std::vector<int> fds;
    for (const auto& fd : export_fds)
      fds.push_back(fd.get());
    return w.child.send(encode(exports), setupDeadline(), fds).withContext("sending the exports to the " + w.name());
  }

  Status checkInventory(Worker& w, const Inventory& inv) {
    if (!inv.error.empty()) return PEERLAB_INTERNAL(w.name() + ": " + inv.error);
    if (!sameGpus(inv, inventory)) return PEERLAB_INTERNAL(w.name() + " sees other GPUs than the first owner");
    return Status::ok();
  }

  Status countRestart() {
    if (restarts >= opt.max_restarts) {
      return PEERLAB_INTERNAL("gave up after " + std::to_string(restarts) + " worker restarts");
    }
    ++restarts;
    return Status::ok();
  }

  Status startOwner() {
    retireOwner();
    PEERLAB_RETURN_IF_ERROR(countRestart());
    owner.timings.clear();
    auto body = [&]() -> Status {
      PEERLAB_RETURN_IF_ERROR(spawn(owner));
      PEERLAB_ASSIGN_OR_RETURN(Inventory inv, awaitInventory(owner));
      PEERLAB_RETURN_IF_ERROR(checkInventory(owner, inv));
      PEERLAB_RETURN_IF_ERROR(sendSetup(owner));
      PEERLAB_RETURN_IF_ERROR(awaitReady(owner, "setup"));
      owner.ready = true;
      owner.generation = ++owner_generation;
      return Status::ok();
    };
    Status st = body();
    if (!st.isOk()) retireOwner();
    return st;
  }

  Status startImporter() {
    retire(importer);
    PEERLAB_RETURN_IF_ERROR(countRestart());
    importer.timings.clear();
    auto body = [&]() -> Status {
      PEERLAB_RETURN_IF_ERROR(spawn(importer));
      PEERLAB_ASSIGN_OR_RETURN(Inventory inv, awaitInventory(importer));
      PEERLAB_RETURN_IF_ERROR(checkInventory(importer, inv));
      PEERLAB_RETURN_IF_ERROR(sendSetup(importer));
      PEERLAB_RETURN_IF_ERROR(awaitReady(importer, "setup"));
      PEERLAB_RETURN_IF_ERROR(sendImport(importer));
      PEERLAB_RETURN_IF_ERROR(awaitReady(importer, "import"));
      importer.ready = true;
      importer.generation = owner_generation;
      return Status::ok();
    };
    Status st = body();
    if (!st.isOk()) retire(importer);
    return st;
  }

  Status ensureOwner() { return owner.ready ? Status::ok() : startOwner(); }

  Status ensureImporter() {
    PEERLAB_RETURN_IF_ERROR(ensureOwner());
    if (importer_pending) {
      // The first start: setup and import were sent while the owner's cells ran; collect both answers now.
      importer_pending = false;
      Status st = awaitReady(importer, "setup");
      if (st.isOk()) st = awaitReady(importer, "import");
      if (!st.isOk()) {
        retire(importer);
        return st;
      }
      importer.ready = true;
      importer.generation = owner_generation;
      return Status::ok();
    }
    if (importer.ready && importer.generation == owner_generation) return Status::ok();
    return startImporter();
  }

  // The first start: both workers were spawned together; their CUDA setup overlaps.
  Status startBoth() {
    PEERLAB_RETURN_IF_ERROR(sendSetup(owner));
    if (need_importer) {
      PEERLAB_ASSIGN_OR_RETURN(Inventory inv, awaitInventory(importer));
      PEERLAB_RETURN_IF_ERROR(checkInventory(importer, inv));
      PEERLAB_RETURN_IF_ERROR(sendSetup(importer));
    }
    PEERLAB_RETURN_IF_ERROR(awaitReady(owner, "setup"));
    owner.ready = true;
    owner.generation = ++owner_generation;
    if (need_importer) {
      // The importer takes the exports after its own setup; its answers are collected before the first IPC cell,
      // so the owner's cells do not wait for it.
      PEERLAB_RETURN_IF_ERROR(sendImport(importer));
      importer_pending = true;
    }
    return Status::ok();
  }

  void finalize(uint32_t id, CellResult r) {
    r.id = id;
    r.seed = reports[id].spec.seed;
    reports[id].result = std::move(r);
    done[id] = true;
  }

  void finalizeError(uint32_t id, Verdict v, const std::string& why, uint64_t time_us = 0) {
    CellResult r;
    r.verdict = v;
    r.error = why;
    r.time_us = time_us;
    finalize(id, std::move(r));
  }

  // Cells allowed another attempt; a cell whose workers failed kMaxAttempts times gets the last reason.
  std::vector<uint32_t> admit(const std::vector<uint32_t>& ids) {
    std::vector<uint32_t> out;
    for (uint32_t id : ids) {
      if (done[id]) continue;
      if (++attempts[id] > kMaxAttempts) {
        finalizeError(id, Verdict::kError, "workers failed on " + std::to_string(kMaxAttempts) + " attempts");
        continue;
      }
      out.push_back(id);
    }
    return out;
  }

  // A worker's next message before the deadline; a silence, a death or garbage fails the exchange with its reason.
  std::optional<Decoded> nextAnswer(Worker& w, Deadline deadline, Exchange& ex) {
    auto fail = [&](Verdict v, std::string why) {
      ex.failed = true;
      ex.verdict = v;
      ex.why = std::move(why);
    };
    auto msg = w.child.receive(deadline);
    if (!msg.isOk()) {
      if (msg.status().code() == StatusCode::kTimeout) {
        fail(Verdict::kHang,
             "no answer within " + std::to_string(opt.cell_timeout.count()) + " ms; " + w.name() + " killed");
      } else if (msg.status().code() == StatusCode::kUnavailable) {
        fail(Verdict::kError, describeDeath(w));
      } else {
        fail(Verdict::kError, w.name() + ": " + msg.status().message());
      }
      return std::nullopt;
    }
    auto decoded = decode(msg->bytes);
    if (!decoded.isOk()) {
      fail(Verdict::kError, w.name() + " answered garbage (" + decoded.status().message() + "); killed");
      return std::nullopt;
    }
    return std::move(*decoded);
  }

  Exchange exchange(Worker& w, Phase phase, const std::vector<uint32_t>& ids) {
    Exchange ex;
    auto fail = [&](Verdict v, std::string why) {
      ex.failed = true;
      ex.verdict = v;
      ex.why = std::move(why);
    };
    RunRequest req;
    req.phase = phase;
    req.timeout_ms = timeoutMs();
    for (uint32_t id : ids)
      req.cells.push_back(reports[id].spec);
    std::set<uint32_t> open(ids.begin(), ids.end());
    Status sent = w.child.send(encode(req), Deadline::after(opt.cell_timeout));
    bool batch_done = false;
    if (!sent.isOk()) {
      fail(Verdict::kError, sent.code() == StatusCode::kUnavailable ? describeDeath(w) : sent.toString());
    }
    Deadline deadline = Deadline::after(opt.cell_timeout);
    while (!ex.failed && (!open.empty() || !batch_done)) {
      std::optional<Decoded> decoded = nextAnswer(w, deadline, ex);
      if (!decoded) break;
      switch (decoded->type) {
        case MessageType::kCellDone: {
          auto& r = decoded->cell;
          if (!open.count(r.id)) {
            fail(Verdict::kError, w.name() + " answered for cell " + std::to_string(r.id) + ", not in its batch");
            break;
          }
          if (r.seed != reports[r.id].spec.seed) {
            fail(Verdict::kError, w.name() + " answered with a wrong payload (seed echo differs); killed");
            break;
          }
          open.erase(r.id);
          ex.answers[r.id] = std::move(r);
          deadline = Deadline::after(opt.cell_timeout);
          break;
        }
        case MessageType::kBatchDone: {
          batch_done = true;
          const auto& fatal = decoded->batch_done.fatal;
          if (!fatal.empty()) {
            // The worker exits after this batch; cells it did not answer share the reason.
            fail(Verdict::kError, w.name() + ": " + fatal);
          } else if (!open.empty()) {
            fail(Verdict::kError, w.name() + " ended the batch without answering every cell");
          }
          break;
        }
        case MessageType::kFatal:
          fail(Verdict::kError, w.name() + ": " + decoded->fatal.reason);
          break;
        default:
          fail(Verdict::kError,
               w.name() + " sent an unexpected " + std::string(messageTypeName(decoded->type)) + " message; killed");
          break;
      }
    }
    if (ex.failed) {
      if (w.role == Role::kOwner) {
        retireOwner();
      } else {
        retire(w);
      }
    }
    return ex;
  }

  // Cells the failed batch left unanswered: the verdict when the culprit is known, otherwise each runs again alone.
  void settle(const std::vector<uint32_t>& ids, const Exchange& ex, bool alone) {
    std::vector<uint32_t> unanswered;
    for (uint32_t id : ids) {
      if (!ex.answers.count(id) && !done[id]) unanswered.push_back(id);
    }
    if (unanswered.empty()) return;
    if (!ex.failed) {
      for (uint32_t id : unanswered)
        finalizeError(id, Verdict::kError, "no answer");
      return;
    }
    if (unanswered.size() == 1 || alone) {
      const uint64_t us = ex.verdict == Verdict::kHang ? static_cast<uint64_t>(opt.cell_timeout.count()) * 1000 : 0;
      for (uint32_t id : unanswered)
        finalizeError(id, ex.verdict, ex.why, us);
      return;
    }
    for (uint32_t id : unanswered)
      solo.push_back(id);
  }

  // ---- transport methods: one pair of workers per library (NIXL and UCX never share a process) ----

  struct TransportPair {
    std::string library;
    Worker owner{Role::kOwner};
    Worker importer{Role::kImporter};
    TempDir sockets;  // the pair's local bootstrap
    bool ready = false;
    int starts = 0;
  };
  std::map<std::string, std::unique_ptr<TransportPair>> transport;

  void retirePair(TransportPair& p) {
    retire(p.importer);
    retire(p.owner);
    p.ready = false;
  }

  Status startPair(TransportPair& p) {
    retirePair(p);
    if (p.starts++ > 0) PEERLAB_RETURN_IF_ERROR(countRestart());
    PEERLAB_ASSIGN_OR_RETURN(p.sockets, TempDir::make("peerlab-probe-" + p.library));
    auto body = [&]() -> Status {
      for (Worker* w : {&p.owner, &p.importer}) {
        watchdog::SpawnOptions so;
        so.argv = opt.worker_argv;
        so.env = opt.worker_env;
        so.env.push_back(std::string(kTransportWorkerEnv) + "=" + p.library);
        for (std::string& e : localRankEnvironment(w->role == Role::kOwner ? 0 : 1, 2, p.sockets.path()))
          so.env.push_back(std::move(e));
        auto child = watchdog::Child::spawn(so);
        if (!child.isOk()) return child.status().withContext("starting the " + p.library + " " + w->name());
        w->child = std::move(child).value();
        w->spawned = true;
        ++starts;
      }
      for (Worker* w : {&p.owner, &p.importer}) {
        PEERLAB_ASSIGN_OR_RETURN(Inventory inv, awaitInventory(*w));
        PEERLAB_RETURN_IF_ERROR(checkInventory(*w, inv));
        PEERLAB_RETURN_IF_ERROR(sendSetup(*w));
      }
      // Both connect to each other inside their setup: neither answers before the other arrived.
      for (Worker* w : {&p.owner, &p.importer}) {
        PEERLAB_ASSIGN_OR_RETURN(Incoming in, receive(*w, setupDeadline(), "setup"));
        if (in.msg.type != MessageType::kReady) {
          return PEERLAB_INTERNAL(w->name() + " sent " + std::string(messageTypeName(in.msg.type)) +
                                  " instead of ready");
        }
        if (!in.msg.ready.error.empty()) return PEERLAB_INTERNAL(w->name() + " setup failed: " + in.msg.ready.error);
        w->timings = std::move(in.msg.ready.timings);
        w->ready = true;
      }
      p.ready = true;
      return Status::ok();
    };
    Status st = body();
    if (!st.isOk()) retirePair(p);
    return st.withContext(p.library + " transport workers");
  }

  // One worker's answer to a one-cell batch: the cell, then the end of the batch.
  Exchange collectOne(Worker& w, uint32_t id, Deadline deadline) {
    Exchange ex;
    auto fail = [&](Verdict v, std::string why) {
      ex.failed = true;
      ex.verdict = v;
      ex.why = std::move(why);
    };
    bool batch_done = false;
    while (!ex.failed && !batch_done) {
      std::optional<Decoded> decoded = nextAnswer(w, deadline, ex);
      if (!decoded) break;
      if (decoded->type == MessageType::kCellDone) {
        if (decoded->cell.id != id || decoded->cell.seed != reports[id].spec.seed) {
          fail(Verdict::kError, w.name() + " answered with a wrong payload (seed echo differs); killed");
          break;
        }
        ex.answers[id] = std::move(decoded->cell);
        deadline = Deadline::after(opt.cell_timeout);
      } else if (decoded->type == MessageType::kBatchDone) {
        batch_done = true;
        if (!decoded->batch_done.fatal.empty()) fail(Verdict::kError, w.name() + ": " + decoded->batch_done.fatal);
      } else {
        fail(Verdict::kError,
             w.name() + " sent an unexpected " + std::string(messageTypeName(decoded->type)) + " message; killed");
      }
    }
    return ex;
  }

  // The library's claim is its capability check: a cell it did not refuse was claimed.
  void finalizeTransport(uint32_t id, CellResult r) {
    reports[id].claimed = r.verdict != Verdict::kUnsupported;
    finalize(id, std::move(r));
  }

  void runTransport(const std::string& library, uint32_t id) {
    if (admit({id}).empty()) return;
    auto& slot = transport[library];
    if (!slot) {
      slot = std::make_unique<TransportPair>();
      slot->library = library;
    }
    TransportPair& p = *slot;
    if (!p.ready) {
      if (Status st = startPair(p); !st.isOk()) {
        finalizeError(id, Verdict::kError, "could not be started: " + st.message());
        return;
      }
    }
    RunRequest req;
    req.phase = Phase::kLocal;
    req.timeout_ms = timeoutMs();
    req.cells.push_back(reports[id].spec);
    const auto frame = encode(req);
    for (Worker* w : {&p.owner, &p.importer}) {
      if (Status st = w->child.send(frame, Deadline::after(opt.cell_timeout)); !st.isOk()) {
        const std::string why = st.code() == StatusCode::kUnavailable ? describeDeath(*w) : st.toString();
        retirePair(p);
        finalizeError(id, Verdict::kError, why);
        return;
      }
    }
    // The importer moves the data: its answer (or its silence) decides a hang; the owner waits for it.
    const Exchange a = collectOne(p.importer, id, Deadline::after(opt.cell_timeout));
    const Exchange b = a.failed ? Exchange{} : collectOne(p.owner, id, Deadline::after(opt.cell_timeout));
    if (a.failed || b.failed) {
      const Exchange& bad = a.failed ? a : b;
      retirePair(p);
      // An answer that came before the failure still says what happened to the cell.
      auto answered = bad.answers.find(id);
      if (answered != bad.answers.end() && answered->second.verdict != Verdict::kOk) {
        finalizeTransport(id, answered->second);
      } else {
        CellResult r;
        r.verdict = bad.verdict;
        r.error = bad.why;
        r.time_us = bad.verdict == Verdict::kHang ? static_cast<uint64_t>(opt.cell_timeout.count()) * 1000 : 0;
        finalizeTransport(id, r);
      }
      return;
    }
    const CellResult& init = a.answers.at(id);
    const CellResult& own = b.answers.at(id);
    // The side that owns the destination checked it; a failure on either side is the cell's verdict.
    const bool write = pushedBySource(reports[id].spec.method);
    CellResult r = write ? own : init;
    const CellResult& other = write ? init : own;
    if (r.verdict == Verdict::kOk && other.verdict != Verdict::kOk) {
      r.verdict = other.verdict;
      r.error = other.error;
    }
    r.time_us = std::max(init.time_us, own.time_us);
    finalizeTransport(id, r);
  }

  void runLocal(const std::vector<uint32_t>& ids, bool alone) {
    const auto runnable = admit(ids);
    if (runnable.empty()) return;
    if (Status st = ensureOwner(); !st.isOk()) {
      for (uint32_t id : runnable)
        finalizeError(id, Verdict::kError, "owner worker could not be started: " + st.message());
      return;
    }
    Exchange ex = exchange(owner, Phase::kLocal, runnable);
    for (auto& [id, r] : ex.answers)
      finalize(id, r);
    settle(runnable, ex, alone);
  }

  void runIpc(const std::vector<uint32_t>& ids, bool alone) {
    const auto runnable = admit(ids);
    if (runnable.empty()) return;
    if (Status st = ensureImporter(); !st.isOk()) {
      for (uint32_t id : runnable)
        finalizeError(id, Verdict::kError, "IPC workers could not be started: " + st.message());
      return;
    }
    std::map<uint32_t, uint64_t> time_us;
    // 1. The owner poisons the exported destinations.
    Exchange poison = exchange(owner, Phase::kPoison, runnable);
    std::vector<uint32_t> poisoned;
    for (auto& [id, r] : poison.answers) {
      if (r.verdict == Verdict::kOk) {
        poisoned.push_back(id);
        time_us[id] += r.time_us;
      } else {
        finalize(id, r);
      }
    }
    settle(runnable, poison, alone);
    if (poison.failed) {
      // The owner is gone and its memory with it: poisoned cells start over.
      for (uint32_t id : poisoned)
        solo.push_back(id);
      return;
    }
    if (poisoned.empty()) return;
    // 2. The importer writes through its mappings.
    Exchange write = exchange(importer, Phase::kRemoteWrite, poisoned);
    std::vector<uint32_t> written;
    for (auto& [id, r] : write.answers) {
      if (r.verdict == Verdict::kOk) {
        written.push_back(id);
        time_us[id] += r.time_us;
      } else {
        finalize(id, r);
      }
    }
    settle(poisoned, write, alone);
    if (written.empty()) return;
    // 3. The owner checks on the GPU that owns each destination.
    Exchange check = exchange(owner, Phase::kCheck, written);
    for (auto& [id, r] : check.answers) {
      r.time_us += time_us[id];
      finalize(id, r);
    }
    settle(written, check, alone);
  }
};

ProbeSession::ProbeSession(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ProbeSession::~ProbeSession() {
  stop();
}

StatusOr<std::unique_ptr<ProbeSession>> ProbeSession::start(RunnerOptions options) {
  if (options.worker_argv.empty()) return PEERLAB_INVALID_ARGUMENT("probe: no worker command");
  if (options.methods.empty()) return PEERLAB_INVALID_ARGUMENT("probe: no method selected");
  if (options.sizes.empty()) return PEERLAB_INVALID_ARGUMENT("probe: no size selected");
  for (uint64_t b : options.sizes)
    PEERLAB_RETURN_IF_ERROR(validateCellBytes(b));
  if (options.cell_timeout.count() <= 0 || options.setup_timeout.count() <= 0) {
    return PEERLAB_INVALID_ARGUMENT("probe: timeouts must be positive");
  }
  auto impl = std::make_unique<Impl>();
  impl->opt = std::move(options);
  impl->t0 = Clock::now();
  impl->need_importer = std::any_of(impl->opt.methods.begin(), impl->opt.methods.end(), isIpcMethod);
  // Both workers start before anything else; neither this process nor they have touched CUDA yet.
  PEERLAB_RETURN_IF_ERROR(impl->spawn(impl->owner));
  if (impl->need_importer) {
    if (Status st = impl->spawn(impl->importer); !st.isOk()) {
      impl->retireOwner();
      return st;
    }
  }
  auto inv = impl->awaitInventory(impl->owner);
  if (!inv.isOk()) {
    impl->retireOwner();
    return PEERLAB_UNAVAILABLE("probe worker could not start: " + inv.status().message());
  }
  impl->inventory = *inv;
  impl->phases.push_back({"spawn_inventory", msSince(impl->t0)});
  std::unique_ptr<ProbeSession> session(new ProbeSession(std::move(impl)));
  session->inventory_ = session->impl_->inventory;
  return session;
}

int ProbeSession::workersStarted() const {
  return impl_ ? impl_->starts : 0;
}

StatusOr<std::vector<CellSpec>> ProbeSession::cells() const {
  const RunnerOptions& opt = impl_->opt;
  const int n = inventory_.count();
  std::vector<Pair> pairs = opt.pairs.empty() ? allPairs(n) : opt.pairs;
  for (const Pair& p : pairs) {
    if (p.first >= n || p.second >= n) {
      return PEERLAB_INVALID_ARGUMENT("pair " + std::to_string(p.first) + "-" + std::to_string(p.second) + ": only " +
                                      std::to_string(n) + " GPUs are visible");
    }
  }
  std::vector<CellSpec> out;
  for (Method m : opt.methods) {
    for (uint64_t bytes : opt.sizes) {
      for (const Pair& p : pairs) {
        CellSpec c;
        c.id = static_cast<uint32_t>(out.size());
        c.method = m;
        c.src = p.first;
        c.dst = p.second;
        c.bytes = bytes;
        c.seed = cellSeed(opt.run_seed, m, bytes, p.first, p.second);
        out.push_back(c);
      }
    }
  }
  return out;
}

StatusOr<ProbeResult> ProbeSession::run() {
  Impl& s = *impl_;
  if (!inventory_.error.empty()) return PEERLAB_UNAVAILABLE("no CUDA device: " + inventory_.error);
  PEERLAB_ASSIGN_OR_RETURN(std::vector<CellSpec> specs, cells());
  s.reports.clear();
  for (const CellSpec& c : specs) {
    CellReport r;
    r.spec = c;
    r.claimed = claimFor(inventory_, c.method, c.src, c.dst);
    s.reports.push_back(std::move(r));
  }
  s.done.assign(specs.size(), false);
  s.attempts.assign(specs.size(), 0);

  ProbeResult out;
  if (!specs.empty()) {
    const bool any_ipc =
        std::any_of(specs.begin(), specs.end(), [](const CellSpec& c) { return isIpcMethod(c.method); });
    if (!any_ipc && s.importer.spawned) s.retire(s.importer);
    s.need_importer = any_ipc;
    auto t = Clock::now();
    if (Status st = s.startBoth(); !st.isOk()) {
      s.retireOwner();
      return PEERLAB_UNAVAILABLE("probe workers could not start: " + st.message());
    }
    s.phases.push_back({"setup", msSince(t)});

    // Cell ids by (method, size, pair), to form the batches.
    std::map<std::tuple<Method, uint64_t, int, int>, uint32_t> index;
    for (const CellSpec& c : specs)
      index[{c.method, c.bytes, c.src, c.dst}] = c.id;
    const std::vector<Pair> pairs = s.opt.pairs.empty() ? allPairs(inventory_.count()) : s.opt.pairs;
    const auto rounds = planRounds(pairs);
    auto batches = [&](bool ipc) {
      for (Method m : s.opt.methods) {
        if (isIpcMethod(m) != ipc || isTransportMethod(m)) continue;
        for (uint64_t bytes : s.opt.sizes) {
          for (const auto& round : rounds) {
            std::vector<uint32_t> ids;
            for (const Pair& p : round)
              ids.push_back(index.at({m, bytes, p.first, p.second}));
            if (ipc) {
              s.runIpc(ids, false);
            } else {
              s.runLocal(ids, false);
            }
          }
        }
      }
    };
    t = Clock::now();
    batches(false);
    s.phases.push_back({"local_cells", msSince(t)});
    if (any_ipc) {
      t = Clock::now();
      // A first importer that cannot start is a worker that cannot start, like the owner above.
      if (s.importer_pending) {
        if (Status st = s.ensureImporter(); !st.isOk()) {
          s.retireOwner();
          return PEERLAB_UNAVAILABLE("probe workers could not start: " + st.message());
        }
      }
      s.phases.push_back({"importer_wait", msSince(t)});
      t = Clock::now();
      batches(true);
      s.phases.push_back({"ipc_cells", msSince(t)});
    }
    const bool any_transport = std::any_of(s.opt.methods.begin(), s.opt.methods.end(), isTransportMethod);
    if (any_transport) {
      // One cell at a time: both workers of a library's pair take part in every cell.
      t = Clock::now();
      for (Method m : s.opt.methods) {
        if (!isTransportMethod(m)) continue;
        for (uint64_t bytes : s.opt.sizes) {
          for (const Pair& p : pairs)
            s.runTransport(std::string(transportLibraryOf(m)), index.at({m, bytes, p.first, p.second}));
        }
      }
      for (auto& [lib, pair] : s.transport) {
        for (Worker* w : {&pair->owner, &pair->importer}) {
          if (w->spawned) (void)w->child.send(encode(Quit{}), Deadline::afterMs(1000));
        }
      }
      s.phases.push_back({"transport_cells", msSince(t)});
    }
    if (!s.solo.empty()) {
      t = Clock::now();
      while (!s.solo.empty()) {
        const uint32_t id = s.solo.front();
        s.solo.pop_front();
        if (s.done[id]) continue;
        if (isTransportMethod(s.reports[id].spec.method)) {
          s.runTransport(std::string(transportLibraryOf(s.reports[id].spec.method)), id);
        } else if (isIpcMethod(s.reports[id].spec.method)) {
          s.runIpc({id}, true);
        } else {
          s.runLocal({id}, true);
        }
      }
      s.phases.push_back({"retries", msSince(t)});
    }
    for (size_t i = 0; i < specs.size(); ++i) {
      if (!s.done[i]) s.finalizeError(static_cast<uint32_t>(i), Verdict::kError, "not run");
    }
  }
  out.wall_us = msSince(s.t0) * 1000.0;
  s.phases.push_back({"total", out.wall_us / 1000.0});
  out.cells = s.reports;
  out.workers_started = s.starts;
  out.owner_starts = s.owner_starts;
  out.importer_starts = s.importer_starts;
  out.restarts = s.restarts;
  out.phases = s.phases;
  out.owner_timings = s.owner.timings;
  out.importer_timings = s.importer.timings;
  // Tell the workers to go now; stop() reaps them.
  for (Worker* w : {&s.owner, &s.importer}) {
    if (w->spawned) (void)w->child.send(encode(Quit{}), Deadline::afterMs(1000));
  }
  return out;
}

void ProbeSession::stop() {
  if (!impl_) return;
  const auto t = Clock::now();
  // A worker that was set up gets to tear its CUDA state down in order; any other one is idle or still in CUDA
  // initialization and is simply killed.
  for (Worker* w : {&impl_->owner, &impl_->importer}) {
    if (!w->spawned) continue;
    if (w->ready) {
      (void)w->child.send(encode(Quit{}), Deadline::afterMs(200));
    } else {
      (void)w->child.kill(kKillGrace);
      w->spawned = false;
    }
  }
  std::vector<Worker*> all = {&impl_->owner, &impl_->importer};
  for (auto& [lib, pair] : impl_->transport) {
    all.push_back(&pair->owner);
    all.push_back(&pair->importer);
    if (!pair->owner.ready || !pair->importer.ready) {
      // A pair that never finished its setup may wait on each other in the bootstrap: killed, not asked.
      impl_->retirePair(*pair);
    }
  }
  for (size_t i = 2; i < all.size(); ++i) {
    if (all[i]->spawned && all[i]->ready) (void)all[i]->child.send(encode(Quit{}), Deadline::afterMs(200));
  }
  for (Worker* w : all) {
    if (!w->spawned) continue;
    if (!w->child.wait(Deadline::afterMs(10000)).isOk()) (void)w->child.kill(kKillGrace);
    w->spawned = false;
    w->ready = false;
  }
  impl_->export_fds.clear();
  shutdown_ms_ = msSince(t);
}

bool cudaDriverLoadedHere() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("libcuda.so") != std::string::npos) return true;
  }
  return false;
}

std::vector<std::string> workerCommand(const std::string& peerlab_binary) {
  return {peerlab_binary, kWorkerSubcommand};
}

namespace {

[[noreturn]] void crashNow() {
  ::signal(SIGSEGV, SIG_DFL);
  ::raise(SIGSEGV);
  std::_Exit(128 + SIGSEGV);
}

}  // namespace

int serveWorker(watchdog::Channel& channel, Backend& backend, const InjectPlan& inject) {
  constexpr auto kSendLimit = std::chrono::seconds(30);
  // A worker left without work this long exits: its parent is stuck or gone.
  constexpr auto kIdleLimit = std::chrono::minutes(10);
  auto send = [&](const std::vector<uint8_t>& bytes, std::span<const int> fds = {}) {
    return channel.send(bytes, Deadline::after(kSendLimit), fds);
  };
  if (!send(encode(backend.inventory())).isOk()) return 3;
  Role role = Role::kOwner;
  for (;;) {
    auto msg = channel.receive(Deadline::after(kIdleLimit));
    if (!msg.isOk()) return msg.status().code() == StatusCode::kUnavailable ? 0 : 3;
    auto decoded = decode(msg->bytes);
    if (!decoded.isOk()) {
      (void)send(encode(Fatal{decoded.status().message()}));
      return 3;
    }
    switch (decoded->type) {
      case MessageType::kSetup: {
        const auto& req = decoded->setup;
        role = req.role;
        ReadyReport ready = backend.setup(req);
        if (!send(encode(ready), ready.fds).isOk()) return 3;
        break;
      }
      case MessageType::kImport: {
        std::vector<int> fds;
        for (auto& fd : msg->fds)
          fds.push_back(fd.release());
        ReadyReport ready = backend.import(decoded->exports, std::move(fds));
        if (!send(encode(ready)).isOk()) return 3;
        break;
      }
      case MessageType::kRun: {
        const auto& req = decoded->run;
        for (const CellSpec& c : req.cells) {
          const auto fault = inject.find(c, role, req.phase);
          if (fault == FaultKind::kCrash) crashNow();
          if (fault == FaultKind::kExit) std::_Exit(kInjectedExitCode);
        }
        Status st = backend.run(req, [&](const CellResult& r) -> Status {
          std::optional<FaultKind> fault;
          for (const CellSpec& c : req.cells) {
            if (c.id == r.id) fault = inject.find(c, role, req.phase);
          }
          if (fault == FaultKind::kGarbage) {
            static constexpr uint8_t kJunk[] = "PEERLAB_PROBE_INJECT: garbage instead of an answer";
            return send(std::vector<uint8_t>(std::begin(kJunk), std::end(kJunk)));
          }
          if (fault == FaultKind::kPayload) {
            CellResult wrong = r;
            wrong.seed ^= 0x5A5A5A5Aull;
            return send(encode(wrong));
          }
          return send(encode(r));
        });
        if (!send(encode(BatchDone{st.isOk() ? std::string() : st.message()})).isOk()) return 3;
        if (!st.isOk()) return 4;
        break;
      }
      case MessageType::kQuit:
        return 0;
      default:
        (void)send(encode(Fatal{"unexpected " + std::string(messageTypeName(decoded->type)) + " message"}));
        return 3;
    }
  }
}

int probeWorkerMain() {
  // An injected or real crash must not spend seconds writing the core of a process with GPU mappings.
  rlimit no_core{0, 0};
  (void)::setrlimit(RLIMIT_CORE, &no_core);
  auto channel = watchdog::attachToParent();
  if (!channel.isOk()) {
    std::fprintf(stderr, "peerlab %s: %s (this command is started by `peerlab probe`)\n", kWorkerSubcommand,
                 channel.status().message().c_str());
    return 2;
  }
  auto inject = injectFromEnvironment();
  if (!inject.isOk()) {
    (void)channel->send(encode(Fatal{inject.status().message()}), Deadline::afterMs(5000));
    return 2;
  }
  const char* transport = std::getenv(kTransportWorkerEnv);
  std::unique_ptr<Backend> backend =
      transport && *transport ? makeTransportBackend(transport, *inject) : makeCudaBackend(*inject);
  const int rc = serveWorker(*channel, *backend, *inject);
  // After a failure the GPU state is unknown: leave the teardown to process exit instead of waiting on it. A transport
  // worker also leaves without running the libraries' exit handlers (NIXL's bundled libraries can fault in theirs).
  if (rc != 0) std::_Exit(rc);
  if (transport && *transport) {
    backend.reset();
    std::fflush(nullptr);
    std::_Exit(0);
  }
  backend.reset();
  return 0;
}

report::Run buildRunReport(const Inventory& inventory, const std::vector<CellReport>& cells,
                           const ReportContext& context) {
  report::Run run = report::newRun();
  report::Fingerprint& fp = run.fingerprint;
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) == 0) fp.hostname = host;
  fp.driver = inventory.driverString();
  fp.cuda_runtime = inventory.runtime_api > 0 ? formatCudaVersion(inventory.runtime_api) : "unknown";
  fp.nccl = nccl::loadedVersionString();
  for (const GpuInfo& g : inventory.gpus)
    fp.gpus.push_back({g.ordinal, g.uuid, g.bus_id, g.name});
  // The fault interposer, as every command detects it; the probe's own stand-ins as this probe used them.
  fp.injected = report::detectInjection({});
  fp.injected.probe_inject = context.inject_spec;
  fp.injected.probe_worker = context.worker;

  int failed_claims = 0;
  for (const CellReport& c : cells) {
    const Judgement j = judge(c.claimed, c.result);
    failed_claims += j.lie ? 1 : 0;
    report::Result r;
    r.suite = kResultSuite;
    r.impl = "peerlab.probe";
    r.name = std::string(methodName(c.spec.method)) + "/" + std::to_string(c.spec.bytes);
    r.src = c.spec.src;
    r.dst = c.spec.dst;
    r.ranks = isIpcMethod(c.spec.method) || isTransportMethod(c.spec.method) ? 2 : 1;
    r.bytes = static_cast<double>(c.spec.bytes);
    if (c.result.time_us > 0) r.time_us = static_cast<double>(c.result.time_us);
    const bool checked = c.result.verdict == Verdict::kOk || c.result.verdict == Verdict::kCorrupt;
    if (checked) r.wrong = static_cast<double>(c.result.wrong);
    r.status = std::string(verdictName(c.result.verdict));
    r.extra["method"] = std::string(methodName(c.spec.method));
    r.extra["claimed"] = c.claimed;
    r.extra["lie"] = j.lie;
    r.extra["path"] = std::string(pathName(c.result.path));
    r.extra["first_bad"] =
        c.result.first_bad == UINT64_MAX ? nlohmann::json(nullptr) : nlohmann::json(c.result.first_bad);
    r.extra["words"] = c.result.words;
    r.extra["error"] = c.result.error;
    r.extra["cached"] = context.cached;
    for (const Fault& f : context.inject.faults()) {
      if (f.matches(c.spec)) {
        r.extra["injected"] = std::string(faultName(f.kind));
        break;
      }
    }
    run.results.push_back(std::move(r));
  }
  report::Result wall;
  wall.suite = kResultSuite;
  wall.impl = "peerlab.probe";
  wall.name = "matrix_wall";
  wall.time_us = context.wall_us;
  wall.status = "ok";
  wall.extra["cells"] = cells.size();
  wall.extra["workers"] = context.workers;
  wall.extra["failed_claims"] = failed_claims;
  wall.extra["cached"] = context.cached;
  run.results.push_back(std::move(wall));
  // The run file's probe arguments (not a suite).
  run.extra["probe"] = {{"seed", context.run_seed},
                        {"timeout_ms", context.timeout_ms},
                        {"setup_timeout_ms", context.setup_timeout_ms},
                        {"methods", context.methods},
                        {"sizes", context.sizes},
                        {"pairs", context.pairs},
                        {"cached", context.cached},
                        {"cached_created", context.cached_created},
                        {"claims_hold", failed_claims == 0},
                        {"parent_loaded_cuda", context.parent_loaded_cuda}};
  // A malformed $SLURMD_NODENAME is left out, never a reason to lose the run.
  auto local = report::localNodeIdentity(run.fingerprint);
  run.node = local.isOk() ? *local : report::nodeIdentity(run.fingerprint, report::readBoardSerial());
  return run;
}

}  // namespace peerlab::probe
