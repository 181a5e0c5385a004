#!/usr/bin/env bash
# Runs shellcheck over every shell script of the project: the *.sh files and every file whose first line starts a shell
# (.ci/run, the Slurm wrappers), as git lists them (or find, outside a git checkout). Settings: .shellcheckrc.
#
#   ci/shellcheck.sh          exit 0 when every script is clean, 1 with the findings, 4 without shellcheck
set -uo pipefail
cd "$(dirname "$0")/.." || exit 4
case "${1:-}" in
  -h | --help) sed -n '2,5p' "$0"; exit 0 ;;
  "") ;;
  *) echo "ci/shellcheck.sh: no arguments (got '$1')" >&2; exit 2 ;;
esac
command -v shellcheck >/dev/null || { echo "ci/shellcheck.sh: shellcheck not found (apt-get install shellcheck)" >&2; exit 4; }
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files)
else
  mapfile -t files < <(find . -type f -not -path './build/*' -not -path './.git/*' -printf '%P\n' | sort)
fi
scripts=()
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  case "$f" in
    *.sh) scripts+=("$f") ;;
    *.py | *.cc | *.h | *.cu | *.md | *.json | *.gz | *.txt | *.xml | *.toml | *.cmake) ;;
    *) head -n 1 "$f" 2>/dev/null | grep -Eq '^#!.*[/ ](ba|da|)sh( |$)' && scripts+=("$f") ;;
  esac
done
if shellcheck "${scripts[@]}"; then
  echo "ci/shellcheck.sh: ${#scripts[@]} shell scripts, no findings ($(shellcheck --version | sed -n 's/^version: //p'))"
  exit 0
fi
echo "ci/shellcheck.sh: findings above (${#scripts[@]} shell scripts checked)" >&2
exit 1
