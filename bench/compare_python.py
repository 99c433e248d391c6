#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Times Python peers on the data of `gradcodec bench` and prints their ratio to gradcodec.

  bench/compare_python.py [--json bench.json | --tool build/bench/gradcodec] [--sizes 2^20,2^24]

Peers (single process, library default threads): numpy np.argpartition top-k (ratio 0.01),
a vectorized numpy min-max quantizer (8 and 4 bits, bucket 512, nearest, 4-bit packed two per
byte) and torch.topk on the CPU. With --json the gradcodec numbers are read from that file;
otherwise the tool is run with matching codecs (--codecs topk:ratio=0.01,minmax:bits=8,
minmax:bits=4). "speedup" is peer median time / gradcodec median time (> 1: gradcodec faster).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

BUCKET = 512
RATIO = 0.01


def parse_size(text):
    return 1 << int(text[2:]) if text.startswith("2^") else int(text)


def gradient(n):
    """The tool's fill_gradient: splitmix64, four 16-bit uniforms summed in f32, minus 2."""
    with np.errstate(over="ignore"):
        s = (np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
             + np.uint64(0x9E3779B97F4A7C15))
        z = (s ^ (s >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    u = np.full(n, -2.0, dtype=np.float32)
    for j in range(4):
        u += ((z >> np.uint64(16 * j)) & np.uint64(0xFFFF)).astype(np.float32) * np.float32(2**-16)
    scale = np.where(np.arange(n) % 64 == 7, np.float32(1e-2), np.float32(1e-3))
    return (u * scale).astype(np.float32)


def median_time(fn, runs=5):
    fn()  # warm-up
    times = []
    while len(times) < runs or (sum(times) < 0.2 and len(times) < 100):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def numpy_topk(x, k):
    idx = np.argpartition(np.abs(x), x.size - k)[x.size - k:]
    return idx.astype(np.uint32), x[idx]


def numpy_minmax(x, bits):
    n = x.size
    pad = (-n) % BUCKET
    xb = np.pad(x, (0, pad), mode="edge").reshape(-1, BUCKET)
    lo = xb.min(axis=1, keepdims=True)
    hi = xb.max(axis=1, keepdims=True)
    rng = hi - lo
    levels = np.float32((1 << bits) - 1)
    inv = np.where(rng > 0, levels / np.where(rng > 0, rng, 1), 0).astype(np.float32)
    q = np.floor((xb - lo) * inv + np.float32(0.5)).astype(np.uint8).reshape(-1)[:n]
    if bits == 4:
        if q.size % 2:
            q = np.append(q, np.uint8(0))
        q = q[0::2] | (q[1::2] << 4)
    return q, lo, hi


def peers(n, threads_note):
    x = gradient(n)
    k = max(1, int(RATIO * n))
    out = {"numpy argpartition top-k": ("topk", median_time(lambda: numpy_topk(x, k)))}
    out["numpy min-max 8-bit"] = ("minmax8", median_time(lambda: numpy_minmax(x, 8)))
    out["numpy min-max 4-bit"] = ("minmax4", median_time(lambda: numpy_minmax(x, 4)))
    try:
        import torch

        t = torch.from_numpy(x)
        out["torch.topk (cpu, %d threads)" % torch.get_num_threads()] = (
            "topk", median_time(lambda: torch.topk(t.abs(), k)))
    except ImportError:
        threads_note.append("torch not importable: torch.topk skipped")
    return out


def kind_of(record):
    c = record["codec"]
    if record["backend"] == "baseline":
        return {"nth_element_topk": "topk", "heap_topk": "topk",
                "cgx_minmax4": "minmax4"}.get(record["op"])
    if record["op"] != "encode":
        return None
    if c.startswith("topk:") and "ratio=0.01" in c:
        return "topk"
    if c.startswith("minmax:") and "bits=8" in c and "bucket=512" in c:
        return "minmax8"
    if c.startswith("minmax:") and "bits=4" in c and "bucket=512" in c:
        return "minmax4"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="read gradcodec results from this bench --json file")
    ap.add_argument("--tool", default="gradcodec", help="the gradcodec tool to run (no --json)")
    ap.add_argument("--sizes", default="2^20,2^24", help="sizes to run (default 2^20,2^24)")
    ap.add_argument("--backend", default=None, help="passed to gradcodec bench --backend")
    args = ap.parse_args()

    if args.json:
        with open(args.json) as f:
            data = json.load(f)
    else:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "bench.json")
            cmd = [args.tool, "bench", "--sizes", args.sizes,
                   "--codecs", "topk:ratio=0.01,minmax:bits=8,minmax:bits=4", "--json", path]
            if args.backend:
                cmd += ["--backend", args.backend]
            r = subprocess.run(cmd, stdout=subprocess.DEVNULL)
            if r.returncode != 0:
                sys.exit("compare_python: %s failed with exit code %d" % (cmd[0], r.returncode))
            with open(path) as f:
                data = json.load(f)
    records = data["records"]
    sizes = sorted({r["n"] for r in records})
    if not args.json:
        sizes = [s for s in sizes if s in {parse_size(t) for t in args.sizes.split(",")}]

    notes = []
    print("%-10s %-36s %12s  %-52s %12s %8s" % ("n", "peer", "peer_ms", "gradcodec",
                                                "gradcodec_ms", "speedup"))
    for n in sizes:
        for peer, (kind, t_peer) in peers(n, notes).items():
            for r in records:
                if r["n"] != n or kind_of(r) != kind or not r["median_s"]:
                    continue
                who = "%s %s/%s t%d %s" % (r["codec"], r["backend"], r["isa"], r["threads"],
                                           r["op"])
                print("%-10d %-36s %12.3f  %-52s %12.3f %8.2f" % (
                    n, peer, t_peer * 1e3, who[:52], r["median_s"] * 1e3, t_peer / r["median_s"]))
    for note in sorted(set(notes)):
        print("note:", note)


if __name__ == "__main__":
    main()
