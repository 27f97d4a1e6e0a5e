#!/usr/bin/env bash
# Every C++ function the model names (`@mirrors Class::Function path/file`) must still exist
# in that file, so the model cannot silently drift from the code: a renamed or removed
# function fails make model-check until the model is looked at again.
# Usage: check_names.sh [ROOT]   ROOT: the source tree to check against (default: this one)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "${1:-$here/../..}" && pwd)"
missing=0
count=0
while read -r name file; do
  count=$((count + 1))
  if [ ! -f "$root/$file" ]; then
    echo "check_names: $file (named for $name) does not exist"
    missing=$((missing + 1))
    continue
  fi
  fn=${name##*::}
  cls=""
  [[ $name == *::* ]] && cls=${name%::*}
  # the function is defined or declared there: `Fn(` with a word boundary before it
  if ! grep -qE "(^|[^A-Za-z0-9_])$fn\(" "$root/$file"; then
    echo "check_names: $name: no function $fn in $file"
    missing=$((missing + 1))
    continue
  fi
  # and its class still exists there (defined in the file, or its methods are)
  if [ -n "$cls" ] && ! grep -qE "(class|struct) $cls([^A-Za-z0-9_]|$)|$cls::" "$root/$file"; then
    echo "check_names: $name: no class $cls in $file"
    missing=$((missing + 1))
  fi
done < <(grep -ohE '@mirrors [A-Za-z_:]+ [A-Za-z0-9_./-]+' "$here"/*.pml |
  awk '{print $2, $3}' | sort -u)
if [ "$count" -eq 0 ]; then
  echo "check_names: the model names no C++ function"
  exit 1
fi
if [ "$missing" -ne 0 ]; then
  echo "check_names: $missing of $count named functions are missing: update tests/model"
  exit 1
fi
echo "check_names: all $count C++ functions the model mirrors exist"
