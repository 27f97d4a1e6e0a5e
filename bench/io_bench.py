#!/usr/bin/python3
"""make bench-io: Shoal's I/O scheduler (io_uring and pread backends) against fio, same run.

Random O_DIRECT reads of partition-sized blocks from one file, closed loop at a fixed queue
depth. fio (io_uring engine) is the ceiling; every Shoal figure is reported as a ratio to the
fio figure measured minutes apart on the same file, block size and depth.
"""
import argparse
import json
import os
import subprocess
import sys


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


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--bin", default="build/bin/shoal-io-bench")
    p.add_argument("--file", default="build/bench-io.dat")
    p.add_argument("--size-gib", type=float, default=2)
    p.add_argument("--seconds", type=int, default=3)
    p.add_argument("--out", default="build/bench-io.md")
    args = p.parse_args()

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
