#!/bin/sh
# Runs a benchmark binary as 3 local ranks; rank 0 alone writes the JSON file, which holds one clean row.
set -eu
bench="$1"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
"$bench" --ranks=3 --benchmark_out="$dir/out.json" --benchmark_out_format=json > "$dir/console.txt"
grep -q 'BM_RankAllgather' "$dir/console.txt"
grep -Eq '"ranks": 3([.]0+e[+]00)?,' "$dir/out.json"
grep -Eq '"samples": (50|5[.]0+e[+]01),' "$dir/out.json"
if grep -q 'error_occurred' "$dir/out.json"; then exit 1; fi
# Only rank 0 reports: its row in the file (a file from another rank would say so), one row on the console.
grep -Eq '"rank": 0(,|[.])' "$dir/out.json"
[ "$(grep -c '"name": "BM_RankAllgather' "$dir/out.json")" = 1 ]
[ "$(grep -c 'BM_RankAllgather' "$dir/console.txt")" = 1 ]
[ "$(ls "$dir")" = "console.txt
out.json" ]
