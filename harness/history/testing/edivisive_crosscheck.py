#!/usr/bin/env python3
"""Cross-checks peerlab's E-Divisive (edivisive_tool) against signal-processing-algorithms (MongoDB, PyPI).

The same seeded series go to both: the statistic Q(tau) must agree to 1e-9 for every split, and the change points
found (both with min segment 1, p <= 0.05, 100 permutations) must be the same set on series whose steps are clear.
Exits 77 (ctest SKIP_RETURN_CODE) when the package cannot be imported.
"""
import json
import random
import subprocess
import sys

try:
    import numpy as np
    from signal_processing_algorithms.energy_statistics import energy_statistics as es
except ImportError as e:  # pragma: no cover
    print(f"SKIP: signal-processing-algorithms is not importable ({e}); "
          "pip install signal-processing-algorithms", flush=True)
    sys.exit(77)


def series_set(rng):
    out = []
    # Clear steps of 8-30% on 1-2% noise, one to three changes, lengths 40-120.
    for k in range(24):
        n = rng.randint(40, 120)
        cuts = sorted(rng.sample(range(10, n - 10), rng.randint(1, 3)))
        cuts = [c for i, c in enumerate(cuts) if i == 0 or c - cuts[i - 1] >= 10]
        level, x, j = 100.0, [], 0
        for i in range(n):
            if j < len(cuts) and i == cuts[j]:
                level *= rng.choice([0.75, 0.85, 0.92, 1.08, 1.15, 1.3])
                j += 1
            x.append(level * (1 + rng.gauss(0, 0.01 if k % 2 else 0.02)))
        out.append((x, cuts))
    return out


def main():
    tool = sys.argv[1]
    rng = random.Random(20)
    np.random.seed(20)
    cases = series_set(rng)
    text = "\n".join(" ".join(repr(v) for v in x) for x, _ in cases) + "\n"
    proc = subprocess.run([tool, "--pvalue", "0.05", "--permutations", "100", "--min-segment", "1", "--seed", "20"],
                          input=text, capture_output=True, text=True, check=True, timeout=120)
    ours = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(ours) == len(cases), f"{len(ours)} answers for {len(cases)} series"
    failures = 0
    same = 0
    for i, ((x, cuts), mine) in enumerate(zip(cases, ours)):
        arr = np.asarray(x, dtype=np.float64).reshape(-1, 1)
        ref_q = es._calculate_t_stats(es._get_distance_matrix(arr))
        q = np.asarray(mine["statistics"])
        if q.shape != ref_q.shape or not np.allclose(q, ref_q, rtol=1e-9, atol=1e-9):
            print(f"series {i}: statistics differ, max |diff| {np.max(np.abs(q - ref_q)):.3g}")
            failures += 1
        ref_cp = sorted(int(c) for c in es.e_divisive(x, pvalue=0.05, permutations=100))
        my_cp = sorted(mine["change_points"])
        # The permutation tests draw from different RNGs: the clear steps must match exactly, and at most one weak
        # extra split (a p-value near 0.05) may differ.
        strong_ref = [c for c in ref_cp if min(abs(c - t) for t in cuts) <= 1]
        strong_mine = [c for c in my_cp if min(abs(c - t) for t in cuts) <= 1]
        if strong_ref != strong_mine or len(set(ref_cp) ^ set(my_cp)) > 1:
            print(f"series {i} (n={len(x)}, steps at {cuts}): reference {ref_cp}, peerlab {my_cp}")
            failures += 1
        else:
            same += ref_cp == my_cp
        print(f"series {i:2d} n={len(x):3d} steps {cuts}: reference {ref_cp} peerlab {my_cp}")
    print(f"{len(cases)} series: statistics and change points compared, {same} identical sets, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
