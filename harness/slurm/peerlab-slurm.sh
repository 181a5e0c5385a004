# shellcheck shell=bash
# What peerlab's Slurm wrappers share (sourced by peerlab-healthcheck, peerlab-gate and peerlab-sweep): the
# configuration, logging, the one way a node is drained or resumed, and the one way qualify and health are run with a
# deadline and their outcome turned into a drain reason. docs/slurm.md describes the settings.
#
# Configuration: $PEERLAB_SLURM_CONFIG, else /etc/peerlab/slurm.conf, sourced as bash when it exists (Slurm runs
# HealthCheckProgram and Prolog with an almost empty environment, so settings live in that file). Every setting has a
# default:
#   PEERLAB                  the peerlab binary (default: bin/peerlab of the tree this directory is installed in, else
#                            peerlab on PATH)
#   PEERLAB_HEALTH           on | off: off makes the health check do nothing (CPU-only nodes)
#   PEERLAB_HEALTH_BUDGET_S  deadline of `peerlab health` in the health check (40; Slurm kills it at 60)
#   PEERLAB_HEALTH_WATCH_S   how long it watches for XIDs and clock events (2)
#   PEERLAB_GATE             opt-in | all | off: which jobs the prolog/epilog gate checks (opt-in: jobs that ask)
#   PEERLAB_GATE_FEATURE     the constraint (node feature) a job asks for the gate with (peerlab_gate)
#   PEERLAB_GATE_COMMENT     a word in the job's --comment that asks for it too (peerlab-gate)
#   PEERLAB_GATE_LEVEL       the gate's qualify level (quick)
#   PEERLAB_GATE_BUDGET_S    the gate's deadline (120; keep PrologEpilogTimeout above it)
#   PEERLAB_QUALIFY_ARGS     more qualify options, split on spaces (none)
#   PEERLAB_BUNDLE_DIR       where the gate keeps its bundles (/var/lib/peerlab/slurm)
#   PEERLAB_ON_SETUP_ERROR   drain | log: what a wrapper does when peerlab itself cannot run (drain)
#   PEERLAB_SWEEP_DRAIN_OUTLIERS  yes | no: the sweep drains a node that passes but sits below its fleet (no)
#   PEERLAB_SLURM_LOG        a file every wrapper appends its log lines to (none; lines also go to syslog)
# Any other variable set there (SLURM_CONF, PEERLAB_NVML_LIBRARY, ...) reaches peerlab when exported.

PEERLAB_REASON_PREFIX="peerlab: "
pl_share_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# Loads the configuration and sets the defaults; $1 names the wrapper in log lines.
pl_init() {
  PL_WHO="$1"
  export PATH="${PATH:-/usr/bin:/bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
  local conf="${PEERLAB_SLURM_CONFIG:-/etc/peerlab/slurm.conf}"
  if [ -n "${PEERLAB_SLURM_CONFIG:-}" ] && [ ! -r "$conf" ]; then
    PL_CONFIG_ERROR="PEERLAB_SLURM_CONFIG=$conf: cannot read"
  elif [ -r "$conf" ]; then
    # PL_CONFIG_ERROR is read by the scripts that source this library.
    # shellcheck source=/dev/null disable=SC2034
    if ! source "$conf"; then PL_CONFIG_ERROR="$conf: sourcing it failed"; fi
  fi
  if [ -z "${PEERLAB:-}" ]; then
    # share/peerlab/slurm/ of an installed tree: its peerlab is ../../../bin/peerlab.
    if [ -x "$pl_share_dir/../../../bin/peerlab" ]; then
      PEERLAB="$(cd "$pl_share_dir/../../../bin" && pwd)/peerlab"
    else
      PEERLAB="$(command -v peerlab || echo peerlab)"
    fi
  fi
  : "${PEERLAB_HEALTH:=on}" "${PEERLAB_HEALTH_BUDGET_S:=40}" "${PEERLAB_HEALTH_WATCH_S:=2}"
  : "${PEERLAB_GATE:=opt-in}" "${PEERLAB_GATE_FEATURE:=peerlab_gate}" "${PEERLAB_GATE_COMMENT:=peerlab-gate}"
  : "${PEERLAB_GATE_LEVEL:=quick}" "${PEERLAB_GATE_BUDGET_S:=120}" "${PEERLAB_ON_SETUP_ERROR:=drain}"
  : "${PEERLAB_BUNDLE_DIR:=/var/lib/peerlab/slurm}" "${PEERLAB_QUALIFY_ARGS:=}" "${PEERLAB_SLURM_LOG:=}"
  : "${PEERLAB_SWEEP_DRAIN_OUTLIERS:=no}"
  return 0
}

# The node this runs on: the name slurmd gave it, else the short host name.
pl_node() {
  echo "${SLURMD_NODENAME:-$(hostname -s)}"
}

# A history location with its password masked, for logs: a URL's password (up to the last '@', so an unescaped '@'
# in it does not leak the rest) and libpq's keyword/value form (password=..., quoted or not).
pl_mask_db() {
  printf '%s\n' "$1" | sed -e 's#://\([^:/@]*\):.*@#://\1:***@#' \
    -e "s#\([Pp][Aa][Ss][Ss][Ww][Oo][Rr][Dd][[:space:]]*=[[:space:]]*\)\('[^']*'\|[^[:space:]&]*\)#\1***#g"
}

# One log line: time, wrapper, node, message; on stderr, in $PEERLAB_SLURM_LOG and in syslog (tag peerlab-slurm).
pl_log() {
  local line
  line="$(date -u +%Y-%m-%dT%H:%M:%SZ) peerlab-${PL_WHO:-slurm} [$(pl_node)] $*"
  echo "$line" >&2
  [ -n "${PEERLAB_SLURM_LOG:-}" ] && echo "$line" >>"$PEERLAB_SLURM_LOG" 2>/dev/null
  command -v logger >/dev/null 2>&1 && logger -t peerlab-slurm -- "${PL_WHO:-slurm} [$(pl_node)] $*" 2>/dev/null
  return 0
}

# State and reason of a node as scontrol shows them: sets PL_STATE ("IDLE+DRAIN", ...) and PL_REASON ("" when none,
# without the "[user@time]" Slurm appends). Returns 1 when scontrol cannot say.
pl_node_status() {
  local node="$1" out
  out="$(scontrol show node "$node" 2>&1)" || {
    pl_log "scontrol show node $node failed: $(echo "$out" | head -n 1)"
    return 1
  }
  PL_STATE="$(echo "$out" | sed -n 's/^ *State=\([^ ]*\).*/\1/p' | head -n 1)"
  PL_REASON="$(echo "$out" | sed -n 's/^ *Reason=\(.*\)$/\1/p' | head -n 1 | sed 's/ \[[^]]*\]$//')"
  [ -n "$PL_STATE" ]
}

pl_is_drained() { [[ "+$1+" == *+DRAIN+* ]]; }
pl_is_down() { [[ "+$1+" == *+DOWN+* || "+$1+" == *+NOT_RESPONDING+* || "+$1+" == *+FAIL+* ]]; }
pl_reason_is_ours() { [[ "$1" == "$PEERLAB_REASON_PREFIX"* ]]; }

# Drains a node with "peerlab: <text>", unless someone else drained it: a node drained with a reason that is not
# peerlab's keeps its state and reason (returns 2, logged). The reason is one line of at most 200 bytes.
pl_drain() {
  local node="$1" text reason
  text="$(printf '%s' "$2" | tr -d '\000-\037"' | cut -c1-180)"
  reason="${PEERLAB_REASON_PREFIX}${text}"
  if pl_node_status "$node" && pl_is_drained "$PL_STATE" && ! pl_reason_is_ours "$PL_REASON"; then
    pl_log "not draining $node: drained by someone else (\"$PL_REASON\"); would have said \"$reason\""
    return 2
  fi
  if scontrol update nodename="$node" state=drain reason="$reason"; then
    pl_log "drained $node: $reason"
    return 0
  fi
  pl_log "scontrol could not drain $node (reason \"$reason\")"
  return 1
}

# Resumes a node only when peerlab drained it (its reason starts with "peerlab:"); returns 2 otherwise.
pl_resume_ours() {
  local node="$1"
  pl_node_status "$node" || return 1
  if ! pl_is_drained "$PL_STATE"; then return 0; fi
  if ! pl_reason_is_ours "$PL_REASON"; then
    pl_log "not resuming $node: drained by someone else (\"$PL_REASON\")"
    return 2
  fi
  if scontrol update nodename="$node" state=resume; then
    pl_log "resumed $node (was \"$PL_REASON\")"
    return 0
  fi
  pl_log "scontrol could not resume $node"
  return 1
}

# Runs a command with a deadline: SIGTERM at $1 seconds, SIGKILL 5 s later; 124 when the deadline passed.
pl_deadline() {
  local seconds="$1"
  shift
  timeout --kill-after=5 "$seconds" "$@"
}

# qualify at a level within a budget: pl_qualify LEVEL BUDGET_S OUT_DIR; returns qualify's exit code (124: timeout).
pl_qualify() {
  local budget="$2" out="$3" args=(--level "$1")
  # shellcheck disable=SC2206
  [ -n "$PEERLAB_QUALIFY_ARGS" ] && args+=($PEERLAB_QUALIFY_ARGS)
  mkdir -p "$out" || return 126
  pl_log "qualify ${args[*]} --out $out (budget ${budget} s)"
  pl_deadline "$budget" "$PEERLAB" qualify "${args[@]}" --out "$out" >"$out/console.log" 2>&1
}

# Turns a peerlab exit code into what a wrapper does. pl_outcome RC RUN_FILE BUDGET_S sets
#   PL_OUTCOME  pass | fail | unknown | setup
#   PL_WHY      the drain reason's text (without the "peerlab: " prefix) for fail and unknown; what went wrong for setup
# Exit codes: README "Exit codes" (0 pass, 1 a check failed, 3 no GPU, 2 and 4 setup), 124/137 the deadline, 126/127
# the binary could not be run.
pl_outcome() {
  local rc="$1" run="$2" budget="$3"
  PL_WHY=""
  case "$rc" in
    0) PL_OUTCOME=pass ;;
    1)
      PL_OUTCOME=fail
      PL_WHY="$("$PEERLAB" report "$run" --drain-reason 2>/dev/null | head -n 1)"
      [ -n "$PL_WHY" ] || PL_WHY="a check failed (the run file does not say which: $run)"
      ;;
    3)
      PL_OUTCOME=fail
      PL_WHY="no GPU visible: reboot node"
      ;;
    124 | 137)
      PL_OUTCOME=unknown
      PL_WHY="unknown (timeout after ${budget} s)"
      ;;
    *)
      PL_OUTCOME=setup
      PL_WHY="setup error: peerlab exit $rc"
      ;;
  esac
}

# What a wrapper does after pl_outcome on this node: drains on fail and unknown; on a setup error drains (reason
# "peerlab: setup error ...") or only logs, as PEERLAB_ON_SETUP_ERROR says. Returns 0 when the node passed, else 1.
pl_act() {
  local node="$1" detail="${2:-}"
  case "$PL_OUTCOME" in
    pass) return 0 ;;
    fail | unknown)
      pl_drain "$node" "$PL_WHY"
      return 1
      ;;
    setup)
      pl_log "peerlab could not run (${PL_WHY}${detail:+: $detail})"
      if [ "$PEERLAB_ON_SETUP_ERROR" = drain ]; then
        pl_drain "$node" "$PL_WHY (see the peerlab-slurm log)"
      else
        pl_log "PEERLAB_ON_SETUP_ERROR=log: $node left as it is, NOT CHECKED"
      fi
      return 1
      ;;
  esac
}
