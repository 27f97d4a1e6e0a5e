#!/usr/bin/env python3
"""Fashion-MNIST on Shoal from Python: load, index, search, measure.

    make run                                    # shoald on localhost:7700 (another terminal)
    make python
    PYTHONPATH=build/python /usr/bin/python3 client/python/examples/fashion_mnist.py

Reads the IDX files of Debian's dataset-fashion-mnist (60000 train / 10000 test images of
784 pixels), creates an IVF collection, upserts the train images with a progress bar, builds
the index (its phase and percent from describe()), searches the 10000 test images and prints
recall@10 against exact neighbours (numpy brute force) and queries per second.
"""
import argparse
import gzip
import os
import struct
import sys
import time

import numpy as np

import shoal

DATASET = "/usr/share/datasets/fashion-mnist"


def read_idx_images(path):
    """An IDX3 ubyte file (optionally .gz) as an (n, rows * cols) float32 array."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        magic, n, rows, cols = struct.unpack(">IIII", f.read(16))
        if magic != 0x803:
            sys.exit(f"{path}: not an IDX3 ubyte file (magic {magic:#x})")
        pixels = np.frombuffer(f.read(n * rows * cols), dtype=np.uint8)
    return pixels.reshape(n, rows * cols).astype(np.float32)


def exact_neighbours(base, queries, k, chunk=1000):
    """Ids of the k nearest base rows (squared L2) of each query: ||q||^2 - 2 q.x + ||x||^2."""
    base_sq = (base.astype(np.float64) ** 2).sum(axis=1).astype(np.float32)
    out = np.empty((len(queries), k), dtype=np.int64)
    for lo in range(0, len(queries), chunk):
        q = queries[lo:lo + chunk]
        d = base_sq[None, :] - 2.0 * (q @ base.T)
        part = np.argpartition(d, k, axis=1)[:, :k]
        order = np.take_along_axis(d, part, axis=1).argsort(axis=1)
        out[lo:lo + chunk] = np.take_along_axis(part, order, axis=1)
    return out


def wait_for_build(client, name, future):
    """Polls describe() while build_index(wait=False) runs; draws phase and percent."""
    last = None
    while not future.done():
        info = client.describe(name)
        if info.index_state == "building":
            line = f"\rbuild {info.build_phase:<10} {info.build_percent:3d}%"
            if line != last:
                sys.stderr.write(line)
                sys.stderr.flush()
                last = line
        time.sleep(0.2)
    if last:
        sys.stderr.write("\n")
    return future.result()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--address", default="localhost:7700")
    ap.add_argument("--api-key", default=os.environ.get("SHOAL_API_KEY"))
    ap.add_argument("--collection", default="fmnist_py")
    ap.add_argument("--index", default="ivf_flat", help="ivf_flat, ivf_sq8 or ivf_pq")
    ap.add_argument("--nlist", type=int, default=0, help="0 = chosen by the server")
    ap.add_argument("--nprobe", type=int, default=16)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--queries", type=int, default=10000)
    ap.add_argument("--dataset", default=DATASET)
    ap.add_argument("--keep", action="store_true", help="keep the collection afterwards")
    args = ap.parse_args()

    base = read_idx_images(os.path.join(args.dataset, "train-images-idx3-ubyte.gz"))
    queries = read_idx_images(os.path.join(args.dataset, "t10k-images-idx3-ubyte.gz"))
    queries = queries[:args.queries]
    print(f"Fashion-MNIST: {len(base)} vectors, {len(queries)} queries, dim {base.shape[1]}")

    client = shoal.Client(args.address, api_key=args.api_key, timeout=120)
    print(f"shoald at {args.address}: {client.health()}")
    if args.collection in [c.name for c in client.list_collections()]:
        client.drop_collection(args.collection)
    client.create_collection(args.collection, dim=base.shape[1], metric="l2", index=args.index,
                             nlist=args.nlist, pq_m=16 if args.index == "ivf_pq" else 0)

    t = time.perf_counter()
    bar = shoal.ProgressBar("upsert", unit=" vec/s")  # drawn even when stderr is not a tty
    n = client.upsert(args.collection, np.arange(len(base)), base, progress=bar)
    upsert_s = time.perf_counter() - t
    print(f"upserted {n} vectors in {upsert_s:.1f} s ({n / upsert_s:,.0f} vectors/s)")

    t = time.perf_counter()
    message = wait_for_build(client, args.collection,
                             client.build_index(args.collection, wait=False))
    info = client.describe(args.collection)
    print(f"build_index: {message} [{time.perf_counter() - t:.1f} s; state {info.index_state}]")

    client.search(args.collection, queries[:100], k=args.k, nprobe=args.nprobe)  # warm the cache
    t = time.perf_counter()
    results = client.search(args.collection, queries, k=args.k, nprobe=args.nprobe)
    search_s = time.perf_counter() - t
    found = np.stack([r.ids for r in results]).astype(np.int64)

    t = time.perf_counter()
    truth = exact_neighbours(base, queries, args.k)
    exact_s = time.perf_counter() - t
    recall = np.mean([len(np.intersect1d(f, g)) / args.k for f, g in zip(found, truth)])
    probed = np.mean([r.stats.partitions_probed for r in results])
    print(f"search: {len(queries)} queries, k={args.k}, nprobe={args.nprobe}: "
          f"{len(queries) / search_s:,.0f} QPS ({search_s:.2f} s), "
          f"{probed:.1f} partitions probed per query")
    print(f"recall@{args.k} vs exact (numpy brute force, {exact_s:.0f} s): {recall:.4f}")
    first = results[0]
    print("query 0 neighbours:", ", ".join(f"{h.id} ({h.distance:.0f})" for h in first))
    if not args.keep:
        client.drop_collection(args.collection)
    client.close()


if __name__ == "__main__":
    main()
