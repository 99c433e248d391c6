#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Times torch.topk and torch's row-wise FP8 cast on the GPU on the data of `gradcodec bench`
and prints their ratio to gradcodec's CUDA top-k and fp8row encodes.

  bench/compare_torch_cuda.py --json bench_cuda.json [--repeat 20]

For every size in the JSON (records of `gradcodec bench --backend cuda`) and every
`topk:ratio=R` codec there, torch.topk(|x|, k) with k = max(1, floor(R n)) on the same
values (bench/compare_python.py's copy of the tool's generator), timed like the tool: CUDA
events around one call, L2 flushed before each (a write of 4x its size), median of
--repeat calls after a warm-up. "speedup" = torch median / gradcodec encode median
(> 1: gradcodec faster). torch.topk returns the k values and indices unsorted by index;
gradcodec's encode also writes the frame, so the comparison favours torch slightly.

For every `fp8row` codec (e4m3 or e5m2, rows of `block` elements, 4096 by default): the
eager torch a user writes for torchft's layout, on the same values viewed as rows: the
row's largest |x|, the multiplier min(largest / amax, 2^126), and the product clamped to
+-largest and cast to torch.float8_e4m3fn / float8_e5m2 (codes and row scales, what
gradcodec's frame holds, docs/codecs.md). torchft runs this in Triton; eager torch is the
baseline a user without it has.
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

    def fp8row_cast(x, row, fmt):
        dtype, largest = ((torch.float8_e5m2, 57344.0) if fmt == "e5m2" else
                          (torch.float8_e4m3fn, 448.0))
        v = x.view(-1, row)
        amax = v.abs().amax(dim=1, keepdim=True)
        mult = (largest / amax).clamp(max=2.0**126)
        return (v * mult).clamp(-largest, largest).to(dtype), mult

    def param(codec, name, default):
        for part in codec.split(":", 1)[1].split(",") if ":" in codec else []:
            key, _, value = part.partition("=")
            if key == name:
                return value
        return default

    print("%-12s %-24s %12s %14s %8s" % ("n", "codec", "torch_ms", "gradcodec_ms", "speedup"))
    x_n, x = None, None  # one size's data on the device at a time
    for r in records:
        if r["backend"] != "cuda" or r["op"] != "encode":
            continue
        codec, n = r["codec"], r["n"]
        if codec.startswith("topk:"):
            k = max(1, int(float(param(codec, "ratio", "0.01")) * n))
            name = "torch.topk"
            call = lambda x: torch.topk(x.abs(), k, sorted=False)  # noqa: E731
        elif codec.split(":")[0] == "fp8row":
            row = int(param(codec, "block", "4096"))
            if n % row or param(codec, "rotate", "0") != "0":
                continue  # eager torch has no rotation; a partial row has no view
            fmt = param(codec, "fmt", "e4m3")
            name = "torch fp8 rows"
            call = lambda x: fp8row_cast(x, row, fmt)  # noqa: E731
        else:
            continue
        if x_n != n:
            x_n, x = n, torch.from_numpy(gradient(n)).to(dev)
        t = median_ms(lambda: call(x))
        g = r["median_s"] * 1e3
        print("%-12d %-24s %12.3f %14.3f %8.2f   (%s)" % (n, codec, t, g, t / g, name))


if __name__ == "__main__":
    main()
