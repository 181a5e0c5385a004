#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "bench/common/bench_util.h"
#include "bench/common/plan.h"
#include "harness/launch/launch.h"

namespace peerlab::bench {

namespace {

std::unique_ptr<Bootstrap>& bootstrapSlot() {
  static std::unique_ptr<Bootstrap> boot;
  return boot;
}

// Ranks other than 0 run every benchmark in step with rank 0 but report nothing.
class NullReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

struct RankArgs {
  int ranks = 0;         // --ranks=N (0: not given)
  int timeout_s = 3600;  // --ranks_timeout=SECONDS: the whole multi-rank job
  std::string error;
};

bool parseInt(std::string_view text, int& out) {
  if (text.empty()) return false;
  char* end = nullptr;
  const std::string s(text);
  long v = std::strtol(s.c_str(), &end, 10);
  if (*end != '\0' || v < 1 || v > 1'000'000) return false;
  out = static_cast<int>(v);
  return true;
}

// Removes --ranks=N / --ranks N and --ranks_timeout=S from argv (before benchmark::Initialize sees them).
RankArgs takeRankArgs(int& argc, char** argv) {
  RankArgs a;
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    auto value = [&](std::string_view name, int& dst) -> bool {
      if (arg.rfind(name, 0) != 0) return false;
      std::string_view rest = arg.substr(name.size());
      if (rest.empty() && i + 1 < argc) {
        rest = argv[++i];
      } else if (!rest.empty() && rest[0] == '=') {
        rest.remove_prefix(1);
      } else {
        return false;
      }
      if (!parseInt(rest, dst)) a.error = "bad value '" + std::string(rest) + "' for " + std::string(name);
      return true;
    };
    if (value("--ranks_timeout", a.timeout_s) || value("--ranks", a.ranks)) continue;
    argv[out++] = argv[i];
  }
  argc = out;
  argv[argc] = nullptr;
  return a;
}

// Drops --benchmark_out / --benchmark_out_format so that only rank 0 writes a file.
void dropOutputFlags(int& argc, char** argv) {
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg.rfind("--benchmark_out=", 0) == 0 || arg.rfind("--benchmark_out_format=", 0) == 0) continue;
    argv[out++] = argv[i];
  }
  argc = out;
  argv[argc] = nullptr;
  unsetenv("BENCHMARK_OUT");
  unsetenv("BENCHMARK_OUT_FORMAT");
}

// The launcher: starts `ranks` copies of this binary with the same arguments and waits for them.
int launchRanks(const RankArgs& a, int argc, char** argv) {
  launch::LocalOptions o;
  o.ranks = a.ranks;
  o.argv.push_back("/proc/self/exe");
  for (int i = 1; i < argc; ++i)
    o.argv.push_back(argv[i]);
  o.timeout = std::chrono::seconds(a.timeout_s);
  auto exits = launch::runLocal(o);
  if (!exits.isOk()) {
    std::fprintf(stderr, "%s: %s\n", argv[0], exits.status().toString().c_str());
    return 4;
  }
  Status st = launch::summarize(*exits);
  if (!st.isOk()) {
    std::fprintf(stderr, "%s: %s\n", argv[0], st.message().c_str());
    const int rank0 = (*exits)[0].exit_code;
    return rank0 > 0 ? rank0 : 1;
  }
  return 0;
}

}  // namespace

Bootstrap* bootstrap() {
  return bootstrapSlot().get();
}

}  // namespace peerlab::bench

// peerlab's benchmark main. Multicast stays off for everything a benchmark starts (NCCL, NVSHMEM, PyTorch).
// `--ranks=N` starts N local ranks of this binary (same arguments); a process started by runLocal or mpirun is a
// rank: rank 0 reports (console and --benchmark_out), the others run the same benchmarks silently. `--plan=FILE`,
// `--pairs` and `--knob` say what the process runs (bench/common/plan.h); every rank reads the same plan.
int main(int argc, char** argv) {
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", 0);
  setenv("NVSHMEM_DISABLE_NVLS", "1", 0);
  using namespace peerlab;

  const bench::RankArgs rank_args = bench::takeRankArgs(argc, argv);
  if (!rank_args.error.empty()) {
    std::fprintf(stderr, "%s: %s\n", argv[0], rank_args.error.c_str());
    return 2;
  }
  const bool is_rank = launch::launchedAsRank();
  if (rank_args.ranks > 1 && !is_rank) {
    // The ranks read the plan; it is checked here first, so that bad input is said once.
    std::vector<char*> copy(argv, argv + argc + 1);
    int copy_argc = argc;
    if (const int rc = bench::takePlanArgs(copy_argc, copy.data()); rc >= 0) return rc;
    return bench::launchRanks(rank_args, argc, argv);
  }
  if (const int rc = bench::takePlanArgs(argc, argv); rc >= 0) return rc;

  std::unique_ptr<bench::NullReporter> silent;
  if (is_rank) {
    auto boot = launch::bootstrapFromEnvironment(Deadline::after(std::chrono::minutes(2)));
    if (!boot.isOk()) {
      std::fprintf(stderr, "%s: %s\n", argv[0], boot.status().toString().c_str());
      return 4;
    }
    if (rank_args.ranks > 0 && (*boot)->size() != rank_args.ranks) {
      std::fprintf(stderr, "%s: --ranks=%d but the %s bootstrap has %d ranks\n", argv[0], rank_args.ranks,
                   std::string((*boot)->kind()).c_str(), (*boot)->size());
      return 2;
    }
    if ((*boot)->rank() != 0) {
      bench::dropOutputFlags(argc, argv);
      silent = std::make_unique<bench::NullReporter>();
    }
    bench::bootstrapSlot() = std::move(boot).value();
  }

  benchmark::Initialize(&argc, argv);
  bench::runDynamicRegistrations();
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  if (silent) {
    benchmark::RunSpecifiedBenchmarks(silent.get());
  } else {
    benchmark::RunSpecifiedBenchmarks();
  }
  benchmark::Shutdown();
  int rc = 0;
  if (Bootstrap* boot = bench::bootstrap()) {
    // Leave together, so no rank tears down memory a peer still maps.
    Status st = boot->barrier(Deadline::after(std::chrono::minutes(2)));
    if (!st.isOk()) {
      std::fprintf(stderr, "%s: rank %d: final barrier: %s\n", argv[0], boot->rank(), st.toString().c_str());
      rc = 4;
    }
  }
  bench::bootstrapSlot().reset();
  return rc;
}
