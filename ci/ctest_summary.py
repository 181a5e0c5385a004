#!/usr/bin/env python3
"""Counts what ctest's JUnit reports say: passed, failed, skipped (a skip is never counted as a pass).

    ci/ctest_summary.py JUNIT... [--expect-skipped JUNIT...]

Prints one line per report and a last line "N passed, N failed, N skipped". Reports after --expect-skipped are the
GPU cases of a machine without a GPU: every case there must be skipped; one that passed or failed is listed and
counted as failed. Exit 0 when nothing failed, 1 otherwise, 2 for an unreadable report.
"""
import sys
import xml.etree.ElementTree as ET


def cases(path):
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"ctest_summary.py: {path}: {e}", file=sys.stderr)
        sys.exit(2)
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.get("status") == "fail":
            yield case.get("name"), "failed"
        elif case.find("skipped") is not None or case.get("status") in ("notrun", "disabled"):
            yield case.get("name"), "skipped"
        else:
            yield case.get("name"), "passed"


def main(argv):
    normal, expect_skipped = [], []
    target = normal
    for a in argv:
        if a == "--expect-skipped":
            target = expect_skipped
        else:
            target.append(a)
    total = {"passed": 0, "failed": 0, "skipped": 0}
    for path in normal + expect_skipped:
        counts = {"passed": 0, "failed": 0, "skipped": 0}
        wrong = []
        for name, status in cases(path):
            if path in expect_skipped and status != "skipped":
                wrong.append(f"{name} ({status} without a GPU)")
                status = "failed"
            counts[status] += 1
        for k in total:
            total[k] += counts[k]
        print(f"{path}: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
        for w in wrong:
            print(f"  not skipped: {w}")
    print(f"{total['passed']} passed, {total['failed']} failed, {total['skipped']} skipped")
    return 1 if total["failed"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
