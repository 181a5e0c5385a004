#!/usr/bin/env bash
# Reliability scorecard (GPU host; 4 GPUs for every class, 1 GPU for the machine-health classes): runs the probe,
# zero-copy and alltoallv under every fault of `peerlab inject`, and `peerlab qualify` under every NVML fault of the
# stand-in NVML, and writes reports/reliability/<date>.json (harness/faults/scorecard.py says what is checked).
#   ci/scorecard.sh [--build DIR] [--out FILE] [--only REGEX] [--list]
# The ucx_no_cuda class (the transport methods under a UCX without CUDA: Debian's, or CUDA's module kept from loading)
# reads its libraries from --transport-deps DIR (default $PEERLAB_TRANSPORT_DEPS, else .deps/transport: ci/transport_deps.sh);
# without them its runs are skipped with the reason. `--only 'none|ucx_no_cuda'` runs that class and its clean runs.
# Builds what it needs (peerlab, the interposer, fault_drill, the stand-in NVML) in DIR (default build/default,
# configured by ci/gpu.sh or `cmake --preset default`). Exit code: 0 every fault named correctly, in time, with nothing left behind; 1 not;
# 2 usage or build failure; 3 no GPU.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 4
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

build="${PEERLAB_BUILD_DIR:-build/default}"
pass=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) pass+=("$1"); shift ;;
  esac
done

if [ ! -f "$build/CMakeCache.txt" ]; then
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  cmake --preset default "${generator[@]}" >/dev/null || { echo "ci/scorecard.sh: configure failed" >&2; exit 2; }
fi
if ! cmake --build "$build" --target peerlab peerlab_faults_preload fault_drill peerlab_fake_nvml -j "$(nproc)" >"$build/scorecard-build.log" 2>&1; then
  grep -E "error" "$build/scorecard-build.log" | head -20
  echo "ci/scorecard.sh: build failed ($build/scorecard-build.log)" >&2
  exit 2
fi
exec python3 harness/faults/scorecard.py --build "$build" "${pass[@]}"
