#!/usr/bin/env bash
# Builds localhost/shoal:latest (or $IMAGE) with podman, in the docker format (the OCI format
# drops HEALTHCHECK). The host's ccache is mounted at /ccache, so a build right after
# `make build` / `make test` compiles almost nothing. Holds the shared build lock.
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${IMAGE:-localhost/shoal:latest}
source deploy/podman-env.sh
args=(--format docker --network host --layers -t "$IMAGE")
ccache_dir=${SHOAL_CCACHE_DIR:-$(ccache -k cache_dir 2>/dev/null || true)}
if [ -n "$ccache_dir" ]; then
  mkdir -p "$ccache_dir"
  args+=(-v "$ccache_dir:/ccache")
fi
# ccache hashes these (the compiler's message language): the build must see the host's.
for var in LANG LC_ALL LC_CTYPE LC_MESSAGES; do
  [ -z "${!var+set}" ] || args+=(--build-arg "$var=${!var}")
done
flock "${SHOAL_BUILD_LOCK:-/tmp/shoal-build.lock}" podman build "${args[@]}" .
podman image inspect "$IMAGE" --format '{{.Size}}' |
  awk -v i="$IMAGE" '{printf "build-image: %s is %.1f MB\n", i, $1 / 1e6}'
