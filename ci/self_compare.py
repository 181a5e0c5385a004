#!/usr/bin/env python3
"""The noise rule on repeated runs of one machine kind: does a healthy machine pass against itself?

    ci/self_compare.py [--peerlab PATH] [--all-pairs] [--same-day] [--same-node] [--min-pairs N]
                       [--threshold PCT] [--spread-factor X] [--jitter US] [--known KIND:RESULT:WHY ...]
                       RUN|BUNDLE ...

Groups the runs by kind (what `peerlab report --compare` reads: the canonical kind of each run file), orders each
kind's runs by time and compares each with the next (every pair with --all-pairs; only runs of the same UTC day
with --same-day; only runs of one node, the machine compared with itself, with --same-node) through `peerlab report
--compare --compare-json -`, the one comparison engine. Per pair it prints the rows compared, the rows regressed, same
and improved, the regressions (each with the rule that decided it), the results only one side has, and what the rule
would need to pass the pair: the minimum effect above the largest regressed change, and, for times, the jitter above
the largest regressed step in microseconds. Without --same-node, runs of one kind on different nodes are compared too
(a fleet's machines are one kind). Exit 0 when no pair regressed, 1 when one did, 2 for bad input (or fewer pairs than
--min-pairs). --known names a regression the committed runs are known to show (KIND, the start of the result's name,
and why): it is printed as KNOWN with its reason and counted apart, never as a pass; a pair with any other regression
still fails.
"""
import argparse
import gzip
import json
import os
import subprocess
import sys
from itertools import combinations


def fail(msg):
    print(f"ci/self_compare.py: {msg}", file=sys.stderr)
    sys.exit(2)


def run_file(path):
    if os.path.isdir(path):
        plain = os.path.join(path, "results.json")
        path = plain if os.path.isfile(plain) else plain + ".gz"
    if not os.path.isfile(path):
        fail(f"{path}: no such run file (give run files, .json or .json.gz, or qualify bundle directories)")
    return path


def describe(path, doc):
    node = (doc.get("node") or {}).get("id", "?")
    return f"{doc.get('timestamp', '?')} {str(doc.get('git_sha', '?'))[:7]} (node {node}, {path})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--peerlab", default=os.environ.get("PEERLAB_BINARY", "build/default/bin/peerlab"))
    ap.add_argument("--all-pairs", action="store_true",
                    help="compare every pair of a kind's runs, not each with the next")
    ap.add_argument("--same-day", action="store_true", help="only pairs of runs made on the same (UTC) day")
    ap.add_argument("--same-node", action="store_true", help="only pairs of runs of one node (the same machine)")
    ap.add_argument("--threshold", help="minimum effect in percent (default: peerlab's)")
    ap.add_argument("--min-pairs", type=int, default=0,
                    help="bad input (exit 2) when fewer pairs than this are compared")
    ap.add_argument("--spread-factor", help="times either run's own p10-p90 spread (default: peerlab's)")
    ap.add_argument("--jitter", help="timing jitter in microseconds (default: peerlab's)")
    ap.add_argument("--known", action="append", default=[],
                    help="KIND:RESULT:WHY: a regression of RESULT (the start of its name) on KIND the runs are known "
                         "to show, reported apart with WHY")
    args = ap.parse_args()
    if not os.access(args.peerlab, os.X_OK):
        fail(f"--peerlab {args.peerlab}: not an executable (build peerlab, or pass its path)")

    # The kind as peerlab reads it: `report --compare` of a run with itself names it (and refuses a bad file).
    kinds = {}
    for given in args.runs:
        path = run_file(given)
        p = subprocess.run([args.peerlab, "report", "--compare", path, path, "--compare-json", "-"],
                           capture_output=True, text=True)
        if p.returncode not in (0, 1, 5):
            fail(p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"{path}: peerlab exit {p.returncode}")
        cmp = json.loads(p.stdout)
        kind = cmp.get("base_kind") or "(no kind)"
        if args.same_node:
            kind += f" node {cmp.get('base_node') or '?'}"
        with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
            doc = json.load(f)
        kinds.setdefault(kind, []).append((doc.get("timestamp", ""), path, doc))

    extra = []
    if args.threshold:
        extra += ["--threshold", args.threshold]
    if args.spread_factor:
        extra += ["--spread-factor", args.spread_factor]
    if args.jitter:
        extra += ["--jitter", args.jitter]
    pairs = failed = known_pairs = known_seen = 0
    known = []
    for k in args.known:
        parts = k.split(":", 2)
        if len(parts) != 3 or not all(parts):
            fail(f"--known {k}: expected KIND:RESULT:WHY")
        known.append(tuple(parts))
    for kind, runs in sorted(kinds.items()):
        runs.sort(key=lambda r: r[0])
        if len(runs) < 2:
            print(f"{kind}: one run ({runs[0][1]}): nothing to compare it with")
            continue
        chosen = list(combinations(runs, 2)) if args.all_pairs else list(zip(runs, runs[1:]))
        if args.same_day:
            chosen = [(x, y) for x, y in chosen if x[0][:10] == y[0][:10]]
        for (_, a, da), (_, b, db) in chosen:
            pairs += 1
            p = subprocess.run([args.peerlab, "report", "--compare", a, b, "--compare-json", "-"] + extra,
                               capture_output=True, text=True)
            if p.returncode == 2:
                fail(p.stderr.strip().splitlines()[-1])
            cmp = json.loads(p.stdout)
            rows = cmp["rows"]
            measured = [r for r in rows if r.get("metric") not in ("status", None) and "min_effect_pct" in r]
            regressed = [r for r in rows if r["verdict"] in ("REGRESSED", "STATUS REGRESSED")]
            known_here = [(r, why) for r in regressed for k, res, why in known
                          if kind.split(" ")[0] == k and r["result"].startswith(res)]
            regressed = [r for r in regressed if all(r is not kr for kr, _ in known_here)]
            known_seen += len(known_here)
            improved = sum(r["verdict"] == "improved" for r in rows)
            only_base = sum(r["verdict"] == "only in base" for r in rows)
            only_new = sum(r["verdict"] == "only in new" for r in rows)
            failed += bool(regressed)
            print(f"{kind}: {describe(a, da)} -> {describe(b, db)}")
            count = {v: sum(r["verdict"] == v for r in measured) for v in ("REGRESSED", "same", "improved")}
            print(f"  {len(measured)} rows compared on a metric: {count['REGRESSED']} regressed, {count['same']} same, "
                  f"{count['improved']} improved; {len(regressed) - count['REGRESSED']} status regressions; "
                  f"{only_base} only in the first, {only_new} only in the second (other suites: not noise)")
            need_pct = need_us = need_factor = 0.0
            factor_passes = True
            for r in regressed:
                print(f"  REGRESSED {r['result']}: {r.get('rule') or r.get('note', '')}")
                if r.get("change_pct") is not None:
                    need_pct = max(need_pct, abs(r["change_pct"]))
                    if r["metric"] == "time_us" and r.get("base") and r.get("new"):
                        need_us = max(need_us, abs(r["new"] - r["base"]))
                    if r.get("noise_pct"):
                        need_factor = max(need_factor, abs(r["change_pct"]) / r["noise_pct"])
                    else:
                        factor_passes = False
                else:
                    factor_passes = False
            for r, why in known_here:
                print(f"  KNOWN {r['result']}: {r.get('rule') or r.get('note', '')} ({why})")
            if regressed:
                print(f"  to pass: a minimum effect above {need_pct:.1f}%"
                      + (f", or a jitter above {need_us:.2f} us for the time rows" if need_us else "")
                      + (f", or a spread factor above {need_factor:.2f}" if factor_passes and need_factor else ""))
            print(f"  {'FAIL' if regressed else 'KNOWN' if known_here else 'PASS'}")
            known_pairs += bool(known_here) and not regressed
    print(f"self-comparison: {pairs} pairs, {pairs - failed - known_pairs} pass, {known_pairs} with known "
          f"regressions only ({known_seen} rows), {failed} regressed "
          f"(noise rule: peerlab's{' with ' + ' '.join(extra) if extra else ''})")
    if pairs < args.min_pairs:
        fail(f"{pairs} pairs compared, fewer than --min-pairs {args.min_pairs}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
