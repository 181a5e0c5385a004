#!/usr/bin/env bash
# `peerlab slurm` against a real Slurm: munge, slurmctld and eight slurmd nodes in their own network and UTS
# namespaces (testing/slurm_cluster.sh; node8 is Slurm's rack2-gpu08, a NodeName that is not its host name), and a
# throwaway PostgreSQL history (harness/history/testing/pg_cluster.sh). The nodes have no GPU: peerlab runs on them
# with the stand-in NVML (node1 has NVLink 3 of GPU 0 down, the others are healthy), the probe's stand-in worker, a
# stand-in topology (4 GPUs) and, for `peerlab health`, a stand-in libcuda that records each process loading it.
#
#   1. slurmd runs the health check as it starts: node1 drained "peerlab: nvlink_state GPU0: ...", its drain journaled
#      in the history; the others idle; an idle node's check loads CUDA (it wakes the links with copies);
#   2. settings: a line that is not TOML, a bad value, a file others can write: refused with file, line and key; the
#      health check with a broken file drains its node as a setup error (the documented action);
#   3. the gate: a job whose comment globs through /proc (H1) runs at once, ungated; a gated job lands on node1, its
#      prolog fails, node1 is drained, the job requeued onto node2, whose prolog finds its bundle directory planted
#      with a link and makes a fresh one; the gate bundles reach the history;
#   4. the health check on a node running a job: NVML only, no CUDA driver loaded;
#   5. an admin's drain whose reason starts with "peerlab:" (node5);
#   6. a rolling sweep of the partition, --batch 2 --drain-outliers, sampled: never more than 2 nodes in maintenance;
#      under an LD_PRELOAD and a PEERLAB_FAULT that must not reach the jobs; node1 resumed for its job and drained
#      again by its verdict, node5 left alone, node7 (below its fleet in the history's figures, all five cloud VMs
#      named "vm") drained as an outlier by its NodeName, the others in service; the runs keyed by NodeName
#      (rack2-gpu08, host node8); the database password (a password_file) in no log or output;
#   7. kill -9 of a sweep after each step (reserved, resumed, submitted, running, ended, acted), then recovery
#      (`peerlab slurm recover`, or the node's own health check): no failing node in service, no reservation left;
#   8. two sweeps at once: the second refuses; a bundle directory with quotes and $(...) in its name is a name;
#      slurmctld stopped (SIGSTOP) for 12 s while a sweep's job ends: no decision on the empty answers, the verdict
#      read once it answers again; the health check drains a node while the sweep's job runs there: the sweep's
#      PASS leaves that newer drain in place and records the node drained;
#   9. the history down before a sweep (refused, nothing reserved) and during one (the bundle spooled, the next
#      sweep ingests it);
#  10. `history node-state` keyed by NodeName (refuses a name that matches nothing); `history fleet` and the fleet page
#      name the nodes by NodeName with host, board and age.
# Exit 0 pass, 1 fail, 77 skipped (no root, no Slurm or munge, no PostgreSQL: the reason is printed).
#
#   slurm_e2e_test.sh SOURCE_DIR PEERLAB FAKE_NVML_LIBRARY PROBE_STANDIN_WORKER CUDA_RECORDER_LIBRARY
set -u
src="$1" peerlab="$2" fake_nvml="$3" standin="$4" cuda_recorder="$5"
skip_rc=77
slurm="$src/harness/slurm"
work="$(mktemp -d /tmp/peerlab-slurm-e2e.XXXXXX)"
chmod 755 "$work"
started=$SECONDS

cleanup() {
  [ -n "${sampler:-}" ] && kill "$sampler" 2>/dev/null
  "$slurm/testing/slurm_cluster.sh" stop "$work/slurm" >/dev/null 2>&1
  "$src/harness/history/testing/pg_cluster.sh" stop "$work/pg" >/dev/null 2>&1
  if [ -n "${PEERLAB_KEEP_SLURM_TEST:-}" ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

logs() {
  for f in "$work/peerlab-slurm.log" "$work/slurm/log/slurmctld.log" "$work/slurm/log"/slurmd.*.log; do
    [ -f "$f" ] && { echo "--- $f (last lines)"; tail -n 30 "$f"; }
  done
}
fail() {
  echo "FAIL: $*"
  logs
  exit 1
}
ok() { echo "ok: $* ($((SECONDS - started)) s)"; }

# The nodes reach PostgreSQL at the bridge's address (the host's, 10.a.b.1, once the cluster is up).
net="10.$((200 + RANDOM % 50)).$((RANDOM % 250))"
PG_CLUSTER_NET="$net" "$src/harness/history/testing/pg_cluster.sh" start "$work/pg" >/dev/null
if [ -f "$work/pg/skip" ]; then
  echo "SKIP: PostgreSQL: $(cat "$work/pg/skip")"
  exit $skip_rc
fi
db="$(sed "s|@127.0.0.1:|@$net.1:|" "$work/pg/url")"

# What runs on the nodes: peerlab through a shim that picks the node's stand-in NVML by its host name, puts the
# recording stand-in CUDA driver first, and keeps the environment of every job it runs.
mkdir -p "$work/home" "$work/bin" "$work/nvml" "$work/cuda" "$work/jobenv" "$work/sweeps" "$work/gate"
echo '{"gpus": 4}' >"$work/nvml/healthy.json"
echo '{"gpus": 4, "nvlink_down": [3]}' >"$work/nvml/node1.json"
ln -s "$cuda_recorder" "$work/cuda/libcuda.so.1"
cat >"$work/bin/peerlab-node" <<EOF
#!/bin/sh
scenario="$work/nvml/\$(hostname -s).json"
[ -f "\$scenario" ] || scenario="$work/nvml/healthy.json"
scenario="\${PEERLAB_E2E_NVML:-\$scenario}"
export PEERLAB_FAKE_NVML="\$scenario"
[ "\$1" = health ] && export LD_LIBRARY_PATH="$work/cuda" PEERLAB_CUDA_RECORD="$work/cuda.log"
[ "\$1 \$2" = "slurm job" ] && env >"$work/jobenv/\$(hostname -s).\$\$"
exec "$peerlab" "\$@"
EOF
cat >"$work/slurm.toml" <<EOF
[slurm]
conf = "$work/slurm/slurm.conf"
log = "$work/peerlab-slurm.log"
peerlab = "$work/bin/peerlab-node"
spool_dir = "$work/spool-node"
command_timeout_s = 20

[history]
db = "$db"
password_file = "$work/db.password"

[health]
budget_s = 40
watch_s = 1

[gate]
bundle_dir = "$work/gate"
budget_s = 120

[sweep]
bundle_dir = "$work/sweeps"
poll_s = 1
timeout_s = 120
wait_s = 120

[qualify]
# The benchmarks need a GPU.
options = ["--skip-bench"]

[environment]
HOME = "$work/home"
PEERLAB_NVML_LIBRARY = "$fake_nvml"
PEERLAB_QUALIFY_STANDIN_TOPOLOGY = "$src/fixtures/topologies/hwloc/power8gpudistances.xml"
PEERLAB_PROBE_WORKER = "$standin"
PEERLAB_STANDIN_GPUS = "4"
EOF
# The server trusts local connections: the password is there to be kept out of every line peerlab writes.
printf 'S3 cret\\x\n' >"$work/db.password" && chmod 600 "$work/db.password"
for w in healthcheck gate; do
  printf '#!/bin/sh\nexec %s slurm %s --settings %s "$@"\n' "$peerlab" "$w" "$work/slurm.toml" >"$work/bin/$w"
done
chmod 755 "$work/bin"/*
pl() { "$peerlab" "$@"; }

SLURM_CLUSTER_NET="$net" SLURM_CLUSTER_NODENAMES="8=rack2-gpu08" SLURM_CLUSTER_HEALTHCHECK="$work/bin/healthcheck" \
  SLURM_CLUSTER_PROLOG="$work/bin/gate" SLURM_CLUSTER_EPILOG="$work/bin/gate" \
  "$slurm/testing/slurm_cluster.sh" start "$work/slurm" 8 >/dev/null
if [ -f "$work/slurm/skip" ]; then
  echo "SKIP: Slurm: $(head -n 1 "$work/slurm/skip")"
  exit $skip_rc
fi
# shellcheck source=/dev/null
source "$work/slurm/env"
ok "8 nodes (node8 is rack2-gpu08) and PostgreSQL"

state() { sinfo -h -n "$1" -N -o '%T' | head -n 1; }
reason() { sinfo -h -n "$1" -N -o '%E' | head -n 1; }
wait_for() {
  local seconds="$1"
  shift
  for _ in $(seq $((seconds * 4))); do
    "$@" && return 0
    sleep 0.25
  done
  return 1
}
ready() { [ "$(state "$1")" = idle ] && ! scontrol show node "$1" | grep -q "State=[A-Z+_]*NOT_RESPONDING"; }
drained_by_peerlab() { [[ "$(state "$1")" == drain* ]] && [[ "$(reason "$1")" == "peerlab: $2"* ]]; }
peerlab_reservations() { scontrol show reservation -o 2>/dev/null | grep -c '^ReservationName=peerlab_'; }
journal_has() {  # journal_has NODE STEP: the history's journal holds such an entry
  psql -qAt "$db" -c "SELECT count(*) FROM slurm_journal WHERE node = '$1' AND step = '$2'" 2>/dev/null | grep -qv '^0$'
}

# 1. The health check, run by slurmd as it starts.
wait_for 120 drained_by_peerlab node1 "nvlink_state GPU0: " ||
  fail "node1 was not drained by the health check: $(state node1) \"$(reason node1)\""
[ "$(reason node1)" = "peerlab: nvlink_state GPU0: reset GPU, reseat NVLink" ] || fail "node1's reason: $(reason node1)"
checked() {
  local n
  for n in node2 node3 node4 node5 node6 node7 rack2-gpu08; do
    grep -q "healthcheck \[$n\] peerlab health: PASS" "$work/peerlab-slurm.log" 2>/dev/null || return 1
  done
}
wait_for 120 checked || fail "the health check did not pass everywhere: $(cat "$work/peerlab-slurm.log")"
for n in node2 node3 node4 node5 node6 node7 rack2-gpu08; do
  [ "$(state "$n")" = idle ] || fail "$n is $(state "$n") (\"$(reason "$n")\"), expected idle"
done
journal_has node1 drained || fail "the health check's drain of node1 is not in the history's journal"
grep -q " health --watch" "$work/cuda.log" 2>/dev/null ||
  fail "an idle node's health check did not load CUDA (the recorder sees nothing): $(head -n 3 "$work/cuda.log" 2>&1)"
ok "health check at slurmd start: node1 drained ($(reason node1)), journaled; 7 nodes idle"

# 2. Settings that do not read.
printf '[health]\nbudget_s = 30\nenabled = off\n' >"$work/bad.toml"
out="$(pl slurm settings --settings "$work/bad.toml" 2>&1)" && fail "a broken settings file was taken: $out"
[[ "$out" == *"bad.toml:3: not TOML"* ]] || fail "broken settings: $out"
printf '[health]\nbudget_s = "abc"\n' >"$work/bad2.toml"
out="$(pl slurm settings --settings "$work/bad2.toml" 2>&1)"
[[ "$out" == *"bad2.toml:2: [health] budget_s: expected a number of seconds"* ]] || fail "bad value: $out"
printf 'PEERLAB_HEALTH = off\n' >"$work/bad3.toml"
out="$(pl slurm settings --settings "$work/bad3.toml" 2>&1)"
[[ "$out" == *"bad3.toml:1: not TOML"* ]] || fail "bash-style setting: $out"
cp "$work/slurm.toml" "$work/open.toml" && chmod 666 "$work/open.toml"
out="$(pl slurm settings --settings "$work/open.toml" 2>&1)"
[[ "$out" == *"writable by a user other than root"* ]] || fail "a settings file others can write: $out"
rc=0
SLURMD_NODENAME=node7 SLURM_CONF="$SLURM_CONF" "$peerlab" slurm healthcheck --settings "$work/bad.toml" 2>/dev/null ||
  rc=$?
[ "$rc" -eq 1 ] || fail "the health check with broken settings exited $rc"
drained_by_peerlab node7 "setup error: $work/bad.toml:3: not TOML" ||
  fail "node7 after a broken settings file: $(state node7) \"$(reason node7)\""
scontrol update nodename=node7 state=resume
wait_for 30 ready node7 || fail "node7 did not come back"
ok "settings refused with file, line and key; a broken file drains as a setup error"

# 3. The gate. A comment that globs through /proc (H1): compared as words, the job runs at once without the gate.
t0=$SECONDS
plain="$(sbatch --parsable -w node2 -o "$work/plain.out" --comment '/proc/*/root/proc/*/root/proc/*/root/proc/*' \
  --wrap 'hostname -s')" || fail "sbatch failed"
wait_for 30 test -s "$work/plain.out" || fail "the job with a /proc glob comment did not run: $(squeue -h -j "$plain")"
[ $((SECONDS - t0)) -lt 20 ] || fail "the job with a /proc glob comment took $((SECONDS - t0)) s"
wait_for 30 ready node2 || fail "node2 after the job with a glob comment: $(state node2) $(reason node2)"
[ -z "$(ls "$work/gate")" ] || fail "the gate ran for a job that did not ask for it: $(ls "$work/gate")"
# A gated job lands on node1 (lowest weight) once it is resumed by hand; node2's prolog finds a planted link.
scontrol update nodename=node1 state=resume
wait_for 60 ready node1 || fail "node1 is $(state node1) after it was resumed"
last="$(squeue -h -t all -o '%i' | sort -n | tail -n 1)"
planted="$work/gate/gate-$((last + 1))-node2-prolog"
mkdir -p "$planted" && ln -s "$work/victim" "$planted/console.log" && echo keep >"$work/victim"
gated="$(sbatch --parsable --constraint=peerlab_gate -o "$work/gated.out" --wrap 'hostname -s')" || fail "sbatch failed"
[ "$gated" = "$((last + 1))" ] || echo "note: job id $gated, not the predicted $((last + 1))"
wait_for 240 test -s "$work/gated.out" || fail "the gated job did not complete: $(squeue -h -j "$gated" 2>&1)"
[ "$(cat "$work/gated.out")" = node2 ] || fail "the gated job ran on $(cat "$work/gated.out"), not node2"
drained_by_peerlab node1 "nvlink_state GPU0: " || fail "node1 after the gate: $(state node1) \"$(reason node1)\""
scontrol show job "$gated" | grep -q "Restarts=1" || fail "the gated job was not requeued once"
[ "$(cat "$work/victim")" = keep ] || fail "the gate wrote through a planted link: $(head -c 200 "$work/victim")"
[ -f "$work/gate/gate-$gated-node2-prolog-2/bundle/results.json" ] || [ "$gated" != "$((last + 1))" ] ||
  fail "node2's gate bundle is not in a fresh directory: $(ls "$work/gate")"
runs="$(psql -qAt "$db" -c "SELECT slurm_node || ':' || verdict FROM runs ORDER BY id" 2>&1)"
[[ "$runs" == *"node1:FAIL"* && "$runs" == *"node2:PASS"* ]] || fail "the gate bundles are not in the history: $runs"
ok "gate: a /proc glob comment runs ungated at once; a gated job refused by node1, requeued, ran on node2; bundles ingested"

# 4. The health check on a node that runs a job: NVML only, no CUDA.
busy="$(sbatch --parsable -w node3 -o /dev/null --wrap 'sleep 120')" || fail "sbatch failed"
wait_for 30 bash -c "squeue -h -j $busy -o %T | grep -q RUNNING" || fail "the job on node3 did not start"
: >"$work/cuda.log"
rc=0
SLURMD_NODENAME=node3 "$work/bin/healthcheck" 2>"$work/busy.err" || rc=$?
[ "$rc" -eq 0 ] || fail "the health check on a busy node3 exited $rc: $(cat "$work/busy.err")"
grep -q "healthcheck \[node3\] peerlab health: PASS (NVML only: jobs run here)" "$work/peerlab-slurm.log" ||
  fail "the busy node's health check did not read NVML only: $(tail -n 3 "$work/peerlab-slurm.log")"
[ ! -s "$work/cuda.log" ] || fail "the health check on a node running a job loaded CUDA: $(cat "$work/cuda.log")"
scancel "$busy"
# The same check on an idle node does load it (the recorder works).
SLURMD_NODENAME=node4 "$work/bin/healthcheck" 2>/dev/null || fail "the health check on node4 failed"
grep -q "^load " "$work/cuda.log" || fail "the stand-in CUDA recorded nothing on an idle node"
ok "health check under a running job: NVML only, no CUDA driver loaded (an idle node's check loads it)"

# 5. An admin's drain whose reason starts with "peerlab:".
scontrol update nodename=node5 state=drain reason="peerlab: do not touch - RMA pending"

# 6. The rolling sweep, --batch 2, sampled every 0.2 s; under an interposer and a fault that must not reach the jobs.
wait_for 30 ready node3 || fail "node3 is $(state node3) after its job was cancelled"
# Figures of five nodes, cloud VMs that all call themselves "vm": node7 sits far below its fleet.
for n in node2 node3 node4 node6 node7; do
  gbps=700
  [ "$n" = node7 ] && gbps=300
  python3 - "$n" "$gbps" >"$work/fig-$n.json" <<'EOF'
import json, sys
node, gbps = sys.argv[1], float(sys.argv[2])
b = 268435456
print(json.dumps({"schema_version": 1, "tool": "peerlab 0.1.0", "git_sha": "0" * 40,
  "timestamp": "2026-11-20T10:00:00Z", "kind": "h200-x2-nvswitch", "node": {"slurm_node": node},
  "fingerprint": {"hostname": "vm", "driver": "580.95", "cuda_runtime": "13.0", "nccl": "2.28.3",
                  "gpus": [{"ordinal": g, "uuid": "GPU-%s-%d" % (node, g), "bus_id": "", "name": "NVIDIA H200"}
                           for g in (0, 1)]},
  "results": [{"suite": "peer_copy", "impl": "peerlab.ce", "name": "uni", "src": 0, "dst": 1, "ranks": 1,
               "bytes": b, "time_us": b / gbps / 1e3, "algbw_gbps": gbps, "busbw_gbps": gbps, "wrong": 0,
               "status": "ok"}]}))
EOF
done
pl history ingest --db "$db" "$work"/fig-*.json >/dev/null || fail "cannot ingest the figures"
(
  while :; do
    peerlab_reservations
    sleep 0.2
  done
) >"$work/sampled" 2>/dev/null &
sampler=$!
rc=0
LD_PRELOAD="$work/none.so" PEERLAB_FAULT="copy_slow:percent=50" \
  "$peerlab" slurm sweep --settings "$work/slurm.toml" --partition gpu --batch 2 --drain-outliers >"$work/sweep.out" \
  2>&1 || rc=$?
kill "$sampler" 2>/dev/null
sampler=""
[ "$rc" -eq 1 ] || fail "the sweep exited $rc, expected 1 (node1 fails): $(tail -n 5 "$work/sweep.out")"
most="$(sort -n "$work/sampled" | tail -n 1)"
[ "${most:-0}" -le 2 ] || fail "$most nodes in maintenance at once (batch 2)"
[ "${most:-0}" -eq 2 ] || fail "never 2 nodes in maintenance at once (at most $most): the batch was not used"
drained_by_peerlab node1 "nvlink_state GPU0: " || fail "node1 after the sweep: $(state node1) \"$(reason node1)\""
if [[ "$(state node5)" != drain* ]] || [ "$(reason node5)" != "peerlab: do not touch - RMA pending" ]; then
  fail "node5 (an admin's drain) after the sweep: $(state node5) \"$(reason node5)\""
fi
drained_by_peerlab node7 "below its fleet on 1 series: check links/settings" ||
  fail "node7 (below its fleet) after the sweep: $(state node7) \"$(reason node7)\""
for n in node2 node3 node4 node6 rack2-gpu08; do
  wait_for 30 ready "$n" || fail "$n after the sweep: $(state "$n") \"$(reason "$n")\""
done
[ "$(peerlab_reservations)" -eq 0 ] || fail "reservations left: $(scontrol show reservation -o)"
grep -q "\[node5\] drained by someone else" "$work/sweep.out" || fail "the sweep does not say node5 was left alone"
grep -q "\[node1\] resumed inside its reservation" "$work/sweep.out" || fail "node1 was not resumed for its job"
ls "$work/jobenv"/* >/dev/null 2>&1 || fail "no job environment was kept"
! grep -lE '^(LD_PRELOAD|PEERLAB_FAULT)=' "$work/jobenv"/* || fail "LD_PRELOAD or PEERLAB_FAULT reached a job"
runs="$(psql -qAt "$db" -c "SELECT slurm_node || ' ' || host FROM runs WHERE source = 'results.json'" 2>&1)"
[[ "$runs" == *"rack2-gpu08 node8"* ]] || fail "rack2-gpu08's run does not carry its NodeName: $runs"
if grep -rlE 'S3 cret|S3%20cret|S3\\ cret' "$work"/*.out "$work/peerlab-slurm.log" "$work/slurm/log" 2>/dev/null; then
  fail "the database password is in a log or an output"
fi
ok "rolling sweep --batch 2: at most $most in maintenance, node1 drained, node5 left alone, node7 drained as an outlier," \
  "5 in service; $(tail -n 1 "$work/sweep.out" | grep -o '[0-9]* Slurm calls ([0-9.]*/s)')"

# 7. kill -9 after each step, then recovery. node1 is peerlab's drain and fails: it must never be in service.
for step in reserved resumed submitted running ended acted; do
  rc=0
  "$peerlab" slurm sweep --settings "$work/slurm.toml" --nodes node1 --crash-after "$step" >"$work/crash.out" 2>&1 ||
    rc=$?
  [ "$rc" -eq 137 ] || fail "--crash-after $step: exit $rc: $(tail -n 3 "$work/crash.out")"
  # Until recovered, no user job can land: drained, or in the dead sweep's reservation.
  [[ "$(state node1)" == drain* ]] || scontrol show reservation -o | grep -q "Nodes=node1 " ||
    fail "after a kill at $step node1 is $(state node1) and in no reservation"
  if [ "$step" = resumed ]; then
    # The node's own health check finishes what was left on it.
    SLURMD_NODENAME=node1 "$work/bin/healthcheck" 2>/dev/null
  else
    pl slurm recover --settings "$work/slurm.toml" >"$work/recover.out" 2>&1 ||
      fail "recover after $step: $(tail -n 3 "$work/recover.out")"
  fi
  drained_by_peerlab node1 "" || fail "after a kill at $step and recovery node1 is $(state node1) \"$(reason node1)\""
  [ "$(peerlab_reservations)" -eq 0 ] || fail "after a kill at $step a reservation is left: $(scontrol show res -o)"
  [ "$(psql -qAt "$db" -c "SELECT count(*) FROM slurm_claims")" = 0 ] || fail "after $step a claim is left"
  [ -z "$(squeue -h -w node1 -t running,pending)" ] || fail "after $step a job is left on node1"
done
ok "kill -9 at reserved, resumed, submitted, running, ended, acted: recovered each time, node1 drained, nothing left"

# 8. Two sweeps at once, the first with a bundle directory that a shell would run.
odd="$work/b'\$(touch $work/INJECTED)'x"
"$peerlab" slurm sweep --settings "$work/slurm.toml" --nodes 'node[2-3],node2' --bundle-dir "$odd" \
  >"$work/first.out" 2>&1 &
first=$!
wait_for 30 grep -q "reserved" "$work/first.out" || fail "the first sweep did not start: $(cat "$work/first.out")"
rc=0
"$peerlab" slurm sweep --settings "$work/slurm.toml" --nodes 'node[3-4]' >"$work/second.out" 2>&1 || rc=$?
if [ "$rc" -ne 4 ] || ! grep -q "refused: another sweep" "$work/second.out"; then
  fail "the second sweep was not refused (exit $rc): $(tail -n 3 "$work/second.out")"
fi
rc=0
wait "$first" || rc=$?
[ "$rc" -eq 0 ] || fail "the first sweep exited $rc: $(tail -n 3 "$work/first.out")"
grep -q "2 nodes: 2 passed" "$work/first.out" || fail "node2 listed twice was not qualified once: $(tail -n 1 "$work/first.out")"
[ ! -e "$work/INJECTED" ] || fail "the bundle directory's name was run by a shell"
ls "$odd"/sweep-*/node2/bundle/results.json >/dev/null || fail "no bundle under the odd bundle directory"
ok "two sweeps at once: the second refused; a bundle directory named with \$(...) is only a name"

# slurmctld stopped while a sweep's job ends: every Slurm call fails or hangs to its deadline; nothing is decided on it.
sed 's/^command_timeout_s = 20$/command_timeout_s = 3/' "$work/slurm.toml" >"$work/fast.toml"
"$peerlab" slurm sweep --settings "$work/fast.toml" --nodes node4 >"$work/stopped.out" 2>&1 &
stopped=$!
wait_for 60 grep -q "\[node4\] job [0-9]* submitted" "$work/stopped.out" || fail "no job: $(cat "$work/stopped.out")"
ctld="$(cat "$work/slurm/slurmctld.pid")"
kill -STOP "$ctld"
sleep 12
kill -CONT "$ctld"
rc=0
wait "$stopped" || rc=$?
[ "$rc" -eq 0 ] || fail "the sweep through a stopped slurmctld exited $rc: $(tail -n 5 "$work/stopped.out")"
grep -q "squeue failed" "$work/stopped.out" || fail "the sweep never met the stopped controller: $(cat "$work/stopped.out")"
grep -q "1 node: 1 passed" "$work/stopped.out" || fail "node4 was not judged PASS: $(tail -n 1 "$work/stopped.out")"
wait_for 30 ready node4 || fail "node4 after the stopped controller: $(state node4) $(reason node4)"
[ "$(peerlab_reservations)" -eq 0 ] || fail "a reservation is left after the stopped controller"
ok "slurmctld stopped for 12 s: the jobs' states unknown, asked again; node4 judged PASS once it answered"

# The health check drains node3 while the sweep's job runs there (a qualify that watches health for 15 s): the sweep's
# PASS neither resumes it nor records it in service.
sed 's/^options = \["--skip-bench"\]$/options = ["--skip-bench", "--health-watch", "15"]/' "$work/slurm.toml" >"$work/slow.toml"
grep -q health-watch "$work/slow.toml" || fail "no slow settings"
"$peerlab" slurm sweep --settings "$work/slow.toml" --nodes node3 >"$work/newer.out" 2>&1 &
newer=$!
wait_for 60 grep -q "\[node3\] job [0-9]* submitted" "$work/newer.out" || fail "no job: $(cat "$work/newer.out")"
wait_for 30 bash -c "squeue -h -w node3 -t running | grep -q ." || fail "the sweep's job on node3 did not start"
PEERLAB_E2E_NVML="$work/nvml/node1.json" SLURMD_NODENAME=node3 "$work/bin/healthcheck" 2>/dev/null
rc=0
wait "$newer" || rc=$?
[ "$rc" -eq 0 ] || fail "the sweep of node3 exited $rc: $(tail -n 3 "$work/newer.out")"
drained_by_peerlab node3 "nvlink_state GPU0: " || fail "node3 after the sweep: $(state node3) \"$(reason node3)\""
grep -q "healthcheck \[node3\] .*(NVML only: jobs run here)" "$work/peerlab-slurm.log" ||
  fail "the health check did not run under the sweep's job: $(grep 'healthcheck \[node3\]' "$work/peerlab-slurm.log")"
recorded="$(psql -qAt "$db" -c "SELECT state FROM node_states WHERE node = 'node3' AND source = 'peerlab-slurm-sweep'
  ORDER BY id DESC LIMIT 1")"
[ "$recorded" = drained ] || fail "the sweep recorded node3 $recorded, while Slurm has it drained"
scontrol update nodename=node3 state=resume
wait_for 30 ready node3 || fail "node3 did not come back"
ok "a drain by the health check during the sweep's job stays; node3 recorded drained"

# 9. The history down: before a sweep (refused, nothing reserved), and during one (spooled, then ingested).
rc=0
"$peerlab" slurm sweep --settings "$work/slurm.toml" --nodes node4 --db "postgresql://postgres@127.0.0.1:1/postgres" \
  >"$work/nodb.out" 2>&1 || rc=$?
if [ "$rc" -ne 4 ] || ! grep -q "nothing reserved" "$work/nodb.out"; then
  fail "a sweep without its history: exit $rc: $(cat "$work/nodb.out")"
fi
[ "$(peerlab_reservations)" -eq 0 ] || fail "a sweep without its history reserved a node"
before="$(psql -qAt "$db" -c "SELECT count(*) FROM runs")"
"$peerlab" slurm sweep --settings "$work/slurm.toml" --nodes 'node[6-7]' >"$work/down.out" 2>&1 &
during=$!
wait_for 60 grep -q "\[node6\] job [0-9]* submitted" "$work/down.out" || fail "the sweep did not submit: $(cat "$work/down.out")"
"$src/harness/history/testing/pg_cluster.sh" halt "$work/pg" || fail "cannot stop PostgreSQL"
rc=0
wait "$during" || rc=$?
"$src/harness/history/testing/pg_cluster.sh" resume "$work/pg" || fail "cannot start PostgreSQL again"
[ "$rc" -eq 4 ] || fail "a sweep that lost its history exited $rc: $(tail -n 3 "$work/down.out")"
grep -q "the history stopped answering: 1 bundles spooled" "$work/down.out" ||
  fail "the summary does not say the bundle was spooled: $(tail -n 1 "$work/down.out")"
[ "$(peerlab_reservations)" -eq 0 ] || fail "a sweep that lost its history left a reservation"
wait_for 30 ready node6 || fail "node6 after the sweep that lost its history: $(state node6)"
pl slurm sweep --settings "$work/slurm.toml" --nodes node7 >"$work/after.out" 2>&1 ||
  fail "the next sweep: $(tail -n 3 "$work/after.out")"
grep -q "ingested 1 spooled bundles" "$work/after.out" || fail "the spooled bundle was not ingested: $(cat "$work/after.out")"
after="$(psql -qAt "$db" -c "SELECT count(*) FROM runs")"
[ "$after" -eq $((before + 2)) ] || fail "runs before $before, after $after (expected the spooled one and node7's)"
ok "history down: refused up front; lost mid-sweep, the bundle spooled and ingested by the next sweep"

# 10. Node states keyed by NodeName; the fleet view.
out="$(pl history node-state --db "$db" --node vm --state drained 2>&1)" && fail "node-state took a name that matches nothing"
[[ "$out" == *"matches nothing"* || "$out" == *"no run names"* ]] || fail "node-state: $out"
pl history node-state --db "$db" --node rack2-gpu08 --state in_service >/dev/null || fail "node-state by NodeName"
pl history fleet --db "$db" --json "$work/fleet.json" >"$work/fleet.txt" 2>&1
grep -q "^no counted run in the history: [0-9]* nodes with a recorded state" "$work/fleet.txt" ||
  fail "history fleet does not list the nodes without a counted run: $(cat "$work/fleet.txt")"
python3 - "$work/fleet.json" <<'EOF' || fail "history fleet --json: $(cat "$work/fleet.json")"
import json, sys
f = json.load(open(sys.argv[1]))
counted = {n["name"]: n for n in f["nodes"] if n["kind"]}
alone = {n["name"]: n for n in f["nodes"] if not n["kind"]}
# Five cloud VMs that all call themselves "vm": five nodes, each by its NodeName.
assert sorted(counted) == ["node2", "node3", "node4", "node6", "node7"], sorted(counted)
assert all(n["host"] == "vm" and n["slurm_node"] == name for name, n in counted.items()), counted
# Nodes whose runs are all stand-in runs, and node5 that never ran: listed by their states.
assert alone["node1"]["state"] == "drained" and alone["node1"]["reason"].startswith("peerlab: nvlink_state GPU0"), alone
assert alone["node5"]["reason"] == "peerlab: do not touch - RMA pending", alone
assert alone["rack2-gpu08"]["state"] == "in_service", alone
# The stand-in runs apart, named by NodeName with their host.
named = [(r["name"], r["host"]) for r in f["injected"]]
assert ("rack2-gpu08", "node8") in named, named
EOF
pl history html --db "$db" --out "$work/site" >/dev/null 2>&1 || fail "history html"
page="$(grep -l '>node7<' "$work/site"/fleet-*.html | head -n 1)"
standin="$(grep -l 'Runs counted nowhere' "$work/site"/fleet-*.html | head -n 1)"
python3 - "$page" "$standin" "$work/site/index.html" <<'EOF' || fail "fleet pages $page $standin"
import re, sys
html = open(sys.argv[1]).read()
rows = re.findall(r"<tr><td class=\"l\">([^<]*)</td><td class=\"l( cell-warn)?\">([^<]*)</td>", html)
names = [r[0] for r in rows]
assert sorted(names) == ["node2", "node3", "node4", "node6", "node7"], names
assert html.count('<td class="l">vm</td>') == 5, "the host column"
standin = open(sys.argv[2]).read()
assert re.search(r"<td class=\"l\">rack2-gpu08</td>.*?<td class=\"l\">node8</td>", standin), "stand-in run by NodeName"
index = open(sys.argv[3]).read()
assert "Nodes without a counted run" in index and "do not touch - RMA pending" in index, "node5"
EOF
ok "node states keyed by NodeName; five VMs named vm are five nodes; stand-in runs apart by NodeName (rack2-gpu08 on node8)"
echo "PASS ($((SECONDS - started)) s)"
