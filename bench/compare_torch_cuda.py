#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Times torch.topk on the GPU on the data of `gradcodec bench` and prints its ratio to
gradcodec's CUDA top-k encode.

  bench/compare_torch_cuda.py --json bench_cuda.json [--repeat 20]

For every size in the JSON (records of `gradcodec bench --backend cuda`) and every
`topk:ratio=R` codec there, torch.topk(|x|, k) with k = max(1, floor(R n)) on the same
values (bench/compare_python.py's copy of the tool's generator), timed like the tool: CUDA
events around one call, L2 flushed before each (a write of 4x its size), median of
--repeat calls after a warm-up. "speedup" = torch median / gradcodec encode median
(> 1: gradcodec faster). torch.topk returns the k values and indices unsorted by index;
gradcodec's encode also writes the frame, so the comparison favours torch slightly.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_python import gradient  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", required=True, help="gradcodec bench --backend cuda --json FILE")
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("compare_torch_cuda: torch is not importable")
    if not torch.cuda.is_available():
        sys.exit("compare_torch_cuda: no CUDA device visible to torch")
    with open(args.json) as f:
        records = json.load(f)["records"]
    dev = torch.device("cuda")
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size
    flush = torch.empty(4 * max(l2, 1 << 20), dtype=torch.uint8, device=dev)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def median_ms(fn):
        fn()
        times = []
        for _ in range(args.repeat):
            flush.zero_()
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
        times.sort()
        m = len(times)
        return (times[m // 2] + times[(m - 1) // 2]) / 2

    print("%-12s %-20s %12s %14s %8s" % ("n", "codec", "torch_ms", "gradcodec_ms", "speedup"))
    for r in records:
        if r["backend"] != "cuda" or r["op"] != "encode" or not r["codec"].startswith("topk:"):
            continue
        ratio = float(r["codec"].split("ratio=")[1].split(",")[0])
        n = r["n"]
        k = max(1, int(ratio * n))
        x = torch.from_numpy(gradient(n)).to(dev)
        t = median_ms(lambda: torch.topk(x.abs(), k, sorted=False))
        g = r["median_s"] * 1e3
        print("%-12d %-20s %12.3f %14.3f %8.2f" % (n, "topk:ratio=%g" % ratio, t, g, t / g))


if __name__ == "__main__":
    main()
