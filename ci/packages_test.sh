#!/usr/bin/env bash
# ci/packages.sh without network: the package list is read with this distribution's names, an apt-get that cannot
# install leaves the brought packages (PEERLAB_DEB_DIR) to be unpacked, and a required package still missing fails
# naming it. Runs as a CPU test (ctest packages_test); touches nothing outside a temporary directory.
set -uo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v dpkg-deb >/dev/null || { echo "SKIP: no dpkg-deb"; exit 77; }
source "$src/ci/packages.sh"

# The real list: every row has its 7 columns, a known need and scope, and the names the GPU path brings.
rows=0
while IFS= read -r line; do
  case "$line" in ''|'#'*) continue ;; esac
  rows=$((rows + 1))
  [ "$(awk -F'|' '{print NF}' <<<"$line")" -eq 7 ] || fail "ci/packages.txt: not 7 columns: $line"
done <"$src/ci/packages.txt"
[ "$rows" -ge 20 ] || fail "ci/packages.txt: $rows rows"
build_rows="$(packages_rows build)"
for p in libsqlite3-dev libjs-chart.js libnccl-dev libtomlplusplus-dev libxml2-dev; do
  grep -q "^$p|" <<<"$build_rows" || fail "$p is not in the build scope"
done
bring=" $(packages_bring | tr '\n' ' ')"
for p in libtomlplusplus-dev libtomlplusplus3 libxml2-dev libicu-dev libsqlite3-dev libjs-chart.js; do
  [[ "$bring" == *" $p "* ]] || fail "$p is not brought (got:$bring)"
done
[[ "$bring" == *" libpq"* ]] && fail "libpq is brought"

# A list of two packages checked under $tmp/root, a folder holding one of them as a .deb, and no apt-get.
root="$tmp/root"
mkdir -p "$root" "$tmp/debs" "$tmp/pkg/DEBIAN" "$tmp/pkg/usr/share/peerlab-test"
echo "hello" >"$tmp/pkg/usr/share/peerlab-test/file.txt"
printf 'Package: peerlab-test-brought\nVersion: 1.0\nArchitecture: all\nMaintainer: test <t@example.com>\nDescription: test\n' \
  >"$tmp/pkg/DEBIAN/control"
dpkg-deb --build "$tmp/pkg" "$tmp/debs/peerlab-test-brought_1.0_all.deb" >/dev/null || fail "dpkg-deb --build"
cat >"$tmp/list.txt" <<LIST
# debian|ubuntu|need|scope|check|bring|what
peerlab-test-brought|-|required|build|have_glob '$root/usr/share/peerlab-test/file.txt'|peerlab-test-brought|test
peerlab-test-absent|-|optional|build|have_glob '$root/absent'|-|test
peerlab-test-ci-only|-|required|test|have_glob '$root/absent'|-|test
LIST
export PEERLAB_PACKAGES_FILE="$tmp/list.txt" PEERLAB_DEB_ROOT="$root" PEERLAB_APT_GET=false

[ "$(packages_missing build | tr '\n' ' ')" = "peerlab-test-brought peerlab-test-absent " ] || fail "missing: $(packages_missing build)"
# Without the folder: the required package is missing and named.
out="$(PEERLAB_DEB_DIR='' packages_setup t build 2>&1)" && fail "setup passed without the package"
grep -q "required and missing: peerlab-test-brought" <<<"$out" || fail "no line naming it: $out"
# With the folder: unpacked, found, and the optional one only reported.
out="$(PEERLAB_DEB_DIR="$tmp/debs" packages_setup t build 2>&1)" || fail "setup failed: $out"
[ -f "$root/usr/share/peerlab-test/file.txt" ] || fail "not unpacked: $out"
grep -q "unpacked into $root from $tmp/debs: peerlab-test-brought_1.0_all.deb" <<<"$out" || fail "not said: $out"
grep -q "still missing.*peerlab-test-absent" <<<"$out" || fail "optional not reported: $out"
# The test scope is separate: its required package fails only there.
PEERLAB_DEB_DIR='' packages_setup t "build test" >/dev/null 2>&1 && fail "test scope passed without its package"

# A package that still ships /lib lands in /usr through a merged-/usr link: the link stays a link.
mkdir -p "$tmp/lib-pkg/DEBIAN" "$tmp/lib-pkg/lib/peerlab-test" "$tmp/debs2" "$root/usr/lib"
echo "lib" >"$tmp/lib-pkg/lib/peerlab-test/lib.txt"
printf 'Package: peerlab-test-lib\nVersion: 1.0\nArchitecture: all\nMaintainer: test <t@example.com>\nDescription: test\n' \
  >"$tmp/lib-pkg/DEBIAN/control"
dpkg-deb --build "$tmp/lib-pkg" "$tmp/debs2/peerlab-test-lib_1.0_all.deb" >/dev/null || fail "dpkg-deb --build"
ln -s usr/lib "$root/lib"
_packages_unpack t "$tmp/debs2" >/dev/null || fail "unpack of peerlab-test-lib"
[ -L "$root/lib" ] || fail "the merged-/usr link $root/lib was replaced by a directory"
[ -f "$root/usr/lib/peerlab-test/lib.txt" ] || fail "peerlab-test-lib did not land in usr/lib"

# Another distribution's names and a private apt configuration (no network: only what is written is checked).
ubuntu_rows="$(PEERLAB_PACKAGES_FILE="$src/ci/packages.txt" PEERLAB_DISTRO=ubuntu packages_rows test)"
debian_rows="$(PEERLAB_PACKAGES_FILE="$src/ci/packages.txt" PEERLAB_DISTRO=debian packages_rows test)"
grep -q '^libclang-rt-18-dev|' <<<"$ubuntu_rows" || fail "PEERLAB_DISTRO=ubuntu: not Ubuntu's names"
grep -q '^libclang-rt-14-dev|' <<<"$debian_rows" || fail "PEERLAB_DISTRO=debian: not Debian's names"
if command -v apt-config >/dev/null; then
  echo "key" >"$tmp/key.gpg"
  conf="$(PEERLAB_APT_KEYRING="$tmp/key.gpg" packages_apt_config ubuntu:noble "$tmp/apt")" || fail "packages_apt_config"
  grep -qx "deb \[signed-by=$tmp/key.gpg\] http://archive.ubuntu.com/ubuntu noble main universe" "$tmp/apt/sources.list" ||
    fail "sources: $(cat "$tmp/apt/sources.list")"
  grep -q " noble-updates main universe$" "$tmp/apt/sources.list" || fail "no noble-updates"
  grep -q " noble-security main universe$" "$tmp/apt/sources.list" || fail "no noble-security"
  [ "$(APT_CONFIG="$conf" apt-config shell S Dir::State::status)" = "S='$tmp/apt/state/status'" ] ||
    fail "apt-config: $(APT_CONFIG="$conf" apt-config shell S Dir::State::status)"
  [ ! -s "$tmp/apt/state/status" ] || fail "the private status is not empty"
  packages_apt_config noble "$tmp/apt2" 2>"$tmp/err" && fail "a distribution without a suite was taken"
  grep -q "expected ID:SUITE" "$tmp/err" || fail "no reason: $(cat "$tmp/err")"
  packages_apt_config fedora:40 "$tmp/apt3" 2>"$tmp/err" && fail "fedora was taken"
  grep -q "ubuntu or debian" "$tmp/err" || fail "no reason: $(cat "$tmp/err")"
fi
echo "ok"
