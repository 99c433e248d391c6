#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Turns `gradcodec bench --json FILE` output into PNG charts.

  bench/plot_bench.py bench.json [--out DIR]

Writes DIR/throughput_<op>.png (effective GB/s against n, one line per codec, backend,
ISA and thread count, baselines dashed) and DIR/roofline_<n>.png for the largest n (each
measurement's share of the memcpy of the same run, one bar group per codec).
"""
import argparse
import collections
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

OPS = ("encode", "decode", "decode_accumulate", "encode_ef")


def label(r):
    if r["backend"] == "baseline":
        return "baseline " + r["op"]
    return "%s %s/%s t%d" % (r["codec"], r["backend"], r["isa"], r["threads"])


def plot_throughput(records, out_dir):
    written = []
    baselines = [r for r in records if r["backend"] == "baseline"]
    for op in OPS:
        series = collections.defaultdict(list)
        for r in records:
            if r["op"] == op and r["gbps"] is not None:
                series[label(r)].append((r["n"], r["gbps"]))
        if not series:
            continue
        fig, ax = plt.subplots(figsize=(10, 6))
        for name, pts in sorted(series.items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
        base = collections.defaultdict(list)
        for r in baselines:
            if r["op"] in ("memcpy", "sum"):
                base[label(r)].append((r["n"], r["gbps"]))
        for name, pts in sorted(base.items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "k--", alpha=0.6, label=name)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("elements (n)")
        ax.set_ylabel("effective GB/s (bytes model)")
        ax.set_title("gradcodec bench: " + op)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=6, ncol=2, loc="best")
        path = os.path.join(out_dir, "throughput_%s.png" % op)
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)
    return written


def plot_roofline(records, out_dir):
    if not records:
        return []
    n = max(r["n"] for r in records)
    rows = [r for r in records if r["n"] == n and r["roofline_share"] is not None]
    groups = collections.OrderedDict()
    for r in rows:
        key = r["op"] if r["backend"] == "baseline" else r["codec"]
        groups.setdefault(key, []).append(r)
    series = sorted({(r["backend"], r["isa"], r["threads"], r["op"]) for r in rows
                     if r["backend"] != "baseline"})
    fig, ax = plt.subplots(figsize=(max(8, 0.6 * len(groups) * max(1, len(series)) / 4), 6))
    width = 0.8 / max(1, len(series) + 1)
    names = list(groups)
    for si, s in enumerate(series):
        ys = []
        for g in names:
            v = [r["roofline_share"] for r in groups[g]
                 if (r["backend"], r["isa"], r["threads"], r["op"]) == s]
            ys.append(100 * v[0] if v else 0)
        ax.bar([i + si * width for i in range(len(names))], ys, width,
               label="%s/%s t%d %s" % s)
    base = [100 * groups[g][0]["roofline_share"] if groups[g][0]["backend"] == "baseline" else 0
            for g in names]
    ax.bar([i + len(series) * width for i in range(len(names))], base, width, color="k",
           label="baseline")
    ax.set_xticks([i + 0.4 for i in range(len(names))])
    ax.set_xticklabels(names, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("% of memcpy (same run)")
    ax.set_title("roofline share at n = %d" % n)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=6, ncol=2)
    path = os.path.join(out_dir, "roofline_%d.png" % n)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [path]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", help="output of gradcodec bench --json")
    ap.add_argument("--out", default=".", help="folder for the PNG files (default .)")
    args = ap.parse_args()
    with open(args.json) as f:
        data = json.load(f)
    records = data["records"]
    if not records:
        sys.exit("plot_bench: no measurements in " + args.json)
    os.makedirs(args.out, exist_ok=True)
    for p in plot_throughput(records, args.out) + plot_roofline(records, args.out):
        print("wrote", p)


if __name__ == "__main__":
    main()
