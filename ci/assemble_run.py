#!/usr/bin/env python3
"""Merges peerlab run files (schema v1) and a ctest JUnit report into one run file.

    ci/assemble_run.py --out RUN.json[.gz] [--junit ctest.xml] [--kind KIND] [--extra KEY=FILE.json ...] RUN.json...

Inputs may be gzip-compressed (.json.gz); an --out ending in .gz is written compressed (how reports/runs keeps them).

The fingerprint comes from the first input run file that has GPUs. GPU test results become rows of suite "test"
(impl "ctest", name = test name, time_us = duration, status ok / skipped: why / failed: why).
"""
import argparse
import gzip
import json
import sys
import xml.etree.ElementTree as ET


def fail(msg):
    print(f"assemble_run.py: {msg}", file=sys.stderr)
    sys.exit(2)


def load_run(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        doc = json.loads(data)
    except (OSError, EOFError, gzip.BadGzipFile, json.JSONDecodeError, UnicodeDecodeError) as e:
        fail(f"{path}: {e}")
    if doc.get("schema_version") != 1 or not isinstance(doc.get("results"), list):
        fail(f"{path}: not a peerlab run file (schema_version 1)")
    return doc


def skip_reason(case, skipped):
    """GTEST_SKIP's message (the line after "file:line: Skipped" in the case's output), else ctest's."""
    out = case.find("system-out")
    lines = (out.text or "").splitlines() if out is not None else []
    for i, line in enumerate(lines):
        if line.endswith(": Skipped") and i + 1 < len(lines) and lines[i + 1].strip():
            return lines[i + 1].strip()[:200]
    message = skipped.get("message") if skipped is not None else None
    return message or "not run"


def test_rows(junit_path):
    try:
        root = ET.parse(junit_path).getroot()
    except (OSError, ET.ParseError) as e:
        fail(f"{junit_path}: {e}")
    rows = []
    for case in root.iter("testcase"):
        name = case.get("name", "?")
        seconds = float(case.get("time", "0") or 0)
        status = "ok"
        failure = case.find("failure")
        skipped = case.find("skipped")
        if failure is not None:
            status = "failed: " + (failure.get("message") or "test failed").splitlines()[0][:200]
        elif skipped is not None or case.get("status") == "notrun":
            status = "skipped: " + skip_reason(case, skipped)
        rows.append({"suite": "test", "name": name, "impl": "ctest", "src": None, "dst": None, "ranks": 1,
                     "bytes": None, "time_us": seconds * 1e6, "algbw_gbps": None, "busbw_gbps": None,
                     "wrong": None, "status": status})
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--junit")
    ap.add_argument("--kind", default="")
    ap.add_argument("--git-sha", default="")
    ap.add_argument("--extra", action="append", default=[], help="KEY=FILE.json: attach a JSON document under KEY")
    ap.add_argument("runs", nargs="*")
    args = ap.parse_args()

    runs = [load_run(p) for p in args.runs]
    base = next((r for r in runs if r["fingerprint"].get("gpus")), runs[0] if runs else None)
    if base is None and not args.junit:
        fail("no input run file")
    if base is None:
        # Only the GPU tests ran: a run file of their rows, fingerprinted by host name.
        import datetime
        import socket
        base = {"schema_version": 1, "tool": "ci/assemble_run.py", "git_sha": args.git_sha or "unknown",
                "timestamp": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "fingerprint": {"hostname": socket.gethostname(), "gpus": []}, "results": []}
    out = {k: v for k, v in base.items() if k != "results"}
    if args.git_sha:
        out["git_sha"] = args.git_sha
    # The kind is peerlab's (the input run's kind and its kind_source); --kind names it only for inputs that have none.
    if args.kind and "kind" not in out:
        out["kind"] = args.kind
        out["kind_source"] = "--kind"
    out["sources"] = args.runs + ([args.junit] if args.junit else [])
    results = []
    for r in runs:
        results.extend(r["results"])
        for k, v in r.items():
            if k not in out and k not in ("results",):
                out[k] = v
    if args.junit:
        results.extend(test_rows(args.junit))
    out["results"] = results
    for item in args.extra:
        key, _, path = item.partition("=")
        try:
            with open(path) as f:
                out[key] = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            fail(f"{path}: {e}")
    text = json.dumps(out, indent=2) + "\n"
    if args.out.endswith(".gz"):
        with open(args.out, "wb") as f:
            f.write(gzip.compress(text.encode(), compresslevel=9, mtime=0))
    else:
        with open(args.out, "w") as f:
            f.write(text)
    failed = [r for r in results if str(r.get("status", "")).startswith("failed")]
    print(f"assemble_run.py: {args.out}: {len(results)} results, {len(failed)} failed")


if __name__ == "__main__":
    main()
