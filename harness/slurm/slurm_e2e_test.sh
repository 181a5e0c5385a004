#!/usr/bin/env bash
# shellcheck disable=SC2015  # assertions read "check && ok || fail" and "check && check || fail": both mean fail unless all hold
# The Slurm wrappers against a real Slurm: munge, slurmctld and four slurmd nodes in their own network and UTS
# namespaces (testing/slurm_cluster.sh), and a throwaway PostgreSQL history (harness/history/testing/pg_cluster.sh).
# The nodes have no GPU: peerlab runs on them with the stand-in NVML (node1 has NVLink 3 of GPU 0 down, the others
# are healthy), the probe's stand-in worker and a stand-in topology (PEERLAB_QUALIFY_STANDIN_TOPOLOGY, 4 GPUs).
#
#   1. slurmd runs peerlab-healthcheck as it starts: node1 is drained "peerlab: nvlink_state GPU0: ...", the
#      others stay idle;
#   2. node1 is resumed by hand; a job without the gate runs on node1 (the gate is opt-in); a job with the gate
#      (--constraint=peerlab_gate) lands on node1 first (lowest weight), the prolog's qualify fails, node1 is drained
#      with the failed check, the job is requeued and completes on node2;
#   3. node2 is drained as a peerlab health-check timeout would leave it, node3 by hand ("disk swap by admin");
#   4. peerlab-sweep over the partition: node3 left alone, node1, node2 and node4 qualified through Slurm, their
#      bundles ingested into PostgreSQL; node2 resumed, node1 kept drained, node4 idle, node3 still drained by hand;
#      the reservation is gone;
#   5. The runs were made with stand-ins, and the history says so: `history list` marks them injected, and `history
#      fleet` and the fleet page count none of them, listing them (node1's FAIL among them) as counted nowhere.
# Exit 0 pass, 1 fail, 77 skipped (no root, no Slurm or munge, no PostgreSQL: the reason is printed).
#
#   slurm_e2e_test.sh SOURCE_DIR PEERLAB FAKE_NVML_LIBRARY PROBE_STANDIN_WORKER
set -u
src="$1" peerlab="$2" fake_nvml="$3" standin="$4"
skip_rc=77
slurm="$src/harness/slurm"
work="$(mktemp -d /tmp/peerlab-slurm-e2e.XXXXXX)"
chmod 755 "$work"

cleanup() {
  "$slurm/testing/slurm_cluster.sh" stop "$work/slurm" >/dev/null 2>&1
  "$src/harness/history/testing/pg_cluster.sh" stop "$work/pg" >/dev/null 2>&1
  if [ -n "${PEERLAB_KEEP_SLURM_TEST:-}" ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

logs() {
  for f in "$work/wrappers.log" "$work/sweep.log" "$work/slurm/log/slurmctld.log" "$work/slurm/log"/slurmd.*.log; do
    [ -f "$f" ] && { echo "--- $f (last lines)"; tail -n 25 "$f"; }
  done
}
fail() {
  echo "FAIL: $*"
  logs
  exit 1
}
ok() { echo "ok: $*"; }

# The services; where one cannot start, the test skips and says why.
"$src/harness/history/testing/pg_cluster.sh" start "$work/pg" >/dev/null
if [ -f "$work/pg/skip" ]; then
  echo "SKIP: PostgreSQL: $(cat "$work/pg/skip")"
  exit $skip_rc
fi
db="$(cat "$work/pg/url")"

# The wrappers' configuration, the same file on every node (a node's fault is chosen by its name).
mkdir -p "$work/home" "$work/bin"
echo '{"gpus": 4}' >"$work/healthy.json"
echo '{"gpus": 4, "nvlink_down": [3]}' >"$work/nvlink_down.json"
cat >"$work/peerlab-slurm.conf" <<EOF
PEERLAB=$peerlab
export SLURM_CONF=$work/slurm/slurm.conf
export HOME=$work/home
export PEERLAB_NVML_LIBRARY=$fake_nvml
export PEERLAB_QUALIFY_STANDIN_TOPOLOGY=$src/fixtures/topologies/hwloc/power8gpudistances.xml
export PEERLAB_PROBE_WORKER=$standin PEERLAB_STANDIN_GPUS=4
case "\$(hostname -s)" in
  node1) export PEERLAB_FAKE_NVML=$work/nvlink_down.json ;;
  *) export PEERLAB_FAKE_NVML=$work/healthy.json ;;
esac
# The benchmarks need a GPU.
PEERLAB_QUALIFY_ARGS="--skip-bench"
PEERLAB_HEALTH_WATCH_S=1
PEERLAB_GATE_BUDGET_S=120
PEERLAB_BUNDLE_DIR=$work/gate
PEERLAB_SLURM_LOG=$work/wrappers.log
EOF
for w in healthcheck gate; do
  printf '#!/bin/sh\nPEERLAB_SLURM_CONFIG=%s exec %s "$@"\n' "$work/peerlab-slurm.conf" "$slurm/peerlab-$w" \
    >"$work/bin/$w"
  chmod 755 "$work/bin/$w"
done

SLURM_CLUSTER_HEALTHCHECK="$work/bin/healthcheck" SLURM_CLUSTER_PROLOG="$work/bin/gate" \
  SLURM_CLUSTER_EPILOG="$work/bin/gate" "$slurm/testing/slurm_cluster.sh" start "$work/slurm" 4
if [ -f "$work/slurm/skip" ]; then
  echo "SKIP: Slurm: $(head -n 1 "$work/slurm/skip")"
  exit $skip_rc
fi
# shellcheck source=/dev/null
source "$work/slurm/env"

state() { sinfo -h -n "$1" -N -o '%T' | head -n 1; }
reason() { sinfo -h -n "$1" -N -o '%E' | head -n 1; }
# Waits up to $1 seconds for a command to succeed.
wait_for() {
  local seconds="$1"
  shift
  for _ in $(seq $((seconds * 2))); do
    "$@" && return 0
    sleep 0.5
  done
  return 1
}
# Idle and responding (a node that was just resumed registers again first).
ready() { [ "$(state "$1")" = idle ] && ! scontrol show node "$1" | grep -q "State=[A-Z+_]*NOT_RESPONDING"; }
drained_by_peerlab() { [[ "$(state "$1")" == drain* ]] && [[ "$(reason "$1")" == "peerlab: $2"* ]]; }

# 1. The health check, run by slurmd as it starts.
wait_for 90 drained_by_peerlab node1 "nvlink_state GPU0: " ||
  fail "node1 was not drained by the health check: $(state node1) \"$(reason node1)\""
[ "$(reason node1)" = "peerlab: nvlink_state GPU0: reset GPU, reseat NVLink" ] ||
  fail "node1's drain reason: \"$(reason node1)\""
ok "health check drained node1: $(reason node1)"
# The healthy nodes ran the same check (the log says so) and stay idle.
checked() {
  local n
  for n in node2 node3 node4; do
    grep -q "healthcheck \[$n\] peerlab health: PASS" "$work/wrappers.log" 2>/dev/null || return 1
  done
}
wait_for 60 checked || fail "the health check did not pass on node2-4: $(cat "$work/wrappers.log" 2>/dev/null)"
for n in node2 node3 node4; do
  [ "$(state "$n")" = idle ] || fail "$n is $(state "$n") (\"$(reason "$n")\"), expected idle"
done
ok "node2-4 idle after their health checks"

# 2. The gate. A job that does not ask for it runs on node1 as it is.
scontrol update nodename=node1 state=resume || fail "cannot resume node1"
wait_for 60 ready node1 || fail "node1 is $(state node1) after it was resumed"
plain="$(sbatch --parsable -o "$work/plain.out" --wrap 'hostname -s')" || fail "sbatch failed"
wait_for 60 test -s "$work/plain.out" || fail "the job without the gate did not run"
[ "$(cat "$work/plain.out")" = node1 ] || fail "the job without the gate ran on $(cat "$work/plain.out"), not node1"
wait_for 30 ready node1 || fail "node1 is $(state node1) after a job without the gate"
[ ! -e "$work/gate/gate-$plain-node1-prolog" ] || fail "the gate ran for a job that did not ask for it"
ok "a job without the gate ran on node1 unchecked"
gated="$(sbatch --parsable --constraint=peerlab_gate -o "$work/gated.out" --wrap 'hostname -s')" || fail "sbatch failed"
wait_for 240 test -s "$work/gated.out" || fail "the gated job did not complete: $(squeue -h -j "$gated" 2>&1)"
[ "$(cat "$work/gated.out")" = node2 ] || fail "the gated job ran on $(cat "$work/gated.out"), not node2"
drained_by_peerlab node1 "nvlink_state GPU0: " || fail "node1 after the gate: $(state node1) \"$(reason node1)\""
[ -f "$work/gate/gate-$gated-node1-prolog/results.json" ] || fail "no gate bundle of node1"
[ -f "$work/gate/gate-$gated-node2-prolog/results.json" ] || fail "no gate bundle of node2"
scontrol show job "$gated" | grep -q "Restarts=1" || fail "the gated job was not requeued once: $(scontrol show job "$gated")"
wait_for 60 test -f "$work/gate/gate-$gated-node2-epilog/results.json" || fail "the epilog did not qualify node2"
ok "gated job: refused by node1 (drained: $(reason node1)), requeued, ran on node2"

# 3. Drains the sweep must tell apart: node2 as a peerlab health check timing out leaves it, node3 by hand.
scontrol update nodename=node2 state=drain reason="peerlab: unknown (timeout after 40 s)" || fail "drain node2"
scontrol update nodename=node3 state=drain reason="disk swap by admin" || fail "drain node3"

# 4. The sweep. A dry run first: it names what it would qualify and changes nothing.
PEERLAB_SLURM_CONFIG="$work/peerlab-slurm.conf" "$slurm/peerlab-sweep" --nodes 'node[1-4]' --db "$db" \
  --bundle-dir "$work/dry" --dry-run >"$work/dry.out" 2>&1 || fail "dry run: $(tail -n 3 "$work/dry.out")"
grep -q "dry run: would qualify node1 node2 node4; nothing changed" "$work/dry.out" || fail "dry run: $(cat "$work/dry.out")"
[[ "$(reason node2)" == "peerlab: unknown (timeout after 40 s)" ]] || fail "the dry run changed node2: $(reason node2)"
rc=0
PEERLAB_SLURM_CONFIG="$work/peerlab-slurm.conf" "$slurm/peerlab-sweep" --partition gpu --db "$db" \
  --bundle-dir "$work/sweep" --timeout 120 --wait 120 --log "$work/sweep.log" >"$work/sweep.out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || fail "peerlab-sweep exited $rc, expected 1 (node1 fails): $(tail -n 5 "$work/sweep.out")"
drained_by_peerlab node1 "nvlink_state GPU0: " || fail "node1 after the sweep: $(state node1) \"$(reason node1)\""
wait_for 30 ready node2 || fail "node2 after the sweep: $(state node2) \"$(reason node2)\", expected resumed"
wait_for 30 ready node4 || fail "node4 after the sweep: $(state node4) \"$(reason node4)\""
[[ "$(state node3)" == drain* ]] && [ "$(reason node3)" = "disk swap by admin" ] ||
  fail "node3 (drained by hand) after the sweep: $(state node3) \"$(reason node3)\""
grep -q "node3: drained by someone else" "$work/sweep.log" || fail "the sweep log does not say node3 was left alone"
! grep -qE "(drained|resumed) node3" "$work/sweep.log" || fail "the sweep touched node3"
for n in node1 node2 node4; do
  [ -f "$work/sweep/$n/results.json" ] || fail "no sweep bundle of $n"
done
[ ! -e "$work/sweep/node3" ] || fail "the sweep qualified node3"
! scontrol show reservation -o 2>/dev/null | grep -q peerlab_sweep || fail "the sweep's reservation is still there"
grep -q "resumed node2" "$work/sweep.log" || fail "the sweep log does not say node2 was resumed"
ok "sweep: node1 kept drained, node2 resumed, node3 untouched, node4 idle"

# What the history holds: the three bundles, node1 failing, each marked as made with stand-ins.
list="$("$peerlab" history list --db "$db" --json)" || fail "history list"
echo "$list" | python3 -c '
import json, sys
runs = json.load(sys.stdin)["runs"]
by = {r["host"]: r["verdict"] for r in runs}
assert by.get("node1") == "FAIL" and by.get("node2") == "PASS" and by.get("node4") == "PASS", by
assert "node3" not in by, by
for r in runs:
    assert "stand-in NVML" in r["injected"] and "stand-in machine (topology" in r["injected"], r
    assert "stand-in probe worker" in r["injected"], r
' || fail "history list: $list"
ok "PostgreSQL holds the bundles of node1 (FAIL), node2 and node4 (PASS), each marked injected (stand-ins)"

# 5. The fleet view counts none of them: stand-in verdicts are not the nodes' own.
"$peerlab" history fleet --db "$db" --json "$work/fleet.json" >"$work/fleet.txt" 2>&1 ||
  fail "history fleet: $(cat "$work/fleet.txt")"
grep -q "^3 runs with stand-ins or injected faults, counted nowhere:" "$work/fleet.txt" ||
  fail "history fleet does not list the stand-in runs apart: $(cat "$work/fleet.txt")"
grep -qE "^  run [0-9]+ [^ ]+ node1 FAIL at " "$work/fleet.txt" ||
  fail "history fleet does not name node1's FAIL: $(cat "$work/fleet.txt")"
python3 -c '
import json, sys
f = json.load(open(sys.argv[1]))
assert f["nodes"] == [], f["nodes"]
assert sorted(r["host"] for r in f["injected"]) == ["node1", "node2", "node4"], f["injected"]
' "$work/fleet.json" || fail "history fleet --json: $(cat "$work/fleet.json")"
"$peerlab" history html --db "$db" --out "$work/site" >/dev/null 2>&1 || fail "history html"
pages=("$work/site"/fleet-*.html)
page="${pages[0]}"
[ -f "$page" ] || fail "no fleet page in $(ls "$work/site")"
python3 - "$page" <<'EOF' || fail "fleet page $page"
import re, sys
html = open(sys.argv[1]).read()
assert "Runs counted nowhere: stand-ins or injected faults" in html, "no table of the stand-in runs"
rows = re.findall(r"<tr><td>[0-9]+</td><td class=\"l\">([^<]*)</td><td class=\"muted\">([^<]*)</td>", html)
assert sorted(rows) == [("node1", "FAIL (injected)"), ("node2", "PASS (injected)"), ("node4", "PASS (injected)")], rows
assert "0 nodes:" in html, "stand-in runs counted as nodes"
EOF
ok "history fleet and the fleet page list the stand-in runs apart, node1's FAIL among them, and count none"
echo "PASS"
