#!/usr/bin/env bash
# Ubuntu 24.04 (the CUDA image's distribution: g++ 13, GoogleTest 1.14, nlohmann-json 3.11.3) in a root made with
# debootstrap from the Ubuntu archive (its key pinned by ci/packages.sh), with this machine's CUDA toolkit bound in at
# /usr/local/cuda (nvcc, and NCCL's header and library). Run as root on a Debian-family machine with network; CI runs
# it after ci/test.sh (.ci/run).
#
#   ci/ubuntu.sh [--work DIR] [--keep]           prepare, then check (below)
#   ci/ubuntu.sh prepare --work DIR              the roots (network, little CPU: .ci/run runs it beside the Debian
#                                                build): DIR/fresh, Ubuntu as debootstrap leaves it, and DIR/build,
#                                                the same with the packages of ci/packages.txt's build scope
#   ci/ubuntu.sh check --work DIR                in DIR/build: configures with the `ci-ubuntu` preset (warnings as
#                                                errors, no optimization, PTX of one architecture: a compile check
#                                                of every target at half the Debian build's cost), builds every
#                                                target, runs the CPU tests matching $PEERLAB_UBUNTU_TESTS (default
#                                                below) and makes the packages (cpack: .deb and .tar.gz); then in
#                                                DIR/fresh, with no toolkit bound in: apt-get install ./peerlab_*.deb,
#                                                peerlab --version, peerlab topo --fixture, peerlab health over the
#                                                stand-in NVML, and the quick level's plan from the installed tree
#   --keep                                       leave DIR (default: a temporary directory, removed after)
#
# The build tree is build/ci-ubuntu of this checkout (the checkout is bound in at /src), the packages are
# build/ci-ubuntu/peerlab_<version>_amd64.deb and peerlab-<version>-Linux.tar.gz. PEERLAB_APT_MIRROR replaces the
# archive. Exit 0 when everything built, every chosen test passed and the installed package ran; 1 otherwise; 2 bad
# arguments; 4 when a root could not be made (no root, no network, no debootstrap).
set -uo pipefail
usage() { sed -n '2,24p' "$0"; exit "${1:-2}"; }
log() { echo "[ubuntu.sh $(date +%T)] $*"; }

stage=all work="" keep=""
case "${1:-}" in
  prepare | check | _inner_check) stage="$1"; shift ;;
  -h | --help) usage 0 ;;
esac
while [ $# -gt 0 ]; do
  case "$1" in
    --work) [ $# -ge 2 ] || usage; work="$2"; shift 2 ;;
    --keep) keep=1; shift ;;
    -h | --help) usage 0 ;;
    *) echo "ci/ubuntu.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
[ "$stage" = all ] || [ -n "$work" ] || { echo "ci/ubuntu.sh $stage: --work DIR is required" >&2; usage; }
cd "$(dirname "$0")/.." || exit 4
src="$PWD"
suite=noble
mirror="${PEERLAB_APT_MIRROR:-http://archive.ubuntu.com/ubuntu}"
cuda="${PEERLAB_UBUNTU_CUDA:-/usr/local/cuda}"
# The CPU tests run in the Ubuntu root: what reads and judges run files and plans (the code g++ 13 and
# nlohmann-json 3.11 compile differently), the command line end to end, the installed tree and the package list.
tests="${PEERLAB_UBUNTU_TESTS:-^(machine_test|compare_test|baseline_test|evaluate_test|plan_test|gpu_models_test|cli_input_test|health_cli_test|topology_test|install_tree_test|packages_test|status_test)}"
# The packages the build root gets beyond the build scope: the test scope's required ones, and what cpack uses to
# compute the .deb's dependencies.
extra=(python3 libpq-dev dpkg-dev file)

# in_root ROOT COMMAND...: runs COMMAND in ROOT with a clean environment.
in_root() {
  local root="$1"
  shift
  chroot "$root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
}

prepare() {
  [ "$(id -u)" -eq 0 ] || { log "run as root (debootstrap, chroot, mount)"; return 4; }
  source ci/packages.sh
  # debootstrap, and the Ubuntu archive's key (ubuntu-keyring, or gpg to take it from the archive's own keyring); apt
  # only where one is missing (.ci/run installs them first: this runs beside ci/test.sh, which uses apt too).
  if ! have_cmd debootstrap || { [ ! -f /usr/share/keyrings/ubuntu-archive-keyring.gpg ] && ! have_cmd gpg; }; then
    packages_setup ci/ubuntu.sh "distro fetch" || return 4
  fi
  mkdir -p "$work" && work="$(cd "$work" && pwd)" || return 4
  local keyring
  keyring="$(_packages_ubuntu_keyring "$mirror" "$suite" "$work")" || return 4
  log "debootstrap $suite from $mirror into $work/fresh"
  local script=/usr/share/debootstrap/scripts/$suite
  [ -e "$script" ] || script=/usr/share/debootstrap/scripts/gutsy  # every Ubuntu release uses this one
  if ! debootstrap --variant=minbase --components=main,universe --keyring="$keyring" "$suite" "$work/fresh" \
    "$mirror" "$script" >"$work/debootstrap.log" 2>&1; then
    tail -n 20 "$work/debootstrap.log"
    log "debootstrap failed"
    return 4
  fi
  cat >"$work/fresh/etc/apt/sources.list" <<EOF
deb $mirror $suite main universe
deb $mirror $suite-updates main universe
deb $mirror $suite-security main universe
EOF
  cp -a "$work/fresh" "$work/build"
  cp -L /etc/resolv.conf "$work/build/etc/resolv.conf"
  log "packages of the build scope in $work/build"
  local pkgs
  # The build scope with Ubuntu's names (the check column asks the host, so it is not used here); NCCL comes with
  # the toolkit bound in.
  mapfile -t pkgs < <(PEERLAB_DISTRO=ubuntu packages_rows build | cut -d'|' -f1 | grep -vx libnccl-dev)
  if ! in_root "$work/build" apt-get update -qq >"$work/apt.log" 2>&1 ||
    ! in_root "$work/build" apt-get install -y -qq --no-install-recommends "${pkgs[@]}" "${extra[@]}" \
      >>"$work/apt.log" 2>&1; then
    tail -n 20 "$work/apt.log"
    log "apt-get in the build root failed"
    return 4
  fi
  in_root "$work/build" sh -c 'g++ --version | head -n 1; cmake --version | head -n 1'
  touch "$work/prepared"
}

# The build and the package checks, inside a private mount namespace (unshare): the mounts go when it ends.
inner_check() {
  local root="$work/build" fresh="$work/fresh" rc=0
  mkdir -p "$root/src" "$root/usr/local/cuda"
  # /sys too: hwloc reads the live machine's topology there (the tests that plan for this machine).
  if ! { mount --bind "$src" "$root/src" && mount --rbind /dev "$root/dev" && mount -t proc proc "$root/proc" &&
    mount --rbind /sys "$root/sys" && mount --make-rslave "$root/sys" &&
    mount --bind "$cuda" "$root/usr/local/cuda" && mount -o remount,bind,ro "$root/usr/local/cuda"; }; then
    log "cannot mount into $root"
    return 4
  fi
  local sha jobs
  sha="$(git -C "$src" rev-parse HEAD 2>/dev/null || echo unknown)"
  jobs="$(nproc)"
  log "configure and build every target in Ubuntu $suite (log build/ci-ubuntu-build.log)"
  mkdir -p "$src/build"
  if ! in_root "$root" env PEERLAB_GIT_SHA="$sha" CUDACXX=/usr/local/cuda/bin/nvcc sh -c \
    "cd /src && cmake --preset ci-ubuntu -G Ninja && cmake --build --preset ci-ubuntu -j $jobs -- -k 0" \
    >"$src/build/ci-ubuntu-build.log" 2>&1; then
    grep -E -B2 -A12 'error|FAILED' "$src/build/ci-ubuntu-build.log" | head -n 80
    log "the build failed on Ubuntu $suite"
    return 1
  fi
  grep -E "peerlab: CUDA" "$src/build/ci-ubuntu-build.log" | sed 's/^-- /  /'
  log "CPU tests matching $tests"
  in_root "$root" env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    ctest --test-dir /src/build/ci-ubuntu -L cpu -R "$tests" -j "$jobs" --output-on-failure \
    --output-junit cpu-junit.xml >"$src/build/ci-ubuntu-tests.log" 2>&1 || rc=1
  tail -n 3 "$src/build/ci-ubuntu-tests.log"
  [ $rc -eq 0 ] || grep -E '\*\*\*Failed|Timeout|Not Run' "$src/build/ci-ubuntu-tests.log" | head -n 30
  log "cpack: .deb and .tar.gz"
  if ! in_root "$root" sh -c "cd /src/build/ci-ubuntu && cpack -G 'DEB;TGZ'" >"$src/build/ci-ubuntu-cpack.log" 2>&1; then
    tail -n 30 "$src/build/ci-ubuntu-cpack.log"
    log "cpack failed"
    return 1
  fi
  local deb
  local debs=("$src"/build/ci-ubuntu/peerlab_*_amd64.deb)
  deb="${debs[0]}"
  [ -f "$deb" ] || { log "no .deb in build/ci-ubuntu"; return 1; }
  dpkg-deb -f "$deb" Package Version Depends Recommends | sed 's/^/  /'

  # The package on Ubuntu as debootstrap left it: apt brings its dependencies; nothing else is there (no toolkit).
  log "apt-get install ./$(basename "$deb") in a fresh Ubuntu $suite"
  mkdir -p "$fresh/pkg"
  cp "$deb" "$src/build/ci-ubuntu/lib/libpeerlab_fake_nvml.so" "$fresh/pkg/"
  cp -r "$src/fixtures" "$fresh/pkg/fixtures"
  cp -L /etc/resolv.conf "$fresh/etc/resolv.conf"
  if ! { mount --rbind /dev "$fresh/dev" && mount -t proc proc "$fresh/proc" && mount --rbind /sys "$fresh/sys" &&
    mount --make-rslave "$fresh/sys"; }; then
    log "cannot mount into $fresh"
    return 4
  fi
  if ! { in_root "$fresh" apt-get update -qq &&
    in_root "$fresh" apt-get install -y -qq --no-install-recommends "/pkg/$(basename "$deb")"; } \
    >"$src/build/ci-ubuntu-install.log" 2>&1; then
    tail -n 20 "$src/build/ci-ubuntu-install.log"
    log "apt-get install of the package failed"
    return 1
  fi
  local fixture=/pkg/fixtures/topologies/hwloc/h200x4-vm.xml out
  check() {  # check WHAT EXPECTED_RC COMMAND...: runs COMMAND in the fresh root
    local what="$1" want="$2" got=0
    shift 2
    out="$(in_root "$fresh" "$@" 2>&1)" || got=$?
    if [ "$got" -eq "$want" ]; then
      echo "PASS $what (exit $got): $(head -n 1 <<<"$out")"
    else
      echo "FAIL $what: exit $got, expected $want"
      tail -n 15 <<<"$out" | sed 's/^/    /'
      rc=1
    fi
  }
  check "peerlab --version" 0 peerlab --version
  check "peerlab topo --fixture" 0 peerlab topo --fixture "$fixture"
  check "peerlab health (stand-in NVML)" 0 env PEERLAB_NVML_LIBRARY=/pkg/libpeerlab_fake_nvml.so \
    PEERLAB_FAKE_NVML=healthy peerlab health --watch 0.3
  check "peerlab qualify --dry-run --level quick --fixture (installed tree)" 0 \
    peerlab qualify --dry-run --level quick --fixture "$fixture"
  check "no CUDA runtime, NCCL or MPI library needed by peerlab" 0 sh -c \
    '! ldd /usr/bin/peerlab | grep -E "libcudart|libnccl|libmpi|not found"'
  return $rc
}

check_stage() {
  [ -f "$work/prepared" ] || { log "no prepared roots in $work (ci/ubuntu.sh prepare --work $work)"; return 4; }
  work="$(cd "$work" && pwd)"
  [ -x "$cuda/bin/nvcc" ] || { log "no CUDA toolkit at $cuda"; return 4; }
  unshare --mount --propagation private "$src/ci/ubuntu.sh" _inner_check --work "$work"
}

case "$stage" in
  prepare) prepare; exit $? ;;
  _inner_check) inner_check; exit $? ;;
  check) check_stage; exit $? ;;
esac
if [ -z "$work" ]; then
  work="$(mktemp -d "${TMPDIR:-/tmp}/peerlab-ubuntu.XXXXXX")" || exit 4
  [ -n "$keep" ] || trap 'rm -rf "$work"' EXIT
fi
prepare || exit $?
check_stage
