#!/usr/bin/env bash
# shellcheck disable=SC2015  # assertions read "check && ok || fail" and "check && check || fail": both mean fail unless all hold
# The Slurm wrappers' decisions with a stand-in scontrol (it keeps each node's state and reason in files and logs every
# call): what the health check drains and with which reason, that it never touches a node someone else drained, what
# a timeout and a setup error do (drain, or only a log line with PEERLAB_ON_SETUP_ERROR=log), which jobs the gate
# checks and what its prolog and epilog exit with, that only nodes peerlab drained are resumed, and the sweep's
# argument checks. The health checks run the real peerlab over the stand-in NVML; the gate's qualify is a stand-in
# peerlab (exit code and time chosen per case). slurm_e2e_test.sh runs them against a real Slurm.
#
#   slurm_wrappers_test.sh SOURCE_DIR PEERLAB FAKE_NVML_LIBRARY
set -u
src="$1" peerlab="$2" fake_nvml="$3"
slurm="$src/harness/slurm"
work="$(mktemp -d /tmp/peerlab-slurm-wrappers.XXXXXX)"
trap 'rm -rf "$work"' EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
ok() { echo "ok: $*"; }

# The stand-in scontrol: "show node N" from $STUB/N.state and N.reason, "update nodename=N state=S reason=R" writes
# them; every call is appended to $STUB/calls.
mkdir -p "$work/bin" "$work/stub"
cat >"$work/bin/scontrol" <<'EOF'
#!/usr/bin/env bash
echo "scontrol $*" >>"$STUB/calls"
case "$1 ${2:-}" in
  "show node")
    n="$3"
    echo "NodeName=$n Arch=x86_64"
    echo "   State=$(cat "$STUB/$n.state" 2>/dev/null || echo IDLE) ThreadsPerCore=1"
    [ -s "$STUB/$n.reason" ] && echo "   Reason=$(cat "$STUB/$n.reason") [root@2026-01-01T00:00:00]"
    exit 0
    ;;
  "show hostnames") echo "$3" | tr ',' '\n' ;;
  "show job") echo "JobId=$4 JobName=peerlab-sweep JobState=COMPLETED Reason=None ExitCode=0:0" ;;
  create\ *) echo "$*" >"$STUB/reservation" ;;
  delete\ *) rm -f "$STUB/reservation" ;;
  update\ *)
    shift
    for a in "$@"; do
      case "$a" in
        nodename=*) n="${a#nodename=}" ;;
        state=drain) echo IDLE+DRAIN >"$STUB/$n.state" ;;
        state=resume) echo IDLE >"$STUB/$n.state"; : >"$STUB/$n.reason" ;;
        reason=*) echo "${a#reason=}" >"$STUB/$n.reason" ;;
      esac
    done
    ;;
esac
EOF
# A stand-in peerlab for the gate: qualify sleeps $STUB_SLEEP and exits $STUB_RC; report --drain-reason names a check.
cat >"$work/bin/peerlab-stub" <<'EOF'
#!/usr/bin/env bash
case "$1" in
  --version) echo "peerlab stub" ;;
  qualify)
    echo "qualify $*" >>"$STUB/qualify"
    sleep "${STUB_SLEEP:-0}"
    exit "${STUB_RC:-0}"
    ;;
  report) echo "probe ce_write: claimed cells verify: driver bug: peerlab repro"; exit 1 ;;
esac
EOF
# Stand-in Slurm commands for the sweep: sinfo lists $STUB/nodes, sbatch runs the job's command at once as the node
# (SLURMD_NODENAME) and prints a job id; a stand-in peerlab whose qualify exits with $STUB/rc.<node> (or sleeps for
# "sleep"), and whose history commands log what they were asked ("fleet" prints $STUB/fleet.json).
cat >"$work/bin/sinfo" <<'EOF'
#!/usr/bin/env bash
cat "$STUB/nodes"
EOF
cat >"$work/bin/sbatch" <<'EOF'
#!/usr/bin/env bash
echo "sbatch $*" >>"$STUB/calls"
while [ $# -gt 0 ]; do
  case "$1" in -w) node="$2"; shift 2 ;; --wrap) cmd="$2"; shift 2 ;; *) shift ;; esac
done
id=$(($(cat "$STUB/jobid" 2>/dev/null || echo 100) + 1))
echo "$id" >"$STUB/jobid"
SLURMD_NODENAME="$node" bash -c "$cmd" >/dev/null 2>&1
echo "$id"
EOF
printf '#!/bin/sh\nexit 0\n' >"$work/bin/squeue"
# shellcheck disable=SC2016  # the stub expands $* and $STUB when it runs
printf '#!/bin/sh\necho "scancel $*" >>"$STUB/calls"\n' >"$work/bin/scancel"
cat >"$work/bin/peerlab-sweep-stub" <<'EOF'
#!/usr/bin/env bash
case "$1" in
  --version) echo "peerlab stub" ;;
  qualify)
    while [ $# -gt 0 ]; do [ "$1" = --out ] && out="$2"; shift; done
    echo '{}' >"$out/results.json"
    rc="$(cat "$STUB/rc.$SLURMD_NODENAME" 2>/dev/null || echo 0)"
    [ "$rc" = sleep ] && sleep 60
    exit "$rc"
    ;;
  report) echo "nvlink_state GPU0: reset GPU, reseat NVLink"; exit 1 ;;
  history)
    echo "history $*" >>"$STUB/history"
    [ "$2" = fleet ] && cat "$STUB/fleet.json"
    [ "$2" = ingest ] && echo "$5: stored as run 1"
    exit 0
    ;;
esac
EOF
chmod 755 "$work/bin/scontrol" "$work/bin/peerlab-stub" "$work/bin/sinfo" "$work/bin/sbatch" "$work/bin/squeue" \
  "$work/bin/scancel" "$work/bin/peerlab-sweep-stub"
export PATH="$work/bin:$PATH" STUB="$work/stub"

# One configuration file per case; the wrappers read it through PEERLAB_SLURM_CONFIG.
config() {
  cat >"$work/conf" <<EOF
PEERLAB=${PEERLAB_UNDER_TEST:-$peerlab}
export PEERLAB_NVML_LIBRARY=$fake_nvml PEERLAB_FAKE_NVML=${SCENARIO:-healthy}
PEERLAB_HEALTH_WATCH_S=${WATCH:-0.2}
PEERLAB_GATE_BUDGET_S=${GATE_BUDGET:-30}
PEERLAB_HEALTH_BUDGET_S=${HEALTH_BUDGET:-30}
PEERLAB_BUNDLE_DIR=$work/gate
PEERLAB_SLURM_LOG=$work/log
${EXTRA:-}
EOF
  rm -f "$STUB"/*
  : >"$work/log"
}
run() {
  local rc=0
  PEERLAB_SLURM_CONFIG="${CONFIG_FILE:-$work/conf}" SLURMD_NODENAME=gpu01 "$@" >"$work/out" 2>&1 || rc=$?
  echo "$rc"
}
reason_of() { cat "$STUB/$1.reason" 2>/dev/null; }

# Health check: a failed check drains with the check, the GPU and the action.
SCENARIO=nvlink_down config
rc="$(run "$slurm/peerlab-healthcheck")"
[ "$rc" = 1 ] && [ "$(reason_of gpu01)" = "peerlab: nvlink_state GPU0: reset GPU, reseat NVLink" ] &&
  ok "health: NVLink down drains with its reason" || fail "health nvlink_down: rc $rc, reason \"$(reason_of gpu01)\": $(cat "$work/out")"
SCENARIO=xid WATCH=1 config
rc="$(run "$slurm/peerlab-healthcheck")"
[ "$(reason_of gpu01)" = "peerlab: xid GPU0: reboot node" ] && ok "health: XID 79 drains for a reboot" ||
  fail "health xid: rc $rc, reason \"$(reason_of gpu01)\": $(cat "$work/out")"
SCENARIO=healthy config
rc="$(run "$slurm/peerlab-healthcheck")"
[ "$rc" = 0 ] && ! grep -q update "$STUB/calls" 2>/dev/null && ok "health: a healthy node is left as it is" ||
  fail "health healthy: rc $rc, calls $(cat "$STUB/calls" 2>/dev/null)"
# A node drained by someone else keeps its reason.
SCENARIO=nvlink_down config
echo IDLE+DRAIN >"$STUB/gpu01.state"
echo "bad fan, ticket 42" >"$STUB/gpu01.reason"
rc="$(run "$slurm/peerlab-healthcheck")"
[ "$(reason_of gpu01)" = "bad fan, ticket 42" ] && ! grep -q update "$STUB/calls" && grep -q "drained by someone else" "$work/log" &&
  ok "health: a node drained by someone else keeps its reason" || fail "health over another drain: \"$(reason_of gpu01)\""
# A node peerlab drained before gets the new reason.
echo "peerlab: unknown (timeout after 40 s)" >"$STUB/gpu01.reason"
run "$slurm/peerlab-healthcheck" >/dev/null
[ "$(reason_of gpu01)" = "peerlab: nvlink_state GPU0: reset GPU, reseat NVLink" ] &&
  ok "health: peerlab's own older drain reason is replaced" || fail "health over its own drain: \"$(reason_of gpu01)\""

# Timeout: drained as unknown, never a pass.
PEERLAB_UNDER_TEST="$work/bin/peerlab-stub" EXTRA="export STUB_SLEEP=30" HEALTH_BUDGET=1 config
# The stand-in peerlab's "health" is unknown to it: make it sleep instead.
sed -i 's/^  qualify)$/  qualify | health)/' "$work/bin/peerlab-stub"
start=$(date +%s)
rc="$(run "$slurm/peerlab-healthcheck")"
took=$(($(date +%s) - start))
[ "$rc" = 1 ] && [ "$(reason_of gpu01)" = "peerlab: unknown (timeout after 1 s)" ] && [ "$took" -lt 15 ] &&
  ok "health: a check past its deadline drains as unknown ($took s)" || fail "health timeout: rc $rc, \"$(reason_of gpu01)\", $took s"

# Setup errors: drained and said, or only said with PEERLAB_ON_SETUP_ERROR=log.
PEERLAB_UNDER_TEST="$work/no-such-peerlab" config
rc="$(run "$slurm/peerlab-healthcheck")"
[[ "$(reason_of gpu01)" == "peerlab: setup error: peerlab exit 127"* ]] && grep -q "peerlab could not run" "$work/log" &&
  ok "health: peerlab missing drains as a setup error" || fail "health setup error: rc $rc \"$(reason_of gpu01)\""
PEERLAB_UNDER_TEST="$work/no-such-peerlab" EXTRA="PEERLAB_ON_SETUP_ERROR=log" config
rc="$(run "$slurm/peerlab-healthcheck")"
[ -z "$(reason_of gpu01)" ] && grep -q "NOT CHECKED" "$work/log" && ok "health: PEERLAB_ON_SETUP_ERROR=log only logs" ||
  fail "health setup error, log: rc $rc \"$(reason_of gpu01)\""
config
rc="$(CONFIG_FILE="$work/missing.conf" run "$slurm/peerlab-healthcheck")"
[[ "$(reason_of gpu01)" == "peerlab: setup error: PEERLAB_SLURM_CONFIG=$work/missing.conf: cannot read"* ]] &&
  ok "health: an unreadable config is a setup error" || fail "health missing config: \"$(reason_of gpu01)\""
EXTRA="PEERLAB_HEALTH=off" SCENARIO=nvlink_down config
rc="$(run "$slurm/peerlab-healthcheck")"
[ "$rc" = 0 ] && [ -z "$(reason_of gpu01)" ] && ok "health: PEERLAB_HEALTH=off does nothing" || fail "health off: rc $rc"

# The gate: opt-in only.
gate() {
  SLURM_SCRIPT_CONTEXT="$1" SLURM_JOB_ID=7 SLURM_JOB_CONSTRAINTS="${2:-}" SLURM_JOB_COMMENT="${3:-}" \
    run "$slurm/peerlab-gate"
}
PEERLAB_UNDER_TEST="$work/bin/peerlab-stub" EXTRA="export STUB_RC=1" config
rc="$(gate prolog_slurmd "" "")"
[ "$rc" = 0 ] && [ ! -e "$STUB/qualify" ] && ok "gate: a job that does not ask is not checked" || fail "gate not asked: rc $rc"
rc="$(gate prolog_slurmd "" "nightly peerlab-gate run")"
[ "$rc" = 1 ] && [ "$(reason_of gpu01)" = "peerlab: probe ce_write: claimed cells verify: driver bug: peerlab repro" ] &&
  ok "gate: --comment opts in; FAIL drains and fails the prolog" || fail "gate comment: rc $rc \"$(reason_of gpu01)\""
PEERLAB_UNDER_TEST="$work/bin/peerlab-stub" EXTRA="export STUB_RC=1" config
rc="$(gate epilog_slurmd "[rack1|rack2]&peerlab_gate*1" "")"
[ "$rc" = 0 ] && [[ "$(reason_of gpu01)" == "peerlab: probe"* ]] && ok "gate: a constraint opts in; a failed epilog drains, exits 0" ||
  fail "gate epilog: rc $rc \"$(reason_of gpu01)\""
grep -q -- "--out $work/gate/gate-7-gpu01-epilog" "$STUB/qualify" || fail "gate bundle directory: $(cat "$STUB/qualify")"
PEERLAB_UNDER_TEST="$work/bin/peerlab-stub" EXTRA="export STUB_RC=0" config
rc="$(gate prolog_slurmd "peerlab_gate" "")"
[ "$rc" = 0 ] && [ -z "$(reason_of gpu01)" ] && ok "gate: PASS lets the job run" || fail "gate pass: rc $rc"
PEERLAB_UNDER_TEST="$work/bin/peerlab-stub" EXTRA="export STUB_SLEEP=30" GATE_BUDGET=1 config
rc="$(gate prolog_slurmd "peerlab_gate" "")"
[ "$rc" = 1 ] && [ "$(reason_of gpu01)" = "peerlab: unknown (timeout after 1 s)" ] &&
  ok "gate: the budget passing drains as unknown and fails the prolog" || fail "gate timeout: rc $rc \"$(reason_of gpu01)\""
PEERLAB_UNDER_TEST="$work/bin/peerlab-stub" EXTRA="export STUB_RC=1; PEERLAB_GATE=off" config
rc="$(gate prolog_slurmd "peerlab_gate" "")"
[ "$rc" = 0 ] && [ ! -e "$STUB/qualify" ] && ok "gate: PEERLAB_GATE=off checks nothing" || fail "gate off: rc $rc"
PEERLAB_UNDER_TEST="$work/bin/peerlab-stub" EXTRA="export STUB_RC=0; PEERLAB_GATE=all; PEERLAB_QUALIFY_ARGS='--skip-bench --timeout 60'" config
rc="$(gate prolog_slurmd "" "")"
[ "$rc" = 0 ] && grep -q "qualify --level quick --skip-bench --timeout 60 --out" "$STUB/qualify" &&
  ok "gate: PEERLAB_GATE=all checks every job with PEERLAB_QUALIFY_ARGS" || fail "gate all: $(cat "$STUB/qualify" 2>/dev/null)"
PEERLAB_UNDER_TEST="$work/bin/peerlab-stub" EXTRA="export STUB_RC=0; PEERLAB_GATE_LEVEL=standard" config
rc="$(gate prolog_slurmd "peerlab_gate" "")"
grep -q "qualify --level standard --out $work/gate/gate-7-gpu01-prolog" "$STUB/qualify" &&
  ok "gate: PEERLAB_GATE_LEVEL is qualify's --level" || fail "gate level: $(cat "$STUB/qualify" 2>/dev/null)"

# The history location in the sweep's log never carries a password, in either connection-string form.
# shellcheck source=peerlab-slurm.sh
masked="$(
  source "$slurm/peerlab-slurm.sh"
  pl_mask_db "postgresql://pl:pa@ss@db.example/peerlab"
  pl_mask_db "host=db.example password='se cret' dbname=peerlab"
  pl_mask_db "POSTGRES://pl:s3cret@db.example:5432/peerlab?password=s3cret&sslmode=require"
)"
if [[ "$masked" != *pa@ss* && "$masked" != *ss@db* && "$masked" != *se\ cret* && "$masked" != *s3cret* ]] &&
  [ "$(grep -c '\*\*\*' <<<"$masked")" = 3 ]; then
  ok "sweep log: passwords masked in URLs (an unescaped @ included) and keyword/value strings"
else
  fail "sweep log masking: $masked"
fi

# Resume: only what peerlab drained.
config
# shellcheck source=peerlab-slurm.sh
(
  source "$slurm/peerlab-slurm.sh"
  PEERLAB_SLURM_CONFIG="$work/conf" pl_init test
  echo IDLE+DRAIN >"$STUB/a.state"
  echo "peerlab: xid GPU3: reboot node" >"$STUB/a.reason"
  echo IDLE+DRAIN >"$STUB/b.state"
  echo "peerlabs rack move" >"$STUB/b.reason"
  pl_resume_ours a
  pl_resume_ours b
  [ "$(cat "$STUB/a.state")" = IDLE ] && [ "$(cat "$STUB/b.state")" = IDLE+DRAIN ] && [ "$(cat "$STUB/b.reason")" = "peerlabs rack move" ]
) >/dev/null 2>&1 && ok "resume: only nodes whose reason starts with \"peerlab: \"" || fail "resume"

# The sweep's arguments: each mistake is one line and exit 2, before Slurm is asked anything.
config
for args in "--db x --bundle-dir d" "--nodes a --bundle-dir d" "--nodes a --db x" "--nodes a --partition p --db x --bundle-dir d" \
  "--nodes a --db x --bundle-dir d --level fast" "--nodes a --db x --bundle-dir d --timeout 5" "--bogus"; do
  # shellcheck disable=SC2086
  rc="$(run "$slurm/peerlab-sweep" $args)"
  [ "$rc" = 2 ] && grep -q "^peerlab-sweep: " "$work/out" || fail "sweep $args: rc $rc: $(head -n 2 "$work/out")"
done
[ -z "$(cat "$STUB/calls" 2>/dev/null)" ] && ok "sweep: bad arguments exit 2 before any scontrol call" ||
  fail "sweep called scontrol with bad arguments: $(cat "$STUB/calls")"

# The sweep's decisions, with the stand-in Slurm: nodes a-e of a partition.
sweep_setup() {
  PEERLAB_UNDER_TEST="$work/bin/peerlab-sweep-stub" config
  rm -rf "$work/bundles"
  printf 'a\nb\nc\nd\ne\n' >"$STUB/nodes"
  echo IDLE+DRAIN >"$STUB/a.state"
  echo "peerlab: xid GPU3: reboot node" >"$STUB/a.reason"
  echo 1 >"$STUB/rc.b"
  echo IDLE+DRAIN >"$STUB/c.state"
  echo "rack move" >"$STUB/c.reason"
  echo IDLE+DOWN+NOT_RESPONDING >"$STUB/e.state"
  echo '{"outliers": [], "nodes": [{"node": "d", "outliers": 3}, {"node": "b", "outliers": 1}, {"node": 7}]}' \
    >"$STUB/fleet.json"
}
sweep() { run "$slurm/peerlab-sweep" --partition gpu --db "$work/h.sqlite" --bundle-dir "$work/bundles" --timeout 10 \
  --wait 5 "$@"; }
sweep_setup
rc="$(sweep --drain-outliers)"
[ "$rc" = 1 ] || fail "sweep: exit $rc: $(tail -n 3 "$work/out")"
[ "$(cat "$STUB/a.state")" = IDLE ] && [ -z "$(reason_of a)" ] && ok "sweep: a node peerlab drained that passes is resumed" ||
  fail "sweep a: $(cat "$STUB/a.state") \"$(reason_of a)\""
[ "$(reason_of b)" = "peerlab: nvlink_state GPU0: reset GPU, reseat NVLink" ] && ok "sweep: a failing node is drained with its check" ||
  fail "sweep b: \"$(reason_of b)\""
[ "$(cat "$STUB/c.state")" = IDLE+DRAIN ] && [ "$(reason_of c)" = "rack move" ] && ! grep -q "nodename=c\|-w c " "$STUB/calls" &&
  ok "sweep: a node drained by someone else is not qualified, resumed or drained" || fail "sweep c: $(grep -- c "$STUB/calls")"
! grep -q "nodename=e\|-w e " "$STUB/calls" && ok "sweep: a down node is left alone" || fail "sweep e"
[ "$(reason_of d)" = "peerlab: below its fleet on 3 series: check links/settings" ] &&
  ok "sweep --drain-outliers: a passing node below its fleet is drained" || fail "sweep d: \"$(reason_of d)\""
[ ! -e "$STUB/reservation" ] && grep -q "create reservationname=peerlab_sweep_.* nodes=a,b,d " "$STUB/calls" &&
  ok "sweep: one reservation over a, b and d, deleted at the end" || fail "sweep reservation: $(grep reservation "$STUB/calls")"
for n in a b c d e; do
  grep -q "history node-state .* --node $n --state" "$STUB/history" || fail "sweep: no state recorded for $n"
done
[ "$(grep -c "history ingest" "$STUB/history")" = 3 ] || fail "sweep ingests: $(grep ingest "$STUB/history")"
grep -q "sweep done: 5 nodes: 2 passed, 1 failed (drained), 0 unknown (drained), 0 setup errors, 0 busy (not qualified), 1 drained by others and 1 down" \
  "$work/log" && ok "sweep: states recorded, three bundles ingested, the summary logged" || fail "sweep summary: $(tail -n 2 "$work/log")"
sweep_setup
sed -i 's/^PEERLAB_SLURM_LOG=.*/&\nPEERLAB_SWEEP_DRAIN_OUTLIERS=yes/' "$work/conf"
rc="$(sweep)"
[ "$(reason_of d)" = "peerlab: below its fleet on 3 series: check links/settings" ] &&
  ok "sweep: PEERLAB_SWEEP_DRAIN_OUTLIERS=yes in the settings drains it too" || fail "sweep d, setting: \"$(reason_of d)\""
sweep_setup
rc="$(sweep)"
[ "$(cat "$STUB/d.state" 2>/dev/null || echo IDLE)" = IDLE ] && grep -q "d: below its fleet on 3 series (passes its own thresholds)" "$work/log" &&
  ok "sweep: without --drain-outliers a node below its fleet is reported, not drained" || fail "sweep d reported: $(reason_of d)"
# A node whose qualify runs past --timeout is drained as unknown; peerlab failing on a node puts it back as it was.
sweep_setup
echo sleep >"$STUB/rc.d"
echo 4 >"$STUB/rc.a"
start=$(date +%s)
rc="$(sweep)"
[ "$(reason_of d)" = "peerlab: unknown (timeout after 10 s)" ] && ok "sweep: qualify past --timeout drains as unknown ($(($(date +%s) - start)) s)" ||
  fail "sweep timeout: \"$(reason_of d)\""
[ "$rc" = 4 ] && [ "$(cat "$STUB/a.state")" = IDLE+DRAIN ] && [ "$(reason_of a)" = "peerlab: xid GPU3: reboot node" ] &&
  ok "sweep: a setup error on a node puts it back as it was, exit 4" || fail "sweep setup: rc $rc, a $(cat "$STUB/a.state") \"$(reason_of a)\""

[ "$failures" -eq 0 ] && echo "PASS" && exit 0
echo "$failures failed"
exit 1
