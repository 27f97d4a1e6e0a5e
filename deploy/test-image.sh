#!/usr/bin/env bash
# The container image, tested for real (`make image-test`; .ci/run runs it once after
# `make test`). Needs root, podman, buildah, debootstrap, docker-compose, prometheus, node/npm:
# deploy/packages.txt lists the Debian packages and this script installs what is missing.
#
#  1. local debian:bookworm / bookworm-slim bases from debootstrap (no registry is reachable)
#  2. builds localhost/shoal:latest (deploy/build-image.sh; the host's ccache is reused)
#  3. runs it with --cpus 1 --memory 1g on the host network: health check, sizing in the log
#     and /metrics, an IVF collection of 20000 vectors, 64 clients x 20 queries, SIGTERM exits
#     0, a restart on the same volume finds the data
#  4. seccomp: refusing io_uring -> pread; deploy/seccomp-io_uring.json -> uring
#  5. compose config, dashboard and alert metric names against a live /metrics, promtool,
#     Debian's Prometheus scraping the live shoald
#  6. the StatefulSet's pod under `podman kube play`; k8s manifests against the Kubernetes
#     schemas (strict); the Dockerfile linted
# Every step prints "ok: ..." or fails the script. Traffic stays on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
IMAGE=${IMAGE:-localhost/shoal:latest}
T0=$(date +%s)
step() { echo "== test-image [$(($(date +%s) - T0))s] $*"; }
PASSED=0
ok() {
  PASSED=$((PASSED + 1))
  echo "ok: $*"
}
fail() {
  echo "FAIL: $*" >&2
  echo "image-test: $PASSED passed, 1 failed"
  exit 1
}

# --- tools -----------------------------------------------------------------------------------
install_tools() {
  local wanted missing=()
  wanted=$(grep -v '^\s*#' deploy/packages.txt | grep -v '^\s*$')
  for p in $wanted; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "test-image: installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  (cd deploy/tools && npm ci --no-audit --no-fund --silent >/dev/null)
}

[ "$(id -u)" -eq 0 ] || fail "run as root (podman with cgroupfs, debootstrap)"
step "tools"
install_tools
source deploy/podman-env.sh
source deploy/lib-bases.sh

WORK=$(mktemp -d /var/tmp/shoal-image-test.XXXXXX)
RUN_ID=shoal-it-$$
CONTAINERS=()
PIDS=()
CONFIG_VOLUME_WAS_THERE=no
podman volume exists shoal-config 2>/dev/null && CONFIG_VOLUME_WAS_THERE=yes
cleanup() {
  for c in "${CONTAINERS[@]}"; do podman rm -f -v -t 0 "$c" >/dev/null 2>&1 || true; done
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  podman kube down "$WORK/pod.yaml" >/dev/null 2>&1 || true
  podman volume rm -f "$RUN_ID-data" "$RUN_ID-kube-data" >/dev/null 2>&1 || true
  # kube play makes a volume of the ConfigMap and leaves it behind kube down.
  [ "$CONFIG_VOLUME_WAS_THERE" = yes ] || podman volume rm -f shoal-config >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# /metrics of a container: on the host network by port, else inside its network namespace.
metrics() {  # metrics PORT [CONTAINER]
  if [ -n "${2:-}" ]; then
    nsenter -t "$(podman inspect -f '{{.State.Pid}}' "$2")" -n curl -sf "http://127.0.0.1:$1/metrics"
  else
    curl -sf "http://127.0.0.1:$1/metrics"
  fi
}

# podman without systemd logs an error for every health-check timer it cannot add or remove
# (harmless here: the test runs the checks itself); keep that noise in a file.
pm() {
  podman "$@" 2>>"$WORK/podman.err" || {
    tail -5 "$WORK/podman.err"
    return 1
  }
}

logs() {  # logs CONTAINER: its whole log in a file (grep -q on a pipe + pipefail = SIGPIPE)
  podman logs "$1" >"$WORK/$1.log" 2>&1 || true
  echo "$WORK/$1.log"
}

wait_healthy() {  # wait_healthy CONTAINER: podman runs health checks from systemd timers,
  local i                    # which this machine has not; call the check ourselves.
  for i in $(seq 1 60); do
    if [ "$(podman inspect -f '{{.State.Running}}' "$1")" != true ]; then
      podman logs "$1" | tail -20
      fail "$1 exited before it was healthy"
    fi
    podman healthcheck run "$1" >/dev/null 2>&1 && return 0
    sleep 1
  done
  podman logs "$1" | tail -20
  fail "$1 not healthy after 60 s"
}

# --- 1, 2: bases and the image -----------------------------------------------------------------
step "1. debian:bookworm and debian:bookworm-slim bases"
make_bases
ok "bases: $(podman images --format '{{.Repository}}:{{.Tag}}' | grep -c 'library/debian:bookworm') local images"
step "2. build $IMAGE"
IMAGE=$IMAGE deploy/build-image.sh >"$WORK/build.log" 2>&1 || {
  tail -40 "$WORK/build.log"
  fail "image build"
}
grep -E 'build-image:|^ccache in this build' "$WORK/build.log" || true
[ "$(podman image inspect -f '{{.Config.Healthcheck.Test}}' "$IMAGE")" != "[]" ] ||
  fail "the image lost its HEALTHCHECK (not built with --format docker?)"
[ "$(podman image inspect -f '{{.Config.User}}' "$IMAGE")" = shoal ] || fail "image runs as root"
lean=$(podman run --rm --network none --entrypoint /bin/sh "$IMAGE" -c \
  'command -v gcc g++ cc c++ cmake; dpkg-query -W -f="\${Package}\n" | grep -E -- "-dev$|^libfaiss|^dataset-"' \
  2>>"$WORK/podman.err" || true)
[ -z "$lean" ] || fail "the runtime image is not lean: $lean"
ok "image $(podman image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%.1f MB", $1/1e6}'), user shoal, HEALTHCHECK kept, no compilers or -dev packages"

# --- 3: run under --cpus 1 --memory 1g ---------------------------------------------------------
step "3. run with --cpus 1 --memory 1g"
GRPC=$(free_port)
HTTP=$(free_port)
C=$RUN_ID-main
CONTAINERS+=("$C")
pm run -d --name "$C" --network host --cpus 1 --memory 1g \
  -v "$RUN_ID-data:/var/lib/shoal" \
  -e SHOAL_GRPC_ADDR="127.0.0.1:$GRPC" -e SHOAL_HTTP_ADDR="127.0.0.1:$HTTP" \
  -e SHOAL_SHUTDOWN_GRACE_SECONDS=10 "$IMAGE" >/dev/null || fail "podman run"
wait_healthy "$C"
ok "podman healthcheck run: healthy"
podman logs "$C" 2>&1 | grep -E 'cpu.threads|cache.bytes'
grep -qE 'cpu.threads = 1 \(1 CPUs from the cgroup' "$(logs "$C")" ||
  fail "the log does not say 1 CPU thread from the cgroup quota"
cache_log=$(podman logs "$C" 2>&1 | sed -nE 's/.*cache.bytes = ([0-9]+) \(25% of the cgroup.*/\1/p')
[ -n "$cache_log" ] && [ "$cache_log" -le $((256 << 20)) ] ||
  fail "the log's cache budget '$cache_log' is not <= 256 MiB from the cgroup limit"
metrics "$HTTP" >"$WORK/metrics.txt"
grep -qx 'shoal_cpu_arena_threads 1' "$WORK/metrics.txt" || fail "/metrics: shoal_cpu_arena_threads != 1"
budget=$(awk '$1 == "shoal_cache_budget_bytes" {printf "%d", $2}' "$WORK/metrics.txt")
[ "$budget" -le $((256 << 20)) ] || fail "/metrics: shoal_cache_budget_bytes $budget > 256 MiB"
ok "sizing: 1 arena thread, cache budget $budget bytes (log and /metrics)"

podman cp "$C:/usr/local/bin/shoalctl" "$WORK/shoalctl"
ctl() { "$WORK/shoalctl" --addr "127.0.0.1:$GRPC" --timeout-ms 120000 "$@"; }
/usr/bin/python3 - "$WORK" <<'EOF'
import sys, numpy as np
rng = np.random.default_rng(7)
centres = rng.normal(size=(64, 32)).astype(np.float32) * 4
data = (centres[rng.integers(0, 64, 20000)] + rng.normal(size=(20000, 32))).astype(np.float32)
np.save(sys.argv[1] + "/vectors.npy", data)
np.save(sys.argv[1] + "/queries.npy", data[:1280] + 0.01)
EOF
ctl create it --dim 32 --metric l2 --index ivf_flat --nlist 64 >/dev/null
ctl load it "$WORK/vectors.npy" --batch 2000 >/dev/null
ctl build-index it >/dev/null
ctl describe it >"$WORK/describe.txt"
grep -q '20000' "$WORK/describe.txt" || {
  cat "$WORK/describe.txt"
  fail "the collection does not hold 20000 vectors"
}
ok "IVF collection 'it': 20000 vectors loaded and indexed"

# 64 clients, each 20 searches one after the other, all at once on one container CPU.
for c in $(seq 0 63); do
  (
    n=0
    for q in $(seq 0 19); do
      ctl search it --query-file "$WORK/queries.npy" --query-index $((c * 20 + q)) \
        --num-queries 1 -k 10 --nprobe 8 >/dev/null 2>>"$WORK/client-$c.err" && n=$((n + 1))
    done
    echo "$n" >"$WORK/client-$c.ok"
  ) &
done
wait
answered=$(cat "$WORK"/client-*.ok | awk '{s += $1} END {print s}')
[ "$answered" -eq 1280 ] || {
  cat "$WORK"/client-*.err | sort | uniq -c | head
  fail "$answered of 1280 queries answered"
}
ok "64 concurrent clients x 20 queries: all 1280 answered"
metrics "$HTTP" >"$WORK/metrics.txt"

stop_start=$(date +%s)
pm stop -t 30 "$C" >/dev/null
stop_seconds=$(($(date +%s) - stop_start))
code=$(podman inspect -f '{{.State.ExitCode}}' "$C")
# Exit 0, not 137: shoald finished its drain before podman's 30 s stop timeout (SIGKILL).
[ "$code" -eq 0 ] || fail "shoald exited $code on SIGTERM"
grep -q 'shutdown complete' "$(logs "$C")" || fail "no graceful shutdown in the log"
ok "SIGTERM: exit 0 in ${stop_seconds}s, graceful drain"
pm start "$C" >/dev/null
wait_healthy "$C"
ctl describe it >"$WORK/describe.txt"
grep -q '20000' "$WORK/describe.txt" || fail "after a restart the collection is gone"
ctl search it --query-file "$WORK/queries.npy" --num-queries 1 -k 10 >/dev/null
ok "restart on the same volume: 'it' has its 20000 vectors and answers"

# --- 5: monitoring ------------------------------------------------------------------------------
step "5. compose, dashboard and alert metrics, promtool, Prometheus"
(cd deploy && docker-compose config -q) || fail "docker-compose config"
(cd deploy && docker-compose -f docker-compose.yml -f docker-compose.secure.yml config -q) ||
  fail "docker-compose config with docker-compose.secure.yml"
ok "docker-compose config (and with docker-compose.secure.yml)"
metrics "$HTTP" >"$WORK/metrics-live.txt"
names=$(cat deploy/grafana/shoal.json deploy/prometheus/alerts.yml | grep -oE 'shoal_[a-z0-9_]+' | sort -u)
missing=0
for n in $names; do
  grep -qE "^$n(\{| )" "$WORK/metrics.txt" "$WORK/metrics-live.txt" || {
    echo "not in /metrics: $n"
    missing=1
  }
done
[ $missing -eq 0 ] || fail "the dashboard or the alerts name metrics shoald does not export"
ok "every metric in the dashboard and the alerts ($(echo "$names" | wc -w)) is in a live /metrics"
promtool check rules deploy/prometheus/alerts.yml >/dev/null || fail "promtool check rules"
(cd deploy/prometheus && promtool test rules alerts_test.yml) || fail "promtool test rules"
ok "promtool check rules + test rules"
mkdir -p "$WORK/prom"
sed "s/shoal:7701/127.0.0.1:$HTTP/; s/scrape_interval: 15s/scrape_interval: 1s/" \
  deploy/prometheus/prometheus.yml >"$WORK/prom/prometheus.yml"
cp deploy/prometheus/alerts.yml "$WORK/prom/"
promtool check config "$WORK/prom/prometheus.yml" >/dev/null || fail "promtool check config"
PROM=$(free_port)
prometheus --config.file="$WORK/prom/prometheus.yml" --storage.tsdb.path="$WORK/prom/data" \
  --web.listen-address="127.0.0.1:$PROM" >"$WORK/prom/log" 2>&1 &
PIDS+=($!)
up=""
for _ in $(seq 1 60); do
  up=$(curl -sf "http://127.0.0.1:$PROM/api/v1/query?query=up%7Bjob%3D%22shoal%22%7D" |
    /usr/bin/python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")' 2>/dev/null || true)
  [ "$up" = 1 ] && break
  sleep 1
done
[ "$up" = 1 ] || {
  tail "$WORK/prom/log"
  fail "Prometheus does not see the shoal target up"
}
ok "Debian's Prometheus with deploy/prometheus/prometheus.yml: target up"
pm stop -t 30 "$C" >/dev/null

# --- 4: seccomp ---------------------------------------------------------------------------------
# --network none: the image's own 0.0.0.0 addresses inside a private namespace, read through
# nsenter. Also checks the no-API-key warning.
step "4. seccomp: io_uring refused -> pread; deploy/seccomp-io_uring.json -> uring"
/usr/bin/python3 - deploy/seccomp-io_uring.json "$WORK/seccomp-no-uring.json" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))
for rule in p["syscalls"]:
    rule["names"] = [n for n in rule["names"] if not n.startswith("io_uring")]
p["syscalls"] = [r for r in p["syscalls"] if r["names"]]
p["syscalls"].append({"names": ["io_uring_setup"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1})
json.dump(p, open(sys.argv[2], "w"))
EOF
for profile in "$WORK/seccomp-no-uring.json:pread" "$REPO/deploy/seccomp-io_uring.json:uring"; do
  file=${profile%:*} want=${profile##*:}
  S=$RUN_ID-seccomp-$want
  CONTAINERS+=("$S")
  pm run -d --name "$S" --network none --security-opt "seccomp=$file" "$IMAGE" >/dev/null
  wait_healthy "$S"
  backend=$(metrics 7701 "$S" | sed -nE 's/^shoal_io_backend\{backend="([a-z_]+)"\} 1.*/\1/p')
  [ "$backend" = "$want" ] || fail "seccomp $file: shoal_io_backend '$backend', want $want"
  pm rm -f -v -t 0 "$S" >/dev/null
  ok "seccomp $(basename "$file"): shoal_io_backend $backend"
done
grep -q 'without an API key' "$(logs "$C")" &&
  fail "warned about a missing API key on loopback"
W=$RUN_ID-warn
CONTAINERS+=("$W")
pm run -d --name "$W" --network none "$IMAGE" >/dev/null
wait_healthy "$W"
grep -q 'listening on 0.0.0.0:7700 (not loopback) without an API key' "$(logs "$W")" ||
  fail "no warning for 0.0.0.0 without an API key"
pm rm -f -v -t 0 "$W" >/dev/null
ok "warning logged for 0.0.0.0 without an API key (and none on loopback)"

# --- 6: Kubernetes ------------------------------------------------------------------------------
step "6. StatefulSet pod under podman kube play; manifests; Dockerfile lint"
KG=$(free_port)
KH=$(free_port)
node deploy/tools/statefulset-to-pod.mjs deploy/k8s/statefulset.yaml deploy/k8s/configmap.yaml \
  "$RUN_ID-kube" "127.0.0.1:$KG" "127.0.0.1:$KH" >"$WORK/pod.yaml"
pm kube play --network host "$WORK/pod.yaml" >/dev/null
KC=$RUN_ID-kube-shoal  # kube play names it POD-CONTAINER
[ "$(podman inspect -f '{{.State.Running}}' "$KC")" = true ] || fail "kube play did not start $KC"
for _ in $(seq 1 60); do
  curl -sf "http://127.0.0.1:$KH/readyz" >/dev/null && break
  sleep 1
done
curl -sf "http://127.0.0.1:$KH/readyz" >/dev/null || {
  podman logs "$KC" | tail
  fail "the StatefulSet's pod is not ready"
}
curl -sf "http://127.0.0.1:$KH/healthz" >/dev/null || fail "/healthz"
"$WORK/shoalctl" --addr "127.0.0.1:$KG" health >/dev/null || fail "gRPC health of the pod"
grep -q 'cpu.threads = 1 (' "$(logs "$KC")" ||
  fail "the pod's 2-CPU limit did not give 1 arena thread"
grep -q 'cache.bytes = 536870912 (25% of the cgroup' "$WORK/$KC.log" ||
  fail "the pod's 2 GiB limit did not give a 512 MiB cache"
pm kube down "$WORK/pod.yaml" >/dev/null
ok "kube play of the StatefulSet's pod template: ready, healthy; 2 CPUs / 2 GiB -> 1 arena thread, 512 MiB cache"
node deploy/tools/validate-k8s.mjs deploy/k8s/*.yaml || fail "k8s manifests"
node deploy/tools/validate-k8s.mjs "$WORK/pod.yaml" >/dev/null || fail "the extracted Pod"
ok "k8s manifests valid against the Kubernetes schemas (unknown fields rejected)"
deploy/tools/node_modules/.bin/dockerfilelint Dockerfile || fail "dockerfilelint"
ok "dockerfilelint: no findings"

echo "test-image: all passed in $(($(date +%s) - T0))s"
echo "image-test: $PASSED passed, 0 failed"
