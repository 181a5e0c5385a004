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
out="$(PEERLAB_DEB_DIR= packages_setup t build 2>&1)" && fail "setup passed without the package"
grep -q "required and missing: peerlab-test-brought" <<<"$out" || fail "no line naming it: $out"
# With the folder: unpacked, found, and the optional one only reported.
out="$(PEERLAB_DEB_DIR="$tmp/debs" packages_setup t build 2>&1)" || fail "setup failed: $out"
[ -f "$root/usr/share/peerlab-test/file.txt" ] || fail "not unpacked: $out"
grep -q "unpacked into $root from $tmp/debs: peerlab-test-brought_1.0_all.deb" <<<"$out" || fail "not said: $out"
grep -q "still missing.*peerlab-test-absent" <<<"$out" || fail "optional not reported: $out"
# The test scope is separate: its required package fails only there.
PEERLAB_DEB_DIR= packages_setup t "build test" >/dev/null 2>&1 && fail "test scope passed without its package"
echo "ok"
