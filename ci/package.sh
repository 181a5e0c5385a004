#!/usr/bin/env bash
# The packages of peerlab's installed tree: builds what qualify runs and what is installed with it (the
# peerlab_qualify target, `default` preset, as ci/qualify.sh does: a build it made is reused), then cpack makes
# build/default/peerlab_<version>_amd64.deb (installs under /usr; Depends: the distribution's libraries its programs
# link; the `peerlab` binary needs only the NVIDIA driver beyond them) and peerlab-<version>-Linux.tar.gz (the same
# tree, to unpack anywhere). Build it on the distribution it is for: the Depends are that distribution's.
#
#   ci/package.sh [--install] [--arch LIST]
#       --install    then apt-get install the .deb: from the configured archives, or, with PEERLAB_DEB_DIR (packages
#                    brought by ci/fetch_packages.sh), with that folder as the only source (no network needed)
#       --arch LIST  CMAKE_CUDA_ARCHITECTURES (default: the preset's, every architecture CUDA supports)
#   exit 0 when the packages were made (and installed), 2 for bad arguments, 4 when the build, cpack or the install
#   failed
set -uo pipefail
usage() { sed -n '2,13p' "$0"; exit "${1:-2}"; }
install="" arch=""
while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help) usage 0 ;;
    --install) install=1; shift ;;
    --arch) [ $# -ge 2 ] || usage; arch="$2"; shift 2 ;;
    *) echo "ci/package.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
# A relative PEERLAB_DEB_DIR is relative to where the script was started.
if [ -n "${PEERLAB_DEB_DIR:-}" ] && [ -d "$PEERLAB_DEB_DIR" ]; then PEERLAB_DEB_DIR="$(cd "$PEERLAB_DEB_DIR" && pwd)"; fi
cd "$(dirname "$0")/.." || exit 4
log() { echo "[package.sh $(date +%T)] $*"; }
source ci/packages.sh
packages_setup ci/package.sh "build package" || { log "cannot build without the packages above"; exit 4; }
if [ -z "${CUDACXX:-}" ] && ! have_cmd nvcc; then
  for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do [ -x "$d/nvcc" ] && export CUDACXX="$d/nvcc" && break; done
fi
generator=()
have_cmd ninja && generator=(-G Ninja)
arch_args=()
[ -n "$arch" ] && arch_args=(-DCMAKE_CUDA_ARCHITECTURES="$arch")
mkdir -p build
log "build the peerlab_qualify target, default preset (log build/package.log)"
if ! { cmake --preset default "${generator[@]}" "${arch_args[@]}" &&
  cmake --build --preset default -j "$(nproc)" --target peerlab_qualify &&
  (cd build/default && cpack -G 'DEB;TGZ'); } >build/package.log 2>&1; then
  tail -n 30 build/package.log
  log "build or cpack failed"
  exit 4
fi
debs=(build/default/peerlab_*_amd64.deb)
[ -f "${debs[0]}" ] || { log "cpack made no .deb (build/package.log)"; exit 4; }
deb="${debs[-1]}"
log "$deb: $(dpkg-deb -f "$deb" Version); Depends: $(dpkg-deb -f "$deb" Depends)"
ls build/default/peerlab-*-Linux.tar.gz 2>/dev/null
[ -n "$install" ] || exit 0
log "apt-get install ./$deb${PEERLAB_DEB_DIR:+ (dependencies from $PEERLAB_DEB_DIR only)}"
packages_install_debs "$deb" "${PEERLAB_DEB_DIR:-}" || { log "the install failed"; exit 4; }
log "installed: $(command -v peerlab) ($(peerlab --version))"
