// peerlab repro: a bug bundle a driver vendor can act on: fingerprint, hwloc XML, IOMMU and ACS state, the kernel
// command line, the probe's run file and a README with the one command that reproduces the failing cells.
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "harness/cli/command.h"
#include "harness/qualify/pipeline.h"
#include "harness/qualify/sysinfo.h"
#include "harness/report/compare.h"
#include "harness/report/render/escape.h"
#include "harness/report/report.h"
#include "harness/topology/topology.h"
#include "reference/core/files.h"
#include "reference/core/process.h"
#include "reference/core/text.h"
#include "reference/probe/inject.h"
#include "reference/probe/probe.h"

namespace peerlab::cli {
namespace {

constexpr const char* kCmd = "repro";

struct ReproArgs {
  std::string out;
  std::string probe_json;
  std::string methods;
  std::string pairs;
  std::string sizes;
  std::string timeout;
  bool skip_probe = false;
  bool other_machine = false;
};

// The arguments a probe run file records ("probe": seed, methods, sizes, pairs, timeouts), read and checked here: they
// end up in the command the README gives.
struct ProbeRecord {
  std::optional<uint64_t> seed;
  std::optional<uint32_t> timeout_ms;
  std::optional<uint32_t> setup_timeout_ms;
  std::vector<std::string> methods;
  std::vector<uint64_t> sizes;
  std::string pairs;
};

struct FailingCell {
  std::string method;
  int src = -1;
  int dst = -1;
  double bytes = 0;
  std::string verdict;
  bool claimed = false;
  std::string detail;
  std::string injected;  ///< the fault kind injected into this cell, "" when none
};

std::string knownMethods() {
  std::string known;
  for (probe::Method m : probe::kAllMethods)
    known += (known.empty() ? "" : ", ") + std::string(probe::methodName(m));
  return known;
}

// A run-file string in Markdown text or a table cell: printable, bounded, escaped, and no backtick that would pair
// with the README's own code spans.
std::string mdCell(const std::string& text) {
  return report::markdownCell(printable(text, 300), report::Backticks::kAsQuotes);
}

// What the probe run file says about injected faults or stand-ins, "" when nothing was injected.
std::string injectedBy(const report::Run& probe) {
  const report::Injection& i = probe.fingerprint.injected;
  if (!i.any()) return "";
  std::string what;
  auto add = [&](const std::string& part) { what += (what.empty() ? "" : ", ") + part; };
  if (!i.probe_inject.empty()) add(std::string(probe::kInjectEnv) + "=" + qualify::shellQuote(i.probe_inject));
  if (!i.probe_worker.empty()) add("worker " + qualify::shellQuote(i.probe_worker));
  report::Injection rest = i;
  rest.probe_inject.clear();
  rest.probe_worker.clear();
  if (rest.any()) add(rest.describe());
  return printable(what, 300);
}

std::string osRelease() {
  std::ifstream f("/etc/os-release");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("PRETTY_NAME=", 0) == 0) {
      std::string v = line.substr(12);
      if (v.size() >= 2 && v.front() == '"') v = v.substr(1, v.size() - 2);
      return v;
    }
  }
  return "unknown";
}

std::string firstLine(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

std::string methodOf(const report::Result& r) {
  auto m = r.extra.find("method");
  return m != r.extra.end() && m->is_string() ? m->get<std::string>() : r.name.substr(0, r.name.find('/'));
}

// Every probe cell must name a known method: a name from the file ends up in the command the README gives.
Status checkProbeMethods(const report::Run& probe, const std::string& file) {
  for (size_t i = 0; i < probe.results.size(); ++i) {
    const report::Result& r = probe.results[i];
    if (r.suite != probe::kResultSuite || !r.src || !r.dst) continue;
    const std::string m = methodOf(r);
    if (!probe::parseMethod(m)) {
      return PEERLAB_INVALID_ARGUMENT(file + ": $.results[" + std::to_string(i) + "].method \"" + printable(m, 60) +
                                      "\" is not a probe method (known: " + knownMethods() + ")");
    }
  }
  return Status::ok();
}

std::vector<FailingCell> failingCells(const report::Run& probe) {
  std::vector<FailingCell> out;
  for (const report::Result& r : probe.results) {
    if (r.suite != probe::kResultSuite || !r.src || !r.dst) continue;
    const bool claimed =
        r.extra.contains("claimed") && r.extra["claimed"].is_boolean() && r.extra["claimed"].get<bool>();
    // A claimed cell that does not verify is the driver's bug; corruption or a hang is one whether claimed or not.
    const bool bad =
        (claimed && r.status != "ok") || r.status == "corrupt" || r.status == "hang" || r.status == "error";
    if (!bad) continue;
    FailingCell c;
    c.method = methodOf(r);
    if (auto inj = r.extra.find("injected"); inj != r.extra.end() && inj->is_string())
      c.injected = inj->get<std::string>();
    c.src = *r.src;
    c.dst = *r.dst;
    c.bytes = r.bytes.value_or(0);
    c.verdict = r.status;
    c.claimed = claimed;
    if (r.wrong && *r.wrong > 0) {
      const long long n = static_cast<long long>(*r.wrong);
      c.detail += std::to_string(n) + (n == 1 ? " wrong 8-byte word" : " wrong 8-byte words");
    }
    if (r.extra.contains("first_bad") && r.extra["first_bad"].is_number()) {
      c.detail += (c.detail.empty() ? "" : ", ") + std::string("first bad byte at ") + r.extra["first_bad"].dump();
    }
    if (r.extra.contains("error") && r.extra["error"].is_string() && !r.extra["error"].get<std::string>().empty()) {
      c.detail += (c.detail.empty() ? "" : ", ") + r.extra["error"].get<std::string>();
    }
    if (r.extra.contains("path") && r.extra["path"].is_string()) {
      c.detail += (c.detail.empty() ? "" : ", ") + std::string("path ") + r.extra["path"].get<std::string>();
    }
    out.push_back(c);
  }
  return out;
}

// The probe's record of what it was asked for. `invalid_argument` names the file and the key of a value that is not a
// probe argument (the README must never tell a vendor to run a typo).
StatusOr<ProbeRecord> readProbeRecord(const report::Run& probe, const std::string& file) {
  ProbeRecord rec;
  // The run file's probe arguments (not a suite).
  auto it = probe.extra.find("probe");
  if (it == probe.extra.end() || !it->is_object()) return rec;
  const nlohmann::json& p = *it;
  auto bad = [&](const std::string& key, const nlohmann::json& v) {
    return PEERLAB_INVALID_ARGUMENT(file + ": $.probe." + key + ": " + printable(v.dump(), 60) +
                                    " is not a probe argument");
  };
  if (auto s = p.find("seed"); s != p.end() && !s->is_null()) {
    if (!s->is_number_unsigned() && !(s->is_number_integer() && s->get<long long>() >= 0)) return bad("seed", *s);
    rec.seed = s->get<uint64_t>();
  }
  for (const char* key : {"timeout_ms", "setup_timeout_ms"}) {
    auto t = p.find(key);
    if (t == p.end() || t->is_null()) continue;
    if (!t->is_number_integer() || t->get<long long>() < 1 || t->get<long long>() > 3600000) return bad(key, *t);
    (std::string(key) == "timeout_ms" ? rec.timeout_ms : rec.setup_timeout_ms) = t->get<uint32_t>();
  }
  if (auto m = p.find("methods"); m != p.end() && !m->is_null()) {
    if (!m->is_array() || m->size() > 64) return bad("methods", *m);
    for (const auto& x : *m) {
      if (!x.is_string() || !probe::parseMethod(x.get<std::string>())) return bad("methods", x);
      rec.methods.push_back(x.get<std::string>());
    }
  }
  if (auto z = p.find("sizes"); z != p.end() && !z->is_null()) {
    if (!z->is_array() || z->size() > 64) return bad("sizes", *z);
    for (const auto& x : *z) {
      if (!x.is_number_unsigned() || !probe::validateCellBytes(x.get<uint64_t>()).isOk()) return bad("sizes", x);
      rec.sizes.push_back(x.get<uint64_t>());
    }
  }
  if (auto q = p.find("pairs"); q != p.end() && !q->is_null()) {
    if (!q->is_string() || q->get<std::string>().size() > 4096) return bad("pairs", *q);
    if (!q->get<std::string>().empty() && !probe::parsePairs(q->get<std::string>()).isOk()) return bad("pairs", *q);
    rec.pairs = q->get<std::string>();
  }
  return rec;
}

// The exact probe invocation covering every failing cell (and nothing the user did not ask for), with the seed and
// the timeouts the probe ran with, so that every cell moves the same pattern again.
std::string reproCommand(const std::vector<FailingCell>& cells, const ReproArgs& a, const ProbeRecord& rec) {
  std::set<std::string> methods, pairs;
  std::set<double> sizes;
  for (const FailingCell& c : cells) {
    methods.insert(c.method);
    pairs.insert(std::to_string(c.src) + "-" + std::to_string(c.dst));
    if (c.bytes > 0) sizes.insert(c.bytes);
  }
  auto join = [](const auto& set, auto fmt) {
    std::string s;
    for (const auto& x : set)
      s += (s.empty() ? "" : ",") + fmt(x);
    return s;
  };
  auto sizeText = [](double b) {
    return std::to_string(b >= 0 && b < 1.8e19 ? static_cast<unsigned long long>(b) : 0ull);
  };
  std::string cmd = "peerlab probe";
  if (cells.empty()) {
    // Everything the probe ran: as it recorded it, else as this command was asked.
    const std::string m = !rec.methods.empty() ? join(rec.methods, [](const std::string& x) { return x; }) : a.methods;
    const std::string p = !rec.pairs.empty() ? rec.pairs : a.pairs;
    const std::string z = !rec.sizes.empty() ? join(rec.sizes, [](uint64_t b) { return std::to_string(b); }) : a.sizes;
    if (!m.empty()) cmd += " --methods " + qualify::shellQuote(m);
    if (!p.empty()) cmd += " --pairs " + qualify::shellQuote(p);
    if (!z.empty()) cmd += " --sizes " + qualify::shellQuote(z);
  } else {
    // Every argument quoted: method names come from a file (validated, and quoted all the same).
    cmd += " --methods " + qualify::shellQuote(join(methods, [](const std::string& x) { return x; }));
    cmd += " --pairs " + qualify::shellQuote(join(pairs, [](const std::string& x) { return x; }));
    if (!sizes.empty()) cmd += " --sizes " + qualify::shellQuote(join(sizes, sizeText));
  }
  if (rec.seed) cmd += " --seed " + std::to_string(*rec.seed);
  if (rec.timeout_ms) {
    cmd += " --timeout " + std::to_string(*rec.timeout_ms) + "ms";
  } else if (!a.timeout.empty()) {
    cmd += " --timeout " + qualify::shellQuote(a.timeout);
  }
  if (rec.setup_timeout_ms) cmd += " --setup-timeout " + std::to_string(*rec.setup_timeout_ms) + "ms";
  return cmd + " --refresh --verbose --json probe-repro.json";
}

// Whether the probe ran on another machine than this one: by its GPUs' UUIDs where both sides list them, else by
// the host name. "" when it is this machine (or nothing tells them apart), else both described.
std::string otherMachine(const report::Run& probe, const report::Fingerprint& here) {
  const report::NodeIdentity theirs = report::nodeIdentity(probe.fingerprint, "");
  const report::NodeIdentity ours = report::nodeIdentity(here, "");
  bool other = false;
  if (!theirs.gpu_uuids.empty() && !ours.gpu_uuids.empty()) {
    other = theirs.gpu_uuids != ours.gpu_uuids;
  } else {
    other = probe.fingerprint.hostname != here.hostname;
  }
  if (!other) return "";
  auto describe = [](const report::Fingerprint& fp, const report::NodeIdentity& n) {
    return "host " + (fp.hostname.empty() ? std::string("?") : fp.hostname) + ", node " +
           (n.id.empty() ? std::string("?") : n.id) + ", " + report::gpuSummary(fp) + ", driver " +
           (fp.driver.empty() ? std::string("?") : fp.driver);
  };
  return "the probe ran on " + describe(probe.fingerprint, theirs) + "; this machine is " + describe(here, ours);
}

// The last `max_bytes` of a file another program wrote.
std::string tailBytes(const std::string& path, size_t max_bytes) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) return "";
  const std::streamoff size = f.tellg();
  const std::streamoff from = size > static_cast<std::streamoff>(max_bytes) ? size - max_bytes : 0;
  f.seekg(from);
  std::string text(static_cast<size_t>(size - from), '\0');
  f.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(f.gcount()));
  return text;
}

// Runs a tool under a deadline, its output into `file` of the scratch directory; the output (its last 8 MiB), or
// "" with `why` set when it could not run or failed.
std::string runTool(const std::vector<std::string>& argv, const std::string& file, std::chrono::seconds deadline,
                    std::string& why) {
  const std::string exe = findInPath(argv[0]);
  if (exe.empty()) {
    why = argv[0] + " is not installed";
    return "";
  }
  process::ProcessOptions po;
  po.argv = argv;
  po.argv[0] = exe;
  po.stdout_path = file;
  po.stderr_path = file + ".err";
  po.timeout = deadline;
  auto r = process::runProcess(po);
  if (!r.isOk()) {
    why = r.status().message();
    return "";
  }
  if (!r->ok()) {
    std::string last = tailOfFile(file + ".err", 1);
    while (!last.empty() && last.back() == '\n')
      last.pop_back();
    why = argv[0] + ": " + process::describeExit(*r, po.timeout) +
          (last.empty() ? "" : " (" + printable(last, 200) + ")");
    return "";
  }
  return tailBytes(file, size_t{8} << 20);
}

std::string probeArgsText(const std::vector<std::string>& argv) {
  std::string s;
  for (size_t i = 0; i < argv.size(); ++i)
    s += (i ? " " : "") + qualify::shellQuote(i == 0 ? "peerlab" : argv[i]);
  return s;
}

// The probe's own options, checked before anything is written (a bundle must never tell a vendor to run a typo): the
// one reading `peerlab probe` and qualify apply.
Status checkProbeOptions(const ReproArgs& a) {
  qualify::ProbeOptionsText text;
  if (!a.methods.empty()) text.methods = a.methods;
  text.pairs = a.pairs;
  text.sizes = a.sizes;
  if (!a.timeout.empty()) text.timeout = a.timeout;
  return qualify::readProbeOptions(text).status();
}

// The bundle being written: its directory, a private scratch directory what other programs write goes to first (and
// is copied in the safe way: a symlink planted in the bundle directory is replaced, never followed), and the list of
// its files for the README.
struct Bundle {
  std::string dir;
  TempDir scratch;
  std::vector<std::string> files;
  bool write(const std::string& name, const std::string& text) {
    Status st = writeTextFile(dir + "/" + name, text);
    if (!st.isOk()) std::fprintf(stderr, "peerlab repro: %s\n", printable(st.message()).c_str());
    return st.isOk();
  }
  bool copyIn(const std::string& from, const std::string& name) {
    auto text = readTextFile(from);
    return text.isOk() && write(name, *text);
  }
};

// The probe given with --probe-json, read and checked.
struct GivenProbe {
  std::optional<report::Run> run;
  std::string text;
  ProbeRecord record;
  std::string elsewhere;  ///< the probe file is of another machine: how it differs from this one
};

StatusOr<GivenProbe> readGivenProbe(const ReproArgs& a, const report::Fingerprint& here) {
  GivenProbe g;
  if (a.probe_json.empty()) return g;
  PEERLAB_ASSIGN_OR_RETURN(report::Run r, report::readRun(a.probe_json));
  PEERLAB_RETURN_IF_ERROR(checkProbeMethods(r, a.probe_json));
  PEERLAB_ASSIGN_OR_RETURN(g.record, readProbeRecord(r, a.probe_json));
  PEERLAB_ASSIGN_OR_RETURN(g.text, readTextFile(a.probe_json));
  // A probe file of another machine: its bundle describes that machine, never this one.
  g.elsewhere = otherMachine(r, here);
  if (!g.elsewhere.empty() && !a.other_machine) {
    return PEERLAB_INVALID_ARGUMENT(
        "--probe-json " + a.probe_json + ": " + g.elsewhere +
        ": a bundle describes the machine the probe ran on; write it there (peerlab repro on that machine), or pass "
        "--other-machine for one with the probe's own fingerprint and GPU list and no state of this machine");
  }
  g.run = std::move(r);
  return g;
}

// The probe of the bundle: the run file given, or `peerlab probe` run as a child.
struct ProbeStep {
  std::optional<report::Run> probe;
  ProbeRecord record;
  std::string command;
  int exit = -1;
  std::string error;
};

ProbeStep probeStep(const ReproArgs& a, GivenProbe given, Bundle& b) {
  ProbeStep out;
  out.probe = std::move(given.run);
  out.record = std::move(given.record);
  if (out.probe) {
    b.write("probe.json", given.text);
    b.files.push_back("probe.json: the probe run file given with --probe-json (" + mdCell(a.probe_json) + ")");
  } else if (!a.skip_probe) {
    const std::string probeJson = b.scratch.file("probe.json");
    const std::string probeLog = b.scratch.file("probe.log");
    process::ProcessOptions po;
    // `peerlab probe`: the subcommand (not a suite).
    po.argv = {selfExecutable(), "probe", "--json", probeJson, "--no-cache", "--verbose"};
    if (!a.methods.empty()) po.argv.insert(po.argv.end(), {"--methods", a.methods});
    if (!a.pairs.empty()) po.argv.insert(po.argv.end(), {"--pairs", a.pairs});
    if (!a.sizes.empty()) po.argv.insert(po.argv.end(), {"--sizes", a.sizes});
    if (!a.timeout.empty()) po.argv.insert(po.argv.end(), {"--timeout", a.timeout});
    po.stdout_path = probeLog;
    po.stderr_path = probeLog;
    po.timeout = std::chrono::minutes(15);
    out.command = probeArgsText(po.argv);
    // The command as the bundle shows it: with the bundle's file names, not the private directory's.
    out.command.replace(out.command.find(qualify::shellQuote(probeJson)), qualify::shellQuote(probeJson).size(),
                        qualify::shellQuote(b.dir + "/probe.json"));
    std::printf("repro: %s\n", out.command.c_str());
    std::fflush(stdout);
    auto r = process::runProcess(po);
    b.copyIn(probeLog, "probe.log");
    if (!r.isOk()) {
      out.error = r.status().message();
    } else {
      out.exit = r->exit_code;
      if (std::filesystem::exists(probeJson)) {
        b.copyIn(probeJson, "probe.json");
        auto run = report::readRun(probeJson);
        Status methods = run.isOk() ? checkProbeMethods(*run, "probe.json") : run.status();
        StatusOr<ProbeRecord> rec = methods.isOk() ? readProbeRecord(*run, "probe.json") : methods;
        if (rec.isOk()) {
          out.record = std::move(*rec);
          out.probe = std::move(*run);
        } else {
          out.error = rec.status().message();
        }
      } else {
        out.error = "peerlab probe " + process::describeExit(*r, po.timeout) + ": " + tailOfFile(probeLog, 1);
      }
    }
    b.files.push_back("probe.json, probe.log: the verified probe's run file (reports/schema) and its output");
  }
  return out;
}

// fingerprint.json: the probe's (its workers saw the GPUs, and it may come from another machine), else this
// process's; plus the kernel and OS where this is the machine.
nlohmann::json fingerprintStep(const std::optional<report::Run>& probe, const report::Fingerprint& here, bool local,
                               const std::string& elsewhere, Bundle& b) {
  const bool fromProbe = probe && !probe->fingerprint.gpus.empty();
  const report::Fingerprint fp = fromProbe ? probe->fingerprint : here;
  nlohmann::json fpj = report::toJson(fp);
  fpj["source"] = fromProbe ? "the probe run file (its workers' inventory)" : "this process (CUDA)";
  fpj["node"] = report::toJson(fromProbe ? probe->node : report::nodeIdentity(here, report::readBoardSerial()));
  if (fromProbe && !probe->kind.empty()) fpj["kind"] = probe->kind.name;
  if (local) {
    struct utsname u {};
    if (::uname(&u) == 0) fpj["kernel"] = std::string(u.sysname) + " " + u.release + " " + u.version + " " + u.machine;
    fpj["os"] = osRelease();
    const std::string nvidiaVersion = firstLine("/proc/driver/nvidia/version");
    fpj["nvidia_driver_version_file"] = nvidiaVersion.empty() ? "unreadable" : nvidiaVersion;
  } else {
    fpj["written_on"] = elsewhere;
  }
  fpj["tool"] = std::string("peerlab ") + PEERLAB_VERSION;
  fpj["collected"] = report::utcTimestamp();
  if (b.write("fingerprint.json", fpj.dump(2) + "\n")) {
    b.files.push_back(
        std::string("fingerprint.json: driver, CUDA, NCCL, GPUs with UUIDs and bus ids, node identity (") +
        (fromProbe ? "from the probe run file" : "from this process") + ")" + (local ? ", kernel, OS" : ""));
  }
  return fpj;
}

// The state of this machine: topology, IOMMU, ACS, kernel command line and log, lspci, nvidia-smi, NVML health.
void machineStep(const report::Fingerprint& fp, Bundle& b) {
  // Topology: the machine's hwloc XML, as hwloc exports it, plus peerlab's reading of it.
  std::vector<std::string> gpuBusIds;
  for (const auto& g : fp.gpus)
    gpuBusIds.push_back(g.bus_id);
  auto topo = topology::loadLive();
  if (topo.isOk()) {
    Status st = topo->exportXml(b.dir + "/topology.xml");
    if (st.isOk()) {
      b.files.push_back("topology.xml: the machine's hwloc topology (hwloc_topology_export_xml)");
    } else {
      b.write("topology.xml.unreadable", "unreadable: " + st.message() + "\n");
    }
    b.write("topology.txt", topo->formatMatrix());
    b.write("topology.json", topo->toJson().dump(2) + "\n");
    b.files.push_back("topology.txt, topology.json: GPU pairs, PCIe paths, NVLink as peerlab reads them");
    if (gpuBusIds.empty()) {
      for (const auto& g : topo->gpus())
        gpuBusIds.push_back(g.bus_id);
    }
  } else {
    b.write("topology.txt", "unreadable: " + topo.status().message() + "\n");
    b.files.push_back("topology.txt: why the topology could not be read");
  }

  // IOMMU, ACS, kernel command line, lspci when installed.
  b.write("iommu.txt", qualify::describeIommu(gpuBusIds));
  b.write("acs.txt", qualify::describeAcs(gpuBusIds));
  b.write("cmdline.txt", qualify::kernelCommandLine() + "\n");
  b.files.push_back("iommu.txt: IOMMU groups (/sys/kernel/iommu_groups), the GPUs' groups first");
  b.files.push_back("acs.txt: PCIe ACS capability and control of every function, and of the bridges above each GPU");
  b.files.push_back("cmdline.txt: the kernel command line (/proc/cmdline)");
  std::string why;
  const std::string lspci = runTool({"lspci", "-vvv"}, b.scratch.file("lspci.txt"), std::chrono::seconds(60), why);
  if (!lspci.empty()) {
    b.write("lspci.txt", lspci);
    b.files.push_back("lspci.txt: lspci -vvv");
  } else {
    b.write("lspci.txt", "unreadable: " + why + " (acs.txt decodes ACS from sysfs instead)\n");
  }

  // The kernel log's NVIDIA lines (NVRM, XID): dmesg, else journalctl -k; either may be closed to this user.
  std::string dmesgWhy, journalWhy, source;
  std::string log = runTool({"dmesg"}, b.scratch.file("dmesg.txt"), std::chrono::seconds(15), dmesgWhy);
  source = "dmesg";
  if (log.empty()) {
    log = runTool({"journalctl", "-k", "--no-pager", "-q", "-n", "20000"}, b.scratch.file("journal.txt"),
                  std::chrono::seconds(30), journalWhy);
    source = "journalctl -k";
  }
  if (!log.empty()) {
    const std::string lines = qualify::nvidiaKernelLines(log);
    b.write("kernel-log.txt", "# the NVRM and XID lines of " + source + " (the last 500; " +
                                  std::to_string(log.size()) + " bytes read)\n" + (lines.empty() ? "none\n" : lines));
    b.files.push_back("kernel-log.txt: the kernel log's NVRM and XID lines (" + source + ")");
  } else {
    b.write("kernel-log.txt", "unreadable: dmesg: " + (dmesgWhy.empty() ? std::string("no output") : dmesgWhy) +
                                  "; journalctl -k: " + (journalWhy.empty() ? std::string("no output") : journalWhy) +
                                  " (run peerlab repro as root, or add the lines of `dmesg | grep -E 'NVRM|Xid'`)\n");
    b.files.push_back("kernel-log.txt: why the kernel log could not be read");
  }
  // nvidia-smi -q, under a deadline (it can hang on a GPU that fell off the bus).
  std::string smiWhy;
  const std::string smi =
      runTool({"nvidia-smi", "-q"}, b.scratch.file("nvidia-smi.txt"), std::chrono::seconds(60), smiWhy);
  b.write("nvidia-smi-q.txt", smi.empty() ? "unreadable: " + smiWhy + "\n" : smi);
  b.files.push_back(smi.empty() ? "nvidia-smi-q.txt: why nvidia-smi -q could not run"
                                : "nvidia-smi-q.txt: nvidia-smi -q");
  // The NVML health readings, through `peerlab health` as a child (NVML loaded there, under a deadline).
  {
    const std::string healthJson = b.scratch.file("health.json");
    const std::string healthLog = b.scratch.file("health.log");
    process::ProcessOptions po;
    po.argv = {selfExecutable(), "health", "--watch", "0", "--json", healthJson};
    po.stdout_path = healthLog;
    po.stderr_path = healthLog;
    po.timeout = std::chrono::seconds(120);
    auto r = process::runProcess(po);
    b.copyIn(healthLog, "health.txt");
    if (r.isOk() && std::filesystem::exists(healthJson) && b.copyIn(healthJson, "health.json")) {
      b.files.push_back(
          "health.json, health.txt: NVML health readings (peerlab health: PCIe, NVLink, ECC, row "
          "remapping, XIDs, clocks)");
    } else {
      std::string last = tailOfFile(healthLog, 1);
      while (!last.empty() && last.back() == '\n')
        last.pop_back();
      const std::string why = !r.isOk() ? r.status().message()
                                        : "peerlab health " + process::describeExit(*r, po.timeout) +
                                              (last.empty() ? "" : " (" + last + ")");
      b.write("health.txt", "unreadable: " + why + "\n");
      b.files.push_back("health.txt: why the NVML health readings could not be taken");
    }
  }
}

// What the bundle reports: the failing cells, whether faults were injected, the command that reproduces them.
struct Findings {
  std::vector<FailingCell> cells;
  std::string injected;  ///< what injected faults, "" when nothing did
  int injected_cells = 0;
  bool not_driver = false;  ///< injected faults or a stand-in worker: never a driver bug bundle
  std::string command;
};

Findings findingsOf(const ReproArgs& a, const ProbeStep& step) {
  Findings f;
  const std::optional<report::Run>& probe = step.probe;
  f.cells = probe ? failingCells(*probe) : std::vector<FailingCell>{};
  // A probe under fault injection (or with a stand-in worker) is never presented as a driver fault.
  f.injected = probe ? injectedBy(*probe) : std::string();
  for (const FailingCell& c : f.cells)
    f.injected_cells += !c.injected.empty();
  f.not_driver = !f.injected.empty() || f.injected_cells > 0;
  f.command = reproCommand(f.cells, a, step.record);
  if (probe) {
    if (const std::string& spec = probe->fingerprint.injected.probe_inject; !spec.empty()) {
      f.command = std::string(probe::kInjectEnv) + "=" + qualify::shellQuote(spec) + " " + f.command;
    }
  }
  return f;
}

// README.md: what failed, the command that reproduces it, the machine, the files.
void readmeStep(const ReproArgs& a, const ProbeStep& step, const Findings& f, const report::Fingerprint& here,
                const nlohmann::json& fpj, const std::string& elsewhere, Bundle& b) {
  const std::optional<report::Run>& probe = step.probe;
  const bool local = elsewhere.empty();
  const bool fromProbe = probe && !probe->fingerprint.gpus.empty();
  const report::Fingerprint& fp = fromProbe ? probe->fingerprint : here;
  std::ostringstream md;
  md << "# peerlab " << (f.not_driver ? "fault-injection run (not a driver bug bundle)" : "bug bundle") << ": "
     << (fp.hostname.empty() ? "unknown host" : mdCell(fp.hostname)) << ", " << report::utcTimestamp() << "\n\n";
  if (!local) {
    md << "**Written on another machine than the probe's**: " << mdCell(elsewhere)
       << ". The fingerprint and GPU list below are the probe file's; the state of the probe's machine (topology, "
          "IOMMU, ACS, kernel command line and log, nvidia-smi, NVML health) is not in this bundle: run `peerlab "
          "repro --probe-json probe.json` on that machine for it.\n\n";
  }
  if (f.not_driver) {
    md << "**INJECTED: these failures were injected** (" << (f.injected.empty() ? "faults injected" : f.injected)
       << "), or come from a stand-in probe worker: they are not driver faults. Do not send this bundle to a driver "
          "vendor; probe again without "
       << probe::kInjectEnv << " and PEERLAB_PROBE_WORKER.\n\n";
  }
  if (!probe) {
    md << "The probe did not run" << (step.error.empty() ? "" : ": " + mdCell(step.error)) << ".\n\n";
  } else if (f.cells.empty()) {
    md << "No failing cell: every cell the driver claims works verified (" << probe->results.size()
       << " probe results).\n\n";
  } else {
    md << "**" << f.cells.size() << " failing cell" << (f.cells.size() == 1 ? "" : "s")
       << "**: data moved by the listed method from the source GPU to the destination GPU did not arrive intact (or "
          "the transfer hung), checked on the GPU that owns the destination memory.\n\n";
  }
  md << "## Reproduce\n\n```sh\n"
     << f.command << "\n```\n\n"
     << "`peerlab probe` writes a seeded pattern (different per run, pair, method and size) into poisoned destination "
        "memory and verifies it on the destination's GPU, in watched worker processes with a deadline per cell; it "
        "exits 1 when a cell the driver claims works (cudaDeviceCanAccessPeer and the per-method attributes) fails. "
        "`--verbose` prints every cell, the workers' phase timings and the seed"
     << (step.record.seed ? "; `--seed` is the probe's own, so every cell moves the same data again" : "") << ".\n\n";
  if (!step.command.empty())
    md << "This bundle's probe ran as: " << report::markdownCode(step.command) << " (exit " << step.exit << ").\n\n";
  if (!f.cells.empty()) {
    md << "## Failing cells\n\n| method | src -> dst | size | verdict | driver claims it works | detail | injected |\n"
       << "|---|---|---|---|---|---|---|\n";
    for (const FailingCell& c : f.cells) {
      md << "| " << mdCell(c.method) << " | " << c.src << " -> " << c.dst << " | " << report::formatBytes(c.bytes)
         << " | " << mdCell(c.verdict) << " | " << (c.claimed ? "yes" : "no") << " | " << mdCell(c.detail) << " | "
         << (c.injected.empty() ? (f.not_driver ? "run injected" : "no") : "yes: " + mdCell(c.injected)) << " |\n";
    }
    md << "\n";
  }
  md << "## Machine\n\n- " << (fromProbe ? "as the probe's workers saw it" : "as this process sees it") << ": driver "
     << mdCell(fp.driver) << ", CUDA runtime " << mdCell(fp.cuda_runtime) << ", NCCL " << mdCell(fp.nccl) << "\n";
  if (fromProbe && !probe->kind.empty()) {
    md << "- kind " << mdCell(probe->kind.name) << ", node " << mdCell(probe->node.id) << " ("
       << mdCell(probe->node.basis) << ")\n";
  }
  if (local) {
    md << "- " << mdCell(fpj.value("kernel", "kernel unknown")) << "\n- " << mdCell(fpj.value("os", ""))
       << "\n- kernel command line: " << report::markdownCode(printable(qualify::kernelCommandLine(), 300)) << "\n";
  }
  md << "\n";
  if (!fp.gpus.empty()) {
    md << "| ordinal | GPU | UUID | bus id |\n|---|---|---|---|\n";
    for (const auto& g : fp.gpus) {
      md << "| " << g.ordinal << " | " << mdCell(g.name) << " | " << mdCell(g.uuid) << " | " << mdCell(g.bus_id)
         << " |\n";
    }
    md << "\n";
    if (fromProbe && here.gpus.empty() && local)
      md << "(GPUs as the probe's workers saw them; this process saw none.)\n\n";
  } else {
    md << "No GPU visible to CUDA.\n\n";
  }
  md << "## Files\n\n";
  for (const std::string& file : b.files)
    md << "- " << file << "\n";
  md << "- README.md: this file\n";
  b.write("README.md", md.str());
}

int runRepro(const ReproArgs& a) {
  if (!a.probe_json.empty() && a.skip_probe)
    return fail(kCmd, kExitUsage, "--probe-json and --skip-probe exclude each other");
  if (a.other_machine && a.probe_json.empty())
    return fail(kCmd, kExitUsage, "--other-machine goes with --probe-json (a probe file of another machine)");
  if (Status st = checkProbeOptions(a); !st.isOk()) return fail(kCmd, kExitUsage, st.message());
  // This machine as this process sees it (CUDA here may see no GPU: the probe's workers are what saw them).
  const report::Fingerprint here = report::collectFingerprint();
  auto given = readGivenProbe(a, here);
  if (!given.isOk()) return fail(kCmd, kExitUsage, given.status().message());
  const std::string elsewhere = given->elsewhere;
  const bool local = elsewhere.empty();
  Bundle b;
  b.dir = a.out.empty() ? qualify::defaultOutputName("peerlab-repro") : a.out;
  std::error_code ec;
  std::filesystem::create_directories(b.dir, ec);
  if (ec || !std::filesystem::is_directory(b.dir)) {
    return fail(kCmd, kExitUsage, b.dir + ": cannot create the bundle directory" + (ec ? ": " + ec.message() : ""));
  }
  auto scratch = TempDir::make("peerlab-repro");
  if (!scratch.isOk()) return fail(kCmd, kExitRuntime, scratch.status().message());
  b.scratch = std::move(*scratch);

  const ProbeStep step = probeStep(a, std::move(*given), b);
  const nlohmann::json fpj = fingerprintStep(step.probe, here, local, elsewhere, b);
  if (local) {
    const bool fromProbe = step.probe && !step.probe->fingerprint.gpus.empty();
    machineStep(fromProbe ? step.probe->fingerprint : here, b);
  }
  const Findings f = findingsOf(a, step);
  readmeStep(a, step, f, here, fpj, elsewhere, b);

  std::printf("repro: bundle %s: %zu failing cell%s\nreproduce with: %s\n", printable(b.dir).c_str(), f.cells.size(),
              f.cells.size() == 1 ? "" : "s", printable(f.command).c_str());
  if (!local) std::printf("repro: %s: only the probe file's fingerprint and cells are bundled\n", elsewhere.c_str());
  if (f.not_driver) {
    std::printf("INJECTED: %s: %d of %zu failing cells injected; not a driver fault, not a bundle for a vendor\n",
                f.injected.empty() ? "faults injected" : f.injected.c_str(), f.injected_cells, f.cells.size());
  }
  if (!step.probe && !a.skip_probe) {
    if (step.exit == kExitNoGpu) return fail(kCmd, kExitNoGpu, "no GPU to probe; bundle written to " + b.dir);
    return fail(kCmd, kExitRuntime, "the probe did not run: " + step.error + "; bundle written to " + b.dir);
  }
  return f.cells.empty() ? kExitOk : kExitCheckFailed;
}

std::function<int()> setup(CLI::App& sub) {
  auto a = std::make_shared<ReproArgs>();
  sub.add_option("--out", a->out, "Bundle directory (default ./peerlab-repro-<host>-<date>)");
  sub.add_option("--probe-json", a->probe_json, "Use this probe run file (peerlab probe --json) instead of probing");
  sub.add_option("--methods", a->methods, "Probe methods, e.g. ce_write,sm_store (default all)");
  sub.add_option("--pairs", a->pairs, "Probe these ordered pairs, e.g. 0-1,2-3 (default all)");
  sub.add_option("--sizes", a->sizes, "Probe cell sizes, e.g. 4K,64M");
  sub.add_option("--timeout", a->timeout, "Deadline per probe cell, e.g. 5s");
  sub.add_flag("--skip-probe", a->skip_probe, "Collect the system state only");
  sub.add_flag("--other-machine", a->other_machine,
               "With --probe-json of another machine: bundle the probe file with its own fingerprint and GPU list, "
               "and no state of this machine (refused otherwise)");
  return [a] { return runRepro(*a); };
}

}  // namespace

PEERLAB_REGISTER_COMMAND(
    repro, "repro",
    "Write a driver bug bundle: fingerprint, hwloc XML, IOMMU/ACS, cmdline, kernel log, nvidia-smi, "
    "NVML health, probe, README",
    setup);

}  // namespace peerlab::cli
