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
#   packages_download DIR PKG...       PKG and every package they depend on (apt-cache depends --recurse) as .deb
#                                      files in DIR (apt-get download, with $APT_CONFIG when set); prints those apt
#                                      could not download (virtual packages); returns 1 when apt knows none of them
#   packages_install_debs DEB [DIR]    apt-get install ./DEB; with DIR, its dependencies come from DIR alone (a local
#                                      repository of DIR's .deb files, indexed in DIR/Packages: a machine without
#                                      network); what is installed already is kept
#   packages_apt_config ID:SUITE DIR   a private apt configuration (its own sources, keyring, lists, cache and an empty
#                                      status) for another distribution's archive, written under DIR; prints the file
#                                      for APT_CONFIG. apt-get update / apt-cache / apt-get download with it fetch that
#                                      distribution's packages from any Debian-family machine (ci/slurm_gpu.sh --fetch)
# PEERLAB_DEB_ROOT (default /) is where brought packages are unpacked; PEERLAB_APT_GET (default apt-get) the installer
# (ci/packages_test.sh uses both); PEERLAB_DISTRO (ubuntu or debian) the column of names to use instead of this
# machine's (fetching for another distribution); PEERLAB_APT_MIRROR and PEERLAB_APT_KEYRING replace the archive and
# the keyring packages_apt_config uses.

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

# ubuntu or debian (the column of package names to use): $PEERLAB_DISTRO, else this machine's.
packages_distro() {
  local id="" like=""
  case "${PEERLAB_DISTRO:-}" in
    ubuntu | debian) echo "$PEERLAB_DISTRO"; return 0 ;;
  esac
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
  local scopes=" $1 " distro debian ubuntu need scope check bring name
  distro="$(packages_distro)"
  while IFS='|' read -r debian ubuntu need scope check bring _; do
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
  done < <(packages_rows "build test package") | tr ' ' '\n' | awk 'NF && !seen[$0]++'
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

# Unpacks every .deb of $2 whose package dpkg does not know as installed into $PEERLAB_DEB_ROOT (default /): files
# only, no maintainer scripts. Through tar with --keep-directory-symlink, not dpkg -x: a package that still ships
# /lib, /bin or /sbin must land in /usr through the merged-/usr links, never replace a link with a directory.
_packages_unpack() {
  local who="$1" dir="$2" root="${PEERLAB_DEB_ROOT:-/}" deb pkg unpacked=()
  have_cmd dpkg-deb || { echo "$who: no dpkg-deb here to unpack $dir" >&2; return 1; }
  for deb in "$dir"/*.deb; do
    [ -e "$deb" ] || continue
    pkg="$(dpkg-deb -f "$deb" Package 2>/dev/null)" || continue
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" && continue
    if dpkg-deb --fsys-tarfile "$deb" |
      _packages_as_root tar -x -f - -C "$root" --keep-directory-symlink --warning=no-timestamp; then
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

# The archive signing key of Ubuntu (2018; it signs every release since 18.04). Where no Ubuntu keyring is installed,
# the keyring comes from the archive's own ubuntu-keyring package and only this key of it is trusted.
PEERLAB_UBUNTU_ARCHIVE_KEY=F6ECB3762474EDA9D21B7022871920D1991BC93C

# _packages_apt_dirs DIR: the directories and the configuration ($DIR/apt.conf) of a private apt under DIR; the
# caller writes $DIR/sources.list.
_packages_apt_dirs() {
  local w="$1" arch
  arch="$(dpkg --print-architecture 2>/dev/null || echo amd64)"
  mkdir -p "$w/state/lists/partial" "$w/cache/archives/partial" "$w/sources.list.d" "$w/trusted.gpg.d" \
    "$w/preferences.d" || return 1
  : >"$w/state/status"
  # As root apt downloads as _apt where that user exists: it must be able to write there.
  if [ "$(id -u)" -eq 0 ] && id _apt >/dev/null 2>&1; then
    chmod 755 "$w" "$w/state" "$w/state/lists" "$w/cache" "$w/cache/archives"
    chown _apt "$w/state/lists/partial" "$w/cache/archives/partial"
  fi
  cat >"$w/apt.conf" <<EOF
Dir::State "$w/state";
Dir::State::status "$w/state/status";
Dir::Cache "$w/cache";
Dir::Etc::sourcelist "$w/sources.list";
Dir::Etc::sourceparts "$w/sources.list.d";
Dir::Etc::trusted "$w/trusted.gpg";
Dir::Etc::trustedparts "$w/trusted.gpg.d";
Dir::Etc::preferences "$w/preferences";
Dir::Etc::preferencesparts "$w/preferences.d";
APT::Architecture "$arch";
APT::Architectures { "$arch"; };
Acquire::Languages "none";
Acquire::Retries "2";
EOF
}

# _packages_ubuntu_keyring MIRROR SUITE DIR: prints a keyring holding Ubuntu's archive key: the installed one
# (package ubuntu-keyring: Ubuntu, Debian 13, Debian 12's backports) where there is one; else the ubuntu-keyring
# package of the suite's release pocket, fetched unverified, of which only the key with the fingerprint above is kept
# (with gpg): every index fetched after it is checked against that key alone.
_packages_ubuntu_keyring() {
  local mirror="$1" suite="$2" w="$3/keyring" f=/usr/share/keyrings/ubuntu-archive-keyring.gpg fpr
  [ -f "$f" ] && { echo "$f"; return 0; }
  if ! have_cmd gpg; then
    echo "no $f, and no gpg to take the key from the archive: apt-get install ubuntu-keyring or gpg" >&2
    return 1
  fi
  _packages_apt_dirs "$w" || return 1
  echo "deb [trusted=yes] $mirror $suite main" >"$w/sources.list"
  APT_CONFIG="$w/apt.conf" apt-get update -qq >"$w/update.log" 2>&1 ||
    { echo "apt-get update from $mirror $suite failed: $(tail -n 2 "$w/update.log" | tr '\n' ' ')" >&2; return 1; }
  local keyring_debs=()
  if (cd "$w" && APT_CONFIG="$w/apt.conf" apt-get download -qq ubuntu-keyring >/dev/null 2>&1); then
    keyring_debs=("$w"/ubuntu-keyring_*.deb)
  fi
  if [ ! -f "${keyring_debs[0]:-}" ] || ! dpkg-deb -x "${keyring_debs[0]}" "$w/x"; then
    echo "cannot fetch ubuntu-keyring from $mirror $suite" >&2
    return 1
  fi
  mkdir -p "$w" && mkdir -m 700 "$w/gnupg"
  gpg --homedir "$w/gnupg" --batch --quiet --no-default-keyring \
    --keyring "$w/x/usr/share/keyrings/ubuntu-archive-keyring.gpg" --export "$PEERLAB_UBUNTU_ARCHIVE_KEY" \
    >"$3/ubuntu-archive.gpg" 2>/dev/null
  fpr="$(gpg --homedir "$w/gnupg" --batch --with-colons --show-keys "$3/ubuntu-archive.gpg" 2>/dev/null |
    awk -F: '$1 == "fpr" { print $10; exit }')"
  if [ "$fpr" != "$PEERLAB_UBUNTU_ARCHIVE_KEY" ]; then
    echo "the ubuntu-keyring package of $mirror $suite lacks the key $PEERLAB_UBUNTU_ARCHIVE_KEY" >&2
    return 1
  fi
  echo "$3/ubuntu-archive.gpg"
}

packages_apt_config() {
  local target="$1" w="$2" id suite mirror security keyring components
  id="${target%%:*}" suite="${target#*:}"
  if [ -z "$id" ] || [ -z "$suite" ] || [ "$suite" = "$target" ]; then
    echo "distribution '$target': expected ID:SUITE (ubuntu:noble, debian:bookworm)" >&2
    return 1
  fi
  { have_cmd apt-get && have_cmd apt-cache && have_cmd dpkg-deb; } || { echo "no apt-get here" >&2; return 1; }
  _packages_apt_dirs "$w" || return 1
  case "$id" in
    ubuntu)
      mirror="${PEERLAB_APT_MIRROR:-http://archive.ubuntu.com/ubuntu}"
      security="$mirror"
      components="main universe"
      if [ -n "${PEERLAB_APT_KEYRING:-}" ]; then keyring="$PEERLAB_APT_KEYRING"; else
        keyring="$(_packages_ubuntu_keyring "$mirror" "$suite" "$w")" || return 1
      fi
      ;;
    debian)
      mirror="${PEERLAB_APT_MIRROR:-http://deb.debian.org/debian}"
      security="${PEERLAB_APT_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
      components="main"
      keyring="${PEERLAB_APT_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}"
      ;;
    *)
      echo "distribution '$id': ubuntu or debian" >&2
      return 1
      ;;
  esac
  [ -f "$keyring" ] || { echo "no keyring $keyring" >&2; return 1; }
  cat >"$w/sources.list" <<EOF
deb [signed-by=$keyring] $mirror $suite $components
deb [signed-by=$keyring] $mirror $suite-updates $components
deb [signed-by=$keyring] $security $suite-security $components
EOF
  echo "$w/apt.conf"
}

packages_download() {
  local dir="$1" all missed=() p
  shift
  mapfile -t all < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
    --no-replaces --no-enhances "$@" 2>/dev/null | grep -E '^[a-z0-9]' | sort -u)
  [ ${#all[@]} -gt 0 ] || { echo "apt-cache knows none of $*" >&2; return 1; }
  # All at once; one by one where one of them (a virtual package) keeps the others out.
  if ! (cd "$dir" && apt-get download -qq "${all[@]}" >/dev/null 2>&1); then
    for p in "${all[@]}"; do
      (cd "$dir" && apt-get download -qq "$p" >/dev/null 2>&1) || missed+=("$p")
    done
  fi
  [ ${#missed[@]} -gt 0 ] && echo "not downloaded (virtual, or not in the archive): ${missed[*]}"
  return 0
}

packages_install_debs() {
  local deb="$1" dir="${2:-}" w deb_file rc=0
  deb="$(cd "$(dirname "$deb")" && pwd)/$(basename "$deb")"
  local apt=(apt-get -y -q --no-install-recommends)
  if [ -z "$dir" ]; then
    _packages_as_root apt-get update -qq >/dev/null 2>&1 || echo "apt-get update failed: installing from what apt knows" >&2
    DEBIAN_FRONTEND=noninteractive _packages_as_root "${apt[@]}" install "$deb"
    return
  fi
  # DIR as the only source: its Packages index written here from each .deb's control fields.
  dir="$(cd "$dir" && pwd)" || return 1
  w="$(mktemp -d)" || return 1
  mkdir -p "$w/lists/partial" "$w/cache/archives/partial" "$w/parts"
  for deb_file in "$dir"/*.deb; do
    [ -f "$deb_file" ] || continue
    dpkg-deb -f "$deb_file"
    echo "Filename: ./$(basename "$deb_file")"
    echo "Size: $(stat -c %s "$deb_file")"
    echo "SHA256: $(sha256sum "$deb_file" | cut -d' ' -f1)"
    echo
  done >"$w/Packages"
  cp "$w/Packages" "$dir/Packages" || { rm -rf "$w"; return 1; }
  echo "deb [trusted=yes] file:$dir ./" >"$w/sources.list"
  printf '%s\n' "Dir::Etc::sourcelist \"$w/sources.list\";" "Dir::Etc::sourceparts \"$w/parts\";" \
    "Dir::State::Lists \"$w/lists\";" "Dir::Cache \"$w/cache\";" 'Acquire::Languages "none";' >"$w/apt.conf"
  chmod -R a+rX "$w"
  if ! APT_CONFIG="$w/apt.conf" _packages_as_root apt-get update -qq; then
    echo "apt-get update from $dir failed" >&2
    rc=1
  elif ! APT_CONFIG="$w/apt.conf" DEBIAN_FRONTEND=noninteractive _packages_as_root "${apt[@]}" install "$deb"; then
    echo "apt-get install $deb with $dir as the only source failed" >&2
    rc=1
  fi
  rm -rf "$w"
  return $rc
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
