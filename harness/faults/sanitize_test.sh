#!/usr/bin/env bash
# shellcheck disable=SC2015  # assertions read "check && ok || fail" and "check && check || fail": both mean fail unless all hold
# CPU test of ci/sanitize.sh with a stand-in compute-sanitizer and a build directory holding two fake GPU tests:
# the job pool (tools x tests x shards), the error counts read from the logs, launches the sanitizer could not track
# kept apart from errors, the kernel exclusion passed through, the report it merges, its exit codes, and bad
# arguments (one line naming the argument, exit 2).
#   sanitize_test.sh SOURCE_DIR
set -euo pipefail
src=$1
tmp=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
fail() { echo "sanitize_test: $*" >&2; exit 1; }

# The stand-in: records its options, runs the test command, and writes a log like the real tool's per tool:
# memcheck clean, racecheck 2 hazards, synccheck 1 error of which 1 is an untracked launch.
mkdir -p "$tmp/bin" "$tmp/build"
cat >"$tmp/bin/compute-sanitizer" <<'SAN'
#!/usr/bin/env bash
tool="" log="" exclude="none"
while [ $# -gt 0 ]; do
  case "$1" in
    --tool) tool=$2; shift 2 ;;
    --log-file) log=$2; shift 2 ;;
    --kernel-name-exclude) exclude=$2; shift 2 ;;
    --report-api-errors|--target-processes|--print-limit) shift 2 ;;
    *) break ;;
  esac
done
log=${log//%p/$$}
echo "$tool $exclude shard=${GTEST_SHARD_INDEX:-}/${GTEST_TOTAL_SHARDS:-} max=${PEERLAB_TEST_MAX_ITERATIONS:-}" \
  "under=${PEERLAB_UNDER_SANITIZER:-} $*" >>"$SAN_RECORD"
case "$tool" in
  memcheck) printf '========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n' >"$log" ;;
  racecheck) printf '========= COMPUTE-SANITIZER\n========= RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)\n' >"$log" ;;
  synccheck) printf '========= COMPUTE-SANITIZER\n========= Internal Sanitizer Error: out of memory\n========= ERROR SUMMARY: 1 error\n' >"$log" ;;
esac
"$@"
SAN
chmod +x "$tmp/bin/compute-sanitizer"
# A GoogleTest-like binary with a single case: it gets one shard, not --shards.
cat >"$tmp/bin/fake_gtest" <<'GT'
#!/bin/sh
[ "${1:-}" = --gtest_list_tests ] && printf 'Suite.\n  OnlyCase\n'
exit 0
GT
chmod +x "$tmp/bin/fake_gtest"
cat >"$tmp/build/CTestTestfile.cmake" <<CT
add_test(fake_a_test "/bin/sh" "-c" "exit 0")
set_tests_properties(fake_a_test PROPERTIES LABELS "gpu" WORKING_DIRECTORY "$tmp")
add_test(fake_b_test "/bin/sh" "-c" "exit 1")
set_tests_properties(fake_b_test PROPERTIES LABELS "gpu" WORKING_DIRECTORY "$tmp")
add_test(fake_c_test "$tmp/bin/fake_gtest")
set_tests_properties(fake_c_test PROPERTIES LABELS "gpu" WORKING_DIRECTORY "$tmp")
add_test(host_test "/bin/sh" "-c" "exit 0")
set_tests_properties(host_test PROPERTIES LABELS "cpu")
CT

export PATH="$tmp/bin:$PATH" SAN_RECORD="$tmp/record.txt" OUT="$tmp/out"
run() { "$src/ci/sanitize.sh" --build "$tmp/build" --report "$tmp/report.json" "$@" >"$tmp/stdout" 2>"$tmp/stderr"; }

# Every tool, 2 tests x 2 shards and one single-case test x 1 shard: racecheck errors make it fail.
set +e
run --shards 2 --jobs 3
rc=$?
set -e
[ $rc -eq 1 ] || fail "expected exit 1 with racecheck errors, got $rc: $(cat "$tmp/stderr")"
grep -q '^sanitizer: memcheck=0 racecheck=10 synccheck=0 untracked=5 timeouts=0 tests=3$' "$tmp/stdout" ||
  fail "wrong summary: $(grep '^sanitizer:' "$tmp/stdout")"
[ "$(wc -l <"$tmp/record.txt")" -eq 15 ] || fail "expected 15 jobs, the stand-in ran $(wc -l <"$tmp/record.txt")"
[ "$(grep -c ' kns=ncclDevKernel ' "$tmp/record.txt")" -eq 15 ] || fail "NCCL's kernels were not excluded by default"
grep -q '^racecheck .* shard=1/2 max=20 under=racecheck /bin/sh' "$tmp/record.txt" ||
  fail "shards, the iteration cap or the tool not passed: $(head -1 "$tmp/record.txt")"
[ "$(grep -c 'shard=0/1 .*fake_gtest' "$tmp/record.txt")" -eq 3 ] && ! grep -q 'shard=1/.*fake_gtest' "$tmp/record.txt" ||
  fail "a single-case test was not run as one shard: $(grep fake_gtest "$tmp/record.txt")"
python3 - "$tmp/report.json" <<'PY' || fail "report: $(cat "$tmp/report.json")"
import json, sys
s = json.load(open(sys.argv[1]))["sanitizer"]
assert (s["memcheck"], s["racecheck"], s["synccheck"], s["untracked_launches"]) == (0, 10, 0, 5), s
assert s["unchecked_kernels"] == "ncclDevKernel", s
runs = s["runs"]
assert len(runs) == 15, runs
assert {r["shards"] for r in runs if r["test"] == "fake_c_test"} == {1}, runs
assert {r["shards"] for r in runs if r["test"] != "fake_c_test"} == {2}, runs
# The failing test's exit code is listed; it is not a sanitizer error.
assert {r["exit_code"] for r in runs if r["test"] == "fake_b_test"} == {1}, runs
assert {r["exit_code"] for r in runs if r["test"] == "fake_a_test"} == {0}, runs
assert all(r["untracked"] == (1 if r["tool"] == "synccheck" else 0) for r in runs), runs
PY

# One clean tool, nothing excluded: exit 0, the report's other keys kept.
: >"$tmp/record.txt"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d["faults"]=[]; json.dump(d, open(sys.argv[1], "w"))' \
  "$tmp/report.json"
run --tools memcheck --shards 1 --exclude-kernels "" --filter fake_a || fail "clean run failed: $(cat "$tmp/stderr")"
grep -q '^memcheck none ' "$tmp/record.txt" || fail "--exclude-kernels \"\" still excluded: $(cat "$tmp/record.txt")"
[ "$(wc -l <"$tmp/record.txt")" -eq 1 ] || fail "the filter did not pick one test"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["faults"] == [] and d["sanitizer"]["unchecked_kernels"] is None, d' \
  "$tmp/report.json" || fail "report not merged"

# Bad arguments: one line naming the argument, exit 2, nothing run.
for args in "--shards 0" "--jobs x" "--exclude-kernels a,b" "--bogus"; do
  : >"$tmp/record.txt"
  set +e
  # shellcheck disable=SC2086
  run $args
  rc=$?
  set -e
  [ $rc -eq 2 ] || fail "'$args': expected exit 2, got $rc"
  [ "$(wc -l <"$tmp/stderr")" -eq 1 ] || fail "'$args': not one line: $(cat "$tmp/stderr")"
  word=${args%% *}
  grep -q -- "${word}" "$tmp/stderr" || fail "'$args': the message does not name $word: $(cat "$tmp/stderr")"
  [ ! -s "$tmp/record.txt" ] || fail "'$args': jobs ran"
done
set +e
"$src/ci/sanitize.sh" --build "$tmp/nowhere" >/dev/null 2>"$tmp/stderr"
rc=$?
set -e
[ $rc -eq 2 ] && grep -q "$tmp/nowhere is not a configured build" "$tmp/stderr" || fail "missing build: rc $rc"
echo "sanitize_test: ok"
