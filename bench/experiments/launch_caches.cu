// What a kernel pays on its first touches after a launch: kernel-parameter reads (constant bank) and instruction
// fetch, measured with %globaltimer by one thread, launch after launch of the same kernel.
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -I. bench/experiments/launch_caches.cu -o launch_caches && ./launch_caches
//
// Per launch (medians over launches 10..99 of one kernel, then the same with two kernels launched alternately):
//   param_a / param_b / param_a_again   first read of a parameter word, of a word 192 bytes further, the first again
//   code_cold / code_warm               one pass over 1024 unrolled instructions, then the same code again
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench/experiments/check.h"

struct Params {
  uint32_t w[64];
};

__device__ __forceinline__ uint64_t now() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// `sink` is never 0xFFFFFFFF in practice: the branch makes the thread wait for the value before the next timestamp.
#define USE(v)                             \
  do {                                     \
    if ((v) == 0xFFFFFFFFu) out[63] = (v); \
  } while (0)

template <int kSalt>
__global__ void probe(Params p, uint64_t* out, uint32_t seed) {
  if (threadIdx.x != 0) return;
  uint64_t t[8];
  t[0] = now();
  const uint32_t a = p.w[(seed & 1)];
  USE(a);
  t[1] = now();
  const uint32_t b = p.w[48 + (seed & 1)];
  USE(b);
  t[2] = now();
  const uint32_t c = p.w[(seed & 1) + 2];
  USE(c);
  t[3] = now();
  uint32_t x = seed ^ a ^ b ^ c;
#pragma unroll 1
  for (int rep = 0; rep < 2; ++rep) {
    t[4 + 2 * rep] = now();
#pragma unroll
    for (int i = 0; i < 1024; ++i)
      x = __funnelshift_l(x, x ^ (i * kSalt), i & 31);
    USE(x);
    t[5 + 2 * rep] = now();
  }
  for (int i = 0; i < 8; ++i)
    out[i] = t[i];
  out[8] = x;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void report(const char* what, const std::vector<std::vector<uint64_t>>& rows) {
  std::vector<double> pa, pb, pa2, cold, warm;
  for (const auto& r : rows) {
    pa.push_back((r[1] - r[0]) / 1.0);
    pb.push_back((r[2] - r[1]) / 1.0);
    pa2.push_back((r[3] - r[2]) / 1.0);
    cold.push_back((r[5] - r[4]) / 1.0);
    warm.push_back((r[7] - r[6]) / 1.0);
  }
  std::printf(
      "%-22s param_a %6.0f ns  param_b %6.0f ns  param_a_again %6.0f ns  code_cold %7.0f ns  code_warm %7.0f ns\n",
      what, median(pa), median(pb), median(pa2), median(cold), median(warm));
}

int main() {
  Params p{};
  for (int i = 0; i < 64; ++i)
    p.w[i] = 0x1000u + i;
  uint64_t* out = nullptr;
  CK(cudaMalloc(&out, 2 * 64 * sizeof(uint64_t)));
  std::vector<std::vector<uint64_t>> one, alt_a, alt_b;
  std::vector<uint64_t> h(64);
  for (int l = 0; l < 100; ++l) {
    probe<1><<<1, 32>>>(p, out, l);
    CK(cudaMemcpy(h.data(), out, 64 * 8, cudaMemcpyDeviceToHost));
    if (l >= 10) one.emplace_back(h.begin(), h.begin() + 8);
  }
  for (int l = 0; l < 100; ++l) {
    probe<1><<<1, 32>>>(p, out, l);
    probe<3><<<1, 32>>>(p, out + 64, l);
    CK(cudaMemcpy(h.data(), out, 64 * 8, cudaMemcpyDeviceToHost));
    if (l >= 10) alt_a.emplace_back(h.begin(), h.begin() + 8);
  }
  // Back to back without a host round trip in between: the launches queue up and run one after the other.
  for (int l = 0; l < 100; ++l)
    probe<1><<<1, 32>>>(p, out, l);
  CK(cudaMemcpy(h.data(), out, 64 * 8, cudaMemcpyDeviceToHost));
  std::vector<std::vector<uint64_t>> last{{h.begin(), h.begin() + 8}};
  report("same kernel", one);
  report("two kernels alternating", alt_a);
  report("back to back (last)", last);
  CK(cudaFree(out));
  return 0;
}
