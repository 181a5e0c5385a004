#!/usr/bin/env bash
# A/B of one benchmark binary between this tree and another source tree (an earlier commit, unpacked beside it with
# `git archive <commit> | tar -x -C <dir>`), on the GPU machine. Builds the binary in both trees (preset default),
# then runs them alternately, ROUNDS times each, so that drift over time (clocks, the NCCL baseline between
# processes) falls on both sides alike. Writes each run's Google Benchmark JSON and a summary of medians.
#
#   bench/experiments/ab_bench.sh BASE_DIR ROUNDS OUT_DIR BINARY [benchmark args...]
#   bench/experiments/ab_bench.sh ab-base 3 "$OUT/ab" alltoallv_bench --ranks=4 \
#       --benchmark_filter='alltoallv/peerlab.alltoallv/graph/uniform/bytes:134217728/'
#
# Exit codes: 0 done, 2 bad arguments, 3 a build failed, 4 a run failed.
set -uo pipefail

if [[ $# -lt 4 ]]; then
  echo "usage: ab_bench.sh BASE_DIR ROUNDS OUT_DIR BINARY [benchmark args...]" >&2
  exit 2
fi
base=$1
rounds=$2
out=$3
bin=$4
shift 4
here=$(cd "$(dirname "$0")/../.." && pwd)
if [[ ! -f "$base/CMakePresets.json" ]]; then
  echo "ab_bench.sh: BASE_DIR '$base' is not a peerlab source tree" >&2
  exit 2
fi
if ! [[ "$rounds" =~ ^[1-9][0-9]*$ ]]; then
  echo "ab_bench.sh: ROUNDS '$rounds' is not a positive integer" >&2
  exit 2
fi
mkdir -p "$out"
for tree in "$here" "$base"; do
  if ! (cd "$tree" && cmake --preset default -G Ninja >/dev/null && cmake --build --preset default --target "$bin" \
        -j"$(nproc)" >/dev/null); then
    echo "ab_bench.sh: building $bin in $tree failed" >&2
    exit 3
  fi
done
for ((r = 1; r <= rounds; ++r)); do
  for side in new base; do
    tree=$here
    [[ $side == base ]] && tree=$base
    if ! "$tree/build/default/bin/$bin" "$@" --benchmark_out="$out/$side-$r.json" --benchmark_out_format=json \
         >"$out/$side-$r.log" 2>&1; then
      echo "ab_bench.sh: $side run $r failed (see $out/$side-$r.log)" >&2
      exit 4
    fi
  done
done
python3 - "$out" "$rounds" >"$out/summary.txt" <<'EOF'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
times = {}
for side in ("new", "base"):
    for r in range(1, rounds + 1):
        for b in json.load(open(f"{out}/{side}-{r}.json"))["benchmarks"]:
            times.setdefault(b["name"], {}).setdefault(side, []).append(b["real_time"])
for name, t in sorted(times.items()):
    new = statistics.median(t.get("new", [float("nan")]))
    base = statistics.median(t.get("base", [float("nan")]))
    print(f"{name}\tnew {new:.2f}\tbase {base:.2f}\tnew/base {new / base:.4f}\t"
          f"runs new {' '.join(f'{x:.2f}' for x in t.get('new', []))} base {' '.join(f'{x:.2f}' for x in t.get('base', []))}")
EOF
cat "$out/summary.txt"
