#!/usr/bin/env bash
# GPU host: installs what is missing (ci/packages.txt), builds everything qualify runs (the peerlab_qualify target,
# default preset), runs `peerlab qualify` and exits with its code (0 PASS, 1 a check failed, 2 bad input, 3 no GPU,
# 4 runtime or setup error).
#   ci/qualify.sh [peerlab qualify options...]      e.g. ci/qualify.sh --baseline reports/baselines/h200-x4-nvswitch.json.gz
# The bundle goes to --out when given, else $OUT/qualify when $OUT is set, else build/qualify/<kind>-<date>. Without
# --kind (or $PEERLAB_KIND) qualify derives the machine kind from the hardware (e.g. h200-x2-nvswitch).
# A machine without network: bring the packages it lacks (ci/fetch_packages.sh on a machine with network) and point
# PEERLAB_DEB_DIR at them; they are unpacked (dpkg -x) when apt-get cannot install.
set -uo pipefail
# A relative PEERLAB_DEB_DIR is relative to where the script was started.
if [ -n "${PEERLAB_DEB_DIR:-}" ] && [ -d "$PEERLAB_DEB_DIR" ]; then PEERLAB_DEB_DIR="$(cd "$PEERLAB_DEB_DIR" && pwd)"; fi
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
log() { echo "[qualify.sh $(date +%T)] $*"; }

source ci/packages.sh
if ! packages_setup ci/qualify.sh build; then
  log "cannot build without the packages above"
  exit 4
fi
# nvcc: from CUDACXX, PATH, or the toolkit's usual place.
if [ -z "${CUDACXX:-}" ] && ! have_cmd nvcc; then
  for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do
    [ -x "$d/nvcc" ] && export CUDACXX="$d/nvcc" && break
  done
fi
if [ -z "${CUDACXX:-}" ] && ! have_cmd nvcc; then
  log "nvcc not found (set CUDACXX or put the CUDA toolkit's bin/ on PATH)"
  exit 4
fi

generator=()
have_cmd ninja && generator=(-G Ninja)
build_log="${OUT:-build}/qualify-build.log"
mkdir -p "$(dirname "$build_log")"
log "configure + build the peerlab_qualify target (log: $build_log)"
if ! cmake --preset default "${generator[@]}" >"$build_log" 2>&1; then
  tail -40 "$build_log"
  log "configure failed"
  exit 4
fi
# Everything qualify can run is one target: a part that does not build stops here, before any measurement.
if ! cmake --build --preset default -j "$(nproc)" --target peerlab_qualify >>"$build_log" 2>&1; then
  tail -40 "$build_log"
  log "building peerlab_qualify failed"
  exit 4
fi
grep -E "Chart.js|peerlab: CUDA" "$build_log" | sed 's/^-- /  /'

out_args=()
case " $* " in
  *" --out "*|*" --out="*) ;;
  *)
    if [ -n "${OUT:-}" ]; then
      out_args=(--out "$OUT/qualify")
    else
      # The kind qualify will file the run under (--kind, $PEERLAB_KIND, or derived from the hardware).
      kind="$(build/default/bin/peerlab qualify --dry-run --json "$@" 2>/dev/null |
        python3 -c 'import json, sys; print(json.load(sys.stdin).get("kind") or "")' 2>/dev/null)"
      out_args=(--out "build/qualify/${kind:-qualify}-$(date +%Y%m%d-%H%M%S)")
    fi
    ;;
esac

log "peerlab qualify ${out_args[*]} $*"
build/default/bin/peerlab qualify "${out_args[@]}" "$@"
rc=$?
log "peerlab qualify exit code $rc"
exit $rc
