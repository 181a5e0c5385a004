#!/usr/bin/env bash
# Downloads the packages a machine without network needs to build and qualify (the "bring" column of
# ci/packages.txt: the ones a CUDA image lacks) with apt-get download, into DIR (default debs/, ignored by git). On the
# machine without network: PEERLAB_DEB_DIR=DIR ci/qualify.sh unpacks them (dpkg -x) when apt-get cannot install.
# The packages are this machine's distribution's: fetch on the distribution of the target when you can (a Debian 12
# package of these libraries also unpacks and builds on Ubuntu 24.04).
# ci/slurm_gpu.sh --fetch DIR --distro ubuntu:noble fetches these too, with Slurm and munge, from the named
# distribution's archive on any Debian-family machine.
#
#   ci/fetch_packages.sh [DIR]      exit 0 when every package was downloaded, 1 otherwise
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/packages.sh
dir="${1:-debs}"
mkdir -p "$dir"
mapfile -t pkgs < <(packages_bring)
if [ ${#pkgs[@]} -eq 0 ]; then
  echo "ci/fetch_packages.sh: nothing to bring (ci/packages.txt)" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null; then
  echo "ci/fetch_packages.sh: apt-get not found" >&2
  exit 1
fi
echo "ci/fetch_packages.sh: $(packages_distro) packages ${pkgs[*]} into $dir"
(cd "$dir" && apt-get download "${pkgs[@]}")
ls -l "$dir"/*.deb
echo "ci/fetch_packages.sh: $(du -sh "$dir" | cut -f1) in $dir; use: PEERLAB_DEB_DIR=$dir ci/qualify.sh"
