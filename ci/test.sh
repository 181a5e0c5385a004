#!/usr/bin/env bash
# The test command CI runs (.ci/run): checks for the tools and libraries the build and the tests use (ci/packages.txt),
# installs only what is really missing (apt-get, when it can), configures with the `ci` preset, builds everything (CUDA sources
# included; nvcc needs no GPU), runs the host-only tests (ctest -L cpu) and lists the GPU tests, which skip visibly
# without a GPU. Where something optional cannot be installed (no network, no root), it goes on: the tests that need
# it (Chromium page checks, the PostgreSQL store, the reference change-point cross-check) report themselves skipped.
#
#   ci/test.sh            exit 0 when every CPU test passed (skips allowed), 1 otherwise, 2 for an argument
#   ci/test.sh --help     this text
# It uses the `ci` preset (build/ci: warnings as errors, machine code for sm_75 and sm_90 only, to fit CI's time);
# ci/qualify.sh and ci/package.sh build what runs on GPUs with the `default` preset (build/default: every
# architecture CUDA supports). .ci/run adds ci/shellcheck.sh and ci/ubuntu.sh (Ubuntu 24.04, the package installed).
set -euo pipefail
case "${1:-}" in
  "") ;;
  -h | --help) sed -n '2,12p' "$0"; exit 0 ;;
  *) echo "ci/test.sh: takes no arguments (got '$1'; ci/test.sh --help)" >&2; exit 2 ;;
esac
# A relative PEERLAB_DEB_DIR is relative to where the script was started.
if [ -n "${PEERLAB_DEB_DIR:-}" ] && [ -d "$PEERLAB_DEB_DIR" ]; then PEERLAB_DEB_DIR="$(cd "$PEERLAB_DEB_DIR" && pwd)"; fi
cd "$(dirname "$0")/.."

# The packages of ci/packages.txt (scopes build and test): the same list ci/qualify.sh and ci/gpu.sh install from.
source ci/packages.sh
have_py() { python3 -c "import $1" >/dev/null 2>&1; }
packages_setup ci/test.sh "build test" || exit 1

# The reference E-Divisive implementation the change-point test cross-checks against (PyPI); optional.
if ! have_py signal_processing_algorithms && python3 -m pip --version >/dev/null 2>&1; then
  python3 -m pip install -q --break-system-packages signal-processing-algorithms >/dev/null 2>&1 ||
    python3 -m pip install -q signal-processing-algorithms >/dev/null 2>&1 ||
    echo "ci/test.sh: signal-processing-algorithms not installed; its cross-check will skip" >&2
fi

# NIXL and UCX with CUDA (PyPI nixl-cu13, libucx-cu13), trimmed into .deps/transport by ci/transport_deps.sh: the
# two-process NIXL test runs on them (Debian's UCX, without CUDA, serves the UCX tests). Optional: without them the
# NIXL test skips and says why.
if [ ! -d .deps/transport/nixl ] && python3 -m pip --version >/dev/null 2>&1; then
  ci/transport_deps.sh >/dev/null 2>&1 || echo "ci/test.sh: NIXL could not be fetched; its two-process test will skip" >&2
fi
[ -d .deps/transport/nixl ] && export PEERLAB_NIXL_DIR="$PWD/.deps/transport/nixl"

# nvcc: from CUDACXX, PATH, or the toolkit's usual place.
if [ -z "${CUDACXX:-}" ] && ! have_cmd nvcc; then
  for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do
    [ -x "$d/nvcc" ] && export CUDACXX="$d/nvcc" && break
  done
fi
if [ -z "${CUDACXX:-}" ] && ! have_cmd nvcc; then
  echo "ci/test.sh: nvcc not found (set CUDACXX or put the CUDA toolkit's bin/ on PATH)" >&2
  exit 1
fi

generator=()
have_cmd ninja && generator=(-G Ninja)
launcher=()
have_cmd ccache && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
cmake --preset ci "${generator[@]}" "${launcher[@]}"
cmake --build --preset ci -j "$(nproc)"
# OpenMPI refuses to run as root unless told; the MPI bootstrap test starts a real mpirun.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rc=0
ctest --test-dir build/ci -L cpu --output-on-failure -j "$(nproc)" --output-junit cpu-junit.xml || rc=1
# Without a GPU every GPU case must report itself skipped, never passed or failed.
gpu_junit=()
if ! have_cmd nvidia-smi || ! nvidia-smi -L >/dev/null 2>&1; then
  ctest --test-dir build/ci -L gpu -j "$(nproc)" --timeout 120 --output-junit gpu-junit.xml >build/ci/gpu-tests.log 2>&1 || true
  gpu_junit=(--expect-skipped build/ci/gpu-junit.xml)
fi
# The fuzz targets of what reads untrusted run files after the parsers (renderers, site, history ingest), a bounded
# time each from the committed corpus (ci/fuzz.sh: clang with libFuzzer); a crash fails, a missing toolchain skips.
if have_cmd clang && have_cmd clang++; then
  frc=0
  ci/fuzz.sh --seconds "${PEERLAB_CI_FUZZ_SECONDS:-20}" render site history >build/ci/fuzz.log 2>&1 || frc=$?
  case $frc in
    0) echo "ci/test.sh: $(tail -1 build/ci/fuzz.log) ($(grep -o 'Done [0-9]* runs' build/ci/fuzz.log | awk '{print $2}' | paste -sd/ -) executions)" ;;
    1) echo "ci/test.sh: fuzz: a target crashed (build/ci/fuzz.log; the input is saved under fixtures/fuzz/)" >&2; rc=1 ;;
    *) echo "ci/test.sh: fuzz targets skipped: ci/fuzz.sh exit $frc (build/ci/fuzz.log)" >&2 ;;
  esac
else
  echo "ci/test.sh: fuzz targets skipped: no clang (apt-get install clang libclang-rt-14-dev)" >&2
fi
python3 ci/ctest_summary.py build/ci/cpu-junit.xml "${gpu_junit[@]}" || rc=1
exit $rc
