#!/usr/bin/env bash
# The transport suite on a GPU host with 2 GPUs and no network: the transport tests, the probe of nixl_write /
# nixl_read / ucx_put / ucx_get on both ordered pairs of GPUs 0 and 1, the transport benchmark beside peerlab.get /
# peerlab.put / nccl.sendrecv (one `peerlab bench` run file), the CPU-wait comparison, and the scorecard's
# ucx_no_cuda class. Everything runs under a deadline; what it writes goes to $OUT (default build/transport-out):
#   run.json         one run file: GPU test results, probe cells, benchmark rows (transport and its baselines)
#   probe.json       the probe's run file          bench.json   `peerlab bench`'s run file
#   reliability.json the scorecard (ucx_no_cuda)   summary.txt  the table printed at the end
#   logs.tgz         every log, Google Benchmark JSON and the ctest JUnit report
#
#   ci/transport_gpu.sh [--build DIR] [--deps DIR] [--bench-pairs 0-1[,1-0]] [--kind NAME]
#
# DIR defaults to build/default (configured with `cmake --preset default`; missing targets are built). The libraries
# come from --deps (default .deps/transport, from ci/transport_deps.sh): PEERLAB_NIXL_DIR=DIR/nixl,
# PEERLAB_UCX_DIR=DIR/ucx (UCX with CUDA), DIR/ucx-debian (Debian's UCX without CUDA) for the scorecard. The CUDA
# toolkit's lib64 is added to LD_LIBRARY_PATH (UCX's CUDA memory hooks load libcudart.so.13 from there).
# Exit code: 0 every stage passed, 1 a stage failed, 2 usage, 3 fewer than 2 GPUs or the libraries missing.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 4
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

build=build/default
deps=.deps/transport
bench_pairs=0-1
kind="${PEERLAB_KIND:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --deps) deps="$2"; shift 2 ;;
    --bench-pairs) bench_pairs="$2"; shift 2 ;;
    --kind) kind="$2"; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "ci/transport_gpu.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

out="${OUT:-$PWD/build/transport-out}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
work="$out/work"
mkdir -p "$work"
deps_arg="$deps"
deps="$(cd "$deps" 2>/dev/null && pwd)" || { echo "ci/transport_gpu.sh: no $deps_arg (ci/transport_deps.sh brings it)" >&2; exit 3; }
for d in nixl/lib ucx/lib ucx-debian/lib; do
  [ -d "$deps/$d" ] || { echo "ci/transport_gpu.sh: $deps/$d missing (ci/transport_deps.sh)" >&2; exit 3; }
done
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
[ "$gpus" -ge 2 ] || { echo "ci/transport_gpu.sh: needs 2 GPUs, nvidia-smi lists $gpus" >&2; exit 3; }

export PEERLAB_NIXL_DIR="$deps/nixl" PEERLAB_UCX_DIR="$deps/ucx" PEERLAB_TRANSPORT_DEPS="$deps" PEERLAB_KIND="$kind"
for cuda in /usr/local/cuda/lib64 /usr/local/cuda-13.0/lib64; do
  [ -d "$cuda" ] && export LD_LIBRARY_PATH="$cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" && break
done
sha="${PEERLAB_GIT_SHA:-$(cat .git-sha 2>/dev/null || git rev-parse --verify -q HEAD 2>/dev/null || echo unknown)}"
export PEERLAB_GIT_SHA="$sha"
bin="$build/bin"
failed=()
log() { echo "[transport_gpu.sh $(date +%T)] $*"; }
stage() {  # stage NAME SECONDS COMMAND...
  local name="$1" secs="$2"; shift 2
  log "$name (deadline ${secs}s)"
  local t0=$SECONDS
  timeout --kill-after=10 "$secs" "$@" >"$work/$name.log" 2>&1
  local rc=$?
  log "$name: exit $rc after $((SECONDS - t0))s"
  [ $rc -ne 0 ] && failed+=("$name:$rc")
  return $rc
}

{
  nvidia-smi; nvidia-smi topo -m; uname -a; echo "git sha: $sha"; echo "deps: $deps"
  cat "$deps/MANIFEST.txt" 2>/dev/null
} >"$work/env.txt" 2>&1

targets=(peerlab transport_test transport_gpu_test transport_bench zcopy_bench)
# Always an (incremental) build: binaries left from an earlier run of another checkout would otherwise be run as they
# are. Nothing to do costs a second.
if [ ! -f "$build/CMakeCache.txt" ]; then
  stage configure 300 cmake --preset default -DCMAKE_CUDA_ARCHITECTURES="${PEERLAB_CUDA_ARCHITECTURES:-native}"
fi
stage build 420 cmake --build "$build" --target "${targets[@]}" -j "$(nproc)" || tail -30 "$work/build.log"


# 1. The transport tests (CPU and GPU cases; the real ones use the libraries above).
stage tests 120 ctest --test-dir "$build" -R '^transport(_gpu)?_test\.' --output-on-failure --timeout 120 \
  --output-junit "$work/ctest-transport.xml"
grep -E "tests passed|Failed|Skipped|\*\*\*" "$work/tests.log" | tail -15

# 2. The probe: the transport methods (and the copy engine for reference) on both ordered pairs.
stage probe 90 "$bin/peerlab" probe --methods transport,ce_write,ce_read --pairs 0-1,1-0 --sizes 4K,64M \
  --setup-timeout 60s --timeout 10s --no-cache --verbose --json "$out/probe.json"
tail -25 "$work/probe.log"

# 3. The benchmark: transport_bench for NIXL and for UCX, zcopy_bench's baselines, one run file.
pairs_arg=()
[ -n "$bench_pairs" ] && pairs_arg=(--pairs "$bench_pairs")
stage bench 240 "$bin/peerlab" bench --suite transport "${pairs_arg[@]}" --bench-dir "$bin" --gbench-dir "$work/gbench" \
  --kind "$kind" --timeout 100 --out "$out/bench.json"
tail -12 "$work/bench.log"

# 4. The scorecard's ucx_no_cuda class and its clean transport run (0 false positives expected).
stage scorecard 150 python3 harness/faults/scorecard.py --build "$build" --target transport \
  --transport-deps "$deps" --out "$out/reliability.json"
tail -8 "$work/scorecard.log"

# One run file from what ran.
runs=()
for f in "$out/probe.json" "$out/bench.json"; do [ -s "$f" ] && runs+=("$f"); done
junit=()
[ -s "$work/ctest-transport.xml" ] && junit=(--junit "$work/ctest-transport.xml")
extra=()
[ -s "$out/reliability.json" ] && extra=(--extra "reliability=$out/reliability.json")
if [ ${#runs[@]} -gt 0 ]; then
  python3 ci/assemble_run.py --out "$out/run.json" --kind "$kind" --git-sha "$sha" "${junit[@]}" "${extra[@]}" \
    "${runs[@]}" >"$work/assemble.log" 2>&1 || failed+=("assemble")
fi

python3 - "$out" >"$out/summary.txt" 2>&1 <<'EOF'
import json, os, sys
out = sys.argv[1]
def num(v, digits):
    # A missing value (null in the run file: a skipped or failed row, a counter the row does not have) prints "-".
    if v is None or isinstance(v, bool):
        return "-"
    try:
        return str(round(float(v), digits))
    except (TypeError, ValueError):
        return "-"
def text(v):
    return "-" if v is None or v == "" else str(v)
def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
print("== probe (transport cells)")
probe = load("probe.json")
if probe:
    for r in probe["results"]:
        if r.get("suite") != "probe" or r.get("src") is None:
            continue
        m = r["name"].split("/")[0]
        if not m.startswith(("nixl", "ucx")):
            continue
        e = dict(r.get("extra", {}), **r)
        print(f"  {text(r.get('name')):<22} {text(r.get('src'))}->{text(r.get('dst'))}  {text(r.get('status')):<12} "
              f"claimed={str(e.get('claimed')).lower():<5} {(e.get('error') or '')[:70]}")
else:
    print("  no probe.json")
print("== bench (time_us one-way or per transfer, GB/s, CPU us per transfer of the posting thread)")
bench = load("bench.json")
rows = {}
if bench:
    for r in bench["results"]:
        if r.get("suite") not in ("transport", "zcopy") or not r.get("bytes"):
            continue
        rows[(text(r.get("impl")), text(r.get("name")), int(r["bytes"]), r.get("src"), r.get("dst"))] = r
    print(f"  {'impl':<14} {'name':<18} {'bytes':>10} {'time_us':>9} {'GB/s':>8} {'cpu_us':>8} {'post':>6} {'xfer':>8} wrong status")
    for key in sorted(rows, key=lambda k: (k[2], k[0], k[1])):
        r = rows[key]
        e = dict(r.get("extra", {}), **r)
        print(f"  {key[0]:<14} {key[1]:<18} {key[2]:>10} {num(r.get('time_us'), 2):>9} "
              f"{num(r.get('algbw_gbps'), 1):>8} {num(e.get('cpu_us'), 2):>8} {num(e.get('post_us'), 2):>6} "
              f"{num(e.get('transfer_us'), 1):>8} {num(r.get('wrong'), 1):>5} {text(r.get('status'))[:70]}")
    print("== large transfers against peerlab.put (target >= 0.9)")
    for (impl, name, b, s, d), r in sorted(rows.items()):
        if impl not in ("nixl.write", "ucx.put", "nixl.read", "ucx.get") or name != "uni" or b < (64 << 20):
            continue
        base = rows.get(("peerlab.put", "uni", b, s, d))
        if base and isinstance(base.get("algbw_gbps"), (int, float)) and isinstance(r.get("algbw_gbps"), (int, float)) \
                and base["algbw_gbps"] > 0:
            print(f"  {impl:<11} {b >> 20:>5} MiB {s}->{d}: {r['algbw_gbps']:.1f} GB/s = "
                  f"{r['algbw_gbps'] / base['algbw_gbps']:.2f} x peerlab.put ({base['algbw_gbps']:.1f})")
else:
    print("  no bench.json")
print("== scorecard")
rel = load("reliability.json")
if rel:
    for f in rel.get("faults", []):
        print(f"  {text(f.get('name')):<12} injected {text(f.get('injected'))} detected {text(f.get('detected'))} "
              f"misclassified {text(f.get('misclassified'))} missed {text(f.get('missed'))} "
              f"skipped {text(f.get('skipped'))}")
    print(f"  false positives: {text(rel.get('false_positives'))}")
else:
    print("  no reliability.json")
EOF

tar -C "$out" -czf "$out/logs.tgz" work 2>/dev/null && rm -rf "$work"
cat "$out/summary.txt"
if [ ${#failed[@]} -gt 0 ]; then
  log "failed stages: ${failed[*]}"
  exit 1
fi
log "all stages passed"
