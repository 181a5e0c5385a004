#!/usr/bin/env python3
"""CPU test of the scorecard's judgement: which probe, zcopy, alltoallv and MoE low-latency outcomes count as detected,
missed or misclassified, how runs add up per fault, and that the scenario table is well formed."""

import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scorecard as sc  # noqa: E402


def cell(status, **extra):
    d = {"status": status}
    d.update(extra)
    return d


def run(rc=0, stdout="", stderr="", start=100.0, end=101.0):
    return {"rc": rc, "stdout": stdout, "stderr": stderr, "start": start, "end": end, "timed_out": False,
            "wall_ms": (end - start) * 1000}


def drill_out(*ranks):
    lines = []
    for r, verdict, detail, extra in ranks:
        d = {"target": "zcopy", "rank": r, "verdict": verdict, "wrong": 0, "first_bad": -1, "wait_ms": 3.0,
             "t_ns": 123, "detail": detail}
        d.update(extra)
        lines.append("fault_drill " + json.dumps(d))
    return "\n".join(lines)


class ProbeJudgement(unittest.TestCase):
    def test_bitflip_on_the_right_cell_is_detected(self):
        check = sc.expect_probe({("ce_write", 0, 1): (("corrupt",), lambda c: c.get("first_bad") == 1000)},
                                healthy=[("ce_read", 0, 1)])
        cells = {("ce_write", 0, 1): cell("corrupt", first_bad=1000, claimed=True), ("ce_read", 0, 1): cell("ok")}
        self.assertEqual(check(run(rc=1), cells)[0], "detected")

    def test_wrong_offset_or_wrong_cell_is_misclassified(self):
        check = sc.expect_probe({("ce_write", 0, 1): (("corrupt",), lambda c: c.get("first_bad") == 1000)},
                                healthy=[("ce_read", 0, 1)])
        off = {("ce_write", 0, 1): cell("corrupt", first_bad=8), ("ce_read", 0, 1): cell("ok")}
        self.assertEqual(check(run(rc=1), off)[0], "misclassified")
        spill = {("ce_write", 0, 1): cell("corrupt", first_bad=1000), ("ce_read", 0, 1): cell("corrupt")}
        self.assertEqual(check(run(rc=1), spill)[0], "misclassified")

    def test_everything_ok_under_a_fault_is_missed(self):
        check = sc.expect_probe({("ce_write", 0, 1): (("corrupt",), None)})
        self.assertEqual(check(run(), {("ce_write", 0, 1): cell("ok")})[0], "missed")

    def test_no_run_file_is_misclassified(self):
        check = sc.expect_probe({("ce_write", 0, 1): (("hang",), None)})
        self.assertEqual(check(run(rc=4, stderr="worker could not start"), None)[0], "misclassified")

    def test_error_text_must_carry_the_code(self):
        check = sc.expect_probe({("sm_store", 0, 1): (("unsupported", "error"), sc.error_mentions("217"))})
        good = {("sm_store", 0, 1): cell("unsupported", error="cudaErrorPeerAccessUnsupported (217): ...")}
        bad = {("sm_store", 0, 1): cell("unsupported", error="cudaErrorInvalidValue (1)")}
        self.assertEqual(check(run(rc=1), good)[0], "detected")
        self.assertEqual(check(run(rc=1), bad)[0], "misclassified")

    def test_clean_probe(self):
        self.assertEqual(sc.expect_probe_clean(run(), {("ce_write", 0, 1): cell("ok")})[0], "ok")
        self.assertEqual(sc.expect_probe_clean(run(rc=1), {("ce_write", 0, 1): cell("corrupt")})[0], "misclassified")

    def test_run_file_cells_are_keyed_by_method_and_pair(self):
        doc = {"fingerprint": {"hostname": "h"},
               "results": [{"suite": "probe", "name": "ce_write/4096", "src": 0, "dst": 1, "status": "ok"},
                           {"suite": "probe", "name": "matrix_wall", "src": None, "dst": None, "status": "ok"}]}
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(doc, f)
        try:
            cells, fp = sc.probe_cells(f.name)
        finally:
            os.unlink(f.name)
        self.assertEqual(list(cells), [("ce_write", 0, 1)])
        self.assertEqual(fp, {"hostname": "h"})

    def test_cache_faults_need_a_reprobe(self):
        check = sc.expect_cache("driver")
        r = run(stderr='peerlab probe: cache /c: driver "1.2.stale" != "580.159.04"; probing again\n')
        self.assertEqual(check(r, None)[0], "detected")
        self.assertEqual(check(run(stdout="cached: measured 2026"), None)[0], "missed")


class DrillJudgement(unittest.TestCase):
    def test_lines_are_parsed(self):
        ranks, exits = sc.drill_lines(drill_out((0, "ok", "", {}), (1, "corrupt", "3 wrong", {"first_bad": 1000})) +
                                      '\nfault_drill_exit {"rank":1,"exit_code":1,"signal":0,"timed_out":false}\n')
        self.assertEqual(ranks[1]["first_bad"], 1000)
        self.assertEqual(exits[1]["exit_code"], 1)

    def test_detected_on_the_named_rank_only(self):
        check = sc.expect_drill(("corrupt",), rank=1, predicate=lambda d: d["first_bad"] == 1000)
        out = drill_out((0, "ok", "", {}), (1, "corrupt", "x", {"first_bad": 1000}))
        self.assertEqual(check(run(rc=1), sc.drill_lines(out))[0], "detected")
        wrong = drill_out((0, "corrupt", "x", {"first_bad": 1000}), (1, "ok", "", {}))
        self.assertEqual(check(run(rc=1), sc.drill_lines(wrong))[0], "misclassified")
        quiet = drill_out((0, "ok", "", {}), (1, "ok", "", {}))
        self.assertEqual(check(run(), sc.drill_lines(quiet))[0], "missed")

    def test_verdict_time_comes_from_the_reporting_rank(self):
        check = sc.expect_drill(("timeout",))
        out = drill_out((0, "timeout", "timeout: peer lost", {"t_ns": 5_000_000_000}))
        outcome, _, t_ns = check(run(rc=1), sc.drill_lines(out))
        self.assertEqual((outcome, t_ns), ("detected", 5_000_000_000))

    def test_late_signal_must_be_tolerated_and_seen(self):
        check = sc.tolerated(500)
        slow = drill_out((0, "ok", "", {"wait_ms": 520.0}), (1, "ok", "", {"wait_ms": 530.0}))
        fast = drill_out((0, "ok", "", {"wait_ms": 3.0}), (1, "ok", "", {"wait_ms": 4.0}))
        failed = drill_out((0, "timeout", "t", {}), (1, "ok", "", {}))
        self.assertEqual(check(run(), sc.drill_lines(slow))[0], "detected")
        self.assertEqual(check(run(), sc.drill_lines(fast))[0], "missed")
        self.assertEqual(check(run(rc=1), sc.drill_lines(failed))[0], "misclassified")


class SelfInjected(unittest.TestCase):
    """moe_ll faults the drill injects itself: injected when the drill says so, timed from its line."""

    def scenario(self, label):
        return next(s for s in sc.scenarios(sc.Tools("/nonexistent")) if s["label"] == label)

    def test_the_drills_own_line_is_the_injection(self):
        sc_dead = self.scenario("moe_ll:dead_peer")
        self.assertTrue(sc_dead["self_injected"])
        self.assertIn("--die-rank", sc_dead["args"])
        said = 'fault_drill_inject {"rank": 1, "what": "exit after setup", "t_ns": 4000000000}\n'
        out = said + drill_out((0, "timeout", "moe low-latency dispatch on rank 0: no signal from rank 1 within 2000 ms",
                                {"t_ns": 6_100_000_000}))
        self.assertEqual(sc.drill_injections(out), [{"rank": 1, "what": "exit after setup", "t_ns": 4000000000}])
        self.assertEqual(sc.injection_of(sc_dead, [], run(rc=1, stdout=out)), (True, 4000000000))
        outcome, _, t_ns = sc_dead["check"](run(rc=1, stdout=out), sc.drill_lines(out))
        self.assertEqual((outcome, t_ns), ("detected", 6_100_000_000))
        # The drill never said it injected: nothing was, whatever the interposer logged.
        self.assertEqual(sc.injection_of(sc_dead, [{"t_ns": 1}], run(stdout="")), (False, None))

    def test_withheld_flags_must_be_named_in_their_phase_and_rank(self):
        runs = [s for s in sc.scenarios(sc.Tools("/nonexistent")) if s["label"] == "moe_ll:signal_withhold"]
        self.assertEqual(sorted(r["args"][r["args"].index("--withhold") + 1] for r in runs), ["combine", "dispatch"])
        combine = next(r for r in runs if "combine" in r["args"])
        right = drill_out((0, "timeout", "moe low-latency combine on rank 0: no signal from rank 1 within 2000 ms", {}))
        wrong_phase = drill_out((0, "timeout", "moe low-latency dispatch on rank 0: no signal from rank 1", {}))
        wrong_rank = drill_out((0, "timeout", "moe low-latency combine on rank 0: no signal from rank 0", {}))
        self.assertEqual(combine["check"](run(rc=1), sc.drill_lines(right))[0], "detected")
        self.assertEqual(combine["check"](run(rc=1), sc.drill_lines(wrong_phase))[0], "misclassified")
        self.assertEqual(combine["check"](run(rc=1), sc.drill_lines(wrong_rank))[0], "misclassified")

    def test_interposer_runs_and_none_are_judged_as_before(self):
        drop = self.scenario("moe_ll:drop_writes")
        self.assertFalse(drop["self_injected"])
        self.assertEqual(sc.injection_of(drop, [{"t_ns": 7}], run()), (True, 7))
        self.assertEqual(sc.injection_of(drop, [], run()), (False, None))
        clean = next(s for s in sc.scenarios(sc.Tools("/nonexistent")) if s["target"] == "moe_ll" and s["spec"] == "none"
                     and not s["self_injected"])
        self.assertEqual(sc.injection_of(clean, [], run()), (False, None))


class Summary(unittest.TestCase):
    def test_counts_per_fault_and_false_positives(self):
        runs = [
            {"label": "none", "outcome": "ok", "verdict_ms": None},
            {"label": "none", "outcome": "misclassified", "verdict_ms": None},
            {"label": "bitflip", "outcome": "detected", "verdict_ms": 10.0},
            {"label": "bitflip", "outcome": "detected", "verdict_ms": 30.0, "leftover_processes": [123]},
            {"label": "bitflip", "outcome": "missed", "verdict_ms": None},
            {"label": "copy_hang", "outcome": "detected", "verdict_ms": 3500.0, "late": True},
            {"label": "signal_withhold", "outcome": "not_injected", "verdict_ms": None},
        ]
        faults, fp = sc.summarize(runs, {"bitflip": (True, "ok"), "copy_hang": (False, "sm_load 0->1: error")})
        by = {f["name"]: f for f in faults}
        self.assertEqual(fp, 1)
        self.assertEqual((by["bitflip"]["injected"], by["bitflip"]["detected"], by["bitflip"]["missed"]), (3, 2, 1))
        self.assertEqual(by["bitflip"]["verdict_ms_median"], 20.0)
        self.assertEqual(by["bitflip"]["verdict_ms_max"], 30.0)
        self.assertEqual(by["bitflip"]["cleanup_failures"], 1)
        self.assertEqual(by["copy_hang"]["late"], 1)
        self.assertFalse(by["copy_hang"]["reprobe_ok"])
        self.assertEqual(by["signal_withhold"]["injected"], 0)
        for f in faults:
            for key in ("name", "injected", "detected", "misclassified", "verdict_ms_median", "verdict_ms_max"):
                self.assertIn(key, f)

    def test_every_fault_has_scenarios_and_every_spec_parses_as_a_name(self):
        tools = sc.Tools("/nonexistent")
        scenarios = sc.scenarios(tools)
        names = {s["spec"].split(":")[0] for s in scenarios}
        for fault in ("none", "lie", "drop_writes", "bitflip", "enable_error", "ipc_open_fail", "copy_hang",
                      "signal_withhold", "signal_late", "kill_after_export", "cache_corrupt", "cache_stale"):
            self.assertIn(fault, names)
        self.assertIn("ucx_no_cuda", {s["label"] for s in scenarios if s["target"] == "transport"})
        for s in scenarios:
            self.assertIn(s["target"], ("probe", "zcopy", "alltoallv", "moe_ll", "health", "transport"))
            self.assertTrue(callable(s["check"]))
        labels = {s["label"] for s in scenarios if s["target"] == "moe_ll"}
        for label in ("none", "moe_ll:drop_writes", "moe_ll:kill_after_export", "moe_ll:dead_peer",
                      "moe_ll:signal_withhold"):
            self.assertIn(label, labels)
        for fault in ("pcie_downtrain", "pcie_replays", "nvlink_down", "nvlink_crc", "ecc_dbe", "row_remap_pending",
                      "xid", "thermal", "fabric_incomplete"):
            self.assertIn(fault, {s["spec"] for s in scenarios if s["target"] == "health"})

    @unittest.skipUnless(os.environ.get("PEERLAB_BINARY"), "PEERLAB_BINARY names no peerlab binary")
    def test_every_scenario_spec_is_accepted_by_peerlab_inject(self):
        import subprocess
        for s in sc.scenarios(sc.Tools("/nonexistent")):
            if s["target"] in ("health", "transport"):
                continue  # NVML faults go to the stand-in NVML; a UCX without CUDA is chosen by the environment
            if s["spec"].startswith("cache_"):
                continue  # applied to a file that exists only during the run
            r = subprocess.run([os.environ["PEERLAB_BINARY"], "inject", "--fault", s["spec"], "--", "/bin/true"],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, f"{s['spec']}: {r.stderr}")


class TransportJudgement(unittest.TestCase):
    REASON = "UCX without CUDA support: GPU memory would be treated as host memory"

    def cells(self, status="unsupported", error=None, claimed=False):
        error = error if error is not None else "rank 0: " + self.REASON + " (context memory types: host)"
        return {(m, s, d): cell(status, error=error, claimed=claimed)
                for m in ("ucx_put", "ucx_get") for s, d in ((0, 1), (1, 0))}

    def test_every_cell_refused_with_the_reason_is_detected(self):
        check = sc.expect_unsupported(sc.UCX_NO_CUDA_REASON)
        self.assertEqual(check(run(), self.cells())[0], "detected")

    def test_a_transfer_that_ran_or_a_refusal_without_the_reason_is_not(self):
        check = sc.expect_unsupported(sc.UCX_NO_CUDA_REASON)
        ran = self.cells()
        ran[("ucx_put", 0, 1)] = cell("corrupt", claimed=True)
        self.assertEqual(check(run(rc=1), ran)[0], "misclassified")
        self.assertEqual(check(run(), self.cells(error="UCX not found"))[0], "misclassified")
        self.assertEqual(check(run(), self.cells(status="ok", error=""))[0], "missed")
        self.assertEqual(check(run(), {})[0], "misclassified")
        self.assertEqual(check(run(rc=4), None)[0], "misclassified")

    def test_a_claimed_refusal_or_a_failing_exit_code_is_not(self):
        check = sc.expect_unsupported(sc.UCX_NO_CUDA_REASON)
        self.assertEqual(check(run(), self.cells(claimed=True))[0], "misclassified")
        self.assertEqual(check(run(rc=1), self.cells())[0], "misclassified")

    def test_missing_libraries_skip_with_the_reason(self):
        tools = sc.Tools("/nonexistent")
        tools.gpus = 2
        tools.transport_deps = "/nonexistent/deps"
        for s in sc.scenarios(tools):
            if s["target"] != "transport":
                continue
            r = sc.run_scenario(tools, s, 0)
            self.assertEqual(r["outcome"], "skipped")
            self.assertIn("ci/transport_deps.sh", r["detail"])


def health(**rows):
    """rows: check_gpu=status, e.g. pcie_link_0="fail"."""
    out = {}
    for k, v in rows.items():
        name, gpu = k.rsplit("_", 1)
        out[(name, int(gpu))] = (v, f"{name} detail")
    return out


class HealthRowsFromTheChecksEngine(unittest.TestCase):
    def test_rows_are_the_bundles_health_checks(self):
        with tempfile.TemporaryDirectory() as d:
            doc = {"results": [{"suite": "health", "name": "xid", "src": 0, "status": "ok"}],
                   "qualify": {"checks": [
                       {"category": "health", "name": "xid GPU 0", "status": "fail", "reason": "XID 79 (fallen off)"},
                       {"category": "health", "name": "ecc GPU 1", "status": "warn", "reason": "1 past error"},
                       {"category": "health", "name": "fabric GPU 1", "status": "unsupported", "reason": "n/a"},
                       {"category": "bandwidth", "name": "peer_copy x GPU 0", "status": "pass"}]}}
            with open(os.path.join(d, "results.json"), "w") as f:
                json.dump(doc, f)
            rows = sc.health_rows(d)
        # The engine's verdict wins over the raw row: the check qualify printed and counted.
        self.assertEqual(rows[("xid", 0)], ("fail", "XID 79 (fallen off)"))
        self.assertEqual(rows[("ecc", 1)], ("warn", "1 past error"))
        self.assertEqual(rows[("fabric", 1)], ("unsupported", "n/a"))
        self.assertEqual(len(rows), 3)


class HealthJudgement(unittest.TestCase):
    CLEAN = {"pcie_link_0": "ok", "pcie_errors_0": "ok", "ecc_0": "warn", "xid_0": "ok", "fabric_0": "unsupported"}

    def test_the_fault_named_on_gpu_0_is_detected(self):
        check = sc.expect_health("pcie_link", "fail", lambda: health(**self.CLEAN))
        rows = health(**dict(self.CLEAN, pcie_link_0="fail"))
        r = run(rc=1, stdout="FAIL health: pcie_link GPU 0: measured fail, expected ok: Gen3 x8 of Gen5 x16\n")
        self.assertEqual(check(r, rows)[0], "detected")

    def test_a_warning_the_clean_run_also_had_is_not_blamed(self):
        # The clean run already warns about ecc (a past SRAM error): that is the machine, not the fault.
        check = sc.expect_health("nvlink_errors", "warn", lambda: health(**self.CLEAN))
        rows = health(**dict(self.CLEAN, nvlink_errors_0="warn"))
        r = run(rc=0, stdout="WARN health: nvlink_errors GPU 0: 9000 CRC errors\n")
        self.assertEqual(check(r, rows)[0], "detected")

    def test_wrong_check_wrong_verdict_or_silence_is_not_detected(self):
        check = sc.expect_health("xid", "fail", lambda: health(**self.CLEAN))
        spill = health(**dict(self.CLEAN, xid_0="fail", pcie_errors_0="fail"))
        self.assertEqual(check(run(rc=1, stdout="FAIL health: xid GPU 0\n"), spill)[0], "misclassified")
        weak = health(**dict(self.CLEAN, xid_0="warn"))
        self.assertEqual(check(run(rc=0), weak)[0], "misclassified")
        self.assertEqual(check(run(rc=0), health(**self.CLEAN))[0], "misclassified")  # the clean run's own warning
        quiet = health(**dict(self.CLEAN, ecc_0="ok"))
        self.assertEqual(check(run(rc=0), quiet)[0], "missed")
        # The verdict must also reach the exit code and the printed line.
        rows = health(**dict(self.CLEAN, xid_0="fail"))
        self.assertEqual(check(run(rc=0, stdout="FAIL health: xid GPU 0\n"), rows)[0], "misclassified")
        self.assertEqual(check(run(rc=1, stdout=""), rows)[0], "misclassified")
        self.assertEqual(check(run(rc=4, stderr="boom"), None)[0], "misclassified")

    def test_clean_run_passes_with_warnings_and_fails_on_any_fail(self):
        self.assertEqual(sc.expect_health_clean(run(rc=0), health(**self.CLEAN))[0], "ok")
        self.assertEqual(sc.expect_health_clean(run(rc=1), health(**dict(self.CLEAN, xid_0="fail")))[0],
                         "misclassified")
        self.assertEqual(sc.expect_health_clean(run(rc=0), None)[0], "misclassified")

    def test_one_gpu_skips_two_gpu_scenarios_and_nvlink_classes_visibly(self):
        tools = sc.Tools("/nonexistent")
        tools.gpus = 1
        tools.health_baseline = health(nvlink_state_0="unsupported")
        for s in sc.scenarios(tools):
            if s["target"] == "probe":
                r = sc.run_scenario(tools, s, 0)
                self.assertEqual(r["outcome"], "skipped")
                self.assertIn("needs 2 GPUs", r["detail"])
                break
        with tempfile.TemporaryDirectory() as d:
            tools = sc.Tools(d)
            tools.gpus = 1
            tools.health_baseline = health(nvlink_state_0="unsupported")
            os.makedirs(os.path.join(d, "bin"))
            os.makedirs(os.path.join(d, "lib"))
            for path in (tools.peerlab, tools.fake_nvml):
                with open(path, "w") as f:
                    f.write("#!/bin/sh\nexit 0\n")
                os.chmod(path, 0o755)
            nvlink = next(s for s in sc.scenarios(tools) if s["spec"] == "nvlink_down")
            r = sc.run_health(tools, nvlink, 0)
            self.assertEqual(r["outcome"], "skipped")
            self.assertIn("NVLink", r["detail"])
            # A check the driver cannot answer on this GPU has nothing to inject into.
            tools.health_baseline = {("nvlink_state", 0): ("unsupported", ""),
                                     ("row_remap", 0): ("unsupported", "row remapping: not supported")}
            remap = next(s for s in sc.scenarios(tools) if s["spec"] == "row_remap_pending")
            r = sc.run_health(tools, remap, 0)
            self.assertEqual(r["outcome"], "skipped")
            self.assertIn("cannot report row_remap", r["detail"])


class Options(unittest.TestCase):
    """The command line: one --only (two merged branches had each declared it), matching labels and targets."""

    def table(self):
        tools = sc.Tools("/nonexistent")
        tools.gpus = 2
        return sc.scenarios(tools)

    def test_the_parser_builds_and_takes_every_option(self):
        a = sc.arg_parser().parse_args(["--only", "ucx", "--target", "transport,probe", "--list",
                                        "--transport-deps", "/deps", "--build", "b", "--out", "o.json"])
        self.assertEqual((a.only, a.target, a.list, a.transport_deps, a.build, a.out),
                         ("ucx", "transport,probe", True, "/deps", "b", "o.json"))
        self.assertEqual(sum(1 for act in sc.arg_parser()._actions if "--only" in act.option_strings), 1)

    def test_only_matches_the_label(self):
        picked = sc.select_scenarios(self.table(), only="^ucx_no_cuda$")
        self.assertTrue(picked)
        self.assertTrue(all(s["label"] == "ucx_no_cuda" for s in picked))
        self.assertEqual({s["spec"] for s in picked},
                         {"debian_ucx", "ucx_without_cuda_module", "nixl_ucx_without_cuda_module"})

    def test_only_matches_the_target(self):
        table = self.table()
        picked = sc.select_scenarios(table, only="^moe_ll$")
        self.assertTrue(picked)
        self.assertEqual(picked, [s for s in table if s["target"] == "moe_ll"])
        transport = sc.select_scenarios(table, only="^transport$")
        self.assertEqual(transport, [s for s in table if s["target"] == "transport"])

    def test_target_then_only_narrow_together_and_health_keeps_its_clean_run(self):
        table = self.table()
        picked = sc.select_scenarios(table, only="none", target="transport")
        self.assertEqual([(s["target"], s["spec"]) for s in picked], [("transport", "none")])
        health = sc.select_scenarios(table, only="xid")
        self.assertEqual(health[0]["target"], "health")
        self.assertEqual(health[0]["spec"], "none")
        self.assertTrue(any(s["spec"] != "none" for s in health))
        self.assertEqual(sc.select_scenarios(table), table)

    def test_list_runs_without_gpus(self):
        import subprocess
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scorecard.py")
        out = subprocess.run([sys.executable, script, "--build", "/nonexistent", "--list", "--only", "transport"],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("ucx_no_cuda", out.stdout)


if __name__ == "__main__":
    unittest.main()
