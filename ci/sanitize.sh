#!/usr/bin/env bash
# Runs every GPU test (ctest -L gpu) under compute-sanitizer memcheck, racecheck and synccheck, child processes
# included (the multi-rank tests start their ranks as processes). Each test is split into --shards GoogleTest shards
# (GTEST_TOTAL_SHARDS / GTEST_SHARD_INDEX; fewer when it has fewer cases) and the (tool, test, shard) jobs run --jobs
# at a time, each with PEERLAB_UNDER_SANITIZER set to its tool (reference/testing/testing.h); repeated tests are
# capped at PEERLAB_TEST_MAX_ITERATIONS iterations (default 20: 10,000 random messages become 20). Prints one
# machine-readable line
#   sanitizer: memcheck=N racecheck=N synccheck=N untracked=N timeouts=N tests=N
# (N: errors reported, summed over every test and process; untracked: kernel launches the sanitizer said it could not
# track, which are not errors of the program and are not checked either) and merges the counts, with one entry per
# job, into the reliability file's "sanitizer" key (created with just that key when the scorecard has not run yet).
# A test that fails under the sanitizer (its deadlines are set for full speed) is listed with its exit code; only
# sanitizer errors and jobs that ran out of time fail this script.
# Kernels whose name contains --exclude-kernels (default ncclDevKernel: NCCL's own kernels, which the tests run as
# the baseline; synccheck flags the named barriers of NCCL's send/recv kernel and then aborts it) run unchecked;
# peerlab's kernels, those built on NCCL's device API included, are all checked. "" checks everything.
#   ci/sanitize.sh [--build DIR] [--report FILE] [--tools "memcheck racecheck synccheck"] [--filter REGEX]
#                  [--timeout SECONDS] [--shards N] [--jobs N] [--exclude-kernels SUBSTRING]
# Called by ci/gpu.sh --sanitize. Exit code: 0 no error, 1 errors or timeouts, 2 usage, 3 no compute-sanitizer.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

build="${PEERLAB_BUILD_DIR:-build/default}"
report="reports/reliability/$(date -u +%F).json"
tools="memcheck racecheck synccheck"
filter=""
timeout_s=600
# Repeated tests run at most this many iterations under the sanitizer (reference/testing/testing.h).
iterations="${PEERLAB_TEST_MAX_ITERATIONS:-20}"
shards=4
jobs=12
exclude_kernels="ncclDevKernel"
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --report) report="$2"; shift 2 ;;
    --tools) tools="$2"; shift 2 ;;
    --filter) filter="$2"; shift 2 ;;
    --timeout) timeout_s="$2"; shift 2 ;;
    --shards) shards="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --exclude-kernels) exclude_kernels="$2"; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "ci/sanitize.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ "$shards" =~ ^[1-9][0-9]*$ ]] || { echo "ci/sanitize.sh: --shards must be a positive number, not '$shards'" >&2; exit 2; }
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "ci/sanitize.sh: --jobs must be a positive number, not '$jobs'" >&2; exit 2; }
[[ "$exclude_kernels" =~ ^[A-Za-z0-9_]*$ ]] ||
  { echo "ci/sanitize.sh: --exclude-kernels must be one kernel-name substring, not '$exclude_kernels'" >&2; exit 2; }
exclude_args=()
[ -n "$exclude_kernels" ] && exclude_args=(--kernel-name-exclude "kns=$exclude_kernels")
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
[ -x "$sanitizer" ] || { echo "ci/sanitize.sh: compute-sanitizer not found" >&2; exit 3; }
[ -f "$build/CTestTestfile.cmake" ] || { echo "ci/sanitize.sh: $build is not a configured build" >&2; exit 2; }
out="${OUT:-$PWD/build/gpu-out}/sanitize"
mkdir -p "$out"
log() { echo "[sanitize.sh $(date +%T)] $*"; }

# name, working dir, env as KEY=VALUE;KEY=VALUE and argv joined by \x1f, separated by \x1e, one line per GPU test.
# (Not tabs: `read` merges runs of a whitespace separator, so a test without an environment lost a field.)
tests_file="$out/tests.tsv"
# The longest tests first (ctest's cost data from an earlier run of this build, when there is one), so that their
# jobs are not the ones left running at the end.
ctest --test-dir "$build" -L gpu --show-only=json-v1 2>/dev/null | python3 -c '
import json, sys, re
doc = json.load(sys.stdin)
flt = re.compile(sys.argv[1]) if sys.argv[1] else None
cost = {}
try:
    for line in open(sys.argv[2]):
        f = line.split()
        if line.startswith("---"):
            break
        if len(f) == 3:
            cost[f[0]] = float(f[2])
except (OSError, ValueError):
    pass
rows = []
for t in doc.get("tests", []):
    if flt and not flt.search(t["name"]):
        continue
    props = {p["name"]: p["value"] for p in t.get("properties", [])}
    env = props.get("ENVIRONMENT", [])
    if isinstance(env, str):
        env = [env]
    wd = props.get("WORKING_DIRECTORY", ".")
    rows.append((t["name"], wd, ";".join(env), "\x1f".join(t.get("command", []))))
rows.sort(key=lambda r: -cost.get(r[0], 0.0))
for r in rows:
    print("\x1e".join(r))
' "$filter" "$build/Testing/Temporary/CTestCostData.txt" >"$tests_file"
count=$(wc -l <"$tests_file")
[ "$count" -gt 0 ] || { echo "ci/sanitize.sh: no GPU tests found in $build" >&2; exit 2; }
log "$count GPU tests x ($tools)"

# One job: a shard of a test under a tool. Writes "tool test shard errors untracked exit_code seconds" to
# $out/jobs/<tool>-<test>-<shard>.tsv.
mkdir -p "$out/jobs"
rm -f "$out"/jobs/*.tsv
# A test row's environment (KEY=VALUE;...) and command (fields separated by \x1f) into the caller's arrays test_env
# and test_argv (declared local there).
split_row() {
  local kv list
  IFS=$'\x1f' read -r -a test_argv <<<"$2"
  IFS=';' read -r -a list <<<"$1"
  test_env=()
  for kv in "${list[@]}"; do [ -n "$kv" ] && test_env+=("$kv"); done
}

run_job() {
  local tool="$1" name="$2" wd="$3" envs="$4" cmd="$5" shard="$6" nshards="$7"
  local test_argv test_env env_args logs start rc counts
  split_row "$envs" "$cmd"
  # Parametrized test names hold '/' (Cases/Suite.Test/param): file names get '_' instead.
  local file="${name//\//_}"
  env_args=(PEERLAB_TEST_MAX_ITERATIONS="$iterations" PEERLAB_UNDER_SANITIZER="$tool" GTEST_TOTAL_SHARDS="$nshards"
    GTEST_SHARD_INDEX="$shard" "${test_env[@]}")
  logs="$out/$tool-$file-s$shard"
  rm -f "$logs".*.log
  start=$(date +%s)
  # CUDA API errors are not reported: the tests provoke them on purpose (invalid device, peer access already
  # enabled, bad arguments) and check how they are handled; the counts are memory, race and sync errors.
  ( cd "$wd" && env "${env_args[@]}" timeout --kill-after=10 "$timeout_s" "$sanitizer" --tool "$tool" \
      --report-api-errors no --target-processes all --print-limit 50 "${exclude_args[@]}" \
      --log-file "$logs.%p.log" "${test_argv[@]}" ) \
      >"$logs.out" 2>&1
  rc=$?
  # ERROR SUMMARY counts "Internal Sanitizer Error" reports too (a launch it could not track): those are split out.
  counts=$(cat "$logs".*.log 2>/dev/null | python3 -c '
import re, sys
total = internal = 0
for line in sys.stdin:
    m = re.search(r"ERROR SUMMARY: (\d+) error", line) or re.search(r"RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) error", line)
    if m:
        total += int(m.group(1))
    if "Internal Sanitizer Error" in line:
        internal += 1
print(max(0, total - internal), internal)')
  counts="${counts:-0 0}"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$tool" "$name" "$shard" "${counts%% *}" "${counts##* }" "$rc" "$(( $(date +%s) - start ))" \
    "$nshards" >"$out/jobs/$tool-$file-$shard.tsv"
  log "$tool $name shard $shard/$nshards: ${counts%% *} errors, ${counts##* } untracked (rc $rc, $(( $(date +%s) - start ))s)"
}

# Shards of a test: --shards, or fewer when the test has fewer GoogleTest cases (an empty shard checks nothing).
# A command that lists no cases (not a GoogleTest binary) keeps --shards.
shards_of() {
  local wd="$1" test_argv test_env n
  split_row "$2" "$3"
  n=$(cd "$wd" && env "${test_env[@]}" timeout 60 "${test_argv[@]}" --gtest_list_tests 2>/dev/null | grep -c '^  [^ ]')
  if [ "${n:-0}" -gt 0 ] && [ "$n" -lt "$shards" ]; then echo "$n"; else echo "$shards"; fi
}

running=0
expected=0
while IFS=$'\x1e' read -r name wd envs cmd; do
  nshards=$(shards_of "$wd" "$envs" "$cmd")
  for tool in $tools; do
    for ((shard = 0; shard < nshards; shard++)); do
      if [ "$running" -ge "$jobs" ]; then
        wait -n
        running=$((running - 1))
      fi
      run_job "$tool" "$name" "$wd" "$envs" "$cmd" "$shard" "$nshards" &
      running=$((running + 1))
      expected=$((expected + 1))
    done
  done
done <"$tests_file"
wait

declare -A errors
timeouts=0
untracked=0
for tool in $tools; do errors[$tool]=0; done
cat "$out"/jobs/*.tsv >"$out/runs.tsv" 2>/dev/null || : >"$out/runs.tsv"
jobs_done=0
while IFS=$'\t' read -r tool name shard e u rc _; do
  jobs_done=$((jobs_done + 1))
  errors[$tool]=$(( ${errors[$tool]} + e ))
  untracked=$((untracked + u))
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then timeouts=$((timeouts + 1)); fi
done <"$out/runs.tsv"
if [ "$jobs_done" -ne "$expected" ]; then
  log "$((expected - jobs_done)) of $expected jobs left no result"
  timeouts=$((timeouts + expected - jobs_done))
fi

mc=${errors[memcheck]:-null}
rc_=${errors[racecheck]:-null}
sc=${errors[synccheck]:-null}
echo "sanitizer: memcheck=$mc racecheck=$rc_ synccheck=$sc untracked=$untracked timeouts=$timeouts tests=$count"

mkdir -p "$(dirname "$report")"
python3 - "$report" "$mc" "$rc_" "$sc" "$timeouts" "$count" "$iterations" "$out/runs.tsv" "$untracked" "$shards" \
  "$exclude_kernels" <<'PY'
import json, os, sys
path, mc, rc, sc, timeouts, tests, iterations, runs_tsv, untracked, shards, excluded = sys.argv[1:]
runs = []
if os.path.exists(runs_tsv):
    for line in open(runs_tsv):
        f = line.rstrip("\n").split("\t")
        if len(f) == 8:
            runs.append({"tool": f[0], "test": f[1], "shard": int(f[2]), "shards": int(f[7]), "errors": int(f[3]),
                         "untracked": int(f[4]), "exit_code": int(f[5]), "wall_s": int(f[6])})
runs.sort(key=lambda r: (r["tool"], r["test"], r["shard"]))
num = lambda v: None if v == "null" else int(v)
doc = {}
if os.path.exists(path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except ValueError:
        doc = {}
doc["sanitizer"] = {"memcheck": num(mc), "racecheck": num(rc), "synccheck": num(sc),
                    "untracked_launches": int(untracked), "timeouts": int(timeouts), "tests": int(tests),
                    "shards": int(shards), "max_iterations": int(iterations),
                    "unchecked_kernels": excluded or None,
                    "git_sha": os.environ.get("PEERLAB_GIT_SHA", "unknown"), "runs": runs}
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
