#!/usr/bin/env bash
# Brings the NIXL and UCX shared libraries the transport suite needs into one folder, trimmed to what is loaded, for
# machines that cannot reach a package registry (the GPU hosts). Run it where pip and apt-get reach their registries.
#
#   ci/transport_deps.sh [--out DIR] [--wheels DIR]
#
# DIR (default .deps/transport, ignored by git) receives:
#   nixl/lib/             libnixl_capi.so and the NIXL libraries it needs, plugins/libplugin_UCX.so (PyPI nixl-cu13)
#   nixl/nixl_cu13.libs/  the wheel's bundled dependencies those need (its UCX with the cuda and cma modules, gRPC,
#                         protobuf, abseil, etcd client), under the wheel's own file names
#   ucx/lib/              UCX with CUDA (PyPI libucx-cu13): libucp, libucs, libuct, libucm and ucx/ (cuda, cma modules)
#   ucx-debian/lib/       Debian 12's UCX 1.13 (libucx0, built without CUDA) with libnuma: the "UCX without CUDA" case
#   MANIFEST.txt          every file, its size and where it came from
# Every file is stripped of debug sections; Debian's files get an $ORIGIN run path so they find each other there.
# Point peerlab at them with PEERLAB_NIXL_DIR=DIR/nixl, PEERLAB_UCX_DIR=DIR/ucx (or DIR/ucx-debian).
# Exit code: 0 done, 1 a download or a check failed, 2 usage.
set -euo pipefail
cd "$(dirname "$0")/.."

out=".deps/transport"
wheels=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --wheels) wheels="$2"; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "ci/transport_deps.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
for tool in python3 unzip strip readelf patchelf dpkg-deb; do
  command -v "$tool" >/dev/null || { echo "ci/transport_deps.sh: needs $tool" >&2; exit 1; }
done

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if [ -z "$wheels" ]; then
  wheels="$work/wheels"
  python3 -m pip download -q --no-deps -d "$wheels" libucx-cu13 nixl-cu13
fi
(cd "$work" && apt-get download -q libucx0 libnuma1 >/dev/null)

mkdir -p "$work/x"
unzip -q -o "$wheels"/nixl_cu13-*.whl -d "$work/x/nixl"
unzip -q -o "$wheels"/libucx_cu13-*.whl -d "$work/x/ucx"
for deb in "$work"/libucx0_*.deb "$work"/libnuma1_*.deb; do dpkg-deb -x "$deb" "$work/x/deb"; done

rm -rf "$out"
mkdir -p "$out/nixl/lib/plugins" "$out/nixl/nixl_cu13.libs/ucx" "$out/ucx/lib/ucx" "$out/ucx-debian/lib/ucx"
manifest="$out/MANIFEST.txt"
: >"$manifest"
put() {  # put SOURCE DEST ORIGIN
  cp "$1" "$2"
  strip --strip-unneeded "$2" 2>/dev/null || true
  echo "$(stat -c%s "$2") ${2#"$out"/} ($3)" >>"$manifest"
}

# NIXL: the C API, the UCX plugin, and the closure of what they need from the wheel.
n="$work/x/nixl"
mlibs="$n/.nixl_cu13.mesonpy.libs"
blibs="$n/nixl_cu13.libs"
nixl_info=("$n"/nixl_cu13-*.dist-info)
nixl_version="${nixl_info[0]##*/nixl_cu13-}"
nixl_version="${nixl_version%.dist-info}"
python3 - "$mlibs" "$blibs" "$out/nixl" >"$work/nixl-files.txt" <<'EOF'
import os, re, subprocess, sys
mlibs, blibs, out = sys.argv[1:]
roots = [f"{mlibs}/libnixl_capi.so", f"{mlibs}/plugins/libplugin_UCX.so",
         f"{blibs}/ucx/libuct_cuda.so.0.0.0", f"{blibs}/ucx/libucm_cuda.so.0.0.0", f"{blibs}/ucx/libuct_cma.so.0.0.0"]
dirs = [mlibs, blibs]
seen = []
todo = list(roots)
while todo:
    f = todo.pop()
    if f in seen:
        continue
    seen.append(f)
    dyn = subprocess.run(["readelf", "-d", f], capture_output=True, text=True, check=True).stdout
    for name in re.findall(r"NEEDED.*\[(.*)\]", dyn):
        for d in dirs:
            if os.path.exists(os.path.join(d, name)):
                todo.append(os.path.join(d, name))
for f in seen:
    if f.startswith(mlibs + "/plugins/"):
        dest = f"{out}/lib/plugins/{os.path.basename(f)}"
    elif f.startswith(mlibs):
        dest = f"{out}/lib/{os.path.basename(f)}"
    elif f.startswith(blibs + "/ucx/"):
        dest = f"{out}/nixl_cu13.libs/ucx/{os.path.basename(f)}"
    else:
        dest = f"{out}/nixl_cu13.libs/{os.path.basename(f)}"
    print(f, dest)
EOF
while read -r src dest; do put "$src" "$dest" "nixl-cu13 $nixl_version"; done <"$work/nixl-files.txt"

# UCX with CUDA from libucx-cu13 (its ucm_cuda module needs the wheel's own libcudart: left out, UCX runs without it).
u="$work/x/ucx/libucx/lib"
ucx_info=("$work"/x/ucx/libucx_cu13-*.dist-info)
ucx_version="${ucx_info[0]##*/libucx_cu13-}"
ucx_version="$(cat "$work/x/ucx/libucx/UCX_WHEEL_VERSION.txt" 2>/dev/null || echo "${ucx_version%.dist-info}")"
for lib in libucp.so.0 libucs.so.0 libuct.so.0 libucm.so.0; do put "$u/$lib" "$out/ucx/lib/$lib" "libucx-cu13 $ucx_version"; done
for mod in libuct_cuda.so.0 libuct_cma.so.0; do put "$u/ucx/$mod" "$out/ucx/lib/ucx/$mod" "libucx-cu13 $ucx_version"; done

# Debian 12's UCX (no CUDA), made to find its own files in the folder.
d="$work/x/deb/usr/lib/x86_64-linux-gnu"
deb_version="$(dpkg-deb -f "$work"/libucx0_*.deb Version)"
for lib in libucp.so.0 libucs.so.0 libuct.so.0 libucm.so.0 libnuma.so.1; do
  put "$(readlink -f "$d/$lib")" "$out/ucx-debian/lib/$lib" "Debian libucx0 $deb_version / libnuma1"
  # shellcheck disable=SC2016  # $ORIGIN is for the dynamic loader, not the shell
  patchelf --set-rpath '$ORIGIN' "$out/ucx-debian/lib/$lib"
done
put "$(readlink -f "$d/ucx/libuct_cma.so.0")" "$out/ucx-debian/lib/ucx/libuct_cma.so.0" "Debian libucx0 $deb_version"
# shellcheck disable=SC2016  # $ORIGIN is for the dynamic loader, not the shell
patchelf --set-rpath '$ORIGIN/..' "$out/ucx-debian/lib/ucx/libuct_cma.so.0"

# Checks: every needed library of what was brought resolves inside the folder or is a system library.
missing=0
system='^(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|ld-linux-x86-64|libcuda|libnvidia-ml|libcudart|libz|libssl|libcrypto)\.so'
while read -r f; do
  dir="$(dirname "$f")"
  for need in $(readelf -d "$f" | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p'); do
    if [[ "$need" =~ $system ]]; then continue; fi
    if [ -e "$dir/$need" ] || [ -e "$dir/../$need" ] || [ -e "$dir/../nixl_cu13.libs/$need" ] ||
      [ -e "$dir/../../nixl_cu13.libs/$need" ] || [ -e "$dir/../lib/$need" ]; then continue; fi
    echo "ci/transport_deps.sh: $f needs $need, not brought" >&2
    missing=1
  done
done < <(find "$out" -name "*.so*" -type f)
[ $missing -eq 0 ] || exit 1
sort -k2 -o "$manifest" "$manifest"
total=$(du -sb "$out" | cut -f1)
echo "ci/transport_deps.sh: $(find "$out" -type f -name '*.so*' | wc -l) libraries, $((total / 1024 / 1024)) MiB in $out (MANIFEST.txt)"
