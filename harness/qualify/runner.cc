#include "harness/qualify/runner.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include "harness/layout/layout.h"
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

std::string fileStem(const BenchJob& job, int index) {
  std::string s = std::to_string(index + 1) + "-" + job.suite;
  if (job.src && job.dst) s += "-" + std::to_string(*job.src) + "-" + std::to_string(*job.dst);
  return s;
}

report::Result processFailure(const BenchJob& job, const std::string& why) {
  report::Result r;
  r.suite = job.suite;
  r.name = "process";
  r.impl = job.binary;
  r.src = job.src;
  r.dst = job.dst;
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

nlohmann::json toJson(const BenchOutcome& outcome, const std::string& mode) {
  nlohmann::json jobs = nlohmann::json::array();
  for (const JobOutcome& j : outcome.jobs) {
    nlohmann::json x = {{"label", j.job.label},
                        {"binary", j.job.binary},
                        {"args", j.job.args},
                        {"env", j.job.env},
                        {"results", j.results},
                        {"wall_s", j.process.wall_s},
                        {"exit", j.error.empty() ? "ok" : j.error}};
    if (!j.json_path.empty()) x["gbench_json"] = j.json_path;
    jobs.push_back(x);
  }
  return {{"mode", mode}, {"interrupted", outcome.interrupted}, {"jobs", jobs}};
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
  for (size_t i = 0; i < jobs.size(); ++i) {
    const BenchJob& job = jobs[i];
    JobOutcome jo;
    jo.job = job;
    if (process::interruptRequested()) {
      out.interrupted = true;
      break;
    }
    progress.begin(static_cast<int>(i), job.label, job.budget_s);
    jo.path = job.resolved && !job.path.empty() ? job.path : findBench(job.binary, options);
    if (jo.path.empty()) {
      jo.error = job.binary + " not found in " + benchDirectoriesText(options) + " (" + layout::buildCommand() + ")";
      out.results.push_back(processFailure(job, jo.error));
      ++out.failed_jobs;
      progress.end(static_cast<int>(i), job.label, "FAILED: " + jo.error);
      out.jobs.push_back(jo);
      continue;
    }
    jo.json_path = dir + "/" + fileStem(job, static_cast<int>(i)) + ".json";
    jo.log_path = dir + "/" + fileStem(job, static_cast<int>(i)) + ".log";
    process::ProcessOptions po;
    po.argv = {jo.path};
    po.argv.insert(po.argv.end(), job.args.begin(), job.args.end());
    po.argv.insert(po.argv.end(), options.extra_args.begin(), options.extra_args.end());
    po.argv.push_back("--benchmark_out=" + jo.json_path);
    po.argv.push_back("--benchmark_out_format=json");
    const double deadline = options.timeout_s
                                ? *options.timeout_s
                                : std::max(options.min_timeout_s, job.deadline_s * options.timeout_factor);
    // A multi-rank bench stops its own ranks a little before the deadline, so that it can say which rank hung.
    if (job.ranks > 1) {
      po.argv.push_back("--ranks_timeout=" + std::to_string(static_cast<long long>(std::max(10.0, deadline - 15))));
    }
    po.env = options.env;
    po.env.insert(po.env.end(), job.env.begin(), job.env.end());
    po.stdout_path = jo.log_path;
    po.stderr_path = jo.log_path;
    po.timeout = std::chrono::milliseconds(static_cast<long long>(deadline * 1000));
    po.tick = [&progress] { progress.tick(); };
    std::error_code ec;
    std::filesystem::remove(jo.json_path, ec);
    auto proc = process::runProcess(po);
    if (!proc.isOk()) {
      jo.error = proc.status().message();
      out.results.push_back(processFailure(job, jo.error));
      ++out.failed_jobs;
      progress.end(static_cast<int>(i), job.label, "FAILED: " + jo.error);
      out.jobs.push_back(jo);
      continue;
    }
    jo.process = *proc;
    // Whatever the process wrote before it stopped is kept.
    if (std::filesystem::exists(jo.json_path)) {
      auto results = readGbenchFile(jo.json_path);
      if (results.isOk()) {
        for (report::Result& r : *results) {
          // A per-pair process measures its pair; results that do not name one get it from the job.
          if (job.src && !r.src) r.src = job.src;
          if (job.dst && !r.dst) r.dst = job.dst;
          r.extra["log"] = std::filesystem::path(jo.log_path).filename().string();
          out.results.push_back(std::move(r));
          ++jo.results;
        }
      } else if (jo.process.ok()) {
        jo.error = results.status().message();
      }
    } else if (jo.process.ok()) {
      jo.error = "wrote no Google Benchmark JSON";
    }
    if (!jo.process.ok()) {
      std::string cmd = job.binary;
      for (const std::string& a : job.args)
        cmd += " " + a;
      jo.error = cmd + ": " + process::describeExit(jo.process, po.timeout);
      const std::string tail = tailOfFile(jo.log_path, 1);
      if (!tail.empty() && !jo.process.timed_out) jo.error += " (" + tail.substr(0, tail.find('\n')) + ")";
    }
    if (!jo.error.empty()) {
      out.results.push_back(processFailure(job, jo.error));
      ++out.failed_jobs;
    }
    if (jo.process.interrupted) out.interrupted = true;
    std::string outcome = jo.error.empty() ? "ok" : "FAILED: " + jo.error;
    outcome += ", " + std::to_string(jo.results) + " results";
    progress.end(static_cast<int>(i), job.label, outcome);
    out.jobs.push_back(jo);
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
