#!/usr/bin/env bash
# The system packages of ci/packages.txt: which are present, installing what is missing, unpacking brought packages on
# a machine without network. Sourced by ci/test.sh, ci/qualify.sh and ci/gpu.sh:
#
#   source ci/packages.sh
#   packages_setup WHO "build test"    checks the packages of those scopes; installs the missing ones with apt-get
#                                      (as root, or with sudo -n); where apt-get cannot, unpacks the .deb files of
#                                      $PEERLAB_DEB_DIR (ci/fetch_packages.sh) into / with dpkg -x; returns 1 naming
#                                      every required package still missing
#   packages_missing "build" [required]   the missing packages of those scopes (this distribution's names)
#   packages_bring                     the packages ci/fetch_packages.sh downloads (the "bring" column)
# PEERLAB_DEB_ROOT (default /) is where brought packages are unpacked; PEERLAB_APT_GET (default apt-get) the installer
# (ci/packages_test.sh uses both).

PEERLAB_PACKAGES_FILE="${PEERLAB_PACKAGES_FILE:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/packages.txt}"

have_cmd() { command -v "$1" >/dev/null 2>&1; }
have_pc() { pkg-config --exists "$1" 2>/dev/null; }
have_glob() { compgen -G "$1" >/dev/null; }
# NCCL's header where FindNCCL.cmake looks: $NCCL_ROOT, $NCCL_HOME, the CUDA toolkit, /usr.
have_nccl() {
  local d
  for d in "${NCCL_ROOT:-}" "${NCCL_HOME:-}" /usr/local/cuda /usr/local/cuda-* /usr; do
    [ -n "$d" ] && [ -f "$d/include/nccl.h" ] && return 0
  done
  return 1
}

# ubuntu or debian (the column of package names to use).
packages_distro() {
  local id="" like=""
  if [ -r /etc/os-release ]; then
    id="$(. /etc/os-release && echo "${ID:-}")"
    like="$(. /etc/os-release && echo "${ID_LIKE:-}")"
  fi
  if [ "$id" = ubuntu ] || [[ " $like " == *" ubuntu "* ]]; then echo ubuntu; else echo debian; fi
}

_packages_trim() {
  local s="$1"
  s="${s#"${s%%[![:space:]]*}"}"
  echo "${s%"${s##*[![:space:]]}"}"
}

# Rows of the given scopes as "name|need|check|bring", with this distribution's names; comments and blanks skipped.
packages_rows() {
  local scopes=" $1 " distro debian ubuntu need scope check bring what name
  distro="$(packages_distro)"
  while IFS='|' read -r debian ubuntu need scope check bring what; do
    debian="$(_packages_trim "$debian")"
    [ -z "$debian" ] && continue
    [[ "$debian" == \#* ]] && continue
    ubuntu="$(_packages_trim "$ubuntu")"
    need="$(_packages_trim "$need")"
    scope="$(_packages_trim "$scope")"
    check="$(_packages_trim "$check")"
    bring="$(_packages_trim "$bring")"
    [[ "$scopes" == *" $scope "* ]] || continue
    name="$debian"
    [ "$distro" = ubuntu ] && [ "$ubuntu" != "-" ] && name="$ubuntu"
    echo "$name|$need|$check|$bring"
  done <"$PEERLAB_PACKAGES_FILE"
}

# Missing packages of the scopes (all, or only the required ones with "required").
packages_missing() {
  local name need check bring
  while IFS='|' read -r name need check bring; do
    [ -n "${2:-}" ] && [ "$need" != "$2" ] && continue
    eval "$check" >/dev/null 2>&1 || echo "$name"
  done < <(packages_rows "$1")
}

packages_bring() {
  local name need check bring
  while IFS='|' read -r name need check bring; do
    [ "$bring" != "-" ] && [ -n "$bring" ] && echo "$bring"
  done < <(packages_rows "build test") | tr ' ' '\n' | awk 'NF && !seen[$0]++'
}

# Runs a command as root: directly, or with sudo -n; returns 1 when neither is possible.
_packages_as_root() {
  if [ "$(id -u)" -eq 0 ]; then
    "$@"
  elif have_cmd sudo && sudo -n true 2>/dev/null; then
    sudo -n "$@"
  else
    return 1
  fi
}

_packages_apt_install() {
  local who="$1"
  shift
  local tool="${PEERLAB_APT_GET:-apt-get}"
  have_cmd "$tool" || { echo "$who: no $tool here" >&2; return 1; }
  # Short timeouts: a machine without network says so within seconds.
  local apt=("$tool" -o Acquire::Retries=0 -o Acquire::http::Timeout=10 -o Acquire::https::Timeout=10)
  _packages_as_root "${apt[@]}" update -qq >/dev/null 2>&1 || { echo "$who: apt-get update failed (no network or no root)" >&2; return 1; }
  if DEBIAN_FRONTEND=noninteractive _packages_as_root "${apt[@]}" install -y -qq --no-install-recommends "$@" >/dev/null 2>&1; then
    echo "$who: installed $*"
    return 0
  fi
  # One package this distribution lacks (libnccl-dev outside NVIDIA's repository) must not keep the others out.
  local p ok=0
  for p in "$@"; do
    if DEBIAN_FRONTEND=noninteractive _packages_as_root "${apt[@]}" install -y -qq --no-install-recommends "$p" >/dev/null 2>&1; then
      echo "$who: installed $p"
    else
      echo "$who: apt-get cannot install $p" >&2
      ok=1
    fi
  done
  return $ok
}

# Unpacks every .deb of $2 whose package dpkg does not know as installed into $PEERLAB_DEB_ROOT (default /) with
# dpkg -x: files only, no maintainer scripts.
_packages_unpack() {
  local who="$1" dir="$2" root="${PEERLAB_DEB_ROOT:-/}" deb pkg unpacked=()
  have_cmd dpkg-deb || { echo "$who: no dpkg-deb here to unpack $dir" >&2; return 1; }
  for deb in "$dir"/*.deb; do
    [ -e "$deb" ] || continue
    pkg="$(dpkg-deb -f "$deb" Package 2>/dev/null)" || continue
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" && continue
    if _packages_as_root dpkg -x "$deb" "$root"; then
      unpacked+=("$(basename "$deb")")
    else
      echo "$who: cannot unpack $deb into $root (needs root)" >&2
      return 1
    fi
  done
  [ ${#unpacked[@]} -gt 0 ] && echo "$who: unpacked into $root from $dir: ${unpacked[*]}"
  [ "$root" = / ] && have_cmd ldconfig && _packages_as_root ldconfig 2>/dev/null
  return 0
}

packages_setup() {
  local who="$1" scopes="$2" missing
  mapfile -t missing < <(packages_missing "$scopes")
  if [ ${#missing[@]} -gt 0 ]; then
    echo "$who: missing: ${missing[*]}"
    _packages_apt_install "$who" "${missing[@]}" || true
    mapfile -t missing < <(packages_missing "$scopes")
    if [ ${#missing[@]} -gt 0 ] && [ -n "${PEERLAB_DEB_DIR:-}" ]; then
      if [ -d "$PEERLAB_DEB_DIR" ]; then
        _packages_unpack "$who" "$PEERLAB_DEB_DIR" || true
      else
        echo "$who: PEERLAB_DEB_DIR=$PEERLAB_DEB_DIR is not a directory" >&2
      fi
      mapfile -t missing < <(packages_missing "$scopes")
    fi
    [ ${#missing[@]} -gt 0 ] && echo "$who: still missing (optional ones only cost what they are for): ${missing[*]}" >&2
  fi
  mapfile -t missing < <(packages_missing "$scopes" required)
  if [ ${#missing[@]} -gt 0 ]; then
    echo "$who: required and missing: ${missing[*]} (apt-get them, or bring them with ci/fetch_packages.sh and set PEERLAB_DEB_DIR; see ci/packages.txt)" >&2
    return 1
  fi
  return 0
}
