#!/usr/bin/env bash
# Runs every GPU test (ctest -L gpu) under compute-sanitizer memcheck, racecheck and synccheck, child processes
# included (the multi-rank tests start their ranks as processes). The three tools run side by side; repeated tests
# are capped at PEERLAB_TEST_MAX_ITERATIONS iterations (default 20: 10,000 random messages become 20). Prints one
# machine-readable line
#   sanitizer: memcheck=N racecheck=N synccheck=N timeouts=N tests=N
# (N: errors reported, summed over every test and process) and merges {"memcheck", "racecheck", "synccheck"} into
# the reliability file's "sanitizer" key (created with just that key when the scorecard has not run yet).
#   ci/sanitize.sh [--build DIR] [--report FILE] [--tools "memcheck racecheck synccheck"] [--filter REGEX]
#                  [--timeout SECONDS]
# Called by ci/gpu.sh --sanitize. Exit code: 0 no error, 1 errors or timeouts, 2 usage, 3 no compute-sanitizer.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

build="${PEERLAB_BUILD_DIR:-build/default}"
report="reports/reliability/$(date -u +%F).json"
tools="memcheck racecheck synccheck"
filter=""
timeout_s=600
# Repeated tests run at most this many iterations under the sanitizer (reference/core/testing.h).
iterations="${PEERLAB_TEST_MAX_ITERATIONS:-20}"
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --report) report="$2"; shift 2 ;;
    --tools) tools="$2"; shift 2 ;;
    --filter) filter="$2"; shift 2 ;;
    --timeout) timeout_s="$2"; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "ci/sanitize.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
[ -x "$sanitizer" ] || { echo "ci/sanitize.sh: compute-sanitizer not found" >&2; exit 3; }
[ -f "$build/CTestTestfile.cmake" ] || { echo "ci/sanitize.sh: $build is not a configured build" >&2; exit 2; }
out="${OUT:-$PWD/build/gpu-out}/sanitize"
mkdir -p "$out"
log() { echo "[sanitize.sh $(date +%T)] $*"; }

# name<TAB>working dir<TAB>env as KEY=VALUE;KEY=VALUE<TAB>argv joined by \x1f, one line per GPU test.
tests_file="$out/tests.tsv"
ctest --test-dir "$build" -L gpu --show-only=json-v1 2>/dev/null | python3 -c '
import json, sys, re
doc = json.load(sys.stdin)
flt = re.compile(sys.argv[1]) if sys.argv[1] else None
for t in doc.get("tests", []):
    if flt and not flt.search(t["name"]):
        continue
    props = {p["name"]: p["value"] for p in t.get("properties", [])}
    env = props.get("ENVIRONMENT", [])
    if isinstance(env, str):
        env = [env]
    wd = props.get("WORKING_DIRECTORY", ".")
    print("\t".join([t["name"], wd, ";".join(env), "\x1f".join(t.get("command", []))]))
' "$filter" >"$tests_file"
count=$(wc -l <"$tests_file")
[ "$count" -gt 0 ] || { echo "ci/sanitize.sh: no GPU tests found in $build" >&2; exit 2; }
log "$count GPU tests x ($tools)"

# One loop per tool, the tools side by side (each test is CPU-bound under the sanitizer and the GPUs take several
# processes at once); each loop writes "errors timeouts" to $out/<tool>.count.
run_tool() {
  local tool="$1" errs=0 touts=0
  : >"$out/$tool.tsv"
  while IFS=$'\t' read -r name wd envs cmd; do
    IFS=$'\x1f' read -r -a argv <<<"$cmd"
    env_args=(PEERLAB_TEST_MAX_ITERATIONS="$iterations")
    IFS=';' read -r -a env_list <<<"$envs"
    for kv in "${env_list[@]}"; do [ -n "$kv" ] && env_args+=("$kv"); done
    logs="$out/$tool-$name"
    rm -f "$logs".*.log
    start=$(date +%s)
    # CUDA API errors are not reported: the tests provoke them on purpose (invalid device, peer access already
    # enabled, bad arguments) and check how they are handled; the counts are memory, race and sync errors.
    ( cd "$wd" && env "${env_args[@]}" timeout --kill-after=10 "$timeout_s" "$sanitizer" --tool "$tool" \
        --report-api-errors no --target-processes all --print-limit 50 --log-file "$logs.%p.log" "${argv[@]}" ) \
        >"$logs.out" 2>&1
    rc=$?
    n=$(cat "$logs".*.log 2>/dev/null | python3 -c '
import re, sys
total = 0
for line in sys.stdin:
    m = re.search(r"ERROR SUMMARY: (\d+) error", line) or re.search(r"RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) error", line)
    if m:
        total += int(m.group(1))
print(total)')
    errs=$((errs + n))
    status="rc $rc"
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
      touts=$((touts + 1))
      status="timed out after ${timeout_s}s"
    fi
    log "$tool $name: $n errors ($status, $(( $(date +%s) - start ))s)"
    printf '%s\t%s\t%s\t%s\t%s\n' "$tool" "$name" "$n" "$rc" "$(( $(date +%s) - start ))" >>"$out/$tool.tsv"
  done <"$tests_file"
  echo "$errs $touts" >"$out/$tool.count"
}

declare -A errors
timeouts=0
pids=()
for tool in $tools; do
  rm -f "$out/$tool.count"
  run_tool "$tool" &
  pids+=($!)
done
wait "${pids[@]}"
for tool in $tools; do
  read -r e t <"$out/$tool.count" 2>/dev/null || { e=0; t=1; log "$tool: no result (its loop died)"; }
  errors[$tool]=$e
  timeouts=$((timeouts + t))
done

mc=${errors[memcheck]:-null}
rc_=${errors[racecheck]:-null}
sc=${errors[synccheck]:-null}
echo "sanitizer: memcheck=$mc racecheck=$rc_ synccheck=$sc timeouts=$timeouts tests=$count"

mkdir -p "$(dirname "$report")"
: >"$out/runs.tsv"
for tool in $tools; do cat "$out/$tool.tsv" >>"$out/runs.tsv" 2>/dev/null; done
python3 - "$report" "$mc" "$rc_" "$sc" "$timeouts" "$count" "$iterations" "$out/runs.tsv" <<'PY'
import json, os, sys
path, mc, rc, sc, timeouts, tests, iterations, runs_tsv = sys.argv[1:]
runs = []
if os.path.exists(runs_tsv):
    for line in open(runs_tsv):
        f = line.rstrip("\n").split("\t")
        if len(f) == 5:
            runs.append({"tool": f[0], "test": f[1], "errors": int(f[2]), "exit_code": int(f[3]), "wall_s": int(f[4])})
num = lambda v: None if v == "null" else int(v)
doc = {}
if os.path.exists(path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except ValueError:
        doc = {}
doc["sanitizer"] = {"memcheck": num(mc), "racecheck": num(rc), "synccheck": num(sc),
                    "timeouts": int(timeouts), "tests": int(tests), "max_iterations": int(iterations),
                    "runs": runs}
tmp = path + ".tmp"
with open(tmp, "w") as f:
    json.dump(doc, f, indent=2)
    f.write("\n")
os.replace(tmp, path)
PY
log "merged into $report"
total=0
for tool in $tools; do total=$((total + ${errors[$tool]})); done
[ $total -eq 0 ] && [ $timeouts -eq 0 ]
