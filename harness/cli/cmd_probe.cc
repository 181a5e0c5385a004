// `peerlab probe`: the verified P2P matrix, and the hidden `peerlab probe-worker` its workers run.
//
// The command never initializes CUDA: it re-executes this binary as `peerlab probe-worker` twice (the owner and the
// importer, see harness/watchdog/probe_runner.h) and learns GPUs, driver and claims from their inventory.
// PEERLAB_PROBE_WORKER names another worker executable (run as `<it> probe-worker`); PEERLAB_PROBE_INJECT injects
// faults (reference/probe/inject.h).
// Exit codes: 0 every claimed-yes cell verified, 1 a claimed-yes cell failed, 2 usage error, 3 no CUDA device,
// 4 a worker could not be started.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "harness/cli/command.h"
#include "harness/qualify/pipeline.h"
#include "harness/report/report.h"
#include "harness/report/run_rows.h"
#include "harness/watchdog/probe_cache.h"
#include "harness/watchdog/probe_runner.h"
#include "harness/watchdog/watchdog.h"
#include "reference/core/files.h"
#include "reference/core/text.h"
#include "reference/probe/inject.h"
#include "reference/probe/probe.h"

namespace peerlab::cli {
namespace {

using namespace peerlab::probe;

constexpr const char* kCommand = "probe";
// Names the executable run as `<it> probe-worker` instead of this binary (tests run a stand-in through it).
constexpr const char* kWorkerEnv = "PEERLAB_PROBE_WORKER";

struct ProbeArgs {
  qualify::ProbeOptionsText probe;  // methods, pairs, sizes and deadlines, with their defaults
  std::string json;
  std::string cache;
  bool refresh = false;
  bool no_cache = false;
  bool verbose = false;
  uint64_t seed = 0;
};

// Checked before the probe runs: the run file can be written there (missing parents are created when it is).
Status checkOutputPath(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) return PEERLAB_INVALID_ARGUMENT(path + ": is a directory");
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  // The nearest directory that exists must take the new file or directories.
  while (!fs::exists(dir, ec) && dir.has_parent_path() && dir.parent_path() != dir)
    dir = dir.parent_path();
  if (!fs::is_directory(dir, ec)) return PEERLAB_INVALID_ARGUMENT(path + ": " + dir.string() + " is not a directory");
  if (::access(dir.c_str(), W_OK) != 0) {
    return PEERLAB_INVALID_ARGUMENT(path + ": directory " + dir.string() + " is not writable");
  }
  if (fs::exists(path, ec) && ::access(path.c_str(), W_OK) != 0)
    return PEERLAB_INVALID_ARGUMENT(path + ": not writable");
  return Status::ok();
}

std::string cellText(const std::vector<const CellReport*>& sizes) {
  std::vector<std::string> parts;
  bool lie = false;
  for (const CellReport* c : sizes) {
    const Judgement j = judge(c->claimed, c->result);
    lie = lie || j.lie;
    parts.push_back(j.staged ? "staged" : std::string(verdictName(c->result.verdict)));
  }
  std::string text = sizes.empty() ? "?" : (sizes.front()->claimed ? "+" : "-");
  const bool same = std::all_of(parts.begin(), parts.end(), [&](const std::string& p) { return p == parts.front(); });
  if (same && !parts.empty()) {
    text += parts.front();
  } else {
    for (size_t i = 0; i < parts.size(); ++i)
      text += (i ? "/" : "") + parts[i];
  }
  if (lie) text += " LIE";
  return text;
}

std::string describeCell(const CellReport& c) {
  const Judgement j = judge(c.claimed, c.result);
  std::string s = std::string(methodName(c.spec.method)) + " " + std::to_string(c.spec.src) + "->" +
                  std::to_string(c.spec.dst) + " " + formatBytes(c.spec.bytes) + ": " +
                  std::string(verdictName(c.result.verdict));
  if (c.result.verdict == Verdict::kCorrupt) {
    s += ": " + std::to_string(c.result.wrong) + " of " + std::to_string(c.result.words) +
         " 8-byte words wrong, first bad byte at offset " + std::to_string(c.result.first_bad);
  } else if (!c.result.error.empty()) {
    s += ": " + printable(c.result.error, 300);
  }
  s += c.claimed ? (j.lie ? " [the driver claims yes: LIE]" : " [the driver claims yes]") : " [the driver says no]";
  return s;
}

void printMatrices(FILE* out, const Inventory& inv, const std::vector<CellReport>& cells,
                   const std::vector<Method>& methods, const std::vector<uint64_t>& sizes) {
  const int n = inv.count();
  std::string size_list;
  for (size_t i = 0; i < sizes.size(); ++i)
    size_list += (i ? " / " : "") + formatBytes(sizes[i]);
  std::fprintf(out,
               "rows: source GPU, columns: destination GPU; + the driver claims the method works, - it says no;\n");
  std::fprintf(out,
               "verdicts for %s (one when all agree); staged: verified, but the driver copied through host memory;\n",
               size_list.c_str());
  std::fprintf(out, "LIE: the driver claims yes and the data did not verify on the destination's GPU\n");
  for (Method m : methods) {
    std::map<std::pair<int, int>, std::vector<const CellReport*>> by_pair;
    for (const CellReport& c : cells) {
      if (c.spec.method == m) by_pair[{c.spec.src, c.spec.dst}].push_back(&c);
    }
    if (by_pair.empty()) continue;
    std::vector<std::vector<std::string>> text(n, std::vector<std::string>(n, ""));
    size_t width = 6;
    for (int s = 0; s < n; ++s) {
      for (int d = 0; d < n; ++d) {
        auto it = by_pair.find({s, d});
        text[s][d] = s == d ? "." : it == by_pair.end() ? "" : cellText(it->second);
        width = std::max(width, text[s][d].size() + 2);
      }
    }
    std::fprintf(out, "\n%s: %s\n", std::string(methodName(m)).c_str(), std::string(methodSummary(m)).c_str());
    std::fprintf(out, "  claim: %s\n", std::string(claimBasis(m)).c_str());
    auto row = [&](const std::string& head, const std::vector<std::string>& cols) {
      std::string line = "  " + head;
      line.resize(std::max<size_t>(line.size() + 1, 10), ' ');
      for (const auto& c : cols) {
        line += c;
        line.resize(line.size() + (width - c.size()), ' ');
      }
      while (!line.empty() && line.back() == ' ')
        line.pop_back();
      std::fprintf(out, "%s\n", line.c_str());
    };
    std::vector<std::string> header;
    for (int d = 0; d < n; ++d)
      header.push_back(std::to_string(d));
    row("src\\dst", header);
    for (int s = 0; s < n; ++s)
      row(std::to_string(s), text[s]);
  }
}

void printProblems(FILE* out, const std::vector<CellReport>& cells, bool verbose) {
  std::vector<std::string> lines;
  int quiet = 0;
  for (const CellReport& c : cells) {
    const Judgement j = judge(c.claimed, c.result);
    if (c.result.verdict == Verdict::kOk) continue;
    if (!j.lie && c.result.verdict == Verdict::kUnsupported && !verbose) {
      ++quiet;
      continue;
    }
    lines.push_back(describeCell(c));
  }
  if (!lines.empty()) {
    std::fprintf(out, "\nproblems:\n");
    for (const auto& l : lines)
      std::fprintf(out, "  %s\n", l.c_str());
  }
  if (quiet > 0) {
    std::fprintf(out, "\n%d cells unsupported where the driver says no (--verbose lists them)\n", quiet);
  }
}

std::string summaryLine(const Inventory& inv, const std::vector<CellReport>& cells, int workers, double wall_us) {
  // A cell is an ordered pair and a method, as every output counts it: the worst verdict over the sizes probed.
  std::map<std::tuple<int, int, int>, std::pair<Verdict, bool>> worst;  // (method, src, dst) -> verdict, a lie
  for (const CellReport& c : cells) {
    auto [it, fresh] = worst.try_emplace(std::make_tuple(static_cast<int>(c.spec.method), c.spec.src, c.spec.dst),
                                         std::make_pair(c.result.verdict, false));
    if (!fresh && report::probeSeverity(std::string(verdictName(c.result.verdict))) >
                      report::probeSeverity(std::string(verdictName(it->second.first)))) {
      it->second.first = c.result.verdict;
    }
    it->second.second = it->second.second || judge(c.claimed, c.result).lie;
  }
  int counts[5] = {};
  int lies = 0;
  for (const auto& [key, v] : worst) {
    counts[static_cast<int>(v.first)]++;
    lies += v.second ? 1 : 0;
  }
  std::map<std::string, int> names;
  for (const GpuInfo& g : inv.gpus)
    names[g.name]++;
  std::string gpus;
  for (const auto& [name, count] : names)
    gpus += (gpus.empty() ? "" : ", ") + std::to_string(count) + "x " + name;
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "probe: %d GPUs (%s), driver %s; %zu cells (ordered pair x method; %zu transfers): %d ok, %d corrupt, "
                "%d hang, %d error, %d unsupported; %d claimed-yes cells failed; %d workers; wall %.3f s",
                inv.count(), printable(gpus, 200).c_str(), printable(inv.driverString(), 60).c_str(), worst.size(),
                cells.size(), counts[0], counts[1], counts[2], counts[3], counts[4], lies, workers, wall_us / 1e6);
  return buf;
}

std::string timingsText(const std::vector<Timing>& timings) {
  std::string s;
  for (const Timing& t : timings) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "%s%s %.1f", s.empty() ? "" : ", ", t.name.c_str(), t.us / 1000.0);
    s += buf;
  }
  return s;
}

int writeJson(const Inventory& inv, const std::vector<CellReport>& cells, ReportContext ctx, const std::string& path) {
  if (path.empty()) return kExitOk;
  ctx.parent_loaded_cuda = cudaDriverLoadedHere();
  report::Run run = buildRunReport(inv, cells, ctx);
  if (Status st = writeOutput(path, report::toJson(run).dump(2) + "\n"); !st.isOk()) {
    return fail(kCommand, kExitRuntime, "--json: " + st.message());
  }
  return kExitOk;
}

// What this probe runs with that is not the driver's: the fault interposer, as every command detects it, and the
// probe's own injected cells and stand-in worker.
report::Injection probeInjection(const ReportContext& ctx) {
  report::Injection i = report::detectInjection({});
  i.probe_inject = ctx.inject_spec;
  i.probe_worker = ctx.worker;
  return i;
}

// The line every output of an injected probe starts with: its verdicts are not the driver's.
std::string injectedNotice(const report::Injection& injection) {
  return "INJECTED: " + printable(injection.describe(), 600) +
         ": failures below are injected or come from a stand-in, not from the driver";
}

int runProbe(const ProbeArgs& a) {
  // Everything the user typed is checked before any process starts (the options qualify and repro read alike).
  auto options = qualify::readProbeOptions(a.probe);
  if (!options.isOk()) return fail(kCommand, kExitUsage, options.status().message());
  const std::vector<Method>* methods = &options->methods;
  auto inject = injectFromEnvironment();
  if (!inject.isOk()) return fail(kCommand, kExitUsage, inject.status().message());
  if (!a.json.empty() && a.json != "-") {
    if (Status st = checkOutputPath(a.json); !st.isOk()) return fail(kCommand, kExitUsage, "--json: " + st.message());
  }
  // With --json - the run file is stdout's only content.
  FILE* out = summaryStream(a.json);
  // Injected faults never touch the cache, nor do the transport methods (their verdict depends on the NIXL or UCX
  // found at run time, which the cache key does not hold). A bad --cache is a usage error; an unusable default
  // location only turns the cache off.
  // Nor does a probe under the fault interposer, whose CUDA calls are altered (a cache fault, applied to the file
  // before the probe starts, loads no interposer: it is what the cache's checks are for).
  bool use_cache = !a.no_cache && inject->empty() && report::detectInjection({}).interposer.empty() &&
                   std::none_of(methods->begin(), methods->end(), isTransportMethod);
  const std::string cache_path = a.cache.empty() ? defaultCachePath() : a.cache;
  if (use_cache) {
    if (Status st = checkCachePath(cache_path, /*create_dir=*/true); !st.isOk()) {
      if (!a.cache.empty()) return fail(kCommand, kExitUsage, "--cache: " + st.message());
      std::fprintf(stderr, "peerlab probe: cache off: %s\n", st.message().c_str());
      use_cache = false;
    }
  }
  // The worker is this binary, unless PEERLAB_PROBE_WORKER names another executable that speaks the protocol.
  std::string worker;
  if (const char* w = std::getenv(kWorkerEnv); w && *w) {
    worker = w;
  } else {
    worker = selfExecutable();
    if (worker.empty()) return fail(kCommand, kExitRuntime, "cannot read /proc/self/exe");
  }

  watchdog::installInterruptHandlers();
  RunnerOptions opt;
  opt.worker_argv = workerCommand(worker);
  opt.methods = options->methods;
  opt.sizes = options->sizes;
  opt.pairs = options->pairs;
  opt.cell_timeout = options->timeout;
  opt.setup_timeout = options->setup_timeout;
  opt.run_seed = a.seed != 0 ? a.seed
                             : (static_cast<uint64_t>(std::random_device{}()) << 32) ^
                                   static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  auto session = ProbeSession::start(opt);
  if (!session.isOk()) return fail(kCommand, kExitRuntime, session.status().message());
  const Inventory& inv = (*session)->inventory();
  if (!inv.error.empty()) {
    (*session)->stop();
    const bool named = inv.error.rfind("no CUDA device", 0) == 0;
    return fail(kCommand, kExitNoGpu, named ? inv.error : "no CUDA device: " + inv.error);
  }
  auto specs = (*session)->cells();
  if (!specs.isOk()) {
    (*session)->stop();
    return fail(kCommand, kExitUsage, "--pairs: " + specs.status().message());
  }
  ReportContext ctx;
  ctx.run_seed = opt.run_seed;
  ctx.timeout_ms = static_cast<uint32_t>(opt.cell_timeout.count());
  ctx.setup_timeout_ms = static_cast<uint32_t>(opt.setup_timeout.count());
  for (Method m : opt.methods)
    ctx.methods.push_back(std::string(methodName(m)));
  ctx.sizes = opt.sizes;
  ctx.pairs = a.probe.pairs;
  if (const char* spec = std::getenv(kInjectEnv); spec && *spec) ctx.inject_spec = spec;
  ctx.inject = *inject;
  if (const char* w = std::getenv(kWorkerEnv); w && *w) ctx.worker = w;
  const report::Injection injection = probeInjection(ctx);
  const bool injected = injection.any();
  if (injected) std::fprintf(out, "%s\n", injectedNotice(injection).c_str());

  if (specs->empty()) {
    (*session)->stop();
    std::fprintf(out, "probe: %d GPU%s visible: no ordered pair to probe\n", inv.count(), inv.count() == 1 ? "" : "s");
    return writeJson(inv, {}, ctx, a.json);
  }

  const CacheKey key = cacheKeyFor(inv);
  if (use_cache && !a.refresh) {
    CacheLookup hit = lookupCache(cache_path, key, *specs);
    if (hit.state == CacheState::kHit) {
      (*session)->stop();
      ctx.cached = true;
      ctx.cached_created = hit.entry.created;
      ctx.workers = (*session)->workersStarted();
      ctx.wall_us = static_cast<double>(hit.entry.wall_us);
      printMatrices(out, inv, hit.cells, opt.methods, opt.sizes);
      printProblems(out, hit.cells, a.verbose);
      std::fprintf(out, "\n%s\n", summaryLine(inv, hit.cells, ctx.workers, ctx.wall_us).c_str());
      if (injected) std::fprintf(out, "%s\n", injectedNotice(injection).c_str());
      std::fprintf(out, "cached: measured %s, read from %s (--refresh probes again)\n", hit.entry.created.c_str(),
                   cache_path.c_str());
      if (int rc = writeJson(inv, hit.cells, ctx, a.json); rc != kExitOk) return rc;
      return claimsHold(hit.cells) ? kExitOk : kExitCheckFailed;
    }
    if (hit.state != CacheState::kMissing) {
      std::fprintf(stderr, "peerlab probe: cache %s: %s; probing again\n", cache_path.c_str(), hit.why.c_str());
    }
  }

  auto result = (*session)->run();
  if (!result.isOk()) {
    (*session)->stop();
    return fail(kCommand, kExitRuntime, result.status().message());
  }
  (*session)->stop();
  if (use_cache) {
    CacheEntry entry;
    entry.key = key;
    entry.created = report::utcTimestamp();
    entry.wall_us = static_cast<uint64_t>(result->wall_us);
    entry.run_seed = opt.run_seed;
    entry.cells = result->cells;
    if (Status st = writeCache(cache_path, entry); !st.isOk()) {
      std::fprintf(stderr, "peerlab probe: cache not written: %s\n", st.message().c_str());
    }
  }
  printMatrices(out, inv, result->cells, opt.methods, opt.sizes);
  printProblems(out, result->cells, a.verbose);
  std::fprintf(out, "\n%s\n", summaryLine(inv, result->cells, result->workers_started, result->wall_us).c_str());
  if (injected) std::fprintf(out, "%s\n", injectedNotice(injection).c_str());
  if (a.verbose) {
    std::string phases;
    for (const PhaseTime& p : result->phases) {
      char buf[96];
      std::snprintf(buf, sizeof(buf), "%s%s %.1f", phases.empty() ? "" : ", ", p.name.c_str(), p.ms);
      phases += buf;
    }
    std::fprintf(out, "phases (ms): %s; shutdown %.1f\n", phases.c_str(), (*session)->shutdownMs());
    std::fprintf(out, "owner worker (ms): %s\n", timingsText(result->owner_timings).c_str());
    if (!result->importer_timings.empty()) {
      std::fprintf(out, "importer worker (ms): %s\n", timingsText(result->importer_timings).c_str());
    }
    std::fprintf(out, "seed %llu, per-cell deadline %lld ms, %d worker restarts, worker: %s %s\n",
                 static_cast<unsigned long long>(opt.run_seed), static_cast<long long>(opt.cell_timeout.count()),
                 result->restarts, opt.worker_argv[0].c_str(), kWorkerSubcommand);
  }
  ctx.workers = result->workers_started;
  ctx.wall_us = result->wall_us;
  if (int rc = writeJson(inv, result->cells, ctx, a.json); rc != kExitOk) return rc;
  return claimsHold(result->cells) ? kExitOk : kExitCheckFailed;
}

PEERLAB_REGISTER_COMMAND(
    probe, kCommand, "verify P2P between every ordered pair of GPUs, method by method",
    [](CLI::App& sub) -> std::function<int()> {
      auto args = std::make_shared<ProbeArgs>();
      sub.add_option("--methods", args->probe.methods,
                     "comma-separated: ce_write, ce_read, sm_store, sm_load, atomic, ipc_legacy, ipc_vmm, "
                     "nixl_write, nixl_read, ucx_put, ucx_get; all (the CUDA mechanisms), transport (NIXL and UCX, "
                     "found through PEERLAB_NIXL_DIR / PEERLAB_UCX_DIR)")
          ->capture_default_str();
      sub.add_option("--pairs", args->probe.pairs, "only these ordered pairs, e.g. 0-1,2-3");
      auto* bytes =
          sub.add_option("--bytes", args->probe.bytes, "the large cell size (the small one is 4 KiB), e.g. 64M")
              ->capture_default_str();
      sub.add_option("--sizes", args->probe.sizes, "all cell sizes, e.g. 4K,1M,64M")->excludes(bytes);
      sub.add_option("--timeout", args->probe.timeout, "deadline per cell answer, e.g. 5s or 500ms")
          ->capture_default_str();
      sub.add_option("--setup-timeout", args->probe.setup_timeout, "deadline for a worker's CUDA setup")
          ->capture_default_str();
      sub.add_option("--json", args->json,
                     "write the run file (reports/schema) here (\"-\": stdout, the rest to stderr)");
      sub.add_option("--cache", args->cache, "verdict cache file (default $XDG_CACHE_HOME/peerlab/probe.json)");
      sub.add_flag("--refresh", args->refresh, "probe again even when the cache matches");
      sub.add_flag("--no-cache", args->no_cache, "neither read nor write the cache");
      sub.add_option("--seed", args->seed, "pattern seed of this run (default: random)");
      sub.add_flag("-v,--verbose", args->verbose, "list every failed cell and where the time went");
      return [args] { return runProbe(*args); };
    });

PEERLAB_REGISTER_COMMAND(probe_worker, kWorkerSubcommand, "a probe worker (started by `peerlab probe`)",
                         [](CLI::App& sub) -> std::function<int()> {
                           sub.group("");
                           return [] { return probeWorkerMain(); };
                         });

}  // namespace
}  // namespace peerlab::cli
