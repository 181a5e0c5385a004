#!/usr/bin/env python3
"""peerlab reliability scorecard: runs the probe, zero-copy, alltoallv and the MoE low-latency mode under every fault
(peerlab inject) and checks that peerlab names each fault correctly, within its deadline, and cleans up after itself.
The MoE low-latency classes (moe_ll:*) also take faults the drill injects itself (a rank that withholds its flags, a
rank that dies after setup): those count as injected when the drill says it injected them (fault_drill_inject lines),
and their verdict time runs from there.

Machine-health faults (pcie_downtrain, pcie_replays, nvlink_down, nvlink_crc, ecc_dbe, row_remap_pending, xid,
thermal, fabric_incomplete) run `peerlab qualify --skip-probe --skip-bench --health-watch 2` with NVML replaced by
the stand-in in wrap mode (PEERLAB_NVML_LIBRARY=libpeerlab_fake_nvml.so, PEERLAB_FAKE_NVML=wrap:<fault>): the real
answers with one fault on GPU 0. Qualify must name it (the right check on GPU 0, FAIL or WARN as the thresholds say)
and change nothing else against the clean run (`none`). On one GPU the classes that need NVLink, and every
two-GPU scenario above, are skipped with the reason.

For every run: the verdict peerlab gave (the right cell, the right verdict), how long after the injection it came
(from the interposer's stats file to the report), that no process carrying the run's marker survives it, that GPU
memory returns to where it was, and after every fault a clean re-probe without the interposer must pass. Runs of
`none` (the interposer loaded, no fault) must report nothing: every failure there is a false positive.

UCX without CUDA (`ucx_no_cuda`): `peerlab probe` of the transport methods with a UCX that treats GPU memory as host
memory - Debian's libucx0 (built without CUDA), the libucx-cu13 UCX with its CUDA module kept from loading
(UCX_MODULES=^cuda), and NIXL's bundled UCX likewise - must give `unsupported` on every cell, with the reason in words
("UCX without CUDA support: GPU memory would be treated as host memory"), claimed by nobody (exit code 0, no LIE). Its
clean run (`none`: the CUDA-enabled libraries) must verify every transport cell. The libraries come from
--transport-deps (default $PEERLAB_TRANSPORT_DEPS, else .deps/transport, as ci/transport_deps.sh lays them out).

Writes reports/reliability/<date>.json:
  {"fingerprint", "faults": [{"name", "injected", "detected", "misclassified", "verdict_ms_median",
   "verdict_ms_max", "missed", "late", "cleanup_failures", "reprobe_ok", "runs": [...]}],
   "false_positives", "sanitizer": {"memcheck", "racecheck", "synccheck"}, ...}
Exit code: 0 every injected fault detected and nothing leaked or ran late, 1 otherwise, 2 usage, 3 no GPU.
"""

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

DEADLINE_MS = 2000          # per-cell / per-wait deadline given to every tool
SLACK_MS = 1000             # "within deadline + 1 s"
MEMORY_TOLERANCE_MIB = 16   # memory.used granularity and driver bookkeeping


def log(msg):
    print(f"[scorecard {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------- environment

def gpu_memory_used():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    try:
        return [int(x.strip()) for x in out.stdout.split("\n") if x.strip()]
    except ValueError:
        return None


def marked_processes(marker):
    """PIDs whose environment carries this run's marker (every process a run starts inherits it)."""
    needle = f"PEERLAB_SCORECARD_RUN={marker}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def run_command(argv, env_extra, timeout_s):
    env = dict(os.environ)
    env.update(env_extra)
    start = time.time()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    end = time.time()
    return {"argv": argv, "rc": proc.returncode, "timed_out": timed_out, "start": start, "end": end,
            "wall_ms": (end - start) * 1000.0, "stdout": out.decode(errors="replace"),
            "stderr": err.decode(errors="replace")}


def read_stats(path):
    actions = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    actions.append(json.loads(line))
                except ValueError:
                    continue
    except OSError:
        pass
    return actions


# ---------------------------------------------------------------- targets

class Tools:
    def __init__(self, build):
        self.build = build
        self.peerlab = os.path.join(build, "bin", "peerlab")
        self.drill = os.path.join(build, "bin", "fault_drill")
        self.fake_nvml = os.path.join(build, "lib", "libpeerlab_fake_nvml.so")
        self.gpus = 0
        self.health_baseline = None  # {(check, gpu): status} of the clean health run
        self.workdir = os.path.join(tempfile.gettempdir(), f"peerlab-scorecard-{os.getpid()}")
        self.transport_deps = os.environ.get("PEERLAB_TRANSPORT_DEPS", os.path.join(".deps", "transport"))

    def have(self, path):
        return os.path.isfile(path) and os.access(path, os.X_OK)


def probe_argv(tools, methods, pairs="0-1", json_path=None, cache=None):
    argv = [tools.peerlab, "probe", "--methods", methods, "--pairs", pairs, "--sizes", "4K",
            "--timeout", f"{DEADLINE_MS}ms", "--setup-timeout", "30s", "--seed", "7"]
    argv += ["--cache", cache] if cache else ["--no-cache"]
    if json_path:
        argv += ["--json", json_path]
    return argv


def probe_cells(json_path):
    try:
        with open(json_path) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None, None
    cells = {}
    for r in doc.get("results", []):
        if r.get("suite") != "probe" or r.get("src") is None:
            continue
        method = r.get("name", "").split("/")[0]
        cells[(method, r["src"], r["dst"])] = r
    return cells, doc.get("fingerprint")


def drill_lines(stdout):
    ranks, exits = {}, {}
    for line in stdout.splitlines():
        if line.startswith("fault_drill {"):
            try:
                d = json.loads(line[len("fault_drill "):])
                ranks[d["rank"]] = d
            except ValueError:
                pass
        elif line.startswith("fault_drill_exit {"):
            try:
                d = json.loads(line[len("fault_drill_exit "):])
                exits[d["rank"]] = d
            except ValueError:
                pass
    return ranks, exits


def drill_injections(stdout):
    """The drill's own injections: [{"rank", "what", "t_ns"}] from its fault_drill_inject lines."""
    found = []
    for line in stdout.splitlines():
        if line.startswith("fault_drill_inject {"):
            try:
                found.append(json.loads(line[len("fault_drill_inject "):]))
            except ValueError:
                pass
    return found


HEALTH_CHECK_NAME = re.compile(r"^(\S+) GPU (\d+)$")
CHECK_STATUS = {"pass": "ok", "warn": "warn", "fail": "fail", "unsupported": "unsupported", "skipped": "skipped"}


def health_rows(out_dir):
    """{(check, gpu): (status, reason)} from the checks engine's verdicts in a qualify bundle's results.json (the
    checks qualify printed and counted), or None."""
    try:
        with open(os.path.join(out_dir, "results.json")) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    rows = {}
    for c in doc.get("qualify", {}).get("checks", []):
        m = HEALTH_CHECK_NAME.match(c.get("name", "")) if c.get("category") == "health" else None
        if m:
            rows[(m.group(1), int(m.group(2)))] = (CHECK_STATUS.get(c.get("status"), c.get("status")),
                                                    c.get("reason", ""))
    return rows


# ---------------------------------------------------------------- expectations
# Each returns (outcome, detail, verdict_time) with outcome one of: ok (expected healthy result), detected,
# misclassified (peerlab reported something, but not this fault at this place), missed (nothing reported).

def cell_status(cells, key):
    c = cells.get(key)
    return (c.get("status"), c) if c else (None, None)


def expect_probe(expected, healthy=()):
    """expected: {(method, src, dst): (verdicts, predicate or None)}; healthy: cells that must stay ok."""
    def check(run, cells):
        if cells is None:
            return "misclassified", "no run file (exit code %s): %s" % (run["rc"], run["stderr"].strip()[-300:]), None
        problems, hits = [], 0
        for key, (verdicts, pred) in expected.items():
            status, cell = cell_status(cells, key)
            if status is None:
                problems.append(f"{key}: no cell")
            elif status not in verdicts:
                problems.append(f"{key}: {status} (expected {'/'.join(verdicts)})")
            elif pred is not None and not pred(cell):
                problems.append(f"{key}: {status} but {json.dumps({k: cell.get(k) for k in ('error', 'first_bad', 'claimed', 'lie')})}")
            else:
                hits += 1
        for key in healthy:
            status, _ = cell_status(cells, key)
            if status not in ("ok",):
                problems.append(f"{key}: {status} (expected ok: the fault was not aimed there)")
        if not problems:
            return "detected", f"{hits} cell(s) as expected", None
        flagged = [k for k, c in cells.items() if c.get("status") != "ok"]
        return ("misclassified" if flagged else "missed"), "; ".join(problems), None
    return check


def expect_probe_clean(run, cells):
    if cells is None:
        return "misclassified", f"no run file (exit code {run['rc']})", None
    bad = {f"{m} {s}->{d}": c.get("status") for (m, s, d), c in cells.items() if c.get("status") != "ok"}
    if run["rc"] != 0 or bad:
        return "misclassified", f"exit {run['rc']}, not ok: {bad}", None
    return "ok", f"{len(cells)} cells ok", None


def handled_as_success(what):
    """A fault whose right handling is to carry on: named correctly ("detected") when every cell is ok."""
    def check(run, cells):
        outcome, detail, _ = expect_probe_clean(run, cells)
        if outcome != "ok":
            return "misclassified", detail, None
        return "detected", f"{what} handled as success; {detail}", None
    return check


UCX_NO_CUDA_REASON = "UCX without CUDA support: GPU memory would be treated as host memory"


def expect_unsupported(reason):
    """Every cell `unsupported` with `reason` in its error, claimed by nobody, and exit code 0 (no LIE)."""
    def check(run, cells):
        if cells is None:
            return "misclassified", "no run file (exit code %s): %s" % (run["rc"], run["stderr"].strip()[-300:]), None
        if not cells:
            return "misclassified", "no transport cell in the run file", None
        problems = []
        for (m, s, d), c in sorted(cells.items()):
            where = f"{m} {s}->{d}"
            if c.get("status") != "unsupported":
                problems.append(f"{where}: {c.get('status')} (expected unsupported): {(c.get('error') or '')[:160]}")
            elif reason not in (c.get("error") or ""):
                problems.append(f"{where}: unsupported without the reason: {(c.get('error') or '')[:160]}")
            elif c.get("claimed"):
                problems.append(f"{where}: claimed although the library refused")
        if run["rc"] != 0:
            problems.append(f"exit code {run['rc']} (expected 0: a refused cell is no lie)")
        if not problems:
            return "detected", f"{len(cells)} cell(s) unsupported: {reason}", None
        flagged = [k for k, c in cells.items() if c.get("status") != "ok"]
        return ("misclassified" if flagged else "missed"), "; ".join(problems), None
    return check


def error_mentions(*needles):
    return lambda cell: any(n in (cell.get("error") or "") for n in needles)


def expect_cache(needle):
    def check(run, cells):
        text = run["stderr"]
        if "probing again" in text and needle in text and run["rc"] == 0:
            return "detected", text.strip().splitlines()[-1][:200], None
        if "cached: measured" in run["stdout"]:
            return "missed", "the damaged cache was used", None
        return "misclassified", f"exit {run['rc']}: {text.strip()[-300:]}", None
    return check


def expect_drill(verdicts, rank=None, predicate=None):
    """Some rank (or the given rank) reports one of `verdicts`; no rank reports ok while the fault hit."""
    def check(run, ranks_exits):
        ranks, exits = ranks_exits
        candidates = [ranks[rank]] if rank is not None and rank in ranks else list(ranks.values())
        for d in candidates:
            if d["verdict"] in verdicts and (predicate is None or predicate(d)):
                return "detected", f"rank {d['rank']}: {d['verdict']}: {d['detail'][:200]}", d.get("t_ns")
        if not ranks:
            return "misclassified", f"no rank reported (exits {exits}): {run['stderr'].strip()[-300:]}", None
        summary = "; ".join(f"rank {r}: {d['verdict']} {d['detail'][:120]}" for r, d in sorted(ranks.items()))
        if all(d["verdict"] == "ok" for d in ranks.values()):
            return "missed", summary, None
        return "misclassified", summary, None
    return check


def expect_drill_clean(run, ranks_exits):
    ranks, exits = ranks_exits
    bad = [f"rank {r}: {d['verdict']} {d['detail'][:160]}" for r, d in sorted(ranks.items()) if d["verdict"] != "ok"]
    if run["rc"] != 0 or bad or not ranks:
        return "misclassified", f"exit {run['rc']}: {'; '.join(bad) or run['stderr'].strip()[-300:]}", None
    return "ok", f"{len(ranks)} ranks ok", None


def tolerated(min_wait_ms):
    def check(run, ranks_exits):
        ranks, _ = ranks_exits
        outcome, detail, t = expect_drill_clean(run, ranks_exits)
        if outcome != "ok":
            return "misclassified", detail, None
        waited = max((d.get("wait_ms", 0) for d in ranks.values()), default=0)
        if waited + 50 < min_wait_ms:
            return "missed", f"late signal not seen: waits of {waited:.0f} ms", None
        return "detected", f"late signal tolerated; longest wait {waited:.0f} ms", None
    return check


# ---------------------------------------------------------------- scenarios

# Health classes: (fault, the check that must name it on GPU 0, its verdict, what the machine needs).
HEALTH_FAULTS = [
    ("pcie_downtrain", "pcie_link", "fail", None),
    ("pcie_replays", "pcie_errors", "fail", None),
    ("nvlink_down", "nvlink_state", "fail", "nvlink"),
    ("nvlink_crc", "nvlink_errors", "warn", "nvlink"),
    ("ecc_dbe", "ecc", "fail", None),
    ("row_remap_pending", "row_remap", "fail", None),
    ("xid", "xid", "fail", None),
    ("thermal", "clock_events", "fail", None),
    ("fabric_incomplete", "fabric", "fail", "nvlink"),
]


def expect_health(check_name, verdict, baseline_of):
    """The fault's check on GPU 0 has the verdict, qualify says so (FAIL/WARN line, exit code), nothing else moved."""
    def check(run, rows):
        if rows is None:
            return "misclassified", "no results.json (exit code %s): %s" % (run["rc"], run["stderr"].strip()[-300:]), None
        got = rows.get((check_name, 0))
        if got is None:
            return "misclassified", f"no {check_name} result for GPU 0", None
        status, detail = got
        problems = []
        if status != verdict:
            problems.append(f"{check_name} GPU 0: {status} (expected {verdict}): {detail[:160]}")
        line = f"{verdict.upper()} health: {check_name} GPU 0"
        if status == verdict and line not in run["stdout"]:
            problems.append(f"qualify did not print \"{line}\"")
        want_rc = 1 if verdict == "fail" else 0
        if run["rc"] != want_rc:
            problems.append(f"exit code {run['rc']} (expected {want_rc})")
        baseline = baseline_of() or {}
        for key, (s, d) in rows.items():
            if key == (check_name, 0):
                continue
            base = baseline.get(key, ("ok", ""))[0]
            if s != base and s in ("warn", "fail"):
                problems.append(f"{key[0]} GPU {key[1]}: {s} (clean run: {base}): {d[:120]}")
        if not problems:
            return "detected", f"{check_name} GPU 0 {status}: {detail[:160]}", None
        flagged = [k for k, (s, _) in rows.items() if s in ("warn", "fail")]
        return ("misclassified" if flagged else "missed"), "; ".join(problems), None
    return check


def expect_health_clean(run, rows):
    if rows is None:
        return "misclassified", f"no results.json (exit code {run['rc']})", None
    bad = {f"{k[0]} GPU {k[1]}": s for k, (s, _) in rows.items() if s == "fail"}
    if run["rc"] != 0 or bad:
        return "misclassified", f"exit code {run['rc']}; failing: {bad}", None
    warned = sorted(f"{k[0]} GPU {k[1]}" for k, (s, _) in rows.items() if s == "warn")
    return "ok", f"{len(rows)} health checks, none failed" + (f"; warnings on this machine: {warned}" if warned else ""), None


def scenarios(tools):
    P = lambda m, s=0, d=1: (m, s, d)  # noqa: E731
    s = []

    def probe(label, spec, methods, check, pairs="0-1", timed=False, pre=None, cache=None):
        s.append({"label": label, "spec": spec, "target": "probe", "methods": methods, "pairs": pairs,
                  "check": check, "timed": timed, "pre": pre, "cache": cache})

    def drill(label, spec, target, args, check, timed=False, deadline_checked=True, self_injected=False):
        s.append({"label": label, "spec": spec, "target": target, "args": args, "check": check, "timed": timed,
                  "deadline_checked": deadline_checked, "self_injected": self_injected})

    # The probe: every cell names its verdict; pair 0-1, 4 KiB cells.
    probe("none", "none", "all", expect_probe_clean, pairs="0-1,1-0")
    probe("lie", "lie:pair=0-1,seed=3", "ce_write,ce_read,sm_store",
          expect_probe({P("ce_write"): (("corrupt",), lambda c: c.get("claimed") is True),
                        P("ce_read"): (("corrupt",), lambda c: c.get("claimed") is True)},
                       healthy=[P("sm_store")]))
    probe("bitflip", "bitflip:pair=0-1,side=write,offset=1000,bit=2,seed=7", "ce_write,ce_read",
          expect_probe({P("ce_write"): (("corrupt",), lambda c: c.get("first_bad") == 1000 and c.get("claimed"))},
                       healthy=[P("ce_read")]))
    probe("drop_writes", "drop_writes", "ce_write,ipc_legacy,ipc_vmm",
          expect_probe({P("ce_write"): (("corrupt",), None), P("ipc_legacy"): (("corrupt",), None),
                        P("ipc_vmm"): (("corrupt",), None)}))
    for code in (217, 711, 205):
        probe(f"enable_error:{code}", f"enable_error:code={code},pair=0-1,direction=first", "sm_store,sm_load",
              expect_probe({P("sm_store"): (("unsupported", "error"), error_mentions(str(code)))},
                           healthy=[P("sm_load")]))
    # 704 ("already enabled") is not a failure: peerlab must carry on as if enabling worked.
    probe("enable_error:704", "enable_error:code=704", "sm_store,sm_load", handled_as_success("704 (already enabled)"))
    probe("ipc_open_fail:legacy", "ipc_open_fail:ipc=legacy", "ipc_legacy,ipc_vmm",
          expect_probe({P("ipc_legacy"): (("error", "unsupported"), error_mentions("400"))},
                       healthy=[P("ipc_vmm")]))
    probe("ipc_open_fail:vmm", "ipc_open_fail:ipc=vmm", "ipc_legacy,ipc_vmm",
          expect_probe({P("ipc_vmm"): (("error", "unsupported"), error_mentions("400"))},
                       healthy=[P("ipc_legacy")]))
    probe("copy_hang", "copy_hang:pair=0-1,side=write", "ce_write",
          expect_probe({P("ce_write"): (("hang",), None)}), timed=True)
    cache = os.path.join(tools.workdir, "probe-cache.json")
    probe("cache_corrupt", f"cache_corrupt:path={cache},seed=5", "ce_write", expect_cache("cache"),
          pre="fill_cache", cache=cache)
    probe("cache_stale", f"cache_stale:path={cache},seed=5", "ce_write", expect_cache("driver"),
          pre="fill_cache", cache=cache)

    # Zero-copy: rank 0 on GPU 0 sends 1 MiB to rank 1 on GPU 1 (get: rank 1's copy engine pulls; put: rank 0's
    # pushes), checked on GPU 1, every wait bounded by DEADLINE_MS.
    z = lambda proto, kind="vmm": ["--protocol", proto, "--kind", kind, "--bytes", str(1 << 20),  # noqa: E731
                                   "--deadline-ms", str(DEADLINE_MS)]
    first_bad = lambda off: (lambda d: d.get("first_bad") == off)  # noqa: E731
    drill("none", "none", "zcopy", z("get"), expect_drill_clean)
    drill("none", "none", "zcopy", z("put", "legacy"), expect_drill_clean)
    drill("none", "none", "zcopy", z("sm_signal"), expect_drill_clean)
    drill("lie", "lie:seed=3", "zcopy", z("get"), expect_drill(("corrupt",), rank=1))
    drill("bitflip", "bitflip:offset=1000,bit=2", "zcopy", z("get"), expect_drill(("corrupt",), 1, first_bad(1000)))
    drill("bitflip", "bitflip:offset=1000,bit=2", "zcopy", z("put", "legacy"),
          expect_drill(("corrupt",), 1, first_bad(1000)))
    # The semaphore page is an import too, so dropped writes may show as a timeout (a signal that never lands).
    drill("drop_writes", "drop_writes", "zcopy", z("put"), expect_drill(("corrupt", "timeout")), timed=True)
    drill("ipc_open_fail:vmm", "ipc_open_fail:ipc=vmm", "zcopy", z("get"),
          expect_drill(("error",), predicate=lambda d: "400" in d["detail"]))
    drill("ipc_open_fail:legacy", "ipc_open_fail:ipc=legacy", "zcopy", z("get", "legacy"),
          expect_drill(("error",), predicate=lambda d: "400" in d["detail"]))
    drill("copy_hang", "copy_hang", "zcopy", z("get"), expect_drill(("timeout",)), timed=True)
    drill("signal_withhold", "signal_withhold", "zcopy", z("get"), expect_drill(("timeout",)), timed=True)
    drill("signal_withhold", "signal_withhold", "zcopy", z("put", "legacy"), expect_drill(("timeout",)), timed=True)
    drill("signal_late:500", "signal_late:ms=500", "zcopy", z("get"), tolerated(500), deadline_checked=False)
    drill("signal_late:4000", f"signal_late:ms={2 * DEADLINE_MS}", "zcopy", z("get"), expect_drill(("timeout",)),
          timed=True)
    drill("kill_after_export", "kill_after_export:rank=1", "zcopy", z("get"),
          expect_drill(("timeout", "error"), rank=0), timed=True)

    # Alltoallv over symmetric VMM memory, 4 ranks (fewer on a smaller machine), device-side spins bounded by
    # DEADLINE_MS.
    ranks = str(max(2, min(4, getattr(tools, "gpus", 4))))
    a = lambda t: ["--ranks", ranks, "--transfer", t, "--elements", "4096", "--calls", "4",  # noqa: E731
                   "--deadline-ms", str(DEADLINE_MS)]
    drill("none", "none", "alltoallv", a("push"), expect_drill_clean)
    drill("none", "none", "alltoallv", a("pull"), expect_drill_clean)
    # The mappings are redirected at setup, so the deadline that matters is the device-side spin of the first call;
    # the calls queued behind it give up at once (the error is on record), so the verdict still comes within one.
    drill("drop_writes", "drop_writes", "alltoallv", a("push"), expect_drill(("corrupt", "timeout")), timed=True)
    drill("ipc_open_fail:vmm", "ipc_open_fail:ipc=vmm", "alltoallv", a("push"), expect_drill(("error", "timeout")))
    drill("kill_after_export", "kill_after_export:rank=1", "alltoallv", a("push"),
          expect_drill(("timeout", "error"), rank=0), timed=True)

    # The MoE low-latency mode, 2 ranks: the alltoallv classes against its kernels (dropped writes, a peer dead at
    # setup), a peer that dies after setup (the kernels' waits must name it), and flags withheld by one rank in dispatch
    # or in combine (the kernels' test hook). Every device wait is bounded by DEADLINE_MS.
    m = lambda *extra: ["--ranks", "2", "--tokens", "16", "--calls", "3",  # noqa: E731
                        "--deadline-ms", str(DEADLINE_MS)] + list(extra)
    names_rank = lambda r: (lambda d: f"from rank {r}" in d["detail"])  # noqa: E731
    drill("none", "none", "moe_ll", m(), expect_drill_clean)
    drill("moe_ll:drop_writes", "drop_writes", "moe_ll", m(), expect_drill(("corrupt", "timeout")), timed=True)
    drill("moe_ll:kill_after_export", "kill_after_export:rank=1", "moe_ll", m(),
          expect_drill(("timeout", "error"), rank=0), timed=True)
    drill("moe_ll:dead_peer", "none", "moe_ll", m("--die-rank", "1"),
          expect_drill(("timeout",), rank=0, predicate=names_rank(1)), timed=True, self_injected=True)
    for phase in ("dispatch", "combine"):
        drill("moe_ll:signal_withhold", "none", "moe_ll", m("--withhold", phase, "--fault-rank", "1"),
              expect_drill(("timeout",), rank=0, predicate=lambda d, p=phase: f"{p} on rank 0: no signal from rank 1"
                           in d["detail"]), timed=True, self_injected=True)
    # UCX without CUDA: the transport methods under a UCX that takes GPU memory for host memory, and the clean run.
    deps = os.path.abspath(tools.transport_deps)

    def transport(label, spec, methods, env, check, needs):
        s.append({"label": label, "spec": spec, "target": "transport", "methods": methods, "env": env,
                  "check": check, "needs": [os.path.join(deps, n) for n in needs]})

    transport("none", "none", "transport",
              {"PEERLAB_UCX_DIR": os.path.join(deps, "ucx"), "PEERLAB_NIXL_DIR": os.path.join(deps, "nixl")},
              expect_probe_clean, ["ucx", "nixl"])
    transport("ucx_no_cuda", "debian_ucx", "ucx_put,ucx_get", {"PEERLAB_UCX_DIR": os.path.join(deps, "ucx-debian")},
              expect_unsupported(UCX_NO_CUDA_REASON), ["ucx-debian"])
    transport("ucx_no_cuda", "ucx_without_cuda_module", "ucx_put,ucx_get",
              {"PEERLAB_UCX_DIR": os.path.join(deps, "ucx"), "UCX_MODULES": "^cuda"},
              expect_unsupported(UCX_NO_CUDA_REASON), ["ucx"])
    transport("ucx_no_cuda", "nixl_ucx_without_cuda_module", "nixl_write,nixl_read",
              {"PEERLAB_NIXL_DIR": os.path.join(deps, "nixl"), "UCX_MODULES": "^cuda"},
              expect_unsupported(UCX_NO_CUDA_REASON), ["nixl"])

    # Machine health through the stand-in NVML wrapping the real one; the clean run comes first (its verdicts are
    # the baseline the fault runs are compared with).
    s.append({"label": "none", "spec": "none", "target": "health", "check": expect_health_clean, "needs": None})
    for fault, check_name, verdict, needs in HEALTH_FAULTS:
        s.append({"label": fault, "spec": fault, "target": "health", "needs": needs, "health_check": check_name,
                  "check": expect_health(check_name, verdict, lambda: tools.health_baseline)})
    return s


# ---------------------------------------------------------------- running

def clean_reprobe(tools):
    path = os.path.join(tools.workdir, "reprobe.json")
    pairs = "0-1,1-0,2-3" if tools.gpus >= 4 else "0-1,1-0"
    run = run_command(probe_argv(tools, "all", pairs, path), {}, 120)
    cells, _ = probe_cells(path)
    outcome, detail, _ = expect_probe_clean(run, cells)
    return outcome == "ok", detail


def wait_cleanup(marker, before_mib):
    leftovers = []
    deadline = time.time() + 5
    while time.time() < deadline:
        leftovers = marked_processes(marker)
        if not leftovers:
            break
        time.sleep(0.1)
    for pid in leftovers:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    leaked = []
    if before_mib is not None:
        deadline = time.time() + 5
        while True:
            now = gpu_memory_used()
            leaked = [] if now is None else [i for i, (b, a) in enumerate(zip(before_mib, now))
                                              if a > b + MEMORY_TOLERANCE_MIB]
            if not leaked or time.time() > deadline:
                break
            time.sleep(0.2)
        leaked = [{"gpu": i, "before_mib": before_mib[i], "after_mib": now[i]} for i in leaked] if now else []
    return leftovers, leaked


def run_health(tools, sc, index):
    """One `peerlab qualify` (health only) with the stand-in NVML wrapping the real library."""
    if not tools.have(tools.peerlab) or not os.path.isfile(tools.fake_nvml):
        return {"label": sc["label"], "target": "health", "outcome": "skipped",
                "detail": f"{tools.fake_nvml} not built"}
    base = tools.health_baseline or {}
    if sc.get("needs") == "nvlink" and base.get(("nvlink_state", 0), ("unsupported",))[0] == "unsupported":
        return {"label": sc["label"], "target": "health", "outcome": "skipped",
                "detail": "GPU 0 has no NVLink in use here (needs 2+ GPUs linked by NVLink)"}
    target = sc.get("health_check")
    if target and base.get((target, 0), ("ok",))[0] == "unsupported":
        # The fault is injected into a real answer; where the driver gives none there is nothing to alter.
        return {"label": sc["label"], "target": "health", "outcome": "skipped",
                "detail": f"GPU 0 cannot report {target} here (clean run: {base[(target, 0)][1][:120]})"}
    marker = f"{uuid.uuid4().hex[:12]}-{index}"
    out_dir = os.path.join(tools.workdir, f"qualify-{index}")
    argv = [tools.peerlab, "qualify", "--skip-probe", "--skip-bench", "--health-watch", "2", "--out", out_dir]
    env = {"PEERLAB_SCORECARD_RUN": marker, "PEERLAB_NVML_LIBRARY": tools.fake_nvml,
           "PEERLAB_FAKE_NVML": "wrap:" + ("healthy" if sc["spec"] == "none" else sc["spec"])}
    before = gpu_memory_used()
    run = run_command(argv, env, 180)
    leftovers, leaked = wait_cleanup(marker, before)
    rows = health_rows(out_dir)
    if sc["spec"] == "none" and rows is not None:
        tools.health_baseline = {k: v for k, v in rows.items()}
    outcome, detail, _ = sc["check"](run, rows)
    if run["timed_out"]:
        outcome, detail = "misclassified", "the run did not finish in 180 s: " + detail
    injected = sc["spec"] != "none" and rows is not None
    if sc["spec"] != "none" and rows is None and outcome != "detected":
        outcome = "not_injected"
    return {"label": sc["label"], "spec": sc["spec"], "target": "health", "argv": " ".join(argv),
            "exit_code": run["rc"], "wall_ms": round(run["wall_ms"], 1), "injected": injected, "actions": 0,
            "outcome": outcome, "detail": detail, "verdict_ms": None, "late": False,
            "leftover_processes": leftovers, "leaked_memory": leaked, "fingerprint": None,
            "stderr_tail": run["stderr"].strip()[-400:] if outcome not in ("ok", "detected") else ""}


def injection_of(sc, actions, run):
    """(injected, when the first injection happened in ns): the interposer's actions (a cache fault is applied before
    the command starts), or for a scenario whose drill injects the fault itself the drill's fault_drill_inject lines.
    A `none` run injects nothing."""
    if sc.get("self_injected"):
        marks = drill_injections(run["stdout"])
        return bool(marks), min((m["t_ns"] for m in marks), default=None)
    if sc["spec"] == "none":
        return False, None
    is_cache = sc["spec"].startswith("cache_")
    injected = bool(actions) or (is_cache and run["rc"] != 2)
    inject_ns = min((a["t_ns"] for a in actions), default=None) if actions else (run["start"] * 1e9 if is_cache else None)
    return injected, inject_ns
def run_transport(tools, sc, index):
    """One `peerlab probe` of transport methods on both ordered pairs of GPUs 0 and 1, with the libraries of the
    scenario (nothing is injected into CUDA: the UCX itself lacks CUDA)."""
    base = {"label": sc["label"], "target": "transport", "spec": sc["spec"]}
    if tools.gpus < 2:
        return dict(base, outcome="skipped", detail=f"needs 2 GPUs, this machine has {tools.gpus}")
    missing = [n for n in sc["needs"] if not os.path.isdir(n)]
    if missing:
        return dict(base, outcome="skipped",
                    detail=f"{', '.join(missing)} not there (ci/transport_deps.sh brings the libraries)")
    marker = f"{uuid.uuid4().hex[:12]}-{index}"
    json_path = os.path.join(tools.workdir, f"transport-{index}.json")
    argv = probe_argv(tools, sc["methods"], "0-1,1-0", json_path)
    # A library's setup (UCX contexts, NIXL agents) takes longer than a CUDA cell.
    argv[argv.index("--setup-timeout") + 1] = "60s"
    env = {"PEERLAB_SCORECARD_RUN": marker}
    env.update(sc["env"])
    before = gpu_memory_used()
    run = run_command(argv, env, 240)
    leftovers, leaked = wait_cleanup(marker, before)
    cells, fingerprint = probe_cells(json_path)
    outcome, detail, _ = sc["check"](run, cells)
    if run["timed_out"]:
        outcome, detail = "misclassified", "the run did not finish in 240 s: " + detail
    injected = sc["spec"] != "none"
    return dict(base, argv=" ".join(argv), exit_code=run["rc"], wall_ms=round(run["wall_ms"], 1), injected=injected,
                actions=0, outcome=outcome, detail=detail,
                verdict_ms=round(run["wall_ms"], 1) if outcome == "detected" else None, late=False,
                leftover_processes=leftovers, leaked_memory=leaked, fingerprint=fingerprint,
                stderr_tail=run["stderr"].strip()[-400:] if outcome not in ("ok", "detected") else "")


def run_scenario(tools, sc, index):
    if sc["target"] == "health":
        return run_health(tools, sc, index)
    if sc["target"] == "transport":
        return run_transport(tools, sc, index)
    if tools.gpus < 2:
        return {"label": sc["label"], "target": sc["target"], "outcome": "skipped",
                "detail": f"needs 2 GPUs, this machine has {tools.gpus}"}
    marker = f"{uuid.uuid4().hex[:12]}-{index}"
    stats = os.path.join(tools.workdir, f"stats-{index}.jsonl")
    if sc["target"] == "probe":
        if not tools.have(tools.peerlab):
            return {"label": sc["label"], "target": "probe", "outcome": "skipped", "detail": "peerlab not built"}
        if sc.get("pre") == "fill_cache":
            run_command(probe_argv(tools, sc["methods"], sc["pairs"], cache=sc["cache"]), {}, 120)
        json_path = os.path.join(tools.workdir, f"probe-{index}.json")
        target_argv = probe_argv(tools, sc["methods"], sc["pairs"], json_path, sc.get("cache"))
    else:
        if not tools.have(tools.drill):
            return {"label": sc["label"], "target": sc["target"], "outcome": "skipped", "detail": "fault_drill not built"}
        target_argv = [tools.drill, sc["target"]] + sc["args"]
    before = gpu_memory_used()
    argv = [tools.peerlab, "inject", "--fault", sc["spec"], "--stats", stats, "--"] + target_argv
    run = run_command(argv, {"PEERLAB_SCORECARD_RUN": marker}, 180)
    leftovers, leaked = wait_cleanup(marker, before)

    actions = [a for a in read_stats(stats) if a.get("action") not in ("loaded", "interposer")]
    injected, inject_ns = injection_of(sc, actions, run)

    if sc["target"] == "probe":
        cells, fingerprint = probe_cells(json_path)
        outcome, detail, t_ns = sc["check"](run, cells)
    else:
        fingerprint = None
        outcome, detail, t_ns = sc["check"](run, drill_lines(run["stdout"]))
    verdict_ms = None
    if outcome == "detected" and inject_ns is not None:
        end_ns = t_ns if t_ns else run["end"] * 1e9
        verdict_ms = max(0.0, (end_ns - inject_ns) / 1e6)
    late = bool(sc.get("timed") and sc.get("deadline_checked", True) and verdict_ms is not None and
                verdict_ms > DEADLINE_MS + SLACK_MS)
    if run["timed_out"]:
        outcome, detail = "misclassified", "the run did not finish in 180 s: " + detail
    wants_fault = sc["spec"] != "none" or sc.get("self_injected", False)
    if not injected and wants_fault and outcome == "detected":
        outcome, detail = "misclassified", "a failure without an injection: " + detail
    if not injected and wants_fault and outcome != "detected":
        outcome = "not_injected"
    return {"label": sc["label"], "spec": sc["spec"], "target": sc["target"], "argv": " ".join(target_argv),
            "exit_code": run["rc"], "wall_ms": round(run["wall_ms"], 1), "injected": injected,
            "actions": len(actions), "outcome": outcome, "detail": detail,
            "verdict_ms": None if verdict_ms is None else round(verdict_ms, 1), "late": late,
            "leftover_processes": leftovers, "leaked_memory": leaked, "fingerprint": fingerprint,
            "stderr_tail": run["stderr"].strip()[-400:] if outcome not in ("ok", "detected") else ""}


def summarize(runs, reprobes):
    faults = {}
    false_positives = 0
    for r in runs:
        name = r["label"]
        f = faults.setdefault(name, {"name": name, "injected": 0, "detected": 0, "misclassified": 0, "missed": 0,
                                     "late": 0, "cleanup_failures": 0, "not_injected": 0, "skipped": 0,
                                     "verdict_ms": [], "runs": []})
        f["runs"].append({k: v for k, v in r.items() if k != "fingerprint"})
        if r["outcome"] == "skipped":
            f["skipped"] += 1
            continue
        if r.get("leftover_processes") or r.get("leaked_memory"):
            f["cleanup_failures"] += 1
        if name == "none":
            if r["outcome"] != "ok":
                false_positives += 1
            continue
        if r["outcome"] == "not_injected":
            f["not_injected"] += 1
            continue
        f["injected"] += 1
        if r["outcome"] == "detected":
            f["detected"] += 1
            if r["verdict_ms"] is not None:
                f["verdict_ms"].append(r["verdict_ms"])
        elif r["outcome"] == "misclassified":
            f["misclassified"] += 1
        else:
            f["missed"] += 1
        if r.get("late"):
            f["late"] += 1
    out = []
    for name, f in faults.items():
        ms = f.pop("verdict_ms")
        f["verdict_ms_median"] = round(statistics.median(ms), 1) if ms else None
        f["verdict_ms_max"] = round(max(ms), 1) if ms else None
        f["reprobe_ok"] = reprobes.get(name, (None, ""))[0]
        f["reprobe_detail"] = reprobes.get(name, (None, ""))[1]
        out.append(f)
    return out, false_positives


def git_sha():
    """The commit being run: PEERLAB_GIT_SHA (ci/gpu.sh sets it), a tree copy's .git-sha, else git."""
    if os.environ.get("PEERLAB_GIT_SHA"):
        return os.environ["PEERLAB_GIT_SHA"]
    try:
        with open(".git-sha") as f:
            return f.read().strip()
    except OSError:
        pass
    return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()


def arg_parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build/default", help="build directory with bin/peerlab and bin/fault_drill")
    ap.add_argument("--out", default=None, help="report file (default reports/reliability/<date>.json)")
    # One --only: the label match every branch had, and the target match the MoE branch added.
    ap.add_argument("--only", default=None, help="regex: run only scenarios whose label or target matches")
    ap.add_argument("--target", default=None,
                    help="comma list: run only scenarios of these targets (probe, zcopy, alltoallv, health, transport)")
    ap.add_argument("--list", action="store_true", help="list the scenarios and exit")
    ap.add_argument("--transport-deps", default=None,
                    help="the NIXL / UCX folder of ci/transport_deps.sh (default $PEERLAB_TRANSPORT_DEPS, .deps/transport)")
    return ap


def select_scenarios(all_scenarios, only=None, target=None):
    """The scenarios --target (exact target names) and --only (regex on label or target) leave."""
    if target:
        targets = set(target.split(","))
        all_scenarios = [sc for sc in all_scenarios if sc["target"] in targets]
    if only:
        picked = [sc for sc in all_scenarios if re.search(only, sc["label"]) or re.search(only, sc["target"])]
        # Health faults are judged against the clean health run: keep it.
        if any(sc["target"] == "health" for sc in picked) and not any(
                sc["target"] == "health" and sc["spec"] == "none" for sc in picked):
            picked.insert(next(i for i, sc in enumerate(picked) if sc["target"] == "health"),
                          next(sc for sc in all_scenarios if sc["target"] == "health" and sc["spec"] == "none"))
        all_scenarios = picked
    return all_scenarios


def main():
    args = arg_parser().parse_args()

    tools = Tools(os.path.abspath(args.build))
    if args.transport_deps:
        tools.transport_deps = args.transport_deps
    gpus = gpu_memory_used()
    tools.gpus = len(gpus) if gpus else 4  # alltoallv drills use up to 4 ranks, one per GPU
    all_scenarios = select_scenarios(scenarios(tools), args.only, args.target)
    if args.list:
        for sc in all_scenarios:
            print(f"{sc['label']:22} {sc['target']:10} {sc['spec']}")
        return 0
    if not tools.have(tools.peerlab):
        print(f"scorecard: {tools.peerlab} not found (build first)", file=sys.stderr)
        return 2
    os.makedirs(tools.workdir, exist_ok=True)
    if not gpus:
        print("scorecard: no NVIDIA GPU (nvidia-smi found none)", file=sys.stderr)
        return 3
    if len(gpus) < 2:
        log("1 GPU: the probe, zcopy and alltoallv scenarios need 2 GPUs and are skipped; health classes run")
    elif len(gpus) < 4:
        log(f"{len(gpus)} GPUs: alltoallv runs with {min(4, len(gpus))} ranks; the 2-3 re-probe pair needs 4")

    started = time.time()
    runs, reprobes, fingerprint = [], {}, None
    # After each target's runs, a clean probe without the interposer must pass; every fault run in that group gets
    # its result.
    group_labels, group_target = set(), None

    def close_group():
        if group_target is None or (group_target != "health" and tools.gpus < 2):
            return
        if group_target == "health":
            # Nothing is injected into the GPU itself; the clean health run is the check that nothing stuck.
            rerun = run_health(tools, {"label": "none", "spec": "none", "target": "health",
                                       "check": expect_health_clean, "needs": None}, 999)
            ok, detail = rerun["outcome"] == "ok", rerun["detail"]
        else:
            ok, detail = clean_reprobe(tools)
        log(f"clean re-probe after the {group_target} runs: {'ok' if ok else 'FAILED'} ({detail[:120]})")
        for label in group_labels:
            prev_ok, prev_detail = reprobes.get(label, (True, ""))
            reprobes[label] = (prev_ok and ok, detail if not ok else prev_detail or detail)

    for i, sc in enumerate(all_scenarios):
        if sc["target"] != group_target:
            close_group()
            group_labels, group_target = set(), sc["target"]
        r = run_scenario(tools, sc, i)
        fingerprint = fingerprint or r.get("fingerprint")
        log(f"{sc['label']:20} {sc['target']:9} {r['outcome']:13} "
            f"{'' if r.get('verdict_ms') is None else str(r['verdict_ms']) + ' ms':>10}  {r['detail'][:110]}")
        runs.append(r)
        group_labels.add(sc["label"])
    close_group()
    faults, false_positives = summarize(runs, reprobes)

    date = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    out = args.out or os.path.join("reports", "reliability", f"{date}.json")
    existing = {}
    if os.path.exists(out):
        try:
            with open(out) as f:
                existing = json.load(f)
        except (OSError, ValueError):
            existing = {}
    doc = {
        "schema": "peerlab.reliability",
        "version": 1,
        "timestamp": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git_sha": git_sha(),
        "fingerprint": fingerprint or existing.get("fingerprint", {}),
        "deadline_ms": DEADLINE_MS,
        "wall_s": round(time.time() - started, 1),
        "faults": faults,
        "false_positives": false_positives,
        # Filled by ci/sanitize.sh; kept when it already ran.
        "sanitizer": existing.get("sanitizer", {"memcheck": None, "racecheck": None, "synccheck": None}),
    }
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    os.replace(tmp, out)

    shutil.rmtree(tools.workdir, ignore_errors=True)
    failed = [f["name"] for f in faults if f["name"] != "none" and
              (f["missed"] or f["misclassified"] or f["late"] or f["cleanup_failures"] or f["reprobe_ok"] is False)]
    skipped = [f["name"] for f in faults if f["skipped"] and not f["injected"]]
    if skipped:
        print(f"scorecard: skipped on this machine: {', '.join(skipped)}")
    cleanup = sum(f["cleanup_failures"] for f in faults)
    injected = sum(f["injected"] for f in faults)
    detected = sum(f["detected"] for f in faults)
    print(f"scorecard: {injected} injected, {detected} detected, {false_positives} false positives, "
          f"{cleanup} cleanup failures; {len(failed)} faults with problems{': ' + ', '.join(failed) if failed else ''}; "
          f"{doc['wall_s']} s; {out}")
    return 0 if not failed and false_positives == 0 and cleanup == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
