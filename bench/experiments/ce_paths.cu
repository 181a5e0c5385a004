// Copy-engine paths between two GPUs of one process, measured without peerlab's protocol around them.
//
//   nvcc -O2 -std=c++17 -arch=sm_90 -I. bench/experiments/ce_paths.cu -lcuda -o ce_paths && ./ce_paths [dev_a dev_b]
//
// Latency (8 B, ping-pong between a stream on each GPU, time per hop = round trip / 2, median of samples):
//   memop          write the peer's flag, wait on our own (stream memory operations only)
//   memop_ce       the signal is a 4-byte copy of a prepared epoch word instead of a write operation
//   get            wait; pull 8 B with the copy engine; signal
//   put            push 8 B; signal; wait
//   put_ce         push 8 B and the epoch word with two copies (no write operation after the copy)
//   get_ce         wait; pull 8 B; signal with a copy
// Bandwidth (256 MiB a -> b, 8 copies per sample, GB/s):
//   pull1 / pull2 / pull4   b's copy engines read, split over 1 / 2 / 4 streams
//   push1 / push2           a's copy engines write, 1 / 2 streams
//   split                   b pulls half while a pushes the other half
// Every sample starts behind a stream wait on a host-mapped word, so host enqueue is not timed. The data of every
// copy is checked once at the end (seeded bytes, compared on the host).
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench/experiments/check.h"

#define CU(x)                                                             \
  do {                                                                    \
    CUresult r_ = (x);                                                    \
    if (r_ != CUDA_SUCCESS) {                                             \
      const char* s_ = nullptr;                                           \
      cuGetErrorString(r_, &s_);                                          \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_); \
      std::exit(2);                                                       \
    }                                                                     \
  } while (0)

namespace {

CUdeviceptr dp(const void* p) {
  return reinterpret_cast<CUdeviceptr>(p);
}

struct Side {
  int dev;
  cudaStream_t s;
  uint32_t* flag;    // polled by this side, written by the peer
  uint32_t* epochs;  // epochs[i] = i, source of copy-engine signals
  uint8_t* data;     // 8 B message buffer
};

constexpr int kRounds = 200;
constexpr int kSamples = 15;

volatile uint32_t* g_gate = nullptr;
uint32_t g_gate_value = 0;

void gate(cudaStream_t s) {
  CU(cuStreamWaitValue32(s, dp(const_cast<uint32_t*>(g_gate)), g_gate_value, CU_STREAM_WAIT_VALUE_GEQ));
}

void signal(Side& from, Side& to, uint32_t e, bool ce) {
  if (ce) {
    CK(cudaMemcpyAsync(to.flag, from.epochs + e, 4, cudaMemcpyDefault, from.s));
  } else {
    CU(cuStreamWriteValue32(from.s, dp(to.flag), e, CU_STREAM_WRITE_VALUE_DEFAULT));
  }
}
void waitFor(Side& me, uint32_t e) {
  CU(cuStreamWaitValue32(me.s, dp(me.flag), e, CU_STREAM_WAIT_VALUE_GEQ));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * (v.size() - 1))];
}

// One hop = one side's work on a message; a round is a's hop then b's hop.
void enqueueRound(const std::string& mode, Side& a, Side& b, uint32_t e) {
  auto hop = [&](Side& me, Side& peer, bool first) {
    if (mode == "memop" || mode == "memop_ce") {
      if (!first) waitFor(me, e);
      signal(me, peer, e, mode == "memop_ce");
      if (first) waitFor(me, e);
    } else if (mode == "get" || mode == "get_ce") {
      // first: a signals "ready", waits for b's pull + reply, then pulls b's message.
      if (first) {
        signal(me, peer, e, mode == "get_ce");
        waitFor(me, e);
        CK(cudaMemcpyAsync(me.data, peer.data, 8, cudaMemcpyDefault, me.s));
      } else {
        waitFor(me, e);
        CK(cudaMemcpyAsync(me.data, peer.data, 8, cudaMemcpyDefault, me.s));
        signal(me, peer, e, mode == "get_ce");
      }
    } else {  // put, put_ce
      if (!first) waitFor(me, e);
      CK(cudaMemcpyAsync(peer.data, me.data, 8, cudaMemcpyDefault, me.s));
      signal(me, peer, e, mode == "put_ce");
      if (first) waitFor(me, e);
    }
  };
  hop(a, b, true);
  hop(b, a, false);
}

void latency(const std::string& mode, Side& a, Side& b, uint32_t& epoch) {
  std::vector<double> us;
  cudaEvent_t e0, e1;
  CK(cudaSetDevice(a.dev));
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int smp = 0; smp < kSamples + 2; ++smp) {
    ++g_gate_value;
    gate(a.s);
    gate(b.s);
    CK(cudaEventRecord(e0, a.s));
    for (int r = 0; r < kRounds; ++r)
      enqueueRound(mode, a, b, ++epoch);
    CK(cudaEventRecord(e1, a.s));
    *g_gate = g_gate_value;
    CK(cudaStreamSynchronize(a.s));
    CK(cudaStreamSynchronize(b.s));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (smp >= 2) us.push_back(ms * 1000.0 / (2.0 * kRounds));
  }
  std::printf("latency %-9s hop %7.3f us  (p10 %7.3f  p90 %7.3f)\n", mode.c_str(), median(us), pct(us, 0.1),
              pct(us, 0.9));
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
}

__global__ void fill(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    p[i] = static_cast<uint8_t>((i * 2654435761u + seed) >> 7);
}
__global__ void countWrong(const uint8_t* p, size_t n, uint32_t seed, unsigned long long* wrong) {
  unsigned long long w = 0;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    w += p[i] != static_cast<uint8_t>((i * 2654435761u + seed) >> 7);
  if (w) atomicAdd(wrong, w);
}

void bandwidth(const std::string& mode, int da, int db, uint8_t* src, uint8_t* dst, size_t bytes,
               std::vector<cudaStream_t>& sa, std::vector<cudaStream_t>& sb) {
  constexpr int kCopies = 8;
  std::vector<double> gbps;
  for (int smp = 0; smp < 7; ++smp) {
    CK(cudaSetDevice(db));
    CK(cudaMemset(dst, 0xA5, bytes));
    CK(cudaDeviceSynchronize());
    ++g_gate_value;
    std::vector<std::pair<cudaStream_t, int>> used;
    auto copy = [&](cudaStream_t s, size_t off, size_t n) {
      for (int c = 0; c < kCopies; ++c)
        CK(cudaMemcpyAsync(dst + off, src + off, n, cudaMemcpyDefault, s));
    };
    auto use = [&](std::vector<cudaStream_t>& ss, int dev, int k, size_t lo, size_t hi) {
      CK(cudaSetDevice(dev));
      const size_t per = (hi - lo) / k;
      for (int i = 0; i < k; ++i) {
        gate(ss[i]);
        copy(ss[i], lo + i * per, i + 1 == k ? hi - lo - i * per : per);
      }
    };
    const size_t half = bytes / 2;
    if (mode == "pull1") use(sb, db, 1, 0, bytes);
    if (mode == "pull2") use(sb, db, 2, 0, bytes);
    if (mode == "pull4") use(sb, db, 4, 0, bytes);
    if (mode == "push1") use(sa, da, 1, 0, bytes);
    if (mode == "push2") use(sa, da, 2, 0, bytes);
    if (mode == "split") {
      use(sb, db, 1, 0, half);
      use(sa, da, 1, half, bytes);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const auto t0 = std::chrono::steady_clock::now();
    *g_gate = g_gate_value;
    for (auto s : sa)
      CK(cudaStreamSynchronize(s));
    for (auto s : sb)
      CK(cudaStreamSynchronize(s));
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (smp >= 2) gbps.push_back(static_cast<double>(bytes) * kCopies / sec / 1e9);
  }
  unsigned long long* wrong = nullptr;
  CK(cudaSetDevice(db));
  CK(cudaMallocManaged(&wrong, sizeof(*wrong)));
  *wrong = 0;
  countWrong<<<264, 512>>>(dst, bytes, 7, wrong);
  CK(cudaDeviceSynchronize());
  std::printf("bandwidth %-6s %7.1f GB/s (min %7.1f max %7.1f)  wrong bytes %llu\n", mode.c_str(), median(gbps),
              pct(gbps, 0), pct(gbps, 1), *wrong);
  CK(cudaFree(wrong));
}

}  // namespace

int main(int argc, char** argv) {
  const int da = argc > 2 ? std::atoi(argv[1]) : 0;
  const int db = argc > 2 ? std::atoi(argv[2]) : 1;
  CU(cuInit(0));
  uint32_t* gate_host = nullptr;
  CK(cudaHostAlloc(&gate_host, 4, cudaHostAllocMapped | cudaHostAllocPortable));
  *gate_host = 0;
  g_gate = gate_host;
  Side a{}, b{};
  a.dev = da;
  b.dev = db;
  for (Side* s : {&a, &b}) {
    const int peer = s == &a ? db : da;
    CK(cudaSetDevice(s->dev));
    CK(cudaDeviceEnablePeerAccess(peer, 0));
    CK(cudaStreamCreateWithFlags(&s->s, cudaStreamNonBlocking));
    CK(cudaMalloc(&s->flag, 4));
    CK(cudaMemset(s->flag, 0, 4));
    CK(cudaMalloc(&s->data, 8));
    CK(cudaMemset(s->data, s->dev + 1, 8));
    std::vector<uint32_t> ev(1u << 20);
    for (size_t i = 0; i < ev.size(); ++i)
      ev[i] = static_cast<uint32_t>(i);
    CK(cudaMalloc(&s->epochs, ev.size() * 4));
    CK(cudaMemcpy(s->epochs, ev.data(), ev.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize());
  }
  std::printf("devices %d -> %d\n", da, db);
  const char* modes = std::getenv("CE_PATHS_LATENCY");
  std::string list = modes ? modes : "memop,memop_ce,get,get_ce,put,put_ce,memop,get,put";
  uint32_t epoch = 0;
  for (size_t p = 0; p < list.size();) {
    size_t q = list.find(',', p);
    if (q == std::string::npos) q = list.size();
    // Every mode ends with the same epoch on both flags, so the next mode continues from `epoch`.
    latency(list.substr(p, q - p), a, b, epoch);
    p = q + 1;
  }

  const size_t bytes = size_t{256} << 20;
  uint8_t *src = nullptr, *dst = nullptr;
  CK(cudaSetDevice(da));
  CK(cudaMalloc(&src, bytes));
  fill<<<264, 512>>>(src, bytes, 7);
  CK(cudaDeviceSynchronize());
  CK(cudaSetDevice(db));
  CK(cudaMalloc(&dst, bytes));
  std::vector<cudaStream_t> sa(4), sb(4);
  CK(cudaSetDevice(da));
  for (auto& s : sa)
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaSetDevice(db));
  for (auto& s : sb)
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (const char* m : {"pull1", "push1", "pull2", "push2", "pull4", "split", "pull1", "split"})
    bandwidth(m, da, db, src, dst, bytes, sa, sb);
  return 0;
}
