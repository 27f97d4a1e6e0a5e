#!/bin/bash
# IVF benchmark (issue #5): Fashion-MNIST through shoald on loopback vs FAISS IndexIVFFlat
# in-process, in one run; then the batch size K sweep and the one-thread cold-cache path.
# Writes build/bench-ivf.md. Usage: bench/ivf_bench.sh [build/bin]
set -euo pipefail
BIN=${1:-build/bin}
DATA=build/bench-ivf-data
OUT=build/bench-ivf.md
mkdir -p build
PID=
stop() { [ -n "$PID" ] && kill -TERM "$PID" 2>/dev/null && wait "$PID" 2>/dev/null; PID=; }
trap stop EXIT
start() {  # start <flags...>: starts shoald on free ports, sets ADDR
  rm -f "$DATA.ready"
  "$BIN/shoald" --data-dir "$DATA" --grpc-addr 127.0.0.1:0 --http-addr 127.0.0.1:0 \
    --ready-file "$DATA.ready" --log-level warn "$@" >>"$DATA.log" 2>&1 &
  PID=$!
  for _ in $(seq 600); do [ -s "$DATA.ready" ] && break; sleep 0.1; done
  ADDR=127.0.0.1:$(sed -E 's/.*"grpc_port": *([0-9]+).*/\1/' "$DATA.ready")
}
{
  echo "# shoal-ivf-bench $(date -u +%F) — $(nproc) cores, Fashion-MNIST 60000x784, 1000 queries, IVF_FLAT nlist 1024, nprobe 16, k 10"
  echo
  echo "| target | mode | QPS | p50 ms | p99 ms | recall@10 |"
  echo "|---|---|---|---|---|---|"
} >"$OUT"
start
"$BIN/shoal-ivf-bench" --target "$ADDR" --faiss --label "K=16" | tee -a "$OUT"
stop
for K in 1 4 64; do
  start --batch-partitions "$K"
  "$BIN/shoal-ivf-bench" --target "$ADDR" --label "K=$K" | tee -a "$OUT"
  stop
done
# One arena thread, a cache of 10% of the 185 MiB index, O_DIRECT reads: the cold path.
start --cpu-threads 1 --cache-bytes 19400000
"$BIN/shoal-ivf-bench" --target "$ADDR" --label "1 thread, cache 10%" | tee -a "$OUT"
stop
echo "wrote $OUT"
