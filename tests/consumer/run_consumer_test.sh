#!/bin/bash
# ctest consumer_install_test: installs the release build into a temporary prefix, builds
# tests/consumer as an outside project against it (find_package(shoal CONFIG)), and runs the
# consumer against a real shoald.
#   run_consumer_test.sh <build dir> <consumer source dir> <bin dir>
set -euo pipefail
build_dir=$1 src=$2 bin_dir=$3
work=$(mktemp -d /tmp/shoal-consumer.XXXXXX)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

cmake --install "$build_dir" --prefix "$work/prefix" >"$work/install.log"
test -f "$work/prefix/include/shoal/client.h"
test -f "$work/prefix/lib/cmake/shoal/shoalConfig.cmake"
# The installed tree is all the consumer sees: the source and build trees stay out of its path.
cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" >"$work/configure.log" || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/build" >"$work/build.log" || { cat "$work/build.log"; exit 1; }

"$bin_dir/shoald" --data-dir "$work/data" --grpc-addr 127.0.0.1:0 --http-addr 127.0.0.1:0 \
  --ready-file "$work/ready" --shutdown-grace-seconds 5 >"$work/shoald.log" 2>&1 &
pid=$!
for _ in $(seq 600); do
  [ -s "$work/ready" ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/shoald.log"; exit 1; }
  sleep 0.1
done
port=$(sed -n 's/.*"grpc_port": \([0-9]*\).*/\1/p' "$work/ready")
[ -n "$port" ] || { echo "shoald did not become ready"; cat "$work/shoald.log"; exit 1; }
"$work/build/consumer" "127.0.0.1:$port"
