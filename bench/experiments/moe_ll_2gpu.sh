#!/usr/bin/env bash
# The MoE low-latency mode on a 2-GPU machine in one pass (about 8 minutes): builds what it runs, then
#   1. moe_ll_gpu_test (1- and 2-rank cases; the 4-rank ones skip) and the LL CPU tests,
#   2. alltoallv_bench --ranks=2 --benchmark_filter=moe/ (T = 1, 8, 32, 64, 128, 256, 4096: low-latency bf16 and fp8,
#      normal fused, normal two-phase, NCCL path; eager and graph-replayed; kernel_us on the low-latency rows), then
#      the graph-replayed low-latency rows again with phase stamps (PEERLAB_MOE_LL_PHASES=1, phases.json),
#   3. Nsight Compute on the low-latency dispatch and combine kernels at T=1 and T=128 (a few counters in one pass,
#      three launches each from the timed loop),
#   4. compute-sanitizer memcheck, racecheck and synccheck over moe_ll_gpu_test (ci/sanitize.sh),
#   5. the scorecard's moe_ll fault classes (dropped writes, a peer dead at setup and after it, withheld flags),
# and prints a table per T last. Raw output goes to $OUT (summary.txt, bench.json, gpu_test.json, sanitize.json,
# phases.json, reliability.json, ncu.csv and raw.tar.gz with every log). Both benchmark files make one run file:
# `peerlab bench --import bench.json phases.json --out RUN.json`.
#
#   OUT=/path bench/experiments/moe_ll_2gpu.sh [--build DIR] [--auto-max-tokens N] [--no-ncu]
#
# --build: a configured build directory (default build/default; configured with the default preset and the GPUs'
# own architecture when it is not). --auto-max-tokens: the ll_auto_max_tokens the table checks the auto choice
# against (default 256, the largest T with low-latency rows). --no-ncu: leave step 3 out. Multicast stays off for NCCL, NVSHMEM and torch, and
# nothing here creates a multicast object. Exit code: 0 every stage ran and passed, 1 a stage failed (the table
# still prints), 2 usage.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

build=build/default
auto_max=256
no_ncu=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --auto-max-tokens) auto_max="$2"; shift 2 ;;
    --no-ncu) no_ncu=1; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "moe_ll_2gpu.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ "$auto_max" =~ ^[0-9]+$ ]] || { echo "moe_ll_2gpu.sh: --auto-max-tokens must be a number" >&2; exit 2; }
out="${OUT:-$PWD/build/moe-ll-out}"
mkdir -p "$out"
work=$(mktemp -d /tmp/moe-ll.XXXXXX)
mkdir -p "$work/ncu" "$work/sanitize"
started=$(date +%s)
failed=()
log() { echo "[moe_ll_2gpu $(date +%T) +$(( $(date +%s) - started ))s] $*" | tee -a "$work/stages.log"; }
# Seconds left before `limit` (the run must print its table within the 10 minutes a device command may take).
left() { echo $(( $1 - ($(date +%s) - started) )); }
stage_rc() {  # name rc
  if [ "$2" -ne 0 ]; then failed+=("$1 (exit $2)"); log "$1: exit $2"; else log "$1: ok"; fi
}

{
  date -u +%FT%TZ
  git rev-parse HEAD 2>/dev/null || cat .git-sha 2>/dev/null
  git status --short 2>/dev/null | head -20
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv
  nvidia-smi topo -m
  nvcc --version | tail -2
  command -v ncu compute-sanitizer
} >"$work/machine.txt" 2>&1
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
log "$gpus GPUs; work dir $work; output $out"
[ "$gpus" -ge 2 ] || log "fewer than 2 GPUs: the 2-rank cases, rows and drills will skip or fail"

# 0. Build (incremental when the tree is built already).
if [ ! -f "$build/CMakeCache.txt" ]; then
  log "configuring $build (preset default, native CUDA architecture)"
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  cmake --preset default "${generator[@]}" -DCMAKE_CUDA_ARCHITECTURES=native >"$work/configure.log" 2>&1
  stage_rc configure $?
fi
log "building"
timeout 900 cmake --build "$build" -j"$(nproc)" --target moe_ll_gpu_test ll_layout_test ll_reference_test \
  alltoallv_bench fault_drill peerlab peerlab_faults_preload >"$work/build.log" 2>&1
rc=$?
stage_rc build $rc
if [ $rc -ne 0 ]; then
  grep -E "error" "$work/build.log" | head -20
fi
bin="$build/bin"

# 1. Tests.
log "CPU tests of the LL layout and reference"
( "$bin/ll_layout_test" && "$bin/ll_reference_test" ) >"$work/cpu_test.log" 2>&1
stage_rc cpu_tests $?
log "moe_ll_gpu_test"
timeout 200 "$bin/moe_ll_gpu_test" --gtest_output="json:$out/gpu_test.json" >"$work/gpu_test.log" 2>&1
stage_rc gpu_tests $?
grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran" "$work/gpu_test.log" | tail -30 | tee -a "$work/stages.log"

# 2. Benchmark (nothing else on the GPUs meanwhile).
log "alltoallv_bench moe/"
timeout 300 "$bin/alltoallv_bench" --ranks=2 --benchmark_filter='moe/' --benchmark_out="$out/bench.json" \
  --benchmark_out_format=json >"$work/bench.log" 2>&1
stage_rc bench $?
log "alltoallv_bench low-latency rows with phase stamps (rows named .../phases)"
PEERLAB_MOE_LL_PHASES=1 timeout 120 "$bin/alltoallv_bench" --ranks=2 \
  --benchmark_filter='moe/peerlab\.(dispatch|combine)_ll(_fp8)?/graph/' --benchmark_out="$out/phases.json" \
  --benchmark_out_format=json >"$work/phases.log" 2>&1
stage_rc phases $?

# 3. Nsight Compute: counters this ncu knows, in one pass (the kernels wait on the peer; a replayed pass would wait
#    for flags that already came and went, bounded by PEERLAB_MOE_LL_TIMEOUT_MS).
if [ "$no_ncu" = 1 ]; then
  log "Nsight Compute left out (--no-ncu)"
elif command -v ncu >/dev/null; then
  ncu --query-metrics >"$work/ncu/query.txt" 2>&1
  metrics=""
  for m in gpu__time_duration.sum launch__grid_size launch__registers_per_thread sm__cycles_active.avg \
           dram__bytes_read.sum dram__bytes_write.sum lts__t_bytes.sum nvltx__bytes.sum nvlrx__bytes.sum; do
    base=${m%%.*}
    if [[ $m == launch__* || $m == gpu__time_duration.sum ]] || grep -qE "^${base}[[:space:]]" "$work/ncu/query.txt"; then
      metrics+="${metrics:+,}$m"
    fi
  done
  log "ncu metrics: $metrics"
  for phase in dispatch combine; do
    kernel=llDispatchKernel
    [ "$phase" = combine ] && kernel=llCombineKernel
    for T in 1 128; do
      if [ "$(left 400)" -lt 60 ]; then
        failed+=("ncu ${phase} T=$T (no time left)")
        continue
      fi
      # The row's check makes one dispatch and one combine, then 10 warm-up calls: the 3 profiled are timed calls.
      PEERLAB_MOE_LL_TIMEOUT_MS=2000 timeout 90 ncu --target-processes all --kernel-name "regex:$kernel" \
        --launch-skip 11 --launch-count 3 --metrics "$metrics" --clock-control none --cache-control none \
        --csv --page raw --print-units base --log-file "$work/ncu/${phase}_T$T.csv" \
        "$bin/alltoallv_bench" --ranks=2 --benchmark_filter="moe/peerlab\\.${phase}_ll/T=$T/" \
        >"$work/ncu/${phase}_T$T.log" 2>&1
      stage_rc "ncu ${phase} T=$T" $?
    done
  done
  python3 - "$work/ncu" "$out/ncu.csv" <<'EOF'
import csv, glob, os, sys
src, dst = sys.argv[1], sys.argv[2]
rows, header = [], None
for path in sorted(glob.glob(os.path.join(src, "*_T*.csv"))):
    tag = os.path.basename(path)[:-4]
    lines = [l for l in open(path, errors="replace") if l.startswith('"')]
    data = list(csv.reader(lines))
    if len(data) < 2:
        continue
    if header is None:
        header = ["run"] + data[0]
    for r in data[1:]:
        if r and r[0] not in ("", "ID") and not r[0].startswith("("):
            rows.append([tag] + r)
with open(dst, "w", newline="") as f:
    w = csv.writer(f)
    if header:
        w.writerow(header)
    w.writerows(rows)
print(f"ncu: {len(rows)} profiled launches -> {dst}")
EOF
else
  log "ncu not found: no profile"
  failed+=("ncu (not found)")
fi

# 4. compute-sanitizer over moe_ll_gpu_test (the 4-rank cases skip on 2 GPUs and are left out).
san_s=$(left 500)
[ "$san_s" -gt 200 ] && san_s=200
if [ "$san_s" -gt 30 ]; then
  log "compute-sanitizer memcheck racecheck synccheck (at most $san_s s)"
  OUT="$work/sanitize" timeout "$san_s" ci/sanitize.sh --build "$build" --report "$out/sanitize.json" \
    --filter '^moe_ll_gpu_test\.(?!.*(4ranks|FourRanks|T128))' --shards 1 --jobs 16 --timeout 170 \
    >"$work/sanitize.log" 2>&1
  stage_rc sanitizer $?
else
  failed+=("sanitizer (no time left)")
fi
grep -E "^sanitizer:" "$work/sanitize.log" 2>/dev/null | tee -a "$work/stages.log"

# 5. The scorecard's moe_ll classes.
sc_s=$(left 570)
[ "$sc_s" -gt 150 ] && sc_s=150
if [ "$sc_s" -gt 30 ]; then
  log "scorecard moe_ll classes (at most $sc_s s)"
  timeout "$sc_s" python3 harness/faults/scorecard.py --build "$build" --only moe_ll --out "$out/reliability.json" \
    >"$work/scorecard.log" 2>&1
  stage_rc scorecard $?
else
  failed+=("scorecard (no time left)")
fi
grep -E "moe_ll|^scorecard:" "$work/scorecard.log" 2>/dev/null | tail -12 | tee -a "$work/stages.log"

# Summary table (last).
python3 - "$out" "$auto_max" "${failed[@]+"${failed[@]}"}" >"$out/summary.txt" <<'EOF'
import csv, json, os, re, statistics, sys
out, auto_max, failed = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
rows = {}
try:
    for b in json.load(open(os.path.join(out, "bench.json")))["benchmarks"]:
        m = re.match(r"moe/([^/]+)/(graph/)?T=(\d+)/", b["name"])
        if not m:
            continue
        if b.get("error_occurred") or b.get("skipped") or "time_us" not in b:
            continue
        rows[(m.group(1), bool(m.group(2)), int(m.group(3)))] = b
except (OSError, ValueError, KeyError) as e:
    print(f"bench.json unreadable: {e}")

def t(impl, graph, T, key="time_us"):
    b = rows.get((impl, graph, T))
    return None if b is None or key not in b else float(b[key])

def f(x):
    return "-" if x is None else f"{x:.1f}"

wrong = [(k, b["wrong"]) for k, b in rows.items() if b.get("wrong", 0) > 0]
print("wrong > 0 in: " + (", ".join(f"{k[0]} {'graph ' if k[1] else ''}T={k[2]}" for k, _ in wrong) or "none"))
print(f"auto choice checked with ll_auto_max_tokens = {auto_max}: LL when T <= {auto_max}, else normal")
print()
cols = ["T", "LL disp graph", "(kernel)", "LL comb graph", "(kernel)", "fp8 disp graph", "(kernel)",
        "fused disp/comb", "2-phase disp/comb", "NCCL disp/comb", "LL nvlink GB/s", "faster mode", "auto"]
print(" | ".join(cols))
print(" | ".join("---" for _ in cols))
crossover = None
prev = None
for T in (1, 8, 32, 64, 128, 256, 4096):
    ll_d, ll_c = t("peerlab.dispatch_ll", True, T), t("peerlab.combine_ll", True, T)
    fu_d, fu_c = t("peerlab.dispatch", True, T), t("peerlab.combine", True, T)
    tp_d, tp_c = t("peerlab.dispatch_twophase", True, T), t("peerlab.combine_twophase", True, T)
    # A mode is one dispatch plus one combine; the normal mode at its better transport.
    ll = None if ll_d is None or ll_c is None else ll_d + ll_c
    normals = [d + c for d, c in ((fu_d, fu_c), (tp_d, tp_c)) if d is not None and c is not None]
    normal = min(normals) if normals else None
    faster = "LL" if ll is not None and (normal is None or ll < normal) else ("normal" if normal is not None else "-")
    if faster == "LL" and (crossover is None or crossover == prev):
        crossover = T
    prev = T
    picks = "LL" if T <= auto_max and ll is not None else "normal"
    print(" | ".join([str(T), f(ll_d), f(t("peerlab.dispatch_ll", True, T, "kernel_us")), f(ll_c),
                      f(t("peerlab.combine_ll", True, T, "kernel_us")), f(t("peerlab.dispatch_ll_fp8", True, T)),
                      f(t("peerlab.dispatch_ll_fp8", True, T, "kernel_us")), f"{f(fu_d)} / {f(fu_c)}",
                      f"{f(tp_d)} / {f(tp_c)}",
                      f"{f(t('nccl.dispatch', False, T))} / {f(t('nccl.combine', False, T))}",
                      f(t("peerlab.dispatch_ll", True, T, "nvlink_gbps")), faster,
                      picks + ("" if faster in ("-", picks) else " (NOT the faster)")]))
print()
print(f"LL is the faster mode (dispatch + combine, graph) from T=1 up to T={crossover}: set ll_auto_max_tokens there"
      if crossover else "LL is not the faster mode at T=1")
print("times in us: graph-replayed medians of the slowest rank; (kernel): kernel_us, the LL kernel alone; "
      "NCCL path eager")
try:
    rows_ncu = list(csv.DictReader(open(os.path.join(out, "ncu.csv"))))
    by = {}
    for r in rows_ncu:
        by.setdefault(r["run"], []).append(r)
    print()
    for run, rs in sorted(by.items()):
        parts = []
        for key in ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum",
                    "nvltx__bytes.sum", "launch__grid_size", "launch__registers_per_thread"):
            vals = [float(r[key].replace(",", "")) for r in rs if r.get(key) not in (None, "", "n/a")]
            if vals:
                parts.append(f"{key}={statistics.median(vals):.4g}")
        print(f"ncu {run}: {len(rs)} launches, " + ", ".join(parts))
except (OSError, KeyError, ValueError) as e:
    print(f"ncu: no profile ({e})")
print()
print("stages failed: " + ("; ".join(failed) if failed else "none"))
EOF

tar -czf "$out/raw.tar.gz" -C "$work" . 2>/dev/null
log "done in $(( $(date +%s) - started )) s; files in $out: $(cd "$out" && printf '%s ' *)"
echo
cat "$out/summary.txt"
[ ${#failed[@]} -eq 0 ]
