#!/usr/bin/env bash
# GPU host: installs what is missing, builds peerlab and its benchmarks (default preset), runs `peerlab qualify` and
# exits with its code (0 PASS, 1 a check failed, 2 bad input, 3 no GPU, 4 runtime error).
#   ci/qualify.sh [peerlab qualify options...]      e.g. ci/qualify.sh --baseline reports/baselines/h200x4.json
# The bundle goes to --out when given, else $OUT/qualify when $OUT is set, else build/qualify/<host>-<date>.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
log() { echo "[qualify.sh $(date +%T)] $*"; }

# Install only what is missing; a machine without network (or with its own CMake) goes on, and configure says what
# is really absent.
missing=()
for tool in cmake:cmake ninja:ninja-build pkg-config:pkg-config git:git g++:build-essential; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || missing+=("${tool#*:}")
done
for p in libhwloc-dev nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev libtomlplusplus-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  if ! { $sudo_cmd apt-get update -qq &&
         DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"; }; then
    log "apt-get failed; trying to build with what is installed"
  fi
fi
if [ ! -x /usr/local/cuda/bin/nvcc ]; then
  log "the CUDA toolkit is expected in /usr/local/cuda"
  exit 4
fi

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
build_log="${OUT:-build}/qualify-build.log"
mkdir -p "$(dirname "$build_log")"
log "configure + build (log: $build_log)"
if ! cmake --preset default "${generator[@]}" >"$build_log" 2>&1; then
  tail -40 "$build_log"
  log "configure failed"
  exit 4
fi
if ! cmake --build --preset default -j "$(nproc)" --target peerlab >>"$build_log" 2>&1; then
  tail -40 "$build_log"
  log "building peerlab failed"
  exit 4
fi
# Benchmarks one by one: one that does not build is reported by qualify as a failed suite, not a dead script.
for t in peer_copy_bench zcopy_bench alltoallv_bench; do
  cmake --build --preset default -j "$(nproc)" --target "$t" >>"$build_log" 2>&1 || log "building $t failed (see $build_log)"
done

out_args=()
case " $* " in
  *" --out "*|*" --out="*) ;;
  *)
    if [ -n "${OUT:-}" ]; then
      out_args=(--out "$OUT/qualify")
    else
      out_args=(--out "build/qualify/$(hostname)-$(date +%Y%m%d-%H%M%S)")
    fi
    ;;
esac

log "peerlab qualify ${out_args[*]} $*"
build/default/bin/peerlab qualify --bench-dir build/default/bin "${out_args[@]}" "$@"
rc=$?
log "peerlab qualify exit code $rc"
exit $rc
