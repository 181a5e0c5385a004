#!/usr/bin/env bash
# Builds peerlab's libFuzzer targets with clang (host code, AddressSanitizer + UndefinedBehaviorSanitizer) in a
# separate build directory and runs each for a while. A crash is copied into fixtures/fuzz/<target>/ so that the
# cpu test fuzz_replay_<target> (normal build) replays it from then on; the script then exits 1.
#
#   ci/fuzz.sh [--seconds N] [--build DIR] [--merge] [TARGET...]
#     --seconds N   time per target (default $PEERLAB_FUZZ_SECONDS or 60)
#     --build DIR   build directory (default build/fuzz)
#     --merge       also merge inputs that add coverage into fixtures/fuzz/<target>/ (keeps the corpus small)
#     TARGET        report, render, site, history, stored, fault_spec, probe_cache, topology, cli (default: every target
#                   that is built)
# The renderers write pages on every input: they run with TMPDIR on /dev/shm where it exists and without Chart.js
# inlined (PEERLAB_CHARTJS=""), so that the time goes into inputs rather than into disk writes.
# Exit code: 0 no crash, 1 a target crashed (inputs saved), 2 usage, 3 build failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$PWD

seconds="${PEERLAB_FUZZ_SECONDS:-60}"
build="build/fuzz"
merge=0
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --merge) merge=1; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    -*) echo "ci/fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
case "$seconds" in ''|*[!0-9]*) echo "ci/fuzz.sh: --seconds needs a whole number, got '$seconds'" >&2; exit 2 ;; esac
log() { echo "[fuzz.sh $(date +%T)] $*"; }

for tool in clang clang++; do
  command -v "$tool" >/dev/null || { echo "ci/fuzz.sh: $tool not found (apt-get install clang libclang-rt-14-dev)" >&2; exit 3; }
done

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
sanitizers="address,undefined"
# Host code is compiled with coverage instrumentation and the sanitizers; the fuzz targets link them (CMake).
# CUDA sources of the libraries are compiled by nvcc as usual, uninstrumented.
cxx_flags="-fsanitize=fuzzer-no-link,$sanitizers -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
log "configure $build (clang, fuzzer instrumentation, ASan + UBSan)"
if ! cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DPEERLAB_FUZZ=ON -DPEERLAB_FUZZ_SANITIZERS="$sanitizers" \
    -DPEERLAB_BUILD_TESTS=OFF -DPEERLAB_BUILD_BENCH=OFF -DPEERLAB_WERROR=OFF \
    -DCMAKE_CXX_FLAGS="$cxx_flags" >"$build.configure.log" 2>&1; then
  tail -30 "$build.configure.log"
  echo "ci/fuzz.sh: configure failed (log: $build.configure.log)" >&2
  exit 3
fi

if [ ${#targets[@]} -eq 0 ]; then
  # Every known target the build defines (a module that is not there yet has none).
  known=$(cmake --build "$build" --target help 2>/dev/null)
  for t in report render site history stored fault_spec probe_cache topology cli; do
    grep -qE "(^|[ .])fuzz_$t(:| |$)" <<<"$known" && targets+=("$t")
  done
fi
if [ ${#targets[@]} -eq 0 ]; then
  echo "ci/fuzz.sh: no fuzz targets in $build" >&2
  exit 3
fi
build_targets=()
for t in "${targets[@]}"; do build_targets+=("fuzz_$t"); done
log "build ${build_targets[*]}"
if ! cmake --build "$build" --target "${build_targets[@]}" -j "$(nproc)" >"$build.build.log" 2>&1; then
  grep -E "error|Error" "$build.build.log" | head -30
  echo "ci/fuzz.sh: build failed (log: $build.build.log)" >&2
  exit 3
fi

export PEERLAB_CHARTJS=""
[ -d /dev/shm ] && [ -w /dev/shm ] && export TMPDIR=/dev/shm
crashed=()
for t in "${targets[@]}"; do
  bin="$build/bin/fuzz_$t"
  fixtures="$root/fixtures/fuzz/$t"
  corpus="$build/corpus/$t"
  artifacts="$build/artifacts/$t"
  mkdir -p "$fixtures" "$corpus" "$artifacts"
  rm -f "$artifacts"/*
  log "fuzz_$t for ${seconds}s (corpus $corpus, seeds $fixtures)"
  extra=()
  [ "$t" = topology ] && extra+=("$root/fixtures/topologies/hwloc" "$root/fixtures/topologies/nccl")
  # -rss_limit_mb / -timeout: a slow or huge input is a finding too.
  "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$artifacts/" "$corpus" "$fixtures" "${extra[@]}" >"$build/fuzz_$t.log" 2>&1
  rc=$?
  grep -E "^(stat::number_of_executed_units|stat::new_units_added|Done [0-9]+ runs)" "$build/fuzz_$t.log" | tr '\n' ' '
  echo
  found=$(find "$artifacts" -type f | wc -l)
  if [ $rc -ne 0 ] || [ "$found" -gt 0 ]; then
    for f in "$artifacts"/*; do
      [ -f "$f" ] || continue
      name=$(basename "$f")
      cp "$f" "$fixtures/$name"
      log "fuzz_$t: $name saved to fixtures/fuzz/$t/ (replayed by the cpu test fuzz_replay_$t)"
    done
    grep -E "ERROR: |runtime error|invariant failed|SUMMARY" "$build/fuzz_$t.log" | head -5
    crashed+=("$t")
    continue
  fi
  if [ $merge = 1 ]; then
    "$bin" -merge=1 "$fixtures" "$corpus" >"$build/fuzz_$t.merge.log" 2>&1 &&
      log "fuzz_$t: fixtures/fuzz/$t now has $(find "$fixtures" -type f | wc -l) inputs"
  fi
done

if [ ${#crashed[@]} -gt 0 ]; then
  log "crashes in: ${crashed[*]} (logs: $build/fuzz_<target>.log)"
  echo "fuzz: ${#targets[@]} targets, ${#crashed[@]} crashed"
  exit 1
fi
echo "fuzz: ${#targets[@]} targets, 0 crashed"
exit 0
