// fault_drill: one short, deadline-bounded run of a primitive, for the reliability scorecard (ci/scorecard.sh) to run
// under each fault. It starts its own ranks (harness/launch runLocal, rank r on device r) and every rank prints one
// line "fault_drill {json}" naming what peerlab reported: ok, corrupt (wrong count, first bad byte), timeout, error
// (the status), and how long the wait took.
//
//   fault_drill zcopy [--protocol get|put|sm_signal] [--kind legacy|vmm] [--bytes N] [--deadline-ms D]
//   fault_drill alltoallv [--ranks N] [--transfer push|pull] [--elements E] [--calls C] [--deadline-ms D]
//   fault_drill moe_ll [--ranks N] [--tokens T] [--calls C] [--deadline-ms D]
//                      [--withhold dispatch|combine --fault-rank R] [--die-rank R]
// moe_ll runs MoE low-latency dispatch + combine rounds, each checked against the CPU reference. Two faults it injects
// itself, as the kernels' test hooks or the process can: --withhold makes rank R send its rows but never their flags
// (from its first call on), --die-rank makes rank R exit right after setup; the injecting rank prints
// "fault_drill_inject {json}" (rank, what, t_ns) just before.
// Exit code: 0 every rank saw ok, 1 a rank reported a failure, 2 usage, 4 ranks could not be started.

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <csignal>
#include <ctime>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/launch/launch.h"
#include "reference/alltoallv/alltoallv.h"
#include "reference/alltoallv/moe/low_latency.h"
#include "reference/alltoallv/moe/moe_reference.h"
#include "reference/alltoallv/traffic.h"
#include "reference/alltoallv/verify.h"
#include "reference/core/check.h"
#include "reference/core/memory.h"
#include "reference/core/pattern.h"
#include "reference/core/wait.h"
#include "reference/ipc/ipc.h"
#include "reference/zcopy/zcopy.h"

namespace peerlab::faults {
namespace {

using Clock = std::chrono::steady_clock;

// CUDA initialization of every rank (contexts, allocations) before the timed part.
constexpr int64_t kInitMs = 60'000;

// The drill's targets: primitives of reference/ by their command-line names.
const std::string kZcopyTarget = "zcopy";          // reference/zcopy (not a suite)
const std::string kAlltoallvTarget = "alltoallv";  // reference/alltoallv (not a suite)
const std::string kMoeLlTarget = "moe_ll";

struct Args {
  std::string target;
  std::string protocol = "get";
  std::string kind = "vmm";
  std::string transfer = "push";
  uint64_t bytes = 1 << 20;
  uint64_t elements = 4096;
  int calls = 4;
  int ranks = 2;
  int tokens = 16;
  std::string withhold = "none";
  int fault_rank = -1;
  int die_rank = -1;
  int64_t deadline_ms = 2000;
};

long long realtimeNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<long long>(ts.tv_sec) * 1'000'000'000LL + ts.tv_nsec;
}

struct Outcome {
  std::string verdict = "ok";  // ok, corrupt, timeout, error
  std::string detail;
  uint64_t wrong = 0;
  uint64_t first_bad = UINT64_MAX;
  double wait_ms = 0;
  /// When the verdict was reached (CLOCK_REALTIME, ns), 0 until then. Teardown after a failure may still wait on
  /// what the fault holds up (an injected host sleep in a stream, say); that is the run's wall time, not the verdict's.
  long long verdict_ns = 0;
};

Outcome fromStatus(const Status& st, double wait_ms) {
  Outcome o;
  o.verdict = st.code() == StatusCode::kTimeout ? "timeout" : "error";
  o.detail = st.toString();
  o.wait_ms = wait_ms;
  o.verdict_ns = realtimeNs();
  return o;
}

void print(const Args& a, int rank, const Outcome& o) {
  const long long t_ns = o.verdict_ns != 0 ? o.verdict_ns : realtimeNs();
  const nlohmann::ordered_json line = {
      {"target", a.target},
      {"rank", rank},
      {"verdict", o.verdict},
      {"wrong", o.wrong},
      {"first_bad", o.first_bad == UINT64_MAX ? -1LL : static_cast<long long>(o.first_bad)},
      {"wait_ms", std::round(o.wait_ms * 10) / 10},
      {"t_ns", t_ns},
      {"detail", o.detail},
  };
  std::printf("fault_drill %s\n", line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  std::fflush(stdout);
}

double msSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// Rank 0 sends one message of `bytes` to rank 1 over a zcopy channel; rank 1 checks it on its own GPU.
Outcome zcopyRank(const Args& a, Bootstrap& boot) {
  const int me = boot.rank();
  if (Status st = PEERLAB_CUDA(cudaSetDevice(me)); !st.isOk()) return fromStatus(st, 0);
  const auto kind = a.kind == "legacy" ? ipc::HandleKind::kLegacy : ipc::HandleKind::kVmmFd;
  const zcopy::Protocol protocol = a.protocol == "put"         ? zcopy::Protocol::kPut
                                   : a.protocol == "sm_signal" ? zcopy::Protocol::kSmSignal
                                                               : zcopy::Protocol::kGet;
  auto src = ipc::allocExportable(me, a.bytes, kind);
  if (!src.isOk()) return fromStatus(src.status(), 0);
  auto dst = ipc::allocExportable(me, a.bytes, kind);
  if (!dst.isOk()) return fromStatus(dst.status(), 0);
  // Both ranks past CUDA initialization; from here on every wait has the drill's deadline.
  if (Status st = boot.barrier(Deadline::afterMs(kInitMs)); !st.isOk()) return fromStatus(st, 0);
  const Deadline setup = Deadline::afterMs(a.deadline_ms);
  zcopy::ContextOptions co;
  co.device = me;
  co.channels = 1;
  co.semaphore_kind = kind;
  co.device_timeout_ns = static_cast<uint64_t>(a.deadline_ms) * 1'000'000ull;
  auto ctx = zcopy::Context::create(boot, co, setup);
  if (!ctx.isOk()) return fromStatus(ctx.status(), 0);
  zcopy::ChannelOptions o;
  o.peer = 1 - me;
  o.protocol = protocol;
  o.role = me == 0 ? zcopy::Role::kSender : zcopy::Role::kReceiver;
  o.window = protocol == zcopy::Protocol::kGet ? &src->get() : &dst->get();
  auto ch = zcopy::Channel::create(*ctx, o, setup);
  if (!ch.isOk()) return fromStatus(ch.status(), 0);
  auto stream = createStream(me);
  if (!stream.isOk()) return fromStatus(stream.status(), 0);
  auto checker = PatternChecker::create(me);
  if (!checker.isOk()) return fromStatus(checker.status(), 0);
  const uint64_t seed = patternSeed(static_cast<uint64_t>(getppid()), 0, 1, a.bytes);
  cudaStream_t s = stream->get();
  Status st;
  if (me == 0) {
    void* p = src->get().ptr;
    st = fillPattern(p, a.bytes, seed, s);
    if (st.isOk()) st = protocol == zcopy::Protocol::kGet ? ch->sendPost(s) : ch->sendPost(s, p, 0, a.bytes);
    if (st.isOk()) st = ch->sendWait(s);
  } else {
    void* p = dst->get().ptr;
    st = poisonPattern(p, a.bytes, seed, s);
    if (st.isOk()) st = protocol == zcopy::Protocol::kGet ? ch->recvPost(s, p, 0, a.bytes) : ch->recvPost(s);
    if (st.isOk()) st = ch->recvWait(s);
    if (st.isOk()) st = checker->enqueue(p, a.bytes, seed, s);
  }
  if (!st.isOk()) return fromStatus(st, 0);
  const auto t0 = Clock::now();
  st = ctx->wait(s, Deadline::afterMs(a.deadline_ms), "fault_drill message");
  const double waited = msSince(t0);
  Outcome out;
  out.wait_ms = waited;
  if (!st.isOk()) {
    out = fromStatus(st, waited);
    // Streams may wait on a signal that will never come: release them before anything is freed.
    ctx->abandon(Deadline::afterMs(5000)).ignore();
    return out;
  }
  if (me == 1) {
    auto r = checker->collect(s, Deadline::afterMs(a.deadline_ms));
    if (!r.isOk()) return fromStatus(r.status(), waited);
    if (r->wrong > 0) {
      out.verdict = "corrupt";
      out.verdict_ns = realtimeNs();
      out.wrong = r->wrong;
      out.first_bad = r->first_bad;
      out.detail = std::to_string(r->wrong) + " wrong bytes, first at " + std::to_string(r->first_bad);
    }
  }
  if (Status e = ctx->deviceErrors(); !e.isOk() && out.verdict == "ok") out = fromStatus(e, waited);
  // Wrong data leaves the streams drained: tear down together. A device-side error may leave waits behind.
  if (out.verdict == "ok" || out.verdict == "corrupt") {
    if (Status c = ctx->close(Deadline::afterMs(a.deadline_ms)); !c.isOk() && out.verdict == "ok") {
      out = fromStatus(c, waited);
    }
  } else {
    ctx->abandon(Deadline::afterMs(5000)).ignore();
  }
  return out;
}

// `calls` alltoallv calls of uniform traffic, each checked on the receiving GPU.
Outcome alltoallvRank(const Args& a, Bootstrap& boot) {
  const int me = boot.rank();
  const int n = boot.size();
  if (Status st = PEERLAB_CUDA(cudaSetDevice(me)); !st.isOk()) return fromStatus(st, 0);
  auto stream = createStream(me);
  if (!stream.isOk()) return fromStatus(stream.status(), 0);
  auto counts = allocDevice(me, 3 * alltoallv::kMaxRanks * sizeof(int64_t));
  if (!counts.isOk()) return fromStatus(counts.status(), 0);
  auto driver = alltoallv::TrafficDriver::create(me);
  if (!driver.isOk()) return fromStatus(driver.status(), 0);
  const alltoallv::TrafficParams p = alltoallv::makeTraffic(alltoallv::TrafficKind::kUniform, n, a.elements, 7);
  alltoallv::Options o;
  o.elem_bytes = 4;
  o.send_capacity = alltoallv::trafficSendBound(p);
  o.recv_capacity = alltoallv::trafficRecvBound(p);
  o.transfer = a.transfer == "pull" ? alltoallv::Transfer::kPull : alltoallv::Transfer::kPush;
  o.timeout_ms = a.deadline_ms;
  // Every rank past CUDA initialization; from here on every wait has the drill's deadline.
  if (Status st = boot.barrier(Deadline::afterMs(kInitMs)); !st.isOk()) return fromStatus(st, 0);
  const Deadline setup = Deadline::afterMs(a.deadline_ms);
  auto a2a = alltoallv::AllToAllV::create(boot, me, o, setup);
  if (!a2a.isOk()) return fromStatus(a2a.status(), 0);
  int64_t* send = counts->get().as<int64_t>();
  int64_t* recv_counts = send + alltoallv::kMaxRanks;
  int64_t* recv_offsets = send + 2 * alltoallv::kMaxRanks;
  cudaStream_t s = stream->get();
  // The same base on every rank: each segment's pattern derives from it, its source and its destination.
  const uint64_t seed = patternSeed(0xD1, 0, 0, 4);
  Status st = driver->setCall(0, s);
  for (int call = 0; call < a.calls && st.isOk(); ++call) {
    st = driver->writeCounts(p, me, send, s);
    if (st.isOk()) st = driver->fillSend(p, me, a2a->sendBuffer(), o.elem_bytes, seed, s);
    if (st.isOk())
      st = driver->poisonRecv(p, me, a2a->recvBuffer(), o.recv_capacity * o.elem_bytes, o.elem_bytes, seed, s);
    if (st.isOk()) st = a2a->run(s, send, recv_counts, recv_offsets);
    if (st.isOk()) st = driver->checkRecv(p, me, a2a->recvBuffer(), recv_counts, recv_offsets, o.elem_bytes, seed, s);
    if (st.isOk()) st = driver->advance(s);
  }
  if (!st.isOk()) return fromStatus(st, 0);
  const auto t0 = Clock::now();
  st = a2a->checkStatus(s, Deadline::afterMs(a.deadline_ms + 1000));
  const double waited = msSince(t0);
  if (!st.isOk()) return fromStatus(st, waited);
  auto r = driver->collect(s, Deadline::afterMs(a.deadline_ms));
  if (!r.isOk()) return fromStatus(r.status(), waited);
  Outcome out;
  out.wait_ms = waited;
  if (!r->ok()) {
    out.verdict = "corrupt";
    out.verdict_ns = realtimeNs();
    out.wrong = r->wrong_elements;
    out.first_bad = r->first_bad;
    out.detail = std::to_string(r->wrong_elements) + " wrong elements, " + std::to_string(r->wrong_counts) +
                 " wrong counts, first bad byte at " + std::to_string(r->first_bad);
  }
  // Every call completed (right or wrong): tear down together.
  const Deadline teardown = Deadline::afterMs(a.deadline_ms);
  Status st2 = boot.barrier(teardown);
  if (st2.isOk()) st2 = a2a->close(boot, teardown);
  if (!st2.isOk() && out.verdict == "ok") return fromStatus(st2, waited);
  return out;
}

// The drill's own injection, stamped when it happens (the scorecard times the verdict from it).
void printInjection(int rank, const std::string& what) {
  const nlohmann::ordered_json line = {{"rank", rank}, {"what", what}, {"t_ns", realtimeNs()}};
  std::printf("fault_drill_inject %s\n", line.dump().c_str());
  std::fflush(stdout);
}

// `calls` rounds of MoE low-latency dispatch and combine (identity experts: the dispatch output goes back as the
// expert output), every rank's combined tokens checked against the CPU reference.
Outcome moeLlRank(const Args& a, Bootstrap& boot) {
  namespace moe = alltoallv::moe;
  const int me = boot.rank();
  const int n = boot.size();
  if (Status st = PEERLAB_CUDA(cudaSetDevice(me)); !st.isOk()) return fromStatus(st, 0);
  auto stream = createStream(me);
  if (!stream.isOk()) return fromStatus(stream.status(), 0);
  cudaStream_t s = stream->get();
  const moe::MoeShape shape{n, 512, 4, 8 * n};
  const int cap = a.tokens;
  const auto in = moe::makeMoeInputs(shape, std::vector<int>(n, a.tokens), 0xD2, /*drop=*/true);
  const auto ref = moe::llDispatchReference(shape, cap, moe::LlPayload::kBf16, in);
  std::vector<std::vector<uint16_t>> identity(n);
  for (int r = 0; r < n; ++r)
    identity[r] = ref[r].rows;
  const auto want = moe::llCombineReference(shape, cap, in, ref, identity)[me];
  const moe::RankInput& mine = in[me];
  auto upload = [&](const void* p, size_t bytes) -> StatusOr<DeviceBuffer> {
    PEERLAB_ASSIGN_OR_RETURN(auto b, allocDevice(me, std::max<size_t>(bytes, 16)));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaMemcpy(b->ptr, p, bytes, cudaMemcpyHostToDevice)));
    return b;
  };
  auto x = upload(mine.x.data(), mine.x.size() * 2);
  if (!x.isOk()) return fromStatus(x.status(), 0);
  auto ids = upload(mine.ids.data(), mine.ids.size() * 4);
  if (!ids.isOk()) return fromStatus(ids.status(), 0);
  auto w = upload(mine.weights.data(), mine.weights.size() * 4);
  if (!w.isOk()) return fromStatus(w.status(), 0);
  auto out = allocDevice(me, std::max<size_t>(mine.x.size() * 2, 16));
  if (!out.isOk()) return fromStatus(out.status(), 0);
  // Every rank past CUDA initialization; from here on every wait has the drill's deadline.
  if (Status st = boot.barrier(Deadline::afterMs(kInitMs)); !st.isOk()) return fromStatus(st, 0);
  moe::LlConfig cfg;
  cfg.hidden = shape.hidden;
  cfg.top_k = shape.top_k;
  cfg.experts = shape.experts;
  cfg.max_tokens = a.tokens;
  cfg.capacity = cap;
  cfg.timeout_ms = a.deadline_ms;
  auto ll = moe::LowLatencyExchange::create(boot, me, cfg, Deadline::afterMs(a.deadline_ms));
  if (!ll.isOk()) return fromStatus(ll.status(), 0);
  if (Status st = boot.barrier(Deadline::afterMs(a.deadline_ms)); !st.isOk()) return fromStatus(st, 0);
  if (me == a.die_rank) {
    printInjection(me, "exit after setup");
    std::_Exit(0);
  }
  const auto* expert_rows = reinterpret_cast<const __nv_bfloat16*>(ll->output().rows);
  std::vector<uint16_t> got(mine.x.size());
  Outcome o;
  double waited = 0;
  for (int call = 0; call < a.calls; ++call) {
    if (call == 0 && me == a.fault_rank && a.withhold != "none") {
      ll->setFault(a.withhold == "dispatch" ? moe::LlFault::kSkipDispatchSignals : moe::LlFault::kSkipCombineSignals);
      printInjection(me, "withhold " + a.withhold + " flags");
    }
    Status st = ll->dispatch(x->get().as<__nv_bfloat16>(), ids->get().as<int32_t>(), w->get().as<float>(), a.tokens, s);
    if (st.isOk()) st = PEERLAB_CUDA(cudaMemsetAsync(out->get().ptr, 0xFF, out->get().bytes, s));
    if (st.isOk()) st = ll->combine(expert_rows, out->get().as<__nv_bfloat16>(), s);
    if (!st.isOk()) return fromStatus(st, waited);
    const auto t0 = Clock::now();
    st = ll->checkStatus(s, Deadline::afterMs(a.deadline_ms + 1000));
    waited = std::max(waited, msSince(t0));
    if (!st.isOk()) return fromStatus(st, waited);
    st = PEERLAB_CUDA(cudaMemcpy(got.data(), out->get().ptr, got.size() * 2, cudaMemcpyDeviceToHost));
    if (!st.isOk()) return fromStatus(st, waited);
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i] == want[i]) continue;
      o.first_bad = std::min<uint64_t>(o.first_bad, 2 * (static_cast<uint64_t>(call) * got.size() + i));
      ++o.wrong;
    }
  }
  o.wait_ms = waited;
  if (o.wrong > 0) {
    o.verdict = "corrupt";
    o.verdict_ns = realtimeNs();
    o.detail = std::to_string(o.wrong) + " wrong combined elements over " + std::to_string(a.calls) +
               " calls, first bad byte at " + std::to_string(o.first_bad);
  }
  // Every call completed (right or wrong): tear down together.
  const Deadline teardown = Deadline::afterMs(a.deadline_ms);
  Status st2 = boot.barrier(teardown);
  if (st2.isOk()) st2 = ll->close(boot, teardown);
  if (!st2.isOk() && o.verdict == "ok") return fromStatus(st2, waited);
  return o;
}

int usage(const std::string& why) {
  std::fprintf(stderr, "fault_drill: %s\n", why.c_str());
  return 2;
}

int parse(int argc, char** argv, Args* a) {
  if (argc < 2) return usage("usage: fault_drill zcopy|alltoallv|moe_ll [options]");
  a->target = argv[1];
  if (a->target != kZcopyTarget && a->target != kAlltoallvTarget && a->target != kMoeLlTarget) {
    return usage("unknown target '" + a->target + "'");
  }
  for (int i = 2; i < argc; ++i) {
    const std::string key = argv[i];
    if (i + 1 >= argc) return usage(key + " needs a value");
    const std::string value = argv[++i];
    char* end = nullptr;
    const long long number = std::strtoll(value.c_str(), &end, 10);
    const bool numeric = end != nullptr && *end == '\0' && number > 0;
    if (key == "--protocol" && (value == "get" || value == "put" || value == "sm_signal")) {
      a->protocol = value;
    } else if (key == "--kind" && (value == "legacy" || value == "vmm")) {
      a->kind = value;
    } else if (key == "--transfer" && (value == "push" || value == "pull")) {
      a->transfer = value;
    } else if (key == "--bytes" && numeric) {
      a->bytes = static_cast<uint64_t>(number);
    } else if (key == "--elements" && numeric) {
      a->elements = static_cast<uint64_t>(number);
    } else if (key == "--calls" && numeric) {
      a->calls = static_cast<int>(number);
    } else if (key == "--ranks" && numeric && number >= 2 && number <= 8) {
      a->ranks = static_cast<int>(number);
    } else if (key == "--deadline-ms" && numeric) {
      a->deadline_ms = number;
    } else if (key == "--tokens" && numeric && number <= 4096) {
      a->tokens = static_cast<int>(number);
    } else if (key == "--withhold" && (value == "dispatch" || value == "combine")) {
      a->withhold = value;
    } else if (key == "--fault-rank" && end != nullptr && *end == '\0' && number >= 0 && number < 8) {
      a->fault_rank = static_cast<int>(number);
    } else if (key == "--die-rank" && end != nullptr && *end == '\0' && number >= 0 && number < 8) {
      a->die_rank = static_cast<int>(number);
    } else {
      return usage("bad option " + key + " " + value);
    }
  }
  if (a->target == kZcopyTarget) a->ranks = 2;
  if ((a->withhold != "none") != (a->fault_rank >= 0)) return usage("--withhold and --fault-rank go together");
  if (a->fault_rank >= a->ranks || a->die_rank >= a->ranks) return usage("the fault rank must be one of the ranks");
  if (a->target != kMoeLlTarget && (a->withhold != "none" || a->die_rank >= 0)) {
    return usage("--withhold and --die-rank are moe_ll options");
  }
  return 0;
}

int rankMain(const Args& a) {
  // When another rank fails, the launcher sends SIGTERM: finish (every wait here is bounded) and say what this rank
  // saw instead of dying silently. The launcher's SIGKILL still ends a rank that does not finish in time.
  std::signal(SIGTERM, SIG_IGN);
  auto boot = launch::bootstrapFromEnvironment(Deadline::afterMs(kInitMs));
  if (!boot.isOk()) {
    print(a, -1, fromStatus(boot.status(), 0));
    return 1;
  }
  const Outcome o = a.target == kZcopyTarget       ? zcopyRank(a, **boot)
                    : a.target == kAlltoallvTarget ? alltoallvRank(a, **boot)
                                                   : moeLlRank(a, **boot);
  print(a, (*boot)->rank(), o);
  if (o.verdict != "ok") (*boot)->abort(a.target + " rank " + std::to_string((*boot)->rank()) + ": " + o.verdict);
  return o.verdict == "ok" ? 0 : 1;
}

}  // namespace
}  // namespace peerlab::faults

int main(int argc, char** argv) {
  using namespace peerlab;
  faults::Args a;
  if (int rc = faults::parse(argc, argv, &a); rc != 0) return rc;
  if (launch::launchedAsRank()) return faults::rankMain(a);
  launch::LocalOptions lo;
  lo.ranks = a.ranks;
  lo.argv.assign(argv, argv + argc);
  lo.argv[0] = "/proc/self/exe";
  lo.timeout = std::chrono::milliseconds(faults::kInitMs + a.deadline_ms * 4 + 10'000);
  lo.kill_grace = std::chrono::milliseconds(a.deadline_ms + 5000);
  auto exits = launch::runLocal(lo);
  if (!exits.isOk()) {
    std::fprintf(stderr, "fault_drill: %s\n", exits.status().toString().c_str());
    return 4;
  }
  int rc = 0;
  for (const auto& e : *exits) {
    const nlohmann::ordered_json line = {
        {"rank", e.rank}, {"exit_code", e.exit_code}, {"signal", e.signal}, {"timed_out", e.timed_out}};
    std::printf("fault_drill_exit %s\n", line.dump().c_str());
    if (e.exit_code != 0 || e.signal != 0 || e.timed_out) rc = 1;
  }
  return rc;
}
