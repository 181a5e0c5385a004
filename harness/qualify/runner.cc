#include "harness/qualify/runner.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "harness/layout/layout.h"
#include "harness/report/compare.h"
#include "reference/core/files.h"

namespace peerlab::qualify {

namespace {

double nowS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string clock(double s) {
  const long t = std::lround(std::max(0.0, s));
  char buf[32];
  if (t >= 3600) {
    std::snprintf(buf, sizeof(buf), "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%ld:%02ld", t / 60, t % 60);
  }
  return buf;
}

// The one pair a process covers, when it covers one.
std::optional<std::pair<int, int>> onlyPair(const BenchJob& job) {
  const std::vector<std::pair<int, int>> pairs = job.pairs();
  if (pairs.size() == 1) return pairs.front();
  return std::nullopt;
}

std::string fileStem(const BenchJob& job, int index) {
  std::string s = std::to_string(index + 1) + "-" + job.suite;
  if (const auto p = onlyPair(job)) s += "-" + std::to_string(p->first) + "-" + std::to_string(p->second);
  return s;
}

report::Result processFailure(const BenchJob& job, const std::string& why) {
  report::Result r;
  r.suite = job.suite;
  r.name = "process";
  r.impl = job.binary;
  if (const auto p = onlyPair(job)) {
    r.src = p->first;
    r.dst = p->second;
  }
  r.ranks = std::max(1, job.ranks);
  r.status = "failed: " + why;
  return r;
}

}  // namespace

void Progress::start(const std::string& what, int jobs, double budget_s) {
  jobs_ = jobs;
  total_budget_ = budget_s;
  run_started_ = nowS();
  std::fprintf(out_, "%s: %d process%s, budget about %s\n", what.c_str(), jobs, jobs == 1 ? "" : "es",
               clock(budget_s).c_str());
  std::fflush(out_);
}

double Progress::secondsLeft() const {
  // Calibrate the budget by how the finished jobs did (bounded, so one odd job does not swing it wildly).
  double scale = done_budget_ > 0 ? std::clamp(done_actual_ / done_budget_, 0.25, 4.0) : 1.0;
  const double elapsed = nowS() - started_;
  const double current = std::max(0.0, current_budget_ * scale - elapsed);
  const double rest = std::max(0.0, total_budget_ - done_budget_ - current_budget_) * scale;
  return current + rest;
}

void Progress::begin(int index, const std::string& label, double budget_s) {
  index_ = index;
  label_ = label;
  current_budget_ = budget_s;
  started_ = nowS();
  if (tty_) {
    draw();
  } else {
    std::fprintf(out_, "[%d/%d] %s (about %s left)\n", index + 1, jobs_, label.c_str(), clock(secondsLeft()).c_str());
    std::fflush(out_);
  }
}

void Progress::tick() {
  if (tty_) draw();
}

void Progress::draw() {
  const double elapsed = nowS() - started_;
  const double left = secondsLeft();
  const double doneFraction =
      total_budget_ > 0 ? std::clamp((done_budget_ + std::min(elapsed, current_budget_)) / total_budget_, 0.0, 1.0)
                        : 0.0;
  const int width = 28;
  const int filled = static_cast<int>(std::floor(doneFraction * width));
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < width) bar += '>';
  bar.resize(static_cast<size_t>(width), ' ');
  std::fprintf(out_, "\r\x1b[2K[%s] %d/%d %s  %s  ~%s left", bar.c_str(), index_ + 1, jobs_, label_.c_str(),
               clock(elapsed).c_str(), clock(left).c_str());
  std::fflush(out_);
}

void Progress::end(int index, const std::string& label, const std::string& outcome) {
  const double actual = nowS() - started_;
  done_budget_ += current_budget_;
  done_actual_ += actual;
  current_budget_ = 0;
  if (tty_) std::fprintf(out_, "\r\x1b[2K");
  std::fprintf(out_, "[%d/%d] %s: %s (%.1f s)\n", index + 1, jobs_, label.c_str(), outcome.c_str(), actual);
  std::fflush(out_);
}

void Progress::finish(const std::string& summary) {
  std::fprintf(out_, "%s (%s)\n", summary.c_str(), clock(nowS() - run_started_).c_str());
  std::fflush(out_);
}

std::vector<std::string> benchDirectories(const RunnerOptions& options) {
  if (!options.bench_dir.empty()) return {options.bench_dir};
  return layout::executableDirs();
}

std::string benchDirectoriesText(const RunnerOptions& options) {
  std::string out;
  for (const std::string& d : benchDirectories(options))
    out += (out.empty() ? "" : ", ") + d;
  return out;
}

std::string findBench(const std::string& binary, const RunnerOptions& options) {
  return layout::findExecutable(binary, benchDirectories(options));
}

Status resolveExecutables(std::vector<BenchJob>& jobs, const RunnerOptions& options) {
  std::vector<std::string> missing;
  for (BenchJob& job : jobs) {
    job.path = findBench(job.binary, options);
    job.resolved = true;
    const std::string what = job.binary + " (suite " + job.suite + ")";
    if (job.path.empty() && std::find(missing.begin(), missing.end(), what) == missing.end()) missing.push_back(what);
  }
  if (missing.empty()) return Status::ok();
  std::string names;
  for (const std::string& m : missing)
    names += (names.empty() ? "" : ", ") + m;
  const std::string where =
      options.bench_dir.empty() ? benchDirectoriesText(options) : options.bench_dir + " (--bench-dir)";
  return PEERLAB_UNAVAILABLE(names + (missing.size() == 1 ? " is" : " are") + " not found in " + where + "; build " +
                             (missing.size() == 1 ? "it" : "them") + ": " + layout::buildCommand());
}

nlohmann::json toJson(const BenchOutcome& outcome) {
  nlohmann::json jobs = nlohmann::json::array();
  for (const JobOutcome& j : outcome.jobs) {
    nlohmann::json x = {{"label", j.job.label},
                        {"binary", j.job.binary},
                        {"ranks", j.job.ranks},
                        {"plan", report::toJson(j.job.work)},
                        {"results", j.results},
                        {"wall_s", j.process.wall_s},
                        {"exit", j.error.empty() ? "ok" : j.error}};
    if (!j.json_path.empty()) x["gbench_json"] = j.json_path;
    if (!j.job.work.rounds.empty()) x["rounds"] = j.job.work.rounds.size();
    if (!j.job.guard_for.empty()) x["guard_for"] = j.job.guard_for;
    jobs.push_back(x);
  }
  nlohmann::json concurrency = nlohmann::json::array();
  for (const ConcurrencyCheck& k : outcome.concurrency) {
    concurrency.push_back({{"process", k.process},
                           {"row", k.row},
                           {"serial_gbps", k.serial_gbps},
                           {"concurrent_gbps", k.concurrent_gbps},
                           {"tolerance", k.tolerance},
                           {"agree", k.agree}});
  }
  return {{"interrupted", outcome.interrupted},
          {"jobs", jobs},
          {"concurrency", concurrency},
          {"serial_fallbacks", outcome.fallbacks}};
}

StatusOr<std::vector<report::Result>> readGbenchFile(const std::string& path) {
  PEERLAB_ASSIGN_OR_RETURN(std::string text, readTextFile(path));
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded()) {
    // Google Benchmark writes each run as it completes: keep the entries before the cut.
    const auto cut = text.rfind("\n    }");
    if (cut != std::string::npos) doc = nlohmann::json::parse(text.substr(0, cut + 6) + "\n  ]\n}\n", nullptr, false);
    if (doc.is_discarded()) return PEERLAB_INVALID_ARGUMENT(path + ": malformed Google Benchmark JSON");
  }
  auto results = report::resultsFromGbench(doc);
  if (!results.isOk()) return PEERLAB_INVALID_ARGUMENT(path + ": " + results.status().message());
  return results;
}

namespace {

// One process: runs it under its deadline and reads what it wrote. Its results (a failure row when it did not run to
// completion) go to `results`.
JobOutcome runOne(const BenchJob& job, int index, const RunnerOptions& options, const std::string& dir,
                  Progress& progress, std::vector<report::Result>& results) {
  JobOutcome jo;
  jo.job = job;
  progress.begin(index, job.label, job.budget_s);
  jo.path = job.resolved && !job.path.empty() ? job.path : findBench(job.binary, options);
  if (jo.path.empty()) {
    jo.error = job.binary + " not found in " + benchDirectoriesText(options) + " (" + layout::buildCommand() + ")";
    results.push_back(processFailure(job, jo.error));
    progress.end(index, job.label, "FAILED: " + jo.error);
    return jo;
  }
  jo.json_path = dir + "/" + fileStem(job, index) + ".json";
  jo.log_path = dir + "/" + fileStem(job, index) + ".log";
  // What the process runs, handed over as its plan file.
  const std::string plan_path = dir + "/" + fileStem(job, index) + ".plan.json";
  if (Status st = report::writeBenchPlan(plan_path, job.work); !st.isOk()) {
    jo.error = st.message();
    results.push_back(processFailure(job, jo.error));
    progress.end(index, job.label, "FAILED: " + jo.error);
    return jo;
  }
  process::ProcessOptions po;
  po.argv = {jo.path};
  if (job.ranks > 1) po.argv.push_back("--ranks=" + std::to_string(job.ranks));
  po.argv.push_back("--plan=" + plan_path);
  po.argv.insert(po.argv.end(), options.extra_args.begin(), options.extra_args.end());
  po.argv.push_back("--benchmark_out=" + jo.json_path);
  po.argv.push_back("--benchmark_out_format=json");
  const double deadline =
      options.timeout_s ? *options.timeout_s : std::max(options.min_timeout_s, job.deadline_s * options.timeout_factor);
  // A multi-rank bench stops its own ranks a little before the deadline, so that it can say which rank hung.
  if (job.ranks > 1) {
    po.argv.push_back("--ranks_timeout=" + std::to_string(static_cast<long long>(std::max(10.0, deadline - 15))));
  }
  po.env = options.env;
  po.stdout_path = jo.log_path;
  po.stderr_path = jo.log_path;
  po.timeout = std::chrono::milliseconds(static_cast<long long>(deadline * 1000));
  po.tick = [&progress] { progress.tick(); };
  std::error_code ec;
  std::filesystem::remove(jo.json_path, ec);
  auto proc = process::runProcess(po);
  if (!proc.isOk()) {
    jo.error = proc.status().message();
    results.push_back(processFailure(job, jo.error));
    progress.end(index, job.label, "FAILED: " + jo.error);
    return jo;
  }
  jo.process = *proc;
  // Whatever the process wrote before it stopped is kept.
  if (std::filesystem::exists(jo.json_path)) {
    auto read = readGbenchFile(jo.json_path);
    if (read.isOk()) {
      for (report::Result& r : *read) {
        // A per-pair process measures its pair; results that do not name one get it from the job.
        if (const auto p = onlyPair(job); p && !r.src && !r.dst) {
          r.src = p->first;
          r.dst = p->second;
        }
        r.extra["log"] = std::filesystem::path(jo.log_path).filename().string();
        results.push_back(std::move(r));
        ++jo.results;
      }
    } else if (jo.process.ok()) {
      jo.error = read.status().message();
    }
  } else if (jo.process.ok()) {
    jo.error = "wrote no Google Benchmark JSON";
  }
  if (!jo.process.ok()) {
    std::string cmd = job.binary;
    if (job.ranks > 1) cmd += " --ranks=" + std::to_string(job.ranks);
    cmd += " --plan=" + std::filesystem::path(plan_path).filename().string();
    jo.error = cmd + ": " + process::describeExit(jo.process, po.timeout);
    const std::string tail = tailOfFile(jo.log_path, 1);
    if (!tail.empty() && !jo.process.timed_out) jo.error += " (" + tail.substr(0, tail.find('\n')) + ")";
  }
  if (!jo.error.empty()) results.push_back(processFailure(job, jo.error));
  std::string outcome = jo.error.empty() ? "ok" : "FAILED: " + jo.error;
  outcome += ", " + std::to_string(jo.results) + " results";
  progress.end(index, job.label, outcome);
  return jo;
}

std::string pairText(const std::pair<int, int>& p) {
  return std::to_string(p.first) + "->" + std::to_string(p.second);
}

// The same process over `pairs`, one pair per round (a rank per GPU they name), and its GPUs one at a time.
BenchJob serialJob(const BenchJob& job, const std::vector<std::pair<int, int>>& pairs, const std::string& why) {
  BenchJob j = job;
  const size_t rounds = job.work.rounds.size();
  if (rounds > 0) {
    j.work.rounds.clear();
    std::set<int> gpus;
    for (const auto& p : pairs) {
      j.work.rounds.push_back({p});
      gpus.insert(p.first);
      gpus.insert(p.second);
    }
    if (job.ranks > 1) j.ranks = static_cast<int>(gpus.size());
  }
  j.work.gpu_sets.clear();
  j.label = job.label + " " + why;
  j.deadline_s = rounds == 0 ? job.deadline_s
                             : job.deadline_s / static_cast<double>(rounds) *
                                   static_cast<double>(std::max<size_t>(1, pairs.size()));
  j.work.deadline_s = j.deadline_s;
  j.budget_s = j.deadline_s;
  return j;
}

// The pairs of a multi-pair process that left no rows, less the one its log names as stuck.
std::vector<std::pair<int, int>> pairsLeft(const BenchJob& job, const std::vector<report::Result>& rows,
                                           const std::string& log_path) {
  std::set<std::pair<int, int>> done;
  for (const report::Result& r : rows) {
    if (r.name != "process" && r.src && r.dst) done.insert({*r.src, *r.dst});
  }
  const std::string tail = log_path.empty() ? "" : tailOfFile(log_path, 20);
  std::vector<std::pair<int, int>> left;
  for (const auto& p : job.pairs()) {
    if (done.count(p)) continue;
    // "zcopy_bench: rank 1: BM_Zcopy/peerlab.put/uni/0->1/bytes:8: no progress ...": that pair is not run again.
    if (tail.find("/" + pairText(p) + "/") != std::string::npos) continue;
    left.push_back(p);
  }
  return left;
}

}  // namespace

std::vector<ConcurrencyCheck> compareConcurrency(const std::string& process, const std::vector<report::Result>& serial,
                                                 const std::vector<report::Result>& concurrent, double min_tolerance) {
  auto spread = [](const report::Result& r) {
    const double p10 = r.extra.value("p10_us", 0.0), p90 = r.extra.value("p90_us", 0.0);
    return r.time_us && *r.time_us > 0 && p90 >= p10 ? (p90 - p10) / *r.time_us : 0.0;
  };
  auto usable = [](const report::Result& r) {
    return r.status == "ok" && r.algbw_gbps && *r.algbw_gbps > 0 && r.src && !(r.wrong && *r.wrong > 0);
  };
  std::vector<ConcurrencyCheck> out;
  for (const report::Result& s : serial) {
    if (!usable(s)) continue;
    for (const report::Result& c : concurrent) {
      if (!usable(c) || c.suite != s.suite || c.impl != s.impl || c.name != s.name || c.src != s.src ||
          c.dst != s.dst || c.bytes != s.bytes) {
        continue;
      }
      ConcurrencyCheck k;
      k.process = process;
      k.row = s.impl + " " + s.name + " " +
              (s.dst ? std::to_string(*s.src) + "->" + std::to_string(*s.dst) : "GPU" + std::to_string(*s.src)) +
              (s.bytes ? " " + report::formatBytes(*s.bytes) : "");
      k.serial_gbps = *s.algbw_gbps;
      k.concurrent_gbps = *c.algbw_gbps;
      k.tolerance = std::max(min_tolerance, spread(s) + spread(c));
      k.agree = k.concurrent_gbps >= k.serial_gbps * (1 - k.tolerance);
      out.push_back(k);
    }
  }
  return out;
}

BenchOutcome runJobs(const std::vector<BenchJob>& jobs, const RunnerOptions& options, Progress& progress) {
  BenchOutcome out;
  // Raw files go to --gbench-dir when given, else to a temporary directory removed at the end.
  std::string dir = options.gbench_dir;
  bool temporary = false;
  if (dir.empty()) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "peerlab-bench-XXXXXX").string();
    if (::mkdtemp(tmpl.data())) {
      dir = tmpl;
      temporary = true;
    }
  } else {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
  }
  double budget = 0;
  for (const BenchJob& j : jobs)
    budget += j.budget_s;
  progress.start("peerlab bench", static_cast<int>(jobs.size()), budget);
  std::map<std::string, std::vector<report::Result>> samples;  // serial samples by the label they guard
  int index = 0;
  auto record = [&](JobOutcome jo) {
    if (!jo.error.empty()) ++out.failed_jobs;
    if (jo.process.interrupted) out.interrupted = true;
    out.jobs.push_back(std::move(jo));
  };
  for (const BenchJob& job : jobs) {
    if (process::interruptRequested()) {
      out.interrupted = true;
      break;
    }
    std::vector<report::Result> rows;
    JobOutcome jo = runOne(job, index++, options, dir, progress, rows);
    if (!job.guard_for.empty()) {
      // A serial sample: its rows only judge the concurrent rounds of the process it guards. A sample that failed to
      // run is a failed job.
      samples[job.guard_for] = rows;
      record(std::move(jo));
      if (out.interrupted) break;
      continue;
    }
    // A process over many pairs that stopped early: the pairs it left without rows, once more, one at a time.
    if (!jo.error.empty() && job.pairs().size() > 1 && !out.interrupted && !jo.process.interrupted) {
      const std::vector<std::pair<int, int>> left = pairsLeft(job, rows, jo.log_path);
      // Only where some pair got through: a process that failed before any row would fail the same way again.
      const bool some = left.size() < job.pairs().size();
      record(std::move(jo));
      if (!left.empty() && some) {
        std::vector<report::Result> more;
        record(runOne(serialJob(job, left, "(the pairs left, one at a time)"), index++, options, dir, progress, more));
        rows.insert(rows.end(), more.begin(), more.end());
      }
    } else if (auto guard = samples.find(job.label); guard != samples.end() && jo.error.empty()) {
      const std::vector<ConcurrencyCheck> checks = compareConcurrency(job.label, guard->second, rows);
      out.concurrency.insert(out.concurrency.end(), checks.begin(), checks.end());
      std::string why;
      for (const ConcurrencyCheck& k : checks) {
        if (!k.agree && why.empty()) {
          char buf[200];
          std::snprintf(buf, sizeof(buf), "%s: %.1f GB/s at once against %.1f alone (more than %.0f%% below)",
                        k.row.c_str(), k.concurrent_gbps, k.serial_gbps, 100 * k.tolerance);
          why = buf;
        }
      }
      if (checks.empty()) why = "its serial sample gave no row to compare";
      record(std::move(jo));
      if (!why.empty() && !out.interrupted) {
        out.fallbacks.push_back(job.label + ": " + why);
        std::vector<report::Result> serial;
        record(runOne(serialJob(job, job.pairs(), "(one at a time)"), index++, options, dir, progress, serial));
        rows = std::move(serial);
      }
    } else {
      record(std::move(jo));
    }
    out.results.insert(out.results.end(), rows.begin(), rows.end());
    if (out.interrupted) break;
  }
  if (temporary) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    for (JobOutcome& j : out.jobs) {
      j.json_path.clear();
      j.log_path.clear();
    }
    for (report::Result& r : out.results)
      r.extra.erase("log");
  }
  return out;
}

}  // namespace peerlab::qualify
