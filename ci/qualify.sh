#!/usr/bin/env bash
# GPU host: installs what is missing (ci/packages.txt), builds everything qualify runs (the peerlab_qualify target,
# default preset), runs `peerlab qualify` and exits with its code (0 PASS, 1 a check failed, 2 bad input, 3 no GPU,
# 4 runtime or setup error).
#   ci/qualify.sh [peerlab qualify options...]      e.g. ci/qualify.sh --baseline reports/baselines/h200-x4-nvswitch.json.gz
# The bundle goes to --out when given, else $OUT/qualify when $OUT is set, else build/qualify/<kind>-<date>. Without
# --kind (or $PEERLAB_KIND) qualify derives the machine kind from the hardware (e.g. h200-x2-nvswitch). Without
# --history the time estimate uses the committed bundles of the kind (--history reports/qualify).
# A machine without network: bring the packages it lacks (ci/fetch_packages.sh on a machine with network) and point
# PEERLAB_DEB_DIR at them; they are unpacked (dpkg -x) when apt-get cannot install.
#   ci/qualify.sh --help   this text, and peerlab qualify's options (those of harness/cli/cmd_qualify.cc)
# The options are checked against peerlab qualify's before anything is installed or built: a misspelt one stops here
# (exit 2), not after the build. The `default` preset (build/default, every architecture CUDA supports: the bundle
# runs on whatever GPU is there) differs from ci/test.sh's `ci` preset (warnings as errors, two architectures, for
# CI's time). Then `ci/package.sh --install` installs what was built (the .deb: peerlab on PATH).
set -uo pipefail
usage() {
  sed -n '2,15p' "$0"
  echo "peerlab qualify's options: ${qualify_options[*]}"
}
# peerlab qualify's options, read from its source: add_flag takes no value, add_option one or more.
src_dir="$(cd "$(dirname "$0")/.." && pwd)"
mapfile -t qualify_options < <(sed -n 's/.*sub\.add_\(option\|flag\)("\(--[a-z-]*\)".*/\2/p' "$src_dir/harness/cli/cmd_qualify.cc")
mapfile -t qualify_flags < <(sed -n 's/.*sub\.add_flag("\(--[a-z-]*\)".*/\1/p' "$src_dir/harness/cli/cmd_qualify.cc")
# The level options every command shares (addLevelOptions in harness/cli/main.cc).
if grep -q 'addLevelOptions(' "$src_dir/harness/cli/cmd_qualify.cc"; then
  level_src="$(sed -n '/^void addLevelOptions(/,/^}/p' "$src_dir/harness/cli/main.cc")"
  mapfile -t -O "${#qualify_options[@]}" qualify_options < <(sed -n 's/.*sub\.add_\(option\|flag\)("\(--[a-z-]*\)".*/\2/p' <<<"$level_src")
  mapfile -t -O "${#qualify_flags[@]}" qualify_flags < <(sed -n 's/.*sub\.add_flag("\(--[a-z-]*\)".*/\1/p' <<<"$level_src")
fi
value_next=""
for arg in "$@"; do
  case "$arg" in
    -h | --help) usage; exit 0 ;;
    --*)
      name="${arg%%=*}"
      if [[ " ${qualify_options[*]} " != *" $name "* ]]; then
        echo "ci/qualify.sh: peerlab qualify has no option $name (ci/qualify.sh --help)" >&2
        exit 2
      fi
      value_next=1
      [[ " ${qualify_flags[*]} " == *" $name "* || "$arg" == *=* ]] && value_next=""
      ;;
    *)
      if [ -z "$value_next" ]; then
        echo "ci/qualify.sh: '$arg' is not an option of peerlab qualify nor the value of one (ci/qualify.sh --help)" >&2
        exit 2
      fi
      ;;
  esac
done
if [ -n "$value_next" ] && [ "${!#}" != "" ] && [[ "${!#}" == --* ]]; then
  echo "ci/qualify.sh: ${!#} needs a value" >&2
  exit 2
fi
# A relative PEERLAB_DEB_DIR is relative to where the script was started.
if [ -n "${PEERLAB_DEB_DIR:-}" ] && [ -d "$PEERLAB_DEB_DIR" ]; then PEERLAB_DEB_DIR="$(cd "$PEERLAB_DEB_DIR" && pwd)"; fi
cd "$src_dir" || exit 4
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

# The time estimate: the processes this kind ran in the project's committed bundles (reports/qualify), unless
# --history names other past runs. Kinds it has no bundle of get the model's estimate (the plan says which).
history_args=()
case " $* " in
  *" --history "*|*" --history="*) ;;
  *) [ -d reports/qualify ] && history_args=(--history reports/qualify) ;;
esac

log "peerlab qualify ${out_args[*]} ${history_args[*]} $*"
build/default/bin/peerlab qualify "${out_args[@]}" "${history_args[@]}" "$@"
rc=$?
log "peerlab qualify exit code $rc"
exit $rc
