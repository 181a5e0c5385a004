#!/usr/bin/env bash
# GPU host: configure, build, run the GPU tests, the verified probe and the benchmarks, and write one run file
# reports/runs/<date>-<kind>-<sha7>.json.gz (report schema, gzip-compressed, with fingerprint), plus the raw logs under
# $OUT when set.
#
#   ci/gpu.sh [--kind NAME] [--tag TAG] [--stages LIST] [--bench quick|full] [--sanitize] [--tests-regex RE]
#
# The kind is --kind, else $PEERLAB_KIND, else derived from the hardware by peerlab (GPU model x count x
# interconnect, e.g. h200-x2-nvswitch). The build stage installs what is missing from ci/packages.txt (apt-get, or the
# packages brought in $PEERLAB_DEB_DIR on a machine without network: ci/fetch_packages.sh).
#
# Stages (comma-separated, in this order): build, tests, probe, bench, moe, torch, qualify, variants, scorecard,
# sanitize. `moe` runs the MoE rows of alltoallv_bench on every GPU (low-latency bf16 and fp8, normal fused and
# two-phase, the NCCL path; eager and graph-replayed) and the low-latency rows again with phase stamps
# (PEERLAB_MOE_LL_PHASES=1, rows named .../phases).
# `variants` runs the tuning sweeps (SM copy kernels, zcopy sync variants, alltoallv grid/chunk sizes) and keeps
# their raw Google Benchmark JSON in the logs; it adds no rows to the run file. The run file is
# reports/runs/<date>-<kind>-<sha7>[-<tag>].json.gz.
# Default: build,tests,qualify (qualify runs the topology, the verified probe and the quick benchmarks, and its
# results.json becomes part of the run file). `--sanitize` adds the sanitize stage (compute-sanitizer memcheck, racecheck and
# synccheck over the GPU tests; every job's logs in $OUT/sanitize.tgz). Every stage runs under a deadline; a failed
# stage does not stop the later ones, and the exit code is nonzero when any stage failed.
set -uo pipefail
# A relative PEERLAB_DEB_DIR is relative to where the script was started.
if [ -n "${PEERLAB_DEB_DIR:-}" ] && [ -d "$PEERLAB_DEB_DIR" ]; then PEERLAB_DEB_DIR="$(cd "$PEERLAB_DEB_DIR" && pwd)"; fi
cd "$(dirname "$0")/.." || exit 4
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

kind="${PEERLAB_KIND:-}"
stages="build,tests,qualify"
bench_mode="quick"
tests_regex=""
tag=""
while [ $# -gt 0 ]; do
  case "$1" in
    --kind) kind="$2"; shift 2 ;;
    --tag) tag="$2"; shift 2 ;;
    --stages) stages="$2"; shift 2 ;;
    --bench) bench_mode="$2"; shift 2 ;;
    --sanitize) stages="$stages,sanitize"; shift ;;
    --tests-regex) tests_regex="$2"; shift 2 ;;
    *) echo "ci/gpu.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$bench_mode" in quick|full) ;; *) echo "ci/gpu.sh: --bench takes quick or full" >&2; exit 2 ;; esac
has_stage() { [[ ",$stages," == *",$1,"* ]]; }

out="${OUT:-$PWD/build/gpu-out}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
work="$out/work"
mkdir -p "$work"
build=build/default
bin="$build/bin"
date_tag="$(date -u +%Y-%m-%d)"
# A copy of the tree may carry its commit in .git-sha (no history); otherwise ask git.
sha="${PEERLAB_GIT_SHA:-$(cat .git-sha 2>/dev/null || git rev-parse --verify -q HEAD 2>/dev/null || echo unknown)}"
export PEERLAB_GIT_SHA="$sha"
failed_stages=()
log() { echo "[gpu.sh $(date +%T)] $*"; }
# stage NAME SECONDS COMMAND...: runs with a deadline, logs to $work/NAME.log, records failure.
stage() {
  local name="$1" secs="$2"; shift 2
  log "$name (deadline ${secs}s)"
  local t0=$SECONDS
  timeout --kill-after=10 "$secs" "$@" >"$work/$name.log" 2>&1
  local rc=$?
  log "$name: exit $rc after $((SECONDS - t0))s"
  [ $rc -ne 0 ] && failed_stages+=("$name:$rc")
  return $rc
}

{
  uname -a; nproc; cmake --version | head -1; g++ --version | head -1; nvcc --version | tail -1
  nvidia-smi; nvidia-smi topo -m; pkg-config --modversion hwloc; echo "git sha: $sha"
} >"$work/env.txt" 2>&1

if has_stage build; then
  source ci/packages.sh
  packages_setup ci/gpu.sh build >"$work/packages.log" 2>&1 || failed_stages+=("packages:1")
  cat "$work/packages.log"
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  # The GPU present only (a build for this machine's run file); ci/qualify.sh builds the portable default list.
  # PEERLAB_CMAKE_ARGS: more configure options (e.g. -DPEERLAB_CHARTJS=/path/chart.min.js), split on spaces.
  # shellcheck disable=SC2086
  stage configure 300 cmake --preset default "${generator[@]}" -DCMAKE_CUDA_ARCHITECTURES="${PEERLAB_CUDA_ARCHITECTURES:-native}" \
    ${PEERLAB_CMAKE_ARGS:-}
  # Keep going past a target that fails, so the rest can still be tested; the stage still fails.
  stage build 900 cmake --build --preset default -j "$(nproc)" -- -k 0 || tail -40 "$work/build.log"
fi

if has_stage tests; then
  # PEERLAB_TESTS_PARALLEL > 1 runs that many GPU tests at once (they share the GPUs; deadlines are seconds).
  args=(--test-dir "$build" -L gpu --output-on-failure --output-junit "$work/ctest-gpu.xml" --timeout 240
    --parallel "${PEERLAB_TESTS_PARALLEL:-1}")
  [ -n "$tests_regex" ] && args+=(-R "$tests_regex")
  stage tests "${PEERLAB_TESTS_DEADLINE:-1500}" ctest "${args[@]}"
  grep -E "tests passed|Failed|\*\*\*|Not Run|Passed|Skipped" "$work/tests.log" | tail -40
fi

# The kind: the one the peerlab just built files the run under (the given kind in its canonical spelling, or the
# hardware's), read from the plan's JSON. A kind that contradicts the hardware stops here (peerlab exits 2 naming both).
kind_args=()
[ -n "$kind" ] && kind_args=(--kind "$kind")
plan_json="$work/kind-plan.json"
if "$bin/peerlab" qualify --dry-run --json --skip-probe --skip-bench "${kind_args[@]}" >"$plan_json" 2>"$work/kind.log" ||
  [ -s "$plan_json" ]; then
  kind="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("kind") or "")' "$plan_json" 2>/dev/null)"
fi
if [ -z "$kind" ]; then
  log "no machine kind: $(tail -n 1 "$work/kind.log" 2>/dev/null)"
  exit 2
fi
# The stages get --kind only when one was given: a derived kind is recorded as the hardware's (kind_source).
log "kind: $kind ($(python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(d.get("kind_source", ""), d.get("kind_basis", ""))' "$plan_json"))"
run_file="reports/runs/${date_tag}-${kind}-${sha:0:7}${tag:+-$tag}.json.gz"

runs=()
if has_stage probe; then
  stage topo 60 "$bin/peerlab" topo
  "$bin/peerlab" topo --json >"$work/topo.json" 2>>"$work/topo.log"
  cat "$work/topo.log"
  stage probe 120 "$bin/peerlab" probe --refresh --verbose --cache "$work/probe-cache.json" --json "$work/probe.json"
  tail -40 "$work/probe.log"
  [ -s "$work/probe.json" ] && runs+=("$work/probe.json")
fi

if has_stage bench; then
  stage bench 1500 "$bin/peerlab" bench "--$bench_mode" --gbench-dir "$work/gbench" "${kind_args[@]}" \
    --out "$work/bench.json"
  tail -30 "$work/bench.log"
  [ -s "$work/bench.json" ] && runs+=("$work/bench.json")
fi

if has_stage moe; then
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  stage moe 400 "$bin/alltoallv_bench" --ranks="$ngpu" --benchmark_filter='^moe/' \
    --benchmark_out="$work/moe.json" --benchmark_out_format=json
  tail -30 "$work/moe.log"
  stage moe_phases 200 env PEERLAB_MOE_LL_PHASES=1 "$bin/alltoallv_bench" --ranks="$ngpu" \
    --benchmark_filter='^moe/peerlab\.(dispatch|combine)_ll(_fp8)?/graph/' \
    --benchmark_out="$work/moe_phases.json" --benchmark_out_format=json
  moe_files=()
  for f in "$work/moe.json" "$work/moe_phases.json"; do [ -s "$f" ] && moe_files+=("$f"); done
  if [ ${#moe_files[@]} -gt 0 ] &&
    "$bin/peerlab" bench --import "${moe_files[@]}" "${kind_args[@]}" --out "$work/moe_run.json" >>"$work/moe.log" 2>&1
  then
    runs+=("$work/moe_run.json")
  fi
fi

if has_stage torch; then
  stage torch 300 python3 bench/external/torch_symm_alltoallv.py --ranks 4 --out "$work/torch.json"
  tail -15 "$work/torch.log"
  [ -s "$work/torch.json" ] && runs+=("$work/torch.json")
fi

if has_stage qualify; then
  stage qualify "${PEERLAB_QUALIFY_DEADLINE:-900}" "$bin/peerlab" qualify "${kind_args[@]}" --out "$work/qualify"
  tail -40 "$work/qualify.log"
  [ -s "$work/qualify/results.json" ] && runs+=("$work/qualify/results.json")
  [ -d "$work/qualify" ] && tar -C "$work" -czf "$out/qualify.tgz" qualify
fi

if has_stage variants; then
  mkdir -p "$work/variants"
  v="$work/variants"
  stage variants_sm 120 env PEERLAB_SM_COPY_SWEEP=1 "$bin/peer_copy_bench" --benchmark_filter='BM_PeerCopyTune' \
    --benchmark_out="$v/sm_sweep.json" --benchmark_out_format=json
  tail -25 "$work/variants_sm.log"
  stage variants_zcopy 180 env PEERLAB_ZCOPY_DEVICES=0,1 PEERLAB_ZCOPY_VARIANTS=all "$bin/zcopy_bench" --ranks=2 \
    --ranks_timeout=150 --benchmark_filter='bytes:(8|4096|65536|67108864|134217728)/' \
    --benchmark_out="$v/zcopy_variants.json" --benchmark_out_format=json
  for c in 66 264; do
    stage "variants_a2a_ctas$c" 90 env PEERLAB_ALLTOALLV_CTAS=$c "$bin/alltoallv_bench" --ranks=4 \
      --benchmark_filter='alltoallv/peerlab.alltoallv/(graph/)?uniform/bytes:134217728/' \
      --benchmark_out="$v/a2a_ctas$c.json" --benchmark_out_format=json
  done
  stage variants_a2a_chunk 90 env PEERLAB_ALLTOALLV_CHUNK_BYTES=1048576 "$bin/alltoallv_bench" --ranks=4 \
    --benchmark_filter='alltoallv/peerlab.alltoallv/uniform/bytes:134217728/' \
    --benchmark_out="$v/a2a_chunk1m.json" --benchmark_out_format=json
fi

if has_stage scorecard; then
  stage scorecard "${PEERLAB_SCORECARD_DEADLINE:-600}" ci/scorecard.sh --build "$build" --out "$work/reliability.json"
  tail -30 "$work/scorecard.log"
  [ -s "$work/reliability.json" ] && cp "$work/reliability.json" "$out/reliability.json"
fi

if has_stage sanitize; then
  # Merges its counts into the same reliability file as the scorecard. PEERLAB_SANITIZE_FILTER limits the tests.
  stage sanitize "${PEERLAB_SANITIZE_DEADLINE:-900}" ci/sanitize.sh --build "$build" --report "$work/reliability.json" \
    --filter "${PEERLAB_SANITIZE_FILTER:-}" --timeout "${PEERLAB_SANITIZE_TEST_TIMEOUT:-300}" \
    --shards "${PEERLAB_SANITIZE_SHARDS:-4}" --jobs "${PEERLAB_SANITIZE_JOBS:-12}" \
    --tools "${PEERLAB_SANITIZE_TOOLS:-memcheck racecheck synccheck}" \
    --exclude-kernels "${PEERLAB_SANITIZE_EXCLUDE-ncclDevKernel}"
  tail -20 "$work/sanitize.log"
  [ -s "$work/reliability.json" ] && cp "$work/reliability.json" "$out/reliability.json"
  # Every job's logs, packed: a few hundred files would not all come back from a device run.
  [ -d "$out/sanitize" ] && tar -C "$out" -czf "$out/sanitize.tgz" sanitize && rm -rf "$out/sanitize"
fi

# One run file from everything that ran.
junit=()
[ -s "$work/ctest-gpu.xml" ] && junit=(--junit "$work/ctest-gpu.xml")
if [ ${#runs[@]} -gt 0 ] || [ ${#junit[@]} -gt 0 ]; then
  mkdir -p reports/runs
  python3 ci/assemble_run.py --out "$run_file" --kind "$kind" --git-sha "$sha" "${junit[@]}" "${runs[@]}" &&
    cp "$run_file" "$out/run.json.gz"
  # The assembled file holds more than qualify checked (the ctest rows): its stored verdict is made again from all
  # of it, so that the count it states is the count every reader recomputes.
  if [ -s "$run_file" ] && python3 -c 'import gzip, json, sys; sys.exit(0 if "qualify" in json.load(gzip.open(sys.argv[1], "rt")) else 1)' "$run_file"; then
    "$bin/peerlab" qualify --results "$run_file" --out "$work/recheck" >"$work/recheck.log" 2>&1
    if [ -s "$work/recheck/results.json" ]; then
      # The verdict, counts and checks of the re-check; the command and wall time stay the qualify run's.
      python3 - "$run_file" "$work/recheck/results.json" <<'PY' && cp "$run_file" "$out/run.json.gz"
import gzip, json, sys
run = json.load(gzip.open(sys.argv[1], "rt"))
again = json.load(open(sys.argv[2]))["qualify"]
for key in ("verdict", "summary", "checks", "failed"):
    run["qualify"][key] = again[key]
with gzip.open(sys.argv[1], "wt") as f:
    json.dump(run, f, indent=2)
    f.write("\n")
PY
    else
      log "re-check of $run_file wrote nothing: $(tail -n 1 "$work/recheck.log")"
    fi
  fi
fi

# Raw logs and JSON, packed (what comes back from a device run is a few files).
tar -C "$out" -czf "$out/logs.tgz" work 2>/dev/null && rm -rf "$work"
if [ ${#failed_stages[@]} -gt 0 ]; then
  log "failed stages: ${failed_stages[*]}"
  exit 1
fi
log "all stages passed; run file: $run_file"
