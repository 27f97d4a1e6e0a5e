#!/usr/bin/python3
"""make bench-io: Shoal's I/O scheduler (io_uring and pread backends) against fio, same run.

Random O_DIRECT reads of partition-sized blocks from one file, closed loop at a fixed queue
depth. fio (io_uring engine) is the ceiling; every Shoal figure is reported as a ratio to the
fio figure measured minutes apart on the same file, block size and depth.

--cold-query (make bench-io-cold): one cold query (Fashion-MNIST demo collection, nprobe 16).
Shoal's time from search start to answer (the engine in-process: route, reads, scans; no gRPC)
and the same reads through the I/O scheduler alone, next to fio reading the same 4 KiB-aligned
offsets at the same depth (an iolog replay, io_uring, O_DIRECT, all reads submitted together).
The page cache is dropped before every run (root; O_DIRECT reads bypass it anyway).
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

FMNIST_QUERIES = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"


def run_fio(path, bs, depth, seconds):
    out = subprocess.run(
        ["fio", "--name=r", f"--filename={path}", "--rw=randread", f"--bs={bs}",
         f"--iodepth={depth}", "--ioengine=io_uring", "--direct=1", f"--runtime={seconds}",
         "--time_based", "--output-format=json", "--randrepeat=0"],
        check=True, capture_output=True, text=True).stdout
    job = json.loads(out)["jobs"][0]
    read = job["read"]
    runtime_s = read["runtime"] / 1000.0
    gib = read["io_bytes"] / (1 << 30)
    pct = read["clat_ns"]["percentile"]
    return {"engine": "fio-io_uring", "bs": bs, "depth": depth,
            "mib_s": read["bw_bytes"] / (1 << 20), "iops": read["iops"],
            "p50_us": pct["50.000000"] / 1000, "p99_us": pct["99.000000"] / 1000,
            "cpu_s_per_gib": (job["usr_cpu"] + job["sys_cpu"]) / 100 * runtime_s / gib if gib else 0}


def run_shoal(binary, path, bs, depth, seconds, backend):
    out = subprocess.run([binary, "--file", path, "--bs", str(bs), "--depth", str(depth),
                          "--seconds", str(seconds), "--backend", backend],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def drop_caches():
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        pass  # not root: every engine reads with O_DIRECT anyway


def demo_segment(shoald, data_dir):
    """The demo collection's segment directory, built by `shoald --demo` on first use."""
    coll = os.path.join(data_dir, "collections", "fmnist")
    segs = sorted(d for d in os.listdir(coll) if d.startswith("seg-")) if os.path.isdir(coll) else []
    if not segs:
        print(f"building the demo collection in {data_dir} (shoald --demo) ...", file=sys.stderr)
        log = open(os.path.join(os.path.dirname(data_dir) or ".", "bench-io-shoald.log"), "w")
        proc = subprocess.Popen([shoald, "--data-dir", data_dir, "--demo", "--grpc-addr",
                                 "127.0.0.1:0", "--http-addr", "127.0.0.1:0"], stdout=log,
                                stderr=subprocess.STDOUT)
        try:
            for _ in range(600):
                time.sleep(1)
                if "demo collection 'fmnist' ready" in open(log.name).read():
                    break
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait()
        segs = sorted(d for d in os.listdir(coll) if d.startswith("seg-"))
    return os.path.join(coll, segs[0])


def fio_iolog(path, reads, out):
    """fio's iolog (version 2) of the reads, widened to 4 KiB as Shoal's O_DIRECT reads are."""
    lines = ["fio version 2 iolog", f"{path} add", f"{path} open"]
    for off, length in reads:
        begin, end = off // 4096 * 4096, (off + length + 4095) // 4096 * 4096
        lines.append(f"{path} read {begin} {end - begin}")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


def run_fio_cold(iolog, n, depth):
    """Milliseconds from submission to the last completion. The reads are submitted in one
    batch and reaped together (fio's iolog replay only accounts reads it reaps in its main
    loop), so every read's latency is the time to the last completion: take the largest."""
    drop_caches()
    out = subprocess.run(
        ["fio", "--name=cold", f"--read_iolog={iolog}", "--ioengine=io_uring", "--direct=1",
         f"--iodepth={depth}", f"--iodepth_batch_submit={min(n, depth)}",
         f"--iodepth_batch_complete_min={min(n, depth)}", "--thread", "--output-format=json"],
        check=True, capture_output=True, text=True).stdout
    read = json.loads(out)["jobs"][0]["read"]
    return read["lat_ns"]["max"] / 1e6


def cold_query(args):
    seg = args.segment_dir or demo_segment(args.shoald, args.data_dir)
    rows = []
    for nprobe in args.nprobe:
        cmd = [args.bin, "--cold-query", seg, "--query-file", args.query_file, "--nprobe",
               str(nprobe), "--depth", str(args.depth), "--repeat", str(args.repeat)]
        shoal, first, sched, fio = [], [], [], []
        reads = None
        for q in range(args.queries):
            r = json.loads(subprocess.run(cmd + ["--query-index", str(q)], check=True,
                                          capture_output=True, text=True).stdout)
            reads = r["reads"]
            fio_iolog(os.path.join(seg, "lists.dat"), reads, args.iolog)
            shoal += r["query_ms_all"]
            first.append(r["first_query_ms"])
            sched.append(r["scheduler_ms"])
            for _ in range(args.repeat):
                fio.append(run_fio_cold(args.iolog, len(reads), min(len(reads), args.depth)))
        row = {"nprobe": nprobe, "reads": len(reads), "depth": min(len(reads), args.depth),
               "shoal_query_ms": statistics.median(shoal),
               "shoal_first_query_ms": statistics.median(first),
               "shoal_scheduler_ms": statistics.median(sched), "fio_ms": statistics.median(fio)}
        row["ratio"] = row["shoal_query_ms"] / row["fio_ms"]
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    lines = ["| nprobe | reads | depth | Shoal query ms | Shoal scheduler only ms | fio ms | "
             "query / fio | process's first query ms |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['nprobe']} | {r['reads']} | {r['depth']} | {r['shoal_query_ms']:.2f} | "
                     f"{r['shoal_scheduler_ms']:.2f} | {r['fio_ms']:.2f} | {r['ratio']:.2f} | "
                     f"{r['shoal_first_query_ms']:.2f} |")
    table = "\n".join(lines)
    with open(args.out, "w") as f:
        f.write(table + "\n")
    print(table)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--bin", default="build/bin/shoal-io-bench")
    p.add_argument("--file", default="build/bench-io.dat")
    p.add_argument("--size-gib", type=float, default=2)
    p.add_argument("--seconds", type=int, default=3)
    p.add_argument("--out", default="build/bench-io.md")
    p.add_argument("--cold-query", action="store_true", help="one cold query vs fio (see above)")
    p.add_argument("--shoald", default="build/bin/shoald")
    p.add_argument("--data-dir", default="build/bench-io-data")
    p.add_argument("--segment-dir", help="a seg-<id> directory (default: the demo collection's)")
    p.add_argument("--query-file", default=FMNIST_QUERIES)
    p.add_argument("--queries", type=int, default=5, help="queries 0..N-1, each its own run")
    p.add_argument("--repeat", type=int, default=3, help="cold runs per query (Shoal in one process, fio)")
    p.add_argument("--nprobe", type=int, nargs="+", default=[16])
    p.add_argument("--depth", type=int, default=64, help="io.queue_depth")
    p.add_argument("--iolog", default="build/bench-io-cold.iolog")
    args = p.parse_args()
    if args.cold_query:
        if args.out == "build/bench-io.md":
            args.out = "build/bench-io-cold.md"
        return cold_query(args)

    size = int(args.size_gib * (1 << 30))
    if not os.path.exists(args.file) or os.path.getsize(args.file) < size:
        print(f"writing {args.size_gib} GiB test file {args.file} ...", file=sys.stderr)
        with open(args.file, "wb") as f:
            chunk = os.urandom(1 << 24)
            for _ in range(size // len(chunk)):
                f.write(chunk)
        os.sync()

    rows = []
    for bs in (64 << 10, 256 << 10, 1 << 20):
        for depth in (1, 8, 32):
            fio = run_fio(args.file, bs, depth, args.seconds)
            rows.append(fio)
            for backend in ("uring", "pread"):
                r = run_shoal(args.bin, args.file, bs, depth, args.seconds, backend)
                r["ratio"] = r["mib_s"] / fio["mib_s"] if fio["mib_s"] else 0
                rows.append(r)
            print(f"bs={bs >> 10}KiB depth={depth}: fio {fio['mib_s']:.0f} MiB/s, "
                  f"uring {rows[-2]['mib_s']:.0f} ({rows[-2]['ratio']:.2f}x), "
                  f"pread {rows[-1]['mib_s']:.0f} ({rows[-1]['ratio']:.2f}x)", file=sys.stderr)

    lines = ["| block | depth | engine | MiB/s | vs fio | IOPS | p50 µs | p99 µs | CPU s/GiB |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = f"{r['ratio']:.2f}" if "ratio" in r else "1.00"
        lines.append(f"| {r['bs'] >> 10} KiB | {r['depth']} | {r['engine']} | {r['mib_s']:.0f} | "
                     f"{ratio} | {r['iops']:.0f} | {r['p50_us']:.0f} | {r['p99_us']:.0f} | "
                     f"{r['cpu_s_per_gib']:.3f} |")
    table = "\n".join(lines)
    with open(args.out, "w") as f:
        f.write(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
