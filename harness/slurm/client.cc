#include "harness/slurm/client.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <sstream>

#include "harness/slurm/hostlist.h"
#include "reference/core/files.h"
#include "reference/core/process.h"
#include "reference/core/text.h"

namespace peerlab::slurm {
namespace {

std::vector<std::string> splitOn(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(text);
  while (std::getline(in, cur, sep))
    out.push_back(cur);
  return out;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  for (std::string& l : splitOn(text, '\n')) {
    if (!l.empty() && l.back() == '\r') l.pop_back();
    if (!l.empty()) out.push_back(std::move(l));
  }
  return out;
}

// The "Key=Value" fields of one line of scontrol -o output, up to `stop` (the start of a free-text field). A value
// runs to the next " Key=" (values such as OS= hold spaces).
std::map<std::string, std::string> fields(const std::string& line, size_t stop = std::string::npos) {
  static const std::regex key(R"((^| +)([A-Za-z][A-Za-z0-9_:]*)=)");
  std::map<std::string, std::string> out;
  const std::string text = line.substr(0, stop);
  std::vector<std::pair<std::string, std::pair<size_t, size_t>>> found;  // key, (value start, match start)
  for (auto it = std::sregex_iterator(text.begin(), text.end(), key); it != std::sregex_iterator(); ++it) {
    found.push_back(
        {(*it)[2].str(), {static_cast<size_t>(it->position() + it->length()), static_cast<size_t>(it->position())}});
  }
  for (size_t i = 0; i < found.size(); ++i) {
    const size_t start = found[i].second.first;
    const size_t end = i + 1 < found.size() ? found[i + 1].second.second : text.size();
    std::string v = text.substr(start, end - start);
    while (!v.empty() && v.back() == ' ')
      v.pop_back();
    out.emplace(found[i].first, v);
  }
  return out;
}

bool activeState(const std::string& s) {
  for (const char* a : {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_FED",
                        "REQUEUE_HOLD", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD"}) {
    if (s == a) return true;
  }
  return false;
}

}  // namespace

std::string NodeInfo::base() const {
  return state.substr(0, state.find('+'));
}

bool NodeInfo::hasFlag(const std::string& flag) const {
  return ("+" + state + "+").find("+" + flag + "+") != std::string::npos;
}

bool NodeInfo::down() const {
  const std::string b = base();
  return b == "DOWN" || b == "FAIL" || b == "FUTURE" || b == "UNKNOWN" || hasFlag("FAIL") || hasFlag("POWERED_DOWN") ||
         hasFlag("POWER_DOWN");
}

bool NodeInfo::busy() const {
  const std::string b = base();
  return b == "ALLOCATED" || b == "MIXED" || b == "COMPLETING" || hasFlag("COMPLETING") || alloc_cpus > 0;
}

bool JobInfo::active() const {
  return activeState(state);
}

bool JobInfo::started() const {
  for (const char* s :
       {"RUNNING", "COMPLETING", "COMPLETED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED"}) {
    if (state == s) return true;
  }
  return false;
}

std::string cleanReason(const std::string& reason) {
  std::string out;
  for (unsigned char c : reason) {
    if (c < 0x20 || c == 0x7f || c == '"' || c == '\'' || c == '\\') {
      if (!out.empty() && out.back() != ' ') out += ' ';
      continue;
    }
    out += static_cast<char>(c);
  }
  while (!out.empty() && out.back() == ' ')
    out.pop_back();
  if (out.size() > kMaxReasonBytes) {
    out.resize(kMaxReasonBytes);
    // Not in the middle of a UTF-8 sequence.
    while (!out.empty() && (static_cast<unsigned char>(out.back()) & 0xC0) == 0x80)
      out.pop_back();
    if (!out.empty() && static_cast<unsigned char>(out.back()) >= 0xC0) out.pop_back();
  }
  return out;
}

StatusOr<std::vector<NodeInfo>> parseNodes(const std::string& text) {
  // The reason is free text; Slurm ends it with " [user@2026-12-01T23:26:13]" and may print Comment= or Extra= after.
  static const std::regex stamp(R"( \[[^\[\] ]*@\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\]( |$))");
  std::vector<NodeInfo> out;
  for (const std::string& line : lines(text)) {
    if (line.rfind("NodeName=", 0) != 0) {
      return PEERLAB_UNAVAILABLE("scontrol show node: an unexpected line \"" + printable(line, 120) + "\"");
    }
    const size_t at = line.find(" Reason=");
    NodeInfo n;
    if (at != std::string::npos) {
      std::string rest = line.substr(at + 8);
      std::smatch m;
      if (std::regex_search(rest, m, stamp)) rest = rest.substr(0, m.position());
      n.reason = rest;
    }
    const auto f = fields(line, at);
    n.name = f.count("NodeName") ? f.at("NodeName") : "";
    n.hostname = f.count("NodeHostName") ? f.at("NodeHostName") : "";
    n.state = f.count("State") ? f.at("State") : "";
    if (f.count("CPUAlloc")) n.alloc_cpus = std::atoi(f.at("CPUAlloc").c_str());
    if (n.name.empty() || n.state.empty()) {
      return PEERLAB_UNAVAILABLE("scontrol show node: no NodeName or State in \"" + printable(line, 120) + "\"");
    }
    out.push_back(std::move(n));
  }
  return out;
}

StatusOr<std::vector<Reservation>> parseReservations(const std::string& text) {
  std::vector<Reservation> out;
  for (const std::string& line : lines(text)) {
    if (line.rfind("No reservations", 0) == 0) continue;
    if (line.rfind("ReservationName=", 0) != 0) {
      return PEERLAB_UNAVAILABLE("scontrol show reservation: an unexpected line \"" + printable(line, 120) + "\"");
    }
    const auto f = fields(line);
    Reservation r;
    r.name = f.at("ReservationName");
    r.flags = f.count("Flags") ? f.at("Flags") : "";
    r.users = f.count("Users") ? f.at("Users") : "";
    const std::string nodes = f.count("Nodes") ? f.at("Nodes") : "";
    if (!nodes.empty() && nodes != "(null)") {
      auto names = expandHostlist(nodes);
      if (!names.isOk())
        return PEERLAB_UNAVAILABLE("scontrol show reservation " + r.name + ": " + names.status().message());
      r.nodes = std::move(*names);
    }
    out.push_back(std::move(r));
  }
  return out;
}

StatusOr<std::vector<JobInfo>> parseJobs(const std::string& text) {
  std::vector<JobInfo> out;
  for (const std::string& line : lines(text)) {
    const std::vector<std::string> p = splitOn(line, '|');
    if (p.size() < 4 || p[0].empty() ||
        !std::all_of(p[0].begin(), p[0].end(), [](char c) { return (c >= '0' && c <= '9') || c == '_'; })) {
      return PEERLAB_UNAVAILABLE("squeue: an unexpected line \"" + printable(line, 120) + "\"");
    }
    JobInfo j;
    j.id = p[0];
    j.name = p[1];
    j.state = p[2];
    j.nodes = p[3];
    if (p.size() > 4) j.reason = p[4];
    out.push_back(std::move(j));
  }
  return out;
}

namespace {

// The launcher a batch job starts: it runs its arguments as they are. Slurm wants a script; this one holds no data.
constexpr const char* kLauncher =
    "#!/bin/sh\n# peerlab: runs the job's arguments as given (no shell words)\nexec \"$@\"\n";

bool validEnvName(const std::string& k) {
  if (k.empty() || (k[0] >= '0' && k[0] <= '9')) return false;
  return std::all_of(k.begin(), k.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

class CommandClient final : public Client {
 public:
  explicit CommandClient(CommandOptions o) : o_(std::move(o)) {}
  ~CommandClient() override {
    if (!scratch_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(scratch_, ec);
    }
  }

  StatusOr<std::vector<NodeInfo>> nodes(const std::vector<std::string>& names) override {
    std::vector<std::string> argv = {"scontrol", "show", "node", "-o"};
    if (!names.empty()) argv.push_back(joinNames(names));
    PEERLAB_ASSIGN_OR_RETURN(std::string out, run(argv));
    PEERLAB_ASSIGN_OR_RETURN(std::vector<NodeInfo> all, parseNodes(out));
    if (!names.empty()) {
      for (const std::string& n : names) {
        if (std::none_of(all.begin(), all.end(), [&](const NodeInfo& i) { return i.name == n; })) {
          return PEERLAB_UNAVAILABLE("scontrol show node: " + n + " is not in its answer");
        }
      }
    }
    return all;
  }

  StatusOr<std::vector<std::string>> partitionNodes(const std::string& partition) override {
    PEERLAB_ASSIGN_OR_RETURN(std::string out, run({"scontrol", "show", "partition", "-o", partition}));
    for (const std::string& line : lines(out)) {
      const auto f = fields(line);
      if (!f.count("PartitionName") || f.at("PartitionName") != partition) continue;
      const std::string nodes = f.count("Nodes") ? f.at("Nodes") : "";
      if (nodes.empty() || nodes == "(null)") return std::vector<std::string>{};
      auto names = expandHostlist(nodes);
      if (!names.isOk()) return PEERLAB_UNAVAILABLE("partition " + partition + ": " + names.status().message());
      return names;
    }
    return PEERLAB_INVALID_ARGUMENT("no partition " + printable(partition, 60));
  }

  Status drain(const std::string& node, const std::string& reason) override {
    return run({"scontrol", "update", "nodename=" + node, "state=drain", "reason=" + cleanReason(reason)}).status();
  }
  Status resume(const std::string& node) override {
    return run({"scontrol", "update", "nodename=" + node, "state=resume"}).status();
  }
  StatusOr<std::vector<Reservation>> reservations() override {
    PEERLAB_ASSIGN_OR_RETURN(std::string out, run({"scontrol", "show", "reservation", "-o"}));
    return parseReservations(out);
  }
  Status createReservation(const std::string& name, const std::vector<std::string>& nodes,
                           const std::string& users) override {
    return run({"scontrol", "create", "reservation", "reservationname=" + name, "starttime=now", "duration=UNLIMITED",
                "nodes=" + joinNames(nodes), "users=" + users, "flags=maint,ignore_jobs"})
        .status();
  }
  Status deleteReservation(const std::string& name) override {
    auto r = run({"scontrol", "delete", "reservationname=" + name});
    if (r.isOk()) return Status::ok();
    // Gone already: what was asked for holds.
    auto all = reservations();
    if (all.isOk() && std::none_of(all->begin(), all->end(), [&](const Reservation& x) { return x.name == name; }))
      return Status::ok();
    return r.status();
  }

  StatusOr<std::string> submit(const JobSpec& job) override {
    PEERLAB_ASSIGN_OR_RETURN(std::string launcher, launcherPath());
    std::vector<std::string> env;
    std::string exportNames = "PATH";
    for (const auto& [k, v] : job.env) {
      if (!validEnvName(k))
        return PEERLAB_INVALID_ARGUMENT("job environment: \"" + printable(k, 40) + "\" is not a name");
      if (k == "PATH") continue;
      env.push_back(k + "=" + v);
      if (k.rfind("SLURM_", 0) != 0) exportNames += "," + k;
    }
    std::vector<std::string> argv = {"sbatch",
                                     "--parsable",
                                     "--job-name=" + job.name,
                                     "--nodes=1",
                                     "--nodelist=" + job.node,
                                     "--no-requeue",
                                     "--export=" + exportNames};
    if (job.exclusive) argv.push_back("--exclusive");
    if (!job.reservation.empty()) argv.push_back("--reservation=" + job.reservation);
    if (!job.output.empty()) {
      argv.push_back("--output=" + job.output);
      argv.push_back("--chdir=" + std::filesystem::path(job.output).parent_path().string());
    }
    if (job.time_limit_min > 0) argv.push_back("--time=" + std::to_string(job.time_limit_min));
    argv.push_back(launcher);
    argv.insert(argv.end(), job.argv.begin(), job.argv.end());
    const auto path = job.env.count("PATH") ? job.env.at("PATH") : std::string(kSafePath);
    PEERLAB_ASSIGN_OR_RETURN(std::string out, run(argv, env, path));
    std::string id = lines(out).empty() ? "" : lines(out).back();
    id = id.substr(0, id.find(';'));
    if (id.empty() || !std::all_of(id.begin(), id.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return PEERLAB_UNAVAILABLE("sbatch: no job id in its answer \"" + printable(out, 120) + "\"");
    }
    return id;
  }

  StatusOr<std::vector<JobInfo>> jobsNamed(const std::string& name) override {
    PEERLAB_ASSIGN_OR_RETURN(std::string out,
                             run({"squeue", "-h", "-t", "all", "--name=" + name, "-o", "%i|%j|%T|%N|%r"}));
    return parseJobs(out);
  }
  Status cancel(const std::string& id) override { return run({"scancel", id}).status(); }
  std::int64_t calls() const override { return calls_; }

 private:
  static constexpr const char* kSafePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

  std::string program(const std::string& name) const {
    if (!o_.bin_dir.empty()) return (std::filesystem::path(o_.bin_dir) / name).string();
    for (const char* dir : {"/usr/bin", "/usr/local/bin", "/opt/slurm/bin", "/usr/sbin"}) {
      const std::string p = std::string(dir) + "/" + name;
      if (::access(p.c_str(), X_OK) == 0) return p;
    }
    return name;
  }

  StatusOr<std::string> scratch() {
    if (scratch_.empty()) {
      PEERLAB_ASSIGN_OR_RETURN(scratch_, makePrivateDir("peerlab-slurm"));
    }
    return scratch_;
  }

  StatusOr<std::string> launcherPath() {
    if (!launcher_.empty()) return launcher_;
    std::string dir = o_.job_script_dir;
    if (dir.empty()) {
      PEERLAB_ASSIGN_OR_RETURN(dir, scratch());
    }
    const std::string path = dir + "/peerlab-job-launcher.sh";
    PEERLAB_RETURN_IF_ERROR(writeTextFile(path, kLauncher));
    ::chmod(path.c_str(), 0755);
    launcher_ = path;
    return launcher_;
  }

  // Runs one command; its stdout, or an error naming it with its first line of stderr.
  StatusOr<std::string> run(std::vector<std::string> argv, const std::vector<std::string>& extra_env = {},
                            const std::string& path = kSafePath) {
    ++calls_;
    PEERLAB_ASSIGN_OR_RETURN(std::string dir, scratch());
    // "scontrol show node", "sbatch", "squeue": the command and, for scontrol, what it was asked.
    std::string what = argv[0];
    for (size_t i = 1; argv[0] == "scontrol" && i < argv.size() && i < 3; ++i)
      what += " " + argv[i];
    argv[0] = program(argv[0]);
    process::ProcessOptions po;
    po.argv = argv;
    po.clear_env = true;
    po.env = {"PATH=" + path, "LANG=C", "LC_ALL=C"};
    if (!o_.slurm_conf.empty()) po.env.push_back("SLURM_CONF=" + o_.slurm_conf);
    po.env.insert(po.env.end(), extra_env.begin(), extra_env.end());
    po.stdout_path = dir + "/out";
    po.stderr_path = dir + "/err";
    po.timeout = std::chrono::milliseconds(static_cast<long long>(o_.timeout_s * 1000));
    po.kill_grace = std::chrono::seconds(2);
    auto r = process::runProcess(po);
    if (!r.isOk()) return PEERLAB_UNAVAILABLE(what + ": " + r.status().message());
    auto out = readTextFile(po.stdout_path);
    auto err = readTextFile(po.stderr_path);
    if (!r->ok()) {
      std::string first = err.isOk() ? *err : "";
      first = first.substr(0, first.find('\n'));
      return PEERLAB_UNAVAILABLE(what + ": " + process::describeExit(*r, po.timeout) +
                                 (first.empty() ? "" : ": " + printable(first, 200)));
    }
    if (!out.isOk()) return PEERLAB_UNAVAILABLE(what + ": " + out.status().message());
    return *out;
  }

  CommandOptions o_;
  std::string scratch_;
  std::string launcher_;
  std::int64_t calls_ = 0;
};

}  // namespace

std::unique_ptr<Client> makeCommandClient(const CommandOptions& options) {
  return std::make_unique<CommandClient>(options);
}

}  // namespace peerlab::slurm
