#!/usr/bin/env bash
# Downloads the packages a machine without network needs to build, package and qualify (the "bring" column of
# ci/packages.txt: the ones a CUDA image lacks) with every package they depend on (so the .deb of ci/package.sh
# installs from them: its dependencies are among them), into DIR (default debs/, ignored by git).
#
#   ci/fetch_packages.sh [--distro ID:SUITE] [DIR]
#       --distro   that distribution's archive through a private apt configuration, from any Debian-family machine
#                  (default: this machine's own sources); for the CUDA image (Ubuntu 24.04): --distro ubuntu:noble
#   exit 0 when the packages were downloaded, 1 otherwise, 2 for bad arguments
#
# On the machine without network: PEERLAB_DEB_DIR=DIR ci/qualify.sh unpacks what the build lacks (dpkg -x) when
# apt-get cannot install, and PEERLAB_DEB_DIR=DIR ci/package.sh --install installs the .deb with DIR as its only
# source. ci/slurm_gpu.sh --fetch DIR --distro ubuntu:noble fetches these too, with Slurm and munge.
set -uo pipefail
usage() { sed -n '2,13p' "$0"; exit "${1:-2}"; }
dir="" distro=""
while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help) usage 0 ;;
    --distro) [ $# -ge 2 ] || usage; distro="$2"; shift 2 ;;
    -*) echo "ci/fetch_packages.sh: unknown option $1" >&2; usage ;;
    *) [ -z "$dir" ] || usage; dir="$1"; shift ;;
  esac
done
dir="${dir:-debs}"
mkdir -p "$dir" && dir="$(cd "$dir" && pwd)" || exit 1
cd "$(dirname "$0")/.." || exit 1
source ci/packages.sh
command -v apt-get >/dev/null || { echo "ci/fetch_packages.sh: apt-get not found" >&2; exit 1; }
if [ -n "$distro" ]; then
  # A private apt for that distribution's archive: this machine's sources, keys, lists and status stay untouched.
  work="$(mktemp -d)" && chmod 755 "$work"
  trap 'rm -rf "$work"' EXIT
  if [ "${distro%%:*}" = ubuntu ] && [ -z "${PEERLAB_APT_KEYRING:-}" ] &&
    [ ! -f /usr/share/keyrings/ubuntu-archive-keyring.gpg ]; then
    packages_setup ci/fetch_packages.sh fetch || true
  fi
  APT_CONFIG="$(packages_apt_config "$distro" "$work/apt")" || { echo "ci/fetch_packages.sh: no apt configuration for $distro" >&2; exit 1; }
  export APT_CONFIG PEERLAB_DISTRO="${distro%%:*}"
  apt-get update -qq || { echo "ci/fetch_packages.sh: apt-get update from $distro failed" >&2; exit 1; }
fi
mapfile -t pkgs < <(packages_bring)
if [ ${#pkgs[@]} -eq 0 ]; then
  echo "ci/fetch_packages.sh: nothing to bring (ci/packages.txt)" >&2
  exit 1
fi
echo "ci/fetch_packages.sh: ${distro:-$(packages_distro)} packages ${pkgs[*]} and what they depend on, into $dir"
packages_download "$dir" "${pkgs[@]}" || exit 1
debs=("$dir"/*.deb)
[ -f "${debs[0]}" ] || { echo "ci/fetch_packages.sh: nothing was downloaded" >&2; exit 1; }
echo "ci/fetch_packages.sh: ${#debs[@]} packages, $(du -sh "$dir" | cut -f1) in $dir; use: PEERLAB_DEB_DIR=$dir ci/qualify.sh," \
  "then PEERLAB_DEB_DIR=$dir ci/package.sh --install"
