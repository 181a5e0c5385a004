#!/usr/bin/env bash
# `peerlab slurm` against real GPUs: a one-node Slurm started on this GPU machine (as root), its health check, a
# gated job, the health check under a running job, a gated job holding one GPU, and a sweep of the node, with every
# bundle and log under $OUT.
#
#   ci/slurm_gpu.sh --fetch DIR [--distro ID:SUITE]
#                                   on a machine with network: Slurm's and munge's packages, and the build's packages
#                                   a CUDA image lacks ("bring" in ci/packages.txt), with everything they depend on,
#                                   as .deb files in DIR (carry DIR to the GPU machine). --distro takes them from that
#                                   distribution's archive through a private apt configuration, from any Debian-family
#                                   machine (default: this machine's own sources). For the CUDA image (Ubuntu 24.04):
#                                     ci/slurm_gpu.sh --fetch /work/slurm-debs-noble --distro ubuntu:noble
#                                   PEERLAB_APT_MIRROR and PEERLAB_APT_KEYRING replace the archive and its keyring.
#   ci/slurm_gpu.sh [--debs DIR] --slurm-only
#                                   Slurm alone, before any build: unpacks DIR's packages where Slurm or munge is
#                                   missing, starts the one-node Slurm of step 1 without peerlab, runs a plain job
#                                   (hostname) and stops it: a check of the packages in seconds
#   ci/slurm_gpu.sh [--debs DIR]    on the GPU machine: unpacks DIR's packages where Slurm or munge is missing (files
#                                   only, through ci/packages.sh; update-alternatives' links for the -wlm daemons),
#                                   builds what qualify runs (default preset) and the stand-in NVML, then:
#     1. starts munged, slurmctld and slurmd here (harness/slurm/testing/slurm_cluster.sh, SLURM_CLUSTER_LOCAL=1, the
#        GPUs as gres), with `peerlab slurm healthcheck` as HealthCheckProgram and `peerlab slurm gate` as Prolog and
#        Epilog (settings: $OUT/etc/slurm.toml); slurmd runs the health check as it starts: the node must stay idle;
#     2. one health check with a fault on the real NVML (the stand-in NVML wrapping it, wrap:pcie_downtrain): the node
#        must be drained "peerlab: pcie_link GPU0: reseat GPU/riser (PCIe)"; it is resumed by hand after;
#     3. a gated job (--constraint=peerlab_gate): the prolog qualifies the node (--level quick), the job runs
#        nvidia-smi -L, the gate bundle reaches the history;
#     4. the health check while a job runs on the node: NVML only (the log says so), and no peerlab process shows
#        among the GPUs' compute processes (nvidia-smi, sampled while it runs);
#     5. a gated job holding one GPU (--gres=gpu:1, on a machine of two or more): the prolog qualifies that GPU alone;
#     6. `peerlab slurm sweep` of the node at --level standard into a SQLite history, then `peerlab history fleet` and
#        the history site.
#   Output: $OUT (default build/slurm-gpu): summary.txt (one line per step, PASS or FAIL), gate/ and sweeps/ (the
#   bundles), history.sqlite, site/, fleet.txt, peerlab-slurm.log, sweep.out, slurm/log/. Exit 0 when every step did
#   what it should, 1 otherwise, 4 when Slurm could not start or peerlab could not be built.
set -uo pipefail
if [ -n "${OUT:-}" ]; then mkdir -p "$OUT" && OUT="$(cd "$OUT" && pwd)"; fi
log() { echo "[slurm_gpu.sh $(date +%T)] $*"; }
usage() { sed -n '2,20p' "$0" >&2; exit 2; }
debs="" fetch="" distro="" slurm_only=""
while [ $# -gt 0 ]; do
  [ "$1" = --slurm-only ] && { slurm_only=1; shift; continue; }
  [ $# -ge 2 ] || usage
  case "$1" in
    --debs) debs="$(cd "$2" && pwd)" || exit 2 ;;
    --fetch) mkdir -p "$2" && fetch="$(cd "$2" && pwd)" || exit 2 ;;
    --distro) distro="$2" ;;
    *) usage ;;
  esac
  shift 2
done
[ -n "$distro" ] && [ -z "$fetch" ] && usage
[ -n "$slurm_only" ] && [ -n "$fetch" ] && usage
cd "$(dirname "$0")/.." || exit 4
src="$PWD"

if [ -n "$fetch" ]; then
  dir="$fetch"
  # shellcheck source=ci/packages.sh
  source ci/packages.sh
  if [ -n "$distro" ]; then
    # A private apt for that distribution's archive: this machine's sources, keys, lists and status stay untouched.
    work="$(mktemp -d)" && chmod 755 "$work"
    trap 'rm -rf "$work"' EXIT
    if [ "${distro%%:*}" = ubuntu ] && [ -z "${PEERLAB_APT_KEYRING:-}" ] &&
      [ ! -f /usr/share/keyrings/ubuntu-archive-keyring.gpg ]; then
      packages_setup ci/slurm_gpu.sh fetch || true
    fi
    APT_CONFIG="$(packages_apt_config "$distro" "$work/apt")" || { log "no apt configuration for $distro"; exit 1; }
    export APT_CONFIG PEERLAB_DISTRO="${distro%%:*}"
  fi
  apt-get update -qq || { log "apt-get update failed"; exit 1; }
  # Slurm, munge and the packages a build needs that a CUDA image lacks (the "bring" column of ci/packages.txt), with
  # every package they depend on; what the machine has is skipped when unpacking.
  pkgs=(slurmctld slurmd slurm-client munge)
  mapfile -t -O ${#pkgs[@]} pkgs < <(packages_bring)
  packages_download "$dir" "${pkgs[@]}" || exit 1
  for p in slurmctld slurmd slurm-client munge; do
    compgen -G "$dir/${p}_*.deb" >/dev/null || { log "$p was not downloaded"; exit 1; }
  done
  fetched=("$dir"/*.deb)
  log "${#fetched[@]} packages of ${distro:-this distribution} ($(du -sh "$dir" | cut -f1)) in $dir"
  log "on the GPU machine: ci/slurm_gpu.sh --debs $dir --slurm-only (Slurm alone, seconds), then ci/slurm_gpu.sh --debs $dir"
  exit 0
fi

OUT="${OUT:-$src/build/slurm-gpu}"
mkdir -p "$OUT"
summary="$OUT/summary.txt"
: >"$summary"
rc=0
step() {  # step PASS|FAIL text...
  echo "$*" | tee -a "$summary"
  [ "$1" = PASS ] || rc=1
}
[ "$(id -u)" -eq 0 ] || { log "run as root: slurmctld, slurmd and the drains need it"; exit 4; }

# Packages: Slurm and munge from --debs where apt-get cannot install them; the build's own packages as qualify.sh.
# shellcheck source=ci/packages.sh
source ci/packages.sh
[ -n "$debs" ] && export PEERLAB_DEB_DIR="$debs"
if [ -z "$slurm_only" ]; then
  packages_setup ci/slurm_gpu.sh "build" || { log "cannot build without the packages above"; exit 4; }
fi
if ! have_cmd slurmctld || ! have_cmd munged; then
  packages_setup ci/slurm_gpu.sh "test" >"$OUT/packages.log" 2>&1
  grep -h "unpacked into" "$OUT/packages.log"
fi
# Unpacked packages ran no maintainer script. Slurm needs what its postinst does with update-alternatives (Debian
# and Ubuntu ship slurmctld-wlm, slurmd-wlm and slurmstepd-wlm; slurmd starts /usr/sbin/slurmstepd); the accounts it
# creates (slurm, munge) are not needed: the daemons run as root with their files under $OUT.
slurm_alternative() {  # slurm_alternative NAME [SLAVE]
  local d=/usr/sbin
  [ -e "$d/$1" ] || [ ! -x "$d/$1-wlm" ] && return 0
  if have_cmd update-alternatives; then
    update-alternatives --quiet --install "$d/$1" "$1" "$d/$1-wlm" 50 \
      ${2:+--slave "$d/$2" "$2" "$d/$2-wlm"} || return 1
  else
    ln -s "$1-wlm" "$d/$1" && { [ -z "${2:-}" ] || ln -sf "$2-wlm" "$d/$2"; } || return 1
  fi
  log "$d/$1${2:+ and $d/$2}: linked to the -wlm programs (as Slurm's postinst does)"
}
slurm_alternative slurmctld || log "cannot link /usr/sbin/slurmctld"
slurm_alternative slurmd slurmstepd || log "cannot link /usr/sbin/slurmd"
for tool in munged slurmctld slurmd slurmstepd sbatch scontrol; do
  have_cmd "$tool" || { log "$tool not found: bring Slurm with ci/slurm_gpu.sh --fetch DIR, then --debs DIR"; exit 4; }
done
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() { harness/slurm/testing/slurm_cluster.sh stop "$OUT/slurm" >/dev/null 2>&1; }
trap cleanup EXIT

if [ -n "$slurm_only" ]; then
  # Slurm alone, before any build: one node here, a plain job on it.
  SLURM_CLUSTER_LOCAL=1 harness/slurm/testing/slurm_cluster.sh start "$OUT/slurm" | tee "$OUT/slurm-start.txt"
  [ -f "$OUT/slurm/skip" ] && { log "Slurm did not start: $(cat "$OUT/slurm/skip")"; exit 4; }
  # shellcheck source=/dev/null  # written by slurm_cluster.sh start
  source "$OUT/slurm/env"
  node="$(hostname -s)"
  sinfo | tee "$OUT/sinfo.txt"
  job="$(sbatch --parsable -o "$OUT/job.out" --wrap 'hostname -s')"
  for _ in $(seq 60); do
    squeue -h -j "$job" 2>/dev/null | grep -q . || break
    sleep 1
  done
  if grep -qx "$node" "$OUT/job.out" 2>/dev/null; then
    step PASS "Slurm $(slurmd -V | cut -d' ' -f2) on $node: job $job ran: $(cat "$OUT/job.out")"
  else
    why="$(scontrol show job "$job" | grep -o 'JobState=[^ ]*\|Reason=[^ ]*' | tr '\n' ' ')"
    step FAIL "Slurm on $node: job $job: $(head -n 3 "$OUT/job.out" 2>/dev/null) $why"
  fi
  exit $rc
fi
if [ -z "${CUDACXX:-}" ] && ! have_cmd nvcc; then
  for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do [ -x "$d/nvcc" ] && export CUDACXX="$d/nvcc" && break; done
fi
generator=()
have_cmd ninja && generator=(-G Ninja)
log "build peerlab_qualify and the stand-in NVML (log $OUT/build.log)"
if ! { cmake --preset default "${generator[@]}" &&
  cmake --build --preset default -j "$(nproc)" --target peerlab_qualify peerlab_fake_nvml; } >"$OUT/build.log" 2>&1; then
  tail -30 "$OUT/build.log"
  log "build failed"
  exit 4
fi
peerlab="$src/build/default/bin/peerlab"
fake_nvml="$(ls "$src"/build/default/lib/libpeerlab_fake_nvml.so)"
node="$(hostname -s)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# The settings of `peerlab slurm`, and a copy that injects a fault into the real NVML's answers.
# The settings live in a directory only root can write ($OUT may be open to all): root runs what they say.
mkdir -p "$OUT/bin" "$OUT/gate" "$OUT/sweeps" "$OUT/etc"
chmod 755 "$OUT/etc" "$OUT/gate" "$OUT/sweeps"
gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')"
settings() {  # settings FILE [FAULT]
  cat >"$1" <<EOF
[slurm]
conf = "$OUT/slurm/slurm.conf"
log = "$OUT/peerlab-slurm.log"
spool_dir = "$OUT/spool"

[history]
db = "$OUT/history.sqlite"

[health]
watch_s = 2

[gate]
bundle_dir = "$OUT/gate"
budget_s = 840

[sweep]
bundle_dir = "$OUT/sweeps"
poll_s = 2

[environment]
NCCL_NVLS_ENABLE = "0"
OMPI_ALLOW_RUN_AS_ROOT = "1"
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM = "1"
EOF
  if [ -n "${2:-}" ]; then
    printf 'PEERLAB_NVML_LIBRARY = "%s"\nPEERLAB_FAKE_NVML = "%s"\n' "$fake_nvml" "$2" >>"$1"
  fi
  chmod 644 "$1"
}
settings "$OUT/etc/slurm.toml"
settings "$OUT/etc/slurm-fault.toml" "wrap:pcie_downtrain"
"$peerlab" slurm settings --settings "$OUT/etc/slurm.toml" >"$OUT/settings.txt" || { log "the settings do not read"; exit 4; }
for w in healthcheck gate; do
  printf '#!/bin/sh\nexec %s slurm %s --settings %s "$@"\n' "$peerlab" "$w" "$OUT/etc/slurm.toml" >"$OUT/bin/$w"
  chmod 755 "$OUT/bin/$w"
done
# The history exists before the node-side commands look for it.
"$peerlab" history list --db "$OUT/history.sqlite" --create >/dev/null

# 1. Slurm here, its GPUs as gres; slurmd runs the health check as it starts.
SLURM_CLUSTER_LOCAL=1 SLURM_CLUSTER_GPUS="$gpus" SLURM_CLUSTER_HEALTHCHECK="$OUT/bin/healthcheck" \
  SLURM_CLUSTER_PROLOG="$OUT/bin/gate" SLURM_CLUSTER_EPILOG="$OUT/bin/gate" SLURM_CLUSTER_PROLOG_TIMEOUT=900 \
  harness/slurm/testing/slurm_cluster.sh start "$OUT/slurm" | tee "$OUT/slurm-start.txt"
[ -f "$OUT/slurm/skip" ] && { log "Slurm did not start: $(cat "$OUT/slurm/skip")"; exit 4; }
# shellcheck source=/dev/null  # written by slurm_cluster.sh start
source "$OUT/slurm/env"
state() { sinfo -h -n "$node" -N -o '%T' | head -n 1; }
reason() { sinfo -h -n "$node" -N -o '%E' | head -n 1; }
wait_idle() {
  for _ in $(seq 60); do
    [ "$(state)" = idle ] && return 0
    sleep 1
  done
  return 1
}
wait_job() {
  for _ in $(seq 1000); do
    squeue -h -j "$1" 2>/dev/null | grep -q . || return 0
    sleep 1
  done
}
sleep 5
if [ "$(state)" = idle ]; then
  step PASS "health check at slurmd start: $node idle: $(grep "healthcheck \[$node\]" "$OUT/peerlab-slurm.log" | tail -n 1)"
else
  step FAIL "health check at slurmd start: $node is $(state): $(reason)"
  scontrol update nodename="$node" state=resume
fi

# 2. A fault injected into the real NVML's answers: the health check drains.
SLURMD_NODENAME="$node" "$peerlab" slurm healthcheck --settings "$OUT/etc/slurm-fault.toml"
if [[ "$(state)" == drain* ]] && [[ "$(reason)" == "peerlab: pcie_link GPU0: "* ]]; then
  step PASS "health check under wrap:pcie_downtrain drained $node: $(reason)"
else
  step FAIL "health check under wrap:pcie_downtrain: $node is $(state): $(reason)"
fi
scontrol update nodename="$node" state=resume
wait_idle

# 3. A gated job.
start=$(date +%s)
job="$(sbatch --parsable --constraint=peerlab_gate -o "$OUT/gated-job.out" --wrap 'hostname -s; nvidia-smi -L')"
wait_job "$job"
gate_bundle="$OUT/gate/gate-$job-$node-prolog"
stored="$("$peerlab" history list --db "$OUT/history.sqlite" --json 2>/dev/null | grep -c '"source": "results.json"')"
if [ -f "$gate_bundle/bundle/results.json" ] && grep -q "^$node$" "$OUT/gated-job.out" 2>/dev/null &&
  [ "$stored" -ge 1 ]; then
  step PASS "gated job $job ran after the prolog's qualify ($(($(date +%s) - start)) s, bundle in the history):" \
    "$(tail -n 1 "$gate_bundle/console.log")"
else
  step FAIL "gated job $job: $(head -n 3 "$OUT/gated-job.out" 2>/dev/null) node $(state) $(reason);" \
    "bundle $gate_bundle; $stored runs stored"
fi
wait_idle

# 4. The health check while a job runs here: NVML only, no CUDA context of peerlab's on the GPUs.
busy="$(sbatch --parsable -o /dev/null --wrap 'sleep 300')"
for _ in $(seq 60); do
  [ "$(squeue -h -j "$busy" -o %T)" = RUNNING ] && break
  sleep 1
done
: >"$OUT/compute-apps.txt"
(
  for _ in $(seq 200); do
    nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader >>"$OUT/compute-apps.txt" 2>/dev/null
    sleep 0.1
  done
) &
sampler=$!
hc=0
SLURMD_NODENAME="$node" "$OUT/bin/healthcheck" || hc=$?
kill "$sampler" 2>/dev/null
wait "$sampler" 2>/dev/null
scancel "$busy"
line="$(grep "healthcheck \[$node\]" "$OUT/peerlab-slurm.log" | tail -n 1)"
if [ "$hc" -eq 0 ] && [[ "$line" == *"NVML only: jobs run here"* ]] && ! grep -q peerlab "$OUT/compute-apps.txt"; then
  step PASS "health check under a running job: $line; no peerlab compute process in" \
    "$(wc -l <"$OUT/compute-apps.txt") samples"
else
  step FAIL "health check under a running job: exit $hc: $line; compute processes:" \
    "$(grep peerlab "$OUT/compute-apps.txt" | head -n 3)"
fi
wait_idle

# 5. A gated job holding one of the GPUs: the prolog qualifies that GPU alone.
if [ "${gpus:-0}" -ge 2 ]; then
  job="$(sbatch --parsable --gres=gpu:1 --constraint=peerlab_gate -o "$OUT/gpu1-job.out" --wrap 'nvidia-smi -L')"
  wait_job "$job"
  b="$OUT/gate/gate-$job-$node-prolog/bundle/results.json"
  n="$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["fingerprint"]["gpus"]))' "$b" 2>/dev/null)"
  if [ "$n" = 1 ]; then
    step PASS "gated job $job with --gres=gpu:1: the prolog qualified 1 of $gpus GPUs:" \
      "$(grep "job $job holds GPUs" "$OUT/peerlab-slurm.log" | tail -n 1 | sed 's/.*holds/holds/')"
  else
    step FAIL "gated job $job with --gres=gpu:1: its bundle lists ${n:-no} GPUs ($b)"
  fi
  wait_idle
fi

# 6. The sweep of this node, into the SQLite history.
# The epilog of the last job may still be qualifying: wait for it; resume only a node left drained.
wait_idle || [[ "$(state)" != drain* ]] || scontrol update nodename="$node" state=resume
src_rc=0
"$peerlab" slurm sweep --settings "$OUT/etc/slurm.toml" --nodes "$node" --level standard --timeout 1800 --wait 120 \
  >"$OUT/sweep.out" 2>&1 || src_rc=$?
bundle="$(find "$OUT/sweeps" -path "*/$node/bundle" -type d | tail -n 1)"
if [ "$src_rc" -eq 0 ] && [ -f "$bundle/results.json" ] && [ "$(state)" = idle ]; then
  step PASS "sweep: $(tail -n 1 "$bundle/../console.log"); $(tail -n 1 "$OUT/sweep.out" | grep -o '[0-9]* Slurm calls ([0-9.]*/s)')"
else
  step FAIL "sweep exit $src_rc: $(tail -n 2 "$OUT/sweep.out" | head -n 1); $node $(state) $(reason)"
fi
"$peerlab" history fleet --db "$OUT/history.sqlite" >"$OUT/fleet.txt" 2>&1
"$peerlab" history html --db "$OUT/history.sqlite" --out "$OUT/site" >/dev/null 2>&1 ||
  step FAIL "history html"
grep -q "^  $node " "$OUT/fleet.txt" || step FAIL "history fleet does not name $node by its NodeName: $(cat "$OUT/fleet.txt")"
log "done: $(grep -c ^PASS "$summary") PASS, $(grep -c ^FAIL "$summary") FAIL; everything under $OUT"
exit $rc
