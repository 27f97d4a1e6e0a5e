#!/usr/bin/env bash
# Fails when tools/tsan.supp holds an entry that could hide a race in Shoal's own code.
#
# A `race:` pattern is matched against every frame of both racing stacks, so it must name one
# third-party function (a qualified name such as grpc::internal::CallOpSet), never a library
# (libfoo.so), a path or header (oneapi/tbb/, .h), a wildcard, or a whole namespace. No entry of
# any kind may name Shoal's code. Usage: tools/check-tsan-supp.sh [FILE]
set -euo pipefail
file=${1:-"$(dirname "$0")/tsan.supp"}
bad=0
while IFS= read -r line; do
  case "$line" in '' | '#'*) continue ;; esac
  kind=${line%%:*} pattern=${line#*:}
  why=""
  if [[ "$pattern" == *shoal* || "$pattern" == *Shoal* ]]; then
    why="names Shoal's own code"
  elif [ "$kind" = race ]; then
    if [[ "$pattern" == *.so* || "$pattern" == */* || "$pattern" == *.h* || "$pattern" == *'*'* ]]; then
      why="library-, path- or header-wide"
    elif [[ "$pattern" != *::* || "$pattern" == *:: ]]; then
      why="not one qualified function (namespace-wide or unanchored)"
    else
      case "${pattern##*::}" in
        grpc | grpc_core | internal | tbb | detail | d0 | d1 | r1 | absl | google | protobuf | std)
          why="namespace-wide" ;;
      esac
    fi
  fi
  if [ -n "$why" ]; then
    echo "tools/tsan.supp: '$line' is $why: it could hide a race in Shoal's code" >&2
    bad=1
  fi
done <"$file"
exit $bad
