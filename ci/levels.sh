#!/usr/bin/env bash
# GPU host: the qualify levels on this machine, as a maintenance window would be planned on them. Each level runs
# --repeat times on the healthy machine (each must PASS), then once with one pair's copies slowed by `peerlab inject
# copy_slow` (about 10% slower: it must FAIL, and a failing check must name that pair). Prints one table (wall time of
# each run against the plan's estimate) and writes it as levels.json and levels.md beside the bundles.
#
#   ci/levels.sh [--levels quick,standard] [--repeat 3] [--slow-pair 0-1] [--out DIR] [--bin DIR] [-- qualify options]
#
# Builds nothing: run ci/qualify.sh (or build the peerlab_qualify target) first; --bin is where peerlab is (default
# build/default/bin). Exit 0 when every verdict was the expected one, 1 otherwise, 2 for bad arguments.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 4
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
levels="quick,standard"
repeat=3
slow_pair="0-1"
out="${OUT:-build}/levels"
bin="build/default/bin"
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --levels) levels="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --slow-pair) slow_pair="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "ci/levels.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$repeat" in ''|*[!0-9]*) echo "ci/levels.sh: --repeat takes a count" >&2; exit 2 ;; esac
if ! [[ "$slow_pair" =~ ^[0-9]+-[0-9]+$ ]]; then echo "ci/levels.sh: --slow-pair takes SRC-DST, e.g. 0-1" >&2; exit 2; fi
peerlab="$bin/peerlab"
[ -x "$peerlab" ] || { echo "ci/levels.sh: $peerlab not found (run ci/qualify.sh first, or pass --bin)" >&2; exit 2; }
mkdir -p "$out"
rows="$out/levels.rows"
: >"$rows"
rc=0
# run NAME LEVEL EXPECT [inject spec]: one qualify; records level, name, wall, estimate, verdict and whether it was
# as expected.
run() {
  local name="$1" level="$2" expect="$3" fault="${4:-}" dir="$out/$1"
  rm -rf "$dir"
  local cmd=("$peerlab" qualify --level "$level" --out "$dir" "${extra[@]}")
  [ -n "$fault" ] && cmd=("$peerlab" inject -f "$fault" -- "${cmd[@]}")
  local t0=$SECONDS
  "${cmd[@]}" >"$out/$name.log" 2>&1
  local code=$? took=$((SECONDS - t0))
  python3 - "$dir/results.json" "$name" "$level" "$expect" "$code" "$took" "$slow_pair" >>"$rows" <<'PY' || rc=1
import json, sys
path, name, level, expect, code, took, pair = sys.argv[1:]
src, dst = pair.split("-")
try:
    run = json.load(open(path))
except Exception as e:
    print(json.dumps({"run": name, "level": level, "ok": False, "why": f"no results.json: {e}", "exit": int(code)}))
    sys.exit(1)
q, plan = run.get("qualify", {}), run.get("plan", {})
checks = q.get("checks", [])
failed = [c for c in checks if c.get("status") == "fail"]
named = [c for c in failed if f"{src}->{dst}" in (c.get("name", "") + " " + c.get("reason", ""))]
verdict = q.get("verdict", "?")
if expect == "PASS":
    ok, why = verdict == "PASS" and int(code) == 0, ""
else:
    ok = verdict == "FAIL" and int(code) == 1 and bool(named)
    why = named[0]["name"] + ": " + named[0].get("reason", "") if named else "no failing check names " + pair
print(json.dumps({"run": name, "level": level, "expect": expect, "verdict": verdict, "exit": int(code),
                  "ok": ok, "why": why, "wall_s": q.get("wall_s"), "estimate_s": plan.get("budget_s"),
                  "command_s": int(took), "checks": q.get("summary", {}).get("total"),
                  "fallbacks": run.get("bench", {}).get("serial_fallbacks", [])}))
sys.exit(0 if ok else 1)
PY
}
IFS=',' read -r -a level_list <<<"$levels"
for level in "${level_list[@]}"; do
  for i in $(seq 1 "$repeat"); do run "$level-$i" "$level" PASS; done
  run "$level-slow-$slow_pair" "$level" FAIL "copy_slow:pair=$slow_pair,percent=12"
done
python3 - "$rows" "$out/levels.json" "$out/levels.md" "$slow_pair" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
json.dump(rows, open(sys.argv[2], "w"), indent=1)
# The same table as Markdown, to keep beside a bundle.
md = ["| run | verdict | as expected | wall s | estimate s | checks | failing check naming " + sys.argv[4] + " |",
      "|---|---|---|---|---|---|---|"]
for r in rows:
    md.append(f"| {r['run']} | {r.get('verdict', '?')} | {'yes' if r['ok'] else 'NO'} | {r.get('wall_s') or 0:.1f} | "
              f"{r.get('estimate_s') or 0:.1f} | {r.get('checks') or 0} | {r.get('why', '')} |")
open(sys.argv[3], "w").write("\n".join(md) + "\n")
print(f"{'run':<28} {'verdict':<8} {'as expected':<12} {'wall s':>7} {'estimate s':>10} {'checks':>7}")
for r in rows:
    w, e = r.get("wall_s"), r.get("estimate_s")
    print(f"{r['run']:<28} {r.get('verdict','?'):<8} {('yes' if r['ok'] else 'NO'):<12} "
          f"{(w or 0):>7.1f} {(e or 0):>10.1f} {r.get('checks') or 0:>7}" + ("" if r["ok"] else "  " + r.get("why", "")))
by = {}
for r in rows:
    if r.get("expect") == "PASS" and r.get("wall_s"):
        by.setdefault(r["level"], []).append(r)
for level, rs in by.items():
    walls = [r["wall_s"] for r in rs]
    est = statistics.median([r["estimate_s"] for r in rs if r.get("estimate_s")] or [0])
    print(f"{level}: median wall {statistics.median(walls):.1f} s over {len(walls)} runs, estimate {est:.1f} s")
PY
exit $rc
